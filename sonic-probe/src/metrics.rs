//! The Prometheus side: every metric sonic-probe exports, built at scrape
//! time from the kernel maps, the findings engine and the daemon's own
//! counters.
//!
//! Like Cloudflare's ebpf_exporter, nothing is copied into a registry ahead
//! of time: the collectors read the maps when Prometheus asks, so the
//! numbers are exactly the kernel's at that moment. [`METRICS`] is the
//! contract (names, types, labels, help); docs/metrics.md documents every
//! entry and a test keeps the two in step.

use std::{
    collections::BTreeMap,
    sync::{atomic::Ordering, Arc, Mutex},
};

use prometheus::{
    core::{Collector, Desc},
    proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
};
use sonic_probe_common::{
    file_class_name, latency_bucket_upper_ns, size_bucket_upper, syscalls, syscalls::SYSCALLS, SharedStruct,
    SyscallStats, COUNTER_DROP_ERRORS, COUNTER_DROP_OPEN_FILES, COUNTER_DROP_RINGBUF, COUNTER_DROP_STATS,
    COUNTER_DROP_TARGET, COUNTER_DROP_THREAD_STATE, COUNTER_ERRORS_OVERFLOW, COUNTER_EVENTS_SENT,
    COUNTER_STATS_OVERFLOW,
};

use crate::{
    errno,
    events::reader::ReaderStats,
    findings::FindingsService,
    futex,
    labels::CommLabels,
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
    MetricDef { name, kind, labels, help }
}

use MetricType::{COUNTER, GAUGE, HISTOGRAM};

pub const SYSCALL_DURATION: &str = "sonic_probe_syscall_duration_seconds";
pub const SYSCALL_ERRORS: &str = "sonic_probe_syscall_errors_total";
pub const FUTEX_WAIT_DURATION: &str = "sonic_probe_futex_wait_duration_seconds";
pub const READ_SIZE: &str = "sonic_probe_read_size_bytes";
pub const SMALL_READS: &str = "sonic_probe_small_reads_total";
pub const MMAP_SIZE: &str = "sonic_probe_mmap_size_bytes";
pub const FILE_OPENS: &str = "sonic_probe_file_opens_total";

/// Every metric family sonic-probe exports (besides the process_* ones of
/// the prometheus crate). Bytes counters come from the syscall table.
#[rustfmt::skip]
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
    def(FUTEX_WAIT_DURATION, HISTOGRAM, &["comm", "op"],
        "Duration of futex waits by operation (wait, wait_bitset, lock_pi, lock_pi2, wait_requeue_pi, waitv)."),
    def(READ_SIZE, HISTOGRAM, &["comm", "file_class"],
        "Bytes asked for by read calls, by the class of what was read."),
    def(SMALL_READS, COUNTER, &["comm", "file_class"],
        "Read calls asking for fewer bytes than --small-read-threshold."),
    def(MMAP_SIZE, HISTOGRAM, &["comm"],
        "Length of mmap calls."),
    def(FILE_OPENS, COUNTER, &["comm", "file_class"],
        "Successful openat calls by the class of the file opened."),
    def("sonic_probe_futex_stalls_total", COUNTER, &["comm", "thread"],
        "Futex waits of request threads that lasted at least --stall-threshold (the futex_stall rule)."),
    def("sonic_probe_futex_stall_max_seconds", GAUGE, &["comm"],
        "Longest futex stall among the current findings (within --findings-window)."),
    def("sonic_probe_repeated_opens_total", COUNTER, &["comm", "file_class"],
        "Opens of paths that are being reopened repeatedly (the repeated_open rule)."),
    def("sonic_probe_mmap_churn_total", COUNTER, &["comm"],
        "Large map/unmap cycles counted in mmap_churn findings."),
    def("sonic_probe_findings", GAUGE, &["kind"],
        "Current findings (GET /findings) by kind."),
    def("sonic_probe_events_produced_total", COUNTER, &[],
        "Events the BPF programs tried to send to the daemon."),
    def("sonic_probe_events_total", COUNTER, &["kind"],
        "Events the daemon received from the ring buffer, by kind."),
    def("sonic_probe_events_dropped_total", COUNTER, &["stage"],
        "Events or calls lost, by stage: ringbuf (ring buffer full), thread_state (no \
         per-thread state, call not measured), stats_map / errors_map (aggregation map full, \
         no overflow entry), target_map (forked child not followed), open_files (descriptor \
         not tracked), user_queue (daemon queue full)."),
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
        "Entries in the kernel maps that grow with the watched processes."),
    def("sonic_probe_comm_labels", GAUGE, &[],
        "Distinct process names exported with their own comm label (see --max-comms)."),
];

