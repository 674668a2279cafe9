//! Where each watched thread's time goes: the kernel's exact totals per
//! (workload, process name, thread name) and state, labelled.
//!
//! The scheduler programs (sonic-probe-ebpf's bpf/thread_time.h) add every
//! nanosecond of a watched thread's life to one THREAD_* state of its slot
//! in the per-CPU array thread_time_slots, found through thread_time_index.
//! This module reads both at scrape time, sums the CPUs and groups by the
//! labels: `comm` and `workload` as the call statistics have them
//! (stats::labels, workloads), and `thread`, the thread's own name,
//! bounded per process name by --max-thread-names (further names are
//! thread="other", counted in [`ThreadNames::folded`]). Slot 0, where the
//! kernel counts what found no slot, is comm="other" thread="other".
//!
//! Beside the states, the CPU limit over each watched thread's cgroup
//! ([`ThreadTimeStore::limits`], os::cgroup_cpu): its throttled time tells
//! a run queue a limit made from one a busy node made.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex},
};

use sonic_probe_common::{comm_str, ThreadTimeKey, ThreadTimes, NR_THREAD_STATES};

use crate::{
    os::cgroup_cpu::{CpuLimits, Limiting},
    probe::ThreadTimeMaps,
    stats::labels::{CommLabels, OTHER},
    workloads::Workloads,
};

/// The `state` label of each THREAD_* index.
pub const STATES: [&str; NR_THREAD_STATES as usize] =
    ["on_cpu", "runqueue", "futex", "file", "socket", "pipe", "gpu", "poll", "sleep", "other"];

/// The labels of one series group: (workload, comm, thread).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadWho {
    pub workload: Arc<str>,
    pub comm: Arc<str>,
    pub thread: Arc<str>,
}

/// Nanoseconds per state, summed over CPUs and over the kernel keys that
/// share the labels.
pub type StateNs = [u64; NR_THREAD_STATES as usize];

/// One (workload, process name, thread name) as the scheduler programs
/// total it: nanoseconds per state since its slot was taken.
#[derive(Debug, Clone)]
pub struct ThreadSample {
    pub cgroup: u64,
    pub comm: String,
    pub thread: String,
    pub ns: StateNs,
    /// On each CPU: [on CPU, waiting for it] (a waiting thread's time is
    /// added on the CPU that ran it next: the one it waited for).
    pub per_cpu: Vec<[u64; 2]>,
}

/// Bounded values of the `thread` label: per comm label, the first `max`
/// thread names keep their own label for the daemon's lifetime; later ones
/// are "other". Memory is bounded by the kernel's slots (each distinct
/// name needs one).
#[derive(Debug)]
pub struct ThreadNames {
    max: usize,
    known: HashMap<Arc<str>, HashSet<Arc<str>>>,
    folded: HashSet<(Arc<str>, String)>,
    other: Arc<str>,
}

impl ThreadNames {
    pub fn new(max: usize) -> Self {
        ThreadNames { max, known: HashMap::new(), folded: HashSet::new(), other: Arc::from(OTHER) }
    }

    /// The label of thread name `thread` of process name label `comm`.
    pub fn label(&mut self, comm: &Arc<str>, thread: &str) -> Arc<str> {
        if thread.is_empty() || &**comm == OTHER {
            return self.other.clone();
        }
        let names = self.known.entry(comm.clone()).or_default();
        if let Some(k) = names.get(thread) {
            return k.clone();
        }
        if names.len() < self.max {
            let k: Arc<str> = Arc::from(thread);
            names.insert(k.clone());
            return k;
        }
        self.folded.insert((comm.clone(), thread.to_string()));
        self.other.clone()
    }

    /// Distinct (process name, thread name) exported as thread="other"
    /// because their process name had --max-thread-names names already.
    pub fn folded(&self) -> usize {
        self.folded.len()
    }
}

/// Groups the kernel's entries (already summed over CPUs) by label.
pub struct ThreadAggregator {
    comms: Arc<Mutex<CommLabels>>,
    pub workloads: Arc<Mutex<Workloads>>,
    names: Mutex<ThreadNames>,
}

impl ThreadAggregator {
    pub fn new(
        comms: Arc<Mutex<CommLabels>>,
        workloads: Arc<Mutex<Workloads>>,
        max_thread_names: usize,
    ) -> Self {
        ThreadAggregator { comms, workloads, names: Mutex::new(ThreadNames::new(max_thread_names)) }
    }

