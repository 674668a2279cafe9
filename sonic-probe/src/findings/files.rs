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
//!
//! Repeated opens: once a process has opened a file read-only twice within
//! [`super::REOPEN_COUNT_WINDOW`], the kernel sends its read-only opens of
//! that file only if none was sent within the window; the others it counts
//! in its reopens map (files.h). So the table also remembers, per file a process opens that
//! way, the path its sent opens named and how many of its opens have been
//! counted here: a sent open carries the kernel's total (so it stands for
//! the opens since the previous one), the sweep reads the totals in between
//! ([`FileTable::reopened`]), and the close of a descriptor whose open was
//! not sent is named by its file (device and inode).

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use sonic_probe_common::{syscalls, OpenFile, AUX_OPEN_TOTAL};

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
    /// Its device (s_dev) and inode number.
    pub dev: u32,
    pub ino: u64,
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

/// Files whose repeated opens are remembered at most (twice the kernel's
/// MAX_REOPENS: its entries, and those it deleted lately). Past it, a sent
/// open counts as one open, and the opens the kernel counted without
/// sending them are not seen.
pub const MAX_REOPENED: usize = 2 * sonic_probe_common::MAX_REOPENS as usize;

/// A kernel reopens entry: (tgid, dev, ino, created_ns).
pub type ReopenId = (u32, u32, u64, u64);

/// The ids of every reopens entry of process `tgid`.
fn of_process(tgid: u32) -> std::ops::RangeInclusive<ReopenId> {
    (tgid, 0, 0, 0)..=(tgid, u32::MAX, u64::MAX, u64::MAX)
}

/// One reopens entry of the kernel as the table knows it.
#[derive(Debug, Clone)]
struct Reopened {
    /// The file as its last sent open named it.
    file: KnownFile,
    /// The entry's opens counted here.
    seen: u64,
    /// Its process exec'd or exited ([`FileTable::forget`] drops it).
    retired: bool,
    /// When the sweep deleted the kernel's entry: kept a while for a sent
    /// open that crossed the delete.
    deleted_ns: Option<u64>,
}

/// What an event told the table.
#[derive(Debug, Default)]
pub struct Observed {
    /// A file-close event: the file closed.
    pub closed: Option<KnownFile>,
    /// A successful openat: the opens it stands for (itself and those the
    /// kernel counted since the last one it sent; 0 if the sweep has
    /// counted them all already).
    pub opens: u64,
}

#[derive(Debug, Default)]
pub struct FileTable {
    by_process: HashMap<u32, HashMap<u32, KnownFile>>,
    /// Descriptors of processes that exec'd or exited, by (tgid, fd, opened_ns).
    retired: HashMap<(u32, u32, u64), KnownFile>,
    len: usize,
    reopened: BTreeMap<ReopenId, Reopened>,
}

impl FileTable {
    /// Updates the table; says what the event means for the files.
    /// `incarnation` is the event's process incarnation.
    pub fn observe(&mut self, event: &Event, incarnation: u64) -> Observed {
        match event {
            Event::Call(c) if c.raw.syscall == syscalls::OPENAT && c.raw.ret >= 0 => {
                let Some(file) = self.opened(c, incarnation) else { return Observed::default() };
                let opens = match (c.raw.aux_kind == AUX_OPEN_TOTAL).then_some(c.raw.aux) {
                    Some([total, created_ns]) => self.count_sent(&file, created_ns, total),
                    None => 1,
                };
                Observed { closed: None, opens }
            }
            _ => Observed { closed: self.changed(event), opens: 0 },
        }
    }

