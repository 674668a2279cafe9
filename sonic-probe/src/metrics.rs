//! The Prometheus side: every metric sonic-probe exports, built at scrape
//! time from the kernel maps, the findings engine and the daemon's own
//! counters.
//!
//! Like Cloudflare's ebpf_exporter, nothing is copied into a registry ahead
//! of time: the collectors read the maps when Prometheus asks, so the
//! numbers are exactly the kernel's at that moment. [`metric_defs`] is the
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
    device_class_name, file_class_name, latency_bucket_upper_ns, size_bucket_upper,
    syscalls::{Family, Syscall, SyscallId, Variant, SYSCALLS},
    SharedStruct, SyscallStats, COUNTER_DROP_ERRORS, COUNTER_DROP_INFLIGHT_WAITS, COUNTER_DROP_OPEN_FILES,
    COUNTER_DROP_RINGBUF, COUNTER_DROP_STATS, COUNTER_DROP_TARGET, COUNTER_DROP_THREAD_STATE,
    COUNTER_ERRORS_OVERFLOW, COUNTER_EVENTS_SENT, COUNTER_STATS_OVERFLOW,
};

use crate::{
    errno,
    events::reader::ReaderStats,
    findings::FindingsService,
    futex,
    labels::CommLabels,
    probe::{Probe, TargetMaps},
    stats::{add_stats, call_count, StatsStore, Who},
    workloads::Workloads,
};

/// One exported metric family.
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricType,
    pub labels: Vec<&'static str>,
    pub help: &'static str,
}

use MetricType::{COUNTER, GAUGE, HISTOGRAM};

pub const SYSCALL_DURATION: &str = "sonic_probe_syscall_duration_seconds";
pub const SYSCALL_ERRORS: &str = "sonic_probe_syscall_errors_total";

/// What a family named in the syscall table exports of a call's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// `bytes`, a counter by comm.
    Bytes,
    /// The size histogram.
    Size,
    /// `small`, a counter.
    Small,
    /// Calls that did not fail, a counter.
    Succeeded,
    /// The latency histogram.
    Duration,
}

impl Use {
    fn kind(self) -> MetricType {
        match self {
            Use::Size | Use::Duration => HISTOGRAM,
            Use::Bytes | Use::Small | Use::Succeeded => COUNTER,
        }
    }
}

/// The families a row names, with what each exports.
fn row_families(s: &Syscall) -> impl Iterator<Item = (Use, Family)> {
    let f = s.families;
    [
        (Use::Bytes, f.bytes),
        (Use::Size, f.size),
        (Use::Small, f.small),
        (Use::Succeeded, f.succeeded),
        (Use::Duration, f.duration),
    ]
    .into_iter()
    .filter_map(|(u, f)| f.map(|f| (u, f)))
}

/// Whether a family of this use is labelled by the row's variant too.
fn by_variant(u: Use, s: &Syscall) -> Option<&'static str> {
    (u != Use::Bytes).then(|| s.variant.label()).flatten()
}

/// The value of a row's variant label for the kernel's variant `v`; None:
/// the call has no value (a futex wake in a family of waits) and is left out.
fn variant_value(s: &Syscall, v: u16) -> Option<&'static str> {
    match s.variant {
        Variant::None => None,
        Variant::FutexCommand => futex::is_wait(u64::from(v)).then(|| futex::command_label(u64::from(v))),
        Variant::Fixed { value, .. } => Some(value),
        Variant::FileClass => Some(file_class_name(v)),
        Variant::DeviceClass => Some(device_class_name(v)),
    }
}

