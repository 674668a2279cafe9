//! The kernel's side and the daemon's own health: the system-call families
//! (read from the aggregation maps at scrape time, metrics/syscalls.rs), the
//! event pipeline's counts and losses, the BPF programs and kernel features
//! in use, the kernel maps' sizes, and the label bounds (comm, workload).

use std::sync::{atomic::Ordering, Arc, Mutex};

use prometheus::{
    core::{Collector, Desc},
    proto::{Metric, MetricFamily, MetricType},
};
use sonic_probe_common::{
    COUNTER_DROP_ERRORS, COUNTER_DROP_GPU_WAITING, COUNTER_DROP_GPU_WAITS, COUNTER_DROP_INFLIGHT_WAITS,
    COUNTER_DROP_OPEN_FILES, COUNTER_DROP_RINGBUF, COUNTER_DROP_STATS, COUNTER_DROP_TARGET,
    COUNTER_DROP_THREAD_CLOCK, COUNTER_DROP_THREAD_STATE, COUNTER_ERRORS_OVERFLOW, COUNTER_EVENTS_SENT,
    COUNTER_GPU_WAIT_OVERFLOW, COUNTER_STATS_OVERFLOW, COUNTER_THREAD_TIME_OVERFLOW,
};

use super::{
    family::{counter, def, descs, family, gauge, named, MetricDef},
    gpu, syscalls, threads,
};
use crate::{
    events::reader::ReaderStats,
    probe::{Probe, TargetMaps},
    stats::labels::CommLabels,
    stats::StatsStore,
    threads::ThreadTimeStore,
    workloads::Workloads,
};

use MetricType::{COUNTER, GAUGE};

/// The families of the pipeline, the probe and the label bounds (besides
/// the system-call families).
#[rustfmt::skip]
pub const METRICS: &[MetricDef] = &[
    def("sonic_probe_events_produced_total", COUNTER, &[],
        "Events the BPF programs tried to send to the daemon."),
    def("sonic_probe_events_total", COUNTER, &["kind"],
        "Events the daemon received from the ring buffer, by kind."),
    def("sonic_probe_events_dropped_total", COUNTER, &["stage"],
        "Events or calls lost, by stage: ringbuf (ring buffer full), thread_state (no \
         per-thread state, call not measured), stats_map / errors_map (aggregation map full, \
         no overflow entry), target_map (forked child not followed), open_files (descriptor \
         not tracked), futex_waiting (futex wait not tracked while in progress: no stack capture for \
         it), thread_clock (no scheduler clock for a thread: its time not accounted), gpu_waits (a GPU wait not \
         counted: no clock for its thread, or gpu_waits full), gpu_waiting (a GPU wait not tracked while in progress: no stack capture for it), user_queue (daemon queue full)."),
    def("sonic_probe_event_decode_errors_total", COUNTER, &[],
        "Ring buffer records the daemon could not decode."),
    def("sonic_probe_aggregation_overflow_total", COUNTER, &["map"],
        "Calls, errors or thread time counted in the comm=\"other\" workload=\"other\" overflow entry because \
         the kernel map was full (map: syscall_stats, syscall_errors, thread_time_slots, gpu_waits)."),
    def("sonic_probe_build_info", GAUGE, &["version", "kernel"],
        "Always 1; labels tell the sonic-probe version and the running kernel."),
    def("sonic_probe_bpf_programs_attached", GAUGE, &[],
        "BPF programs currently attached."),
    def("sonic_probe_bpf_programs", GAUGE, &[],
        "BPF programs this build and configuration attach when healthy (what \
         sonic_probe_bpf_programs_attached should be, whatever the version: 9, 6 with --thread-time off)."),
    def("sonic_probe_kernel_feature", GAUGE, &["feature"],
        "1 if the running kernel accepted the BPF feature's probe program, else 0 (btf_tracepoint, ringbuf, \
         task_btf, ancestor_cgroup_id, task_storage, bpf_loop, percpu_lookup)."),
    def("sonic_probe_bpf_variant", GAUGE, &["piece", "variant"],
        "Always 1: the variant of each kernel-dependent piece of the BPF programs in use (task_access: \
         btf_pointer or core_read; entry_state: task_storage or thread_map; futex_waker: percpu_rings or wake_map)."),
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
    def("sonic_probe_workload_info", GAUGE, &["workload", "kind", "unit", "namespace", "pod", "container", "container_id"],
        "Always 1, one series per workload label value in use: what it stands for (kind: host, systemd, \
         kubernetes, docker, cgroup, unresolved). Join on workload."),
    def("sonic_probe_workload_labels", GAUGE, &[],
        "Distinct workloads exported with their own workload label (see --max-workloads)."),
    def("sonic_probe_workload_resolutions_total", COUNTER, &["result"],
        "cgroups named into workloads: result=\"named\" (from their path), \"unresolved\" (gone before they were named)."),
];