    pub fn group(&self, entries: &[(ThreadTimeKey, ThreadTimes)]) -> BTreeMap<ThreadWho, StateNs> {
        let mut out: BTreeMap<ThreadWho, StateNs> = BTreeMap::new();
        let mut comms = self.comms.lock().expect("comm labels lock");
        let mut workloads = self.workloads.lock().expect("workloads lock");
        let mut names = self.names.lock().expect("thread names lock");
        for (k, t) in entries {
            let comm_name = comm_str(&k.comm);
            let (comm, workload) = if comm_name.is_empty() {
                (comms.label(""), workloads.other())
            } else {
                (comms.label(&comm_name), workloads.label(k.cgroup))
            };
            let thread = names.label(&comm, &comm_str(&k.thread));
            let sum = out.entry(ThreadWho { workload, comm, thread }).or_default();
            for (s, v) in sum.iter_mut().zip(t.ns.iter()) {
                *s += v;
            }
        }
        out
    }

    /// See [`ThreadNames::folded`].
    pub fn folded(&self) -> usize {
        self.names.lock().expect("thread names lock").folded()
    }
}

/// The maps, read at scrape time.
pub struct ThreadTimeStore {
    maps: ThreadTimeMaps,
    pub aggregator: ThreadAggregator,
    limits: Mutex<CpuLimits>,
}

/// The CPU limit over some watched threads, once per (workload, limited
/// cgroup).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadLimit {
    pub workload: Arc<str>,
    pub limit: Limiting,
}

impl ThreadTimeStore {
    pub fn new(maps: ThreadTimeMaps, aggregator: ThreadAggregator, limits: CpuLimits) -> Self {
        ThreadTimeStore { maps, aggregator, limits: Mutex::new(limits) }
    }

    /// The CPU limit over cgroup id `cgroup` (its own or its nearest
    /// limited ancestor's), with its throttled time now.
    pub fn limiting(&self, cgroup: u64) -> Option<Limiting> {
        if cgroup == 0 {
            return None;
        }
        let path = self.aggregator.workloads.lock().expect("workloads lock").cgroup_path(cgroup)?;
        self.limits.lock().expect("cpu limits lock").limiting(&path)
    }

    /// The CPU limits over the cgroups of the threads with slots, each
    /// limited cgroup once per workload label (two cgroups of one workload
    /// under one limit are one series).
    pub fn limits(&self) -> Vec<WorkloadLimit> {
        let mut cgroups: Vec<u64> =
            self.maps.index.keys().filter_map(|k| k.ok()).map(|k| k.cgroup).filter(|&c| c != 0).collect();
        cgroups.sort_unstable();
        cgroups.dedup();
        let named: Vec<(Arc<str>, String)> = {
            let mut w = self.aggregator.workloads.lock().expect("workloads lock");
            cgroups.into_iter().filter_map(|c| Some((w.label(c), w.cgroup_path(c)?))).collect()
        };
        let mut limits = self.limits.lock().expect("cpu limits lock");
        let mut out: Vec<WorkloadLimit> = named
            .into_iter()
            .filter_map(|(workload, path)| Some(WorkloadLimit { workload, limit: limits.limiting(&path)? }))
            .collect();
        out.sort_by(|a, b| (&a.workload, &a.limit.cgroup).cmp(&(&b.workload, &b.limit.cgroup)));
        out.dedup_by(|a, b| a.workload == b.workload && a.limit.cgroup == b.limit.cgroup);
        out
    }

    /// Every slot in use (the overflow slot 0 with an all-zero key), summed
    /// over CPUs.
    pub fn read(&self) -> Vec<(ThreadTimeKey, ThreadTimes)> {
        let sum = |slot: u32| {
            let mut t = ThreadTimes { ns: [0; NR_THREAD_STATES as usize] };
            if let Ok(vals) = self.maps.slots.get(&slot, 0) {
                for v in vals.iter() {
                    for (s, x) in t.ns.iter_mut().zip(v.ns.iter()) {
                        *s += x;
                    }
                }
            }
            t
        };
        let zero = ThreadTimeKey { cgroup: 0, comm: [0; 16], thread: [0; 16] };
        let mut out = vec![(zero, sum(0))];
        for (key, slot) in self.maps.index.iter().filter_map(|r| r.ok()) {
            if slot != 0 {
                out.push((key, sum(slot)));
            }
        }
        out
    }

    /// Slots taken (thread_time_index entries).
    pub fn slots_in_use(&self) -> usize {
        self.maps.index.keys().filter(|k| k.is_ok()).count()
    }

