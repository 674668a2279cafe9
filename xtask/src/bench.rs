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

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};

use crate::bpfstats::{self, Programs, Role};

/// Calls measured, and how many of each per run.
/// openat reopens one file read-only (most opens counted in the kernel, not
/// sent: files.h), openat-rw read-write (every open sent with its path).
const CALLS: &[&str] =
    &["read", "read-file", "futex", "futex_wait", "openat", "openat-rw", "mmap", "getppid"];

/// Traced system calls per loop iteration of sp-bench CALL (openat and mmap
/// close and unmap again; getppid is not traced).
fn traced_per_iteration(call: &str) -> u64 {
    match call {
        "openat" | "openat-rw" | "mmap" => 2,
        "getppid" => 0,
        _ => 1,
    }
}

/// System calls per loop iteration of sp-bench CALL, traced or not.
fn syscalls_per_iteration(call: &str) -> u64 {
    traced_per_iteration(call).max(1)
}

/// The rate at which the CPU cost is measured, and its target.
const CPU_RATE: u64 = 100_000;
const CPU_TARGET_PCT: f64 = 2.0;
/// The daemon's resident memory target, MiB.
const MEMORY_TARGET_MIB: u64 = 64;

/// The minimal tracer's pieces the breakdown removes one at a time:
/// (sp-reference's name for the piece, what it is).
pub const PIECES: &[(&str, &str)] = &[
    ("clock", "the two clock reads (bpf_ktime_get_ns at entry and exit)"),
    ("task-storage", "the start time in task storage (a get at entry and at exit; a per-CPU slot instead)"),
    ("aggregation", "the (syscall, process name) key, the per-CPU hash lookup, the bucket increment"),
];

/// Largest share the `workload` label's per-cgroup keys may add to run's
/// kernel-side cost per call (issue 12).
const WORKLOADS_GOAL: f64 = 0.10;

/// Bootstrap resamples per interval.
const RESAMPLES: usize = 2000;

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

    fn name(self) -> &'static str {
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
    fn iterations(self, smoke: bool) -> u64 {
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
    fn kernel_side(self) -> bool {
        !matches!(self, Tracer::None | Tracer::PerfTrace | Tracer::Strace)
    }

    /// Only measured kernel-side (the breakdown's programs count nothing).
    fn kernel_only(self) -> bool {
        matches!(self, Tracer::MinimalWithout(_))
    }
}

/// The earlier build the tracer run-baseline runs, if one is given.
pub fn baseline_binary() -> Option<PathBuf> {
    std::env::var_os("SONIC_PROBE_BENCH_BASELINE").map(PathBuf::from)
}

