//! One sample of a running thread: its user registers and a copy of its
//! user stack at one instant, for the native unwinder.
//!
//! Why: a lock holder that computes while the request waits is on a CPU,
//! and a running thread has no registers saved anywhere user space can
//! read (`/proc/PID/task/TID/syscall` says "running"). A perf event on that
//! one thread (the software task clock, so it fires only while the thread
//! runs: after [`PERIOD_NS`] of its CPU time) takes the registers and the
//! stack the moment it fires, without stopping the thread and at no cost
//! to any other; the event is closed as soon as its sample is read. Events
//! of several threads are opened together and waited for together, so a
//! capture waits at most one timeout whatever the number of threads.

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use perf_event_open_sys::bindings as pe;

use super::frame::Regs;

/// The sampled thread's CPU time before the event fires (the task clock
/// counts nanoseconds).
pub const PERIOD_NS: u64 = 100_000;
/// Bytes of the stack copied above sp (a multiple of 8; a sample record is
/// at most 64 KiB). Words above it are read from the process if needed
/// (the callers' frames, which do not change while the thread runs below
/// them).
const STACK_BYTES: u32 = 48 * 1024;
/// Data pages of the ring (a power of two, room for one sample: the
/// pages count against the perf_event_mlock_kb limit).
const DATA_PAGES: usize = 16;
/// The registers asked for, in the order the record holds them (bit order).
const REGS_MASK: u64 = (1 << pe::PERF_REG_X86_BP) | (1 << pe::PERF_REG_X86_SP) | (1 << pe::PERF_REG_X86_IP);

/// A running thread at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub regs: Regs,
    /// The user stack from regs.sp upward.
    pub stack: Vec<u8>,
}

/// Samples each of `tids` once, waiting at most `timeout` in all; a thread
/// that did not run long enough in that time (blocked, or waiting for a
/// CPU) has no entry; one whose event could not be opened has an error.
pub fn sample_threads(tids: &[u32], timeout: Duration) -> HashMap<u32, Result<Sample, String>> {
    let mut out = HashMap::new();
    let mut open: Vec<(u32, Ring)> = Vec::new();
    for &tid in tids {
        match Ring::open(tid) {
            Ok(r) => open.push((tid, r)),
            Err(e) => {
                out.insert(tid, Err(e));
            }
        }
    }
    let deadline = Instant::now() + timeout;
    while !open.is_empty() {
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .map(|(_, r)| libc::pollfd { fd: r.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // SAFETY: `fds` is a valid array of fds.len() pollfd for the call.
        let n = unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, left.as_millis().max(1) as i32)
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
        let mut i = 0;
        open.retain(|(tid, ring)| {
            let revents = fds[i].revents;
            i += 1;
            if revents & libc::POLLHUP != 0 {
                return false; // the thread exited
            }
            match ring.first_sample() {
                Some(s) => {
                    out.insert(*tid, s);
                    false
                }
                None => true,
            }
        });
    }
    out
}

/// A perf event on one thread and its ring, closed and unmapped on drop.
struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    page: usize,
}

