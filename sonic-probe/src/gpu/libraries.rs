//! Which CUDA library files get the GPU uprobes: those the watched
//! processes map, found when the daemon starts (their /proc/PID/maps,
//! [`mapped_now`]) and when a watched process opens one later (its
//! openat, a path event). The files are opened by the GPU probe helper
//! (gpu::helper), which may follow another process's /proc/PID/root.
//!
//! A uprobe is attached to a file (an inode), so each file is attached
//! once, whichever processes and mount namespaces map it: a file is known
//! by (device, inode), reached through /proc/PID/root (a container's
//! files are in its own mount namespace). At most --gpu-max-libraries
//! files are attached; beyond that a file is counted and logged, never
//! attached. A file without the calls (a stripped or odd build), or one
//! that cannot be read, is logged and skipped, never fatal. The probes go
//! with the daemon: they are the probe's links.
//!
//! Attaching takes milliseconds per library (a perf event per probe
//! point), so it runs on a thread of its own ([`GpuLibraries::spawn`]),
//! fed by the event loop.

use std::{
    collections::HashMap,
    fs::File,
    io::Read,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
};

use sonic_probe_common::gpu_apis::{library_of, Library};
use tracing::{debug, info, warn};

use super::{helper::PerfHelper, symbols::waiting_calls_in};
use crate::probe::Probe;

/// What became of a library file: the `result` label of
/// sonic_probe_gpu_libraries_total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LibraryResult {
    /// Its waiting calls have their probes.
    Attached,
    /// It exports none of the waiting calls (a stub, a stripped or odd build).
    NoWaitingCalls,
    /// It could not be read, or is not an ELF object.
    Unreadable,
    /// The kernel refused a probe (the error is logged).
    AttachFailed,
    /// --gpu-max-libraries files were attached already.
    OverLimit,
    /// The kernel refused the GPU programs: no library can be attached.
    Unavailable,
}

impl LibraryResult {
    pub const ALL: [LibraryResult; 6] = [
        LibraryResult::Attached,
        LibraryResult::NoWaitingCalls,
        LibraryResult::Unreadable,
        LibraryResult::AttachFailed,
        LibraryResult::OverLimit,
        LibraryResult::Unavailable,
    ];

    pub fn label(self) -> &'static str {
        match self {
            LibraryResult::Attached => "attached",
            LibraryResult::NoWaitingCalls => "no_waiting_calls",
            LibraryResult::Unreadable => "unreadable",
            LibraryResult::AttachFailed => "attach_failed",
            LibraryResult::OverLimit => "over_limit",
            LibraryResult::Unavailable => "unavailable",
        }
    }
}

/// Counts of library files by result, shared with the metrics.
#[derive(Debug, Default)]
pub struct LibraryCounts {
    counts: [AtomicU64; 6],
}

impl LibraryCounts {
    fn add(&self, r: LibraryResult) {
        let i = LibraryResult::ALL.iter().position(|x| *x == r).expect("a result of ALL");
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, r: LibraryResult) -> u64 {
        let i = LibraryResult::ALL.iter().position(|x| *x == r).expect("a result of ALL");
        self.counts[i].load(Ordering::Relaxed)
    }
}

/// The path of `path` as process `pid` sees it, from this daemon's mount
/// namespace: through /proc/PID/root (absolute) or /proc/PID/cwd (relative).
pub fn seen_from(pid: u32, path: &str) -> PathBuf {
    match path.strip_prefix('/') {
        Some(rest) => PathBuf::from(format!("/proc/{pid}/root")).join(rest),
        None => PathBuf::from(format!("/proc/{pid}/cwd")).join(path),
    }
}

/// The CUDA library files a /proc/PID/maps text maps (path column), once each.
pub fn mapped_libraries(maps: &str) -> Vec<&str> {
    let mut out: Vec<&str> = maps
        .lines()
        // address perms offset dev inode path
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/') && library_of(p).is_some())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A library file some process maps or opened: (process, its path there).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pid: u32,
    pub path: String,
}

/// The library files seen, and the probe to attach with.
pub struct GpuLibraries {
    probe: Arc<Mutex<Probe>>,
    helper: PerfHelper,
    max: usize,
    /// (device, inode) -> what became of it.
    seen: HashMap<(u64, u64), LibraryResult>,
    attached: usize,
    counts: Arc<LibraryCounts>,
}

impl GpuLibraries {
    pub fn new(probe: Arc<Mutex<Probe>>, helper: PerfHelper, max: usize) -> Self {
        GpuLibraries { probe, helper, max, seen: HashMap::new(), attached: 0, counts: Arc::default() }
    }

    pub fn counts(&self) -> Arc<LibraryCounts> {
        self.counts.clone()
    }

    /// Attaches the probes to a candidate's file if it is new.
    pub fn consider(&mut self, c: &Candidate) -> Option<LibraryResult> {
        let library = library_of(&c.path)?;
        let path = seen_from(c.pid, &c.path);
        // Opened by the helper: this daemon may not follow another
        // process's /proc/PID/root (it keeps no CAP_SYS_PTRACE for it).
        let file = match self.helper.open_library(&path) {
            Ok(f) => f,
            Err(e) => {
                debug!("{} (process {}): not opened: {e}", c.path, c.pid);
                return None; // the process or the file is gone
            }
        };
        let meta = file.metadata().ok()?;
        let id = (meta.dev(), meta.ino());
        if self.seen.contains_key(&id) {
            return None;
        }
        let result = self.attach(file, &path, &c.path, c.pid, library);
        self.seen.insert(id, result);
        self.counts.add(result);
        Some(result)
    }

