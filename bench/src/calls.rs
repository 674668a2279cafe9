//! The calls measured (the scenarios of sp-bench, `src/bin/sp-bench.rs`),
//! how many system calls and traced calls each loop iteration makes, how
//! many iterations and repeats a sample gets, and how one sample is taken:
//! wall-clock, kernel-side (the tracer's programs' run time around one run
//! of sp-bench) and the mixed workload (the Python stand-in of the service).

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Command, Stdio},
};

use anyhow::{anyhow, bail, Context, Result};

use crate::{
    bpfstats::{Programs, Role},
    harness::Bench,
    tracers::{parse_lost, Tracer},
};

/// Calls measured, and how many of each per run.
/// openat reopens one file read-only (most opens counted in the kernel, not
/// sent: files.h), openat-rw read-write (every open sent with its path).
/// write (1 byte to /dev/null) is not traced by run's default, but its
/// failures are counted: what that costs a successful write.
pub(crate) const CALLS: &[&str] =
    &["read", "read-file", "futex", "futex_wait", "openat", "openat-rw", "mmap", "write", "getppid"];

/// Traced system calls per loop iteration of sp-bench CALL (openat and mmap
/// close and unmap again; getppid is not traced, write not by run's
/// default).
pub(crate) fn traced_per_iteration(call: &str) -> u64 {
    match call {
        "openat" | "openat-rw" | "mmap" => 2,
        "getppid" | "write" => 0,
        _ => 1,
    }
}

/// System calls per loop iteration of sp-bench CALL, traced or not.
fn syscalls_per_iteration(call: &str) -> u64 {
    traced_per_iteration(call).max(1)
}

/// Iterations per kernel-side sample: per-invocation averages settle fast.
pub(crate) fn kernel_iterations(smoke: bool) -> u64 {
    if smoke {
        20_000
    } else {
        200_000
    }
}

/// Kernel-side samples per call, tracer and round, the calls interleaved
/// (read futex ... getppid, read futex ...): the round keeps their median,
/// so that a burst of the neighbours' activity during one sample (it
/// lasts a fraction of a second) does not become the round's figure. Five:
/// on a shared 2-vCPU VM single samples of one attach spread by ±15-25 %,
/// medians of five by ±2-4 % (docs/performance.md), medians of three
/// left two runs 10 % apart on 3 of 30 figures.
pub(crate) fn kernel_repeats(smoke: bool) -> usize {
    if smoke {
        1
    } else {
        5
    }
}

pub(crate) fn parse_ns(out: &str) -> Result<f64> {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("ns_per_call="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no ns_per_call in {out:?}"))
}

/// One kernel-side sample: a run of sp-bench CALL with statistics on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelSample {
    /// ns per invocation of the sys_enter program(s).
    pub(crate) enter: f64,
    /// ns per invocation of the sys_exit program(s).
    pub(crate) exit: f64,
    /// Share of the invocations that were not the benchmark's own calls
    /// (other processes on the host; the programs run for every call).
    pub(crate) background: f64,
}

impl KernelSample {
    /// ns per traced call: its entry plus its exit.
    pub(crate) fn per_call(&self) -> f64 {
        self.enter + self.exit
    }
}

impl Bench {
    /// ns per call of `n` iterations under `t`, and the events it lost
    /// (sonic-probe trace; 0 for the others).
    pub(crate) fn run_bench(&self, t: Tracer, call: &str, n: u64) -> Result<(f64, u64)> {
        let out = self.command(t, call, n).output()?;
        if !out.status.success() {
            bail!("{} under {}: {}", call, t.name(), out.status);
        }
        Ok((
            parse_ns(&String::from_utf8_lossy(&out.stdout))?,
            parse_lost(&String::from_utf8_lossy(&out.stderr)),
        ))
    }