/// Families that are not named in the syscall table.
#[rustfmt::skip]
const FIXED: &[(&str, MetricType, &[&str], &str)] = &[
    ("sonic_probe_futex_stalls_total", COUNTER, &["comm", "workload", "thread"],
        "Futex waits of request threads that lasted at least --stall-threshold (the futex_stall rule)."),
    ("sonic_probe_futex_stall_max_seconds", GAUGE, &["comm", "workload"],
        "Longest futex stall among the current findings (within --findings-window)."),
    ("sonic_probe_repeated_opens_total", COUNTER, &["comm", "workload", "file_class"],
        "Opens of paths that are being reopened repeatedly (the repeated_open rule)."),
    ("sonic_probe_mmap_churn_total", COUNTER, &["comm", "workload"],
        "Large map/unmap cycles counted in mmap_churn findings."),
    ("sonic_probe_recurring_errors_total", COUNTER, &["comm", "workload", "syscall", "errno"],
        "Failed calls counted in syscall_errors findings: failures that recur within their process."),
    ("sonic_probe_stack_captures_total", COUNTER, &["result"],
        "Stack captures of stalled processes (--stack-captures), by result: ok, partial (the Python or the \
         native stack could not be read), no_python (not a Python process: native stack only), gone (the \
         process exited first), unreadable (its memory could not be read), rate_limited (a stall within \
         --stack-capture-interval of the process's last capture), error."),
    ("sonic_probe_stack_capture_seconds_total", COUNTER, &[],
        "Time the daemon spent reading stacks of stalled processes (off the event loop); divided by the \
         captures that were not rate_limited, the time one capture takes."),
    ("sonic_probe_findings", GAUGE, &["kind"],
        "Current findings (GET /findings) by kind."),
    ("sonic_probe_findings_evictions_total", COUNTER, &["kind", "state"],
        "Detector state evicted to bound memory: state=\"working\" (not yet a finding, evicted with a fair \
         share per process), state=\"finding\" (a finding dropped beyond --max-findings)."),
    ("sonic_probe_events_produced_total", COUNTER, &[],
        "Events the BPF programs tried to send to the daemon."),
    ("sonic_probe_events_total", COUNTER, &["kind"],
        "Events the daemon received from the ring buffer, by kind."),
    ("sonic_probe_events_dropped_total", COUNTER, &["stage"],
        "Events or calls lost, by stage: ringbuf (ring buffer full), thread_state (no \
         per-thread state, call not measured), stats_map / errors_map (aggregation map full, \
         no overflow entry), target_map (forked child not followed), open_files (descriptor \
         not tracked), futex_waiting (futex wait not tracked while in progress: no stack capture for \
         it), user_queue (daemon queue full)."),
    ("sonic_probe_event_decode_errors_total", COUNTER, &[],
        "Ring buffer records the daemon could not decode."),
    ("sonic_probe_aggregation_overflow_total", COUNTER, &["map"],
        "Calls or errors counted in the comm=\"other\" workload=\"other\" overflow entry because the kernel map was full."),
    ("sonic_probe_build_info", GAUGE, &["version", "kernel"],
        "Always 1; labels tell the sonic-probe version and the running kernel."),
    ("sonic_probe_bpf_programs_attached", GAUGE, &[],
        "BPF programs currently attached."),
    ("sonic_probe_kernel_feature", GAUGE, &["feature"],
        "1 if the running kernel accepted the BPF feature's probe program, else 0 (btf_tracepoint, ringbuf, \
         task_btf, ancestor_cgroup_id, task_storage, bpf_loop, percpu_lookup)."),
    ("sonic_probe_bpf_variant", GAUGE, &["piece", "variant"],
        "Always 1: the variant of each kernel-dependent piece of the BPF programs in use (task_access: \
         btf_pointer or core_read; entry_state: task_storage or thread_map; futex_waker: percpu_rings or wake_map)."),
    ("sonic_probe_bpf_program_run_seconds_total", COUNTER, &["program"],
        "Time the kernel spent running each BPF program (only with --bpf-stats or kernel.bpf_stats_enabled=1)."),
    ("sonic_probe_bpf_program_runs_total", COUNTER, &["program"],
        "Times each BPF program ran (only with --bpf-stats or kernel.bpf_stats_enabled=1)."),
    ("sonic_probe_target_processes", GAUGE, &[],
        "Processes in the kernel's target set (0 when watching the whole host)."),
    ("sonic_probe_kernel_map_entries", GAUGE, &["map"],
        "Entries in the kernel maps that grow with the watched processes."),
    ("sonic_probe_comm_labels", GAUGE, &[],
        "Distinct process names exported with their own comm label (see --max-comms)."),
    ("sonic_probe_workload_info", GAUGE, &["workload", "kind", "unit", "namespace", "pod", "container", "container_id"],
        "Always 1, one series per workload label value in use: what it stands for (kind: host, systemd, \
         kubernetes, docker, cgroup, unresolved). Join on workload."),
    ("sonic_probe_workload_labels", GAUGE, &[],
        "Distinct workloads exported with their own workload label (see --max-workloads)."),
    ("sonic_probe_workload_resolutions_total", COUNTER, &["result"],
        "cgroups named into workloads: result=\"named\" (from their path), \"unresolved\" (gone before they were named)."),
];

