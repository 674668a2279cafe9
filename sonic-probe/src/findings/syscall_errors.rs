//! syscall_errors: failed calls that explain "task failed, please retry"
//! (scenario 5: openat ENOENT or EACCES on a model path, mmap ENOMEM).
//!
//! Rule: every failed call the kernel sends (all syscalls but futex, whose
//! EAGAIN/ETIMEDOUT are ordinary control flow) counts, per process, syscall
//! and errno, except the errnos that mean "try again": EAGAIN (non-blocking
//! I/O), EINTR and the kernel's restart codes (a signal arrived). For openat
//! the last few failing paths are kept, for mmap/munmap the last length.
//! Exact per-process counts are also in sonic_probe_syscall_errors_total.

use std::collections::{HashMap, VecDeque};

use sonic_probe_common::syscalls;

use super::{prune, Detail, Detector, DetectorMetrics, Input, LiveFile, Record, Settings};
use crate::{errno, events::Event};

/// Failing paths kept per finding.
pub const MAX_PATHS: usize = 5;

/// errnos that ask the caller to try again: not failures.
const RETRY: &[u16] = &[libc::EAGAIN as u16, libc::EINTR as u16, 512, 513, 514, 516];

struct ErrState {
    pid: u32,
    comm: String,
    count: u64,
    paths: VecDeque<String>,
    length: Option<u64>,
    first_ns: u64,
    last_ns: u64,
}

pub struct SyscallErrors {
    ignore: Vec<glob::Pattern>,
    window_ns: u64,
    max: usize,
    /// (incarnation, syscall, errno) -> failures.
    errors: HashMap<(u64, u16, u16), ErrState>,
}

impl SyscallErrors {
    pub fn new(s: &Settings) -> Self {
        SyscallErrors {
            ignore: s.ignore_paths.clone(),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
            errors: HashMap::new(),
        }
    }
}

impl Detector for SyscallErrors {
    fn observe(&mut self, input: &Input<'_>, _metrics: &mut DetectorMetrics) {
        let Event::Call(c) = input.event else { return };
        let Some(e) = c.errno() else { return };
        if c.raw.syscall == syscalls::FUTEX || RETRY.contains(&e) {
            return;
        }
        let path = c.path_lossy();
        if path.as_deref().is_some_and(|p| self.ignore.iter().any(|g| g.matches(p))) {
            return;
        }
        let t = c.raw.header.time_ns;
        let st = self.errors.entry((input.incarnation, c.raw.syscall, e)).or_insert_with(|| ErrState {
            pid: c.tgid(),
            comm: c.process_name(),
            count: 0,
            paths: VecDeque::new(),
            length: None,
            first_ns: t,
            last_ns: t,
        });
        st.count += 1;
        st.last_ns = t;
        if let Some(p) = path {
            st.paths.retain(|q| *q != p);
            st.paths.push_back(p);
            if st.paths.len() > MAX_PATHS {
                st.paths.pop_front();
            }
        }
        if matches!(c.raw.syscall, syscalls::MMAP | syscalls::MUNMAP) {
            st.length = Some(c.raw.args[1]);
        }
    }

    fn reconfigure(&mut self, s: &Settings) {
        let fresh = SyscallErrors::new(s);
        self.ignore = fresh.ignore;
        self.window_ns = fresh.window_ns;
        self.max = fresh.max;
    }

    fn findings(&mut self, now_ns: u64, _live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        prune(&mut self.errors, |s| s.last_ns, now_ns.saturating_sub(self.window_ns), self.max);
        for ((_, sc, e), st) in &self.errors {
            out.push(Record {
                detail: Detail::SyscallErrors {
                    syscall: syscalls::by_index(*sc).map_or("?", |s| s.name).to_string(),
                    errno: errno::name(*e),
                    count: st.count,
                    paths: st.paths.iter().cloned().collect(),
                    length: st.length,
                },
                pid: st.pid,
                comm: st.comm.clone(),
                first_ns: st.first_ns,
                last_ns: st.last_ns,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{testing::*, Engine};

    fn found(e: &mut Engine, now: u64) -> Vec<Detail> {
        let mut v: Vec<Detail> = e
            .findings(now, &[])
            .into_iter()
            .filter(|f| f.detail.kind() == "syscall_errors")
            .map(|f| f.detail)
            .collect();
        v.sort_by_key(|d| format!("{d:?}"));
        v
    }

    #[test]
    fn missing_model_paths_and_mmap_enomem() {
        let mut e = Engine::new(&Settings::default());
        for i in 0..7 {
            e.observe(&openat(4, SEC + i, &format!("/models/v{i}/lip_decoder.pth"), -2, 0));
        }
        e.observe(&openat(4, 2 * SEC, "/models/secret.pth", -13, 0));
        e.observe(&Event::Call(call(
            syscalls::MMAP,
            4,
            4,
            3 * SEC,
            100,
            -12,
            [0, 1 << 40, 3, 0x22, u64::MAX, 0],
        )));
        let f = found(&mut e, 4 * SEC);
        assert_eq!(f.len(), 3);
        let Detail::SyscallErrors { syscall, errno, count, length, .. } = &f[0] else { panic!() };
        assert_eq!((syscall.as_str(), errno.as_str(), *count, *length), ("mmap", "ENOMEM", 1, Some(1 << 40)));
        let Detail::SyscallErrors { errno, count, paths, .. } = &f[2] else { panic!() };
        assert_eq!((errno.as_str(), *count), ("ENOENT", 7));
        assert_eq!(paths.len(), MAX_PATHS);
        assert_eq!(paths.last().unwrap(), "/models/v6/lip_decoder.pth");
        let Detail::SyscallErrors { errno, paths, .. } = &f[1] else { panic!() };
        assert_eq!((errno.as_str(), paths.as_slice()), ("EACCES", &["/models/secret.pth".to_string()][..]));
    }

    #[test]
    fn library_probing_is_not_a_failure() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(4, SEC, "/usr/lib/glibc-hwcaps/x86-64-v3/libc.so.6", -2, 0));
        e.observe(&openat(4, SEC, "/opt/py/bin/pybuilddir.txt", -2, 0));
        assert!(found(&mut e, 2 * SEC).is_empty());
    }

    #[test]
    fn retries_and_futex_are_not_failures() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -11, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -4, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -512, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::FUTEX, 4, 4, SEC, 10, -110, [0; 6])));
        assert!(found(&mut e, 2 * SEC).is_empty());
    }
}
