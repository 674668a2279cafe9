//! `cargo xtask <task>`: the project's commands, so that a new user needs
//! two of them on a fresh Debian 12 machine (see README):
//!
//!   cargo xtask run    install what is missing, build, run the daemon
//!   cargo xtask test   install what is missing, run every check and test
//!
//! Tasks shell out to cargo and apt-get; nothing here is clever.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use sonic_probe_bench as bench;

mod deps;
mod fuzz;
mod gpu_check;
mod vmtest;

const USAGE: &str = "\
usage: cargo xtask <task> [args]

tasks:
  deps [--verbose]
                 check that the modules of sonic-probe and sonic-probe-common
                 import each other without circles (also part of `test`);
                 --verbose lists every module's imports
  setup          install the Debian packages the build and the tests need (apt-get)
  run [--] [ARGS]
                 setup, build (release) and run `sonic-probe run ARGS` (needs root)
  test           setup, then fmt, clippy, build and all tests, integration tests
                 included (needs root: they load the real BPF programs), again with
                 every fallback variant of the BPF programs forced, the alert
                 rule tests, the Debian package, a smoke pass of the benchmark,
                 30 s of each fuzz target and the tests on Debian's 5.10, 6.1 and 6.12
                 kernels (vmtest)
  demo           run the daemon against a faulty stand-in of the Sonic service
                 (tests/workloads/sonic_sim.py) and print what it found (needs root)
  bench [--smoke] [--rounds N] [--cpu-only] [--only none,floor,minimal,run,run-fallback,run-no-workloads,run-no-captures,run-baseline,trace,bpftrace,perf,strace]
                 measure the cost per call of sonic-probe (its fast programs and
                 the fallbacks older kernels get) against no tracer, the
                 floor (empty BPF programs), a minimal exact latency histogram,
                 bpftrace, perf trace and strace: first the BPF programs' run
                 time per call as the kernel counts it (BPF statistics), then
                 the wall clock (benchmark and tracer pinned to different CPUs);
                 where the minimal's time goes, by removal; the machine's facts;
                 the daemon's CPU, memory, start time and scaling; writes
                 target/bench/report.md (needs root; 7 rounds by default).
                 SONIC_PROBE_BENCH_BASELINE=PATH adds run-baseline: `run` of an
                 earlier build at PATH, side by side with this one.
                 --cpu-only: only the daemon's CPU and memory at 100k traced
                 calls/s with the noise mix beside it, printed (10 s a round; 2 with --smoke)
  package        build the Debian package (cargo-deb), install it with dpkg, check
                 it (binary, unit enabled, config valid), then purge it; --keep keeps it
  vmtest [--kernel 5.10|6.1|6.12|all] [--env NAME=VALUE]... [--timeout SECS]
         [--only TEST,...] [-- COMMAND [ARGS...]]
                 boot Debian's 5.10, 6.1 and 6.12 cloud kernels (default: all, one
                 after the other) in qemu (TCG) and run a subset of the integration
                 tests on each (the host's binaries in an initramfs), or COMMAND instead
                 (sonic-probe and sp-workload on PATH; exits with its status); --env
                 is exported in the guest; logs in target/vmtest/serial-VERSION.log
  gpu-check [--python PATH] [--seconds N]
                 on a machine with an NVIDIA GPU, its driver and PyTorch (PATH: the
                 interpreter that has it; default python3): run a request loop that
                 calls .item() every step (xtask/gpu_check.py, N seconds, default 10)
                 under the daemon and PyTorch's profiler; check cudaStreamSynchronize's
                 count against the profiler's, the thread's gpu share (>= 80%) and the
                 gpu_wait finding's line (needs root); without a GPU: one line, skipped
  fuzz [--seconds N] [--toolchain NAME] [TARGET...]
                 run the cargo-fuzz targets in fuzz/ (config_file, event_decode) for
                 N seconds each (default 30); fails with the crashing input's path
";

/// Debian packages and a file each provides, to tell whether it is there.
const BUILD_PACKAGES: &[(&str, &str)] =
    &[("clang-16", "/usr/bin/clang-16"), ("libbpf-dev", "/usr/include/bpf/bpf_helpers.h")];
const TEST_PACKAGES: &[(&str, &str)] = &[
    ("systemd", "/usr/bin/systemd-analyze"),
    ("strace", "/usr/bin/strace"),
    ("bpftool", "/usr/sbin/bpftool"),
    ("prometheus", "/usr/bin/promtool"),
    ("util-linux", "/usr/bin/setpriv"),
    ("curl", "/usr/bin/curl"),
    ("openssl", "/usr/bin/openssl"),
    // `sonic-probe top`'s live view is tested in a tmux pane (tests/tests/top.rs).
    ("tmux", "/usr/bin/tmux"),
    // NVIDIA's CUDA runtime library for the GPU tests, from PyPI
    // (sonic_probe_tests::cuda_runtime).
    ("python3-pip", "/usr/lib/python3/dist-packages/pip/__init__.py"),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("deps") => deps::run(&root(), &args[1..]),
        Some("setup") => setup(true),
        Some("run") => run(&args[1..]),
        Some("test") => test(),
        Some("demo") => demo(),
        Some("package") => package(args.iter().any(|a| a == "--keep")),
        Some("bench") => bench_task(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("vmtest") => vmtest::run(&args[1..]),
        Some("gpu-check") => gpu_check::run(&args[1..]),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => {
            eprint!("xtask: unknown task {other}\n\n{USAGE}");
            return ExitCode::from(2);
        }
        None => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Runs a command in the workspace root, failing on a non-zero exit.
fn sh(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    eprintln!("+ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("{program} {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Installs the missing Debian packages (build ones; test ones too if asked).
fn setup(with_tests: bool) -> Result<()> {
    let mut wanted: Vec<(&str, &str)> = BUILD_PACKAGES.to_vec();
    if with_tests {
        wanted.extend_from_slice(TEST_PACKAGES);
    }
    let missing: Vec<&str> =
        wanted.iter().filter(|(_, file)| !Path::new(file).exists()).map(|(pkg, _)| *pkg).collect();
    apt_install(&missing)
}

/// apt-get installs `missing` (nothing if empty; needs root).
fn apt_install(missing: &[&str]) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!("missing packages {}: run as root, or apt-get install them", missing.join(" "));
    }
    sh("apt-get", &["update", "-q"], &[])?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(missing);
    sh("apt-get", &args, &[("DEBIAN_FRONTEND", "noninteractive")])
}

/// `cargo xtask run [--] ARGS`: the `--` that `cargo run` wants before a
/// program's own flags is accepted here too, and dropped.
fn run(args: &[String]) -> Result<()> {
    let args = args.strip_prefix(&["--".to_string()]).unwrap_or(args);
    setup(false)?;
    sh("cargo", &["build", "--release", "-p", "sonic-probe"], &[])?;
    if !is_root() {
        bail!("sonic-probe loads BPF programs: run `cargo xtask run` as root");
    }
    let bin = root().join("target/release/sonic-probe");
    let mut full = vec!["run"];
    full.extend(args.iter().map(String::as_str));
    sh(bin.to_str().expect("utf-8 path"), &full, &[])
}

/// Phases of a run, timed; [`Phases::report`] prints how long each took,
/// so that the minutes of a CI run show where they go.
struct Phases {
    done: Vec<(&'static str, Duration, bool)>,
    started: Instant,
}

impl Default for Phases {
    fn default() -> Self {
        Phases { done: Vec::new(), started: Instant::now() }
    }
}

impl Phases {
    fn run(&mut self, name: &'static str, phase: impl FnOnce() -> Result<()>) -> Result<()> {
        let started = Instant::now();
        let result = phase();
        self.done.push((name, started.elapsed(), result.is_ok()));
        result
    }

    fn report(&self) {
        // Phases run beside others (the package and the fuzzers beside
        // vmtest) overlap: the wall time is what a CI run takes.
        let total: Duration = self.done.iter().map(|(_, d, _)| *d).sum();
        eprintln!(
            "\n== cargo xtask test: {:.1} min wall ({:.1} min of phases, some side by side)",
            self.started.elapsed().as_secs_f64() / 60.0,
            total.as_secs_f64() / 60.0
        );
        for (name, d, ok) in &self.done {
            eprintln!("{:>7.1} s  {name}{}", d.as_secs_f64(), if *ok { "" } else { "  FAILED" });
        }
    }
}

fn test() -> Result<()> {
    let mut phases = Phases::default();
    let result = test_phases(&mut phases);
    phases.report();
    result
}

fn test_phases(p: &mut Phases) -> Result<()> {
    p.run("setup (apt-get)", || setup(true))?;
    p.run("cargo fmt --check", || sh("cargo", &["fmt", "--all", "--", "--check"], &[]))?;
    p.run("cargo clippy", || {
        sh("cargo", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[])
    })?;
    p.run("cargo xtask deps", || deps::run(&root(), &[]))?;
    p.run("cargo build (debug, all targets)", || {
        sh("cargo", &["build", "--workspace", "--all-targets"], &[])
    })?;
    if !is_root() {
        bail!("the integration tests load BPF programs: run `cargo xtask test` as root");
    }
    // Integration tests must not skip here: a missing privilege is a failure.
    p.run("cargo test (unit and integration tests)", || {
        sh("cargo", &["test", "--workspace"], &[("SONIC_PROBE_REQUIRE_PRIVILEGED", "1")])
    })?;
    // The same kernel with the BPF programs' fallback variants (what 5.10
    // gets: CO-RE reads, per-thread state in a hash, futex wakes in a map),
    // at full speed: every test that watches real calls.
    let mut fallback = vec!["test", "-p", "sonic-probe-tests"];
    for t in [
        "core",
        "diagnoses",
        "trace",
        "reliability",
        "kernels",
        "cli",
        "workloads",
        "stacks",
        "threads",
        "gpu",
    ] {
        fallback.extend(["--test", t]);
    }
    p.run("integration tests, SONIC_PROBE_FALLBACK=all", || {
        sh("cargo", &fallback, &[("SONIC_PROBE_REQUIRE_PRIVILEGED", "1"), ("SONIC_PROBE_FALLBACK", "all")])
    })?;
    p.run("promtool test rules", || {
        sh("promtool", &["test", "rules", "deploy/prometheus/alerts_test.yml"], &[])
    })?;
    // Other kernels: Debian's 5.10, 6.1 and 6.12 in qemu, as many at a time
    // as the machine has CPUs. Each guest keeps one host thread busy, and
    // with three kernels on two CPUs the last runs alone for minutes: the
    // package's release build and the fuzz targets (30 s each), work that
    // asserts no timing, run beside the guests at the lowest priority and
    // take what CPU the guests leave.
    // Two chains side by side: the package's release build is the bench's
    // too, so the bench's smoke pass (every tracer attaches and the report
    // is written; no timing asserted: the full run is manual) follows it;
    // the fuzz build, as long, goes alone. Each chain's serial parts
    // (links, build scripts, the fuzzers' single-threaded runs) leave a CPU
    // the other takes.
    let beside = Beside::start(&[
        &[("Debian package", &["package"]), ("bench --smoke", &["bench", "--smoke"])],
        &[("fuzz", &["fuzz"])],
    ])?;
    let vm = p.run("vmtest (5.10, 6.1, 6.12)", || vmtest::run(&["--kernel".to_string(), "all".to_string()]));
    let beside = beside.finish(p);
    vm.and(beside)
}

/// Chains of tasks of this program, each chain one after the other and the
/// chains side by side, at nice 19 beside a foreground phase, each task
/// with its output in target/xtask-logs/TASK.log (printed when all are
/// done, so that it does not interleave with the foreground's). A failed
/// task ends its chain.
struct Beside {
    chains: Vec<std::thread::JoinHandle<Vec<Done>>>,
}

/// A task run beside: its name, time, outcome and log.
type Done = (&'static str, Duration, Result<()>, PathBuf);

/// A task: its name in the report and the arguments of `cargo xtask`.
type Task = (&'static str, &'static [&'static str]);

impl Beside {
    fn start(chains: &[&[Task]]) -> Result<Self> {
        // This very binary, through /proc: `cargo build --workspace` has
        // rebuilt target/debug/xtask since it started (the file it ran
        // from is gone), and its inode lives as long as this process.
        let exe = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
        let logs = root().join("target/xtask-logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
        let chains = chains
            .iter()
            .map(|tasks| {
                let (tasks, exe, logs) = (tasks.to_vec(), exe.clone(), logs.clone());
                std::thread::spawn(move || {
                    let mut done = Vec::new();
                    for (name, args) in tasks {
                        let log = logs.join(format!("{}.log", args[0]));
                        let started = Instant::now();
                        let result = run_nice(&exe, args, &log);
                        let failed = result.is_err();
                        done.push((name, started.elapsed(), result, log));
                        if failed {
                            break;
                        }
                    }
                    done
                })
            })
            .collect();
        Ok(Beside { chains })
    }

    /// Waits for the tasks, prints their output and enters their times.
    fn finish(self, p: &mut Phases) -> Result<()> {
        let mut first_err = Ok(());
        for chain in self.chains {
            let done = chain.join().map_err(|_| anyhow::anyhow!("a chain of tasks panicked"))?;
            for (name, took, result, log) in done {
                eprintln!("\n== {name} (beside vmtest, nice 19): {}", log.display());
                match std::fs::read_to_string(&log) {
                    Ok(text) => eprint!("{text}"),
                    Err(e) => eprintln!("cannot read {}: {e}", log.display()),
                }
                p.done.push((name, took, result.is_ok()));
                if first_err.is_ok() {
                    first_err = result;
                }
            }
        }
        first_err
    }
}

/// `exe ARGS` at nice 19, its output into `log`.
fn run_nice(exe: &Path, args: &[&str], log: &Path) -> Result<()> {
    let out = std::fs::File::create(log)?;
    let status = Command::new("nice")
        .args(["-n", "19"])
        .arg(exe)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .context("cannot run nice")?;
    if !status.success() {
        bail!("cargo xtask {} failed ({status}): see {}", args.join(" "), log.display());
    }
    Ok(())
}

/// The Debian package, built and installed for real.
fn package(keep: bool) -> Result<()> {
    setup(false)?;
    if Command::new("cargo").args(["deb", "--version"]).output().map(|o| !o.status.success()).unwrap_or(true)
    {
        sh("cargo", &["install", "cargo-deb", "--locked", "--version", "3.8.0"], &[])?;
    }
    sh("cargo", &["deb", "-p", "sonic-probe", "--output", "target/debian/sonic-probe.deb"], &[])?;
    if !is_root() {
        bail!("installing the package needs root: run `cargo xtask package` as root");
    }
    sh("dpkg", &["-i", "target/debian/sonic-probe.deb"], &[])?;
    let checks = (|| -> Result<()> {
        sh("/usr/bin/sonic-probe", &["--version"], &[])?;
        sh("/usr/bin/sonic-probe", &["check-config"], &[])?;
        sh("systemd-analyze", &["verify", "/usr/lib/systemd/system/sonic-probe.service"], &[])?;
        for f in [
            "/usr/share/sonic-probe/grafana/sonic-probe.json",
            "/usr/share/sonic-probe/prometheus/alerts.yml",
            "/usr/share/doc/sonic-probe/examples/web-config.yml",
            "/etc/systemd/system/multi-user.target.wants/sonic-probe.service",
        ] {
            if !Path::new(f).exists() {
                bail!("the package did not install {f}");
            }
        }
        eprintln!("package OK: installed, unit enabled, config valid");
        Ok(())
    })();
    if !keep {
        sh("dpkg", &["--purge", "sonic-probe"], &[])?;
    }
    checks
}

/// A busy node as sonic-probe ships: the daemon watching the whole host,
/// the noise mix of tests/workloads/noise_mix.py running (shell loops,
/// coreutils, Python start-ups, getent, git, a monitoring agent, a periodic
/// job, log rotation), and a faulty stand-in of the Sonic service handling
/// its requests; then the findings table.
fn demo() -> Result<()> {
    setup(false)?;
    sh("cargo", &["build", "--release", "-p", "sonic-probe"], &[])?;
    if !is_root() {
        bail!("sonic-probe loads BPF programs: run `cargo xtask demo` as root");
    }
    let bin = root().join("target/release/sonic-probe");
    let sim = root().join("tests/workloads/sonic_sim.py");
    let noise_mix = root().join("tests/workloads/noise_mix.py");
    let dir = std::env::temp_dir().join("sonic-probe-demo");

    eprintln!("\n== sonic-probe run: watching the whole host, as shipped");
    let mut daemon = Command::new(&bin)
        .args(["run", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start sonic-probe")?;
    let log = BufReader::new(daemon.stderr.take().expect("piped"));
    let mut url = None;
    for line in log.lines() {
        let line = line?;
        eprintln!("   {line}");
        if let Some(rest) = line.split("serving http://").nth(1) {
            url = rest.split('/').next().map(|a| format!("http://{a}"));
            break;
        }
    }
    let stop_daemon = |daemon: &mut std::process::Child| {
        let _ = Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status();
        let _ = daemon.wait();
    };
    let Some(url) = url else {
        stop_daemon(&mut daemon);
        bail!("sonic-probe did not get ready");
    };

    eprintln!(
        "== a busy node: shell loops, coreutils, Python start-ups, getent, git, a monitoring agent,\n   \
         a periodic job, log rotation (tests/workloads/noise_mix.py --load 1)"
    );
    let mut noise = Command::new("python3")
        .arg(&noise_mix)
        .args(["--load", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the noise mix")?;
    let mut line = String::new();
    BufReader::new(noise.stdout.take().expect("piped")).read_line(&mut line)?;
    let stop_noise = |noise: &mut std::process::Child| {
        let _ = Command::new("kill").args(["-TERM", &noise.id().to_string()]).status();
        let _ = noise.wait();
    };

    eprintln!("== a faulty stand-in of the Sonic service starts, then handles 5 requests (about 10 s)");
    let mut service = Command::new("python3")
        .arg(&sim)
        .args(["faulty", "--requests", "5", "--stall", "1.5", "--wait-go", "--dir"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start python3")?;
    let mut out = BufReader::new(service.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        stop_noise(&mut noise);
        stop_daemon(&mut daemon);
        bail!("the workload did not start: {line:?}");
    }
    eprintln!("   (pid {})", service.id());
    service.stdin.take().expect("piped").write_all(b"g")?;
    service.wait()?;
    std::thread::sleep(Duration::from_millis(1500));

    eprintln!("== sonic-probe findings --url {url}\n");
    let status = Command::new(&bin).args(["findings", "--url", &url]).status()?;
    let (failed, names) = failed_calls(&url).unwrap_or_default();
    eprintln!(
        "\nMeanwhile {failed} calls failed in {names} process names (sonic_probe_syscall_errors_total, futex\n\
         aside): the node's tools looking up message catalogs and config files, probing search paths,\n\
         closing descriptors that were never open. Only what recurs within a process is a finding\n\
         (docs/metrics.md, \"What is not a finding\"; `sonic-probe run --findings-verbose` lists it all).\n\
         As JSON: curl {url}/findings; metrics: curl {url}/metrics"
    );
    stop_noise(&mut noise);
    stop_daemon(&mut daemon);
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        bail!("sonic-probe findings failed");
    }
    Ok(())
}

/// Failed calls (futex aside) and the process names they failed in, from
/// the daemon's /metrics.
fn failed_calls(url: &str) -> Result<(u64, usize)> {
    use std::io::Read;
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    let mut total = 0.0;
    let mut names = std::collections::BTreeSet::new();
    for line in body.lines().filter(|l| l.starts_with("sonic_probe_syscall_errors_total{")) {
        if line.contains("syscall=\"futex\"") {
            continue;
        }
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        total += value;
        if let Some(c) = line.split("comm=\"").nth(1).and_then(|r| r.split('"').next()) {
            names.insert(c.to_string());
        }
    }
    Ok((total as u64, names.len()))
}

fn bench_task(args: &[String]) -> Result<()> {
    let all = bench::Tracer::ALL;
    // --only none,floor,run: a subset (for quick comparisons while optimizing).
    let tracers: Vec<bench::Tracer> =
        match args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)) {
            Some(list) => {
                let names: Vec<&str> = list.split(',').collect();
                if let Some(bad) = names.iter().find(|n| !all.iter().any(|t| t.short() == **n)) {
                    bail!(
                        "bench --only: unknown tracer {bad:?} (known: {})",
                        all.iter().map(|t| t.short()).collect::<Vec<_>>().join(",")
                    );
                }
                all.iter().copied().filter(|t| names.contains(&t.short())).collect()
            }
            // The baseline only when there is one to run.
            None => all
                .iter()
                .copied()
                .filter(|t| *t != bench::Tracer::SonicRunBaseline || bench::baseline_binary().is_some())
                .collect(),
        };
    setup(true)?;
    if !is_root() {
        bail!("the benchmark attaches BPF programs and tracers: run `cargo xtask bench` as root");
    }
    let smoke = args.iter().any(|a| a == "--smoke");
    let rounds = match args.iter().position(|a| a == "--rounds") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<usize>().ok()) {
            Some(n) if n > 0 => n,
            _ => bail!("bench --rounds: expected a positive number of rounds"),
        },
        Option::None => {
            if smoke {
                1
            } else {
                7
            }
        }
    };
    sh("cargo", &["build", "--release", "-p", "sonic-probe", "-p", "sonic-probe-bench", "--bins"], &[])?;
    for tool in ["bpftrace", "perf"] {
        if Command::new(tool).arg("--version").output().is_err() {
            sh("apt-get", &["install", "-y", "-q", if tool == "perf" { "linux-perf" } else { tool }], &[])?;
        }
    }
    // perf trace needs tracefs.
    if !Path::new("/sys/kernel/tracing/events").exists() {
        let _ = Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status();
    }
    let options = bench::Options { smoke, rounds, cpu_only: args.iter().any(|a| a == "--cpu-only"), tracers };
    bench::bench(&root(), &options)
}
