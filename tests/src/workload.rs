//! What the `sp-workload` binary does, as numbers the tests assert on.
//!
//! Every mode first prints `ready` and blocks in read(0) until the test
//! writes a byte: that read was entered before the probe attached, so it
//! is never counted, and everything after it is exactly what is listed here.

/// `sp-workload exact`: a fixed sequence of calls, single-threaded.
pub mod exact {
    pub const DEV_NULL_OPENS: u64 = 6;
    pub const ENOENT_OPENS: u64 = 3;
    /// /dev/zero (1) + /dev/null + the missing file.
    pub const OPENAT: u64 = 1 + DEV_NULL_OPENS + ENOENT_OPENS;
    pub const READS_OK: u64 = 1000;
    pub const READ_SIZE: u64 = 1024;
    pub const READS_EBADF: u64 = 2;
    pub const READ: u64 = READS_OK + READS_EBADF;
    pub const MAPS_OK: u64 = 5;
    pub const MAP_SIZE: u64 = 64 * 1024;
    pub const MMAP_EINVAL: u64 = 1;
    pub const MMAP: u64 = MAPS_OK + MMAP_EINVAL;
    pub const MUNMAP: u64 = MAPS_OK;
    /// Each /dev/null descriptor is closed again; /dev/zero's stays open
    /// until _exit (which closes it without a close call).
    pub const CLOSE: u64 = DEV_NULL_OPENS;
    pub const FUTEX_WAKES: u64 = 10;
    /// One FUTEX_WAIT that times out (ETIMEDOUT), one whose value differs (EAGAIN).
    pub const FUTEX: u64 = FUTEX_WAKES + 2;
    pub const MISSING_PATH: &str = "/nonexistent/sonic-probe-test/model.pth";

    /// The counts, errors and bytes of one `exact` run under process name
    /// `name`, as sonic-probe exports them: all exact.
    pub fn assert_counts(m: &crate::Metrics, name: &str) {
        assert_eq!(m.calls("futex", name), FUTEX);
        assert_eq!(m.calls("openat", name), OPENAT);
        assert_eq!(m.calls("read", name), READ);
        assert_eq!(m.calls("mmap", name), MMAP);
        assert_eq!(m.calls("munmap", name), MUNMAP);
        assert_eq!(m.calls("close", name), CLOSE);

        assert_eq!(m.errors("openat", name, "ENOENT"), ENOENT_OPENS);
        assert_eq!(m.errors("read", name, "EBADF"), READS_EBADF);
        assert_eq!(m.errors("mmap", name, "EINVAL"), MMAP_EINVAL);
        assert_eq!(m.errors("futex", name, "ETIMEDOUT"), 1);
        assert_eq!(m.errors("futex", name, "EAGAIN"), 1);
        let all_errors = m.sum("sonic_probe_syscall_errors_total", &[("comm", name)]) as u64;
        assert_eq!(all_errors, ENOENT_OPENS + READS_EBADF + MMAP_EINVAL + 2);

        let c = [("comm", name)];
        assert_eq!(m.get("sonic_probe_read_bytes_total", &c), Some((READS_OK * READ_SIZE) as f64));
        assert_eq!(m.get("sonic_probe_mmap_bytes_total", &c), Some((MAPS_OK * MAP_SIZE) as f64));
        assert_eq!(m.get("sonic_probe_munmap_bytes_total", &c), Some((MAPS_OK * MAP_SIZE) as f64));
    }
}

/// `sp-workload io PATH`: pread64, write and ioctl, single-threaded. PATH is
/// a file of at least FILE_SIZE bytes (a `.pth`: a model); a pipe and
/// /dev/null are opened before the go signal, PATH after it.
/// `sp-workload reopen PATH`: one file opened again and again, as a
/// service that reloads its model on every request; most of the opens are
/// counted in the kernel, not sent (files.h).
pub mod reopen {
    /// PATH's size: each read-only open reads it whole in one read.
    pub const FILE_SIZE: u64 = 4096;
    pub const BURSTS: u64 = 3;
    /// Read-only opens (each read and closed) per burst, back to back.
    pub const READ_OPENS: u64 = 400;
    /// Between bursts: the second falls within a second of the first
    /// burst's first open, the third does not.
    pub const GAP_MS: u64 = 700;
    /// One read-write open (not read, closed) after each burst.
    pub const OPENAT: u64 = BURSTS * (READ_OPENS + 1);
    pub const CLOSE: u64 = OPENAT;
}

