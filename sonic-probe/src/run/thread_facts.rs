//! What the cpu_starved detector asks of the host, answered from /proc and
//! the cgroup filesystems: a running process of a name in a cgroup (and
//! how long it has run), a cgroup's CPU limit and throttled time, a
//! workload's label.
//!
//! CPU throttling is read where the CPU controller is: the cgroup v2
//! directory's cpu.stat (`throttled_usec`) and cpu.max, or, on hosts whose
//! CPU controller is still on cgroup v1 (Amazon Linux 2, hybrid systemd),
//! the same path in the v1 `cpu` hierarchy: cpu.stat (`throttled_time`),
//! cpu.cfs_quota_us and cpu.cfs_period_us. systemd and the kubelet make
//! a unit's or a pod's cgroup at the same path in every hierarchy.
//!
//! Only asked for request threads already over the run-queue share, so a
//! /proc walk is rare; its answers are kept per (cgroup, name) while the
//! process lives.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use crate::{
    findings::cpu_starved::{CpuThrottle, ThreadFacts},
    os::procfs,
    workloads::Workloads,
};

/// Answers from the host, for one sweep.
pub struct HostFacts<'a> {
    pub workloads: &'a Arc<Mutex<Workloads>>,
    /// (cgroup, name) -> pid found by an earlier walk.
    pub known: &'a mut HashMap<(u64, String), u32>,
    /// The cgroup v1 `cpu` hierarchy's mount, if there is one.
    pub cpu_v1: Option<&'a Path>,
}

/// The cgroup v1 hierarchy with the `cpu` controller, from mountinfo.
pub fn cpu_v1_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        if post.next()? != "cgroup" {
            return None;
        }
        let opts = post.nth(1)?;
        let dir = pre.split_whitespace().nth(4)?;
        opts.split(',').any(|o| o == "cpu").then(|| PathBuf::from(dir))
    })
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

/// A key of a cgroup file (`name value` lines).
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// cgroup v2: cpu.stat's throttled_usec and cpu.max (`max 100000` or
/// `quota period`).
pub fn throttle_v2(dir: &Path) -> Option<CpuThrottle> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let throttled_us = stat_field(&stat, "throttled_usec")?;
    let max = fs::read_to_string(dir.join("cpu.max")).unwrap_or_default();
    let mut it = max.split_whitespace();
    let limit = match (it.next(), it.next().and_then(|p| p.parse::<f64>().ok())) {
        (Some(q), Some(p)) if p > 0.0 => q.parse::<f64>().ok().map(|q| q / p),
        _ => None,
    };
    Some(CpuThrottle { limit_cores: limit, throttled_ns: throttled_us * 1000 })
}

/// cgroup v1: cpu.stat's throttled_time (ns), cpu.cfs_quota_us (-1: none)
/// and cpu.cfs_period_us.
pub fn throttle_v1(dir: &Path) -> Option<CpuThrottle> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let throttled_ns = stat_field(&stat, "throttled_time")?;
    let read = |f: &str| fs::read_to_string(dir.join(f)).ok().and_then(|s| s.trim().parse::<i64>().ok());
    let limit = match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
        (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
        _ => None,
    };
    Some(CpuThrottle { limit_cores: limit, throttled_ns })
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
        let (dir, rel) = {
            let mut w = self.workloads.lock().expect("workloads lock");
            (w.cgroup_dir(cgroup), w.cgroup_path(cgroup))
        };
        if let Some(t) = dir.as_deref().and_then(throttle_v2) {
            return Some(t);
        }
        let v1 = self.cpu_v1?.join(rel?.trim_start_matches('/'));
        throttle_v1(&v1)
    }

    fn workload(&mut self, cgroup: u64) -> String {
        self.workloads.lock().expect("workloads lock").label(cgroup).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_cpu_files_read_as_the_kernel_writes_them() {
        let d = std::env::temp_dir().join(format!("sp-cpu-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("cpu.stat"), "usage_usec 10\nnr_periods 5\nnr_throttled 2\nthrottled_usec 1500\n")
            .unwrap();
        fs::write(d.join("cpu.max"), "20000 100000\n").unwrap();
        assert_eq!(throttle_v2(&d), Some(CpuThrottle { limit_cores: Some(0.2), throttled_ns: 1_500_000 }));
        fs::write(d.join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(throttle_v2(&d).unwrap().limit_cores, None);
        fs::write(d.join("cpu.stat"), "nr_periods 5\nnr_throttled 2\nthrottled_time 7000\n").unwrap();
        assert_eq!(throttle_v2(&d), None, "v1's cpu.stat has no throttled_usec");
        fs::write(d.join("cpu.cfs_quota_us"), "50000\n").unwrap();
        fs::write(d.join("cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(throttle_v1(&d), Some(CpuThrottle { limit_cores: Some(0.5), throttled_ns: 7000 }));
        fs::write(d.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        assert_eq!(throttle_v1(&d).unwrap().limit_cores, None);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn our_own_process_is_found_with_its_age() {
        let me = std::process::id();
        assert!(age_ns(me).is_some());
        assert!(cgroup2_path(me).is_some_and(|p| p.starts_with('/')));
    }
}