/// Iterations per kernel-side sample: per-invocation averages settle fast.
fn kernel_iterations(smoke: bool) -> u64 {
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
fn kernel_repeats(smoke: bool) -> usize {
    if smoke {
        1
    } else {
        5
    }
}

/// The sample of median per-call cost (enter and exit kept together).
fn median_sample(mut v: Vec<KernelSample>) -> Option<KernelSample> {
    v.sort_by(|a, b| a.per_call().total_cmp(&b.per_call()));
    v.get(v.len() / 2).copied()
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

/// Where the benchmark and the tracers run: two different CPUs of those we
/// may use, so that the daemon draining its ring buffer or bpftrace's
/// process never takes the benchmark's CPU from it.
#[derive(Debug, Clone, Copy)]
struct Cpus {
    tracer: usize,
    bench: usize,
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the set we pass; CPU_ISSET reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Makes `cmd`'s process run on `cpu` only (its children inherit it).
fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    // SAFETY: between fork and exec the closure makes one system call,
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub struct Bench {
    root: PathBuf,
    smoke: bool,
    sonic: PathBuf,
    spbench: PathBuf,
    /// Attaches the floor or the minimal reference programs.
    reference: PathBuf,
    /// None with a single CPU: nothing pinned.
    cpus: Option<Cpus>,
}

/// A tracer attached for the whole host while the benchmark runs.
enum Attached {
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// splitmix64: the bootstrap's resampling needs a few thousand uniform
/// indices, the same on every run (a report does not change when run
/// twice on the same samples); not worth a dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A 95 % bootstrap interval of `f` over `rounds` rounds: the rounds are
/// resampled with replacement and `f` (a statistic of the rounds whose
/// indices it is given; None where it is undefined, e.g. a non-positive
/// denominator) evaluated on each resample. None when more than 2.5 % of
/// the resamples leave it undefined: then no interval bounds it.
fn bootstrap(rounds: usize, f: impl Fn(&[usize]) -> Option<f64>) -> Option<(f64, f64)> {
    if rounds == 0 {
        return None;
    }
    let mut rng = SplitMix(0x5eed_5017_c0de_0016);
    let mut values = Vec::with_capacity(RESAMPLES);
    let mut idx = vec![0usize; rounds];
    for _ in 0..RESAMPLES {
        for i in idx.iter_mut() {
            *i = (rng.next() % rounds as u64) as usize;
        }
        if let Some(v) = f(&idx) {
            values.push(v);
        }
    }
    if (values.len() as f64) < RESAMPLES as f64 * 0.975 {
        return None;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

/// The median of the samples at `idx`.
fn median_at(v: &[f64], idx: &[usize]) -> f64 {
    let mut s: Vec<f64> = idx.iter().map(|&i| v[i]).collect();
    median(&mut s)
}

/// `num / den` as text: a ratio only when the denominator is positive.
fn ratio_text(num: f64, den: f64) -> String {
    if den > 0.0 {
        format!("{:.2}x", num / den)
    } else {
        format!("n/a (denominator {den:+.0} ns ≤ 0)")
    }
}

/// A bootstrap interval as text.
fn interval_text(iv: Option<(f64, f64)>) -> String {
    match iv {
        Some((lo, hi)) => format!("[{lo:.2}-{hi:.2}]"),
        None => "[unbounded: a denominator ≤ 0 in some resamples]".to_string(),
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

/// Events `sonic-probe trace` says it lost (its stderr's "lost N events").
fn parse_lost(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| l.split("lost ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// CPU time of the children reaped so far (user + system), seconds.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Clock ticks of user + system time of a live process.
fn process_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let f: Vec<&str> = stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

fn parse_ns(out: &str) -> Result<f64> {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("ns_per_call="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no ns_per_call in {out:?}"))
}

/// One kernel-side sample: a run of sp-bench CALL with statistics on.
#[derive(Debug, Clone, Copy)]
struct KernelSample {
    /// ns per invocation of the sys_enter program(s).
    enter: f64,
    /// ns per invocation of the sys_exit program(s).
    exit: f64,
    /// Share of the invocations that were not the benchmark's own calls
    /// (other processes on the host; the programs run for every call).
    background: f64,
}

impl KernelSample {
    /// ns per traced call: its entry plus its exit.
    fn per_call(&self) -> f64 {
        self.enter + self.exit
    }
}

/// The machine's facts that explain why the same programs cost more on one
/// machine than on another: CPU, the kernel's Spectre/return-thunk
/// mitigations (retpolines make every indirect call dear, return thunks
/// every return), the clock source bpf_ktime_get_ns reads, the BPF JIT.
pub fn machine_facts() -> String {
    let read =
        |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into());
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|x| x.1.trim().to_string()))
        .unwrap_or_else(|| "?".into());
    let hypervisor =
        cpuinfo.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    let uname = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let mut out = String::from("## Machine\n\n| fact | value |\n|---|---|\n");
    let _ = writeln!(out, "| kernel | {uname} |");
    let _ = writeln!(
        out,
        "| CPU | {model}, {} CPUs{} |",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        if hypervisor { ", virtual machine" } else { "" }
    );
    let _ = writeln!(
        out,
        "| clock source | {} (available: {}) |",
        read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        read("/sys/devices/system/clocksource/clocksource0/available_clocksource")
    );
    let _ = writeln!(
        out,
        "| BPF JIT | bpf_jit_enable={}, bpf_jit_harden={} |",
        read("/proc/sys/net/core/bpf_jit_enable"),
        read("/proc/sys/net/core/bpf_jit_harden")
    );
    let _ = writeln!(
        out,
        "| kernel.bpf_stats_enabled (sysctl, before the run) | {} |",
        read("/proc/sys/kernel/bpf_stats_enabled")
    );
    // Every vulnerability the kernel reports, the ones on the traced path
    // first; those it is not affected by in one line.
    let dir = "/sys/devices/system/cpu/vulnerabilities";
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort_by_key(|n| {
        (!matches!(n.as_str(), "spectre_v2" | "retbleed" | "spec_rstack_overflow" | "spectre_v1"), n.clone())
    });
    let mut unaffected = Vec::new();
    for n in names {
        let v = read(&format!("{dir}/{n}"));
        if v == "Not affected" {
            unaffected.push(n);
        } else {
            let _ = writeln!(out, "| {n} | {v} |");
        }
    }
    if !unaffected.is_empty() {
        let _ = writeln!(out, "| not affected | {} |", unaffected.join(", "));
    }
    out
}

impl Bench {
    pub fn new(root: &Path, smoke: bool) -> Bench {
        let allowed = allowed_cpus();
        let cpus =
            (allowed.len() >= 2).then(|| Cpus { tracer: allowed[0], bench: allowed[allowed.len() - 1] });
        Bench {
            root: root.to_path_buf(),
            smoke,
            sonic: root.join("target/release/sonic-probe"),
            spbench: root.join("target/release/sp-bench"),
            reference: root.join("target/release/sp-reference"),
            cpus,
        }
    }

    /// Pins a tracer's process (and, unless told otherwise, its children)
    /// to the tracer's CPU.
    fn pin_tracer(&self, cmd: &mut Command) {
        if let Some(c) = self.cpus {
            pin(cmd, c.tracer);
        }
    }

    /// sp-bench's arguments: CALL N, pinned to the benchmark's CPU.
    fn bench_args(&self, call: &str, n: u64) -> Vec<String> {
        let mut v = vec![call.to_string(), n.to_string()];
        if let Some(c) = self.cpus {
            v.extend(["--cpu".to_string(), c.bench.to_string()]);
        }
        v
    }

    fn attach(&self, t: Tracer) -> Result<Attached> {
        Ok(match t {
            Tracer::Floor | Tracer::Minimal | Tracer::MinimalWithout(_) => {
                let mut c = Command::new(&self.reference);
                c.arg(t.short()).stdin(Stdio::piped());
                self.pin_tracer(&mut c);
                Attached::Process(spawn_until(c, "attached", false)?)
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
    fn command(&self, t: Tracer, call: &str, n: u64) -> Command {
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

    /// ns per call of `n` iterations under `t`, and the events it lost
    /// (sonic-probe trace; 0 for the others).
    fn run_bench(&self, t: Tracer, call: &str, n: u64) -> Result<(f64, u64)> {
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
    fn run_kernel(&self, t: Tracer, programs: Option<&Programs>, call: &str, n: u64) -> Result<KernelSample> {
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
    fn warm_up(&self, t: Tracer) -> Result<()> {
        for call in CALLS {
            self.run_bench(t, call, (t.iterations(self.smoke) / 10).max(100))?;
        }
        Ok(())
    }

    /// The diagnoses workload (the Python stand-in): its own time from its
    /// first request to its last, seconds (neither the tracer's nor the
    /// interpreter's start-up is in it), and the events the tracer lost.
    fn run_mixed(&self, t: Tracer) -> Result<(f64, u64)> {
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

    /// CPU at `rate` traced calls/s (sp-bench read, paced) for `seconds`:
    /// (the traced process's % of one core without a tracer, the same with
    /// sonic-probe run attached, the daemon process's %).
    fn cpu_at_rate(&self, rate: u64, seconds: u64) -> Result<CpuSample> {
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
        drop(attached);
        Ok(CpuSample { without, with, daemon, rss_mib: rss })
    }
}

/// `bench --cpu-only`: the daemon's CPU and memory at CPU_RATE traced
/// calls/s with the noise mix, `rounds` times, and nothing else (for quick
/// comparisons while optimizing the daemon's user-space side).
pub fn cpu_only(root: &Path, smoke: bool, rounds: usize) -> Result<String> {
    let b = Bench::new(root, smoke);
    let seconds = if smoke { 2 } else { 10 };
    let mut out = format!(
        "## The daemon at {CPU_RATE} traced calls/s with the noise mix ({seconds} s per round)\n\n\
         | round | traced process without -> with | daemon, % of one core | daemon resident |\n|---|---|---|---|\n"
    );
    for round in 1..=rounds {
        let c = b.cpu_at_rate(CPU_RATE, seconds)?;
        eprintln!("== round {round}/{rounds}: daemon {:.2}% of one core, {:.0} MiB", c.daemon, c.rss_mib);
        out.push_str(&format!(
            "| {round} | {:.2}% -> {:.2}% | {:.2}% | {:.1} MiB |\n",
            c.without, c.with, c.daemon, c.rss_mib
        ));
    }
    Ok(out)
}

/// What the CPU measurement of one round found.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    /// The traced process's CPU (% of one core) with no tracer.
    without: f64,
    /// The same with sonic-probe run attached.
    with: f64,
    /// The daemon process's own CPU.
    daemon: f64,
    /// The daemon's resident memory at the end, MiB.
    rss_mib: f64,
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

/// Per tracer, per call: the samples (ns per call; seconds for "mixed"),
/// one per round, in round order.
type Samples = BTreeMap<Tracer, BTreeMap<String, Vec<f64>>>;

/// Per tracer, per call: the kernel-side samples, one per round (the
/// median of its kernel_repeats).
type KernelSamples = BTreeMap<Tracer, BTreeMap<String, Vec<KernelSample>>>;

/// What a run measured besides the samples.
#[derive(Default)]
struct Extra {
    kernel: KernelSamples,
    /// Per call ("mixed" too): events sonic-probe trace lost, per run.
    trace_lost: BTreeMap<String, Vec<u64>>,
    /// Per round, at CPU_RATE with the noise mix running.
    cpu: Vec<CpuSample>,
    /// (round, tracer) whose programs counted runs while this bench had
    /// statistics off: another process had them on, and that tracer's
    /// wall-clock samples of that round include their cost.
    stats_on_elsewhere: Vec<(usize, Tracer)>,
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    let m = median(&mut v);
    (m, v[0], v[v.len() - 1])
}

pub fn run(root: &Path, smoke: bool, rounds: usize, tracers: &[Tracer]) -> Result<String> {
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

/// Kernel-side median ns per traced call, by tracer (short name) and call.
type KernelMedians = BTreeMap<String, BTreeMap<String, f64>>;

fn kernel_medians(k: &KernelSamples) -> KernelMedians {
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
fn against_previous(
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

fn report(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_keeps_the_median_sample_whole() {
        let k = |enter: f64, exit: f64| KernelSample { enter, exit, background: 0.0 };
        // A burst in one sample (the 900) is not the round's figure, and
        // the median's enter and exit stay those of one sample.
        let m = median_sample(vec![k(200.0, 900.0), k(190.0, 210.0), k(180.0, 240.0)]).unwrap();
        assert_eq!((m.enter, m.exit), (180.0, 240.0));
        assert!(median_sample(Vec::new()).is_none());
    }

    #[test]
    fn a_non_positive_denominator_is_not_a_number() {
        assert_eq!(ratio_text(30.0, 10.0), "3.00x");
        assert!(ratio_text(30.0, 0.0).starts_with("n/a"));
        assert!(ratio_text(-11.0, -1.0).starts_with("n/a"));
    }

    #[test]
    fn bootstrap_interval_brackets_the_median_ratio_and_is_reproducible() {
        let num = [200.0, 210.0, 190.0, 205.0, 195.0, 230.0, 185.0];
        let den = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0];
        let f = |idx: &[usize]| {
            let d = median_at(&den, idx);
            (d > 0.0).then(|| median_at(&num, idx) / d)
        };
        let (lo, hi) = bootstrap(num.len(), f).unwrap();
        assert!(lo <= 2.0 && 2.0 <= hi && hi - lo < 0.5, "[{lo}, {hi}]");
        assert_eq!(bootstrap(num.len(), f), Some((lo, hi)));
    }

    #[test]
    fn bootstrap_gives_no_interval_when_the_denominator_can_be_non_positive() {
        let num = [10.0, 12.0, 11.0, 9.0, 10.0];
        let den = [5.0, -3.0, -4.0, 6.0, -2.0];
        let f = |idx: &[usize]| {
            let d = median_at(&den, idx);
            (d > 0.0).then(|| median_at(&num, idx) / d)
        };
        assert_eq!(bootstrap(num.len(), f), None);
    }

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

    #[test]
    fn every_piece_has_a_tracer_name() {
        for (i, (piece, _)) in PIECES.iter().enumerate() {
            assert_eq!(Tracer::MinimalWithout(i).short(), format!("minimal-without-{piece}"));
        }
    }
}