pub mod io {
    pub const FILE_SIZE: u64 = 64 * 1024;
    /// PATH opened after go (its class is known: model); closed at the end.
    pub const OPENAT: u64 = 1;
    pub const CLOSE: u64 = 1;
    /// The whole file read 1 KiB at a time at increasing offsets: small reads.
    pub const PREAD_SIZE: u64 = 1024;
    pub const PREADS_OK: u64 = FILE_SIZE / PREAD_SIZE;
    /// One more at the end of the file: returns 0.
    pub const PREADS_EOF: u64 = 1;
    pub const PREADS_EBADF: u64 = 2;
    /// pread64 of a pipe.
    pub const PREADS_ESPIPE: u64 = 1;
    pub const PREAD64: u64 = PREADS_OK + PREADS_EOF + PREADS_EBADF + PREADS_ESPIPE;
    /// Writes to /dev/null and to the pipe.
    pub const WRITES_NULL: u64 = 100;
    pub const WRITES_PIPE: u64 = 3;
    pub const WRITE_SIZE: u64 = 512;
    pub const WRITES_EBADF: u64 = 1;
    pub const WRITE: u64 = WRITES_NULL + WRITES_PIPE + WRITES_EBADF;
    /// pwrite64s to /dev/null at increasing offsets; one to the pipe
    /// (ESPIPE: no offsets on a pipe) and one to a bad descriptor.
    pub const PWRITES_NULL: u64 = 20;
    pub const PWRITE_SIZE: u64 = 256;
    pub const PWRITES_ESPIPE: u64 = 1;
    pub const PWRITES_EBADF: u64 = 1;
    pub const PWRITE64: u64 = PWRITES_NULL + PWRITES_ESPIPE + PWRITES_EBADF;
    /// FIONREAD on the pipe: succeeds.
    pub const IOCTLS_OK: u64 = 10;
    /// TCGETS on /dev/null: not a tty.
    pub const IOCTLS_ENOTTY: u64 = 2;
    pub const IOCTLS_EBADF: u64 = 1;
    pub const IOCTL: u64 = IOCTLS_OK + IOCTLS_ENOTTY + IOCTLS_EBADF;

    /// The counts, errors, bytes and classes of one `io` run under process
    /// name `name` traced with every call, as sonic-probe exports them.
    pub fn assert_counts(m: &crate::Metrics, name: &str) {
        assert_eq!(m.calls("openat", name), OPENAT);
        assert_eq!(m.calls("close", name), CLOSE);
        assert_eq!(m.calls("pread64", name), PREAD64);
        assert_eq!(m.calls("write", name), WRITE);
        assert_eq!(m.calls("pwrite64", name), PWRITE64);
        assert_eq!(m.calls("ioctl", name), IOCTL);
        assert_eq!(m.errors("pread64", name, "EBADF"), PREADS_EBADF);
        assert_eq!(m.errors("pread64", name, "ESPIPE"), PREADS_ESPIPE);
        assert_eq!(m.errors("write", name, "EBADF"), WRITES_EBADF);
        assert_eq!(m.errors("pwrite64", name, "ESPIPE"), PWRITES_ESPIPE);
        assert_eq!(m.errors("pwrite64", name, "EBADF"), PWRITES_EBADF);
        assert_eq!(m.errors("ioctl", name, "ENOTTY"), IOCTLS_ENOTTY);
        assert_eq!(m.errors("ioctl", name, "EBADF"), IOCTLS_EBADF);

        let c = [("comm", name)];
        assert_eq!(m.get("sonic_probe_pread64_bytes_total", &c), Some((PREADS_OK * PREAD_SIZE) as f64));
        assert_eq!(
            m.get("sonic_probe_write_bytes_total", &c),
            Some(((WRITES_NULL + WRITES_PIPE) * WRITE_SIZE) as f64)
        );
        assert_eq!(m.get("sonic_probe_pwrite64_bytes_total", &c), Some((PWRITES_NULL * PWRITE_SIZE) as f64));
        // The model file's reads by class, all small; the pipe's failed one is not_file.
        let model = [("comm", name), ("file_class", "model")];
        assert_eq!(
            m.get("sonic_probe_pread64_size_bytes_count", &model),
            Some((PREADS_OK + PREADS_EOF) as f64)
        );
        assert_eq!(m.get("sonic_probe_small_preads_total", &model), Some((PREADS_OK + PREADS_EOF) as f64));
        let not_file = [("comm", name), ("file_class", "not_file")];
        assert_eq!(
            m.get("sonic_probe_write_size_bytes_count", &not_file),
            Some((WRITES_NULL + WRITES_PIPE + WRITES_EBADF) as f64)
        );
        assert_eq!(m.get("sonic_probe_pwrite64_size_bytes_count", &not_file), Some(PWRITE64 as f64));
        // Neither the pipe nor /dev/null is a GPU.
        let other = [("comm", name), ("device_class", "other")];
        assert_eq!(m.get("sonic_probe_ioctl_duration_seconds_count", &other), Some(IOCTL as f64));
        assert_eq!(
            m.get("sonic_probe_ioctl_duration_seconds_count", &[("comm", name), ("device_class", "gpu")]),
            None
        );
    }
}

