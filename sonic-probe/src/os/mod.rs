//! What the operating system says, in the words strace and operators use:
//! errno and futex operation names, socket addresses, the little read from /proc and /sys
//! (a cgroup's CPU limit among it), the signals that end a command, and
//! the clock the kernel's events are timed by. Leaves: they import nothing of the daemon, and every room
//! above may use them.

pub mod cgroup_cpu;
pub mod errno;
pub mod futex;
pub mod procfs;
pub mod signals;
pub mod sockaddr;

/// CLOCK_MONOTONIC now, in ns (the clock of bpf_ktime_get_ns, which times
/// every event).
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}
