//! `cargo xtask bench`: what sonic-probe costs the service it watches,
//! measured side by side with the other ways of seeing the same calls.
//!
//! Each round runs every tracer once, in turn (A B C ... A B C ...), so
//! that drift on a shared VM hits all of them alike; results are medians
//! with min-max. The cost a tracer adds is its time per call minus the
//! untraced time; it is compared with the floor's added cost (empty BPF
//! programs on the same two tracepoints: the price of attaching at all).
//! The report goes to target/bench/report.md.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use aya::{programs::BtfTracePoint, Btf, Ebpf};

/// Calls measured, and how many of each per run.
const CALLS: &[&str] = &["read", "futex", "openat", "mmap", "getppid"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tracer {
    None,
    Floor,
    SonicRun,
    SonicTrace,
    Bpftrace,
    PerfTrace,
    Strace,
}

impl Tracer {
    /// Name for --only.
    pub fn short(self) -> &'static str {
        match self {
            Tracer::None => "none",
            Tracer::Floor => "floor",
            Tracer::SonicRun => "run",
            Tracer::SonicTrace => "trace",
            Tracer::Bpftrace => "bpftrace",
            Tracer::PerfTrace => "perf",
            Tracer::Strace => "strace",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tracer::None => "none",
            Tracer::Floor => "floor (empty BPF programs)",
            Tracer::SonicRun => "sonic-probe run",
            Tracer::SonicTrace => "sonic-probe trace",
            Tracer::Bpftrace => "bpftrace (latency histograms)",
            Tracer::PerfTrace => "perf trace -s",
            Tracer::Strace => "strace -f -c",
        }
    }

    /// Iterations per run: slow tracers get fewer (the result is per call).
    fn iterations(self, smoke: bool) -> u64 {
        let n = match self {
            Tracer::Strace => 5_000,
            Tracer::PerfTrace => 20_000,
            _ => 200_000,
        };
        if smoke {
            n / 10
        } else {
            n
        }
    }
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

pub struct Bench {
    root: PathBuf,
    smoke: bool,
    sonic: PathBuf,
    spbench: PathBuf,
}

/// A tracer attached for the whole host while the benchmark runs.
enum Attached {
    Nothing,
    /// Held, not read: dropping it detaches the programs.
    #[allow(dead_code)]
    Floor(Ebpf),
    Process(Child),
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Attached::Process(c) = self {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Starts a process and waits for a line of its stderr (or stdout, with
/// `on_stdout`) containing `ready`.
fn spawn_until(mut cmd: Command, ready: &str, on_stdout: bool) -> Result<Child> {
    let mut child = if on_stdout {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()
    } else {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()
    }
    .context("spawn tracer")?;
    let stream: Box<dyn std::io::Read + Send> = if on_stdout {
        Box::new(child.stdout.take().expect("piped"))
    } else {
        Box::new(child.stderr.take().expect("piped"))
    };
    let mut lines = BufReader::new(stream).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(ready) => break,
            Some(Ok(_)) => {}
            _ => bail!("{cmd:?} ended before it was ready"),
        }
        if Instant::now() > deadline {
            bail!("{cmd:?} not ready in 60 s");
        }
    }
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(child)
}

/// Loads and attaches the floor programs.
pub fn attach_floor() -> Result<Ebpf> {
    let btf = Btf::from_sys_fs()?;
    let mut ebpf = Ebpf::load(sonic_probe_ebpf::FLOOR_OBJECT)?;
    for (name, tp) in [("floor_enter", "sys_enter"), ("floor_exit", "sys_exit")] {
        let p: &mut BtfTracePoint = ebpf.program_mut(name).ok_or(anyhow!("no {name}"))?.try_into()?;
        p.load(tp, &btf)?;
        p.attach()?;
    }
    Ok(ebpf)
}

fn parse_ns(out: &str) -> Result<f64> {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("ns_per_call="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no ns_per_call in {out:?}"))
}

impl Bench {
    pub fn new(root: &Path, smoke: bool) -> Bench {
        Bench {
            root: root.to_path_buf(),
            smoke,
            sonic: root.join("target/release/sonic-probe"),
            spbench: root.join("target/release/sp-bench"),
        }
    }

    fn attach(&self, t: Tracer) -> Result<Attached> {
        Ok(match t {
            Tracer::Floor => Attached::Floor(attach_floor()?),
            Tracer::SonicRun => {
                let mut c = Command::new(&self.sonic);
                c.args(["run", "--listen", "127.0.0.1:0"]);
                Attached::Process(spawn_until(c, " ready in ", false)?)
            }
            Tracer::Bpftrace => {
                let mut c = Command::new("bpftrace");
                c.args(["-e", BPFTRACE]);
                let child = spawn_until(c, "Attaching", true)?;
                std::thread::sleep(Duration::from_millis(500));
                Attached::Process(child)
            }
            _ => Attached::Nothing,
        })
    }

    /// The command that runs sp-bench under tracer `t`.
    fn command(&self, t: Tracer, call: &str, n: u64) -> Command {
        let bench_args = [call.to_string(), n.to_string()];
        match t {
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
                c
            }
        }
    }

    fn run_bench(&self, t: Tracer, call: &str) -> Result<f64> {
        let out = self.command(t, call, t.iterations(self.smoke)).stderr(Stdio::null()).output()?;
        if !out.status.success() {
            bail!("{} under {}: {}", call, t.name(), out.status);
        }
        parse_ns(&String::from_utf8_lossy(&out.stdout))
    }

    /// Wall time of the diagnoses workload (the Python stand-in), seconds.
    fn run_mixed(&self, t: Tracer) -> Result<f64> {
        let sim = self.root.join("tests/workloads/sonic_sim.py");
        let dir = std::env::temp_dir().join("sonic-probe-bench-sim");
        let requests = if self.smoke { "3" } else { "20" };
        let py = ["python3".to_string(), sim.to_string_lossy().into_owned()];
        let args = ["faulty", "--requests", requests, "--stall", "0", "--dir", dir.to_str().unwrap()];
        let mut cmd = match t {
            Tracer::SonicTrace => {
                let mut c = Command::new(&self.sonic);
                c.args(["trace", "-f", "-o", "/dev/null", "--"]).args(&py);
                c
            }
            Tracer::PerfTrace => {
                let mut c = Command::new("perf");
                c.args(["trace", "-s", "-o", "/dev/null", "--"]).args(&py);
                c
            }
            Tracer::Strace => {
                let mut c = Command::new("strace");
                c.args(["-f", "-c", "-o", "/dev/null"]).args(&py);
                c
            }
            _ => {
                let mut c = Command::new(&py[0]);
                c.arg(&py[1]);
                c
            }
        };
        cmd.args(args);
        let start = Instant::now();
        let out = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        if !out.success() {
            bail!("mixed workload under {}: {out}", t.name());
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

/// Per tracer, per call: the samples (ns per call; seconds for "mixed").
type Samples = BTreeMap<Tracer, BTreeMap<String, Vec<f64>>>;

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    let m = median(&mut v);
    (m, v[0], v[v.len() - 1])
}

pub fn run(root: &Path, smoke: bool, rounds: usize, tracers: &[Tracer]) -> Result<String> {
    let b = Bench::new(root, smoke);
    let mut samples: Samples = BTreeMap::new();
    for round in 0..rounds {
        eprintln!("== round {}/{rounds}", round + 1);
        for &t in tracers {
            let attached = b.attach(t).with_context(|| format!("attaching {}", t.name()))?;
            for call in CALLS {
                let ns = b.run_bench(t, call)?;
                samples.entry(t).or_default().entry(call.to_string()).or_default().push(ns);
            }
            let s = b.run_mixed(t)?;
            samples.entry(t).or_default().entry("mixed".into()).or_default().push(s);
            drop(attached);
            eprintln!("   {:<32} read {:>8.0} ns", t.name(), samples[&t]["read"].last().unwrap());
        }
    }
    Ok(report(&samples, tracers, rounds))
}

fn report(samples: &Samples, tracers: &[Tracer], rounds: usize) -> String {
    let med = |t: Tracer, c: &str| stats(&samples[&t][c]).0;
    let mut out = String::new();
    let _ = writeln!(out, "## Nanoseconds per call (median of {rounds} interleaved rounds, min-max)\n");
    let mut head = "| tracer |".to_string();
    for c in CALLS {
        head.push_str(&format!(" {c} |"));
    }
    head.push_str(" mixed workload (s) |");
    let _ = writeln!(out, "{head}\n|{}", "---|".repeat(CALLS.len() + 2));
    for &t in tracers {
        let mut row = format!("| {} |", t.name());
        for c in CALLS.iter().map(|c| c.to_string()).chain(["mixed".to_string()]) {
            let (m, lo, hi) = stats(&samples[&t][&c]);
            if c == "mixed" {
                row.push_str(&format!(" {m:.2} ({lo:.2}-{hi:.2}) |"));
            } else {
                row.push_str(&format!(" {m:.0} ({lo:.0}-{hi:.0}) |"));
            }
        }
        let _ = writeln!(out, "{row}");
    }
    if tracers.contains(&Tracer::None) && tracers.contains(&Tracer::Floor) {
        let _ = writeln!(out, "\n## Added cost per call, as a multiple of the floor's added cost\n");
        let _ =
            writeln!(out, "The floor's added cost is floor minus none; a tracer's is tracer minus none.\n");
        let _ = writeln!(out, "{head}\n|{}", "---|".repeat(CALLS.len() + 2));
        for &t in tracers.iter().filter(|t| **t != Tracer::None) {
            let mut row = format!("| {} |", t.name());
            for c in CALLS.iter().map(|c| c.to_string()).chain(["mixed".to_string()]) {
                let floor = med(Tracer::Floor, &c) - med(Tracer::None, &c);
                let added = med(t, &c) - med(Tracer::None, &c);
                row.push_str(&format!(
                    " {:.2}x (+{added:.0}{}) |",
                    added / floor,
                    if c == "mixed" { " s" } else { " ns" }
                ));
            }
            let _ = writeln!(out, "{row}");
        }
    }
    out
}

/// Daemon CPU and memory while the service makes `rate` traced calls/s.
pub fn daemon_load(root: &Path, rate: u64, seconds: u64) -> Result<(f64, u64, f64)> {
    let b = Bench::new(root, false);
    let started = Instant::now();
    let mut cmd = Command::new(&b.sonic);
    cmd.args(["run", "--listen", "127.0.0.1:0"]);
    let child = spawn_until(cmd, " ready in ", false)?;
    let ready_ms = started.elapsed().as_secs_f64() * 1000.0;
    let pid = child.id();
    let attached = Attached::Process(child);
    let cpu = || -> Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let f: Vec<&str> = stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace().collect();
        Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
    };
    let before = cpu()?;
    let t0 = Instant::now();
    let n = (rate * seconds).to_string();
    let status = Command::new(&b.spbench)
        .args(["read", &n, "--rate", &rate.to_string()])
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("sp-bench failed");
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let ticks = cpu()? - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu_pct = 100.0 * ticks as f64 / hz / elapsed;
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    drop(attached);
    let _ = std::io::stdout().flush();
    Ok((cpu_pct, rss_kib, ready_ms))
}
