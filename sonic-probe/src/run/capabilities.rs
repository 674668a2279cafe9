//! Dropping capabilities in every thread of the process, not only the one
//! that asks.
//!
//! Linux keeps capabilities per thread: capset(2) changes the calling
//! thread only. By the time the programs are attached the async runtime's
//! workers and blocking threads exist and would keep CAP_BPF and
//! CAP_PERFMON, so a bug in the HTTP server or the event decoder (which run
//! on them) could still be turned into BPF access. This does what glibc
//! does for setuid(2) and libcap's psx for capset: the calling thread drops
//! first, then every other thread is sent a signal whose handler makes the
//! same two system calls on itself; /proc/self/task is read until every
//! thread shows the wanted sets (threads started meanwhile inherit them
//! from a thread that already dropped, or get the signal in the next round).

use std::{
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

/// The effective and permitted sets every thread is to have (two 32-bit
/// words each, as capset takes them); read by the signal handler.
static WANT: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];
/// Handler runs that failed (capset or prctl returned an error).
static FAILED: AtomicUsize = AtomicUsize::new(0);

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets the calling thread's capabilities to WANT (effective = permitted,
/// no inheritable, no ambient). Only raw system calls: async-signal-safe.
fn drop_this_thread() -> bool {
    // SAFETY: prctl and capset with valid arguments and pointers to locals.
    unsafe {
        // Nothing this thread runs later gets capabilities back: no exec of
        // a root-owned or file-capability program regains them (no new
        // privileges), and the bounding set goes too where we may drop it
        // (CAP_SETPCAP, still effective here: a daemon started as root; a
        // service without it relies on no_new_privs). Both are per thread.
        let no_new_privs = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        for cap in 0..64 {
            // EINVAL past the kernel's last capability, EPERM without
            // CAP_SETPCAP: neither is a failure to drop what we hold.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        let ambient = libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let data: [CapData; 2] = std::array::from_fn(|i| {
            let w = WANT[i].load(Ordering::SeqCst);
            CapData { effective: w, permitted: w, inheritable: 0 }
        });
        let set = libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr());
        no_new_privs == 0 && ambient == 0 && set == 0
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    let errno = std::io::Error::last_os_error().raw_os_error();
    if !drop_this_thread() {
        FAILED.fetch_add(1, Ordering::SeqCst);
    }
    // A handler must leave errno as it found it.
    if let Some(e) = errno {
        // SAFETY: __errno_location is the calling thread's errno.
        unsafe { *libc::__errno_location() = e };
    }
}

/// A thread's capability sets as /proc shows them.
fn thread_sets(tid: &str) -> Option<[u64; 4]> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let get = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    Some([get("CapEff:")?, get("CapPrm:")?, get("CapInh:")?, get("CapAmb:")?])
}

/// Leaves every thread of the process with exactly `keep` (a bit mask of
/// capability numbers) as its effective and permitted sets, and nothing
/// inheritable or ambient. Returns the number of threads, or which still
/// hold more after a second.
pub fn drop_in_every_thread(keep: u64) -> Result<usize, String> {
    WANT[0].store(keep as u32, Ordering::SeqCst);
    WANT[1].store((keep >> 32) as u32, Ordering::SeqCst);
    if !drop_this_thread() {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    let signal = libc::SIGRTMIN();
    // SAFETY: installing a handler that only makes raw system calls.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
        }
    }
    let want = [keep, keep, 0, 0];
    // SAFETY: no preconditions.
    let (pid, me) = unsafe { (libc::getpid(), libc::gettid()) };
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let mut holding = Vec::new();
        let mut threads = 0;
        let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
        for task in tasks.flatten() {
            let name = task.file_name();
            let Some(tid) = name.to_str() else { continue };
            threads += 1;
            let Some(sets) = thread_sets(tid) else { continue }; // exited
            if sets != want {
                holding.push(tid.to_string());
                let tid: i32 = tid.parse().unwrap_or(0);
                if tid != me && tid > 0 {
                    // SAFETY: signalling a thread of our own process.
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
                }
            }
        }
        if holding.is_empty() {
            return Ok(threads);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "threads {} still hold capabilities ({} capset failures)",
                holding.join(", "),
                FAILED.load(Ordering::SeqCst)
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