    fn attach(
        &mut self,
        mut file: File,
        path: &Path,
        shown: &str,
        pid: u32,
        library: Library,
    ) -> LibraryResult {
        if let Some(why) = self.probe.lock().expect("probe lock").gpu_error() {
            if self.counts.get(LibraryResult::Unavailable) == 0 {
                warn!("GPU waits are unavailable, {shown} (mapped by process {pid}) gets no probes: {why}");
            }
            return LibraryResult::Unavailable;
        }
        if self.attached >= self.max {
            warn!(
                "{shown} (process {pid}): not probed, --gpu-max-libraries {} library files have GPU probes \
                 already (sonic_probe_gpu_libraries_total{{result=\"over_limit\"}})",
                self.max
            );
            return LibraryResult::OverLimit;
        }
        let mut data = Vec::new();
        if let Err(e) = file.read_to_end(&mut data) {
            warn!("{shown} (process {pid}): no GPU probes, cannot read it: {e}");
            return LibraryResult::Unreadable;
        }
        let calls = match waiting_calls_in(&data, library) {
            Ok(calls) if calls.is_empty() => {
                info!("{shown} (process {pid}): no GPU probes, it exports none of CUDA's waiting calls");
                return LibraryResult::NoWaitingCalls;
            }
            Ok(calls) => calls,
            Err(e) => {
                warn!("{shown} (process {pid}): no GPU probes, not an ELF object: {e}");
                return LibraryResult::Unreadable;
            }
        };
        drop(data);
        let outcome = self.probe.lock().expect("probe lock").attach_gpu_library(&self.helper, path, &calls);
        match outcome {
            Ok(probes) => {
                self.attached += 1;
                info!(
                    "GPU waits: probed {} waiting calls of {shown} (process {pid}; {probes} probes)",
                    calls.len()
                );
                LibraryResult::Attached
            }
            Err(e) => {
                warn!("{shown} (process {pid}): {}", crate::logging::causes_line(&e));
                LibraryResult::AttachFailed
            }
        }
    }

    /// Runs the attaching on a thread of its own: the `initial`
    /// candidates, then each one sent.
    pub fn spawn(mut self, initial: Vec<Candidate>) -> std::io::Result<mpsc::SyncSender<Candidate>> {
        let (tx, rx) = mpsc::sync_channel::<Candidate>(CANDIDATE_QUEUE);
        std::thread::Builder::new().name("sonic-probe-gpu".into()).spawn(move || {
            for c in &initial {
                self.consider(c);
            }
            debug!("GPU libraries at start: {} files probed", self.attached);
            while let Ok(c) = rx.recv() {
                self.consider(&c);
            }
        })?;
        Ok(tx)
    }
}

/// The CUDA libraries processes `pids` (None: every process) map now.
/// Call before the capabilities are dropped: another user's (or a more
/// privileged) process's maps need CAP_SYS_PTRACE.
pub fn mapped_now(pids: Option<Vec<u32>>) -> Vec<Candidate> {
    let pids = pids.unwrap_or_else(all_processes);
    let mut out = Vec::new();
    for pid in pids {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue; // gone, or a kernel thread
        };
        out.extend(mapped_libraries(&maps).into_iter().map(|path| Candidate { pid, path: path.to_string() }));
    }
    out
}

/// Candidates waiting for the attaching thread (an open of a CUDA library
/// is rare: a process loads each once).
const CANDIDATE_QUEUE: usize = 1024;

fn all_processes() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_told_by_file_name() {
        let v = "/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12";
        assert_eq!(library_of(v), Some(Library::Runtime));
        assert_eq!(library_of("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), Some(Library::Driver));
        assert_eq!(library_of("/usr/lib/libcudnn.so.9"), None);
        assert_eq!(library_of("libcuda.so.1"), Some(Library::Driver));
    }

    #[test]
    fn a_process_sees_paths_through_its_root_and_cwd() {
        assert_eq!(
            seen_from(42, "/usr/lib/libcuda.so.1"),
            PathBuf::from("/proc/42/root/usr/lib/libcuda.so.1")
        );
        assert_eq!(seen_from(42, "lib/libcudart.so.12"), PathBuf::from("/proc/42/cwd/lib/libcudart.so.12"));
    }

    #[test]
    fn mapped_libraries_are_listed_once() {
        let maps = "\
7f00-7f10 r--p 00000000 08:01 1234 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f10-7f20 r-xp 00010000 08:01 1234 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f20-7f30 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f30-7f40 rw-p 00000000 00:00 0 
7f40-7f50 r-xp 00000000 08:01 77 /usr/lib/x86_64-linux-gnu/libcuda.so.1 (deleted)
7ffd-7ffe rw-p 00000000 00:00 0 [stack]
";
        assert_eq!(
            mapped_libraries(maps),
            vec![
                "/opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
            ]
        );
    }
}
