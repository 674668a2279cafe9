//! A FUSE filesystem of one file whose every read takes a known time: a
//! file read that really blocks, as a model read from gcsfuse or s3fs
//! does, for the `file` state of the threads' time (tests/threads.rs).
//! Device-mapper's delay target would do for a block device, but does not
//! work on these machines; /dev/fuse does, as root (fuser mounts with
//! mount(2), no libfuse or fusermount).
//!
//! Opened with direct I/O, so that every read(2) is one READ request (no
//! page cache, no read-ahead), answered after [`READ_DELAY`].
//!
//! The test process serves it and the workload only reads it: a process
//! that serves a filesystem it holds a file of cannot be killed (at exit
//! its close waits, in D state, for its own dead server to answer FLUSH).

use std::{
    ffi::OsStr,
    path::Path,
    time::{Duration, UNIX_EPOCH},
};

use fuser::{
    consts::FOPEN_DIRECT_IO, BackgroundSession, FileAttr, FileType, Filesystem, MountOption, ReplyAttr,
    ReplyData, ReplyEntry, ReplyOpen, Request, FUSE_ROOT_ID,
};

/// The one file, at the mount's root.
pub const FILE: &str = "slow";
/// Its size: zeros.
pub const SIZE: u64 = 1 << 20;
const FILE_INO: u64 = 2;
const TTL: Duration = Duration::from_secs(60);

/// How many reads of [`FILE`] the workload's filer makes (`sp-workload
/// blocked DIR`), so the test knows its file time: READS x READ_DELAY.
pub const READS: u64 = 4;

/// How long after it arrived each READ is answered.
pub const READ_DELAY: Duration = Duration::from_millis(250);

/// The filesystem: each READ answered [`READ_DELAY`] after it arrived.
struct SlowFs;

fn attr(ino: u64) -> FileAttr {
    let (kind, perm, size, nlink) = if ino == FUSE_ROOT_ID {
        (FileType::Directory, 0o555, 0, 2)
    } else {
        (FileType::RegularFile, 0o444, SIZE, 1)
    };
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for SlowFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == FUSE_ROOT_ID && name == FILE {
            reply.entry(&TTL, &attr(FILE_INO), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            FUSE_ROOT_ID | FILE_INO => reply.attr(&TTL, &attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == FILE_INO {
            reply.opened(0, FOPEN_DIRECT_IO);
        } else {
            reply.error(libc::EISDIR);
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyData,
    ) {
        std::thread::sleep(READ_DELAY);
        let left = SIZE.saturating_sub(offset.max(0) as u64);
        reply.data(&vec![0u8; (size as u64).min(left) as usize]);
    }
}

/// Mounts the filesystem at `dir` (an empty directory) and serves it, in
/// a thread of this process, until the session is dropped (then it is
/// unmounted: drop it after every reader has closed the file). Fails
/// where the kernel has no FUSE (see [`kernel_has_fuse`]) or without
/// CAP_SYS_ADMIN.
pub fn mount(dir: &Path) -> std::io::Result<BackgroundSession> {
    let options =
        [MountOption::RO, MountOption::FSName("sp-slow".into()), MountOption::Subtype("sp-slow".into())];
    fuser::spawn_mount2(SlowFs, dir, &options)
}

/// Whether the running kernel has FUSE (built in or its module loaded).
pub fn kernel_has_fuse() -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .is_ok_and(|s| s.lines().any(|l| l.trim_end().ends_with("\tfuse")))
}
