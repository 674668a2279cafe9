//! sonic-probe's BPF programs, compiled from C by `build.rs` and embedded.
//!
//! The programs come in variants (`bpf/variant.h`): the same source built
//! for kernels with and without task-local storage for tracing programs,
//! BTF task pointers, `bpf_loop` and per-CPU lookups of other CPUs'
//! elements. The daemon asks the kernel which [`Feature`]s it accepts by
//! loading each one's probe object, picks the [`Variant`] that fits, loads
//! [`Variant::object`] with aya and attaches each of [`PROGRAMS`] to its BTF
//! tracepoint. Map names used by the daemon are listed in [`maps`]; they are
//! the `SEC(".maps")` variables of `bpf/maps.h`.
//!
//! Only what the daemon loads is here: the benchmark's reference programs
//! (the floor, the minimal histogram) are the bench crate's (`bench/`), so
//! that the shipped daemon carries none of them.

include!(concat!(env!("OUT_DIR"), "/variants.rs"));

/// A kernel feature some variant of the programs depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// BTF tracepoints (`tp_btf`, Linux 5.5): required.
    BtfTracepoint,
    /// The BPF ring buffer (5.8): required.
    Ringbuf,
    /// `bpf_get_current_task_btf` (5.11): plain loads from the current task.
    TaskBtf,
    /// `bpf_get_current_ancestor_cgroup_id` from tracing programs (not on
    /// 5.10; on 6.1).
    AncestorCgroupId,
    /// Task-local storage from tracing programs (5.11-5.13).
    TaskStorage,
    /// `bpf_loop` (5.17).
    BpfLoop,
    /// `bpf_map_lookup_percpu_elem` (5.19): another CPU's element.
    PercpuLookup,
}

impl Feature {
    pub const ALL: [Feature; 7] = [
        Feature::BtfTracepoint,
        Feature::Ringbuf,
        Feature::TaskBtf,
        Feature::AncestorCgroupId,
        Feature::TaskStorage,
        Feature::BpfLoop,
        Feature::PercpuLookup,
    ];

    /// Name in logs and metrics (`sonic_probe_kernel_feature{feature}`).
    pub fn name(self) -> &'static str {
        match self {
            Feature::BtfTracepoint => "btf_tracepoint",
            Feature::Ringbuf => "ringbuf",
            Feature::TaskBtf => "task_btf",
            Feature::AncestorCgroupId => "ancestor_cgroup_id",
            Feature::TaskStorage => "task_storage",
            Feature::BpfLoop => "bpf_loop",
            Feature::PercpuLookup => "percpu_lookup",
        }
    }

    /// Whether no variant works without it.
    pub fn required(self) -> bool {
        matches!(self, Feature::BtfTracepoint | Feature::Ringbuf)
    }

    /// An object with one program, `feature_probe` (tp_btf/sys_enter), that
    /// uses the feature and nothing newer: the kernel loads it if and only
    /// if it has the feature.
    pub fn probe_object(self) -> &'static [u8] {
        macro_rules! object {
            ($name:literal) => {
                aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/", $name))
            };
        }
        match self {
            Feature::BtfTracepoint => object!("feature_btf_tracepoint.bpf.o"),
            Feature::Ringbuf => object!("feature_ringbuf.bpf.o"),
            Feature::TaskBtf => object!("feature_task_btf.bpf.o"),
            Feature::AncestorCgroupId => object!("feature_ancestor_cgroup_id.bpf.o"),
            Feature::TaskStorage => object!("feature_task_storage.bpf.o"),
            Feature::BpfLoop => object!("feature_bpf_loop.bpf.o"),
            Feature::PercpuLookup => object!("feature_percpu_lookup.bpf.o"),
        }
    }
}

/// The program in every feature probe object.
pub const FEATURE_PROBE_PROGRAM: &str = "feature_probe";

/// Which variant of each kernel-dependent piece of the programs is built
/// in (`bpf/variant.h`). `true` is the fast variant, for kernels that have
/// what it needs; `false` the fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// task_access: the current task as a BTF pointer and cgroup targets
    /// by bpf_get_current_ancestor_cgroup_id (`btf_pointer`), or CO-RE
    /// reads through bpf_probe_read_kernel and a walk up the cgroup tree
    /// (`core_read`).
    pub task_btf: bool,
    /// entry_state: task-local storage (`task_storage`), or a hash keyed
    /// by thread id freed at thread exit (`thread_map`).
    pub task_storage: bool,
    /// futex_waker: per-CPU rings searched with bpf_loop (`percpu_rings`),
    /// or the last wake of each futex word in an LRU hash (`wake_map`).
    pub waker_percpu: bool,
}

impl Variant {
    /// What the fast variant of each piece needs of the kernel.
    pub const TASK_BTF_NEEDS: &'static [Feature] = &[Feature::TaskBtf, Feature::AncestorCgroupId];
    /// (Task storage also needs the BTF task pointer.)
    pub const TASK_STORAGE_NEEDS: &'static [Feature] = &[Feature::TaskStorage];
    pub const WAKER_PERCPU_NEEDS: &'static [Feature] = &[Feature::BpfLoop, Feature::PercpuLookup];

    /// Every fast variant.
    pub const FAST: Variant = Variant { task_btf: true, task_storage: true, waker_percpu: true };

