//! The kernel's BPF run-time statistics, for `cargo xtask bench`: how long
//! each program of a tracer ran per invocation as the kernel itself counts
//! it (`run_time_ns` / `run_cnt` from BPF_OBJ_GET_INFO_BY_FD), a figure the
//! scheduler and the neighbours on a shared 2-vCPU VM do not move the way
//! they move a wall clock.
//!
//! Why BPF_ENABLE_STATS and not the `kernel.bpf_stats_enabled` sysctl: the
//! kernel keeps the statistics on while the descriptor it returns is open
//! (a reference count shared with the sysctl and with other users), so
//! there is nothing to restore afterwards, on error, on panic or even on
//! SIGKILL, and another engineer's use of the sysctl is neither overridden
//! nor switched off under them.

use std::{collections::BTreeMap, os::fd::OwnedFd};

use anyhow::{anyhow, bail, Context, Result};
use aya::programs::{loaded_programs, ProgramFd};

/// Statistics on while this lives.
pub struct StatsOn {
    _fd: OwnedFd,
}

/// Turns the kernel's BPF run-time statistics on until the result is dropped.
pub fn enable() -> Result<StatsOn> {
    let fd =
        aya::sys::enable_stats(aya::sys::Stats::RunTime).context("BPF_ENABLE_STATS (BPF_STATS_RUN_TIME)")?;
    Ok(StatsOn { _fd: fd })
}

/// What a program is to the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs at every system call's entry (raw_syscalls sys_enter).
    Enter,
    /// Runs at every system call's exit (sys_exit).
    Exit,
    /// Anything else (process fork/exec/exit, the scheduler's, the GPU
    /// uprobes): not on the per-call path.
    Other,
}

/// The role of a program by its name: every tracer in the bench names its
/// per-call programs `..._enter` / `..._exit` (floor_enter, minimal_exit,
/// sys_enter, bpftrace's `sys_exit`); sonic-probe's `sched_process_exit`
/// and `task_rename` are lifecycle, and its `gpu_enter_N` / `gpu_exit`
/// uprobes on CUDA's waiting calls (loaded, attached only to a library
/// a target maps), not per system call.
pub fn role(name: &str) -> Role {
    if name.contains("process") || name.starts_with("gpu_") {
        Role::Other
    } else if name.ends_with("enter") {
        Role::Enter
    } else if name.ends_with("exit") {
        Role::Exit
    } else {
        Role::Other
    }
}

/// Counters of one program at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The BPF programs a tracer process holds, held open here too, so that
/// they can still be read after that process ends (`sonic-probe trace`
/// unloads them when its command exits).
pub struct Programs {
    /// (id, name, role, the descriptor that keeps it loaded).
    held: Vec<(u32, String, Role, ProgramFd)>,
}

impl Programs {
    /// The programs process `pid` has descriptors of (the `prog_id:` lines
    /// of its /proc/PID/fdinfo: program and link descriptors alike).
    pub fn of_process(pid: u32) -> Result<Programs> {
        let ids = Self::ids_of(pid)?;
        let mut held = Vec::new();
        for info in loaded_programs() {
            let info = info.context("listing BPF programs")?;
            if ids.contains(&info.id()) {
                let name = info.name_as_str().unwrap_or("").to_string();
                let fd = info.fd().with_context(|| format!("BPF program {} ({name})", info.id()))?;
                held.push((info.id(), name.clone(), role(&name), fd));
            }
        }
        if !held.iter().any(|p| p.2 == Role::Enter) || !held.iter().any(|p| p.2 == Role::Exit) {
            bail!(
                "process {pid} holds no sys_enter/sys_exit programs (found: {:?})",
                held.iter().map(|p| &p.1).collect::<Vec<_>>()
            );
        }
        Ok(Programs { held })
    }

