//! Exact per-(syscall, comm) totals from the kernel's aggregation maps.
//!
//! The kernel counts every traced call in `syscall_stats` and every failure
//! in `syscall_errors`, keyed by process name and syscall, per CPU, and
//! never deletes an entry. This module reads those maps (at scrape time, the
//! ebpf_exporter way), sums the CPUs and groups by (syscall, comm label).
//! Counters only grow: an entry's value is the total since the daemon
//! attached, so nothing here keeps state but the label assignment.
//!
//! Keys are checked once, here, as they are read: an entry whose syscall
//! index is not a row of the table (a program built from another table) is
//! left out and counted ([`Snapshot::unknown_keys`]), never a panic later.
//!
//! Keys are names, not processes, on purpose: a burst of short-lived
//! processes would otherwise allocate an entry per process in the kernel,
//! and those allocations fail under load (the calls would end up in the
//! overflow entries, `comm="other"`).

pub mod labels;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aya::{
    maps::{MapData, PerCpuHashMap},
    Pod,
};
use sonic_probe_common::{
    comm_str, syscalls::SyscallId, ErrorKey, SharedStruct, StatsKey, SyscallStats, NR_COUNTERS,
};

use crate::{probe::Aggregates, stats::labels::CommLabels, workloads::Workloads};

/// Totals of one (syscall, variant, comm label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallKey {
    pub syscall: SyscallId,
    /// As the row's variant says: the futex command, a FILE_CLASS_*, or 0.
    pub variant: u16,
}

/// Who made a call: the label values of a per-process series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Who {
    /// The `comm` label (bounded by --max-comms).
    pub comm: Arc<str>,
    /// The `workload` label (bounded by --max-workloads).
    pub workload: Arc<str>,
}

impl Who {
    /// The two labels, as (name, value) pairs.
    pub fn pairs(&self) -> [(&'static str, &str); 2] {
        [("comm", &self.comm), ("workload", &self.workload)]
    }
}

/// What a scrape exports: exact totals since the daemon started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// (call, who) -> statistics.
    pub calls: BTreeMap<(CallKey, Who), SyscallStats>,
    /// (syscall, who, errno) -> failures.
    pub errors: BTreeMap<(SyscallId, Who, u16), u64>,
    /// Map entries left out because their syscall index is no row of the table.
    pub unknown_keys: u64,
}

impl Snapshot {
    /// Statistics of `syscall` for `comm`, all variants and workloads together.
    pub fn syscall_totals(&self, syscall: u16, comm: &str) -> Option<SyscallStats> {
        let mut out: Option<SyscallStats> = None;
        for ((k, who), v) in &self.calls {
            if k.syscall.index() == syscall && &*who.comm == comm {
                add_stats(out.get_or_insert_with(SyscallStats::zeroed), v);
            }
        }
        out
    }
}

/// Number of calls in a statistics entry: each call lands in one bucket.
pub fn call_count(s: &SyscallStats) -> u64 {
    s.latency.iter().sum()
}

pub fn add_stats(dst: &mut SyscallStats, src: &SyscallStats) {
    dst.errors += src.errors;
    dst.total_ns += src.total_ns;
    dst.bytes += src.bytes;
    dst.small += src.small;
    dst.short_calls += src.short_calls;
    dst.size_total += src.size_total;
    for (d, s) in dst.latency.iter_mut().zip(src.latency.iter()) {
        *d += s;
    }
    for (d, s) in dst.size.iter_mut().zip(src.size.iter()) {
        *d += s;
    }
}

/// The pure part: raw names and cgroups to bounded labels, adding up what
/// shares one.
pub struct Aggregator {
    labels: Arc<Mutex<CommLabels>>,
    workloads: Arc<Mutex<Workloads>>,
}

impl Aggregator {
    pub fn new(labels: Arc<Mutex<CommLabels>>, workloads: Arc<Mutex<Workloads>>) -> Self {
        Aggregator { labels, workloads }
    }

