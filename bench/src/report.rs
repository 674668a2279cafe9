//! The report's sections, from what the rounds measured: kernel-side per
//! traced call and per invocation, the ratios to the minimal tracer, the
//! breakdown by removal, the comparison with the previous run, the wall
//! clock, the events lost, the CPU at 100k traced calls/s; and where the
//! report is written. Only text is made here: no measuring.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::Result;

use crate::{
    calls::{kernel_iterations, kernel_repeats, traced_per_iteration, KernelSample, CALLS},
    daemon::{noise_table, CpuSample, CPU_RATE, CPU_TARGET_PCT, MEMORY_TARGET_MIB},
    harness::Bench,
    rounds::{Extra, KernelSamples, Samples},
    statistics::{bootstrap, interval_text, median, median_at, ratio_text, stats},
    tracers::{Tracer, PIECES},
};

/// Largest share the `workload` label's per-cgroup keys may add to run's
/// kernel-side cost per call (issue 12).
const WORKLOADS_GOAL: f64 = 0.10;

/// Kernel-side median ns per traced call, by tracer (short name) and call.
pub(crate) type KernelMedians = BTreeMap<String, BTreeMap<String, f64>>;

pub(crate) fn kernel_medians(k: &KernelSamples) -> KernelMedians {
    k.iter()
        .map(|(t, calls)| {
            let per_call = calls
                .iter()
                .map(|(c, v)| {
                    let mut x: Vec<f64> = v.iter().map(KernelSample::per_call).collect();
                    (c.clone(), median(&mut x))
                })
                .collect();
            (t.short().to_string(), per_call)
        })
        .collect()
}

/// Largest relative difference a figure may have from the previous run's
/// for the two runs to agree.
const AGREEMENT: f64 = 0.10;

