//! The kernel's descriptor table (open_files): read for findings, swept of
//! processes that exec'd or exited.
//!
//! The programs add descriptors at openat and first read and mark them
//! closed at close (mode 0, kept for the number's next descriptor, which
//! costs less than a delete and an insert), but can't see descriptors
//! vanish at exec (close-on-exec) or exit. The daemon sweeps those:
//! [`OpenFiles::sweep`] deletes the entries of processes that are gone, and
//! those opened before a process exec'd (closed ones included), and
//! then starts a new generation of the programs' cache of what descriptors
//! are (fd_class_cache, files.h), so that it holds nothing the sweep took
//! out of open_files.

use aya::maps::{Array, HashMap, MapData};
use sonic_probe_common::{FileKey, OpenFile};

/// Entries of the map, (key, value).
pub type Entries = Vec<(FileKey, OpenFile)>;

pub struct OpenFiles {
    map: HashMap<MapData, FileKey, OpenFile>,
    generation: Array<MapData, u64>,
}

impl OpenFiles {
    pub fn new(map: HashMap<MapData, FileKey, OpenFile>, generation: Array<MapData, u64>) -> Self {
        OpenFiles { map, generation }
    }

    /// Every entry now.
    pub fn entries(&self) -> Vec<(FileKey, OpenFile)> {
        self.map.iter().filter_map(Result::ok).collect()
    }

    /// Deletes the entries `stale` says are stale; returns them, and the
    /// entries kept. Then, if
    /// `new_generation` (a process exec'd or exited since the last sweep),
    /// makes every slot of fd_class_cache stale: a descriptor it kept may
    /// be gone with no close seen (close-on-exec, exit), and its number
    /// another descriptor's.
    pub fn sweep(
        &mut self,
        mut stale: impl FnMut(&FileKey, &OpenFile) -> bool,
        new_generation: bool,
    ) -> (Entries, Entries) {
        let (gone, kept): (Vec<_>, Vec<_>) = self.entries().into_iter().partition(|(k, v)| stale(k, v));
        for (k, _) in &gone {
            let _ = self.map.remove(k);
        }
        if new_generation || !gone.is_empty() {
            // Only the daemon writes it, from this one place (under the
            // findings' lock); the programs compare its low 20 bits.
            let next = self.generation.get(&0, 0).unwrap_or(0).wrapping_add(1);
            if let Err(e) = self.generation.set(0, next, 0) {
                tracing::warn!("cannot start a new generation of the descriptor class cache: {e}");
            }
        }
        (gone, kept)
    }

    pub fn len(&self) -> usize {
        self.map.keys().filter(Result::is_ok).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
