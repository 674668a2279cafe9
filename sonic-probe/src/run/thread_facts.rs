//! What the cpu_starved detector asks of the host, answered from /proc and
//! the cgroup filesystems: a running process of a name in a cgroup (and
//! how long it has run), a cgroup's CPU limit and throttled time, a
//! workload's label.
//!
//! The CPU limit is the one over the cgroup, its own or an ancestor's
//! (os::cgroup_cpu, through the scheduler programs' store, which the
//! throttling metric reads too).
//!
//! Only asked for request threads already over the run-queue share, so a
//! /proc walk is rare; its answers are kept per (cgroup, name) while the
//! process lives.

use std::{
    collections::HashMap,
    fs,
    sync::{Arc, Mutex},
};

use crate::{
    findings::cpu_starved::ThreadFacts,
    os::{cgroup_cpu::CpuThrottle, procfs},
    threads::ThreadTimeStore,
    workloads::Workloads,
};

/// Answers from the host, for one sweep.
pub struct HostFacts<'a> {
    pub workloads: &'a Arc<Mutex<Workloads>>,
    /// (cgroup, name) -> pid found by an earlier walk.
    pub known: &'a mut HashMap<(u64, String), u32>,
    /// The scheduler programs' store, which knows the CPU limits.
    pub store: &'a ThreadTimeStore,
}

/// Seconds the process has run: now (CLOCK_BOOTTIME) less its start
/// (field 22 of /proc/PID/stat, in clock ticks since boot).
fn age_ns(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write to.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    Some(now.saturating_sub(ticks * (1_000_000_000 / hz)))
}

/// The process's cgroup v2 path ("0::/path" of /proc/PID/cgroup).
fn cgroup2_path(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string))
}

impl ThreadFacts for HostFacts<'_> {
    fn process(&mut self, cgroup: u64, comm: &str, before_ns: u64) -> Option<u32> {
        let min_age = crate::os::monotonic_ns().saturating_sub(before_ns);
        let path = if cgroup == 0 {
            None
        } else {
            self.workloads.lock().expect("workloads lock").cgroup_path(cgroup)
        };
        let fits = |pid: u32| {
            procfs::comm_of(pid).is_ok_and(|c| c == comm)
                && path.as_ref().is_none_or(|p| cgroup2_path(pid).as_ref() == Some(p))
        };
        let key = (cgroup, comm.to_string());
        let pid = match self.known.get(&key) {
            Some(&pid) if fits(pid) => pid,
            _ => {
                self.known.remove(&key);
                let pid = procfs::processes().ok()?.into_iter().find(|&p| fits(p))?;
                if self.known.len() >= 4096 {
                    self.known.clear();
                }
                self.known.insert(key, pid);
                pid
            }
        };
        // The oldest of its namesakes would do too; the one found is the
        // service's in practice (a churn of namesakes is young).
        (age_ns(pid)? >= min_age).then_some(pid)
    }

    fn throttle(&mut self, cgroup: u64) -> Option<CpuThrottle> {
        self.store.limiting(cgroup).map(|l| l.throttle)
    }

    fn workload(&mut self, cgroup: u64) -> String {
        self.workloads.lock().expect("workloads lock").label(cgroup).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_is_found_with_its_age() {
        let me = std::process::id();
        assert!(age_ns(me).is_some());
        assert!(cgroup2_path(me).is_some_and(|p| p.starts_with('/')));
    }
}
