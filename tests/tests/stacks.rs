//! Stall stack captures end to end: the daemon sees a request
//! thread's futex wait in the kernel's futex_waiting map while it lasts,
//! reads the stalled process's stacks, and the futex_stall finding carries
//! them: a Python stand-in whose main thread blocks in `infer()` on the
//! model lock `load_weights()` holds, and a C program blocked in
//! `wait_for_the_model_lock()` (frame pointers). Also: captures off, the
//! per-process rate limit, and a process that exits mid-wait.
//!
//! The workloads (tests/workloads/stand_in_lock.py, lock_holder.c) take
//! the hold times as an argument and start on SIGUSR1, so that the wait
//! starts after the daemon is attached.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sonic_probe_tests::{privileged, sonic_probe_bin, Daemon};

fn workloads() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workloads")
}

/// A workload started with its hold times, waiting for SIGUSR1 to stall.
struct Stalling {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Stalling {
    fn start(mut cmd: Command) -> Stalling {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the workload");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready", "{cmd:?} did not start");
        Stalling { child, out }
    }

    fn python(holds: &str) -> Stalling {
        Stalling::start(Stalling::python_command(holds))
    }

    fn python_command(holds: &str) -> Command {
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(workloads().join("stand_in_lock.py")).arg(holds);
        cmd
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets it stall (SIGUSR1).
    fn go(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGUSR1) };
    }

    /// Waits for its "done" line (every round over).
    fn done(mut self) {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("done line");
        assert_eq!(line.trim(), "done");
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line of `needle` in `infer()`'s body of the stand-in (1-based).
fn line_of(file: &str, after: &str, needle: &str) -> u64 {
    let text = std::fs::read_to_string(workloads().join(file)).unwrap();
    let start = text.lines().position(|l| l.contains(after)).expect("function in the workload");
    let i = text.lines().skip(start).position(|l| l.contains(needle)).expect("line in the function");
    (start + i + 1) as u64
}

/// The lines of a C workload's function, from its declaration to its
/// closing brace.
fn body_of(file: &str, decl: &str) -> std::ops::RangeInclusive<u64> {
    let text = std::fs::read_to_string(workloads().join(file)).unwrap();
    let start = line_of(file, decl, decl) as usize;
    let len = text.lines().skip(start).position(|l| l == "}").expect("the function's end") + 1;
    start as u64..=(start + len) as u64
}

fn stall_of(findings: &[Value], pid: u32) -> Option<Value> {
    findings.iter().find(|f| f["kind"] == "futex_stall" && f["pid"] == pid).cloned()
}

/// The futex_stall finding of `pid` once its `count` stalls are in.
fn wait_stall(d: &Daemon, pid: u32, count: u64) -> Value {
    let f = d.findings_when(|f| stall_of(f, pid).is_some_and(|s| s["count"].as_u64() >= Some(count)));
    stall_of(&f, pid).unwrap_or_else(|| panic!("no futex_stall finding of {pid}: {f:#?}"))
}

fn functions(stack: &Value) -> Vec<String> {
    stack.as_array().map_or_else(Vec::new, |a| {
        a.iter().map(|f| f["function"].as_str().unwrap_or("").to_string()).collect()
    })
}

/// Captures with `result` so far; every result's series is exported from
/// the start (0 until one happens): a missing one fails.
fn captures(d: &Daemon, result: &str) -> f64 {
    let m = d.metrics();
    m.get("sonic_probe_stack_captures_total", &[("result", result)])
        .unwrap_or_else(|| panic!("no sonic_probe_stack_captures_total{{result={result:?}}}:\n{}", m.text))
}

fn total_captures(d: &Daemon) -> f64 {
    ["ok", "partial", "no_python", "gone", "unreadable", "rate_limited", "error"]
        .iter()
        .map(|r| captures(d, r))
        .sum()
}

/// `sonic-probe findings` (the table), with extra arguments.
fn table(d: &Daemon, extra: &[&str]) -> String {
    let o = Command::new(sonic_probe_bin())
        .args(["findings", "--url", &format!("http://{}", d.addr)])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_python_stall_names_the_waiting_and_the_holding_function() {
    if !privileged("a_python_stall_names_the_waiting_and_the_holding_function") {
        return;
    }
    let w = Stalling::python("1.5");
    let pid = w.pid().to_string();
    let d = Daemon::start(&["--pid", &pid, "--stall-threshold", "300ms"]);
    let rss_before = sonic_probe_tests::rss_bytes(d.pid());
    w.go();
    let pid = w.pid();
    let s = wait_stall(&d, pid, 1);
    w.done();
    // What a capture reads (the interpreter's symbols) is handed back after
    // it (malloc_trim): the daemon's memory stays where it was.
    let rss_after = sonic_probe_tests::rss_bytes(d.pid());
    assert!(
        rss_after <= rss_before + (8 << 20),
        "daemon RSS {} KiB before the capture, {} KiB after",
        rss_before / 1024,
        rss_after / 1024
    );
    let with_line = line_of("stand_in_lock.py", "def infer", "with model_lock:");
    let stack = s["stack"].as_array().unwrap_or_else(|| panic!("no stack: {s:#}"));
    let infer = stack.iter().find(|f| f["function"] == "infer").unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(infer["kind"], "python", "{s:#}");
    assert!(infer["file"].as_str().unwrap_or("").ends_with("stand_in_lock.py"), "{s:#}");
    assert_eq!(infer["line"].as_u64(), Some(with_line), "the `with model_lock:` line: {s:#}");
    assert!(functions(&s["waker_stack"]).contains(&"load_weights".to_string()), "{s:#}");
    let note = s["stack_note"].as_str().unwrap_or("");
    assert!(note.contains("s into the wait"), "{s:#}");
    // One capture, counted once.
    let scrape = d.metrics().text;
    let counts: Vec<&str> =
        scrape.lines().filter(|l| l.starts_with("sonic_probe_stack_captures_total")).collect();
    assert_eq!(total_captures(&d), 1.0, "{counts:?}");
    assert_eq!(captures(&d, "ok") + captures(&d, "partial"), 1.0);
    // Its time is counted: more than nothing, less than the 1 s budget of
    // the Python reader plus the native unwind.
    let spent = d.metrics().get("sonic_probe_stack_capture_seconds_total", &[]).unwrap();
    assert!(spent > 0.0 && spent < 3.0, "capture took {spent} s");

    let t = table(&d, &[]);
    let row = t.lines().find(|l| l.starts_with("futex_stall") && l.contains(&format!(" {pid} "))).unwrap();
    assert!(row.contains(&format!("infer() at stand_in_lock.py:{with_line} waits")), "{t}");
    assert!(row.contains("load_weights() at stand_in_lock.py:") && row.ends_with(" holds"), "{t}");
    let full = table(&d, &["--stacks"]);
    assert!(full.contains("    waiting thread (tid ") && full.contains("    waker (tid "), "{full}");
    assert!(full.contains("py     infer  ") && full.contains("stand_in_lock.py:"), "{full}");
}

#[test]
fn a_python_holder_in_c_code_is_named_by_its_c_function() {
    if !privileged("a_python_holder_in_c_code_is_named_by_its_c_function") {
        return;
    }
    // The loader holds the lock in a C library's loop it called through
    // ctypes (-O2, no frame pointers): a Python process whose holder runs
    // native code. Its stack is a sample: the C function, then the Python
    // frames that called it.
    let dir = std::env::temp_dir().join(format!("sp-c-hold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libhold.so");
    sonic_probe_tests::build_c(
        "c_extension_hold.c",
        &lib,
        &["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"],
    );
    let mut cmd = Stalling::python_command("1.5");
    cmd.env("STAND_IN_HOLD_IN_C", &lib);
    let w = Stalling::start(cmd);
    let pid = w.pid().to_string();
    let d = Daemon::start(&["--pid", &pid, "--stall-threshold", "300ms"]);
    w.go();
    let pid = w.pid();
    let s = wait_stall(&d, pid, 1);
    w.done();
    let waker = s["waker_stack"].as_array().unwrap_or_else(|| panic!("no waker stack: {s:#}"));
    // A sample of a running loop: any line of the function.
    let body = body_of("c_extension_hold.c", "void hold_in_c");
    let c = waker.iter().position(|f| f["function"] == "hold_in_c").unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(waker[c]["kind"], "native", "{s:#}");
    assert!(waker[c]["file"].as_str().unwrap_or("").ends_with("c_extension_hold.c"), "{s:#}");
    let hold_line = waker[c]["line"].as_u64().unwrap_or(0);
    assert!(body.contains(&hold_line), "line {hold_line} is not in hold_in_c, {body:?}: {s:#}");
    let py = waker.iter().position(|f| f["function"] == "load_weights").unwrap_or_else(|| panic!("{s:#}"));
    assert!(c < py && waker[py]["kind"] == "python", "the C frame is inside the Python one: {s:#}");
    let note = s["stack_note"].as_str().unwrap_or("");
    assert!(note.contains("was running: its stack is a sample of that instant"), "{s:#}");
    let t = table(&d, &[]);
    let row = t.lines().find(|l| l.starts_with("futex_stall") && l.contains(&format!(" {pid} "))).unwrap();
    assert!(row.contains(&format!("hold_in_c() at c_extension_hold.c:{hold_line} holds")), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_native_stall_names_the_c_function() {
    if !privileged("a_native_stall_names_the_c_function") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sp-stacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = build_lock_holder(&dir, "lock_holder", &["-O1", "-fno-omit-frame-pointer"]);
    let mut cmd = Command::new(&bin);
    cmd.arg("1.5");
    let w = Stalling::start(cmd);
    let pid = w.pid().to_string();
    let d = Daemon::start(&["--pid", &pid, "--stall-threshold", "300ms"]);
    w.go();
    let pid = w.pid();
    let s = wait_stall(&d, pid, 1);
    w.done();
    let stack = s["stack"].as_array().unwrap_or_else(|| panic!("no stack: {s:#}"));
    let f =
        stack.iter().find(|f| f["function"] == "wait_for_the_model_lock").unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(f["kind"], "native", "{s:#}");
    assert_eq!(captures(&d, "no_python"), 1.0, "a C program: native stack only");
    let note = s["stack_note"].as_str().unwrap_or("");
    assert!(note.contains("python: no_python"), "{s:#}");
    let t = table(&d, &[]);
    assert!(t.contains("wait_for_the_model_lock() "), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn captures_off_leave_findings_as_they_were() {
    if !privileged("captures_off_leave_findings_as_they_were") {
        return;
    }
    let w = Stalling::python("1");
    let pid = w.pid().to_string();
    let d = Daemon::start(&["--pid", &pid, "--stall-threshold", "300ms", "--stack-captures", "off"]);
    w.go();
    let pid = w.pid();
    let s = wait_stall(&d, pid, 1);
    w.done();
    for key in ["stack", "waker_stack", "stack_note"] {
        assert!(s.get(key).is_none(), "{key} with captures off: {s:#}");
    }
    assert_eq!(total_captures(&d), 0.0);
}

#[test]
fn a_second_stall_within_the_interval_is_rate_limited() {
    if !privileged("a_second_stall_within_the_interval_is_rate_limited") {
        return;
    }
    // Two stalls of the main thread, the second longer: the finding shows
    // the longest's details, and the stacks of the first, which was
    // captured (the second's capture was refused), saying so.
    let w = Stalling::python("0.8,1.4");
    let pid = w.pid().to_string();
    let d = Daemon::start(&["--pid", &pid, "--stall-threshold", "300ms", "--stack-capture-interval", "10s"]);
    w.go();
    let pid = w.pid();
    let s = wait_stall(&d, pid, 2);
    w.done();
    assert_eq!(s["count"], 2, "{s:#}");
    let (wait, of) = (s["wait_seconds"].as_f64().unwrap(), s["stack_wait_seconds"].as_f64().unwrap_or(0.0));
    assert!((1.4..1.6).contains(&wait) && (0.8..1.0).contains(&of), "{s:#}");
    assert!(s["stack_note"].as_str().unwrap_or("").starts_with("captured"), "{s:#}");
    assert!(functions(&s["stack"]).contains(&"infer".to_string()), "{s:#}");
    assert!(functions(&s["waker_stack"]).contains(&"load_weights".to_string()), "{s:#}");
    assert_eq!(captures(&d, "rate_limited"), 1.0);
    assert_eq!(total_captures(&d), 2.0);
    let t = table(&d, &[]);
    assert!(t.contains(&format!("holds (stacks of a {of:.2} s stall)")), "{t}");
    assert!(!t.contains("no stack"), "{t}");
}

#[test]
fn a_process_that_exits_mid_wait_harms_nothing() {
    if !privileged("a_process_that_exits_mid_wait_harms_nothing") {
        return;
    }
    let mut pids = Vec::new();
    let mut ws = Vec::new();
    for _ in 0..3 {
        let w = Stalling::python("5");
        pids.push(w.pid().to_string());
        ws.push(w);
    }
    let mut args = vec!["--stall-threshold", "200ms"];
    for p in &pids {
        args.extend(["--pid", p.as_str()]);
    }
    let d = Daemon::start(&args);
    // Killed before, around and after the capture.
    for (w, after) in ws.into_iter().zip([100u64, 200, 600]) {
        w.go();
        std::thread::sleep(Duration::from_millis(after));
        drop(w);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert_eq!(d.get("/healthz").0, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing stalled to the end: no finding, and the daemon serves on.
    let f = d.findings();
    assert!(pids.iter().all(|p| stall_of(&f, p.parse().unwrap()).is_none()), "{f:#?}");
    // The one killed 600 ms into its wait was past the 200 ms threshold for
    // at least two of the capturer's 150 ms looks: a capture was attempted
    // (whatever its result, the process gone or not), and none more than
    // once per process.
    let attempted = total_captures(&d);
    assert!((1.0..=3.0).contains(&attempted), "{attempted} captures attempted");
    assert_eq!(
        d.metrics().get("sonic_probe_bpf_programs_attached", &[]),
        Some(sonic_probe_tests::PROGRAMS_ATTACHED)
    );
}

/// lock_holder built with `flags` into `dir`.
fn build_lock_holder(dir: &std::path::Path, name: &str, flags: &[&str]) -> PathBuf {
    let bin = dir.join(name);
    sonic_probe_tests::build_c("lock_holder.c", &bin, &[flags, &["-pthread"]].concat());
    bin
}

#[test]
fn a_native_holder_is_named_whatever_it_does() {
    if !privileged("a_native_holder_is_named_whatever_it_does") {
        return;
    }
    // The holder sleeps, reads a pipe nobody writes to, or computes while
    // the main thread waits for the lock; -O2, with frame pointers and
    // without. One more holds among 200 idle threads (half sleeping, half
    // in a condition wait, started before it: without the owner the mutex
    // names, the capture's budget would not reach it). Each holder thread
    // exits as soon as it unlocks, before the finding is made: its stack
    // is the one captured during the wait.
    let dir = std::env::temp_dir().join(format!("sp-holders-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let builds = [
        build_lock_holder(&dir, "holder_fp", &["-O2", "-fno-omit-frame-pointer"]),
        build_lock_holder(&dir, "holder_nofp", &["-O2", "-fomit-frame-pointer"]),
    ];
    // (build, mode, idle threads, holder's function, the line it waits at
    // (None: anywhere in the function), how the note says it was read)
    let line = |f: &str, needle: &str| Some(line_of("lock_holder.c", f, needle));
    let cases = [
        (
            0,
            "sleep",
            0,
            "hold_sleeping",
            line("void hold_sleeping", "nanosleep("),
            "was blocked in clock_nanosleep",
        ),
        (
            1,
            "sleep",
            0,
            "hold_sleeping",
            line("void hold_sleeping", "nanosleep("),
            "was blocked in clock_nanosleep",
        ),
        (0, "pipe", 0, "hold_reading", line("void hold_reading", "read(slow_pipe"), "was blocked in read"),
        (1, "pipe", 0, "hold_reading", line("void hold_reading", "read(slow_pipe"), "was blocked in read"),
        (0, "compute", 0, "hold_computing", None, "was running: its stack is a sample of that instant"),
        (1, "compute", 0, "hold_computing", None, "was running: its stack is a sample of that instant"),
        (
            0,
            "sleep",
            200,
            "hold_sleeping",
            line("void hold_sleeping", "nanosleep("),
            "was blocked in clock_nanosleep",
        ),
    ];
    let body = body_of("lock_holder.c", "void hold_computing");
    // Findings are per process name: each case runs under a name of its own.
    let ws: Vec<Stalling> = cases
        .iter()
        .enumerate()
        .map(|(i, (b, mode, idle, ..))| {
            let bin = dir.join(format!("holder{i}"));
            std::fs::copy(&builds[*b], &bin).unwrap();
            let mut cmd = Command::new(&bin);
            cmd.args(["2", mode, &idle.to_string()]);
            Stalling::start(cmd)
        })
        .collect();
    let pids: Vec<String> = ws.iter().map(|w| w.pid().to_string()).collect();
    let mut args = vec!["--stall-threshold", "300ms"];
    for p in &pids {
        args.extend(["--pid", p.as_str()]);
    }
    let d = Daemon::start(&args);
    for w in &ws {
        w.go();
    }
    let all = |f: &[Value]| ws.iter().all(|w| stall_of(f, w.pid()).is_some());
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut f = d.findings();
    while !all(&f) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        f = d.findings();
    }
    let t = table(&d, &[]);
    for (w, (b, mode, idle, function, line, how)) in ws.iter().zip(&cases) {
        let what = format!("{mode} holder of {} with {idle} idle threads", builds[*b].display());
        let s = stall_of(&f, w.pid()).unwrap_or_else(|| panic!("{what}: no stall: {f:#?}"));
        let stack = s["waker_stack"].as_array().unwrap_or_else(|| panic!("{what}: no waker stack: {s:#}"));
        let held =
            stack.iter().find(|fr| fr["function"] == *function).unwrap_or_else(|| panic!("{what}: {s:#}"));
        assert!(held["file"].as_str().unwrap_or("").ends_with("lock_holder.c"), "{what}: {s:#}");
        let at = held["line"].as_u64();
        match line {
            Some(l) => assert_eq!(at, Some(*l), "{what}: {s:#}"),
            None => {
                assert!(at.is_some_and(|a| body.contains(&a)), "{what}: line {at:?} not in {body:?}: {s:#}")
            }
        }
        let waker = s["waker_tid"].as_u64().unwrap();
        let note = s["stack_note"].as_str().unwrap_or("");
        assert!(note.contains(&format!("the waker (tid {waker}) {how}")), "{what}: {note}");
        assert!(
            !std::path::Path::new(&format!("/proc/{}/task/{waker}", w.pid())).exists(),
            "{what}: the holder thread exited after unlocking"
        );
        let row = t.lines().find(|l| l.starts_with("futex_stall") && l.contains(&format!(" {} ", w.pid())));
        let row = row.unwrap_or_else(|| panic!("{what}: no row: {t}"));
        assert!(row.contains("wait_for_the_model_lock() at lock_holder.c:"), "{what}: {row}");
        assert!(
            row.contains(&format!("{function}() at lock_holder.c:")) && row.ends_with(" holds"),
            "{what}: {row}"
        );
    }
    for w in ws {
        w.done();
    }
    // One capture a process; all seven together took well under their
    // budget (each: 16 native stacks at most, one 100 ms sample wait).
    assert_eq!(captures(&d, "no_python"), cases.len() as f64, "{}", d.metrics().text);
    let spent = d.metrics().get("sonic_probe_stack_capture_seconds_total", &[]).unwrap();
    assert!(spent < 7.0 * 0.5, "captures took {spent} s");
    eprintln!("seven captures took {spent:.3} s");
    let _ = std::fs::remove_dir_all(&dir);
}
