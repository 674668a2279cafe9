//! The daemon's own load, apart from the BPF programs' cost per call: its
//! CPU and memory at 100k traced calls/s (with the noise mix of a busy
//! node, `--cpu-only` alone), its start-up time, and how its cost and
//! memory scale with threads, target processes, descriptors tracked and
//! the event rate of strace mode.

use std::{
    fmt::Write as _,
    io::Write,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};

use crate::{
    bpfstats::{self, Programs, Role},
    calls::parse_ns,
    harness::{children_cpu, clock_ticks_per_second, process_ticks, spawn_until, Bench},
    statistics::median,
    tracers::Attached,
};

/// The rate at which the CPU cost is measured, and its target.
pub(crate) const CPU_RATE: u64 = 100_000;
pub(crate) const CPU_TARGET_PCT: f64 = 2.0;
/// The daemon's resident memory target, MiB.
pub(crate) const MEMORY_TARGET_MIB: u64 = 64;

impl Bench {
    /// CPU at `rate` traced calls/s (sp-bench read, paced) for `seconds`:
    /// (the traced process's % of one core without a tracer, the same with
    /// sonic-probe run attached, the daemon process's %).
    pub(crate) fn cpu_at_rate(&self, rate: u64, seconds: u64) -> Result<CpuSample> {
        // A busy node's background (issue 15): the daemon watches the whole
        // host, so the churn of short-lived tools, interpreter start-ups and
        // agents is part of what it costs there. Running through both
        // measurements; the traced process's CPU is sp-bench's own.
        let _noise = NoiseMix::start(&self.root)?;
        let paced = |daemon: Option<u32>| -> Result<(f64, f64)> {
            let ticks_before = daemon.map(process_ticks).transpose()?;
            let (cpu_before, t0) = (children_cpu(), Instant::now());
            let status = Command::new(&self.spbench)
                .args(self.bench_args("read", rate * seconds))
                .args(["--rate", &rate.to_string()])
                .stdout(Stdio::null())
                .status()?;
            if !status.success() {
                bail!("sp-bench failed");
            }
            let elapsed = t0.elapsed().as_secs_f64();
            let traced = 100.0 * (children_cpu() - cpu_before) / elapsed;
            let daemon = match (daemon, ticks_before) {
                (Some(pid), Some(before)) => {
                    100.0 * (process_ticks(pid)? - before) as f64 / clock_ticks_per_second() / elapsed
                }
                _ => 0.0,
            };
            Ok((traced, daemon))
        };
        let (without, _) = paced(None)?;
        let mut cmd = Command::new(&self.sonic);
        cmd.args(["run", "--listen", "127.0.0.1:0"]);
        self.pin_tracer(&mut cmd);
        let child = spawn_until(cmd, " ready in ", false)?;
        let pid = child.id();
        let attached = Attached::Process(child);
        let (with, daemon) = paced(Some(pid))?;
        let rss = rss_mib(pid);
        let noise = noise_alone(pid, seconds)?;
        drop(attached);
        Ok(CpuSample { without, with, daemon, rss_mib: rss, noise })
    }
}

