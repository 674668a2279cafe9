//! The kernel's descriptor table (open_files): read for findings, swept of
//! processes that exec'd or exited.
//!
//! The programs add descriptors at openat and first read and remove them at
//! close, but can't see descriptors vanish at exec (close-on-exec) or exit.
//! The daemon sweeps those: [`OpenFiles::sweep`] deletes the entries of
//! processes that are gone, and those opened before a process exec'd.

use aya::maps::{HashMap, MapData};
use sonic_probe_common::{FileKey, OpenFile};

pub struct OpenFiles {
    map: HashMap<MapData, FileKey, OpenFile>,
}

impl OpenFiles {
    pub fn new(map: HashMap<MapData, FileKey, OpenFile>) -> Self {
        OpenFiles { map }
    }

    /// Every entry now.
    pub fn entries(&self) -> Vec<(FileKey, OpenFile)> {
        self.map.iter().filter_map(Result::ok).collect()
    }

    /// Deletes the entries `stale` says are stale; returns them.
    pub fn sweep(&mut self, mut stale: impl FnMut(&FileKey, &OpenFile) -> bool) -> Vec<(FileKey, OpenFile)> {
        let gone: Vec<(FileKey, OpenFile)> =
            self.entries().into_iter().filter(|(k, v)| stale(k, v)).collect();
        for (k, _) in &gone {
            let _ = self.map.remove(k);
        }
        gone
    }

    pub fn len(&self) -> usize {
        self.map.keys().filter(Result::is_ok).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