/// `sp-workload fdreuse PATH`: descriptor numbers that change what they
/// are without a traced open in between, the cases the programs' cache of
/// what descriptors are (fd_class_cache) must not get wrong. PATH (an audio
/// file, FILE_SIZE bytes) is opened before go, so its path is not seen.
/// After go:
/// 1. a pipe's read end is read PIPE_READS times (not_file), closed, and
///    the file dup2'd onto its number (dup2 is not traced): its FILE_READS
///    reads are of a regular file whose path was not seen (other);
/// 2. a second pipe's read end is read PIPE_READS times, closed by
///    close_range (not traced), and PATH opened onto its number: its
///    FILE_READS reads are audio.
pub mod fdreuse {
    pub const FILE_SIZE: u64 = 16 * 1024;
    pub const READ_SIZE: u64 = 1024;
    pub const PIPE_READS: u64 = 20;
    pub const FILE_READS: u64 = FILE_SIZE / READ_SIZE;

    pub fn assert_counts(m: &crate::Metrics, name: &str) {
        let reads = |class: &str| {
            m.get("sonic_probe_read_size_bytes_count", &[("comm", name), ("file_class", class)])
                .unwrap_or(0.0) as u64
        };
        assert_eq!(m.calls("read", name), 2 * PIPE_READS + 2 * FILE_READS);
        assert_eq!(reads("not_file"), 2 * PIPE_READS, "the pipes' reads");
        assert_eq!(reads("other"), FILE_READS, "the reads of the file dup2'd onto a pipe's number");
        assert_eq!(reads("audio"), FILE_READS, "the reads of the file opened onto a pipe's number");
        assert_eq!(
            m.get("sonic_probe_read_bytes_total", &[("comm", name)]),
            Some((2 * PIPE_READS + 2 * FILE_SIZE) as f64)
        );
    }
}

/// `sp-workload fdexec PATH`: a descriptor gone at exec (close-on-exec)
/// whose number is then another file's, by dup2 (not traced): what the
/// programs' cache kept of the old one must not class the new one. Before
/// the exec, a close-on-exec pipe's read end at number FD is read
/// PIPE_READS times (not_file); the new image (same name) waits
/// SETTLE_SECS, opens PATH, dup2s it onto FD and reads it FILE_READS times
/// (a regular file whose path was not seen at that number: other).
pub mod fdexec {
    pub const FD: i32 = 100;
    pub const FILE_SIZE: u64 = 16 * 1024;
    pub const READ_SIZE: u64 = 1024;
    pub const PIPE_READS: u64 = 20;
    pub const FILE_READS: u64 = FILE_SIZE / READ_SIZE;
    pub const SETTLE_SECS: i64 = 3;

    pub fn assert_counts(m: &crate::Metrics, name: &str) {
        let reads = |class: &str| {
            m.get("sonic_probe_read_size_bytes_count", &[("comm", name), ("file_class", class)])
                .unwrap_or(0.0) as u64
        };
        assert_eq!(reads("not_file"), PIPE_READS, "the pipe's reads, before the exec");
        assert_eq!(reads("other"), FILE_READS, "the file's reads at the pipe's number, after the exec");
        assert_eq!(m.calls("read", name), PIPE_READS + FILE_READS);
    }
}

/// `sp-workload spawn THREADS FORKS READS`: threads and forked children
/// each read /dev/zero READS times (1 KiB each).
pub mod spawn {
    pub fn reads(threads: u64, forks: u64, reads: u64) -> u64 {
        (threads + forks) * reads
    }
}
