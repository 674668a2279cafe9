//! Shared pieces of sonic-probe's integration tests: start the real daemon,
//! scrape and parse its metrics, drive workloads, run strace as an oracle.
//!
//! Tests load real BPF programs, so they need root (CAP_BPF + CAP_PERFMON).
//! Without it they print why and skip, unless SONIC_PROBE_REQUIRE_PRIVILEGED
//! is set (CI and `cargo xtask test` set it): then a missing privilege fails.

pub mod slow_fs;
pub mod tls;
pub mod workload;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

/// True if the test may load BPF programs; otherwise says why (or fails
/// when SONIC_PROBE_REQUIRE_PRIVILEGED is set).
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os("SONIC_PROBE_REQUIRE_PRIVILEGED").is_some() {
        panic!("{test}: needs root to load BPF programs, and SONIC_PROBE_REQUIRE_PRIVILEGED is set");
    }
    eprintln!("skipped {test}: needs root (CAP_BPF + CAP_PERFMON) to load BPF programs");
    false
}

/// The BPF programs `sonic-probe run` attaches: sys_enter, sys_exit,
/// sched_process_fork, sched_process_exec, sched_process_exit,
/// task_rename, and (--thread-time on, the default) sched_switch,
/// sched_wakeup and sched_wakeup_new.
pub const PROGRAMS_ATTACHED: f64 = 9.0;

/// Put in the message of an assertion on wall-clock time (a bucket, a
/// measured wait), and only there: `cargo xtask vmtest` retries a test of
/// its RETRY_ONCE list once when its failure says this (a guest vCPU the
/// host leaves unscheduled stretches time under TCG), never a failed count.
pub const TIMING: &str = "SONIC-TIMING";

/// The running kernel's line, "major.minor" (as uname -r starts), for the
/// tests whose expectations are written down per kernel.
pub fn kernel_line() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("/proc/sys/kernel/osrelease");
    release.trim().split('.').take(2).collect::<Vec<_>>().join(".")
}

/// For a kernel a test has no written-down expectations for: fails under
/// SONIC_PROBE_REQUIRE_PRIVILEGED (CI runs only the kernels in the tables),
/// else says so; the test then skips.
pub fn unknown_kernel(test: &str, line: &str) {
    let msg = format!("{test}: kernel {line} is not in the test's table: add what it has");
    if std::env::var_os("SONIC_PROBE_REQUIRE_PRIVILEGED").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipped {msg}");
}

/// target/<profile>/ of the running test binary.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(|d| d.parent()).expect("target dir").to_path_buf()
}

/// libcudart.so.12 of NVIDIA's CUDA runtime package on PyPI, pinned
/// (tests/fetch_cuda_runtime.py, which the benchmark uses too), fetched
/// once with pip into target/cuda-runtime/ (the wheel unpacked as a
/// virtualenv's site-packages would hold it: nvidia/cuda_runtime/lib/).
/// The real library: without a driver each call returns an error at once,
/// through its real entry points.
pub fn cuda_runtime() -> PathBuf {
    let dir = target_dir().parent().expect("target/").join("cuda-runtime");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fetch_cuda_runtime.py");
    let out = std::process::Command::new("/usr/bin/python3").arg(script).arg(&dir).output().expect("python3");
    assert!(out.status.success(), "fetch_cuda_runtime.py: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The sonic-probe binary (SONIC_PROBE_BIN, or the one next to the tests).
pub fn sonic_probe_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SONIC_PROBE_BIN") {
        return p.into();
    }
    let p = target_dir().join("sonic-probe");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build -p sonic-probe; cargo xtask test does)",
        p.display()
    );
    p
}

/// The Python stand-in for the Sonic service (tests/workloads/sonic_sim.py).
pub fn sonic_sim() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workloads/sonic_sim.py")
}

