//! Paths of descriptors for `-y`, as strace shows them: what /proc/PID/fd/N
//! points to (the canonical path). Lines are printed a little after the
//! calls, when the descriptor may name another file already, so the path
//! of a descriptor opened while traced comes from its openat: the path
//! opened, made absolute against the process's directory or the dirfd and
//! with its symbolic links resolved. Only descriptors we did not see opened
//! are read from /proc when needed.

use std::collections::HashMap;

use sonic_probe_common::syscalls;

use crate::events::Call;

/// A file as the kernel identified it in an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u32,
    pub ino: u64,
    pub mode: u16,
}

impl FileId {
    /// The file the call worked on, if the event names one.
    pub fn of(c: &Call) -> Option<FileId> {
        (c.raw.file_mode != 0).then_some(FileId {
            dev: c.raw.file_dev,
            ino: c.raw.file_ino,
            mode: c.raw.file_mode,
        })
    }

    /// What /proc shows for files without a path.
    fn pseudo_name(&self) -> Option<String> {
        match u32::from(self.mode) & libc::S_IFMT {
            libc::S_IFIFO => Some(format!("pipe:[{}]", self.ino)),
            libc::S_IFSOCK => Some(format!("socket:[{}]", self.ino)),
            _ => None,
        }
    }
}

/// Descriptors remembered at most.
const MAX: usize = 65536;

#[derive(Default)]
pub struct FdNames {
    known: HashMap<(u32, i32), String>,
    /// Paths of files opened while traced, by inode: a descriptor made by
    /// dup2 or fork still names the same inode.
    by_inode: HashMap<(u32, u64), String>,
    /// Working directory of each process, read while it runs (a short-lived
    /// process is gone when its lines are printed). chdir is not traced: a
    /// process that changes directory keeps the first one seen here.
    cwds: HashMap<u32, String>,
}

fn readlink(path: String) -> Option<String> {
    std::fs::read_link(path).ok().map(|p| p.to_string_lossy().into_owned())
}

impl FdNames {
    /// Knows `tgid`'s working directory from now on.
    pub fn set_cwd(&mut self, tgid: u32, cwd: String) {
        if self.cwds.len() < MAX {
            self.cwds.insert(tgid, cwd);
        }
    }

    /// Learns the descriptors `tgid` has now (those it inherited, which we
    /// never see opened), while it still runs: a terminal on stderr must
    /// still be named when the process has exited by the time its close
    /// is printed. By inode too, so the kernel's view of the file in an
    /// event finds it.
    pub fn snapshot(&mut self, tgid: u32) {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{tgid}/fd")) else { return };
        for entry in dir.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let Some(path) = readlink(format!("/proc/{tgid}/fd/{fd}")) else { continue };
            if !path.starts_with('/') {
                // pipe:[N], socket:[N], anon_inode:...: named from the event.
                continue;
            }
            if let Ok(meta) = std::fs::metadata(entry.path()) {
                use std::os::unix::fs::MetadataExt;
                let dev = meta.dev();
                // The kernel's dev_t (major << 20 | minor), as events carry it.
                let kdev = (libc::major(dev) << 20) | libc::minor(dev);
                if self.by_inode.len() < MAX {
                    self.by_inode.insert((kdev, meta.ino()), path.clone());
                }
            }
            if self.known.len() < MAX {
                self.known.insert((tgid, fd), path);
            }
        }
    }

    /// A traced process forked: the child starts in its parent's directory.
    pub fn forked(&mut self, parent: u32, child: u32) {
        if let Some(cwd) = self.cwd(parent) {
            self.set_cwd(child, cwd);
        }
    }

    /// Learns from a call before its line is printed (openat's new descriptor).
    pub fn before(&mut self, c: &Call) {
        if !self.cwds.contains_key(&c.tgid()) {
            if let Some(cwd) = readlink(format!("/proc/{}/cwd", c.tgid())) {
                self.set_cwd(c.tgid(), cwd);
            }
        }
        if c.raw.syscall != syscalls::OPENAT || c.raw.ret < 0 {
            return;
        }
        let Some(opened) = c.path_lossy() else { return };
        let tgid = c.tgid();
        let fd = c.raw.ret as i32;
        let absolute = if opened.starts_with('/') {
            Some(std::path::PathBuf::from(&opened))
        } else {
            let base = if c.raw.args[0] as i32 == -100 {
                self.cwd(tgid)
            } else {
                self.path(tgid, c.raw.args[0] as i32, None)
            };
            base.map(|b| std::path::Path::new(&b).join(&opened))
        };
        let path = absolute
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p).to_string_lossy().into_owned())
            .unwrap_or(opened);
        if let Some(id) = FileId::of(c) {
            if self.by_inode.len() < MAX {
                self.by_inode.insert((id.dev, id.ino), path.clone());
            }
        }
        if self.known.len() < MAX || self.known.contains_key(&(tgid, fd)) {
            self.known.insert((tgid, fd), path);
        }
    }

    /// Forgets after a call's line is printed (close).
    pub fn after(&mut self, c: &Call) {
        if c.raw.syscall == syscalls::CLOSE && c.raw.ret == 0 {
            self.known.remove(&(c.tgid(), c.raw.args[0] as i32));
        }
    }

    /// A process is gone: forget its descriptors.
    pub fn forget(&mut self, tgid: u32) {
        self.known.retain(|&(t, _), _| t != tgid);
        self.cwds.remove(&tgid);
    }

    /// The path of descriptor `fd`; `id` is the file the kernel saw behind
    /// it during the call, if the event says.
    pub fn path(&self, tgid: u32, fd: i32, id: Option<FileId>) -> Option<String> {
        if fd < 0 {
            return None;
        }
        if let Some(id) = id {
            if let Some(p) = self.by_inode.get(&(id.dev, id.ino)) {
                return Some(p.clone());
            }
            if let Some(p) = id.pseudo_name() {
                return Some(p);
            }
        }
        self.known.get(&(tgid, fd)).cloned().or_else(|| readlink(format!("/proc/{tgid}/fd/{fd}")))
    }

    pub fn cwd(&self, tgid: u32) -> Option<String> {
        self.cwds.get(&tgid).cloned().or_else(|| readlink(format!("/proc/{tgid}/cwd")))
    }
}