/// Every metric family sonic-probe exports (besides the process_* ones of
/// the prometheus crate): the two every syscall has, those the rows of the
/// syscall table name, and the fixed ones.
pub fn metric_defs() -> &'static [MetricDef] {
    static DEFS: std::sync::OnceLock<Vec<MetricDef>> = std::sync::OnceLock::new();
    DEFS.get_or_init(|| {
        let mut defs = vec![
            MetricDef {
                name: SYSCALL_DURATION,
                kind: HISTOGRAM,
                labels: vec!["syscall", "comm", "workload"],
                help: "Duration of traced system calls, from entry to exit. _count is the exact number of calls.",
            },
            MetricDef {
                name: SYSCALL_ERRORS,
                kind: COUNTER,
                labels: vec!["syscall", "comm", "workload", "errno"],
                help: "Traced system calls that returned an error, by errno name.",
            },
        ];
        for s in &SYSCALLS {
            for (u, f) in row_families(s) {
                if defs.iter().any(|d| d.name == f.name) {
                    continue;
                }
                let mut labels = vec!["comm", "workload"];
                labels.extend(by_variant(u, s));
                defs.push(MetricDef { name: f.name, kind: u.kind(), labels, help: f.help });
            }
        }
        defs.extend(FIXED.iter().map(|&(name, kind, labels, help)| MetricDef {
            name,
            kind,
            labels: labels.to_vec(),
            help,
        }));
        defs
    })
}

fn descs_of(names: impl Fn(&str) -> bool) -> Vec<Desc> {
    metric_defs()
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
    "sonic_probe_recurring_errors_total",
    "sonic_probe_findings",
    "sonic_probe_findings_evictions_total",
    "sonic_probe_stack_captures_total",
    "sonic_probe_stack_capture_seconds_total",
];

fn family(name: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let def = metric_defs().iter().find(|m| m.name == name).expect("metric is in metric_defs");
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
    (COUNTER_DROP_INFLIGHT_WAITS, "futex_waiting"),
];