    /// The programs process `pid` holds whose names `wanted` accepts (none
    /// required to run at system calls).
    pub fn of_process_named(pid: u32, wanted: impl Fn(&str) -> bool) -> Result<Programs> {
        let all = Self::ids_of(pid)?;
        let mut held = Vec::new();
        for info in loaded_programs() {
            let info = info.context("listing BPF programs")?;
            let name = info.name_as_str().unwrap_or("").to_string();
            if all.contains(&info.id()) && wanted(&name) {
                let fd = info.fd().with_context(|| format!("BPF program {} ({name})", info.id()))?;
                held.push((info.id(), name.clone(), role(&name), fd));
            }
        }
        if held.is_empty() {
            bail!("process {pid} holds none of the programs asked for");
        }
        Ok(Programs { held })
    }

    /// The program ids process `pid` has descriptors of.
    fn ids_of(pid: u32) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        let dir = format!("/proc/{pid}/fdinfo");
        for e in std::fs::read_dir(&dir).with_context(|| dir.clone())?.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for id in text.lines().filter_map(|l| l.strip_prefix("prog_id:")) {
                if let Ok(id) = id.trim().parse::<u32>() {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
        }
        Ok(ids)
    }

    /// Per program name, the run time per invocation between two
    /// snapshots (programs that did not run are left out).
    pub fn per_program(
        &self,
        before: &BTreeMap<u32, Counter>,
        after: &BTreeMap<u32, Counter>,
    ) -> Vec<(String, f64, u64)> {
        self.held
            .iter()
            .filter_map(|(id, name, _, _)| {
                let (b, a) = (before.get(id)?, after.get(id)?);
                let cnt = a.run_cnt.saturating_sub(b.run_cnt);
                (cnt > 0).then(|| {
                    (name.clone(), a.run_time_ns.saturating_sub(b.run_time_ns) as f64 / cnt as f64, cnt)
                })
            })
            .collect()
    }

    /// The counters of every held program now, by id.
    pub fn snapshot(&self) -> Result<BTreeMap<u32, Counter>> {
        let mut out = BTreeMap::new();
        for info in loaded_programs() {
            let info = info.context("listing BPF programs")?;
            if self.held.iter().any(|p| p.0 == info.id()) {
                out.insert(
                    info.id(),
                    Counter { run_time_ns: info.run_time().as_nanos() as u64, run_cnt: info.run_count() },
                );
            }
        }
        if out.len() != self.held.len() {
            bail!("some held BPF programs were not listed");
        }
        Ok(out)
    }

    /// Per role, the run time per invocation between two snapshots, summed
    /// over the programs of that role, and the invocations of the first
    /// program of the role.
    pub fn per_invocation(
        &self,
        before: &BTreeMap<u32, Counter>,
        after: &BTreeMap<u32, Counter>,
        r: Role,
    ) -> Result<(f64, u64)> {
        let mut ns = 0.0;
        let mut invocations = None;
        for (id, name, role, _) in &self.held {
            if *role != r {
                continue;
            }
            let (b, a) = (before[id], after[id]);
            let cnt = a.run_cnt.saturating_sub(b.run_cnt);
            if cnt == 0 {
                return Err(anyhow!("BPF program {name} ran 0 times with statistics on"));
            }
            ns += a.run_time_ns.saturating_sub(b.run_time_ns) as f64 / cnt as f64;
            invocations.get_or_insert(cnt);
        }
        invocations.map(|n| (ns, n)).ok_or_else(|| anyhow!("no {r:?} program"))
    }

    /// Whether any held program counted runs between two snapshots.
    pub fn ran(before: &BTreeMap<u32, Counter>, after: &BTreeMap<u32, Counter>) -> bool {
        after.iter().any(|(id, a)| before.get(id).is_some_and(|b| a.run_cnt != b.run_cnt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_by_name() {
        for n in ["floor_enter", "minimal_enter", "sys_enter"] {
            assert_eq!(role(n), Role::Enter, "{n}");
        }
        for n in ["floor_exit", "minimal_exit", "sys_exit"] {
            assert_eq!(role(n), Role::Exit, "{n}");
        }
        for n in [
            "sched_process_exit",
            "sched_process_fork",
            "sched_process_exec",
            "task_rename",
            "gpu_exit",
            "gpu_enter_1",
        ] {
            assert_eq!(role(n), Role::Other, "{n}");
        }
    }
}
