//! From the cgroup ids the kernel keys statistics and events by to bounded
//! `workload` label values.
//!
//! The programs record the caller's cgroup v2 id (`bpf_get_current_cgroup_id`)
//! with every statistics entry and event: per cgroup, not per process, so a
//! process moving between cgroups is counted exactly where each call was
//! made and a burst of processes allocates nothing. Here, at scrape time, an
//! id becomes a path (the id of a cgroup v2 directory is its inode number:
//! the hierarchy is walked, at most once per scrape, when an id is new), the
//! path a [`Workload`] (classify.rs), and the workload a label value, bounded
//! by `--max-workloads` like `comm` by `--max-comms`.
//!
//! The name an id gets at first sight is kept for the daemon's lifetime, so
//! a series never changes its labels. An id whose cgroup is gone before it
//! was named (not found by a walk that began after the id was read) is
//! `unresolved`: one stable value, never a new label per vanished cgroup.

use std::{
    collections::{BTreeMap, HashMap},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use super::{
    classify::{classify, Kind, Workload},
    docker::DockerNames,
    pods::PodNames,
};
use crate::stats::labels::OTHER;

/// A finding's workload, as GET /findings shows it (see docs/metrics.md,
/// sonic_probe_workload_info): `name` is its `workload` label value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadNames {
    pub name: String,
    pub kind: String,
    pub unit: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub container_id: String,
}

/// `--workload-from`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadFrom {
    /// The cgroup v2 hierarchy when one is mounted, else none.
    #[default]
    Auto,
    /// The cgroup v2 hierarchy; refuse to start without one.
    Cgroup,
    /// No workloads: workload="" everywhere.
    None,
}

/// The workload options, checked (config/mod.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSettings {
    pub from: WorkloadFrom,
    /// The cgroup v2 hierarchy workloads are named from; None: workloads off.
    pub cgroup2: Option<PathBuf>,
    pub containers_log_dir: PathBuf,
    pub max_workloads: usize,
}

impl WorkloadSettings {
    /// Checks `--workload-from` against the host: `cgroup` needs a cgroup v2
    /// hierarchy, `auto` goes without one.
    pub fn new(
        from: WorkloadFrom,
        mount: Option<PathBuf>,
        containers_log_dir: PathBuf,
        max_workloads: usize,
    ) -> Result<Self, String> {
        let cgroup2 =
            match (from, mount) {
                (WorkloadFrom::None, _) => None,
                (WorkloadFrom::Cgroup, None) => return Err(
                    "--workload-from cgroup: no cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)"
                        .to_string(),
                ),
                (_, m) => m,
            };
        Ok(WorkloadSettings { from, cgroup2, containers_log_dir, max_workloads })
    }

    /// Whether calls are kept per cgroup (probe_config.workload_cgroups).
    pub fn enabled(&self) -> bool {
        self.cgroup2.is_some()
    }
}

/// Where Docker keeps its containers' configuration (their names).
pub const DOCKER_CONTAINERS_DIR: &str = "/var/lib/docker/containers";
/// Directories walked at most (a node has thousands at worst).
const MAX_CGROUPS: usize = 200_000;
/// Nesting followed at most.
const MAX_DEPTH: usize = 64;
/// Ids remembered at most: beyond it, those not used by the last two
/// scrapes are forgotten (the kernel maps are bounded, so this is reached
/// only by ids that no longer appear anywhere).
const MAX_IDS: usize = 65_536;

/// cgroup id -> path, from walks of the cgroup v2 hierarchy.
struct CgroupPaths {
    mount: PathBuf,
    by_id: HashMap<u64, String>,
    /// Generation of the last walk.
    walked: Option<u64>,
}

impl CgroupPaths {
    /// The path of cgroup `id` relative to the mount ("/" for the root),
    /// walking the hierarchy again if it is not known and no walk happened
    /// in this generation. `Err(())`: not there after a walk of this
    /// generation.
    fn path(&mut self, id: u64, generation: u64) -> Result<String, Walked> {
        if let Some(p) = self.by_id.get(&id) {
            return Ok(p.clone());
        }
        if self.walked == Some(generation) {
            return Err(Walked);
        }
        self.by_id = walk(&self.mount);
        self.walked = Some(generation);
        self.by_id.get(&id).cloned().ok_or(Walked)
    }
}

