//! Which descriptor of which process is which path, from openat events.
//!
//! The kernel knows descriptors by number; only the openat event carries the
//! path. This table remembers (process, descriptor) -> path from successful
//! openat calls, forgets it at the file-close event (handing the closed file
//! to the detectors). When a process execs or exits its descriptors are
//! *retired*, not forgotten: the kernel may still report what was read
//! through them (the daemon's sweep turns its leftover entries into close
//! events), then [`FileTable::forget`] drops them. Bounded: beyond
//! [`MAX_FILES`] descriptors, new ones are not remembered.
//!
//! Not known: descriptors made by dup/dup2/fcntl(F_DUPFD), inherited, or
//! opened before the probe attached (they have no path here).

use std::{collections::HashMap, sync::Arc};

use sonic_probe_common::{syscalls, OpenFile};

use crate::events::{Event, ProcessKind};

/// Descriptors remembered at most, over all processes.
pub const MAX_FILES: usize = 65536;

/// A descriptor whose path we saw opened.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownFile {
    pub tgid: u32,
    pub fd: u32,
    pub path: Arc<str>,
    /// FILE_CLASS_* as the kernel classed it.
    pub class: u16,
    /// i_mode.
    pub mode: u16,
    /// The openat's entry time: identifies this open of the descriptor.
    pub opened_ns: u64,
    /// The process name when it was opened.
    pub comm: String,
    /// The process incarnation that opened it (see [`super::Input`]).
    pub incarnation: u64,
}

impl KnownFile {
    pub fn is_regular(&self) -> bool {
        u32::from(self.mode) & libc::S_IFMT == libc::S_IFREG
    }
}

/// What was read through one open of a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileTotals {
    pub reads: u64,
    pub read_bytes: u64,
    pub small_reads: u64,
    pub small_read_requested: u64,
    pub small_read_bytes: u64,
}

impl From<&OpenFile> for FileTotals {
    fn from(f: &OpenFile) -> Self {
        FileTotals {
            reads: f.reads,
            read_bytes: f.read_bytes,
            small_reads: f.small_reads,
            small_read_requested: f.small_read_requested,
            small_read_bytes: f.small_read_bytes,
        }
    }
}

#[derive(Debug, Default)]
pub struct FileTable {
    by_process: HashMap<u32, HashMap<u32, KnownFile>>,
    /// Descriptors of processes that exec'd or exited, by (tgid, fd, opened_ns).
    retired: HashMap<(u32, u32, u64), KnownFile>,
    len: usize,
}

impl FileTable {
    /// Updates the table; for a file-close event returns the file closed.
    /// `incarnation` is the event's process incarnation.
    pub fn observe(&mut self, event: &Event, incarnation: u64) -> Option<KnownFile> {
        match event {
            Event::Call(c) if c.raw.syscall == syscalls::OPENAT && c.raw.ret >= 0 => {
                let path = c.path.as_ref()?;
                let file = KnownFile {
                    tgid: c.tgid(),
                    fd: c.raw.ret as u32,
                    path: Arc::from(String::from_utf8_lossy(path).as_ref()),
                    class: c.raw.file_class,
                    mode: c.raw.file_mode,
                    opened_ns: c.raw.header.time_ns,
                    comm: c.process_name(),
                    incarnation,
                };
                let fds = self.by_process.entry(file.tgid).or_default();
                // A descriptor we still hold was closed without our seeing it.
                if (fds.contains_key(&file.fd) || self.len < MAX_FILES) && fds.insert(file.fd, file).is_none()
                {
                    self.len += 1;
                }
                None
            }
            Event::FileClosed(f) => {
                let (tgid, fd, opened) = (f.tgid(), f.fd(), f.raw.file.opened_ns);
                if let Some(k) = self.retired.remove(&(tgid, fd, opened)) {
                    self.len -= 1;
                    return Some(k);
                }
                let fds = self.by_process.get_mut(&tgid)?;
                if fds.get(&fd)?.opened_ns != opened {
                    return None;
                }
                self.len -= 1;
                fds.remove(&fd)
            }
            Event::Process(p) if p.kind != ProcessKind::Fork => {
                for (fd, k) in self.by_process.remove(&p.tgid()).unwrap_or_default() {
                    self.retired.insert((k.tgid, fd, k.opened_ns), k);
                }
                None
            }
            _ => None,
        }
    }

    pub fn get(&self, tgid: u32, fd: u32) -> Option<&KnownFile> {
        self.by_process.get(&tgid)?.get(&fd)
    }

    /// A retired descriptor (its process exec'd or exited).
    pub fn retired(&self, tgid: u32, fd: u32, opened_ns: u64) -> Option<&KnownFile> {
        self.retired.get(&(tgid, fd, opened_ns))
    }

    /// Drops the retired descriptors of `tgid` once the kernel has nothing
    /// more to say about them.
    pub fn forget(&mut self, tgid: u32) {
        let before = self.retired.len();
        self.retired.retain(|&(t, _, _), _| t != tgid);
        self.len -= before - self.retired.len();
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::testing::*;

    #[test]
    fn open_close_and_fd_reuse() {
        let mut t = FileTable::default();
        t.observe(&openat(1, 10, "/a.mp3", 5, 3), 1);
        assert_eq!(&*t.get(1, 5).unwrap().path, "/a.mp3");
        // A close for an older open of fd 5 is ignored.
        assert!(t.observe(&close(1, 11, 5, 9, 0, 0, 0, 0), 1).is_none());
        let closed = t.observe(&close(1, 12, 5, 10, 1, 2, 0, 0), 1).unwrap();
        assert_eq!(&*closed.path, "/a.mp3");
        assert!(t.get(1, 5).is_none());
        // fd 5 reused for another file.
        t.observe(&openat(1, 20, "/b.wav", 5, 3), 1);
        assert_eq!(&*t.get(1, 5).unwrap().path, "/b.wav");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn failed_opens_and_other_processes() {
        let mut t = FileTable::default();
        t.observe(&openat(1, 10, "/missing", -2, 0), 1);
        assert!(t.is_empty());
        t.observe(&openat(1, 10, "/x.pth", 3, 2), 1);
        t.observe(&openat(2, 10, "/x.pth", 3, 2), 1);
        assert_eq!(t.len(), 2);
        t.observe(&exit(1, 20), 1);
        assert!(t.get(1, 3).is_none());
        assert!(t.get(2, 3).is_some());
        // Retired until the kernel's last word on it...
        assert_eq!(t.retired(1, 3, 10).map(|k| &*k.path), Some("/x.pth"));
        assert_eq!(t.len(), 2);
        let closed = t.observe(&close(1, 30, 3, 10, 1, 1, 0, 0), 2).unwrap();
        assert_eq!(closed.incarnation, 1, "attributed to the process that opened it");
        assert_eq!(t.len(), 1);
        t.observe(&openat(3, 10, "/y.pth", 3, 2), 1);
        t.observe(&exit(3, 20), 1);
        t.forget(3);
        assert!(t.retired(3, 3, 10).is_none());
        assert_eq!(t.len(), 1);
    }
}
