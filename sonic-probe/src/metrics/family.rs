//! The pieces every exporter builds its families from: [`MetricDef`] (one
//! entry of the contract), the family, counter, gauge and histogram
//! builders, and [`Fold`], which turns raw process names, cgroups and
//! thread names into bounded label values.
//!
//! It names no exporter and no detector, so the detectors can declare and
//! build their own families with it (crate::findings) while metrics/mod.rs
//! gathers every declaration into the contract.

use std::borrow::Cow;

use prometheus::{
    core::Desc,
    proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
};
use sonic_probe_common::{latency_bucket_upper_ns, size_bucket_upper, SyscallStats};

use crate::{stats::labels::CommLabels, stats::Who, workloads::Workloads};

/// One exported metric family.
#[derive(Debug, Clone)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricType,
    pub labels: Cow<'static, [&'static str]>,
    pub help: &'static str,
}

/// A family whose labels are known when the program is written.
pub const fn def(
    name: &'static str,
    kind: MetricType,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef { name, kind, labels: Cow::Borrowed(labels), help }
}

/// The definition named `name` among `defs`.
pub fn named<'a>(defs: &'a [MetricDef], name: &str) -> &'a MetricDef {
    defs.iter().find(|d| d.name == name).expect("metric is defined")
}

/// The Prometheus descriptions of `defs`, for a collector's `desc()`.
pub fn descs<'a>(defs: impl IntoIterator<Item = &'a MetricDef>) -> Vec<Desc> {
    defs.into_iter()
        .map(|m| {
            Desc::new(
                m.name.into(),
                m.help.into(),
                m.labels.iter().map(|l| l.to_string()).collect(),
                Default::default(),
            )
            .expect("valid metric definition")
        })
        .collect()
}

/// The family `def` with these series.
pub fn family(def: &MetricDef, metrics: Vec<Metric>) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(def.name.into());
    mf.set_help(def.help.into());
    mf.set_field_type(def.kind);
    mf.set_metric(metrics);
    mf
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).into());
            l.set_value((*v).into());
            l
        })
        .collect()
}

pub fn counter(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_counter(c);
    m
}

pub fn gauge(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_gauge(g);
    m
}

/// A histogram from kernel buckets: `upper(i)` is bucket i's bound in the
/// metric's unit, None for the last (+Inf). The count is the sum of the
/// buckets, so +Inf always equals _count.
fn histogram(
    pairs: &[(&str, &str)],
    buckets: &[u64],
    upper: impl Fn(usize) -> Option<f64>,
    sum: f64,
) -> Metric {
    let mut h = Histogram::default();
    let mut cumulative = 0;
    let mut out = Vec::with_capacity(buckets.len());
    for (i, n) in buckets.iter().enumerate() {
        cumulative += n;
        if let Some(up) = upper(i) {
            let mut b = Bucket::default();
            b.set_upper_bound(up);
            b.set_cumulative_count(cumulative);
            out.push(b);
        }
    }
    h.set_bucket(out);
    h.set_sample_count(cumulative);
    h.set_sample_sum(sum);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_histogram(h);
    m
}

/// A latency histogram (seconds) from a kernel log2 histogram.
pub fn latency_histogram(pairs: &[(&str, &str)], s: &SyscallStats) -> Metric {
    log2_seconds_histogram(pairs, &s.latency, s.total_ns)
}

/// A histogram in seconds from kernel log2 buckets of nanoseconds (see
/// LATENCY_BUCKETS) and their sum.
pub fn log2_seconds_histogram(pairs: &[(&str, &str)], buckets: &[u64], total_ns: u64) -> Metric {
    histogram(pairs, buckets, |i| latency_bucket_upper_ns(i).map(|ns| ns as f64 / 1e9), total_ns as f64 / 1e9)
}

/// A size histogram (bytes) from a kernel powers-of-4 histogram.
pub fn size_histogram(pairs: &[(&str, &str)], s: &SyscallStats) -> Metric {
    histogram(pairs, &s.size, |i| size_bucket_upper(i).map(|b| b as f64), s.size_total as f64)
}

/// Folds raw names into bounded label values at scrape time: process names
/// by --max-comms, cgroups by --max-workloads, thread names by their own
/// bound. What folds together is added up by the caller.
pub struct Fold<'a> {
    pub comms: &'a mut CommLabels,
    pub workloads: &'a mut Workloads,
    pub threads: &'a mut CommLabels,
}

impl Fold<'_> {
    /// The `comm` and `workload` labels of a process name and cgroup.
    pub fn who(&mut self, comm: &str, cgroup: u64) -> Who {
        Who { comm: self.comms.label(comm), workload: self.workloads.label(cgroup) }
    }

    /// The `thread` label of a thread name.
    pub fn thread(&mut self, name: &str) -> String {
        self.threads.label(name).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::{SharedStruct, LATENCY_BUCKETS};

    #[test]
    fn latency_histogram_is_cumulative_and_consistent() {
        let mut s = SyscallStats::zeroed();
        s.latency[0] = 2;
        s.latency[18] = 1; // (2^27, 2^28] ns: a 200 ms wait
        s.latency[LATENCY_BUCKETS - 1] = 1; // beyond the last bound
        s.total_ns = 3_000_000_000;
        let m = latency_histogram(&[("syscall", "futex")], &s);
        let h = &m.histogram;
        assert_eq!(h.sample_count(), 4);
        assert_eq!(h.sample_sum(), 3.0);
        let b = &h.bucket;
        assert_eq!(b.len(), LATENCY_BUCKETS - 1);
        assert_eq!(b[0].upper_bound(), 1.024e-6);
        assert_eq!(b[0].cumulative_count(), 2);
        assert_eq!(b[17].cumulative_count(), 2);
        assert!((b[18].upper_bound() - 0.268435456).abs() < 1e-12);
        assert_eq!(b[18].cumulative_count(), 3);
        assert_eq!(b.last().unwrap().cumulative_count(), 3, "+Inf adds the last one");
    }

    #[test]
    fn size_histogram_bounds_are_powers_of_four() {
        let mut s = SyscallStats::zeroed();
        s.size[5] = 64; // 1 KiB reads
        s.size_total = 64 * 1024;
        let m = size_histogram(&[], &s);
        let b = &m.histogram.bucket;
        assert_eq!(b[5].upper_bound(), 1024.0);
        assert_eq!(b[4].cumulative_count(), 0);
        assert_eq!(b[5].cumulative_count(), 64);
        assert_eq!(m.histogram.sample_sum(), 65536.0);
    }
}
