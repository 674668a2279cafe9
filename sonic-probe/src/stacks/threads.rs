//! Which threads of a stalled process a capture reads native stacks of,
//! and where each one's registers come from.
//!
//! Why: while a request thread waits for a lock, nobody knows yet which
//! thread will wake it; the holder may be sleeping, reading a pipe or a
//! file, or computing, not only waiting on another lock (the waits the
//! kernel programs record with their registers). So a capture reads the
//! other threads too, bounded, and the futex_stall detector keeps the
//! stack of the one that turns out to be the waker. The kernel publishes
//! the saved user stack and instruction pointers of a blocked thread in
//! `/proc/PID/task/TID/syscall` (no ptrace stop: it only looks at a thread
//! that is not running); a running thread is sampled once (super::sample).
//!
//! The order, as the budget may not reach every thread of a big process:
//! the waiting threads themselves, the owner a glibc mutex names (a
//! `pthread_mutex_t` records its owner's thread id next to the futex word,
//! a PI futex holds it in the word), then running threads (a holder at
//! work), threads blocked in other calls (a holder sleeping or reading),
//! and last the other futex waiters (a holder waiting on another lock).

use std::collections::HashSet;

use super::frame::{read_memory, Regs};

/// Where a thread is, as /proc/PID/task/TID/syscall says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadState {
    /// Blocked in system call `nr`, with its registers saved at entry (ip
    /// and sp: the kernel does not publish bp, the unwind uses .eh_frame).
    InSyscall { nr: u64, args: [u64; 6], regs: Regs },
    /// Blocked outside a system call (a page fault, reclaim): registers at
    /// the kernel entry.
    Blocked { regs: Regs },
    /// On a CPU or runnable.
    Running,
}