fn descs_of(names: impl Fn(&str) -> bool) -> Vec<Desc> {
    METRICS
        .iter()
        .filter(|m| names(m.name))
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

const DETECTOR_METRICS: &[&str] = &[
    "sonic_probe_futex_stalls_total",
    "sonic_probe_futex_stall_max_seconds",
    "sonic_probe_repeated_opens_total",
    "sonic_probe_mmap_churn_total",
    "sonic_probe_findings",
];

fn family(name: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let def = METRICS.iter().find(|m| m.name == name).expect("metric is in METRICS");
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
    histogram(
        pairs,
        &s.latency,
        |i| latency_bucket_upper_ns(i).map(|ns| ns as f64 / 1e9),
        s.total_ns as f64 / 1e9,
    )
}

/// A size histogram (bytes) from a kernel powers-of-4 histogram.
pub fn size_histogram(pairs: &[(&str, &str)], s: &SyscallStats) -> Metric {
    histogram(pairs, &s.size, |i| size_bucket_upper(i).map(|b| b as f64), s.size_total as f64)
}

/// Kernel counter index -> dropped-stage label.
const DROP_STAGES: &[(u32, &str)] = &[
    (COUNTER_DROP_RINGBUF, "ringbuf"),
    (COUNTER_DROP_THREAD_STATE, "thread_state"),
    (COUNTER_DROP_STATS, "stats_map"),
    (COUNTER_DROP_ERRORS, "errors_map"),
    (COUNTER_DROP_TARGET, "target_map"),
    (COUNTER_DROP_OPEN_FILES, "open_files"),
];

/// Exports the kernel's counts and the probe's own health.
pub struct ProbeCollector {
    pub probe: Arc<Mutex<Probe>>,
    pub store: Arc<Mutex<StatsStore>>,
    pub targets: Arc<Mutex<TargetMaps>>,
    pub reader: Arc<ReaderStats>,
    pub labels: Arc<Mutex<CommLabels>>,
    pub findings: FindingsService,
    pub whole_host: bool,
    kernel: String,
    descs: Vec<Desc>,
}

impl ProbeCollector {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        probe: Arc<Mutex<Probe>>,
        store: Arc<Mutex<StatsStore>>,
        targets: Arc<Mutex<TargetMaps>>,
        reader: Arc<ReaderStats>,
        labels: Arc<Mutex<CommLabels>>,
        findings: FindingsService,
        whole_host: bool,
    ) -> Self {
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        let descs = descs_of(|n| !DETECTOR_METRICS.contains(&n));
        ProbeCollector { probe, store, targets, reader, labels, findings, whole_host, kernel, descs }
    }

    /// The system-call families, from one snapshot of the aggregation maps.
    fn syscall_families(&self, out: &mut Vec<MetricFamily>, snap: &crate::stats::Snapshot) {
        type ByLabels<'a> = BTreeMap<(u16, &'a str), SyscallStats>;
        let mut per_syscall: ByLabels = BTreeMap::new();
        let mut futex_waits: BTreeMap<(&str, String), SyscallStats> = BTreeMap::new();
        let mut classes: BTreeMap<(u16, &str, u16), SyscallStats> = BTreeMap::new();
        for ((k, comm), v) in &snap.calls {
            add_stats(per_syscall.entry((k.syscall, comm)).or_insert_with(SyscallStats::zeroed), v);
            match k.syscall {
                syscalls::FUTEX if futex::is_wait(u64::from(k.variant)) => {
                    let op = futex::command_label(u64::from(k.variant));
                    add_stats(futex_waits.entry((comm, op)).or_insert_with(SyscallStats::zeroed), v);
                }
                syscalls::FUTEX_WAITV => {
                    add_stats(
                        futex_waits.entry((comm, "waitv".into())).or_insert_with(SyscallStats::zeroed),
                        v,
                    );
                }
                syscalls::READ | syscalls::OPENAT => {
                    add_stats(
                        classes.entry((k.syscall, comm, k.variant)).or_insert_with(SyscallStats::zeroed),
                        v,
                    );
                }
                _ => {}
            }
        }

        let mut durations = Vec::new();
        let mut bytes: Vec<Vec<Metric>> = SYSCALLS.iter().map(|_| Vec::new()).collect();
        let mut mmap_sizes = Vec::new();
        for (&(sc, comm), s) in per_syscall.iter().filter(|(_, s)| call_count(s) > 0) {
            let syscall = &SYSCALLS[usize::from(sc)];
            durations.push(latency_histogram(&[("syscall", syscall.name), ("comm", comm)], s));
            if syscall.bytes_metric.is_some() {
                bytes[usize::from(sc)].push(counter(&[("comm", comm)], s.bytes as f64));
            }
            if sc == syscalls::MMAP {
                mmap_sizes.push(size_histogram(&[("comm", comm)], s));
            }
        }
        out.push(family(SYSCALL_DURATION, HISTOGRAM, durations));
        for (syscall, metrics) in SYSCALLS.iter().zip(bytes) {
            if let Some(name) = syscall.bytes_metric {
                out.push(family(name, COUNTER, metrics));
            }
        }
        out.push(family(MMAP_SIZE, HISTOGRAM, mmap_sizes));
        out.push(family(
            FUTEX_WAIT_DURATION,
            HISTOGRAM,
            futex_waits
                .iter()
                .filter(|(_, s)| call_count(s) > 0)
                .map(|((comm, op), s)| latency_histogram(&[("comm", comm), ("op", op)], s))
                .collect(),
        ));
        let (mut read_sizes, mut small, mut opens) = (Vec::new(), Vec::new(), Vec::new());
        for (&(sc, comm, class), s) in classes.iter().filter(|(_, s)| call_count(s) > 0) {
            let pairs = [("comm", comm), ("file_class", file_class_name(class))];
            if sc == syscalls::READ {
                read_sizes.push(size_histogram(&pairs, s));
                small.push(counter(&pairs, s.small as f64));
            } else if call_count(s) > s.errors {
                opens.push(counter(&pairs, (call_count(s) - s.errors) as f64));
            }
        }
        out.push(family(READ_SIZE, HISTOGRAM, read_sizes));
        out.push(family(SMALL_READS, COUNTER, small));
        out.push(family(FILE_OPENS, COUNTER, opens));

        let errors = snap
            .errors
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|((sc, comm, e), &n)| {
                let errno = if *e == 0 { "unknown".to_string() } else { errno::name(*e) };
                counter(
                    &[("syscall", SYSCALLS[usize::from(*sc)].name), ("comm", comm), ("errno", &errno)],
                    n as f64,
                )
            })
            .collect();
        out.push(family(SYSCALL_ERRORS, COUNTER, errors));
    }
}

