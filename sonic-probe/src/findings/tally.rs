//! What a detector counts for /metrics: counts by raw process name, cgroup
//! and the family's own label values, bounded, and exported at scrape time
//! with the names and cgroups folded into bounded label values.
//!
//! Each detector keeps its own tallies and says how they are exported
//! ([`super::DetectorCounts`]); this is the part they share.

use std::{
    collections::{BTreeMap, HashMap},
    hash::Hash,
};

use prometheus::proto::MetricFamily;

use crate::{
    metrics::family::{counter, family, Fold, MetricDef},
    stats::labels::OTHER,
    stats::Who,
};

/// Distinct label sets each detector counter keeps; more fold into "other".
pub const MAX_METRIC_KEYS: usize = 4096;

/// Counts by (process name, cgroup, the family's own key).
#[derive(Debug, Clone)]
pub struct Tally<K> {
    counts: HashMap<(String, u64, K), u64>,
}

impl<K> Default for Tally<K> {
    fn default() -> Self {
        Tally { counts: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone> Tally<K> {
    /// Adds `n` for a process name in a cgroup; beyond [`MAX_METRIC_KEYS`]
    /// label sets, a new one is added to comm "other" with `overflow` as
    /// its own key.
    pub fn add(&mut self, comm: &str, cgroup: u64, key: K, overflow: K, n: u64) {
        let key = (comm.to_string(), cgroup, key);
        let key = if self.counts.len() >= MAX_METRIC_KEYS && !self.counts.contains_key(&key) {
            (OTHER.to_string(), 0, overflow)
        } else {
            key
        };
        *self.counts.entry(key).or_default() += n;
    }

    /// The family `def` of these counts, added up by bounded label values:
    /// `comm` and `workload`, then the family's own labels, whose values
    /// `own` gives for a key.
    pub fn export<const N: usize>(
        &self,
        def: &MetricDef,
        fold: &mut Fold<'_>,
        mut own: impl FnMut(&mut Fold<'_>, &K) -> [String; N],
    ) -> MetricFamily {
        let mut summed: BTreeMap<(Who, [String; N]), u64> = BTreeMap::new();
        for ((comm, cgroup, key), n) in &self.counts {
            let who = fold.who(comm, *cgroup);
            *summed.entry((who, own(fold, key))).or_default() += n;
        }
        let own_names = &def.labels[2..];
        let metrics = summed
            .iter()
            .map(|((who, values), n)| {
                let mut pairs = who.pairs().to_vec();
                pairs.extend(own_names.iter().copied().zip(values.iter().map(String::as_str)));
                counter(&pairs, *n as f64)
            })
            .collect();
        family(def, metrics)
    }

    #[cfg(test)]
    pub fn get(&self, comm: &str, cgroup: u64, key: K) -> u64 {
        self.counts.get(&(comm.to_string(), cgroup, key)).copied().unwrap_or(0)
    }
}

/// The counts of a detector that exports no family of its own.
#[derive(Debug, Clone, Copy)]
pub struct Uncounted;

impl super::DetectorCounts for Uncounted {
    fn collect(&self, _fold: &mut Fold<'_>, _out: &mut Vec<MetricFamily>) {}
}