/// Builds the C workload tests/workloads/`source` into `out` with `flags`
/// (and -g): the stack tests build theirs with and without frame pointers.
pub fn build_c(source: &str, out: &std::path::Path, flags: &[&str]) {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workloads").join(source);
    let o = Command::new("cc").args(flags).arg("-g").arg("-o").arg(out).arg(&src).output().expect("cc");
    assert!(o.status.success(), "cc {flags:?} {source}: {}", String::from_utf8_lossy(&o.stderr));
}

/// The workload binary (cargo builds it with this package's tests).
pub fn workload_bin() -> PathBuf {
    target_dir().join("sp-workload")
}

/// The CUDA caller of the GPU tests (src/bin/sp-cuda.rs).
pub fn cuda_caller_bin() -> PathBuf {
    target_dir().join("sp-cuda")
}

/// The microbenchmark binary (bench/src/bin/sp-bench.rs: the bench crate's,
/// so built by `cargo build --workspace`, not with this package's tests).
pub fn bench_bin() -> PathBuf {
    let p = target_dir().join("sp-bench");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build -p sonic-probe-bench; cargo xtask test does)",
        p.display()
    );
    p
}

/// (on CPU, waiting on a run queue) of a thread, in seconds, from the
/// kernel's own accounting (/proc/PID/task/TID/schedstat): the oracle for
/// the scheduler programs' on_cpu and runqueue.
pub fn schedstat(pid: u32, tid: u32) -> (f64, f64) {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let f: Vec<f64> = text.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    assert!(f.len() >= 2, "{path}: {text:?}");
    (f[0] / 1e9, f[1] / 1e9)
}

/// The times the kernel has run thread `tid` on a CPU (the third field of
/// its schedstat): each is a switch to it.
pub fn timeslices(pid: u32, tid: u32) -> u64 {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{path}: {text:?}"))
}

/// Resident memory of a process, in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// Test cgroups, removed (children first) when dropped.
pub struct RemoveCgroups(pub Vec<PathBuf>);

impl Drop for RemoveCgroups {
    fn drop(&mut self) {
        for p in &self.0 {
            // A cgroup can only be removed once its processes are gone.
            for _ in 0..100 {
                if std::fs::remove_dir(p).is_ok() || !p.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// Where cgroup2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
/// hybrid hosts).
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2").then(|| pre.split_whitespace().nth(4).unwrap().into())
    })
}

/// Fails unless `promtool check metrics` (of the prometheus package the
/// test command installs) finds nothing at all to say about a scrape.
pub fn assert_promtool_accepts(scrape: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child.stdin.take().expect("piped stdin").write_all(scrape.as_bytes()).expect("write to promtool");
    let out = child.wait_with_output().expect("promtool ran");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}");
}

/// A name unique to this test run (for comm labels), at most 15 bytes.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let s = format!("{prefix}{}{n}", std::process::id() % 10000);
    s[..s.len().min(15)].to_string()
}

/// A running `sonic-probe run`.
pub struct Daemon {
    child: Option<Child>,
    pub addr: SocketAddr,
    log: mpsc::Receiver<String>,
    pub log_lines: Vec<String>,
}

impl Daemon {
    /// Starts `sonic-probe run ARGS --listen 127.0.0.1:0` (a free port; ARGS
    /// may give their own `--listen`) and waits for its ready line.
    pub fn start(args: &[&str]) -> Daemon {
        Self::start_with(args, &[])
    }

    /// Like [`Daemon::start`], with environment variables.
    pub fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Daemon {
        Self::start_program(&sonic_probe_bin(), args, envs)
    }