    /// Groups the map entries (already summed over CPUs) by label.
    pub fn snapshot(&self, stats: &[(StatsKey, SyscallStats)], errors: &[(ErrorKey, u64)]) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut labels = self.labels.lock().expect("labels lock");
        let mut workloads = self.workloads.lock().expect("workloads lock");
        workloads.next_generation();
        // Overflow entries (no name) are "other" in both labels.
        let mut who = |comm: &[u8; 16], cgroup: u64| {
            let comm = comm_str(comm);
            let workload = if comm.is_empty() { workloads.other() } else { workloads.label(cgroup) };
            Who { comm: labels.label(&comm), workload }
        };
        for (k, v) in stats {
            let Some(syscall) = SyscallId::new(k.syscall) else {
                snap.unknown_keys += 1;
                continue;
            };
            let key = (CallKey { syscall, variant: k.variant }, who(&k.comm, k.cgroup));
            add_stats(snap.calls.entry(key).or_insert_with(SyscallStats::zeroed), v);
        }
        for (k, v) in errors {
            let Some(syscall) = SyscallId::new(k.syscall) else {
                snap.unknown_keys += 1;
                continue;
            };
            *snap.errors.entry((syscall, who(&k.comm, k.cgroup), k.errno)).or_default() += v;
        }
        if snap.unknown_keys > 0 {
            tracing::debug!(
                "{} kernel map entries with an unknown syscall index left out",
                snap.unknown_keys
            );
        }
        snap
    }
}

/// The aggregation maps, read at scrape time.
pub struct StatsStore {
    maps: Aggregates,
    aggregator: Aggregator,
}

/// Sums of the kernel's COUNTER_* per-CPU counters.
pub type Counters = [u64; NR_COUNTERS as usize];

impl StatsStore {
    pub fn new(maps: Aggregates, labels: Arc<Mutex<CommLabels>>, workloads: Arc<Mutex<Workloads>>) -> Self {
        StatsStore { maps, aggregator: Aggregator::new(labels, workloads) }
    }

    /// Reads the maps: totals since attach.
    pub fn snapshot(&self) -> Snapshot {
        let sum = |vals: &[SyscallStats]| {
            let mut s = SyscallStats::zeroed();
            vals.iter().for_each(|v| add_stats(&mut s, v));
            s
        };
        // Keys with a slot, then the rest (a key can be in both: a thread
        // that lost the race for its slot counted in the hash meanwhile;
        // the aggregator adds them up). Each CPU's failures an entry
        // counted itself join syscall_errors' before the CPUs are summed.
        let mut errors = read_summed(&self.maps.errors, |vals: &[u64]| vals.iter().sum());
        let mut stats: Vec<(StatsKey, SyscallStats)> = Vec::new();
        let mut add = |key: StatsKey, vals: &[SyscallStats]| {
            errors.extend(failures_counted_in(&key, vals));
            stats.push((key, sum(vals)));
        };
        for (key, slot) in self.maps.index.iter().filter_map(|r| r.ok()) {
            if let Ok(vals) = self.maps.slots.get(&slot, 0) {
                add(key, &vals);
            }
        }
        for (key, vals) in self.maps.stats.iter().filter_map(|r| r.ok()) {
            add(key, &vals);
        }
        self.aggregator.snapshot(&stats, &errors)
    }

    /// The kernel's counters (drops, overflows, events sent).
    pub fn counters(&self) -> Counters {
        let mut out = [0u64; NR_COUNTERS as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            if let Ok(vals) = self.maps.counters.get(&(i as u32), 0) {
                *slot = vals.iter().sum();
            }
        }
        out
    }

    /// Entries in the kernel maps now.
    pub fn live_entries(&self) -> MapEntries {
        let slotted = self.maps.index.keys().filter(|k| k.is_ok()).count();
        MapEntries {
            stats: slotted + self.maps.stats.keys().filter(|k| k.is_ok()).count(),
            slotted,
            errors: self.maps.errors.keys().filter(|k| k.is_ok()).count(),
        }
    }
}

/// How many entries the aggregation maps hold.
#[derive(Debug, Clone, Copy)]
pub struct MapEntries {
    /// Statistics keys (name, workload, syscall, variant) with or without
    /// a slot, the overflow entries included.
    pub stats: usize,
    /// Those with a slot of stats_slots (at most probe::stats_slots).
    pub slotted: usize,
    /// Error keys, the overflow entries included.
    pub errors: usize,
}

