//! The detectors' working state, bounded so that churn cannot push out a
//! service's problems.
//!
//! Watching a whole host, a detector sees thousands of paths, errors and
//! mappings that never become findings: one-off opens of short-lived tools,
//! start-up probes. Bounding that state by "keep the most recently touched"
//! let such churn evict a service's entries, findings included. Here:
//!
//! - A state that has become a finding (*reported*) is never evicted to make
//!   room for working state; findings are bounded on their own, by
//!   `--max-findings` and `--findings-window` ([`StateMap::prune`]).
//! - Working state of a process that exited is dropped at once: every key
//!   holds the process incarnation, so it can never become a finding.
//! - When working state exceeds its cap, eviction is fair between processes:
//!   each process's states are ranked (most useful first: touched more than
//!   once, then most recently seen) and the lowest ranks go first over all
//!   processes, so a process holding thousands of states loses its own
//!   before a process holding a few loses any.
//!
//! Every eviction is counted (sonic_probe_findings_evictions_total).

use std::{collections::HashMap, hash::Hash};

/// States evicted, by (detector kind, state): "working" state evicted for
/// room, "finding"s dropped beyond --max-findings.
#[derive(Debug, Default, Clone)]
pub struct Evictions(HashMap<(&'static str, &'static str), u64>);

impl Evictions {
    pub fn add(&mut self, kind: &'static str, state: &'static str, n: u64) {
        *self.0.entry((kind, state)).or_default() += n;
    }

    /// States of `kind` evicted from `state` so far.
    pub fn get(&self, kind: &str, state: &str) -> u64 {
        self.0.get(&(kind, state)).copied().unwrap_or(0)
    }
}

/// What the bound needs to know of a state.
pub(crate) trait Tracked {
    fn last_ns(&self) -> u64;
    /// It is a finding (listed by GET /findings).
    fn reported(&self) -> bool;
    /// Times it was touched (opens, failures, cycles): states seen once go
    /// first.
    fn hits(&self) -> u64;
}

/// Implements [`Tracked`] for a state with the fields every detector's
/// states have (`pid`, `comm`, `first_ns`, `last_ns`, `reported`), touched
/// as often as its field `$hits` says, and gives it `record`: the finding
/// of the state with that detail.
macro_rules! tracked {
    ($state:ty, $hits:ident) => {
        impl $state {
            fn record(&self, detail: $crate::findings::Detail, incarnation: u64) -> $crate::findings::Record {
                $crate::findings::Record {
                    cgroup: 0,
                    detail,
                    pid: self.pid,
                    incarnation,
                    comm: self.comm.clone(),
                    first_ns: self.first_ns,
                    last_ns: self.last_ns,
                }
            }
        }

        impl $crate::findings::state::Tracked for $state {
            fn last_ns(&self) -> u64 {
                self.last_ns
            }
            fn reported(&self) -> bool {
                self.reported
            }
            fn hits(&self) -> u64 {
                self.$hits
            }
        }
    };
}
pub(crate) use tracked;

/// Working states kept per detector beyond its findings, at least.
pub(crate) const MIN_WORKING: usize = 256;

/// Working states per finding kept (the cap is this times --max-findings).
pub(crate) const WORKING_PER_FINDING: usize = 4;

pub(crate) struct StateMap<K, V> {
    pub map: HashMap<K, V>,
    kind: &'static str,
    owner: fn(&K) -> u64,
    /// Working (unreported) states kept at most.
    working_cap: usize,
    /// Findings when last counted: they only grow between counts, so
    /// `len - reported_floor` bounds the working states from above.
    reported_floor: usize,
    /// The keys of each process (may name keys evicted since: rebuilt at
    /// every eviction pass and prune), so that an exit costs its own keys.
    by_owner: HashMap<u64, Vec<K>>,
}

