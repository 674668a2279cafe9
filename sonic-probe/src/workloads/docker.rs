//! Names of standalone Docker containers, from the engine's own files.
//!
//! A Docker cgroup carries only the container id; the name operators know it
//! by (`docker run --name triton`) lives in
//! `/var/lib/docker/containers/<ID>/config.v2.json`. Reading that file needs
//! no access to the Docker socket (which would be root-equivalent).

use std::{
    collections::HashMap,
    fs,
    io::Read,
    path::{Path, PathBuf},
};

use serde::Deserialize;

/// Where the Docker engine keeps one directory per container.
pub const DEFAULT_DIR: &str = "/var/lib/docker/containers";

/// Names remembered at most; the cache is cleared when it would grow past.
const MAX_CACHED: usize = 4096;

/// config.v2.json is a few kilobytes; anything past this is not read.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The only field of config.v2.json we need.
#[derive(Deserialize)]
struct ContainerConfig {
    #[serde(rename = "Name")]
    name: Option<String>,
}

/// Container id -> name, read from the engine's directory and cached.
#[derive(Debug)]
pub struct DockerNames {
    /// The engine's containers directory; None: names are never known.
    dir: Option<PathBuf>,
    /// Names found so far (misses are not cached: the file may appear later).
    by_id: HashMap<String, String>,
}

impl DockerNames {
    /// Names from the containers directory `dir`; None: never known.
    pub fn new(dir: Option<PathBuf>) -> Self {
        DockerNames { dir, by_id: HashMap::new() }
    }

    /// The name of container `id` without its leading "/"; None if the id
    /// is not hex, the container is unknown or its config unreadable.
    pub fn name(&mut self, id: &str) -> Option<String> {
        let dir = self.dir.as_ref()?;
        // Only hex: the id becomes a path component.
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if let Some(name) = self.by_id.get(id) {
            return Some(name.clone());
        }
        let name = read_name(&dir.join(id).join("config.v2.json"))?;
        if self.by_id.len() >= MAX_CACHED {
            self.by_id.clear();
        }
        self.by_id.insert(id.to_string(), name.clone());
        Some(name)
    }
}

/// The container name in a config.v2.json, without its leading "/".
fn read_name(path: &Path) -> Option<String> {
    let mut text = Vec::new();
    fs::File::open(path).ok()?.take(MAX_CONFIG_BYTES).read_to_end(&mut text).ok()?;
    let config: ContainerConfig = serde_json::from_slice(&text).ok()?;
    let name = config.name?;
    let name = name.strip_prefix('/').unwrap_or(&name);
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::TestDir;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn engine_dir(config: &str) -> TestDir {
        let dir = TestDir::new("docker");
        std::fs::create_dir(dir.0.join(ID)).unwrap();
        std::fs::write(dir.0.join(ID).join("config.v2.json"), config).unwrap();
        dir
    }

    #[test]
    fn reads_the_name_from_config() {
        let dir = engine_dir(r#"{"ID":"0123","Name":"/triton","Config":{"Image":"x"}}"#);
        let mut docker = DockerNames::new(Some(dir.0.clone()));
        assert_eq!(docker.name(ID), Some("triton".to_string()));
        // Cached: still known after the file is gone.
        std::fs::remove_dir_all(dir.0.join(ID)).unwrap();
        assert_eq!(docker.name(ID), Some("triton".to_string()));
    }

    #[test]
    fn unknown_or_broken_configs_have_no_name() {
        for config in ["", "{", "[]", r#"{"Name":""}"#, r#"{"Name":"/"}"#, r#"{"Name":7}"#, "{}"] {
            let dir = engine_dir(config);
            let mut docker = DockerNames::new(Some(dir.0.clone()));
            assert_eq!(docker.name(ID), None, "{config}");
        }
        let dir = engine_dir("{}");
        let mut docker = DockerNames::new(Some(dir.0.clone()));
        assert_eq!(docker.name(&"a".repeat(64)), None);
        assert_eq!(DockerNames::new(None).name(ID), None);
    }

    #[test]
    fn rejects_ids_that_are_not_hex() {
        let dir = engine_dir(r#"{"Name":"/triton"}"#);
        // A config one level up must not be reachable through the id.
        std::fs::write(dir.0.join("config.v2.json"), r#"{"Name":"/escaped"}"#).unwrap();
        let mut docker = DockerNames::new(Some(dir.0.join(ID)));
        for bad in ["../x", "..", "", "/etc", "abc/../def", "01234567890z"] {
            assert_eq!(docker.name(bad), None, "{bad}");
        }
    }

    #[test]
    fn cache_is_bounded() {
        let dir = engine_dir(r#"{"Name":"/triton"}"#);
        let mut docker = DockerNames::new(Some(dir.0.clone()));
        for i in 0..MAX_CACHED {
            docker.by_id.insert(format!("{i:064x}"), "x".into());
        }
        assert_eq!(docker.name(ID), Some("triton".to_string()));
        assert_eq!(docker.by_id.len(), 1);
    }
}
