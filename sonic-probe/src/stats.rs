//! Exact per-(syscall, comm) totals from the kernel's aggregation maps.
//!
//! The kernel counts every traced call in `syscall_stats` and every failure
//! in `syscall_errors`, keyed by process, name and syscall, per CPU. This
//! module reads those maps (at scrape time, the ebpf_exporter way), sums the
//! CPUs and groups by (syscall, comm label). Entries of processes that are
//! gone are *folded*: added to totals kept here, then deleted from the map,
//! so the map only holds live processes and nothing counted is ever lost.
//!
//! A process is gone once /proc/PID is gone (it was reaped): from then on
//! no call can be added to its entries. Zombies stay until reaped.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use aya::{
    maps::{MapData, PerCpuHashMap},
    Pod,
};
use sonic_probe_common::{comm_str, ErrorKey, SharedStruct, StatsKey, SyscallStats, NR_COUNTERS};

use crate::{labels::CommLabels, probe::Aggregates, procfs};

/// Totals of one (syscall, variant, comm label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallKey {
    pub syscall: u16,
    /// futex: the command; read, openat: the FILE_CLASS_*; else 0.
    pub variant: u16,
}

/// What a scrape exports: exact totals since the daemon started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// (call, comm) -> statistics.
    pub calls: BTreeMap<(CallKey, Arc<str>), SyscallStats>,
    /// (syscall, comm, errno) -> failures.
    pub errors: BTreeMap<(u16, Arc<str>, u16), u64>,
}