/// The noise mix alone, the daemon watching the whole host, for `seconds`:
/// the daemon's CPU and what all its BPF programs cost the host's
/// processes, as the kernel's run-time statistics count it.
fn noise_alone(pid: u32, seconds: u64) -> Result<NoiseSample> {
    let _on = bpfstats::enable()?;
    let programs = Programs::of_process_named(pid, |_| true)?;
    let (ticks, before, t0) = (process_ticks(pid)?, programs.snapshot()?, Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let after = programs.snapshot()?;
    let elapsed = t0.elapsed().as_secs_f64();
    let daemon = 100.0 * (process_ticks(pid)? - ticks) as f64 / clock_ticks_per_second() / elapsed;
    let mut n = NoiseSample { daemon, ..Default::default() };
    for (name, ns_per_run, runs) in programs.per_program(&before, &after) {
        let pct = 100.0 * ns_per_run * runs as f64 / 1e9 / elapsed;
        match bpfstats::role(&name) {
            Role::Enter => {
                n.syscall_bpf += pct;
                n.calls_per_s = runs as f64 / elapsed;
            }
            Role::Exit => n.syscall_bpf += pct,
            Role::Other if name.starts_with("sched_switch") => {
                n.sched_bpf += pct;
                n.switches_per_s = runs as f64 / elapsed;
            }
            Role::Other if name.starts_with("sched_wakeup") => n.sched_bpf += pct,
            Role::Other => n.lifecycle_bpf += pct,
        }
    }
    Ok(n)
}

/// `bench --cpu-only`: the daemon's CPU and memory at CPU_RATE traced
/// calls/s with the noise mix, `rounds` times, and nothing else (for quick
/// comparisons while optimizing the daemon's user-space side).
pub(crate) fn cpu_only(root: &Path, smoke: bool, rounds: usize) -> Result<String> {
    let b = Bench::new(root, smoke);
    let seconds = if smoke { 2 } else { 10 };
    let mut out = format!(
        "## The daemon at {CPU_RATE} traced calls/s with the noise mix ({seconds} s per round)\n\n\
         | round | traced process without -> with | daemon, % of one core | daemon resident |\n|---|---|---|---|\n"
    );
    let mut noise = Vec::new();
    for round in 1..=rounds {
        let c = b.cpu_at_rate(CPU_RATE, seconds)?;
        eprintln!("== round {round}/{rounds}: daemon {:.2}% of one core, {:.0} MiB", c.daemon, c.rss_mib);
        out.push_str(&format!(
            "| {round} | {:.2}% -> {:.2}% | {:.2}% | {:.1} MiB |\n",
            c.without, c.with, c.daemon, c.rss_mib
        ));
        noise.push(c.noise);
    }
    out.push_str(&noise_table(&noise));
    Ok(out)
}

/// The noise mix alone, a row per round (the busy node's own cost of
/// being watched: issue 32's "daemon <= 2 % of a core on the noise mix,
/// the traced processes' added BPF time next to it").
pub(crate) fn noise_table(rounds: &[NoiseSample]) -> String {
    let mut out = String::from(
        "\n### The noise mix alone, the daemon watching the whole host\n\n\
         The BPF programs' time is the kernel's run-time statistics (BPF_ENABLE_STATS on for the \
         measurement: they add two clock reads per run); it is spent in the processes that make the \
         calls and switches, not in the daemon.\n\n\
         | round | daemon, % of one core | BPF in the host's processes: all | system calls | scheduler | \
         lifecycle | calls/s | switches/s |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (i, n) in rounds.iter().enumerate() {
        out.push_str(&format!(
            "| {} | {:.2}% {} | {:.2}% | {:.2}% | {:.2}% | {:.3}% | {:.0} | {:.0} |\n",
            i + 1,
            n.daemon,
            if n.daemon <= CPU_TARGET_PCT { "✓" } else { "✗" },
            n.bpf(),
            n.syscall_bpf,
            n.sched_bpf,
            n.lifecycle_bpf,
            n.calls_per_s,
            n.switches_per_s
        ));
    }
    out
}

/// What the CPU measurement of one round found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    /// The traced process's CPU (% of one core) with no tracer.
    pub(crate) without: f64,
    /// The same with sonic-probe run attached.
    pub(crate) with: f64,
    /// The daemon process's own CPU.
    pub(crate) daemon: f64,
    /// The daemon's resident memory at the end, MiB.
    pub(crate) rss_mib: f64,
    /// Then the noise mix alone.
    pub(crate) noise: NoiseSample,
}

/// The noise mix alone with the daemon watching (% of one core; rates of
/// the programs' invocations).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoiseSample {
    /// The daemon process.
    pub(crate) daemon: f64,
    /// sys_enter + sys_exit, in the processes making the calls.
    pub(crate) syscall_bpf: f64,
    /// sched_switch + sched_wakeup(_new), in whatever process ran them.
    pub(crate) sched_bpf: f64,
    /// fork, exec, exit, rename.
    pub(crate) lifecycle_bpf: f64,
    /// System calls per second on the host (sys_enter's runs).
    pub(crate) calls_per_s: f64,
    /// Context switches per second (sched_switch's runs).
    pub(crate) switches_per_s: f64,
}

impl NoiseSample {
    /// Every program.
    pub(crate) fn bpf(&self) -> f64 {
        self.syscall_bpf + self.sched_bpf + self.lifecycle_bpf
    }
}

/// tests/workloads/noise_mix.py at its default load, stopped (its whole
/// process group) when dropped.
struct NoiseMix(Child);

impl NoiseMix {
    fn start(root: &Path) -> Result<NoiseMix> {
        let mut child = Command::new("/usr/bin/python3")
            .arg(root.join("tests/workloads/noise_mix.py"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the noise mix (tests/workloads/noise_mix.py)")?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout of the noise mix"))?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the noise mix did not start: {line:?}");
        }
        Ok(NoiseMix(child))
    }
}

impl Drop for NoiseMix {
    fn drop(&mut self) {
        // SAFETY: signalling our own child; it stops its process group.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Daemon CPU and memory while the service makes `rate` traced calls/s.
pub(crate) fn daemon_load(root: &Path, rate: u64, seconds: u64) -> Result<(f64, u64, f64)> {
    let b = Bench::new(root, false);
    let started = Instant::now();
    let mut cmd = Command::new(&b.sonic);
    cmd.args(["run", "--listen", "127.0.0.1:0"]);
    let child = spawn_until(cmd, " ready in ", false)?;
    let ready_ms = started.elapsed().as_secs_f64() * 1000.0;
    let pid = child.id();
    let attached = Attached::Process(child);
    // The daemon process only: its BPF programs' cost, in the traced
    // process, is measured by `run` (section "CPU of sonic-probe run").
    let cpu = || process_ticks(pid);
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
    let cpu_pct = 100.0 * ticks as f64 / clock_ticks_per_second() / elapsed;
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
pub(crate) fn scaling(root: &Path) -> Result<String> {
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
