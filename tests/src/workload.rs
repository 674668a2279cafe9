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
    pub const FUTEX_WAKES: u64 = 10;
    /// One FUTEX_WAIT that times out (ETIMEDOUT), one whose value differs (EAGAIN).
    pub const FUTEX: u64 = FUTEX_WAKES + 2;
    pub const MISSING_PATH: &str = "/nonexistent/sonic-probe-test/model.pth";
}

/// `sp-workload spawn THREADS FORKS READS`: threads and forked children
/// each read /dev/zero READS times (1 KiB each).
pub mod spawn {
    pub fn reads(threads: u64, forks: u64, reads: u64) -> u64 {
        (threads + forks) * reads
    }
}