/// The state of thread `tid` of `pid`; None if it is gone or unreadable.
pub fn thread_state(pid: u32, tid: u32) -> Option<ThreadState> {
    parse_syscall_file(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// Parses /proc/PID/task/TID/syscall: "running", "-1 SP PC" (blocked, not in
/// a call), or "NR A0 .. A5 SP PC" (hexadecimal but NR).
fn parse_syscall_file(text: &str) -> Option<ThreadState> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    match fields.as_slice() {
        ["running"] => Some(ThreadState::Running),
        &[nr, sp, pc] if nr.starts_with('-') => {
            Some(ThreadState::Blocked { regs: Regs { ip: hex(pc)?, sp: hex(sp)?, bp: 0 } })
        }
        &[nr, a0, a1, a2, a3, a4, a5, sp, pc] => Some(ThreadState::InSyscall {
            nr: nr.parse().ok()?,
            args: [hex(a0)?, hex(a1)?, hex(a2)?, hex(a3)?, hex(a4)?, hex(a5)?],
            regs: Regs { ip: hex(pc)?, sp: hex(sp)?, bp: 0 },
        }),
        _ => None,
    }
}

/// Names of the x86_64 system calls a blocked thread is usually found in.
pub fn syscall_name(nr: u64) -> String {
    let name = match nr {
        0 => "read",
        1 => "write",
        7 => "poll",
        16 => "ioctl",
        17 => "pread64",
        18 => "pwrite64",
        19 => "readv",
        20 => "writev",
        23 => "select",
        35 => "nanosleep",
        43 => "accept",
        42 => "connect",
        44 => "sendto",
        45 => "recvfrom",
        47 => "recvmsg",
        61 => "wait4",
        74 => "fsync",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        257 => "openat",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        449 => "futex_waitv",
        _ => return format!("system call {nr}"),
    };
    name.to_string()
}

/// The thread ids of `pid` (empty if it is gone).
pub fn tids_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

const FUTEX_CMD_MASK: u32 = !(128 | 256); // ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
const FUTEX_LOCK_PI: u32 = 6;
const FUTEX_LOCK_PI2: u32 = 13;
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// The thread the lock at `uaddr` names as its owner, when it names one of
/// `threads`: a PI futex (FUTEX_LOCK_PI) holds the owner's id in the word;
/// a glibc pthread_mutex_t, `{ int __lock; unsigned __count; int __owner; }`,
/// records it after the word. A semaphore or a condition variable names
/// none (a number that is not one of the process's threads is no answer).
pub fn lock_owner(pid: u32, uaddr: u64, op: u32, threads: &HashSet<u32>) -> Option<u32> {
    let bytes = read_memory(pid, uaddr, 12).ok()?;
    owner_in(&bytes, op, threads)
}

fn owner_in(bytes: &[u8], op: u32, threads: &HashSet<u32>) -> Option<u32> {
    let word = u32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?);
    if word == 0 {
        return None; // free: no owner
    }
    let cmd = op & FUTEX_CMD_MASK;
    let owner = if cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2 {
        word & FUTEX_TID_MASK
    } else {
        u32::from_ne_bytes(bytes.get(8..12)?.try_into().ok()?)
    };
    threads.contains(&owner).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_file_lines() {
        assert_eq!(parse_syscall_file("running\n"), Some(ThreadState::Running));
        assert_eq!(
            parse_syscall_file("-1 0x7ffc1000 0x401136\n"),
            Some(ThreadState::Blocked { regs: Regs { ip: 0x401136, sp: 0x7ffc1000, bp: 0 } })
        );
        assert_eq!(
            parse_syscall_file("230 0x0 0x0 0x7f00aa 0x0 0x0 0x0 0x7f12fffe30 0x7f1303c7a3\n"),
            Some(ThreadState::InSyscall {
                nr: 230,
                args: [0, 0, 0x7f00aa, 0, 0, 0],
                regs: Regs { ip: 0x7f1303c7a3, sp: 0x7f12fffe30, bp: 0 }
            })
        );
        assert_eq!(parse_syscall_file(""), None);
        assert_eq!(parse_syscall_file("0 0x1 0x2"), None);
    }

    #[test]
    fn a_thread_blocked_in_read_is_seen_in_its_call() {
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors for pipe to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let mut b = [0u8; 1];
            // SAFETY: reading one byte into `b`.
            unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) }
        });
        let tid = rx.recv().unwrap();
        let me = std::process::id();
        assert!(tids_of(me).contains(&tid));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let state = loop {
            match thread_state(me, tid) {
                Some(s @ ThreadState::InSyscall { nr: 0, .. }) => break s,
                _ if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                }
                other => panic!("the reader never blocked in read: {other:?}"),
            }
        };
        let ThreadState::InSyscall { args, regs, .. } = state else { unreachable!() };
        assert_eq!(args[0], fds[0] as u64, "read's first argument is the pipe");
        assert!(regs.ip != 0 && regs.sp != 0);
        // SAFETY: writing one byte to the pipe, then closing both ends.
        unsafe {
            libc::write(fds[1], b"x".as_ptr().cast(), 1);
        }
        assert_eq!(reader.join().unwrap(), 1);
        assert_eq!(thread_state(me, tid), None, "a thread gone has no state");
        // SAFETY: closing the descriptors pipe made.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert!(tids_of(u32::MAX).is_empty());
    }

    #[test]
    fn owners_named_by_locks() {
        let threads: HashSet<u32> = [100, 101].into_iter().collect();
        let mutex = |lock: u32, owner: u32| {
            let mut b = lock.to_ne_bytes().to_vec();
            b.extend(0u32.to_ne_bytes());
            b.extend(owner.to_ne_bytes());
            b
        };
        // FUTEX_WAIT_PRIVATE (128): a glibc mutex's owner field.
        assert_eq!(owner_in(&mutex(2, 101), 128, &threads), Some(101));
        assert_eq!(owner_in(&mutex(0, 101), 128, &threads), None, "free");
        assert_eq!(owner_in(&mutex(1, 7), 128, &threads), None, "not one of the process's threads");
        // FUTEX_LOCK_PI_PRIVATE: the word holds the owner, with the waiters bit.
        assert_eq!(owner_in(&mutex(0x8000_0000 | 100, 0), FUTEX_LOCK_PI | 128, &threads), Some(100));
        assert_eq!(owner_in(&[1, 0], 128, &threads), None);
    }

    #[test]
    fn names_of_blocking_calls() {
        assert_eq!(syscall_name(230), "clock_nanosleep");
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(9999), "system call 9999");
    }
}