impl Collector for ProbeCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        let (snap, counters, entries) = {
            let store = self.store.lock().expect("stats store lock");
            let snap = store.snapshot();
            (snap, store.counters(), store.live_entries())
        };
        self.syscall_families(&mut out, &snap);

        let c = |i: u32| counters[i as usize] as f64;
        out.push(family(
            "sonic_probe_events_produced_total",
            COUNTER,
            vec![counter(&[], c(COUNTER_EVENTS_SENT))],
        ));
        out.push(family(
            "sonic_probe_events_total",
            COUNTER,
            self.reader.received().iter().map(|(k, n)| counter(&[("kind", k)], *n as f64)).collect(),
        ));
        let mut drops: Vec<Metric> =
            DROP_STAGES.iter().map(|&(i, stage)| counter(&[("stage", stage)], c(i))).collect();
        drops.push(counter(
            &[("stage", "user_queue")],
            self.reader.queue_drops.load(Ordering::Relaxed) as f64,
        ));
        out.push(family("sonic_probe_events_dropped_total", COUNTER, drops));
        out.push(family(
            "sonic_probe_event_decode_errors_total",
            COUNTER,
            vec![counter(&[], self.reader.decode_errors.load(Ordering::Relaxed) as f64)],
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
            vec![gauge(&[("version", env!("CARGO_PKG_VERSION")), ("kernel", &self.kernel)], 1.0)],
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
                    stats.iter().map(|p| counter(&[("program", p.name)], p.run_time.as_secs_f64())).collect(),
                ));
                out.push(family(
                    "sonic_probe_bpf_program_runs_total",
                    COUNTER,
                    stats.iter().map(|p| counter(&[("program", p.name)], p.run_count as f64)).collect(),
                ));
            }
        }
        let targets =
            if self.whole_host { 0 } else { self.targets.lock().expect("targets lock").process_count() };
        out.push(family("sonic_probe_target_processes", GAUGE, vec![gauge(&[], targets as f64)]));
        out.push(family(
            "sonic_probe_kernel_map_entries",
            GAUGE,
            vec![
                gauge(&[("map", "syscall_stats")], entries.0 as f64),
                gauge(&[("map", "syscall_errors")], entries.1 as f64),
                gauge(&[("map", "open_files")], self.findings.open_file_entries() as f64),
            ],
        ));
        let assigned = self.labels.lock().expect("labels lock").assigned();
        out.push(family("sonic_probe_comm_labels", GAUGE, vec![gauge(&[], assigned as f64)]));
        out
    }
}