/// An id not found by this generation's walk.
#[derive(Debug)]
struct Walked;

/// Every cgroup directory under `mount`: inode number -> path from the mount.
fn walk(mount: &Path) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    if let Ok(m) = std::fs::metadata(mount) {
        out.insert(m.ino(), "/".to_string());
    }
    let mut stack = vec![(mount.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if !t.is_dir() {
                continue;
            }
            let Ok(m) = e.metadata() else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}/{name}");
            out.insert(m.ino(), path.clone());
            if out.len() >= MAX_CGROUPS {
                tracing::warn!(
                    "more than {MAX_CGROUPS} cgroups under {}: the rest stay unnamed",
                    mount.display()
                );
                return out;
            }
            if depth + 1 < MAX_DEPTH {
                stack.push((e.path(), path, depth + 1));
            }
        }
    }
    out
}

/// What an id was given.
#[derive(Debug, Clone)]
struct Named {
    label: Arc<str>,
    used: u64,
}

/// cgroup ids -> `workload` label values, and what each value stands for.
pub struct Workloads {
    paths: Option<CgroupPaths>,
    pods: PodNames,
    docker: DockerNames,
    max: usize,
    ids: HashMap<u64, Named>,
    /// Label value -> the workload it names (those with their own value,
    /// the host, `unresolved`).
    info: BTreeMap<Arc<str>, Workload>,
    /// Values that took a slot of --max-workloads.
    assigned: usize,
    generation: u64,
    named: u64,
    unresolved: u64,
    folded: u64,
    empty: Arc<str>,
    other: Arc<str>,
}

impl Workloads {
    /// Workloads off: every id is "".
    pub fn disabled() -> Self {
        Self::with(None, None, None, 1)
    }

    /// From the checked settings.
    pub fn from_settings(s: &WorkloadSettings) -> Self {
        match &s.cgroup2 {
            None => {
                if s.from == WorkloadFrom::Auto {
                    tracing::info!("no cgroup v2 hierarchy is mounted: workloads are off (workload=\"\")");
                }
                Self::disabled()
            }
            Some(mount) => Self::with(
                Some(mount.clone()),
                Some(s.containers_log_dir.clone()),
                Some(PathBuf::from(DOCKER_CONTAINERS_DIR)),
                s.max_workloads,
            ),
        }
    }

    /// Workloads named from the cgroup v2 hierarchy at `mount`, with the
    /// kubelet's containers log directory and Docker's containers directory.
    pub fn with(mount: Option<PathBuf>, logs: Option<PathBuf>, docker: Option<PathBuf>, max: usize) -> Self {
        let empty: Arc<str> = Arc::from("");
        let other: Arc<str> = Arc::from(OTHER);
        let mut info = BTreeMap::new();
        info.insert(empty.clone(), Workload::host());
        info.insert(
            other.clone(),
            Workload { name: OTHER.to_string(), kind: Kind::Other, ..Workload::host() },
        );
        Workloads {
            paths: mount.map(|mount| CgroupPaths { mount, by_id: HashMap::new(), walked: None }),
            pods: PodNames::new(logs),
            docker: DockerNames::new(docker),
            max,
            ids: HashMap::new(),
            info,
            assigned: 0,
            generation: 0,
            named: 0,
            unresolved: 0,
            folded: 0,
            empty,
            other,
        }
    }

    /// Whether calls are kept per cgroup (probe_config.workload_cgroups).
    pub fn enabled(&self) -> bool {
        self.paths.is_some()
    }

    /// Called once per scrape, before the ids it reads are named: each
    /// scrape walks the hierarchy and reads the names at most once.
    pub fn next_generation(&mut self) {
        self.generation += 1;
        self.pods.next_generation();
        if self.ids.len() > MAX_IDS {
            let keep = self.generation.saturating_sub(2);
            self.ids.retain(|_, n| n.used >= keep);
        }
    }