    /// (piece, variant name) of each piece, for logs and metrics
    /// (`sonic_probe_bpf_variant{piece, variant}`).
    pub fn pieces(self) -> [(&'static str, &'static str); 3] {
        [
            ("task_access", if self.task_btf { "btf_pointer" } else { "core_read" }),
            ("entry_state", if self.task_storage { "task_storage" } else { "thread_map" }),
            ("futex_waker", if self.waker_percpu { "percpu_rings" } else { "wake_map" }),
        ]
    }

    /// The compiled object (ELF with BTF and CO-RE relocations, 8-byte
    /// aligned); None for task storage without the BTF task pointer, which
    /// is never built.
    pub fn object(self) -> Option<&'static [u8]> {
        variant_object(self.task_btf, self.task_storage, self.waker_percpu)
    }
}

/// A program of the object and the BTF tracepoint it attaches to.
#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    /// Function name in the C source (aya's program name).
    pub name: &'static str,
    /// Tracepoint (`btf_trace_<name>` in kernel BTF).
    pub tracepoint: &'static str,
    pub group: ProgramGroup,
}

/// Programs are attached group by group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramGroup {
    /// fork/exec/exit/rename: keep the target set current. Attached first, so that
    /// no process started while the rest attaches escapes it.
    Lifecycle,
    /// sys_enter/sys_exit: measure the calls.
    Syscalls,
    /// sched_switch/sched_wakeup/sched_wakeup_new: where watched threads'
    /// time goes (on CPU, waiting for a CPU, blocked by cause). Attached
    /// last, by `run` and `check-config --attach` (not by `trace`).
    Scheduler,
}

/// Every program, in attach order.
pub const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "sched_process_fork",
        tracepoint: "sched_process_fork",
        group: ProgramGroup::Lifecycle,
    },
    ProgramSpec {
        name: "sched_process_exec",
        tracepoint: "sched_process_exec",
        group: ProgramGroup::Lifecycle,
    },
    ProgramSpec {
        name: "sched_process_exit",
        tracepoint: "sched_process_exit",
        group: ProgramGroup::Lifecycle,
    },
    ProgramSpec { name: "task_rename", tracepoint: "task_rename", group: ProgramGroup::Lifecycle },
    ProgramSpec { name: "sys_enter", tracepoint: "sys_enter", group: ProgramGroup::Syscalls },
    ProgramSpec { name: "sys_exit", tracepoint: "sys_exit", group: ProgramGroup::Syscalls },
    ProgramSpec { name: "sched_switch", tracepoint: "sched_switch", group: ProgramGroup::Scheduler },
    ProgramSpec { name: "sched_wakeup", tracepoint: "sched_wakeup", group: ProgramGroup::Scheduler },
    ProgramSpec { name: "sched_wakeup_new", tracepoint: "sched_wakeup_new", group: ProgramGroup::Scheduler },
];

/// Names of the maps in [`OBJECT`].
pub mod maps {
    pub const CONFIG: &str = "config";
    pub const TARGET_PROCESSES: &str = "target_processes";
    pub const TARGET_THREADS: &str = "target_threads";
    pub const TARGET_COMMS: &str = "target_comms";
    pub const TARGET_CGROUPS: &str = "target_cgroups";
    /// Per-thread entry state; a hash only with entry_state=thread_map.
    pub const THREAD_STATES: &str = "thread_states";
    /// (name, workload, syscall, variant) -> its slot of stats_slots.
    pub const STATS_INDEX: &str = "stats_index";
    /// Per-CPU array of call statistics, one slot per stats_index entry.
    pub const STATS_SLOTS: &str = "stats_slots";
    /// Per-CPU hash of the call statistics of keys without a slot.
    pub const SYSCALL_STATS: &str = "syscall_stats";
    pub const SYSCALL_ERRORS: &str = "syscall_errors";
    pub const COUNTERS: &str = "counters";
    pub const OPEN_FILES: &str = "open_files";
    /// Repeated read-only opens of a file by a process, counted (files.h).
    pub const REOPENS: &str = "reopens";
    /// Its generation (one u64): the daemon starts a new one when its
    /// sweep finds a process that exec'd or exited (fd_class_cache's slots
    /// of older generations are not used).
    pub const FD_CLASS_GENERATION: &str = "fd_class_generation";
    pub const FILE_CLASSES: &str = "file_classes";
    /// Futex waits of targets in progress (with stack captures on).
    pub const FUTEX_WAITING: &str = "futex_waiting";
    pub const EVENTS: &str = "events";
    /// (workload, process name, thread name) -> its slot of thread_time_slots.
    pub const THREAD_TIME_INDEX: &str = "thread_time_index";
    /// Per-CPU array of nanoseconds per thread state, one slot per
    /// thread_time_index entry; slot 0 the overflow slot.
    pub const THREAD_TIME_SLOTS: &str = "thread_time_slots";
    /// Per-thread scheduler clocks; a hash only with entry_state=thread_map.
    pub const THREAD_CLOCKS: &str = "thread_clocks";
    /// Per-CPU hash of GPU waits per (workload, process name, api).
    pub const GPU_WAITS: &str = "gpu_waits";
    /// GPU waits of targets in progress (with stack captures on).
    pub const GPU_WAITING: &str = "gpu_waiting";
}