    /// Every slot in use as the cpu_starved detector takes them (raw names
    /// and cgroup ids, and on each CPU the time on it and waiting for it;
    /// the overflow slot has no name).
    pub fn samples(&self) -> Vec<ThreadSample> {
        use sonic_probe_common::{THREAD_ON_CPU, THREAD_RUNQUEUE};
        let zero = ThreadTimeKey { cgroup: 0, comm: [0; 16], thread: [0; 16] };
        let slots = std::iter::once((zero, 0))
            .chain(self.maps.index.iter().filter_map(|r| r.ok()).filter(|(_, slot)| *slot != 0));
        slots
            .filter_map(|(k, slot)| {
                let vals = self.maps.slots.get(&slot, 0).ok()?;
                let mut ns = [0; NR_THREAD_STATES as usize];
                let mut per_cpu = Vec::with_capacity(vals.len());
                for v in vals.iter() {
                    for (s, x) in ns.iter_mut().zip(v.ns.iter()) {
                        *s += x;
                    }
                    per_cpu.push([v.ns[THREAD_ON_CPU as usize], v.ns[THREAD_RUNQUEUE as usize]]);
                }
                Some(ThreadSample {
                    cgroup: k.cgroup,
                    comm: comm_str(&k.comm).to_string(),
                    thread: comm_str(&k.thread).to_string(),
                    ns,
                    per_cpu,
                })
            })
            .collect()
    }

    pub fn snapshot(&self) -> BTreeMap<ThreadWho, StateNs> {
        self.aggregator.group(&self.read())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::{comm_bytes, THREAD_FUTEX, THREAD_ON_CPU};

    fn key(comm: &str, thread: &str) -> ThreadTimeKey {
        ThreadTimeKey { cgroup: 0, comm: comm_bytes(comm), thread: comm_bytes(thread) }
    }

    fn times(state: u32, ns: u64) -> ThreadTimes {
        let mut t = ThreadTimes { ns: [0; NR_THREAD_STATES as usize] };
        t.ns[state as usize] = ns;
        t
    }

    fn aggregator(max_comms: usize, max_threads: usize) -> ThreadAggregator {
        ThreadAggregator::new(
            Arc::new(Mutex::new(CommLabels::new(max_comms))),
            Arc::new(Mutex::new(Workloads::disabled())),
            max_threads,
        )
    }

    fn who(comm: &str, thread: &str) -> ThreadWho {
        ThreadWho { workload: Arc::from(""), comm: Arc::from(comm), thread: Arc::from(thread) }
    }

    #[test]
    fn the_state_labels_follow_the_kernels_indices() {
        assert_eq!(STATES[THREAD_ON_CPU as usize], "on_cpu");
        assert_eq!(STATES[THREAD_FUTEX as usize], "futex");
        assert_eq!(STATES[sonic_probe_common::THREAD_RUNQUEUE as usize], "runqueue");
        assert_eq!(STATES[sonic_probe_common::THREAD_OTHER as usize], "other");
    }

    #[test]
    fn threads_of_one_name_add_up_and_names_beyond_the_limit_are_other() {
        let a = aggregator(10, 2);
        let got = a.group(&[
            (key("python3", "loader"), times(THREAD_ON_CPU, 5)),
            (key("python3", "loader"), times(THREAD_FUTEX, 7)),
            (key("python3", "python3"), times(THREAD_ON_CPU, 1)),
            (key("python3", "pt_autograd_0"), times(THREAD_ON_CPU, 3)),
            (key("python3", "pt_autograd_1"), times(THREAD_ON_CPU, 4)),
            (key("dd", "dd"), times(THREAD_ON_CPU, 9)),
        ]);
        assert_eq!(got[&who("python3", "loader")][THREAD_ON_CPU as usize], 5);
        assert_eq!(got[&who("python3", "loader")][THREAD_FUTEX as usize], 7);
        assert_eq!(got[&who("python3", "python3")][THREAD_ON_CPU as usize], 1);
        // Per process name: dd's one name has its own label.
        assert_eq!(got[&who("python3", "other")][THREAD_ON_CPU as usize], 7);
        assert_eq!(got[&who("dd", "dd")][THREAD_ON_CPU as usize], 9);
        assert_eq!(a.folded(), 2);
        // Sticky: the names that had a label keep it.
        let again = a.group(&[(key("python3", "pt_autograd_0"), times(THREAD_ON_CPU, 1))]);
        assert_eq!(again.keys().next().map(|w| &*w.thread), Some("other"));
    }

    #[test]
    fn the_overflow_slot_is_other_everywhere() {
        let a = aggregator(10, 10);
        let got = a.group(&[(key("", ""), times(THREAD_ON_CPU, 4))]);
        let w =
            ThreadWho { workload: Arc::from("other"), comm: Arc::from("other"), thread: Arc::from("other") };
        assert_eq!(got[&w][THREAD_ON_CPU as usize], 4);
    }
}