/// Kernel counter index -> dropped-stage label.
const DROP_STAGES: &[(u32, &str)] = &[
    (COUNTER_DROP_RINGBUF, "ringbuf"),
    (COUNTER_DROP_THREAD_STATE, "thread_state"),
    (COUNTER_DROP_STATS, "stats_map"),
    (COUNTER_DROP_ERRORS, "errors_map"),
    (COUNTER_DROP_TARGET, "target_map"),
    (COUNTER_DROP_OPEN_FILES, "open_files"),
    (COUNTER_DROP_INFLIGHT_WAITS, "futex_waiting"),
    (COUNTER_DROP_THREAD_CLOCK, "thread_clock"),
    (COUNTER_DROP_GPU_WAITS, "gpu_waits"),
    (COUNTER_DROP_GPU_WAITING, "gpu_waiting"),
];

/// The kernel maps whose handles the daemon's sweep holds (open_files,
/// reopens): their entries now, for sonic_probe_kernel_map_entries.
pub trait SweptMaps: Send + Sync {
    fn open_file_entries(&self) -> usize;
    fn reopen_entries(&self) -> usize;
}

/// Exports the kernel's counts and the probe's own health.
pub struct ProbeCollector {
    pub probe: Arc<Mutex<Probe>>,
    pub store: Arc<Mutex<StatsStore>>,
    pub targets: Arc<Mutex<TargetMaps>>,
    pub reader: Arc<ReaderStats>,
    pub labels: Arc<Mutex<CommLabels>>,
    pub workloads: Arc<Mutex<Workloads>>,
    pub swept: Arc<dyn SweptMaps>,
    pub whole_host: bool,
    /// Where watched threads' time goes (None with --thread-time off).
    threads: Option<Arc<ThreadTimeStore>>,
    /// GPU waits (None with --gpu-waits off).
    gpu: Option<gpu::GpuSources>,
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
        swept: Arc<dyn SweptMaps>,
        whole_host: bool,
    ) -> Self {
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        let descs = descs(syscalls::defs().iter().chain(METRICS).chain(threads::METRICS).chain(gpu::METRICS));
        ProbeCollector {
            probe,
            store,
            targets,
            reader,
            labels,
            workloads,
            swept,
            whole_host,
            threads: None,
            gpu: None,
            kernel,
            descs,
        }
    }

    /// Exports the GPU waits and the libraries probed.
    pub fn with_gpu(mut self, gpu: Option<gpu::GpuSources>) -> Self {
        self.gpu = gpu;
        self
    }

    /// Exports where watched threads' time goes, from `store`.
    pub fn with_threads(mut self, store: Option<Arc<ThreadTimeStore>>) -> Self {
        self.threads = store;
        self
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
        syscalls::collect(&mut out, &snap);

        let c = |i: u32| counters[i as usize] as f64;
        out.push(probe_family(
            "sonic_probe_events_produced_total",
            vec![counter(&[], c(COUNTER_EVENTS_SENT))],
        ));
        out.push(probe_family(
            "sonic_probe_events_total",
            self.reader.received().iter().map(|(k, n)| counter(&[("kind", k)], *n as f64)).collect(),
        ));
        let mut drops: Vec<Metric> =
            DROP_STAGES.iter().map(|&(i, stage)| counter(&[("stage", stage)], c(i))).collect();
        drops.push(counter(
            &[("stage", "user_queue")],
            self.reader.queue_drops.load(Ordering::Relaxed) as f64,
        ));
        out.push(probe_family("sonic_probe_events_dropped_total", drops));
        out.push(probe_family(
            "sonic_probe_event_decode_errors_total",
            vec![counter(&[], self.reader.decode_errors.load(Ordering::Relaxed) as f64)],
        ));
        out.push(probe_family(
            "sonic_probe_aggregation_overflow_total",
            vec![
                counter(&[("map", "syscall_stats")], c(COUNTER_STATS_OVERFLOW)),
                counter(&[("map", "syscall_errors")], c(COUNTER_ERRORS_OVERFLOW)),
                counter(&[("map", "thread_time_slots")], c(COUNTER_THREAD_TIME_OVERFLOW)),
                counter(&[("map", "gpu_waits")], c(COUNTER_GPU_WAIT_OVERFLOW)),
            ],
        ));
        out.push(probe_family(
            "sonic_probe_build_info",
            vec![gauge(&[("version", env!("CARGO_PKG_VERSION")), ("kernel", &self.kernel)], 1.0)],
        ));

        if let Some(threads) = &self.threads {
            threads::collect(&mut out, threads);
        }
        let (thread_states, thread_clocks);
        {
            let probe = self.probe.lock().expect("probe lock");
            thread_states = probe.thread_state_entries();
            thread_clocks = probe.thread_clock_entries();
            if let Some(g) = &self.gpu {
                gpu::collect(&mut out, g, probe.gpu_links());
            }
            out.push(probe_family(
                "sonic_probe_bpf_programs_attached",
                vec![gauge(&[], probe.attached().len() as f64)],
            ));
            out.push(probe_family(
                "sonic_probe_bpf_programs",
                vec![gauge(&[], probe.expected_programs() as f64)],
            ));
            out.push(probe_family(
                "sonic_probe_kernel_feature",
                probe
                    .features()
                    .iter()
                    .map(|(f, on)| gauge(&[("feature", f.name())], f64::from(u8::from(on))))
                    .collect(),
            ));
            out.push(probe_family(
                "sonic_probe_bpf_variant",
                probe
                    .variant()
                    .pieces()
                    .iter()
                    .map(|(p, v)| gauge(&[("piece", p), ("variant", v)], 1.0))
                    .collect(),
            ));
            if probe.run_time_stats_enabled() {
                let stats = probe.program_stats();
                out.push(probe_family(
                    "sonic_probe_bpf_program_run_seconds_total",
                    stats.iter().map(|p| counter(&[("program", p.name)], p.run_time.as_secs_f64())).collect(),
                ));
                out.push(probe_family(
                    "sonic_probe_bpf_program_runs_total",
                    stats.iter().map(|p| counter(&[("program", p.name)], p.run_count as f64)).collect(),
                ));
            }
        }
        let targets =
            if self.whole_host { 0 } else { self.targets.lock().expect("targets lock").process_count() };
        out.push(probe_family("sonic_probe_target_processes", vec![gauge(&[], targets as f64)]));
        out.push(probe_family(
            "sonic_probe_kernel_map_entries",
            vec![
                gauge(&[("map", "syscall_stats")], entries.stats as f64),
                gauge(&[("map", "stats_slots")], entries.slotted as f64),
                gauge(&[("map", "syscall_errors")], entries.errors as f64),
                gauge(&[("map", "open_files")], self.swept.open_file_entries() as f64),
                gauge(&[("map", "reopens")], self.swept.reopen_entries() as f64),
            ]
            .into_iter()
            // Only where per-thread state is a hash (entry_state=thread_map).
            .chain(thread_states.map(|n| gauge(&[("map", "thread_states")], n as f64)))
            .chain(thread_clocks.map(|n| gauge(&[("map", "thread_clocks")], n as f64)))
            .chain(
                self.threads
                    .as_ref()
                    .map(|t| gauge(&[("map", "thread_time_slots")], t.slots_in_use() as f64)),
            )
            .collect(),
        ));
        let assigned = self.labels.lock().expect("labels lock").assigned();
        out.push(probe_family("sonic_probe_comm_labels", vec![gauge(&[], assigned as f64)]));
        let workloads = self.workloads.lock().expect("workloads lock");
        out.push(probe_family(
            "sonic_probe_workload_info",
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
        out.push(probe_family("sonic_probe_workload_labels", vec![gauge(&[], workloads.assigned() as f64)]));
        let (named, unresolved) = workloads.resolutions();
        out.push(probe_family(
            "sonic_probe_workload_resolutions_total",
            vec![
                counter(&[("result", "named")], named as f64),
                counter(&[("result", "unresolved")], unresolved as f64),
            ],
        ));
        out
    }
}

/// The family of METRICS named `name`, with these series.
fn probe_family(name: &str, metrics: Vec<Metric>) -> MetricFamily {
    family(named(METRICS, name), metrics)
}