    /// Like [`Daemon::start_with`], running `program` (e.g. a link to the
    /// binary, for a process name of its own). ARGS with a `--listen` of
    /// their own keep it.
    pub fn start_program(program: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Daemon {
        let listen: &[&str] = if args.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
        let mut child = Command::new(program)
            .arg("run")
            .args(args)
            .args(listen)
            .envs(envs.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sonic-probe");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut log_lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains(" ready in ");
                    log_lines.push(line.clone());
                    if ready {
                        // serving http://ADDR/metrics, or https:// with TLS.
                        let addr = line
                            .split("://")
                            .nth(1)
                            .and_then(|s| s.split('/').next())
                            .and_then(|s| s.parse().ok())
                            .expect("address in the ready line");
                        return Daemon { child: Some(child), addr, log: rx, log_lines };
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!("sonic-probe did not get ready ({status:?}); log:\n{}", log_lines.join("\n"));
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// GET a path; (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_request(self.addr, "GET", path)
    }

    /// GET /findings, parsed.
    pub fn findings(&self) -> Vec<serde_json::Value> {
        let (status, body) = self.get("/findings");
        assert_eq!(status, 200, "GET /findings: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("bad findings JSON ({e}): {body}"))
    }

    /// GET /findings until `done` holds (events reach the daemon within a
    /// poll interval, 20 ms), or 10 s.
    pub fn findings_when(&self, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let f = self.findings();
            if done(&f) || Instant::now() > deadline {
                return f;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Scrapes /metrics.
    pub fn metrics(&self) -> Metrics {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        Metrics::parse(&body)
    }

    /// Log lines printed so far.
    pub fn log(&mut self) -> &[String] {
        while let Ok(l) = self.log.try_recv() {
            self.log_lines.push(l);
        }
        &self.log_lines
    }

    /// Sends `signal` and waits for the exit status.
    pub fn stop_with(mut self, signal: i32) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().expect("wait for sonic-probe");
        while let Ok(l) = self.log.recv_timeout(Duration::from_millis(200)) {
            self.log_lines.push(l);
        }
        status
    }

    /// Stops reading the daemon's log: at its next line the reader lets go
    /// of the pipe, and every later write to stderr fails (EPIPE), as for a
    /// daemon whose log reader went away.
    pub fn close_log(&mut self) {
        self.log = mpsc::channel().1;
    }

    /// Sends a signal and returns at once.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// Waits until a log line contains `needle` (up to 10 s).
    pub fn wait_for_log(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        if let Some(l) = self.log_lines.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        while Instant::now() < deadline {
            if let Ok(l) = self.log.recv_timeout(Duration::from_millis(100)) {
                self.log_lines.push(l.clone());
                if l.contains(needle) {
                    return l;
                }
            }
        }
        panic!("no log line with {needle:?}:\n{}", self.log_lines.join("\n"));
    }

    /// SIGTERM, and the exit status.
    pub fn stop(self) -> ExitStatus {
        self.stop_with(libc::SIGTERM)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

/// A minimal HTTP/1.0 client: (status, body).
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read response");
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// One sample of the Prometheus text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub samples: Vec<Sample>,
    pub text: String,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| parse_sample(l).unwrap_or_else(|| panic!("bad sample line: {l}")))
            .collect();
        Metrics { samples, text: text.to_string() }
    }

    /// Samples of `name` whose labels include all of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// Sum of the matching samples (0 if none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The one matching sample's value, if exactly one matches.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let v: Vec<_> = self.matching(name, labels).collect();
        (v.len() == 1).then(|| v[0].value)
    }

    /// Exact call count of a syscall for a comm.
    pub fn calls(&self, syscall: &str, comm: &str) -> u64 {
        self.sum("sonic_probe_syscall_duration_seconds_count", &[("syscall", syscall), ("comm", comm)]) as u64
    }

    pub fn errors(&self, syscall: &str, comm: &str, errno: &str) -> u64 {
        self.sum(
            "sonic_probe_syscall_errors_total",
            &[("syscall", syscall), ("comm", comm), ("errno", errno)],
        ) as u64
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match head.split_once('{') {
        None => (head.to_string(), BTreeMap::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}')?;
            (name.to_string(), parse_labels(body)?)
        }
    };
    Some(Sample { name, labels, value })
}

fn parse_labels(body: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut val = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => val.push('\n'),
                    c => val.push(c),
                },
                '"' => break,
                c => val.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), val);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    Some(out)
}

