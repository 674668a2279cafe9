//! Which service a cgroup belongs to: the `workload` label.
//!
//! Process names alone do not say which service a process serves (every
//! inference server is `python3`), but its cgroup v2 path does: systemd puts
//! each unit in its own cgroup, and container runtimes put each container in
//! one named after its id. [`classify`] reads the path; [`pods`] and
//! [`docker`] turn container ids into the names the node publishes. All of it
//! is pure logic over paths and small files. [`resolver`] ties it to the
//! kernel: cgroup ids (what the programs record) to bounded label values.

pub mod classify;
pub mod docker;
pub mod pods;
pub mod resolver;

pub use classify::{classify, Kind, Workload};
pub use docker::DockerNames;
pub use pods::{ContainerNames, PodNames};
pub use resolver::{WorkloadFrom, WorkloadNames, WorkloadSettings, Workloads};

/// Whether `s` looks like a container id: at least 12 hex digits. Runtimes
/// write full ids as 64 lowercase hex digits; shorter ones are accepted so a
/// truncated id still classifies.
pub(crate) fn is_container_id(s: &str) -> bool {
    s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The first `n` characters of an id (ids are ASCII hex, so bytes are chars).
pub(crate) fn short_id(id: &str, n: usize) -> &str {
    id.get(..n).unwrap_or(id)
}

/// A fresh, empty directory for one test, removed when dropped.
#[cfg(test)]
pub(crate) struct TestDir(pub std::path::PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("sonic-probe-workloads-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create test dir");
        TestDir(dir)
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
