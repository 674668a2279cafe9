//! The tracers the benchmark compares: what each one is (its name in the
//! report and for `--only`, how many iterations a wall-clock sample gets,
//! whether its BPF programs are measured kernel-side) and how each one is
//! started: attached for the whole host while the benchmark runs (the
//! reference programs through sp-reference, sonic-probe run, bpftrace), or
//! starting the benchmark itself (sonic-probe trace, perf trace, strace).
//! Adding a tracer to the benchmark starts here.

use std::{
    ffi::OsStr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::harness::{spawn_until, Bench};

/// The minimal tracer's pieces the breakdown removes one at a time:
/// (sp-reference's name for the piece, what it is).
pub(crate) const PIECES: &[(&str, &str)] = &[
    ("clock", "the two clock reads (bpf_ktime_get_ns at entry and exit)"),
    ("task-storage", "the start time in task storage (a get at entry and at exit; a per-CPU slot instead)"),
    ("aggregation", "the (syscall, process name) key, the per-CPU hash lookup, the bucket increment"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tracer {
    None,
    Floor,
    Minimal,
    SonicRun,
    /// sonic-probe run with every fallback variant (the 5.10 programs).
    SonicRunFallback,
    /// sonic-probe run --workload-from none: what the per-cgroup keys
    /// (the `workload` label) add, by difference with SonicRun.
    SonicRunNoWorkloads,
    /// sonic-probe run --stack-captures off: what the in-flight futex wait
    /// entries of the stall captures add, by difference with SonicRun.
    SonicRunNoCaptures,
    /// sonic-probe run of an earlier build ($SONIC_PROBE_BENCH_BASELINE),
    /// side by side with this one: what a change to the programs bought.
    SonicRunBaseline,
    SonicTrace,
    Bpftrace,
    PerfTrace,
    Strace,
    /// The minimal programs without PIECES[i]: kernel-side only, for the
    /// breakdown.
    MinimalWithout(usize),
}

impl Tracer {
    /// Every tracer `cargo xtask bench` runs (the breakdown's are added by
    /// the report itself), in the report's order.
    pub const ALL: &'static [Tracer] = &[
        Tracer::None,
        Tracer::Floor,
        Tracer::Minimal,
        Tracer::SonicRun,
        Tracer::SonicRunFallback,
        Tracer::SonicRunNoWorkloads,
        Tracer::SonicRunNoCaptures,
        Tracer::SonicRunBaseline,
        Tracer::SonicTrace,
        Tracer::Bpftrace,
        Tracer::PerfTrace,
        Tracer::Strace,
    ];

    /// Name for --only.
    pub fn short(self) -> &'static str {
        match self {
            Tracer::None => "none",
            Tracer::Floor => "floor",
            Tracer::Minimal => "minimal",
            Tracer::SonicRun => "run",
            Tracer::SonicRunFallback => "run-fallback",
            Tracer::SonicRunNoWorkloads => "run-no-workloads",
            Tracer::SonicRunNoCaptures => "run-no-captures",
            Tracer::SonicRunBaseline => "run-baseline",
            Tracer::SonicTrace => "trace",
            Tracer::Bpftrace => "bpftrace",
            Tracer::PerfTrace => "perf",
            Tracer::Strace => "strace",
            Tracer::MinimalWithout(i) => match PIECES[i].0 {
                "clock" => "minimal-without-clock",
                "task-storage" => "minimal-without-task-storage",
                _ => "minimal-without-aggregation",
            },
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Tracer::None => "none",
            Tracer::Floor => "floor (empty BPF programs)",
            Tracer::Minimal => "minimal exact latency histogram",
            Tracer::SonicRun => "sonic-probe run",
            Tracer::SonicRunFallback => "sonic-probe run, every fallback (as on 5.10)",
            Tracer::SonicRunNoWorkloads => "sonic-probe run --workload-from none",
            Tracer::SonicRunNoCaptures => "sonic-probe run --stack-captures off",
            Tracer::SonicRunBaseline => "sonic-probe run, baseline build ($SONIC_PROBE_BENCH_BASELINE)",
            Tracer::SonicTrace => "sonic-probe trace",
            Tracer::Bpftrace => "bpftrace (latency histograms)",
            Tracer::PerfTrace => "perf trace -s",
            Tracer::Strace => "strace -f -c",
            Tracer::MinimalWithout(_) => self.short(),
        }
    }

    /// Iterations per wall-clock sample: slow tracers get fewer (the result
    /// is per call).
    pub(crate) fn iterations(self, smoke: bool) -> u64 {
        let n = match self {
            Tracer::Strace => 5_000,
            Tracer::PerfTrace => 20_000,
            _ => 500_000,
        };
        if smoke {
            n / 25
        } else {
            n
        }
    }

    /// Whether its BPF programs' run time is measured (its sys_enter and
    /// sys_exit programs are found by the descriptors its process holds).
    pub(crate) fn kernel_side(self) -> bool {
        !matches!(self, Tracer::None | Tracer::PerfTrace | Tracer::Strace)
    }

    /// Only measured kernel-side (the breakdown's programs count nothing).
    pub(crate) fn kernel_only(self) -> bool {
        matches!(self, Tracer::MinimalWithout(_))
    }
}

/// The earlier build the tracer run-baseline runs, if one is given.
pub fn baseline_binary() -> Option<PathBuf> {
    std::env::var_os("SONIC_PROBE_BENCH_BASELINE").map(PathBuf::from)
}

/// The bpftrace equivalent of sonic-probe run's counting: a latency
/// histogram per traced syscall, on the same raw tracepoints.
const BPFTRACE: &str = r#"
tracepoint:raw_syscalls:sys_enter
/args->id == 0 || args->id == 3 || args->id == 9 || args->id == 11 || args->id == 202 || args->id == 257 || args->id == 449/
{ @start[tid] = nsecs; }
tracepoint:raw_syscalls:sys_exit
/@start[tid]/
{ @lat[comm, args->id] = hist(nsecs - @start[tid]); delete(@start[tid]); }
"#;

/// A tracer attached for the whole host while the benchmark runs.
pub(crate) enum Attached {
    Nothing,
    /// Killed (SIGINT) and reaped when dropped: that detaches it.
    Process(Child),
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Attached::Process(c) = self {
            // SIGINT again every second (bpftrace 0.17 sometimes misses the
            // first one, busy in its start-up), SIGKILL after 10 s: a tracer
            // that does not stop must not stop the benchmark.
            for i in 0..=10 {
                let sig = if i < 10 { libc::SIGINT } else { libc::SIGKILL };
                // SAFETY: signalling our own child, not reaped yet.
                unsafe { libc::kill(c.id() as i32, sig) };
                let deadline = Instant::now() + Duration::from_secs(1);
                while Instant::now() < deadline {
                    if !matches!(c.try_wait(), Ok(None)) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = c.wait();
        }
    }
}

/// Events `sonic-probe trace` says it lost (its stderr's "lost N events").
pub(crate) fn parse_lost(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| l.split("lost ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

impl Bench {
    /// Starts sp-reference with `args` on the tracer's CPU and returns once
    /// its programs are attached (it holds them until its stdin closes).
    pub(crate) fn start_reference<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Child> {
        let mut c = Command::new(&self.reference);
        c.args(args).stdin(Stdio::piped());
        self.pin_tracer(&mut c);
        spawn_until(c, "attached", false)
    }

    pub(crate) fn attach(&self, t: Tracer) -> Result<Attached> {
        Ok(match t {
            Tracer::Floor | Tracer::Minimal | Tracer::MinimalWithout(_) => {
                Attached::Process(self.start_reference(&[t.short()])?)
            }
            Tracer::SonicRun
            | Tracer::SonicRunFallback
            | Tracer::SonicRunNoWorkloads
            | Tracer::SonicRunNoCaptures
            | Tracer::SonicRunBaseline => {
                let mut c = if t == Tracer::SonicRunBaseline {
                    Command::new(baseline_binary().context(
                        "bench run-baseline: set SONIC_PROBE_BENCH_BASELINE to an earlier build's sonic-probe",
                    )?)
                } else {
                    Command::new(&self.sonic)
                };
                c.args(["run", "--listen", "127.0.0.1:0"]);
                if t == Tracer::SonicRunFallback {
                    c.env("SONIC_PROBE_FALLBACK", "all");
                }
                if t == Tracer::SonicRunNoWorkloads {
                    c.args(["--workload-from", "none"]);
                }
                if t == Tracer::SonicRunNoCaptures {
                    c.args(["--stack-captures", "off"]);
                }
                self.pin_tracer(&mut c);
                Attached::Process(spawn_until(c, " ready in ", false)?)
            }
            Tracer::Bpftrace => {
                let mut c = Command::new("bpftrace");
                c.args(["-e", BPFTRACE]);
                self.pin_tracer(&mut c);
                let child = spawn_until(c, "Attaching", true)?;
                std::thread::sleep(Duration::from_millis(500));
                Attached::Process(child)
            }
            _ => Attached::Nothing,
        })
    }

    /// The command that runs sp-bench under tracer `t` (the tracers that
    /// start it run on the tracer's CPU, sp-bench pins itself to its own).
    pub(crate) fn command(&self, t: Tracer, call: &str, n: u64) -> Command {
        let bench_args = self.bench_args(call, n);
        let mut c = match t {
            Tracer::SonicTrace => {
                let mut c = Command::new(&self.sonic);
                c.args(["trace", "-f", "-o", "/dev/null", "--"]).arg(&self.spbench).args(bench_args);
                c
            }
            Tracer::PerfTrace => {
                let mut c = Command::new("perf");
                c.args(["trace", "-s", "-o", "/dev/null", "--"]).arg(&self.spbench).args(bench_args);
                c
            }
            Tracer::Strace => {
                let mut c = Command::new("strace");
                c.args(["-f", "-c", "-o", "/dev/null"]).arg(&self.spbench).args(bench_args);
                c
            }
            _ => {
                let mut c = Command::new(&self.spbench);
                c.args(bench_args);
                return c;
            }
        };
        self.pin_tracer(&mut c);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_has_a_tracer_name() {
        for (i, (piece, _)) in PIECES.iter().enumerate() {
            assert_eq!(Tracer::MinimalWithout(i).short(), format!("minimal-without-{piece}"));
        }
    }
}