/// The failures a statistics entry counted itself, one CPU's values each
/// (SyscallStats::first_errno), as syscall_errors entries would count them.
fn failures_counted_in<'a>(
    key: &'a StatsKey,
    per_cpu: &'a [SyscallStats],
) -> impl Iterator<Item = (ErrorKey, u64)> + 'a {
    per_cpu.iter().filter(|v| v.first_errno != 0 && v.first_errno_calls != 0).map(move |v| {
        let errno = u16::try_from(v.first_errno).unwrap_or(u16::MAX);
        let ek = ErrorKey {
            syscall: key.syscall,
            errno,
            comm: key.comm,
            cgroup: key.cgroup,
            ..ErrorKey::zeroed()
        };
        (ek, v.first_errno_calls)
    })
}

fn read_summed<K: Pod, V: Pod, T>(
    map: &PerCpuHashMap<MapData, K, V>,
    sum: impl Fn(&[V]) -> T,
) -> Vec<(K, T)> {
    map.iter().filter_map(|r| r.ok()).map(|(k, v)| (k, sum(&v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::{comm_bytes, syscalls::READ};

    fn labels(max: usize) -> Arc<Mutex<CommLabels>> {
        Arc::new(Mutex::new(CommLabels::new(max)))
    }

    fn key(comm: &str, syscall: u16) -> StatsKey {
        StatsKey { syscall, comm: comm_bytes(comm), ..StatsKey::zeroed() }
    }

    fn aggregator(max: usize) -> Aggregator {
        Aggregator::new(labels(max), Arc::new(Mutex::new(Workloads::disabled())))
    }

    fn who(comm: &str) -> Who {
        Who { comm: Arc::from(comm), workload: Arc::from("") }
    }

    fn stats(calls: u64, bytes: u64) -> SyscallStats {
        let mut s = SyscallStats::zeroed();
        s.latency[3] = calls;
        s.bytes = bytes;
        s.total_ns = calls * 5000;
        s
    }

    #[test]
    fn failures_an_entry_counted_itself_become_error_counts_per_cpu() {
        // CPU 0 saw EAGAIN first, CPU 1 ETIMEDOUT, CPU 2 no failure: each
        // CPU's pair is its own (summing the errnos would be nonsense).
        let k = StatsKey { cgroup: 9, ..key("python3", READ) };
        let mut cpus = [SyscallStats::zeroed(); 3];
        (cpus[0].first_errno, cpus[0].first_errno_calls) = (11, 4);
        (cpus[1].first_errno, cpus[1].first_errno_calls) = (110, 2);
        let got: Vec<(u16, u64)> = failures_counted_in(&k, &cpus)
            .inspect(|(ek, _)| {
                assert_eq!((ek.syscall, ek.comm, ek.cgroup), (READ, comm_bytes("python3"), 9));
            })
            .map(|(ek, n)| (ek.errno, n))
            .collect();
        assert_eq!(got, [(11, 4), (110, 2)]);
        // ...and the aggregator adds them to the hash's counts of the same errno.
        let errors: Vec<(ErrorKey, u64)> = failures_counted_in(&k, &cpus)
            .chain([(
                ErrorKey { syscall: READ, errno: 11, comm: k.comm, cgroup: 9, ..ErrorKey::zeroed() },
                1,
            )])
            .collect();
        let snap = aggregator(10).snapshot(&[], &errors);
        let eagain = snap.errors.iter().find(|((_, _, e), _)| *e == 11).map(|(_, n)| *n);
        assert_eq!(eagain, Some(5));
        // The summed statistics carry no errno.
        let mut total = SyscallStats::zeroed();
        cpus.iter().for_each(|c| add_stats(&mut total, c));
        assert_eq!((total.first_errno, total.first_errno_calls), (0, 0));
    }

    #[test]
    fn variants_of_one_name_add_up() {
        let a = aggregator(10);
        let mut other_class = key("dd", READ);
        other_class.variant = 2;
        let live = [(key("dd", READ), stats(3, 30)), (other_class, stats(4, 40))];
        let snap = a.snapshot(&live, &[]);
        let t = snap.syscall_totals(READ, "dd").unwrap();
        assert_eq!(call_count(&t), 7);
        assert_eq!(t.bytes, 70);
        assert_eq!(snap.calls.len(), 2, "variants stay apart");
    }

    #[test]
    fn each_name_keeps_its_totals() {
        let a = aggregator(10);
        let s = a.snapshot(&[(key("old", READ), stats(2, 0)), (key("new", READ), stats(5, 0))], &[]);
        assert_eq!(call_count(&s.syscall_totals(READ, "old").unwrap()), 2);
        assert_eq!(call_count(&s.syscall_totals(READ, "new").unwrap()), 5);
    }

    #[test]
    fn overflow_entries_and_names_beyond_the_limit_are_other() {
        let a = aggregator(1);
        let live =
            [(key("", READ), stats(2, 0)), (key("a", READ), stats(1, 0)), (key("b", READ), stats(4, 0))];
        let s = a.snapshot(&live, &[]);
        assert_eq!(call_count(&s.syscall_totals(READ, "a").unwrap()), 1);
        assert_eq!(call_count(&s.syscall_totals(READ, "other").unwrap()), 6);
        // The assignment is sticky: "a" keeps its label on the next scrape.
        let s = a.snapshot(&[(key("b", READ), stats(4, 0)), (key("a", READ), stats(2, 0))], &[]);
        assert_eq!(call_count(&s.syscall_totals(READ, "a").unwrap()), 2);
    }

    #[test]
    fn one_name_in_two_workloads_is_two_series_with_exact_totals() {
        use std::os::unix::fs::MetadataExt;
        let root = std::env::temp_dir().join(format!("sp-stats-workloads-{}", std::process::id()));
        let mkdir = |rel: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::metadata(&p).unwrap().ino()
        };
        let a = mkdir("system.slice/a.service");
        let b = mkdir("system.slice/b.service");
        let w = Workloads::with(Some(root.clone()), None, None, 10);
        let agg = Aggregator::new(labels(10), Arc::new(Mutex::new(w)));
        let in_cgroup = |id: u64, n: u64| (StatsKey { cgroup: id, ..key("python3", READ) }, stats(n, 0));
        let s = agg.snapshot(&[in_cgroup(a, 3), in_cgroup(b, 4), in_cgroup(a, 0)], &[]);
        let _ = std::fs::remove_dir_all(&root);
        let count = |w: &str| {
            let who = Who { comm: Arc::from("python3"), workload: Arc::from(w) };
            call_count(&s.calls[&(CallKey { syscall: SyscallId::new(READ).unwrap(), variant: 0 }, who)])
        };
        assert_eq!((count("a.service"), count("b.service")), (3, 4));
        assert_eq!(call_count(&s.syscall_totals(READ, "python3").unwrap()), 7);
    }

    #[test]
    fn errors_group_like_calls() {
        let a = aggregator(10);
        let ek = ErrorKey { syscall: 1, errno: 2, comm: comm_bytes("app"), ..ErrorKey::zeroed() };
        let ek2 = ErrorKey { syscall: 1, errno: 2, ..ErrorKey::zeroed() };
        let s = a.snapshot(&[], &[(ek, 3), (ek2, 1)]);
        let openat = SyscallId::new(1).unwrap();
        assert_eq!(s.errors[&(openat, who("app"), 2)], 3);
        let other = Who { comm: Arc::from("other"), workload: Arc::from("other") };
        assert_eq!(s.errors[&(openat, other, 2)], 1);
    }

    #[test]
    fn a_key_with_an_unknown_syscall_is_left_out() {
        let a = aggregator(10);
        let bad = ErrorKey { syscall: 999, errno: 2, comm: comm_bytes("app"), ..ErrorKey::zeroed() };
        let s = a.snapshot(&[(key("app", 999), stats(3, 0)), (key("app", READ), stats(1, 0))], &[(bad, 1)]);
        assert_eq!(s.unknown_keys, 2);
        assert_eq!(s.calls.len(), 1);
        assert!(s.errors.is_empty());
    }
}
