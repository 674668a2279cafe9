//! Context switches: what sonic-probe's scheduler programs (where each
//! watched thread's time goes, sonic-probe-ebpf's bpf/thread_time.h) cost
//! per switch, next to the least an exact per-thread accountant of on-CPU
//! and run-queue time costs (bpf/sched_minimal.bpf.c: task storage, a
//! clock read per switch and per wake-up, one per-CPU add).
//!
//! The scenario has a known switch rate: sp-bench pingpong, two threads
//! pinned to the benchmark's CPU waking each other through a futex, two
//! switches and two wake-ups per round trip. Kernel-side, as for the
//! system calls: the kernel's run-time statistics of each tracer's
//! sched_switch and sched_wakeup programs, ns per invocation, added up per
//! switch (one switch and one wake-up). Wall clock: ns per switch of the
//! ping-pong, with nothing attached, the minimal accountant, and sonic-probe
//! run watching the whole host (whose system-call programs also see the
//! futex calls: the kernel-side figure is the scheduler's alone).

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{
    bpfstats::{self, Programs},
    harness::Bench,
    statistics::median,
    tracers::{Attached, Tracer},
};

/// What is compared, in the report's order.
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Nothing,
    Minimal,
    Sonic,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Nothing => "no tracer",
            Who::Minimal => "minimal exact accountant (reference)",
            Who::Sonic => "sonic-probe run (whole host)",
        }
    }
}

/// One round's figures of one tracer: wall ns per switch; kernel ns per
/// switch (sched_switch + sched_wakeup per invocation) and each program's.
struct Sample {
    wall: f64,
    kernel: Option<(f64, Vec<(String, f64)>)>,
}

fn is_scheduler_program(name: &str) -> bool {
    name.contains("switch") || name.contains("wakeup")
}

impl Bench {
    fn attach_switches(&self, who: Who) -> Result<Attached> {
        match who {
            Who::Nothing => Ok(Attached::Nothing),
            Who::Minimal => Ok(Attached::Process(self.start_reference(&["sched-minimal"])?)),
            Who::Sonic => self.attach(Tracer::SonicRun),
        }
    }

    /// ns per switch of `n` round trips of sp-bench pingpong.
    fn pingpong(&self, n: u64) -> Result<f64> {
        let out = Command::new(&self.spbench).args(self.bench_args("pingpong", n)).output()?;
        if !out.status.success() {
            bail!("sp-bench pingpong: {}", out.status);
        }
        crate::calls::parse_ns(&String::from_utf8_lossy(&out.stdout))
    }

    fn switch_sample(&self, who: Who, n: u64) -> Result<Sample> {
        let attached = self.attach_switches(who)?;
        let programs = match &attached {
            Attached::Process(c) => Some(Programs::of_process_named(c.id(), is_scheduler_program)?),
            Attached::Nothing => None,
        };
        self.pingpong(n / 10)?; // warm-up
        let wall = self.pingpong(n)?;
        let kernel = match &programs {
            None => None,
            Some(p) => {
                let on = bpfstats::enable()?;
                let before = p.snapshot()?;
                self.pingpong(n)?;
                let after = p.snapshot()?;
                drop(on);
                let each: Vec<(String, f64)> =
                    p.per_program(&before, &after).into_iter().map(|(name, ns, _)| (name, ns)).collect();
                let per = |what: &str| {
                    each.iter().filter(|(n, _)| n.ends_with(what)).map(|(_, ns)| ns).sum::<f64>()
                };
                Some((per("switch") + per("wakeup"), each))
            }
        };
        drop(attached);
        Ok(Sample { wall, kernel })
    }
}

/// The report's section.
pub(crate) fn section(b: &Bench, rounds: usize, smoke: bool) -> Result<String> {
    let n: u64 = if smoke { 20_000 } else { 200_000 };
    let all = [Who::Nothing, Who::Minimal, Who::Sonic];
    let mut samples: Vec<Vec<Sample>> = all.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for i in 0..all.len() {
            let k = (i + round) % all.len();
            let s = b
                .switch_sample(all[k], n)
                .with_context(|| format!("context switches under {}", all[k].name()))?;
            eprintln!("   switches under {:<40} {:>6.0} ns per switch", all[k].name(), s.wall);
            samples[k].push(s);
        }
    }
    let wall: Vec<f64> =
        samples.iter().map(|v| median(&mut v.iter().map(|s| s.wall).collect::<Vec<_>>())).collect();
    let kernel: Vec<Option<f64>> = samples
        .iter()
        .map(|v| {
            let mut k: Vec<f64> = v.iter().filter_map(|s| s.kernel.as_ref().map(|k| k.0)).collect();
            (!k.is_empty()).then(|| median(&mut k))
        })
        .collect();
    let mut out = String::from(
        "\n## Context switches (where each thread's time goes)\n\n\
         sp-bench pingpong: two threads pinned to one CPU waking each other through a futex (2 switches \
         and 2 wake-ups per round trip). Kernel-side: the sched_switch and sched_wakeup programs' run time \
         per invocation (BPF statistics), added up per switch; wall clock: ns per switch of the loop, \
         medians over rounds.\n\n\
         | tracer | kernel-side ns per switch | vs the minimal | wall ns per switch | added vs no tracer |\n\
         |---|---|---|---|---|\n",
    );
    for (i, who) in all.iter().enumerate() {
        let k = kernel[i].map_or("-".to_string(), |k| format!("{k:.0}"));
        let ratio = match (kernel[i], kernel[1]) {
            (Some(k), Some(m)) if m > 0.0 => format!("{:.2}x", k / m),
            _ => "-".to_string(),
        };
        let added = if i == 0 { "-".to_string() } else { format!("{:+.0}", wall[i] - wall[0]) };
        out.push_str(&format!("| {} | {k} | {ratio} | {:.0} | {added} |\n", who.name(), wall[i]));
    }
    if let Some(last) = samples[2].last().and_then(|s| s.kernel.as_ref()) {
        let each: Vec<String> = last.1.iter().map(|(n, ns)| format!("{n} {ns:.0} ns")).collect();
        out.push_str(&format!(
            "\nsonic-probe's programs per invocation (last round): {}.\n",
            each.join(", ")
        ));
    }
    Ok(out)
}