    /// The label value of cgroup `id` (0: none known, "").
    pub fn label(&mut self, id: u64) -> Arc<str> {
        if id == 0 {
            return self.empty.clone();
        }
        let generation = self.generation;
        if let Some(n) = self.ids.get_mut(&id) {
            n.used = generation;
            return n.label.clone();
        }
        let Some(paths) = self.paths.as_mut() else {
            return self.empty.clone();
        };
        let workload = match paths.path(id, generation) {
            Ok(path) => {
                self.named += 1;
                classify(&path, &mut self.pods, &mut self.docker)
            }
            Err(Walked) => {
                self.unresolved += 1;
                Workload::unresolved()
            }
        };
        let label = self.assign(workload);
        self.ids.insert(id, Named { label: label.clone(), used: generation });
        label
    }

    /// The label value of a workload: its name while slots last.
    fn assign(&mut self, w: Workload) -> Arc<str> {
        if let Some((k, _)) = self.info.get_key_value(w.name.as_str()) {
            return k.clone();
        }
        let takes_slot = !matches!(w.kind, Kind::Host | Kind::Unresolved | Kind::Other);
        if takes_slot && self.assigned >= self.max {
            self.folded += 1;
            return self.other.clone();
        }
        if takes_slot {
            self.assigned += 1;
        }
        let label: Arc<str> = Arc::from(w.name.as_str());
        self.info.insert(label.clone(), w);
        label
    }

    /// What a finding shows of cgroup `id`'s workload.
    pub fn names(&mut self, id: u64) -> WorkloadNames {
        let label = self.label(id);
        match self.info.get(&label) {
            Some(w) => WorkloadNames {
                name: label.to_string(),
                kind: w.kind.as_str().to_string(),
                unit: w.unit.clone(),
                namespace: w.namespace.clone(),
                pod: w.pod.clone(),
                container: w.container.clone(),
                container_id: w.container_id.clone(),
            },
            None => WorkloadNames { name: label.to_string(), ..Default::default() },
        }
    }

    /// The directory of cgroup `id` in the cgroup v2 hierarchy (None:
    /// workloads off, or not found by this generation's walk).
    pub fn cgroup_dir(&mut self, id: u64) -> Option<PathBuf> {
        let generation = self.generation;
        let paths = self.paths.as_mut()?;
        let rel = paths.path(id, generation).ok()?;
        Some(paths.mount.join(rel.trim_start_matches('/')))
    }

    /// Where the cgroup v2 hierarchy is mounted (None: workloads off).
    pub fn cgroup2_mount(&self) -> Option<PathBuf> {
        self.paths.as_ref().map(|p| p.mount.clone())
    }

    /// The path of cgroup `id` relative to the hierarchy's root ("/..."),
    /// as /proc/PID/cgroup writes it.
    pub fn cgroup_path(&mut self, id: u64) -> Option<String> {
        let generation = self.generation;
        self.paths.as_mut()?.path(id, generation).ok()
    }

    /// The label value of calls counted in an overflow entry (map full).
    pub fn other(&self) -> Arc<str> {
        self.other.clone()
    }

    /// Every label value in use with what it stands for (the info metric).
    pub fn info(&self) -> impl Iterator<Item = (&str, &Workload)> {
        self.info.iter().map(|(k, w)| (&**k, w))
    }

    /// The workload a label value stands for.
    pub fn workload(&self, label: &str) -> Option<&Workload> {
        self.info.get(label)
    }

    /// Label values that took a slot of --max-workloads.
    pub fn assigned(&self) -> usize {
        self.assigned
    }

    /// cgroups named from their path, and those gone before they were.
    pub fn resolutions(&self) -> (u64, u64) {
        (self.named, self.unresolved)
    }

