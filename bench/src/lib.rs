//! `cargo xtask bench`: what sonic-probe costs the service it watches,
//! measured side by side with the other ways of seeing the same calls.
//!
//! Two measures, the first one decides. **Kernel-side**: for each BPF
//! tracer, the kernel's own run-time statistics of its sys_enter and
//! sys_exit programs (run_time_ns / run_cnt, bpfstats.rs) while the
//! benchmark makes one kind of call: ns per program invocation and per
//! traced call (enter + exit), free of the scheduler and of neighbours on a
//! shared VM. **Wall clock**: ns per call of the benchmark loop, with the
//! benchmark pinned to one CPU and the tracer's process to another, each
//! tracer warmed up first; each round runs every tracer once and the order
//! rotates from round to round (A B C, B C A, ...), so that drift and being
//! first or last hit all alike. Results are medians over rounds with
//! min-max, and ratios come with a 95 % bootstrap interval over the rounds
//! (rounds resampled, the tracers of a round kept together), so that the
//! report says whether two tracers differ. A round whose baseline moved (no
//! tracer slower than the floor) is flagged, and a ratio whose denominator
//! is not positive is not printed as a number.
//!
//! Where the minimal tracer's time goes is measured by removal: the same
//! programs built without one piece each (clock reads, task storage,
//! aggregation), kernel-side. The added cost of a tracer is its time per
//! call minus the untraced time, compared with the floor's (empty BPF
//! programs on the same two tracepoints: the price of attaching at all).
//! The mixed workload times itself (from its first request to its last), so
//! that no tracer's start-up is in its time. The events sonic-probe trace
//! loses are reported next to its times. At 100k traced calls per second,
//! the CPU sonic-probe run costs is measured both in the daemon process and
//! in the traced processes (its BPF programs run on their time). The report
//! starts with the machine's facts that explain why the floor differs
//! between machines (CPU, Spectre mitigations, clock source) and goes to
//! target/bench/report.md.
//!
//! This crate is the benchmark, apart from the daemon it measures (the
//! shipped sonic-probe links none of it): `cargo xtask bench` parses the
//! flags, installs and builds what is missing, then calls [`bench`]. Its
//! modules, by concern:
//!
//! - `tracers`: what each tracer is and how it is started;
//! - `calls`: the calls measured, per-iteration counts, one sample of each;
//! - `harness`: the binaries, the CPUs, starting processes, CPU time;
//! - `rounds`: the rounds of a run and what they collect;
//! - `statistics`: medians, bootstrap intervals;
//! - `bpfstats`: the kernel's BPF run-time statistics;
//! - `machine`: the machine's facts;
//! - `daemon`: the daemon's CPU, memory, start time and scaling;
//! - `switches`: the scheduler programs' cost per context switch, next to
//!   a minimal exact accountant of on-CPU and run-queue time;
//! - `gpu`: the GPU uprobes' cost per probed CUDA call, next to the floor
//!   (empty programs at the same entry and return) and bpftrace's uprobe
//!   and uretprobe on the same function, and a call not probed;
//! - `report`: the report's sections, and where it is written.
//!
//! Its binaries: `sp-bench` (the call loops, `src/bin/sp-bench.rs`) and
//! `sp-reference` (attaches the reference programs of `bpf/`, compiled by
//! `build.rs`; only with the `reference-programs` feature, on by default).

mod bpfstats;
mod calls;
mod daemon;
mod gpu;
mod harness;
mod machine;
#[cfg(feature = "reference-programs")]
pub mod reference;
mod report;
mod rounds;
mod statistics;
mod switches;
mod tracers;

use std::path::Path;

use anyhow::Result;

pub use tracers::{baseline_binary, Tracer};

/// What `cargo xtask bench` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fewer iterations and one round by default: every tracer attaches and
    /// the report is written (`cargo xtask test` runs it).
    pub smoke: bool,
    pub rounds: usize,
    /// Only the daemon's CPU and memory at 100k traced calls/s, printed.
    pub cpu_only: bool,
    /// The tracers to run (all of [`Tracer::ALL`]: the daemon's load and
    /// scaling too).
    pub tracers: Vec<Tracer>,
}

/// Measures and reports, with sonic-probe, sp-bench and sp-reference built
/// in `root`/target/release and the tracers installed (root needed): the
/// report is printed and written to target/bench/report.md (report-smoke.md
/// with `smoke`; `cpu_only` prints only).
pub fn bench(root: &Path, options: &Options) -> Result<()> {
    let Options { smoke, rounds, ref tracers, .. } = *options;
    let all = Tracer::ALL;
    let mut report = String::from("# sonic-probe benchmark\n\n");
    report.push_str(&format!(
        "{} round(s){}; the kernel-side figures decide, the wall-clock ones carry the machine's noise.\n\n",
        rounds,
        if smoke { ", smoke run (fewer iterations)" } else { "" }
    ));
    report.push_str(&machine::machine_facts());
    report.push('\n');
    if options.cpu_only {
        report.push_str(&daemon::cpu_only(root, smoke, rounds)?);
        println!("{report}");
        return Ok(());
    }
    report.push_str(&rounds::run(root, smoke, rounds, tracers)?);
    // The scheduler programs' cost per switch, with sonic-probe run.
    if tracers.contains(&Tracer::SonicRun) {
        report.push_str(&switches::section(&harness::Bench::new(root, smoke), rounds, smoke)?);
    }
    // The GPU uprobes' cost per probed call, next to bpftrace's.
    if tracers.contains(&Tracer::SonicRun) && tracers.contains(&Tracer::Bpftrace) {
        report.push_str(&gpu::section(&harness::Bench::new(root, smoke), rounds, smoke)?);
    }
    // A subset (--only) reports its rounds alone; the daemon's load and
    // scaling come with every tracer (the baseline only where there is one:
    // without SONIC_PROBE_BENCH_BASELINE it never runs).
    if !all.iter().all(|t| tracers.contains(t) || *t == Tracer::SonicRunBaseline) {
        return report::write_report(root, &report, smoke);
    }
    let (cpu, rss, ready) = daemon::daemon_load(root, 100_000, if smoke { 2 } else { 10 })?;
    report.push_str(&format!(
        "\n## The daemon\n\n| measure | value | target |\n|---|---|---|\n\
         | daemon process CPU at 100k traced calls/s (the BPF cost is in the traced process: see above) | {cpu:.2}% of one core | <= 2% |\n\
         | resident memory (steady) | {:.1} MiB | <= 64 MiB |\n\
         | start to ready | {ready:.0} ms | <= 1000 ms |\n",
        rss as f64 / 1024.0
    ));
    if !smoke {
        report.push_str(&daemon::scaling(root)?);
    }
    report::write_report(root, &report, smoke)
}
