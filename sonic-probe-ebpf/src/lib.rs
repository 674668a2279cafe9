//! sonic-probe's BPF programs, compiled from C by `build.rs` and embedded.
//!
//! The daemon loads [`OBJECT`] with aya and attaches each of [`PROGRAMS`] to
//! its BTF tracepoint. Map names used by the daemon are listed in
//! [`maps`]; they are the `SEC(".maps")` variables of `bpf/sonic_probe.bpf.c`.

/// The compiled BPF object (ELF with BTF and CO-RE relocations), 8-byte aligned.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sonic_probe.bpf.o"));

/// Empty programs on sys_enter/sys_exit (`floor_enter`, `floor_exit`): what
/// benchmarks compare sonic-probe's cost with.
pub static FLOOR_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/floor.bpf.o"));

/// The least an exact per-call latency histogram costs (`minimal_enter`,
/// `minimal_exit`: clock at entry and exit, task storage, one per-CPU hash
/// bucket per call), for benchmarks.
pub static MINIMAL_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/minimal.bpf.o"));

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
    /// fork/exec/exit: keep the target set current. Attached first, so that
    /// no process started while the rest attaches escapes it.
    Lifecycle,
    /// sys_enter/sys_exit: measure the calls.
    Syscalls,
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
    ProgramSpec { name: "sys_enter", tracepoint: "sys_enter", group: ProgramGroup::Syscalls },
    ProgramSpec { name: "sys_exit", tracepoint: "sys_exit", group: ProgramGroup::Syscalls },
];

/// Names of the maps in [`OBJECT`].
pub mod maps {
    pub const CONFIG: &str = "config";
    pub const TARGET_PROCESSES: &str = "target_processes";
    pub const TARGET_THREADS: &str = "target_threads";
    pub const TARGET_COMMS: &str = "target_comms";
    pub const TARGET_CGROUPS: &str = "target_cgroups";
    pub const THREAD_STATES: &str = "thread_states";
    pub const SYSCALL_STATS: &str = "syscall_stats";
    pub const SYSCALL_ERRORS: &str = "syscall_errors";
    pub const COUNTERS: &str = "counters";
    pub const OPEN_FILES: &str = "open_files";
    pub const FILE_CLASSES: &str = "file_classes";
    pub const EVENTS: &str = "events";
}
