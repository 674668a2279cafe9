//! Kubernetes names of containers, from the log directory the node keeps.
//!
//! The cgroup path of a pod's container carries only the pod UID and the
//! container id. The kubelet publishes the human names in the file names of
//! `/var/log/containers`: `<pod>_<namespace>_<container>-<ID>.log`. Reading
//! that directory needs no API server access and no credentials. Only the
//! names are used: the entries are symlinks into `/var/log/pods`, often
//! dangling from inside our mount namespace, and are never followed.

use std::{collections::HashMap, fs, path::PathBuf};

use super::is_container_id;

/// Where the kubelet keeps one log symlink per container.
pub const DEFAULT_DIR: &str = "/var/log/containers";

/// At most this many containers are remembered from one scan, so a
/// directory filled with junk cannot grow our memory without bound.
const MAX_CONTAINERS: usize = 65_536;

/// A container id in a log file name: the full 64 hex digits.
const LOG_ID_LEN: usize = 64;

/// The Kubernetes names of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerNames {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// Container id -> names, as found by the last scan of the log directory.
#[derive(Debug)]
pub struct PodNames {
    /// The log directory; None: names are never known.
    dir: Option<PathBuf>,
    /// What the last scan found (replaced by each scan, never accumulated).
    by_id: HashMap<String, ContainerNames>,
    /// Bumped by the caller once per scrape.
    generation: u64,
    /// The generation in which the directory was last scanned.
    scanned_in: Option<u64>,
    /// Whether the unreadable directory was already logged (once until it
    /// becomes readable again).
    unreadable_logged: bool,
}

impl PodNames {
    /// Names from the log directory `dir`; None: names are never known.
    pub fn new(dir: Option<PathBuf>) -> Self {
        PodNames { dir, by_id: HashMap::new(), generation: 0, scanned_in: None, unreadable_logged: false }
    }

    /// Names of container `id`. On a miss, rescans the directory, but at
    /// most once per generation (the caller bumps the generation once per
    /// scrape) so a scrape with many unknown ids reads the directory once.
    pub fn lookup(&mut self, id: &str) -> Option<ContainerNames> {
        self.dir.as_ref()?;
        if let Some(names) = self.by_id.get(id) {
            return Some(names.clone());
        }
        if self.scanned_in == Some(self.generation) {
            return None;
        }
        self.scan();
        self.by_id.get(id).cloned()
    }

    /// Starts a new generation: the next miss may rescan the directory.
    pub fn next_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Parses a log file name `<pod>_<namespace>_<container>-<ID>.log` into
    /// the container id and its names; None for anything else. Pod,
    /// namespace and container names hold no `_`; container names may hold
    /// `-`, so the id is the last `-`-separated part.
    pub fn parse_log_name(file_name: &str) -> Option<(String, ContainerNames)> {
        let stem = file_name.strip_suffix(".log")?;
        let mut parts = stem.split('_');
        let (pod, namespace, container_and_id) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let (container, id) = container_and_id.rsplit_once('-')?;
        let is_name = |s: &str| !s.is_empty() && !s.contains('/') && !s.chars().any(char::is_control);
        if !(is_name(pod) && is_name(namespace) && is_name(container)) {
            return None;
        }
        if id.len() != LOG_ID_LEN || !is_container_id(id) {
            return None;
        }
        let names = ContainerNames {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        };
        Some((id.to_string(), names))
    }