    /// A successful openat sent with its path: the descriptor it made.
    fn opened(&mut self, c: &crate::events::Call, incarnation: u64) -> Option<KnownFile> {
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
            dev: c.raw.file_dev,
            ino: c.raw.file_ino,
        };
        let fds = self.by_process.entry(file.tgid).or_default();
        // A descriptor we still hold was closed without our seeing it.
        if (fds.contains_key(&file.fd) || self.len < MAX_FILES) && fds.insert(file.fd, file.clone()).is_none()
        {
            self.len += 1;
        }
        Some(file)
    }

    /// A sent open of reopens entry (file, created_ns) whose opens total
    /// `total`: the opens it stands for.
    fn count_sent(&mut self, file: &KnownFile, created_ns: u64, total: u64) -> u64 {
        let id = (file.tgid, file.dev, file.ino, created_ns);
        if let Some(r) = self.reopened.get_mut(&id) {
            // Behind the sweep's count (it read the entry after this open
            // was counted): counted already.
            let n = total.saturating_sub(r.seen);
            r.seen = r.seen.max(total);
            r.file = file.clone();
            return n;
        }
        if self.reopened.len() >= MAX_REOPENED {
            return 1;
        }
        let r = Reopened { file: file.clone(), seen: total, retired: false, deleted_ns: None };
        self.reopened.insert(id, r);
        total
    }

    /// The sweep read reopens entry `id` with `total` opens: the file and
    /// the opens not counted yet, if any (None also while no open of it
    /// has been sent: its path is not known).
    pub fn reopened(&mut self, id: ReopenId, total: u64) -> Option<(KnownFile, u64)> {
        let r = self.reopened.get_mut(&id)?;
        let n = total.checked_sub(r.seen).filter(|&n| n > 0)?;
        r.seen = total;
        Some((r.file.clone(), n))
    }

    /// Whether it knows reopens entries of process `tgid`.
    pub fn has_reopened(&self, tgid: u32) -> bool {
        self.reopened.range(of_process(tgid)).next().is_some()
    }

    /// Whether every open of reopens entry `id` is counted (or it can't
    /// be: no open of it was sent), so that the kernel's entry may go; if
    /// so, `now_ns` notes its delete.
    pub fn settle_reopened(&mut self, id: ReopenId, total: u64, now_ns: u64) -> bool {
        match self.reopened.get_mut(&id) {
            Some(r) if r.seen < total => false,
            Some(r) => {
                r.deleted_ns.get_or_insert(now_ns);
                true
            }
            None => true,
        }
    }

    /// Drops what it remembers of kernel entries deleted before `before_ns`.
    pub fn expire_reopened(&mut self, before_ns: u64) {
        self.reopened.retain(|_, r| r.deleted_ns.is_none_or(|d| d >= before_ns));
    }

    /// The file a process's descriptor of (dev, ino) is, from the sent opens
    /// of that file (the latest entry's).
    fn by_inode(&self, tgid: u32, dev: u32, ino: u64) -> Option<&KnownFile> {
        self.reopened
            .range((tgid, dev, ino, 0)..=(tgid, dev, ino, u64::MAX))
            .next_back()
            .map(|(_, r)| &r.file)
    }

    /// Descriptor `fd` of process `tgid`, opened at `opened_ns` by an open
    /// the kernel counted and did not send, as the sent opens of its file
    /// (dev, ino) named it.
    fn counted_open(&self, tgid: u32, fd: u32, opened_ns: u64, dev: u32, ino: u64) -> Option<KnownFile> {
        self.by_inode(tgid, dev, ino).map(|k| KnownFile { fd, opened_ns, ..k.clone() })
    }

    /// The file a call's descriptor `fd` is, the call's event naming it
    /// as (dev, ino) (ino 0: not named): as the descriptor's sent open
    /// named it if that is the same file, else as the sent opens of the
    /// file did (its descriptor's own open counted, not sent). Only its
    /// path and class are the descriptor's.
    pub fn of_call(&self, tgid: u32, fd: u32, dev: u32, ino: u64) -> Option<&KnownFile> {
        if let Some(k) = self.get(tgid, fd).filter(|k| ino == 0 || (k.dev, k.ino) == (dev, ino)) {
            return Some(k);
        }
        (ino != 0).then(|| self.by_inode(tgid, dev, ino)).flatten()
    }

    /// The file a descriptor open now is: (tgid, fd, opened_ns) as its
    /// open was sent, else the file (dev, ino) as other opens of it were.
    pub fn resolve(
        &self,
        tgid: u32,
        fd: u32,
        opened_ns: u64,
        dev: u32,
        ino: u64,
    ) -> Option<Cow<'_, KnownFile>> {
        match self.get(tgid, fd).filter(|k| k.opened_ns == opened_ns) {
            Some(k) => Some(Cow::Borrowed(k)),
            None => self.counted_open(tgid, fd, opened_ns, dev, ino).map(Cow::Owned),
        }
    }

    /// The file a close, exec or exit event is done with.
    fn changed(&mut self, event: &Event) -> Option<KnownFile> {
        match event {
            Event::FileClosed(f) => {
                let (tgid, fd, opened) = (f.tgid(), f.fd(), f.raw.file.opened_ns);
                if let Some(k) = self.retired.remove(&(tgid, fd, opened)) {
                    self.len -= 1;
                    return Some(k);
                }
                if let Some(fds) = self.by_process.get_mut(&tgid) {
                    if fds.get(&fd).is_some_and(|k| k.opened_ns == opened) {
                        self.len -= 1;
                        return fds.remove(&fd);
                    }
                }
                self.counted_open(tgid, fd, opened, f.raw.file.dev, f.raw.file.ino)
            }
            Event::Process(p) if p.kind != ProcessKind::Fork => {
                let tgid = p.tgid();
                for (fd, k) in self.by_process.remove(&tgid).unwrap_or_default() {
                    self.retired.insert((k.tgid, fd, k.opened_ns), k);
                }
                for (_, r) in self.reopened.range_mut(of_process(tgid)) {
                    r.retired = true;
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
        let ids: Vec<ReopenId> =
            self.reopened.range(of_process(tgid)).filter(|(_, r)| r.retired).map(|(id, _)| *id).collect();
        for id in ids {
            self.reopened.remove(&id);
        }
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
        assert!(t.observe(&close(1, 11, 5, 9, 0, 0, 0, 0), 1).closed.is_none());
        let closed = t.observe(&close(1, 12, 5, 10, 1, 2, 0, 0), 1).closed.unwrap();
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
        let closed = t.observe(&close(1, 30, 3, 10, 1, 1, 0, 0), 2).closed.unwrap();
        assert_eq!(closed.incarnation, 1, "attributed to the process that opened it");
        assert_eq!(t.len(), 1);
        t.observe(&openat(3, 10, "/y.pth", 3, 2), 1);
        t.observe(&exit(3, 20), 1);
        t.forget(3);
        assert!(t.retired(3, 3, 10).is_none());
        assert_eq!(t.len(), 1);
    }

    const FILE: (u32, u64) = (0x803, 77);

    #[test]
    fn opens_the_kernel_counted_are_counted_once() {
        let mut t = FileTable::default();
        let id = (1, FILE.0, FILE.1, 5);
        // The first open of the file is sent: it stands for itself.
        assert_eq!(t.observe(&openat_counted(1, 10, "/m.pth", 3, 2, FILE, 5, 1), 1).opens, 1);
        // The sweep finds 3 more counted in the kernel, then nothing new.
        let (file, n) = t.reopened(id, 4).unwrap();
        assert_eq!((&*file.path, file.incarnation, n), ("/m.pth", 1, 3));
        assert!(t.reopened(id, 4).is_none());
        // The next sent open (total 7) stands for itself and the 2 before it.
        assert_eq!(t.observe(&openat_counted(1, 20, "/m.pth", 3, 2, FILE, 5, 7), 1).opens, 3);
        // The sweep read the entry while a sent open was still in the ring:
        // the open is counted by the sweep, not again by its event.
        assert_eq!(t.reopened(id, 9).map(|(_, n)| n), Some(2));
        assert_eq!(t.observe(&openat_counted(1, 30, "/m.pth", 3, 2, FILE, 5, 8), 1).opens, 0);
        // A sweep that reads an entry before its first open's event: not
        // known yet, nothing counted (the event counts them all).
        assert!(t.reopened((1, FILE.0, FILE.1, 6), 4).is_none());
        assert_eq!(t.observe(&openat_counted(1, 40, "/m.pth", 4, 2, FILE, 6, 4), 1).opens, 4);
        // Opens sent without totals (for writing, the map full) count one.
        assert_eq!(t.observe(&openat(1, 50, "/log.txt", 5, 0), 1).opens, 1);
        // A failed open counts nothing.
        assert_eq!(t.observe(&openat(1, 60, "/nope", -2, 0), 1).opens, 0);
    }

    #[test]
    fn a_close_of_an_open_not_sent_is_named_by_its_file() {
        let mut t = FileTable::default();
        t.observe(&openat_counted(1, 10, "/m.pth", 3, 2, FILE, 5, 1), 1);
        t.observe(&close_of(1, 11, 3, 10, FILE, 100), 1);
        // Opened again (counted, not sent) as fd 4, and closed.
        let closed = t.observe(&close_of(1, 21, 4, 20, FILE, 100), 1).closed.unwrap();
        assert_eq!((&*closed.path, closed.fd, closed.opened_ns), ("/m.pth", 4, 20));
        // Still open: the same.
        let live = t.resolve(1, 5, 30, FILE.0, FILE.1).unwrap();
        assert_eq!((&*live.path, live.fd, live.opened_ns), ("/m.pth", 5, 30));
        // A call through it (an mmap) names the same file.
        assert_eq!(t.of_call(1, 4, FILE.0, FILE.1).map(|k| &*k.path), Some("/m.pth"));
        assert!(t.of_call(1, 4, FILE.0, 0).is_none(), "not named");
        // Another process's descriptor of the same file is not this one's.
        assert!(t.observe(&close_of(2, 21, 4, 20, FILE, 100), 1).closed.is_none());
        assert!(t.resolve(1, 5, 30, FILE.0, FILE.1 + 1).is_none());
    }

    #[test]
    fn kernel_entries_go_when_counted_and_their_process_when_gone() {
        let mut t = FileTable::default();
        let id = (1, FILE.0, FILE.1, 5);
        assert!(!t.has_reopened(1));
        t.observe(&openat_counted(1, 10, "/m.pth", 3, 2, FILE, 5, 1), 1);
        assert!(t.has_reopened(1) && !t.has_reopened(2));
        // Opens not counted yet: the kernel's entry stays.
        assert!(!t.settle_reopened(id, 3, 100));
        t.reopened(id, 3);
        assert!(t.settle_reopened(id, 3, 100));
        // An entry no open of which was sent may go.
        assert!(t.settle_reopened((1, FILE.0, FILE.1, 9), 3, 100));
        // A sent open that crossed the delete is still counted once.
        assert_eq!(t.observe(&openat_counted(1, 99, "/m.pth", 3, 2, FILE, 5, 4), 1).opens, 1);
        // Then it is forgotten, and a new entry of the file starts over.
        t.expire_reopened(101);
        assert!(t.reopened(id, 5).is_none());
        assert_eq!(t.observe(&openat_counted(1, 200, "/m.pth", 3, 2, FILE, 150, 1), 1).opens, 1);
        // Its process exits: still there for the sweep's last reading,
        // then forgotten with its descriptors.
        t.observe(&exit(1, 300), 1);
        assert_eq!(t.reopened((1, FILE.0, FILE.1, 150), 2).map(|(f, n)| (f.incarnation, n)), Some((1, 1)));
        t.forget(1);
        assert!(t.reopened((1, FILE.0, FILE.1, 150), 3).is_none());
    }
}
