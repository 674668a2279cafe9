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
    Minimal,
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
            Tracer::Minimal => "minimal",
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
            Tracer::Minimal => "minimal exact latency histogram",
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
    Programs(Ebpf),
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

/// Loads `object` and attaches its programs `enter` and `exit` to
/// raw_syscalls sys_enter and sys_exit.
fn attach_pair(object: &[u8], enter: &str, exit: &str) -> Result<Ebpf> {
    let btf = Btf::from_sys_fs()?;
    // aya 0.14 has no type for task storage maps; the kernel does.
    let mut ebpf = aya::EbpfLoader::new().allow_unsupported_maps().load(object)?;
    for (name, tp) in [(enter, "sys_enter"), (exit, "sys_exit")] {
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
            Tracer::Floor => {
                Attached::Programs(attach_pair(sonic_probe_ebpf::FLOOR_OBJECT, "floor_enter", "floor_exit")?)
            }
            Tracer::Minimal => Attached::Programs(attach_pair(
                sonic_probe_ebpf::MINIMAL_OBJECT,
                "minimal_enter",
                "minimal_exit",
            )?),
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
        let _ = writeln!(
            out,
            "{}\n|{}",
            head.replace("mixed workload (s)", "mixed workload (time added)"),
            "---|".repeat(CALLS.len() + 2)
        );
        for &t in tracers.iter().filter(|t| **t != Tracer::None) {
            let mut row = format!("| {} |", t.name());
            for c in CALLS {
                let floor = med(Tracer::Floor, c) - med(Tracer::None, c);
                let added = med(t, c) - med(Tracer::None, c);
                row.push_str(&format!(" {:.2}x (+{added:.0} ns) |", added / floor));
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
            tracers.iter().copied().filter(|t| !matches!(t, Tracer::None | Tracer::SonicRun)).collect();
        if !others.is_empty() {
            let _ = writeln!(out, "\n## sonic-probe run's added cost as a fraction of each tracer's\n");
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
                    row.push_str(&if r < 0.1 {
                        format!(" 1/{:.0} |", 1.0 / r)
                    } else {
                        format!(" {r:.2} |")
                    });
                }
                let _ = writeln!(out, "{row}");
            }
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

/// Median ns per call of `sp-bench ARGS` over `runs` runs.
fn bench_ns(b: &Bench, args: &[String], runs: usize) -> Result<f64> {
    let mut v = Vec::new();
    for _ in 0..runs {
        let out = Command::new(&b.spbench).args(args).stderr(Stdio::null()).output()?;
        if !out.status.success() {
            bail!("sp-bench {args:?}: {}", out.status);
        }
        v.push(parse_ns(&String::from_utf8_lossy(&out.stdout))?);
    }
    Ok(median(&mut v))
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse::<f64>().ok()
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Bytes of kernel memory the maps of process `pid` lock (bpftool's memlock).
fn map_memory_mib(pid: u32) -> f64 {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let t = std::fs::read_to_string(e.path()).unwrap_or_default();
        if let Some(id) = t.lines().find_map(|l| l.strip_prefix("map_id:")) {
            ids.push(id.trim().to_string());
        }
    }
    let mut total = 0u64;
    for id in ids {
        let out = Command::new("bpftool").args(["map", "show", "id", &id]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if let Some(m) = text.split_whitespace().skip_while(|w| *w != "memlock").nth(1) {
            total += m.trim_end_matches('B').parse::<u64>().unwrap_or(0);
        }
    }
    total as f64 / (1 << 20) as f64
}

/// How the added cost and memory grow: threads, processes in the target
/// set, descriptors tracked, and the event rate strace mode keeps up with.
pub fn scaling(root: &Path) -> Result<String> {
    let b = Bench::new(root, false);
    let mut out = String::from("\n## Scaling\n");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();

    // Threads: added ns per read with T threads reading at once.
    let _ = writeln!(out, "\n### Threads (read 1 KiB from /dev/zero, T threads at once, 2 CPUs)\n");
    let _ = writeln!(out, "| threads | none (ns/call) | sonic-probe run (ns/call) | added | run's kernel maps |\n|---|---|---|---|---|");
    for t in [1, 2, 4, 8, 16, 32, 64] {
        let args = s(&["read", "50000", "--threads", &t.to_string()]);
        let none = bench_ns(&b, &args, 3)?;
        let mut cmd = Command::new(&b.sonic);
        cmd.args(["run", "--listen", "127.0.0.1:0"]);
        let child = spawn_until(cmd, " ready in ", false)?;
        let pid = child.id();
        let attached = Attached::Process(child);
        let run = bench_ns(&b, &args, 3)?;
        let maps = map_memory_mib(pid);
        drop(attached);
        let _ = writeln!(out, "| {t} | {none:.0} | {run:.0} | +{:.0} | {maps:.1} MiB |", run - none);
    }

    // Processes in the target set.
    let _ = writeln!(out, "\n### Processes in the target set (--comm, K idle targets plus the benchmark)\n");
    let _ = writeln!(out, "| targets | read ns/call | daemon RSS | kernel maps |\n|---|---|---|---|");
    let dir = std::env::temp_dir().join("sonic-probe-bench-idle");
    std::fs::create_dir_all(&dir)?;
    let idle = dir.join("spidle");
    let _ = std::fs::remove_file(&idle);
    std::os::unix::fs::symlink("/bin/sleep", &idle)?;
    for k in [1usize, 10, 100, 1000] {
        let mut idlers: Vec<Child> =
            (0..k).map(|_| Command::new(&idle).arg("600").spawn()).collect::<std::io::Result<_>>()?;
        let mut cmd = Command::new(&b.sonic);
        cmd.args(["run", "--listen", "127.0.0.1:0", "--comm", "spidle", "--comm", "sp-bench"]);
        let child = spawn_until(cmd, " ready in ", false)?;
        let pid = child.id();
        let attached = Attached::Process(child);
        let ns = bench_ns(&b, &s(&["read", "200000"]), 3)?;
        let (rss, maps) = (rss_mib(pid), map_memory_mib(pid));
        drop(attached);
        for c in &mut idlers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = writeln!(out, "| {k} | {ns:.0} | {rss:.1} MiB | {maps:.1} MiB |");
    }

    // Descriptors tracked in open_files.
    let _ =
        writeln!(out, "\n### Descriptors tracked (the benchmark keeps K files open, opened while watched)\n");
    let _ = writeln!(out, "| open files | read ns/call | daemon RSS |\n|---|---|---|");
    for k in [0u64, 100, 1000, 10000] {
        let mut cmd = Command::new(&b.sonic);
        cmd.args(["run", "--listen", "127.0.0.1:0"]);
        let child = spawn_until(cmd, " ready in ", false)?;
        let pid = child.id();
        let attached = Attached::Process(child);
        let ns = bench_ns(&b, &s(&["read", "200000", "--open-files", &k.to_string()]), 3)?;
        let rss = rss_mib(pid);
        drop(attached);
        let _ = writeln!(out, "| {k} | {ns:.0} | {rss:.1} MiB |");
    }

    // Event rate: strace mode, every call an event.
    let _ =
        writeln!(out, "\n### Event rate in strace mode (sonic-probe trace -o FILE, reads paced at a rate)\n");
    let _ =
        writeln!(out, "| offered calls/s | achieved calls/s | events lost | tracer CPU |\n|---|---|---|---|");
    for rate in [10_000u64, 100_000, 300_000, 0] {
        let n = if rate == 0 { 2_000_000 } else { (rate * 3).max(30_000) };
        let trace_out = dir.join("trace.txt");
        let mut args = s(&["trace", "-e", "trace=read", "-o", trace_out.to_str().unwrap(), "--"]);
        args.push(b.spbench.to_string_lossy().into_owned());
        args.extend(s(&["read", &n.to_string()]));
        if rate > 0 {
            args.extend(s(&["--rate", &rate.to_string()]));
        }
        let t0 = Instant::now();
        let mut child =
            Command::new(&b.sonic).args(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        // The tracer's own CPU time, sampled until it exits.
        let pid = child.id();
        let mut ticks = 0u64;
        while child.try_wait()?.is_none() {
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                let f: Vec<&str> =
                    stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace().collect();
                if f.len() > 12 {
                    ticks = f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let wait = child.wait_with_output()?;
        let elapsed = t0.elapsed().as_secs_f64();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu = 100.0 * ticks as f64 / hz / elapsed;
        let stdout = String::from_utf8_lossy(&wait.stdout);
        let achieved = stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("calls_per_second="))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let text = std::fs::read_to_string(&trace_out).unwrap_or_default();
        let lost: u64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("+++ lost ")?.strip_suffix(" events +++")?.parse::<u64>().ok())
            .sum();
        let offered = if rate == 0 { "as fast as it can".to_string() } else { rate.to_string() };
        let _ = writeln!(out, "| {offered} | {achieved:.0} | {lost} | {cpu:.0}% of one core |");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}
