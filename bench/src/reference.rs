//! The reference BPF programs the benchmark compares sonic-probe with
//! (`bpf/floor.bpf.c`, `bpf/minimal.bpf.c`, compiled by `build.rs`),
//! embedded for sp-reference. Here and not in sonic-probe-ebpf, so that the
//! shipped daemon carries none of them.

/// Empty programs on sys_enter/sys_exit (`floor_enter`, `floor_exit`), and
/// for a function's entry and return (`floor_uprobe`, `floor_uretprobe`):
/// what benchmarks compare sonic-probe's cost with.
pub static FLOOR_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/floor.bpf.o"));

/// The least an exact per-call latency histogram costs (`minimal_enter`,
/// `minimal_exit`: clock at entry and exit, task storage, one per-CPU hash
/// bucket per call), for benchmarks.
pub static MINIMAL_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/minimal.bpf.o"));

/// The minimal programs with one piece removed each, by the piece's name
/// (same program names): the benchmark's breakdown of where the minimal's
/// run time goes. They count nothing meaningful.
pub static MINIMAL_WITHOUT: &[(&str, &[u8])] = &[
    ("clock", aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/minimal_without_clock.bpf.o"))),
    (
        "task-storage",
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/minimal_without_task_storage.bpf.o")),
    ),
    (
        "aggregation",
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/minimal_without_aggregation.bpf.o")),
    ),
];

/// The least an exact per-thread accountant of on-CPU and run-queue time
/// costs (`minimal_switch` on sched_switch, `minimal_wakeup` on
/// sched_wakeup: task storage, a clock read each, one per-CPU add), what
/// the benchmark compares sonic-probe's scheduler programs with.
pub static SCHED_MINIMAL_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched_minimal.bpf.o"));