    /// Names answered with `other` because --max-workloads was reached.
    pub fn folded(&self) -> u64 {
        self.folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake hierarchy: directories under a temporary root (their inode
    /// numbers are the ids, as on cgroupfs).
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Tree {
            let d = std::env::temp_dir().join(format!("sp-workloads-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tree(d)
        }
        fn mkdir(&self, rel: &str) -> u64 {
            let p = self.0.join(rel.trim_start_matches('/'));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::metadata(&p).unwrap().ino()
        }
        fn workloads(&self, max: usize) -> Workloads {
            Workloads::with(Some(self.0.clone()), None, None, max)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn units_are_named_and_the_root_is_the_host() {
        let t = Tree::new("units");
        let svc = t.mkdir("/system.slice/inference.service");
        let root = std::fs::metadata(&t.0).unwrap().ino();
        let mut w = t.workloads(10);
        w.next_generation();
        assert_eq!(&*w.label(svc), "inference.service");
        assert_eq!(&*w.label(root), "");
        assert_eq!(&*w.label(0), "");
        assert_eq!(w.workload("inference.service").unwrap().kind, Kind::Systemd);
        assert_eq!(w.resolutions(), (2, 0));
    }

    #[test]
    fn a_gone_cgroup_is_unresolved_and_names_stick() {
        let t = Tree::new("gone");
        let a = t.mkdir("/system.slice/a.service");
        let mut w = t.workloads(10);
        w.next_generation();
        assert_eq!(&*w.label(a), "a.service");
        std::fs::remove_dir_all(t.0.join("system.slice")).unwrap();
        w.next_generation();
        // Known at first sight: kept although the cgroup is gone.
        assert_eq!(&*w.label(a), "a.service");
        // Never seen, not found by this scrape's walk: unresolved, stably.
        assert_eq!(&*w.label(987_654_321), "unresolved");
        assert_eq!(&*w.label(987_654_321), "unresolved");
        assert_eq!(w.resolutions(), (1, 1));
        assert_eq!(w.assigned(), 1, "unresolved takes no slot");
    }

    #[test]
    fn one_walk_per_generation_and_new_cgroups_found_on_the_next() {
        let t = Tree::new("walks");
        let mut w = t.workloads(10);
        w.next_generation();
        assert_eq!(&*w.label(123_456_789), "unresolved");
        let b = t.mkdir("/b.service");
        w.next_generation();
        assert_eq!(&*w.label(b), "b.service");
    }

    #[test]
    fn workloads_beyond_the_limit_are_other() {
        let t = Tree::new("limit");
        let a = t.mkdir("/a.service");
        let b = t.mkdir("/b.service");
        let a2 = t.mkdir("/a.service/sub");
        let mut w = t.workloads(1);
        w.next_generation();
        assert_eq!(&*w.label(a), "a.service");
        assert_eq!(&*w.label(b), OTHER);
        // Same workload, another cgroup: the same value, no new slot.
        assert_eq!(&*w.label(a2), "a.service");
        assert_eq!((w.assigned(), w.folded()), (1, 1));
        assert_eq!(w.workload(OTHER).unwrap().kind, Kind::Other);
    }

    #[test]
    fn disabled_names_nothing() {
        let mut w = Workloads::disabled();
        w.next_generation();
        assert!(!w.enabled());
        assert_eq!(&*w.label(42), "");
    }

    #[test]
    fn settings_decide() {
        let s =
            |from, mount: Option<&str>| WorkloadSettings::new(from, mount.map(PathBuf::from), "/x".into(), 4);
        assert!(s(WorkloadFrom::Cgroup, None).unwrap_err().contains("no cgroup v2"));
        assert!(s(WorkloadFrom::Cgroup, Some("/tmp")).unwrap().enabled());
        assert!(!s(WorkloadFrom::Auto, None).unwrap().enabled());
        assert!(Workloads::from_settings(&s(WorkloadFrom::Auto, Some("/tmp")).unwrap()).enabled());
        assert!(!s(WorkloadFrom::None, Some("/tmp")).unwrap().enabled());
        assert!(!Workloads::from_settings(&s(WorkloadFrom::None, Some("/tmp")).unwrap()).enabled());
    }
}
