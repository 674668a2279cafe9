//! The target maps: which processes, names and cgroups the programs trace.
//!
//! The kernel keeps `target_processes` current by itself (forks inherit,
//! exec re-checks names, exit removes); the daemon seeds it from the
//! resolved [`Targets`] and from a scan of /proc for processes whose name
//! already matches a --comm target.

use aya::maps::{HashMap, Map, MapData};
use sonic_probe_common::{comm_bytes, CommKey, TARGET_COMM, TARGET_FOLLOW_FORKS, TARGET_PID};
use sonic_probe_ebpf::maps;

use super::{map_err, ProbeError};
use crate::{os::procfs, probe::targets::Targets};

pub struct TargetMaps {
    processes: HashMap<MapData, u32, u32>,
    threads: HashMap<MapData, u32, u32>,
    comms: HashMap<MapData, CommKey, u32>,
    cgroups: HashMap<MapData, u64, u32>,
}

impl TargetMaps {
    pub(super) fn new(processes: Map, threads: Map, comms: Map, cgroups: Map) -> Result<Self, ProbeError> {
        Ok(TargetMaps {
            processes: HashMap::try_from(processes).map_err(map_err(maps::TARGET_PROCESSES))?,
            threads: HashMap::try_from(threads).map_err(map_err(maps::TARGET_THREADS))?,
            comms: HashMap::try_from(comms).map_err(map_err(maps::TARGET_COMMS))?,
            cgroups: HashMap::try_from(cgroups).map_err(map_err(maps::TARGET_CGROUPS))?,
        })
    }

    /// Traces thread `tid` of a process entered with TARGET_THREADS_ONLY.
    pub fn add_thread(&mut self, tid: u32) -> Result<(), ProbeError> {
        self.threads.insert(tid, 1, 0).map_err(map_err(maps::TARGET_THREADS))
    }

    /// Adds `flags` to a process's TARGET_* flags.
    pub fn add_process(&mut self, tgid: u32, flags: u32) -> Result<(), ProbeError> {
        let old = self.processes.get(&tgid, 0).unwrap_or(0);
        self.processes.insert(tgid, old | flags, 0).map_err(map_err(maps::TARGET_PROCESSES))
    }

    /// Writes the --pid, --comm and --cgroup targets (not yet the processes
    /// matching --comm: see [`TargetMaps::scan_comms`]).
    pub fn apply(&mut self, targets: &Targets) -> Result<(), ProbeError> {
        for p in &targets.pids {
            self.add_process(p.tgid, TARGET_PID | TARGET_FOLLOW_FORKS)?;
        }
        for c in &targets.comms {
            let key = CommKey { comm: comm_bytes(c) };
            self.comms.insert(key, 1, 0).map_err(map_err(maps::TARGET_COMMS))?;
        }
        for c in &targets.cgroups {
            self.cgroups.insert(c.id, 1, 0).map_err(map_err(maps::TARGET_CGROUPS))?;
        }
        Ok(())
    }

    /// Marks running processes whose name is one of `comms` as targets.
    /// Call after the exec program is attached, so that a process that
    /// execs during the scan is caught by one or the other. Returns how many
    /// processes matched.
    pub fn scan_comms(&mut self, comms: &[String]) -> Result<usize, ProbeError> {
        if comms.is_empty() {
            return Ok(0);
        }
        let mut found = 0;
        for pid in procfs::processes().unwrap_or_default() {
            if pid == std::process::id() {
                continue;
            }
            let Ok(name) = procfs::comm_of(pid) else {
                continue;
            };
            if comms.contains(&name) {
                self.add_process(pid, TARGET_COMM)?;
                found += 1;
            }
        }
        Ok(found)
    }

    /// Removes `flags` from a process's TARGET_* flags (the entry goes when
    /// none is left).
    pub fn remove_flags(&mut self, tgid: u32, flags: u32) -> Result<(), ProbeError> {
        let Ok(old) = self.processes.get(&tgid, 0) else { return Ok(()) };
        let new = old & !flags;
        if new == 0 {
            let _ = self.processes.remove(&tgid);
            Ok(())
        } else {
            self.processes.insert(tgid, new, 0).map_err(map_err(maps::TARGET_PROCESSES))
        }
    }

    /// Replaces the targets `old` with `new` (SIGHUP). Processes a removed
    /// --pid target forked before stay targets until they exit.
    pub fn reload(&mut self, old: &Targets, new: &Targets) -> Result<(), ProbeError> {
        for p in old.pids.iter().filter(|p| !new.pids.iter().any(|q| q.tgid == p.tgid)) {
            self.remove_flags(p.tgid, TARGET_PID | TARGET_FOLLOW_FORKS)?;
        }
        for c in old.comms.iter().filter(|c| !new.comms.contains(c)) {
            let _ = self.comms.remove(&CommKey { comm: comm_bytes(c) });
        }
        for c in old.cgroups.iter().filter(|c| !new.cgroups.iter().any(|d| d.id == c.id)) {
            let _ = self.cgroups.remove(&c.id);
        }
        self.apply(new)?;
        // Processes matched by a name that is no longer a target.
        let by_name: Vec<u32> = self
            .processes
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, f)| f & TARGET_COMM != 0)
            .map(|(t, _)| t)
            .collect();
        for tgid in by_name {
            if !procfs::comm_of(tgid).is_ok_and(|n| new.comms.contains(&n)) {
                self.remove_flags(tgid, TARGET_COMM)?;
            }
        }
        self.scan_comms(&new.comms)?;
        Ok(())
    }

    /// The processes in the target set now.
    pub fn processes(&self) -> Vec<u32> {
        self.processes.keys().filter_map(|k| k.ok()).collect()
    }

    /// Processes currently in the target set.
    pub fn process_count(&self) -> usize {
        self.processes.keys().filter(|k| k.is_ok()).count()
    }
}