/// Exports what the detectors counted, and the findings by kind.
pub struct FindingsCollector {
    findings: FindingsService,
    labels: Arc<Mutex<CommLabels>>,
    thread_labels: Mutex<CommLabels>,
    descs: Vec<Desc>,
}

impl FindingsCollector {
    pub fn new(findings: FindingsService, labels: Arc<Mutex<CommLabels>>, max_threads: usize) -> Self {
        FindingsCollector {
            findings,
            labels,
            thread_labels: Mutex::new(CommLabels::new(max_threads)),
            descs: descs_of(|n| DETECTOR_METRICS.contains(&n)),
        }
    }
}

/// The finding kinds, for sonic_probe_findings (0 when there are none).
pub const FINDING_KINDS: &[&str] =
    &["futex_stall", "repeated_open", "small_reads", "mmap_churn", "syscall_errors"];

impl Collector for FindingsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (findings, m) = self.findings.current();
        let mut labels = self.labels.lock().expect("labels lock");
        let mut threads = self.thread_labels.lock().expect("thread labels lock");
        // Fold raw names into bounded label values, adding up what folds together.
        let mut stalls: BTreeMap<(String, String), u64> = BTreeMap::new();
        for ((comm, thread), n) in &m.futex_stalls {
            *stalls
                .entry((labels.label(comm).to_string(), threads.label(thread).to_string()))
                .or_default() += n;
        }
        let mut max: BTreeMap<String, f64> = BTreeMap::new();
        for (comm, s) in &m.stall_max_seconds {
            let e = max.entry(labels.label(comm).to_string()).or_default();
            *e = e.max(*s);
        }
        let mut opens: BTreeMap<(String, String), u64> = BTreeMap::new();
        for ((comm, class), n) in &m.repeated_opens {
            *opens.entry((labels.label(comm).to_string(), class.clone())).or_default() += n;
        }
        let mut churn: BTreeMap<String, u64> = BTreeMap::new();
        for (comm, n) in &m.mmap_churn {
            *churn.entry(labels.label(comm).to_string()).or_default() += n;
        }
        vec![
            family(
                "sonic_probe_futex_stalls_total",
                COUNTER,
                stalls.iter().map(|((c, t), n)| counter(&[("comm", c), ("thread", t)], *n as f64)).collect(),
            ),
            family(
                "sonic_probe_futex_stall_max_seconds",
                GAUGE,
                max.iter().map(|(c, s)| gauge(&[("comm", c)], *s)).collect(),
            ),
            family(
                "sonic_probe_repeated_opens_total",
                COUNTER,
                opens
                    .iter()
                    .map(|((c, k), n)| counter(&[("comm", c), ("file_class", k)], *n as f64))
                    .collect(),
            ),
            family(
                "sonic_probe_mmap_churn_total",
                COUNTER,
                churn.iter().map(|(c, n)| counter(&[("comm", c)], *n as f64)).collect(),
            ),
            family(
                "sonic_probe_findings",
                GAUGE,
                FINDING_KINDS
                    .iter()
                    .map(|k| {
                        gauge(
                            &[("kind", k)],
                            findings.iter().filter(|f| f.detail.kind() == *k).count() as f64,
                        )
                    })
                    .collect(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::LATENCY_BUCKETS;

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
            assert!(doc.contains(&format!("`{}`", m.name)), "{} missing from docs/metrics.md", m.name);
            for l in m.labels {
                assert!(doc.contains(&format!("`{l}`")), "label {l} of {} undocumented", m.name);
            }
        }
    }

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