    /// The kernel-side sample of `n` iterations of `call` under `t`, whose
    /// programs are `programs` (None: those of the sonic-probe trace that
    /// starts this very run). Statistics must be on. sp-bench waits (--wait)
    /// until the counters are read, so neither its start-up nor the
    /// tracer's is in the sample.
    pub(crate) fn run_kernel(
        &self,
        t: Tracer,
        programs: Option<&Programs>,
        call: &str,
        n: u64,
    ) -> Result<KernelSample> {
        let mut cmd = self.command(t, call, n);
        cmd.arg("--wait").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().with_context(|| format!("{} under {}", call, t.name()))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        if !line.contains("ready") {
            let _ = child.kill();
            let _ = child.wait();
            bail!("sp-bench under {} did not get ready: {line:?}", t.name());
        }
        let own;
        let programs = match programs {
            Some(p) => p,
            None => {
                own = Programs::of_process(child.id())?;
                &own
            }
        };
        let before = programs.snapshot()?;
        child.stdin.take().expect("piped").write_all(b"x")?;
        let mut rest = String::new();
        stdout.read_to_string(&mut rest)?;
        let status = child.wait()?;
        let after = programs.snapshot()?;
        if !status.success() {
            bail!("{} under {} (kernel-side): {status}", call, t.name());
        }
        let (enter, invocations) = programs.per_invocation(&before, &after, Role::Enter)?;
        let (exit, _) = programs.per_invocation(&before, &after, Role::Exit)?;
        let own_calls = n * syscalls_per_iteration(call);
        let background = (invocations.saturating_sub(own_calls)) as f64 / invocations as f64;
        Ok(KernelSample { enter, exit, background })
    }

    /// A tenth of a run of every call, not measured: caches, page tables and
    /// the tracer's lazily allocated state warm before the first sample.
    pub(crate) fn warm_up(&self, t: Tracer) -> Result<()> {
        for call in CALLS {
            self.run_bench(t, call, (t.iterations(self.smoke) / 10).max(100))?;
        }
        Ok(())
    }

    /// The diagnoses workload (the Python stand-in): its own time from its
    /// first request to its last, seconds (neither the tracer's nor the
    /// interpreter's start-up is in it), and the events the tracer lost.
    pub(crate) fn run_mixed(&self, t: Tracer) -> Result<(f64, u64)> {
        let sim = self.root.join("tests/workloads/sonic_sim.py");
        let dir = std::env::temp_dir().join("sonic-probe-bench-sim");
        let requests = if self.smoke { "3" } else { "20" };
        // The workload on the benchmark's CPU (taskset: under the tracers
        // that start it, those stay on theirs).
        let mut py: Vec<String> = Vec::new();
        if let Some(c) = self.cpus {
            py.extend(["taskset".into(), "-c".into(), c.bench.to_string()]);
        }
        py.extend(["python3".to_string(), sim.to_string_lossy().into_owned()]);
        let args = ["faulty", "--requests", requests, "--stall", "0", "--dir", dir.to_str().unwrap()];
        let mut cmd = match t {
            Tracer::SonicTrace => {
                let mut c = Command::new(&self.sonic);
                c.args(["trace", "-f", "-o", "/dev/null", "--"]).args(&py);
                self.pin_tracer(&mut c);
                c
            }
            Tracer::PerfTrace => {
                let mut c = Command::new("perf");
                c.args(["trace", "-s", "-o", "/dev/null", "--"]).args(&py);
                self.pin_tracer(&mut c);
                c
            }
            Tracer::Strace => {
                let mut c = Command::new("strace");
                c.args(["-f", "-c", "-o", "/dev/null"]).args(&py);
                self.pin_tracer(&mut c);
                c
            }
            _ => {
                let mut c = Command::new(&py[0]);
                c.args(&py[1..]);
                c
            }
        };
        cmd.args(args);
        let out = cmd.output()?;
        if !out.status.success() {
            bail!("mixed workload under {}: {}", t.name(), out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let secs = stdout
            .lines()
            .find_map(|l| l.strip_prefix("elapsed="))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("no elapsed= from the mixed workload: {stdout:?}"))?;
        Ok((secs, parse_lost(&String::from_utf8_lossy(&out.stderr))))
    }
}