impl Snapshot {
    /// Statistics of `syscall` for `comm`, all variants together.
    pub fn syscall_totals(&self, syscall: u16, comm: &str) -> Option<SyscallStats> {
        let mut out: Option<SyscallStats> = None;
        for ((k, c), v) in &self.calls {
            if k.syscall == syscall && &**c == comm {
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
    dst.size_total += src.size_total;
    for (d, s) in dst.latency.iter_mut().zip(src.latency.iter()) {
        *d += s;
    }
    for (d, s) in dst.size.iter_mut().zip(src.size.iter()) {
        *d += s;
    }
}

/// The pure part: labels, and the totals of processes that are gone.
pub struct Aggregator {
    labels: Arc<Mutex<CommLabels>>,
    folded: Snapshot,
}

impl Aggregator {
    pub fn new(labels: Arc<Mutex<CommLabels>>) -> Self {
        Aggregator { labels, folded: Snapshot::default() }
    }

    /// Builds a snapshot from the live map entries (already summed over
    /// CPUs); entries for which `gone` holds are folded into the kept totals
    /// and returned for deletion from the maps.
    pub fn snapshot(
        &mut self,
        stats: &[(StatsKey, SyscallStats)],
        errors: &[(ErrorKey, u64)],
        mut gone: impl FnMut(u32) -> bool,
    ) -> (Snapshot, Vec<StatsKey>, Vec<ErrorKey>) {
        let mut snap = self.folded.clone();
        let mut fold_stats = Vec::new();
        let mut fold_errors = Vec::new();
        let mut labels = self.labels.lock().expect("labels lock");
        for (k, v) in stats {
            let label = labels.label(&comm_str(&k.comm));
            let key = (CallKey { syscall: k.syscall, variant: k.variant }, label);
            add_stats(snap.calls.entry(key.clone()).or_insert_with(SyscallStats::zeroed), v);
            if k.tgid != 0 && gone(k.tgid) {
                add_stats(self.folded.calls.entry(key).or_insert_with(SyscallStats::zeroed), v);
                fold_stats.push(*k);
            }
        }
        for (k, v) in errors {
            let label = labels.label(&comm_str(&k.comm));
            let key = (k.syscall, label, k.errno);
            *snap.errors.entry(key.clone()).or_default() += v;
            if k.tgid != 0 && gone(k.tgid) {
                *self.folded.errors.entry(key).or_default() += v;
                fold_errors.push(*k);
            }
        }
        (snap, fold_stats, fold_errors)
    }
}

/// The aggregation maps and what was folded out of them.
pub struct StatsStore {
    maps: Aggregates,
    aggregator: Aggregator,
}

/// Sums of the kernel's COUNTER_* per-CPU counters.
pub type Counters = [u64; NR_COUNTERS as usize];

impl StatsStore {
    pub fn new(maps: Aggregates, labels: Arc<Mutex<CommLabels>>) -> Self {
        StatsStore { maps, aggregator: Aggregator::new(labels) }
    }

    /// Reads the maps, folds the processes that are gone, returns totals.
    pub fn snapshot(&mut self) -> Snapshot {
        let stats = read_summed(&self.maps.stats, |vals: &[SyscallStats]| {
            let mut s = SyscallStats::zeroed();
            vals.iter().for_each(|v| add_stats(&mut s, v));
            s
        });
        let errors = read_summed(&self.maps.errors, |vals: &[u64]| vals.iter().sum());
        let mut liveness: HashMap<u32, bool> = HashMap::new();
        let (snap, fold_stats, fold_errors) = self.aggregator.snapshot(&stats, &errors, |tgid| {
            !*liveness.entry(tgid).or_insert_with(|| procfs::is_alive(tgid))
        });
        for k in &fold_stats {
            let _ = self.maps.stats.remove(k);
        }
        for k in &fold_errors {
            let _ = self.maps.errors.remove(k);
        }
        snap
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

    /// Entries in the kernel maps now (live processes plus overflow entries).
    pub fn live_entries(&self) -> (usize, usize) {
        (
            self.maps.stats.keys().filter(|k| k.is_ok()).count(),
            self.maps.errors.keys().filter(|k| k.is_ok()).count(),
        )
    }
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

    fn key(tgid: u32, comm: &str, syscall: u16) -> StatsKey {
        StatsKey { tgid, syscall, variant: 0, comm: comm_bytes(comm) }
    }

    fn stats(calls: u64, bytes: u64) -> SyscallStats {
        let mut s = SyscallStats::zeroed();
        s.latency[3] = calls;
        s.bytes = bytes;
        s.total_ns = calls * 5000;
        s
    }

    #[test]
    fn processes_with_one_name_add_up() {
        let mut a = Aggregator::new(labels(10));
        let live = [(key(10, "dd", READ), stats(3, 30)), (key(11, "dd", READ), stats(4, 40))];
        let (snap, fs, fe) = a.snapshot(&live, &[], |_| false);
        assert!(fs.is_empty() && fe.is_empty());
        let t = snap.syscall_totals(READ, "dd").unwrap();
        assert_eq!(call_count(&t), 7);
        assert_eq!(t.bytes, 70);
    }

    #[test]
    fn exited_processes_are_folded_and_never_lost() {
        let mut a = Aggregator::new(labels(10));
        let k = key(10, "dd", READ);
        let (s1, fold, _) = a.snapshot(&[(k, stats(3, 30))], &[], |_| true);
        assert_eq!(fold, vec![k]);
        assert_eq!(call_count(&s1.syscall_totals(READ, "dd").unwrap()), 3);
        // The entry was deleted from the map; the next scrape still has it.
        let (s2, fold, _) = a.snapshot(&[], &[], |_| true);
        assert!(fold.is_empty());
        assert_eq!(s2, s1);
        // A new process with the same pid and name adds to it.
        let (s3, _, _) = a.snapshot(&[(k, stats(1, 10))], &[], |_| false);
        let t = s3.syscall_totals(READ, "dd").unwrap();
        assert_eq!((call_count(&t), t.bytes), (4, 40));
    }

    #[test]
    fn pid_reuse_keeps_each_name() {
        // Same pid, different names (the pid was reused): separate totals.
        let mut a = Aggregator::new(labels(10));
        let (s, _, _) = a.snapshot(
            &[(key(10, "old", READ), stats(2, 0)), (key(10, "new", READ), stats(5, 0))],
            &[],
            |_| false,
        );
        assert_eq!(call_count(&s.syscall_totals(READ, "old").unwrap()), 2);
        assert_eq!(call_count(&s.syscall_totals(READ, "new").unwrap()), 5);
    }

    #[test]
    fn overflow_entries_are_other_and_never_folded() {
        let mut a = Aggregator::new(labels(1));
        let live = [
            (key(0, "", READ), stats(2, 0)),
            (key(5, "a", READ), stats(1, 0)),
            (key(6, "b", READ), stats(4, 0)),
        ];
        let (s, fold, _) = a.snapshot(&live, &[], |_| true);
        assert_eq!(fold.len(), 2, "tgid 0 stays in the map");
        assert_eq!(call_count(&s.syscall_totals(READ, "a").unwrap()), 1);
        assert_eq!(call_count(&s.syscall_totals(READ, "other").unwrap()), 6);
    }

    #[test]
    fn errors_fold_like_calls() {
        let mut a = Aggregator::new(labels(10));
        let ek = ErrorKey { tgid: 9, syscall: 1, errno: 2, comm: comm_bytes("app") };
        let (s1, _, fold) = a.snapshot(&[], &[(ek, 3)], |_| true);
        assert_eq!(fold, vec![ek]);
        let (s2, _, _) = a.snapshot(&[], &[(ek, 1)], |_| false);
        assert_eq!(s1.errors[&(1, Arc::from("app"), 2)], 3);
        assert_eq!(s2.errors[&(1, Arc::from("app"), 2)], 4);
    }
}