    /// Replaces the map with what the directory holds now; an unreadable
    /// or missing directory leaves it empty.
    fn scan(&mut self) {
        self.scanned_in = Some(self.generation);
        let Some(dir) = &self.dir else { return };
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) => {
                if !self.unreadable_logged {
                    tracing::debug!("container log directory {} unreadable: {err}", dir.display());
                    self.unreadable_logged = true;
                }
                self.by_id = HashMap::new();
                return;
            }
        };
        self.unreadable_logged = false;
        let mut by_id = HashMap::new();
        for entry in entries.flatten() {
            if by_id.len() >= MAX_CONTAINERS {
                break;
            }
            // The name only: no metadata, no following the symlink.
            let file_name = entry.file_name();
            if let Some((id, names)) = file_name.to_str().and_then(Self::parse_log_name) {
                by_id.insert(id, names);
            }
        }
        self.by_id = by_id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::TestDir;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const ID2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    fn names(namespace: &str, pod: &str, container: &str) -> ContainerNames {
        ContainerNames { namespace: namespace.into(), pod: pod.into(), container: container.into() }
    }

    /// A dangling symlink, as the kubelet's entries look from a container.
    fn add_log(dir: &TestDir, file_name: &str) {
        std::os::unix::fs::symlink(dir.0.join("gone/0.log"), dir.0.join(file_name)).unwrap();
    }

    #[test]
    fn parses_good_log_names() {
        assert_eq!(
            PodNames::parse_log_name(&format!("triton-0_default_server-{ID}.log")),
            Some((ID.to_string(), names("default", "triton-0", "server")))
        );
        // Dashes in the container name: the id is the last part.
        assert_eq!(
            PodNames::parse_log_name(&format!("coredns-7db6d8ff4d-abcde_kube-system_side-car-x-{ID}.log")),
            Some((ID.to_string(), names("kube-system", "coredns-7db6d8ff4d-abcde", "side-car-x")))
        );
    }

    #[test]
    fn rejects_bad_log_names() {
        for bad in [
            format!("a_b_c_d-{ID}.log"),             // extra underscore
            format!("a_b-{ID}.log"),                 // no namespace
            "a_b_c.log".to_string(),                 // no id
            "a_b_c-.log".to_string(),                // empty id
            "a_b_c-0123456789ab.log".to_string(),    // short id
            format!("a_b_c-{}.log", "g".repeat(64)), // not hex
            format!("a_b_c-{ID}0.log"),              // too long
            format!("a_b_c-{ID}.log.1"),             // rotated, not .log
            format!("a_b_c-{ID}"),                   // no .log
            format!("_b_c-{ID}.log"),                // empty pod
            format!("a__c-{ID}.log"),                // empty namespace
            format!("a_b_-{ID}.log"),                // empty container
            format!("a_b_{ID}.log"),                 // no container
            format!("a/x_b_c-{ID}.log"),             // path separator
            format!("a_b\u{1}_c-{ID}.log"),          // control character
            String::new(),
            ".log".to_string(),
            "é_ü_ß-ffff.log".to_string(),
        ] {
            assert_eq!(PodNames::parse_log_name(&bad), None, "{bad}");
        }
    }

    #[test]
    fn no_dir_never_knows() {
        let mut pods = PodNames::new(None);
        assert_eq!(pods.lookup(ID), None);
    }

    #[test]
    fn missing_dir_is_empty_not_an_error() {
        let dir = TestDir::new("pods-missing");
        let mut pods = PodNames::new(Some(dir.0.join("absent")));
        assert_eq!(pods.lookup(ID), None);
        pods.next_generation();
        assert_eq!(pods.lookup(ID), None);
    }

    #[test]
    fn rescans_once_per_generation() {
        let dir = TestDir::new("pods-rescan");
        add_log(&dir, &format!("triton-0_default_server-{ID}.log"));
        add_log(&dir, "junk.txt");
        std::fs::write(dir.0.join("not-a-log"), "x").unwrap();
        let mut pods = PodNames::new(Some(dir.0.clone()));
        assert_eq!(pods.lookup(ID), Some(names("default", "triton-0", "server")));
        assert_eq!(pods.scanned_in, Some(0));

        // A file added later is not seen in the same generation: the miss
        // that scanned already happened.
        assert_eq!(pods.lookup(ID2), None);
        add_log(&dir, &format!("web-1_prod_nginx-{ID2}.log"));
        assert_eq!(pods.lookup(ID2), None);
        assert_eq!(pods.by_id.len(), 1);

        pods.next_generation();
        // A hit does not rescan.
        assert_eq!(pods.lookup(ID), Some(names("default", "triton-0", "server")));
        assert_eq!(pods.scanned_in, Some(0));
        // A miss does, once.
        assert_eq!(pods.lookup(ID2), Some(names("prod", "web-1", "nginx")));
        assert_eq!(pods.scanned_in, Some(1));
        assert_eq!(pods.by_id.len(), 2);
    }

    #[test]
    fn scan_replaces_instead_of_accumulating() {
        let dir = TestDir::new("pods-replace");
        let first = format!("triton-0_default_server-{ID}.log");
        add_log(&dir, &first);
        let mut pods = PodNames::new(Some(dir.0.clone()));
        assert!(pods.lookup(ID).is_some());
        std::fs::remove_file(dir.0.join(first)).unwrap();
        add_log(&dir, &format!("web-1_prod_nginx-{ID2}.log"));
        pods.next_generation();
        assert!(pods.lookup(ID2).is_some());
        assert_eq!(pods.lookup(ID), None);
        assert_eq!(pods.by_id.len(), 1);
    }
}
