//! The kernel's count of repeated opens (reopens, files.h): read by the
//! findings' sweep for the opens it counted without sending them, and
//! cleared of the files no longer opened.
//!
//! The programs add an entry at a file's first read-only open by a process
//! and count its opens; only the daemon deletes entries, once it has
//! counted all their opens and the file has not been opened for a while.

use aya::maps::{HashMap, MapData};
use sonic_probe_common::{ReopenKey, Reopens};

pub struct ReopenCounts {
    map: HashMap<MapData, ReopenKey, Reopens>,
}

impl ReopenCounts {
    pub fn new(map: HashMap<MapData, ReopenKey, Reopens>) -> Self {
        ReopenCounts { map }
    }

    /// Every entry now.
    pub fn entries(&self) -> Vec<(ReopenKey, Reopens)> {
        self.map.iter().filter_map(Result::ok).collect()
    }

    pub fn len(&self) -> usize {
        self.map.keys().filter(Result::is_ok).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deletes an entry (the next open of its file makes a new one).
    pub fn remove(&mut self, key: &ReopenKey) {
        let _ = self.map.remove(key);
    }
}