impl Ring {
    fn open(tid: u32) -> Result<Ring, String> {
        let mut attr = pe::perf_event_attr {
            type_: pe::PERF_TYPE_SOFTWARE,
            size: size_of::<pe::perf_event_attr>() as u32,
            config: u64::from(pe::PERF_COUNT_SW_TASK_CLOCK),
            sample_type: u64::from(
                pe::PERF_SAMPLE_TID | pe::PERF_SAMPLE_REGS_USER | pe::PERF_SAMPLE_STACK_USER,
            ),
            sample_regs_user: REGS_MASK,
            sample_stack_user: STACK_BYTES,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = PERIOD_NS;
        attr.__bindgen_anon_2.wakeup_events = 1;
        attr.set_exclude_kernel(1);
        attr.set_exclude_hv(1);
        let pid = libc::pid_t::try_from(tid).map_err(|_| format!("thread id {tid}"))?;
        // SAFETY: `attr` is a valid perf_event_attr that outlives the call.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(&mut attr, pid, -1, -1, pe::PERF_FLAG_FD_CLOEXEC.into())
        };
        if fd < 0 {
            return Err(format!("perf_event_open on thread {tid}: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor perf_event_open just returned, owned here only.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = page * (1 + DATA_PAGES);
        // SAFETY: a fresh shared mapping of the event's ring; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "mmap of the perf ring of thread {tid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Ring { fd, base: base.cast(), len, page })
    }

    /// The first sample record in the ring, if one is there yet.
    fn first_sample(&self) -> Option<Result<Sample, String>> {
        let meta = self.base.cast::<pe::perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the event's metadata
        // page; data_head is written by the kernel (read volatile, then
        // an acquire fence before reading the data it covers).
        let head = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*meta).data_head)) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let size = self.len - self.page;
        // SAFETY: the data area is the `size` bytes after the first page.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.page), size) };
        // The ring is never consumed: records start at 0 and the first
        // samples do not wrap (two fit); copy what has been written.
        let written = usize::try_from(head).unwrap_or(usize::MAX).min(size);
        let bytes = data[..written].to_vec();
        first_sample_in(&bytes)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in open, not used after this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The first PERF_RECORD_SAMPLE in `ring` (records as the kernel writes
/// them for this module's attr: tid, user registers, user stack). None
/// while there is none; an error for a record that does not parse.
fn first_sample_in(ring: &[u8]) -> Option<Result<Sample, String>> {
    let mut at = 0usize;
    while at + 8 <= ring.len() {
        let kind = u32::from_ne_bytes(ring[at..at + 4].try_into().ok()?);
        let size = usize::from(u16::from_ne_bytes(ring[at + 6..at + 8].try_into().ok()?));
        if size < 8 || at + size > ring.len() {
            return None; // not written in full yet
        }
        if kind == pe::PERF_RECORD_SAMPLE {
            return Some(parse_sample(&ring[at + 8..at + size]));
        }
        at += size; // PERF_RECORD_LOST, THROTTLE...
    }
    None
}

/// A sample record's body: pid, tid (u32 each); abi (u64) and, unless the
/// abi is NONE, bp, sp, ip; the stack's size (u64), that many bytes and
/// the size of what was copied (u64).
fn parse_sample(body: &[u8]) -> Result<Sample, String> {
    let mut at = 0usize;
    let u64_at = |at: &mut usize| -> Result<u64, String> {
        let v = body.get(*at..*at + 8).ok_or("a sample record shorter than its fields")?;
        *at += 8;
        Ok(u64::from_ne_bytes(v.try_into().map_err(|_| "short")?))
    };
    let _pid_tid = u64_at(&mut at)?;
    let abi = u64_at(&mut at)?;
    if abi == u64::from(pe::PERF_SAMPLE_REGS_ABI_NONE) {
        return Err("the sample holds no user registers (the thread was in the kernel)".into());
    }
    let regs = Regs { bp: u64_at(&mut at)?, sp: u64_at(&mut at)?, ip: u64_at(&mut at)? };
    let size = usize::try_from(u64_at(&mut at)?).map_err(|_| "stack size")?;
    if size == 0 {
        return Err("the sample holds no user stack".into());
    }
    let stack = body.get(at..at + size).ok_or("a sample record shorter than its stack")?;
    at += size;
    let dyn_size = usize::try_from(u64_at(&mut at)?).map_err(|_| "stack size")?.min(size);
    Ok(Sample { regs, stack: stack[..dyn_size].to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend(0u16.to_ne_bytes());
        r.extend(((8 + body.len()) as u16).to_ne_bytes());
        r.extend(body);
        r
    }

    fn sample_body(abi: u64, stack: &[u8], dyn_size: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [7u64, abi, 0x10, 0x7ff0, 0x401000, stack.len() as u64] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(stack);
        b.extend(dyn_size.to_ne_bytes());
        b
    }

    #[test]
    fn a_sample_after_other_records_is_read() {
        let mut ring = record(pe::PERF_RECORD_THROTTLE, &[0; 16]);
        ring.extend(record(
            pe::PERF_RECORD_SAMPLE,
            &sample_body(2, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], 12),
        ));
        let s = first_sample_in(&ring).unwrap().unwrap();
        assert_eq!(s.regs, Regs { bp: 0x10, sp: 0x7ff0, ip: 0x401000 });
        assert_eq!(s.stack, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], "only the bytes copied");
    }

    #[test]
    fn partial_or_empty_rings_have_no_sample_yet() {
        assert!(first_sample_in(&[]).is_none());
        let r = record(pe::PERF_RECORD_SAMPLE, &sample_body(2, &[0; 8], 8));
        assert!(first_sample_in(&r[..r.len() - 1]).is_none());
    }

    #[test]
    fn samples_without_user_state_say_so() {
        let r = record(
            pe::PERF_RECORD_SAMPLE,
            &7u64.to_ne_bytes().into_iter().chain(0u64.to_ne_bytes()).collect::<Vec<_>>(),
        );
        assert!(first_sample_in(&r).unwrap().unwrap_err().contains("no user registers"));
        let r = record(pe::PERF_RECORD_SAMPLE, &sample_body(2, &[], 0)[..48]);
        assert!(first_sample_in(&r).unwrap().unwrap_err().contains("no user stack"));
        let r = record(pe::PERF_RECORD_SAMPLE, &sample_body(2, &[0; 16], 16)[..50]);
        assert!(first_sample_in(&r).unwrap().is_err());
    }
}