/// This run's kernel-side medians next to the previous run's (the last
/// `cargo xtask bench` on this machine, target/bench/kernel-side.json), and
/// whether they agree within AGREEMENT.
pub(crate) fn against_previous(
    k: &KernelSamples,
    now: &KernelMedians,
    previous: &KernelMedians,
    saved: &Path,
) -> String {
    let mut out = format!(
        "### Kernel-side per call against the previous run ({}): this run / previous, difference\n\n",
        saved.display()
    );
    let _ = writeln!(out, "| tracer | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
    let mut worst: Option<(f64, String)> = None;
    for t in k.keys() {
        let (Some(a), Some(b)) = (now.get(t.short()), previous.get(t.short())) else { continue };
        let mut row = format!("| {} |", t.name());
        for c in CALLS {
            match (a.get(*c), b.get(*c)) {
                (Some(&x), Some(&y)) if y > 0.0 => {
                    let d = (x - y) / y;
                    row.push_str(&format!(" {x:.0} / {y:.0}, {:+.1}% |", 100.0 * d));
                    if worst.as_ref().is_none_or(|(w, _)| d.abs() > *w) {
                        worst = Some((d.abs(), format!("{} {c}", t.short())));
                    }
                }
                _ => row.push_str(" - |"),
            }
        }
        let _ = writeln!(out, "{row}");
    }
    match worst {
        Some((w, what)) => {
            let _ = writeln!(
                out,
                "\nLargest difference: {:.1}% ({what}): the two runs {} within {:.0}%.\n",
                100.0 * w,
                if w <= AGREEMENT { "agree" } else { "do NOT agree" },
                100.0 * AGREEMENT
            );
        }
        None => out.push_str("\nNo tracer in common with the previous run.\n\n"),
    }
    out
}

/// The kernel-side sections: per traced call, per invocation, the ratios
/// to the minimal tracer, the breakdown by removal.
fn kernel_report(out: &mut String, extra: &Extra, tracers: &[Tracer], rounds: usize, smoke: bool) {
    let k = &extra.kernel;
    let per_call = |t: Tracer, c: &str| -> Vec<f64> { k[&t][c].iter().map(KernelSample::per_call).collect() };
    let measured: Vec<Tracer> = tracers.iter().copied().filter(|t| k.contains_key(t)).collect();
    if measured.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## Kernel-side run time per traced call (BPF statistics; median of {rounds} round(s), min-max)\n"
    );
    let _ = writeln!(
        out,
        "ns the kernel spent in the tracer's sys_enter plus sys_exit programs per call (run_time_ns / \
         run_cnt of each, BPF_ENABLE_STATS on only for these runs; {} iterations per sample, a round's \
         figure the median of its {} samples, the calls interleaved). The statistics' own clock \
         reads are in every figure alike (the floor's figure is mostly them); the scheduler and \
         the neighbours are not. openat, openat-rw and mmap are the mean of the pair (openat+close, \
         mmap+munmap); openat reopens one file read-only (most opens counted in the kernel, not \
         sent), openat-rw opens it read-write (every open sent with its path); getppid is an \
         untraced call (the programs return at once).\n",
        kernel_iterations(smoke),
        kernel_repeats(smoke)
    );
    let _ = writeln!(out, "| tracer | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
    for &t in &measured {
        let mut row = format!("| {} |", t.name());
        for c in CALLS {
            let (m, lo, hi) = stats(&per_call(t, c));
            row.push_str(&format!(" {m:.1} ({lo:.1}-{hi:.1}) |"));
        }
        let _ = writeln!(out, "{row}");
    }
    // Issue 12's goal: the per-cgroup keys behind the `workload` label add
    // at most WORKLOADS_GOAL to what run costs per call.
    if measured.contains(&Tracer::SonicRun) && measured.contains(&Tracer::SonicRunNoWorkloads) {
        let _ = writeln!(
            out,
            "\nWhat the `workload` label adds (run minus run --workload-from none, kernel-side, per \
             call; goal <= {:.0}% for read, read-file, futex and mmap):\n",
            100.0 * WORKLOADS_GOAL
        );
        let _ = writeln!(out, "| | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
        let mut row = "| added |".to_string();
        for c in CALLS {
            let with = median(&mut per_call(Tracer::SonicRun, c));
            let without = median(&mut per_call(Tracer::SonicRunNoWorkloads, c));
            let pct = if without > 0.0 { 100.0 * (with - without) / without } else { 0.0 };
            let goal = matches!(*c, "read" | "read-file" | "futex" | "mmap");
            let mark = if !goal {
                ""
            } else if pct <= 100.0 * WORKLOADS_GOAL {
                " ✓"
            } else {
                " ✗"
            };
            row.push_str(&format!(" {:+.1} ns ({pct:+.1}%){mark} |", with - without));
        }
        let _ = writeln!(out, "{row}");
    }
    // The programs run for every call on the host: a neighbour's calls
    // during a sample are in its averages. Their share, to judge by.
    let _ = writeln!(
        out,
        "\nShare of the programs' invocations that were not the benchmark's own calls (other \
         processes, the tracer itself), median (max):\n"
    );
    let _ = writeln!(out, "| tracer | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
    for &t in &measured {
        let mut row = format!("| {} |", t.name());
        for c in CALLS {
            let mut bg: Vec<f64> = k[&t][*c].iter().map(|s| 100.0 * s.background).collect();
            let max = bg.iter().cloned().fold(0.0, f64::max);
            row.push_str(&format!(" {:.1}% ({max:.1}%) |", median(&mut bg)));
        }
        let _ = writeln!(out, "{row}");
    }

    let _ = writeln!(out, "\n### Per program invocation: sys_enter / sys_exit, ns (median)\n");
    let _ = writeln!(out, "| tracer | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
    for &t in &measured {
        let mut row = format!("| {} |", t.name());
        for c in CALLS {
            let mut e: Vec<f64> = k[&t][*c].iter().map(|s| s.enter).collect();
            let mut x: Vec<f64> = k[&t][*c].iter().map(|s| s.exit).collect();
            row.push_str(&format!(" {:.1} / {:.1} |", median(&mut e), median(&mut x)));
        }
        let _ = writeln!(out, "{row}");
    }

    if k.contains_key(&Tracer::Minimal) {
        let _ = writeln!(
            out,
            "\n### Kernel-side per call as a multiple of the minimal exact histogram's (median ratio, 95 % bootstrap interval)\n"
        );
        let _ = writeln!(out, "| tracer | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
        for &t in measured.iter().filter(|t| **t != Tracer::Minimal) {
            let mut row = format!("| {} |", t.name());
            for c in CALLS {
                let (num, den) = (per_call(t, c), per_call(Tracer::Minimal, c));
                let (mut a, mut b) = (num.clone(), den.clone());
                let text = ratio_text(median(&mut a), median(&mut b));
                let iv = bootstrap(num.len().min(den.len()), |idx| {
                    let d = median_at(&den, idx);
                    (d > 0.0).then(|| median_at(&num, idx) / d)
                });
                row.push_str(&format!(" {text} {} |", interval_text(iv)));
            }
            let _ = writeln!(out, "{row}");
        }
    }

    let pieces: Vec<(usize, Tracer)> = (0..PIECES.len())
        .map(|i| (i, Tracer::MinimalWithout(i)))
        .filter(|(_, t)| k.contains_key(t))
        .collect();
    if k.contains_key(&Tracer::Minimal) && !pieces.is_empty() {
        let _ = writeln!(
            out,
            "\n### Where the minimal's time goes, by removal (kernel-side ns per call: the minimal minus the minimal without the piece; median, 95 % bootstrap interval)\n"
        );
        let _ =
            writeln!(out, "| piece removed | {} |\n|---|{}", CALLS.join(" | "), "---|".repeat(CALLS.len()));
        for (i, t) in pieces {
            let mut row = format!("| {} |", PIECES[i].1);
            for c in CALLS {
                let (full, without) = (per_call(Tracer::Minimal, c), per_call(t, c));
                let (mut a, mut b) = (full.clone(), without.clone());
                let d = median(&mut a) - median(&mut b);
                let iv = bootstrap(full.len().min(without.len()), |idx| {
                    Some(median_at(&full, idx) - median_at(&without, idx))
                });
                let (lo, hi) = iv.unwrap_or((d, d));
                row.push_str(&format!(" {d:+.1} [{lo:+.1} to {hi:+.1}] |"));
            }
            let _ = writeln!(out, "{row}");
        }
        if k.contains_key(&Tracer::Floor) {
            let mut row = "| everything (the minimal minus the floor) |".to_string();
            for c in CALLS {
                let (mut a, mut b) = (per_call(Tracer::Minimal, c), per_call(Tracer::Floor, c));
                row.push_str(&format!(" {:+.1} |", median(&mut a) - median(&mut b)));
            }
            let _ = writeln!(out, "{row}");
        }
    }
    out.push('\n');
}

pub(crate) fn report(
    b: &Bench,
    samples: &Samples,
    extra: &Extra,
    tracers: &[Tracer],
    rounds: usize,
    smoke: bool,
) -> String {
    let med = |t: Tracer, c: &str| stats(&samples[&t][c]).0;
    let mut out = String::new();
    kernel_report(&mut out, extra, tracers, rounds, smoke);
    let wall: Vec<Tracer> = tracers.iter().copied().filter(|t| !t.kernel_only()).collect();
    let _ = writeln!(
        out,
        "## Wall clock: nanoseconds per call (median of {rounds} interleaved rounds, min-max)\n"
    );
    let _ = writeln!(
        out,
        "{}; warmed up; {} calls per sample ({} under perf, {} under strace). openat and mmap are \
         the mean of the pair, as above.\n",
        match b.cpus {
            Some(c) => format!("Benchmark pinned to CPU {}, tracer processes to CPU {}", c.bench, c.tracer),
            None => "One CPU: nothing pinned".to_string(),
        },
        Tracer::None.iterations(smoke),
        Tracer::PerfTrace.iterations(smoke),
        Tracer::Strace.iterations(smoke)
    );
    let mut head = "| tracer |".to_string();
    for c in CALLS {
        head.push_str(&format!(" {c} |"));
    }
    head.push_str(" mixed workload (s) |");
    let _ = writeln!(out, "{head}\n|{}", "---|".repeat(CALLS.len() + 2));
    for &t in &wall {
        let mut row = format!("| {} |", t.name());
        for c in CALLS.iter().map(|c| c.to_string()).chain(["mixed".to_string()]) {
            let (m, lo, hi) = stats(&samples[&t][&c]);
            if c == "mixed" {
                row.push_str(&format!(" {m:.3} ({lo:.3}-{hi:.3}) |"));
            } else {
                row.push_str(&format!(" {m:.0} ({lo:.0}-{hi:.0}) |"));
            }
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "\nThe mixed workload's time is its own, from its first request to its last: \
         no tracer's start-up is in it."
    );
    // Rounds whose baseline moved: no tracer at all measured slower than the
    // empty programs (a neighbour took the CPU during none's sample, or left
    // it during the floor's). Their samples stay in the medians, named here.
    if samples.contains_key(&Tracer::None) && samples.contains_key(&Tracer::Floor) {
        let mut moved = Vec::new();
        for c in CALLS {
            for (r, (n, f)) in samples[&Tracer::None][*c].iter().zip(&samples[&Tracer::Floor][*c]).enumerate()
            {
                if n >= f {
                    moved.push(format!("round {} {c}: none {n:.0} ns ≥ floor {f:.0} ns", r + 1));
                }
            }
        }
        if moved.is_empty() {
            let _ = writeln!(out, "\nBaseline: in every round and call, none was faster than the floor.");
        } else {
            let _ = writeln!(
                out,
                "\n**Baseline moved** (flagged samples; the medians keep them): {}.",
                moved.join("; ")
            );
        }
    }
    if !extra.stats_on_elsewhere.is_empty() {
        let _ = writeln!(
            out,
            "\n**BPF statistics were on (another process) during the wall-clock samples of**: {}; those \
             samples include the statistics' own cost.",
            extra
                .stats_on_elsewhere
                .iter()
                .map(|(r, t)| format!("round {} {}", r + 1, t.short()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !extra.trace_lost.is_empty() {
        // Its times above are those of runs that lost calls: a lost call
        // costs the traced process less than a delivered one.
        let _ = writeln!(
            out,
            "\n### Events sonic-probe trace lost (ring buffer full), per run: median (max), \
             and the median's share of the run's traced calls\n"
        );
        let _ = writeln!(
            out,
            "| | {} | mixed workload |\n|---|{}",
            CALLS.join(" | "),
            "---|".repeat(CALLS.len() + 1)
        );
        let mut row = "| sonic-probe trace -o /dev/null |".to_string();
        for c in CALLS.iter().map(|c| c.to_string()).chain(["mixed".to_string()]) {
            let mut v: Vec<f64> = extra.trace_lost[&c].iter().map(|&n| n as f64).collect();
            let max = v.iter().cloned().fold(0.0, f64::max);
            let m = median(&mut v);
            let calls = match c.as_str() {
                "mixed" => 0,
                c => traced_per_iteration(c) * Tracer::SonicTrace.iterations(smoke),
            };
            if calls > 0 {
                row.push_str(&format!(" {m:.0} ({max:.0}), {:.1}% |", 100.0 * m / calls as f64));
            } else {
                row.push_str(&format!(" {m:.0} ({max:.0}) |"));
            }
        }
        let _ = writeln!(out, "{row}");
    }
    if !extra.cpu.is_empty() {
        let pick = |f: fn(&CpuSample) -> f64| {
            let mut v: Vec<f64> = extra.cpu.iter().map(f).collect();
            median(&mut v)
        };
        let (without, with, daemon) = (pick(|c| c.without), pick(|c| c.with), pick(|c| c.daemon));
        let rss = pick(|c| c.rss_mib);
        let bpf = with - without;
        let check = |v: f64| if v <= CPU_TARGET_PCT { "✓" } else { "✗" };
        let added = med(Tracer::SonicRun, "read") - med(Tracer::None, "read");
        let _ = writeln!(
            out,
            "\n## CPU of sonic-probe run at {}k traced calls/s (sp-bench read, paced, the noise mix running; median of {} round(s))\n",
            CPU_RATE / 1000,
            extra.cpu.len()
        );
        let _ = writeln!(
            out,
            "The daemon's own CPU is not all of it: the BPF programs run in the traced processes, \
             on their time, at every call. That share is the traced process's CPU with sonic-probe \
             run attached minus without ({without:.2}% -> {with:.2}% of one core); from the \
             per-call table it would be {added:.0} ns x {}k calls/s = {:.2}%.\n",
            CPU_RATE / 1000,
            added * CPU_RATE as f64 / 1e7
        );
        let _ = writeln!(out, "| where | % of one core | target |\n|---|---|---|");
        let _ = writeln!(
            out,
            "| the daemon process (sonic-probe run) | {daemon:.2}% | <= {CPU_TARGET_PCT}% {} |",
            check(daemon)
        );
        let _ = writeln!(
            out,
            "| its BPF programs, in the traced processes | {bpf:.2}% | <= {CPU_TARGET_PCT}% {} |",
            check(bpf)
        );
        let _ = writeln!(
            out,
            "| both: what watching costs the host | {:.2}% | <= {CPU_TARGET_PCT}% {} |",
            daemon + bpf,
            check(daemon + bpf)
        );
        let _ = writeln!(
            out,
            "\nThe whole host is watched while tests/workloads/noise_mix.py (shell loops, coreutils, \
             Python start-ups, getent, git, an agent reading /proc, a state-file job, log rotation; \
             default load) runs beside the benchmark: the daemon's figures include its events and \
             findings. The daemon's resident memory at the end: {rss:.0} MiB (target <= {MEMORY_TARGET_MIB} \
             MiB {}).",
            if rss <= MEMORY_TARGET_MIB as f64 { "✓" } else { "✗" }
        );
        let noise: Vec<_> = extra.cpu.iter().map(|c| c.noise).collect();
        let _ = write!(out, "{}", noise_table(&noise));
    }
    // The ratio of two tracers' added costs (each minus none), medians over
    // the rounds, with its bootstrap interval; n/a when the denominator is
    // not positive.
    let added_ratio = |t: Tracer, reference: Tracer, c: &str| -> String {
        let (tv, rv, nv) = (&samples[&t][c], &samples[&reference][c], &samples[&Tracer::None][c]);
        let rounds = tv.len().min(rv.len()).min(nv.len());
        let num = med(t, c) - med(Tracer::None, c);
        let den = med(reference, c) - med(Tracer::None, c);
        let iv = bootstrap(rounds, |idx| {
            let (n, d) = (median_at(tv, idx) - median_at(nv, idx), median_at(rv, idx) - median_at(nv, idx));
            (d > 0.0).then(|| n / d)
        });
        if den > 0.0 {
            format!("{} {}", ratio_text(num, den), interval_text(iv))
        } else {
            ratio_text(num, den)
        }
    };
    if tracers.contains(&Tracer::None) && tracers.contains(&Tracer::Floor) {
        let _ = writeln!(
            out,
            "\n## Wall clock: added cost per call, as a multiple of the floor's added cost (95 % bootstrap interval)\n"
        );
        let _ =
            writeln!(out, "The floor's added cost is floor minus none; a tracer's is tracer minus none.\n");
        let _ = writeln!(
            out,
            "{}\n|{}",
            head.replace("mixed workload (s)", "mixed workload (time added)"),
            "---|".repeat(CALLS.len() + 2)
        );
        for &t in wall.iter().filter(|t| **t != Tracer::None) {
            let mut row = format!("| {} |", t.name());
            for c in CALLS {
                row.push_str(&format!(
                    " {} ({:+.0} ns) |",
                    added_ratio(t, Tracer::Floor, c),
                    med(t, c) - med(Tracer::None, c)
                ));
            }
            // The workload's wall time moves by less than its noise for the
            // BPF tracers: a ratio to the floor would mean nothing there.
            let added = med(t, "mixed") - med(Tracer::None, "mixed");
            row.push_str(&format!(" {:+.0} ms |", added * 1000.0));
            let _ = writeln!(out, "{row}");
        }
    }
    if tracers.contains(&Tracer::None) && tracers.contains(&Tracer::SonicRun) {
        let others: Vec<Tracer> =
            wall.iter().copied().filter(|t| !matches!(t, Tracer::None | Tracer::SonicRun)).collect();
        if !others.is_empty() {
            let _ = writeln!(
                out,
                "\n## Wall clock: sonic-probe run's added cost as a fraction of each tracer's (95 % bootstrap interval)\n"
            );
            let _ = writeln!(
                out,
                "| compared with | {} |\n|---|{}",
                CALLS.join(" | "),
                "---|".repeat(CALLS.len())
            );
            for t in others {
                let mut row = format!("| {} |", t.name());
                for c in CALLS {
                    let run = med(Tracer::SonicRun, c) - med(Tracer::None, c);
                    let other = med(t, c) - med(Tracer::None, c);
                    let r = run / other;
                    row.push_str(&if other > 0.0 && r > 0.0 && r < 0.1 {
                        format!(" 1/{:.0} |", 1.0 / r)
                    } else {
                        format!(" {} |", added_ratio(Tracer::SonicRun, t, c))
                    });
                }
                let _ = writeln!(out, "{row}");
            }
        }
    }
    out
}

/// Prints the bench's report and keeps it in target/bench (a run of a
/// subset of the tracers too: it is the one the next look will want).
pub(crate) fn write_report(root: &Path, report: &str, smoke: bool) -> Result<()> {
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(if smoke { "report-smoke.md" } else { "report.md" });
    std::fs::write(&path, report)?;
    println!("{report}");
    eprintln!("written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_agree_within_ten_percent_or_say_they_do_not() {
        let sample = |ns: f64| KernelSample { enter: ns / 2.0, exit: ns / 2.0, background: 0.0 };
        let mut k: KernelSamples = BTreeMap::new();
        k.entry(Tracer::Minimal).or_default().insert("read".into(), vec![sample(300.0)]);
        let now = kernel_medians(&k);
        assert_eq!(now["minimal"]["read"], 300.0);
        let mut previous = now.clone();
        previous.get_mut("minimal").unwrap().insert("read".into(), 290.0);
        let saved = Path::new("kernel-side.json");
        let text = against_previous(&k, &now, &previous, saved);
        assert!(text.contains("300 / 290, +3.4%") && text.contains("the two runs agree"), "{text}");
        previous.get_mut("minimal").unwrap().insert("read".into(), 250.0);
        assert!(against_previous(&k, &now, &previous, saved).contains("do NOT agree"));
    }
}