/// The background of a busy GPU node (tests/workloads/noise_mix.py): shell
/// loops, coreutils, Python start-ups, getent, git, a monitoring agent, a
/// periodic job, log rotation. Stopped, with everything it started, when
/// dropped.
pub struct NoiseMix {
    child: Child,
    /// Every process of the mix has a name starting with this.
    pub prefix: String,
}

impl NoiseMix {
    /// Starts the mix at `load` times its default rates, its tools named
    /// `PREFIX...`, and waits until every part runs.
    pub fn start(load: f64, prefix: &str) -> NoiseMix {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workloads/noise_mix.py");
        let mut child = Command::new("/usr/bin/python3")
            .arg(script)
            .args(["--load", &load.to_string(), "--comm-prefix", prefix])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the noise mix");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready", "the noise mix did not start");
        NoiseMix { child, prefix: prefix.to_string() }
    }

    /// Whether a finding's process belongs to the mix.
    pub fn owns(&self, finding: &serde_json::Value) -> bool {
        finding["comm"].as_str().is_some_and(|c| c.starts_with(&self.prefix))
    }
}

impl Drop for NoiseMix {
    fn drop(&mut self) {
        // SAFETY: signalling our own child; it stops its process group.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A running workload, blocked until [`Workload::go`].
pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Kept open: a workload may write after "ready".
    stdout: BufReader<std::process::ChildStdout>,
}

impl Workload {
    /// Starts `sp-workload [--name NAME] ARGS` and waits until it is
    /// blocked in its go read.
    pub fn start(name: Option<&str>, args: &[&str]) -> Workload {
        Self::start_command(Command::new(workload_bin()), name, args)
    }

    /// Like [`Workload::start`], from a prepared command (e.g. run via a
    /// symlink, or moved into a cgroup).
    pub fn start_command(mut cmd: Command, name: Option<&str>, args: &[&str]) -> Workload {
        if let Some(n) = name {
            cmd.args(["--name", n]);
        }
        let mut child =
            cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start sp-workload");
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        stdout.read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready", "the workload did not start");
        let stdin = child.stdin.take();
        let w = Workload { child, stdin, stdout };
        w.wait_blocked_in_read();
        w
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the main thread sits in read(2) (syscall 0): blocked in
    /// its next go read, its time until then accounted.
    pub fn wait_blocked_in_read(&self) {
        let path = format!("/proc/{}/syscall", self.pid());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::fs::read_to_string(&path).is_ok_and(|s| s.starts_with("0 ")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("sp-workload {} never blocked in read", self.pid());
    }

    /// Lets a workload that pauses half-way (mode move) run to its pause:
    /// sends a go byte, reads its "paused" line and waits until it is
    /// blocked in its next go read.
    pub fn go_to_pause(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"g").and_then(|_| stdin.flush()).expect("go");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("paused line");
        assert_eq!(line.trim(), "paused", "the workload did not pause");
        self.wait_blocked_in_read();
    }

    /// Sends one go byte and returns at once (the workload runs on).
    pub fn signal(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"g").and_then(|_| stdin.flush()).expect("go");
    }

    /// Lets it run until it prints the line `last`: the lines it printed
    /// before it (it goes on running).
    pub fn go_until(&mut self, last: &str) -> Vec<String> {
        self.signal();
        self.wait_for_line(last)
    }

    /// Reads what it prints until the line `last` (after a
    /// [`Workload::signal`]): the lines before it.
    pub fn wait_for_line(&mut self, last: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("a line of the workload");
            assert!(n > 0, "the workload ended before printing {last:?}: {lines:?}");
            if line.trim() == last {
                return lines;
            }
            lines.push(line.trim().to_string());
        }
    }

    /// Lets it run, and waits for it to finish.
    pub fn go(self) -> ExitStatus {
        self.go_output().0
    }