/// Exports the kernel's counts and the probe's own health.
pub struct ProbeCollector {
    pub probe: Arc<Mutex<Probe>>,
    pub store: Arc<Mutex<StatsStore>>,
    pub targets: Arc<Mutex<TargetMaps>>,
    pub reader: Arc<ReaderStats>,
    pub labels: Arc<Mutex<CommLabels>>,
    pub workloads: Arc<Mutex<Workloads>>,
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
        workloads: Arc<Mutex<Workloads>>,
        findings: FindingsService,
        whole_host: bool,
    ) -> Self {
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        let descs = descs_of(|n| !DETECTOR_METRICS.contains(&n));
        ProbeCollector {
            probe,
            store,
            targets,
            reader,
            labels,
            workloads,
            findings,
            whole_host,
            kernel,
            descs,
        }
    }

    /// The system-call families, from one snapshot of the aggregation maps:
    /// the duration and error families of every call, and the families its
    /// row of the syscall table names.
    fn syscall_families(&self, out: &mut Vec<MetricFamily>, snap: &crate::stats::Snapshot) {
        let mut per_syscall: BTreeMap<(SyscallId, &Who), SyscallStats> = BTreeMap::new();
        // family -> (who, variant label value) -> what it adds up.
        type Group<'a> = (&'a Who, Option<&'static str>);
        let mut grouped: BTreeMap<&'static str, BTreeMap<Group, (Use, SyscallStats)>> = BTreeMap::new();
        for ((k, who), v) in &snap.calls {
            add_stats(per_syscall.entry((k.syscall, who)).or_insert_with(SyscallStats::zeroed), v);
            let row = k.syscall.row();
            for (u, f) in row_families(row) {
                let value = match by_variant(u, row) {
                    None => None,
                    Some(_) => match variant_value(row, k.variant) {
                        Some(value) => Some(value),
                        None => continue,
                    },
                };
                let e = grouped
                    .entry(f.name)
                    .or_default()
                    .entry((who, value))
                    .or_insert_with(|| (u, SyscallStats::zeroed()));
                add_stats(&mut e.1, v);
            }
        }

        let durations = per_syscall
            .iter()
            .filter(|(_, s)| call_count(s) > 0)
            .map(|((sc, who), s)| {
                let [c, w] = who.pairs();
                latency_histogram(&[("syscall", sc.row().name), c, w], s)
            })
            .collect();
        out.push(family(SYSCALL_DURATION, HISTOGRAM, durations));
        let named: Vec<&MetricDef> = metric_defs()
            .iter()
            .filter(|d| SYSCALLS.iter().any(|s| row_families(s).any(|(_, f)| f.name == d.name)))
            .collect();
        for def in named {
            let mut metrics = Vec::new();
            for ((who, value), (u, s)) in grouped.get(def.name).into_iter().flatten() {
                let values = [&*who.comm, &*who.workload].into_iter().chain(*value);
                let pairs: Vec<(&str, &str)> = def.labels.iter().copied().zip(values).collect();
                let calls = call_count(s);
                match u {
                    Use::Bytes if calls > 0 => metrics.push(counter(&pairs, s.bytes as f64)),
                    Use::Size if calls > 0 => metrics.push(size_histogram(&pairs, s)),
                    Use::Small if calls > 0 => metrics.push(counter(&pairs, s.small as f64)),
                    Use::Succeeded if calls > s.errors => {
                        metrics.push(counter(&pairs, (calls - s.errors) as f64))
                    }
                    Use::Duration if calls > 0 => metrics.push(latency_histogram(&pairs, s)),
                    _ => {}
                }
            }
            out.push(family(def.name, def.kind, metrics));
        }

        let errors = snap
            .errors
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|((sc, who, e), &n)| {
                let errno = if *e == 0 { "unknown".to_string() } else { errno::name(*e) };
                let [c, w] = who.pairs();
                counter(&[("syscall", sc.row().name), c, w, ("errno", &errno)], n as f64)
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

        let thread_states;
        {
            let probe = self.probe.lock().expect("probe lock");
            thread_states = probe.thread_state_entries();
            out.push(family(
                "sonic_probe_bpf_programs_attached",
                GAUGE,
                vec![gauge(&[], probe.attached().len() as f64)],
            ));
            out.push(family(
                "sonic_probe_kernel_feature",
                GAUGE,
                probe
                    .features()
                    .iter()
                    .map(|(f, on)| gauge(&[("feature", f.name())], f64::from(u8::from(on))))
                    .collect(),
            ));
            out.push(family(
                "sonic_probe_bpf_variant",
                GAUGE,
                probe
                    .variant()
                    .pieces()
                    .iter()
                    .map(|(p, v)| gauge(&[("piece", p), ("variant", v)], 1.0))
                    .collect(),
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
            ]
            .into_iter()
            // Only where per-thread state is a hash (entry_state=thread_map).
            .chain(thread_states.map(|n| gauge(&[("map", "thread_states")], n as f64)))
            .collect(),
        ));
        let assigned = self.labels.lock().expect("labels lock").assigned();
        out.push(family("sonic_probe_comm_labels", GAUGE, vec![gauge(&[], assigned as f64)]));
        let workloads = self.workloads.lock().expect("workloads lock");
        out.push(family(
            "sonic_probe_workload_info",
            GAUGE,
            workloads
                .info()
                .map(|(label, w)| {
                    let pairs = [
                        ("workload", label),
                        ("kind", w.kind.as_str()),
                        ("unit", w.unit.as_str()),
                        ("namespace", w.namespace.as_str()),
                        ("pod", w.pod.as_str()),
                        ("container", w.container.as_str()),
                        ("container_id", w.container_id.as_str()),
                    ];
                    gauge(&pairs, 1.0)
                })
                .collect(),
        ));
        out.push(family("sonic_probe_workload_labels", GAUGE, vec![gauge(&[], workloads.assigned() as f64)]));
        let (named, unresolved) = workloads.resolutions();
        out.push(family(
            "sonic_probe_workload_resolutions_total",
            COUNTER,
            vec![
                counter(&[("result", "named")], named as f64),
                counter(&[("result", "unresolved")], unresolved as f64),
            ],
        ));
        out
    }
}