impl<K: Eq + Hash + Clone, V: Tracked> StateMap<K, V> {
    /// `owner` gives the process incarnation a key belongs to.
    pub fn new(kind: &'static str, owner: fn(&K) -> u64, max_findings: usize) -> Self {
        StateMap {
            map: HashMap::new(),
            kind,
            owner,
            working_cap: working_cap(max_findings),
            reported_floor: 0,
            by_owner: HashMap::new(),
        }
    }

    pub fn set_max_findings(&mut self, max_findings: usize) {
        self.working_cap = working_cap(max_findings);
    }

    /// After inserting `key`: remembers whose it is and evicts working state
    /// fairly if there is too much.
    pub fn inserted(&mut self, key: K, evictions: &mut Evictions) {
        self.by_owner.entry((self.owner)(&key)).or_default().push(key);
        self.bound(evictions);
    }

    fn reindex(&mut self) {
        self.by_owner.clear();
        for k in self.map.keys() {
            self.by_owner.entry((self.owner)(k)).or_default().push(k.clone());
        }
    }

    /// Evicts working state fairly if there is too much. Amortized: one
    /// pass evicts an eighth of the cap.
    fn bound(&mut self, evictions: &mut Evictions) {
        if self.map.len().saturating_sub(self.reported_floor) <= self.working_cap {
            return;
        }
        let working = self.map.values().filter(|v| !v.reported()).count();
        self.reported_floor = self.map.len() - working;
        if working <= self.working_cap {
            return;
        }
        let target = self.working_cap - self.working_cap / 8;
        let owner = self.owner;
        let mut by_owner: HashMap<u64, Vec<(bool, u64, K)>> = HashMap::new();
        for (k, v) in self.map.iter().filter(|(_, v)| !v.reported()) {
            by_owner.entry(owner(k)).or_default().push((v.hits() > 1, v.last_ns(), k.clone()));
        }
        // Rank within each process, most useful first.
        let mut ranked: Vec<(usize, bool, u64, K)> = Vec::with_capacity(working);
        for (_, mut states) in by_owner {
            states.sort_by_key(|s| std::cmp::Reverse((s.0, s.1)));
            ranked.extend(
                states.into_iter().enumerate().map(|(rank, (multi, last, k))| (rank, multi, last, k)),
            );
        }
        // Highest rank first; among equal ranks, seen-once and oldest first.
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let n = working - target;
        for (_, _, _, k) in ranked.into_iter().take(n) {
            self.map.remove(&k);
        }
        evictions.add(self.kind, "working", n as u64);
        self.reindex();
    }

    /// A process exited: its working state can never become a finding.
    pub fn exited(&mut self, incarnation: u64) {
        for k in self.by_owner.remove(&incarnation).unwrap_or_default() {
            if self.map.get(&k).is_some_and(|v| !v.reported()) {
                self.map.remove(&k);
            }
        }
    }