    /// Like [`Workload::go`], with what it printed after "ready".
    pub fn go_output(mut self) -> (ExitStatus, String) {
        let mut stdin = self.stdin.take().expect("stdin");
        stdin.write_all(b"g").expect("go");
        drop(stdin);
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        (self.child.wait().expect("wait for the workload"), rest)
    }

    /// Its process name now.
    pub fn comm(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/comm", self.pid()))
            .unwrap_or_default()
            .trim_end()
            .to_string()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Per-syscall (calls, errors) from an `strace -c` summary file.
pub fn parse_strace_summary(text: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors], syscall
        if cols.len() < 5 || cols[0].parse::<f64>().is_err() || cols.last() == Some(&"total") {
            continue;
        }
        let name = cols[cols.len() - 1].to_string();
        let calls: u64 = match cols[3].parse() {
            Ok(c) => c,
            Err(_) => continue,
        };
        let errors = if cols.len() == 6 { cols[4].parse().unwrap_or(0) } else { 0 };
        out.insert(name, (calls, errors));
    }
    out
}

/// The running kernel's (major, minor) release, from uname.
pub fn kernel_version() -> (u32, u32) {
    let release = nix::sys::utsname::uname().expect("uname").release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The kernel release that brought a futex operation of `sp-workload
/// stall` (the others are older than any kernel we support).
pub fn futex_op_since(op: &str) -> (u32, u32) {
    match op {
        "lock_pi2" => (5, 14),
        "waitv" => (5, 16),
        _ => (0, 0),
    }
}

/// Whether this kernel has a futex operation of `sp-workload stall`:
/// FUTEX_LOCK_PI2 came in 5.14 and futex_waitv in 5.16; older kernels
/// answer ENOSYS, and a test of that operation has nothing to watch.
pub fn futex_op_supported(op: &str) -> bool {
    const FUTEX_LOCK_PI2: libc::c_int = 13;
    const SYS_FUTEX_WAITV: libc::c_long = 449;
    let word = std::sync::atomic::AtomicU32::new(0);
    // SAFETY: a futex word of our own; LOCK_PI2 on a free word takes it at
    // once (and UNLOCK_PI gives it back); futex_waitv of no words fails
    // with EINVAL where it exists.
    let r = unsafe {
        match op {
            "lock_pi2" => {
                let r = libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    FUTEX_LOCK_PI2 | libc::FUTEX_PRIVATE_FLAG,
                    0,
                    std::ptr::null::<libc::timespec>(),
                );
                if r == 0 {
                    libc::syscall(
                        libc::SYS_futex,
                        word.as_ptr(),
                        libc::FUTEX_UNLOCK_PI | libc::FUTEX_PRIVATE_FLAG,
                    );
                }
                r
            }
            "waitv" => {
                libc::syscall(SYS_FUTEX_WAITV, std::ptr::null::<u8>(), 0, 0, std::ptr::null::<u8>(), 0)
            }
            _ => return true,
        }
    };
    !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_text() {
        let m = Metrics::parse(
            "# HELP x y\n# TYPE x counter\nx 3\n\
             sonic_probe_syscall_errors_total{syscall=\"openat\",comm=\"a \\\"b\\\"\",errno=\"ENOENT\"} 2\n\
             h_bucket{le=\"+Inf\"} 7\n",
        );
        assert_eq!(m.get("x", &[]), Some(3.0));
        assert_eq!(m.errors("openat", "a \"b\"", "ENOENT"), 2);
        assert_eq!(m.get("h_bucket", &[("le", "+Inf")]), Some(7.0));
    }

    #[test]
    fn parses_strace_summaries() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 52.07    0.001043           1      1005           read
 20.00    0.000400          44         9         2 openat
  3.00    0.000030           3        10           mmap
------ ----------- ----------- --------- --------- ----------------
100.00    0.002003           1      1024         2 total
";
        let s = parse_strace_summary(text);
        assert_eq!(s["read"], (1005, 0));
        assert_eq!(s["openat"], (9, 2));
        assert_eq!(s["mmap"], (10, 0));
        assert!(!s.contains_key("total"));
    }
}