/// Exports what the detectors counted, and the findings by kind.
pub struct FindingsCollector {
    findings: FindingsService,
    labels: Arc<Mutex<CommLabels>>,
    workloads: Arc<Mutex<Workloads>>,
    thread_labels: Mutex<CommLabels>,
    descs: Vec<Desc>,
    /// Where the stack captures count their results (None: captures off).
    captures: Option<crate::capture::CaptureStore>,
}

impl FindingsCollector {
    /// Also exports the stack captures' results.
    pub fn with_captures(mut self, captures: Option<crate::capture::CaptureStore>) -> Self {
        self.captures = captures;
        self
    }

    pub fn new(
        findings: FindingsService,
        labels: Arc<Mutex<CommLabels>>,
        workloads: Arc<Mutex<Workloads>>,
        max_threads: usize,
    ) -> Self {
        FindingsCollector {
            findings,
            labels,
            workloads,
            thread_labels: Mutex::new(CommLabels::new(max_threads)),
            descs: descs_of(|n| DETECTOR_METRICS.contains(&n)),
            captures: None,
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
        let mut workloads = self.workloads.lock().expect("workloads lock");
        let mut threads = self.thread_labels.lock().expect("thread labels lock");
        // Fold raw names and cgroups into bounded label values, adding up
        // what folds together.
        let mut who =
            |comm: &str, cgroup: u64| Who { comm: labels.label(comm), workload: workloads.label(cgroup) };
        let mut stalls: BTreeMap<(Who, String), u64> = BTreeMap::new();
        for ((comm, cgroup, thread), n) in &m.futex_stalls {
            *stalls.entry((who(comm, *cgroup), threads.label(thread).to_string())).or_default() += n;
        }
        let mut max: BTreeMap<Who, f64> = BTreeMap::new();
        for ((comm, cgroup), s) in &m.stall_max_seconds {
            let e = max.entry(who(comm, *cgroup)).or_default();
            *e = e.max(*s);
        }
        let mut opens: BTreeMap<(Who, String), u64> = BTreeMap::new();
        for ((comm, cgroup, class), n) in &m.repeated_opens {
            *opens.entry((who(comm, *cgroup), class.clone())).or_default() += n;
        }
        let mut churn: BTreeMap<Who, u64> = BTreeMap::new();
        for ((comm, cgroup), n) in &m.mmap_churn {
            *churn.entry(who(comm, *cgroup)).or_default() += n;
        }
        let mut errors: BTreeMap<(Who, String, String), u64> = BTreeMap::new();
        for ((comm, cgroup, syscall, errno), n) in &m.recurring_errors {
            *errors.entry((who(comm, *cgroup), syscall.clone(), errno.clone())).or_default() += n;
        }
        // Every kind and state, 0 until something is evicted.
        let evictions: Vec<Metric> = FINDING_KINDS
            .iter()
            .flat_map(|k| ["working", "finding"].map(|s| (*k, s)))
            .map(|(k, s)| {
                let n = m.evictions.get(&(k, s)).copied().unwrap_or(0);
                counter(&[("kind", k), ("state", s)], n as f64)
            })
            .collect();
        vec![
            family(
                "sonic_probe_futex_stalls_total",
                COUNTER,
                stalls
                    .iter()
                    .map(|((w, t), n)| {
                        let [c, wl] = w.pairs();
                        counter(&[c, wl, ("thread", t)], *n as f64)
                    })
                    .collect(),
            ),
            family(
                "sonic_probe_futex_stall_max_seconds",
                GAUGE,
                max.iter().map(|(w, s)| gauge(&w.pairs(), *s)).collect(),
            ),
            family(
                "sonic_probe_repeated_opens_total",
                COUNTER,
                opens
                    .iter()
                    .map(|((w, k), n)| {
                        let [c, wl] = w.pairs();
                        counter(&[c, wl, ("file_class", k)], *n as f64)
                    })
                    .collect(),
            ),
            family(
                "sonic_probe_mmap_churn_total",
                COUNTER,
                churn.iter().map(|(w, n)| counter(&w.pairs(), *n as f64)).collect(),
            ),
            family(
                "sonic_probe_recurring_errors_total",
                COUNTER,
                errors
                    .iter()
                    .map(|((w, s, e), n)| {
                        let [c, wl] = w.pairs();
                        counter(&[c, wl, ("syscall", s), ("errno", e)], *n as f64)
                    })
                    .collect(),
            ),
            family("sonic_probe_findings_evictions_total", COUNTER, evictions),
            family(
                "sonic_probe_stack_captures_total",
                COUNTER,
                match &self.captures {
                    Some(c) => c.results(),
                    None => crate::capture::RESULTS.iter().map(|r| (*r, 0)).collect(),
                }
                .into_iter()
                .map(|(r, n)| counter(&[("result", r)], n as f64))
                .collect(),
            ),
            family(
                "sonic_probe_stack_capture_seconds_total",
                COUNTER,
                vec![counter(&[], self.captures.as_ref().map_or(0.0, |c| c.time_spent().as_secs_f64()))],
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
    fn every_family_of_the_table_is_defined_once_with_one_shape() {
        for s in &SYSCALLS {
            for (u, f) in row_families(s) {
                let defs: Vec<&MetricDef> = metric_defs().iter().filter(|d| d.name == f.name).collect();
                assert_eq!(defs.len(), 1, "{}", f.name);
                let mut labels = vec!["comm", "workload"];
                labels.extend(by_variant(u, s));
                assert_eq!(defs[0].labels, labels, "{}: rows that share it label it alike", f.name);
                assert_eq!(defs[0].kind, u.kind(), "{}: one use per family", f.name);
            }
        }
    }

    #[test]
    fn every_metric_is_documented() {
        let doc = include_str!("../../docs/metrics.md");
        for m in metric_defs() {
            assert!(doc.contains(&format!("`{}`", m.name)), "{} missing from docs/metrics.md", m.name);
            for l in &m.labels {
                assert!(doc.contains(&format!("`{l}`")), "label {l} of {} undocumented", m.name);
            }
        }
    }

    #[test]
    fn variant_labels_by_row() {
        use sonic_probe_common::{syscalls, FILE_CLASS_GPU, FILE_CLASS_MODEL};
        let row = |i: u16| syscalls::by_index(i).unwrap();
        assert_eq!(variant_value(row(syscalls::FUTEX), 9), Some("wait_bitset"));
        assert_eq!(variant_value(row(syscalls::FUTEX), 1), None, "a wake is no wait");
        assert_eq!(variant_value(row(syscalls::FUTEX_WAITV), 0), Some("waitv"));
        assert_eq!(variant_value(row(syscalls::PREAD64), FILE_CLASS_MODEL), Some("model"));
        assert_eq!(variant_value(row(syscalls::IOCTL), FILE_CLASS_GPU), Some("gpu"));
        assert_eq!(variant_value(row(syscalls::IOCTL), 0), Some("other"));
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