    /// The states `prune(oldest_ns, ..)` would keep (all seen since
    /// `oldest_ns`), without pruning: what a read lists.
    pub fn current(&self, oldest_ns: u64) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().filter(move |(_, v)| v.last_ns() >= oldest_ns)
    }

    /// Drops states not seen since `oldest_ns` (findings and working state
    /// alike: their time has passed), and keeps at most `max` findings, the
    /// most recently seen.
    pub fn prune(&mut self, oldest_ns: u64, max: usize, evictions: &mut Evictions) {
        self.map.retain(|_, v| v.last_ns() >= oldest_ns);
        let reported = self.map.values().filter(|v| v.reported()).count();
        self.reported_floor = reported.min(max);
        if reported > max {
            let mut by_age: Vec<(u64, K)> = self
                .map
                .iter()
                .filter(|(_, v)| v.reported())
                .map(|(k, v)| (v.last_ns(), k.clone()))
                .collect();
            by_age.sort_by_key(|(t, _)| *t);
            for (_, k) in by_age.into_iter().take(reported - max) {
                self.map.remove(&k);
            }
            evictions.add(self.kind, "finding", (reported - max) as u64);
        }
        self.reindex();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

fn working_cap(max_findings: usize) -> usize {
    (max_findings.saturating_mul(WORKING_PER_FINDING)).max(MIN_WORKING)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct S {
        last: u64,
        hits: u64,
        reported: bool,
    }

    impl Tracked for S {
        fn last_ns(&self) -> u64 {
            self.last
        }
        fn reported(&self) -> bool {
            self.reported
        }
        fn hits(&self) -> u64 {
            self.hits
        }
    }

    fn map() -> StateMap<(u64, u64), S> {
        StateMap::new("repeated_open", |k| k.0, 1)
    }

    fn put(m: &mut StateMap<(u64, u64), S>, k: (u64, u64), v: S, evictions: &mut Evictions) {
        m.map.insert(k, v);
        m.inserted(k, evictions);
    }

    #[test]
    fn a_noisy_process_loses_its_own_state_first() {
        let mut m = map();
        let mut evictions = Evictions::default();
        // The service: a finding and two states seen twice, long ago.
        put(&mut m, (1, 0), S { last: 1, hits: 5, reported: true }, &mut evictions);
        put(&mut m, (1, 1), S { last: 2, hits: 2, reported: false }, &mut evictions);
        put(&mut m, (1, 2), S { last: 3, hits: 1, reported: false }, &mut evictions);
        // A noisy process touching 100k distinct keys, newer than all of them.
        for i in 0..100_000 {
            put(&mut m, (2, i), S { last: 10 + i, hits: 1, reported: false }, &mut evictions);
            assert!(m.len() <= MIN_WORKING + 1 + 1, "{}", m.len());
        }
        for k in [(1, 0), (1, 1), (1, 2)] {
            assert!(m.map.contains_key(&k), "{k:?} evicted");
        }
        let evicted = evictions.get("repeated_open", "working");
        assert_eq!(evicted as usize, 100_000 + 3 - m.len());
    }

    #[test]
    fn many_processes_share_the_cap_evenly() {
        let mut m = map();
        let mut evictions = Evictions::default();
        // 1000 live processes with 10 states each: every process keeps its
        // most useful ones, none keeps more than the others.
        for t in 0..10 {
            for p in 0..1000 {
                put(&mut m, (p, t), S { last: t * 1000 + p, hits: 1, reported: false }, &mut evictions);
            }
        }
        assert!(m.len() <= MIN_WORKING);
        let mut per: HashMap<u64, usize> = HashMap::new();
        for k in m.map.keys() {
            *per.entry(k.0).or_default() += 1;
        }
        assert!(per.values().all(|&n| n <= 1), "{:?}", per.values().max());
    }

    #[test]
    fn exit_drops_working_state_not_findings_and_prune_bounds_findings() {
        let mut m = map();
        let mut evictions = Evictions::default();
        put(&mut m, (1, 0), S { last: 5, hits: 3, reported: true }, &mut evictions);
        put(&mut m, (1, 1), S { last: 5, hits: 1, reported: false }, &mut evictions);
        put(&mut m, (2, 1), S { last: 5, hits: 1, reported: false }, &mut evictions);
        m.exited(1);
        assert!(m.map.contains_key(&(1, 0)) && !m.map.contains_key(&(1, 1)) && m.map.contains_key(&(2, 1)));
        for i in 0..10 {
            put(&mut m, (3, i), S { last: 10 + i, hits: 3, reported: true }, &mut evictions);
        }
        m.prune(6, 4, &mut evictions);
        let mut left: Vec<_> = m.map.keys().copied().collect();
        left.sort();
        assert_eq!(left, vec![(3, 6), (3, 7), (3, 8), (3, 9)], "aged out, then the newest 4 findings");
        assert_eq!(evictions.get("repeated_open", "finding"), 6);
    }
}
