//! The Prometheus side: every metric sonic-probe exports, built at scrape
//! time from the kernel maps and the daemon's own counters.
//!
//! Like Cloudflare's ebpf_exporter, nothing is copied into a registry ahead
//! of time: [`ProbeCollector::collect`] reads the maps when Prometheus asks,
//! so the numbers are exactly the kernel's at that moment. [`METRICS`] is
//! the contract (names, types, labels, help); docs/metrics.md documents
//! every entry and a test keeps the two in step.

use std::sync::{Arc, Mutex};

use prometheus::{
    core::{Collector, Desc},
    proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
};
use sonic_probe_common::{
    latency_bucket_upper_ns, syscalls::SYSCALLS, SyscallStats, COUNTER_DROP_ERRORS,
    COUNTER_DROP_RINGBUF, COUNTER_DROP_STATS, COUNTER_DROP_TARGET, COUNTER_DROP_THREAD_STATE,
    COUNTER_ERRORS_OVERFLOW, COUNTER_EVENTS_SENT, COUNTER_STATS_OVERFLOW, LATENCY_BUCKETS,
};

use crate::{
    errno,
    events::reader::ReaderStats,
    probe::{Probe, TargetMaps},
    stats::{add_stats, call_count, StatsStore},
};

/// One exported metric family.
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricType,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

const fn def(
    name: &'static str,
    kind: MetricType,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind,
        labels,
        help,
    }
}

use MetricType::{COUNTER, GAUGE, HISTOGRAM};

pub const SYSCALL_DURATION: &str = "sonic_probe_syscall_duration_seconds";
pub const SYSCALL_ERRORS: &str = "sonic_probe_syscall_errors_total";

/// Every metric family sonic-probe exports (besides the process_* ones of
/// the prometheus crate). Bytes counters come from the syscall table.
pub const METRICS: &[MetricDef] = &[
    def(SYSCALL_DURATION, HISTOGRAM, &["syscall", "comm"],
        "Duration of traced system calls, from entry to exit. _count is the exact number of calls."),
    def(SYSCALL_ERRORS, COUNTER, &["syscall", "comm", "errno"],
        "Traced system calls that returned an error, by errno name."),
    def("sonic_probe_read_bytes_total", COUNTER, &["comm"],
        "Bytes returned by successful read calls."),
    def("sonic_probe_mmap_bytes_total", COUNTER, &["comm"],
        "Bytes mapped by successful mmap calls (the length argument)."),
    def("sonic_probe_munmap_bytes_total", COUNTER, &["comm"],
        "Bytes unmapped by successful munmap calls (the length argument)."),
    def("sonic_probe_events_produced_total", COUNTER, &[],
        "Events the BPF programs tried to send to the daemon."),
    def("sonic_probe_events_total", COUNTER, &["kind"],
        "Events the daemon received from the ring buffer, by kind."),
    def("sonic_probe_events_dropped_total", COUNTER, &["stage"],
        "Events or calls lost, by stage: ringbuf (ring buffer full), thread_state (no \
         per-thread state, call not measured), stats_map / errors_map (aggregation map full, \
         no overflow entry), target_map (forked child not followed), user_queue (daemon queue full)."),
    def("sonic_probe_event_decode_errors_total", COUNTER, &[],
        "Ring buffer records the daemon could not decode."),
    def("sonic_probe_aggregation_overflow_total", COUNTER, &["map"],
        "Calls or errors counted in the comm=\"other\" overflow entry because the kernel map was full."),
    def("sonic_probe_build_info", GAUGE, &["version", "kernel"],
        "Always 1; labels tell the sonic-probe version and the running kernel."),
    def("sonic_probe_bpf_programs_attached", GAUGE, &[],
        "BPF programs currently attached."),
    def("sonic_probe_bpf_program_run_seconds_total", COUNTER, &["program"],
        "Time the kernel spent running each BPF program (only with --bpf-stats or kernel.bpf_stats_enabled=1)."),
    def("sonic_probe_bpf_program_runs_total", COUNTER, &["program"],
        "Times each BPF program ran (only with --bpf-stats or kernel.bpf_stats_enabled=1)."),
    def("sonic_probe_target_processes", GAUGE, &[],
        "Processes in the kernel's target set (0 when watching the whole host)."),
    def("sonic_probe_kernel_map_entries", GAUGE, &["map"],
        "Entries in the kernel aggregation maps (live processes; exited ones are folded out)."),
    def("sonic_probe_comm_labels", GAUGE, &[],
        "Distinct process names exported with their own comm label (see --max-comms)."),
];

