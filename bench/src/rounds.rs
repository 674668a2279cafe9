//! One run of the benchmark: rounds, each running every tracer once in a
//! rotating order (wall clock, then kernel-side with statistics on, and the
//! daemon's CPU at 100k traced calls/s), what they collect, and the
//! kernel-side medians kept in target/bench for the next run to compare
//! with. The report is made of what this returns.

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result};

use crate::{
    bpfstats::{self, Programs},
    calls::{kernel_iterations, kernel_repeats, KernelSample, CALLS},
    daemon::{CpuSample, CPU_RATE},
    harness::Bench,
    report::{against_previous, kernel_medians, report, KernelMedians},
    statistics::median_sample,
    tracers::{Attached, Tracer, PIECES},
};

/// Per tracer, per call: the samples (ns per call; seconds for "mixed"),
/// one per round, in round order.
pub(crate) type Samples = BTreeMap<Tracer, BTreeMap<String, Vec<f64>>>;

/// Per tracer, per call: the kernel-side samples, one per round (the
/// median of its kernel_repeats).
pub(crate) type KernelSamples = BTreeMap<Tracer, BTreeMap<String, Vec<KernelSample>>>;

/// What a run measured besides the samples.
#[derive(Default)]
pub(crate) struct Extra {
    pub(crate) kernel: KernelSamples,
    /// Per call ("mixed" too): events sonic-probe trace lost, per run.
    pub(crate) trace_lost: BTreeMap<String, Vec<u64>>,
    /// Per round, at CPU_RATE with the noise mix running.
    pub(crate) cpu: Vec<CpuSample>,
    /// (round, tracer) whose programs counted runs while this bench had
    /// statistics off: another process had them on, and that tracer's
    /// wall-clock samples of that round include their cost.
    pub(crate) stats_on_elsewhere: Vec<(usize, Tracer)>,
}

pub(crate) fn run(root: &Path, smoke: bool, rounds: usize, tracers: &[Tracer]) -> Result<String> {
    let b = Bench::new(root, smoke);
    let mut samples: Samples = BTreeMap::new();
    let mut extra = Extra::default();
    let cpu_seconds = if smoke { 2 } else { 10 };
    let measure_cpu = tracers.contains(&Tracer::None) && tracers.contains(&Tracer::SonicRun);
    // With the minimal tracer, its copies without one piece each (kernel-side
    // only), in the same rotation.
    let mut all: Vec<Tracer> = tracers.to_vec();
    if tracers.contains(&Tracer::Minimal) {
        all.extend((0..PIECES.len()).map(Tracer::MinimalWithout));
    }
    match b.cpus {
        Some(c) => eprintln!("== benchmark on CPU {}, tracers on CPU {}", c.bench, c.tracer),
        None => eprintln!("== one CPU: nothing pinned"),
    }
    for round in 0..rounds {
        // Each round starts one tracer later than the last.
        let order: Vec<Tracer> = (0..all.len()).map(|i| all[(i + round) % all.len()]).collect();
        eprintln!(
            "== round {}/{rounds}: {}",
            round + 1,
            order.iter().map(|t| t.short()).collect::<Vec<_>>().join(" ")
        );
        for t in order {
            let attached = b.attach(t).with_context(|| format!("attaching {}", t.name()))?;
            let programs = match &attached {
                Attached::Process(c) if t.kernel_side() => {
                    Some(Programs::of_process(c.id()).with_context(|| format!("programs of {}", t.name()))?)
                }
                _ => None,
            };
            b.warm_up(t).with_context(|| format!("warming up {}", t.name()))?;
            if !t.kernel_only() {
                let before = programs.as_ref().map(|p| p.snapshot()).transpose()?;
                for call in CALLS {
                    let (ns, lost) = b.run_bench(t, call, t.iterations(smoke))?;
                    samples.entry(t).or_default().entry(call.to_string()).or_default().push(ns);
                    if t == Tracer::SonicTrace {
                        extra.trace_lost.entry(call.to_string()).or_default().push(lost);
                    }
                }
                if let (Some(p), Some(before)) = (&programs, &before) {
                    if Programs::ran(before, &p.snapshot()?) {
                        extra.stats_on_elsewhere.push((round, t));
                    }
                }
                let (s, lost) = b.run_mixed(t)?;
                samples.entry(t).or_default().entry("mixed".into()).or_default().push(s);
                if t == Tracer::SonicTrace {
                    extra.trace_lost.entry("mixed".into()).or_default().push(lost);
                }
            }
            if t.kernel_side() {
                let on = bpfstats::enable()?;
                let mut repeats: BTreeMap<&str, Vec<KernelSample>> = BTreeMap::new();
                for _ in 0..kernel_repeats(smoke) {
                    for call in CALLS {
                        let k = b
                            .run_kernel(t, programs.as_ref(), call, kernel_iterations(smoke))
                            .with_context(|| format!("kernel-side {call} under {}", t.name()))?;
                        repeats.entry(call).or_default().push(k);
                    }
                }
                drop(on);
                for (call, v) in repeats {
                    let k = median_sample(v).expect("at least one repeat");
                    extra.kernel.entry(t).or_default().entry(call.to_string()).or_default().push(k);
                }
            }
            drop(attached);
            let wall = samples.get(&t).map(|s| format!("read {:>6.0} ns", s["read"].last().unwrap()));
            let kernel = extra.kernel.get(&t).map(|k| {
                let s = k["read"].last().unwrap();
                format!("kernel-side read {:>4.0} ns per call ({:.0} + {:.0})", s.per_call(), s.enter, s.exit)
            });
            eprintln!("   {:<32} {}  {}", t.name(), wall.unwrap_or_default(), kernel.unwrap_or_default());
        }
        if measure_cpu {
            let c = b.cpu_at_rate(CPU_RATE, cpu_seconds)?;
            eprintln!(
                "   at {CPU_RATE} calls/s with the noise mix: traced process {:.2}% -> {:.2}%, daemon {:.2}% \
                 of one core, {:.0} MiB",
                c.without, c.with, c.daemon, c.rss_mib
            );
            extra.cpu.push(c);
        }
    }
    // This run's kernel-side medians, kept for the next run to compare with:
    // two consecutive runs that agree within 10 % are the bench's own test
    // of its figures (issue 16).
    let dir = root.join("target/bench");
    let saved = dir.join(if smoke { "kernel-side-smoke.json" } else { "kernel-side.json" });
    let previous: Option<KernelMedians> =
        std::fs::read_to_string(&saved).ok().and_then(|s| serde_json::from_str(&s).ok());
    let now = kernel_medians(&extra.kernel);
    let mut out = report(&b, &samples, &extra, tracers, rounds, smoke);
    if let Some(previous) = previous {
        let section = against_previous(&extra.kernel, &now, &previous, &saved);
        // Right after the kernel-side section, before the wall clock.
        match out.find("## Wall clock") {
            Some(at) => out.insert_str(at, &section),
            None => out.push_str(&section),
        }
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::write(&saved, serde_json::to_string_pretty(&now)?)?;
    Ok(out)
}