/// Exports the probe's metrics, reading the kernel at every scrape.
pub struct ProbeCollector {
    pub probe: Arc<Mutex<Probe>>,
    pub store: Arc<Mutex<StatsStore>>,
    pub targets: Arc<Mutex<TargetMaps>>,
    pub reader: Arc<ReaderStats>,
    pub whole_host: bool,
    pub kernel: String,
    descs: Vec<Desc>,
}

impl ProbeCollector {
    pub fn new(
        probe: Arc<Mutex<Probe>>,
        store: Arc<Mutex<StatsStore>>,
        targets: Arc<Mutex<TargetMaps>>,
        reader: Arc<ReaderStats>,
        whole_host: bool,
    ) -> Self {
        let descs = METRICS
            .iter()
            .map(|m| {
                Desc::new(
                    m.name.into(),
                    m.help.into(),
                    m.labels.iter().map(|l| l.to_string()).collect(),
                    Default::default(),
                )
                .expect("valid metric definition")
            })
            .collect();
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        ProbeCollector {
            probe,
            store,
            targets,
            reader,
            whole_host,
            kernel,
            descs,
        }
    }
}

fn family(name: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let def = METRICS
        .iter()
        .find(|m| m.name == name)
        .expect("metric is in METRICS");
    let mut mf = MetricFamily::default();
    mf.set_name(name.into());
    mf.set_help(def.help.into());
    mf.set_field_type(kind);
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

fn counter(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_counter(c);
    m
}

fn gauge(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_gauge(g);
    m
}

/// A latency histogram from a kernel log2 histogram. The count is the sum of
/// the buckets, so +Inf always equals _count.
pub fn histogram(pairs: &[(&str, &str)], s: &SyscallStats) -> Metric {
    let mut h = Histogram::default();
    let mut cumulative = 0;
    let mut buckets = Vec::with_capacity(LATENCY_BUCKETS - 1);
    for (i, n) in s.latency.iter().enumerate() {
        cumulative += n;
        if let Some(up) = latency_bucket_upper_ns(i) {
            let mut b = Bucket::default();
            b.set_upper_bound(up as f64 / 1e9);
            b.set_cumulative_count(cumulative);
            buckets.push(b);
        }
    }
    h.set_bucket(buckets);
    h.set_sample_count(call_count(s));
    h.set_sample_sum(s.total_ns as f64 / 1e9);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_histogram(h);
    m
}

/// Kernel counter index -> dropped-stage label.
const DROP_STAGES: &[(u32, &str)] = &[
    (COUNTER_DROP_RINGBUF, "ringbuf"),
    (COUNTER_DROP_THREAD_STATE, "thread_state"),
    (COUNTER_DROP_STATS, "stats_map"),
    (COUNTER_DROP_ERRORS, "errors_map"),
    (COUNTER_DROP_TARGET, "target_map"),
];

impl Collector for ProbeCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        let (snap, counters, entries, comm_labels) = {
            let mut store = self.store.lock().expect("stats store lock");
            let snap = store.snapshot();
            (
                snap,
                store.counters(),
                store.live_entries(),
                store.labels().assigned(),
            )
        };

        // Per (syscall, comm): variants summed.
        let mut per_syscall: std::collections::BTreeMap<(u16, &str), SyscallStats> =
            Default::default();
        for ((k, comm), v) in &snap.calls {
            add_stats(
                per_syscall
                    .entry((k.syscall, comm))
                    .or_insert_with(sonic_probe_common::SharedStruct::zeroed),
                v,
            );
        }
        let mut durations = Vec::new();
        let mut bytes: Vec<Vec<Metric>> = SYSCALLS.iter().map(|_| Vec::new()).collect();
        for (&(sc, comm), s) in per_syscall.iter().filter(|(_, s)| call_count(s) > 0) {
            let syscall = &SYSCALLS[usize::from(sc)];
            durations.push(histogram(&[("syscall", syscall.name), ("comm", comm)], s));
            if syscall.bytes_metric.is_some() {
                bytes[usize::from(sc)].push(counter(&[("comm", comm)], s.bytes as f64));
            }
        }
        out.push(family(SYSCALL_DURATION, HISTOGRAM, durations));
        for (syscall, metrics) in SYSCALLS.iter().zip(bytes) {
            if let Some(name) = syscall.bytes_metric {
                out.push(family(name, COUNTER, metrics));
            }
        }

        let errors = snap
            .errors
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|((sc, comm, e), &n)| {
                let errno = if *e == 0 {
                    "unknown".to_string()
                } else {
                    errno::name(*e)
                };
                counter(
                    &[
                        ("syscall", SYSCALLS[usize::from(*sc)].name),
                        ("comm", comm),
                        ("errno", &errno),
                    ],
                    n as f64,
                )
            })
            .collect();
        out.push(family(SYSCALL_ERRORS, COUNTER, errors));

        let c = |i: u32| counters[i as usize] as f64;
        out.push(family(
            "sonic_probe_events_produced_total",
            COUNTER,
            vec![counter(&[], c(COUNTER_EVENTS_SENT))],
        ));
        out.push(family(
            "sonic_probe_events_total",
            COUNTER,
            self.reader
                .received()
                .iter()
                .map(|(k, n)| counter(&[("kind", k)], *n as f64))
                .collect(),
        ));
        let mut drops: Vec<Metric> = DROP_STAGES
            .iter()
            .map(|&(i, stage)| counter(&[("stage", stage)], c(i)))
            .collect();
        drops.push(counter(
            &[("stage", "user_queue")],
            self.reader
                .queue_drops
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        ));
        out.push(family("sonic_probe_events_dropped_total", COUNTER, drops));
        out.push(family(
            "sonic_probe_event_decode_errors_total",
            COUNTER,
            vec![counter(
                &[],
                self.reader
                    .decode_errors
                    .load(std::sync::atomic::Ordering::Relaxed) as f64,
            )],
        ));
        out.push(family(
            "sonic_probe_aggregation_overflow_total",
            COUNTER,
            vec![
                counter(&[("map", "syscall_stats")], c(COUNTER_STATS_OVERFLOW)),
                counter(&[("map", "syscall_errors")], c(COUNTER_ERRORS_OVERFLOW)),
            ],
        ));
        out.push(family(
            "sonic_probe_build_info",
            GAUGE,
            vec![gauge(
                &[
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("kernel", &self.kernel),
                ],
                1.0,
            )],
        ));

        {
            let probe = self.probe.lock().expect("probe lock");
            out.push(family(
                "sonic_probe_bpf_programs_attached",
                GAUGE,
                vec![gauge(&[], probe.attached().len() as f64)],
            ));
            if probe.run_time_stats_enabled() {
                let stats = probe.program_stats();
                out.push(family(
                    "sonic_probe_bpf_program_run_seconds_total",
                    COUNTER,
                    stats
                        .iter()
                        .map(|p| counter(&[("program", p.name)], p.run_time.as_secs_f64()))
                        .collect(),
                ));
                out.push(family(
                    "sonic_probe_bpf_program_runs_total",
                    COUNTER,
                    stats
                        .iter()
                        .map(|p| counter(&[("program", p.name)], p.run_count as f64))
                        .collect(),
                ));
            }
        }
        let targets = if self.whole_host {
            0
        } else {
            self.targets.lock().expect("targets lock").process_count()
        };
        out.push(family(
            "sonic_probe_target_processes",
            GAUGE,
            vec![gauge(&[], targets as f64)],
        ));
        out.push(family(
            "sonic_probe_kernel_map_entries",
            GAUGE,
            vec![
                gauge(&[("map", "syscall_stats")], entries.0 as f64),
                gauge(&[("map", "syscall_errors")], entries.1 as f64),
            ],
        ));
        out.push(family(
            "sonic_probe_comm_labels",
            GAUGE,
            vec![gauge(&[], comm_labels as f64)],
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::SharedStruct;

    #[test]
    fn every_bytes_metric_is_defined() {
        for s in SYSCALLS {
            if let Some(name) = s.bytes_metric {
                assert!(METRICS.iter().any(|m| m.name == name), "{name}");
            }
        }
    }

    #[test]
    fn every_metric_is_documented() {
        let doc = include_str!("../../docs/metrics.md");
        for m in METRICS {
            assert!(
                doc.contains(&format!("`{}`", m.name)),
                "{} missing from docs/metrics.md",
                m.name
            );
            for l in m.labels {
                assert!(
                    doc.contains(&format!("`{l}`")),
                    "label {l} of {} undocumented",
                    m.name
                );
            }
        }
    }

    #[test]
    fn histogram_is_cumulative_and_consistent() {
        let mut s = SyscallStats::zeroed();
        s.latency[0] = 2;
        s.latency[18] = 1; // (2^27, 2^28] ns: a 200 ms wait
        s.latency[LATENCY_BUCKETS - 1] = 1; // beyond the last bound
        s.total_ns = 3_000_000_000;
        let m = histogram(&[("syscall", "futex")], &s);
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
        assert_eq!(
            b.last().unwrap().cumulative_count(),
            3,
            "+Inf adds the last one"
        );
    }
}
