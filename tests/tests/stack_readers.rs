//! The stack readers against real stalled processes: a Python service
//! stand-in blocked on its model lock (every CPython 3.8-3.13; under
//! SONIC_PROBE_REQUIRE_PRIVILEGED a missing one fails the test) and a
//! C program blocked in pthread_mutex_lock, built with and without frame
//! pointers. The kernel side that will hand over registers is not here; a
//! ptrace interrupt stands in for it (bp), with sp and pc from
//! /proc/PID/task/TID/syscall.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use sonic_probe::stacks::{
    native::native_stack, python::python_stacks, CaptureError, Frame, FrameKind, Regs,
};
use sonic_probe_tests::privileged;

const SYS_READ: u64 = 0;
const SYS_NANOSLEEP: u64 = 35;
const SYS_FUTEX: u64 = 202;
const SYS_CLOCK_NANOSLEEP: u64 = 230;

fn workloads() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workloads")
}

/// A stalled process; killed when dropped.
struct Stalled(Child);

impl Stalled {
    /// Starts `cmd` and waits for its "ready" line.
    fn start(mut cmd: Command) -> Stalled {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the workload");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("ready line");
        let s = Stalled(child);
        assert_eq!(line.trim(), "ready", "{cmd:?} did not start");
        s
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// /proc/PID/task/TID/syscall of a blocked thread: (nr, sp, pc).
fn blocked_in(pid: u32, tid: u32) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 9 {
        return None; // "running", or "-1 sp pc" outside a system call
    }
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    Some((fields[0].parse().ok()?, hex(fields[7])?, hex(fields[8])?))
}

/// Waits until thread `tid` of `pid` blocks in system call `nr`.
fn wait_blocked(pid: u32, tid: u32, nrs: &[u64]) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some((nr, sp, pc)) = blocked_in(pid, tid) {
            if nrs.contains(&nr) {
                return (sp, pc);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("thread {tid} of {pid} never blocked in {nrs:?}");
}

fn tids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The registers the kernel saved at syscall entry: sp and pc from
/// /proc, bp through a ptrace interrupt (seize, interrupt, read, detach:
/// the thread goes back to its system call).
fn regs_of(pid: u32, tid: u32, nrs: &[u64]) -> Regs {
    use nix::{
        sys::{ptrace, wait::waitpid},
        unistd::Pid,
    };
    let (sp, ip) = wait_blocked(pid, tid, nrs);
    let t = Pid::from_raw(tid as i32);
    ptrace::seize(t, ptrace::Options::empty()).expect("PTRACE_SEIZE");
    ptrace::interrupt(t).expect("PTRACE_INTERRUPT");
    waitpid(t, Some(nix::sys::wait::WaitPidFlag::__WALL)).expect("waitpid");
    let regs = ptrace::getregs(t).expect("PTRACE_GETREGS");
    ptrace::detach(t, None).expect("PTRACE_DETACH");
    Regs { ip, sp, bp: regs.rbp }
}

fn show(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|f| {
            format!(
                "  {} ({}:{}) [{}]\n",
                f.function,
                f.file.as_deref().unwrap_or("?"),
                f.line.map_or("?".into(), |l| l.to_string()),
                f.module.as_deref().unwrap_or("?")
            )
        })
        .collect()
}

/// The minor version of a CPython 3 binary, from its name ("python3.11",
/// what /usr/bin/python3 links to).
fn minor_of(bin: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(bin).ok()?;
    real.file_name()?.to_str()?.strip_prefix("python3.")?.parse().ok()
}

/// /usr/bin/python3 and the pyenv CPythons 3.8-3.13 present (real
/// binaries, not shims), each with its minor version. pyenv is looked for
/// in PYENV_ROOT, $HOME/.pyenv and /root/.pyenv: where CI's HOME is not
/// root's, its versions are still found.
fn pythons() -> Vec<(PathBuf, u32)> {
    let mut found: Vec<(PathBuf, u32)> = Vec::new();
    let system = PathBuf::from("/usr/bin/python3");
    if let Some(minor) = minor_of(&system) {
        found.push((system, minor));
    }
    let mut roots: Vec<PathBuf> = std::env::var_os("PYENV_ROOT").map(PathBuf::from).into_iter().collect();
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(Path::new(&home).join(".pyenv"));
    }
    roots.push(PathBuf::from("/root/.pyenv"));
    let mut seen = Vec::new();
    for root in roots {
        let Ok(canonical) = std::fs::canonicalize(&root) else { continue };
        if seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical);
        let Ok(dir) = std::fs::read_dir(root.join("versions")) else { continue };
        let mut versions: Vec<String> = dir.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        versions.sort();
        for v in versions {
            let mut parts = v.split('.');
            let (Some("3"), Some(minor)) = (parts.next(), parts.next().and_then(|m| m.parse::<u32>().ok()))
            else {
                continue;
            };
            let bin = root.join("versions").join(&v).join(format!("bin/python3.{minor}"));
            if (8..=13).contains(&minor) && bin.exists() && !found.iter().any(|(b, _)| b == &bin) {
                found.push((bin, minor));
            }
        }
    }
    found
}

#[test]
fn python_frames_of_a_stalled_service() {
    if !privileged("python_frames_of_a_stalled_service") {
        return;
    }
    let script = workloads().join("stand_in_lock.py");
    let text = std::fs::read_to_string(&script).expect("script");
    let infer_def = text.lines().position(|l| l.starts_with("def infer():")).expect("def infer");
    let with_line =
        text.lines().skip(infer_def).position(|l| l.trim() == "with model_lock:").expect("with line")
            + infer_def
            + 1;
    let pythons = pythons();
    // The README promises 3.8-3.13: CI (SONIC_PROBE_REQUIRE_PRIVILEGED)
    // runs every one of them, or fails naming those it did not find.
    let missing: Vec<String> =
        (8..=13).filter(|m| !pythons.iter().any(|(_, minor)| minor == m)).map(|m| format!("3.{m}")).collect();
    if !missing.is_empty() {
        let msg = format!(
            "no CPython {} found (in /usr/bin, PYENV_ROOT, $HOME/.pyenv, /root/.pyenv)",
            missing.join(", ")
        );
        assert!(std::env::var_os("SONIC_PROBE_REQUIRE_PRIVILEGED").is_none(), "{msg}");
        eprintln!("python_frames_of_a_stalled_service: {msg}: not tested here");
    }
    let mut passed = Vec::new();
    for (python, _) in pythons {
        let mut cmd = Command::new(&python);
        cmd.arg(&script);
        let s = Stalled::start(cmd);
        let pid = s.pid();
        wait_blocked(pid, pid, &[SYS_FUTEX]);
        let started = Instant::now();
        let stacks = python_stacks(pid).unwrap_or_else(|e| panic!("{}: {e}", python.display()));
        let took = started.elapsed();
        let main =
            stacks.get(&pid).unwrap_or_else(|| panic!("{}: no main thread in {stacks:?}", python.display()));
        let infer = main
            .iter()
            .find(|f| f.function == "infer")
            .unwrap_or_else(|| panic!("{}: no infer in\n{}", python.display(), show(main)));
        assert_eq!(infer.kind, FrameKind::Python);
        assert!(infer.file.as_deref().is_some_and(|f| f.ends_with("stand_in_lock.py")), "{infer:?}");
        assert_eq!(infer.line, Some(with_line as u32), "{}: {infer:?}", python.display());
        assert_eq!(infer.module.as_deref(), Some("stand_in_lock"));
        assert_eq!(main.first().map(|f| f.function.as_str()), Some("infer"), "innermost first");
        assert!(
            stacks
                .iter()
                .any(|(&tid, frames)| tid != pid && frames.iter().any(|f| f.function == "load_weights")),
            "{}: no load_weights in {stacks:?}",
            python.display()
        );
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(!state.rsplit_once(')').unwrap().1.trim_start().starts_with('T'), "stopped: {state}");
        eprintln!("{}: ok in {took:?}", python.display());
        passed.push(python);
    }
    eprintln!("python stacks read from {passed:?}");
    assert!(!passed.is_empty());
}

fn build_lock_holder(dir: &Path, flag: &str) -> PathBuf {
    let out = dir.join(format!("lock_holder{flag}"));
    sonic_probe_tests::build_c("lock_holder.c", &out, &["-O1", flag, "-pthread"]);
    out
}

#[test]
fn native_frames_with_and_without_frame_pointers() {
    if !privileged("native_frames_with_and_without_frame_pointers") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sp-stack-readers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for flag in ["-fno-omit-frame-pointer", "-fomit-frame-pointer"] {
        let bin = build_lock_holder(&dir, flag);
        let s = Stalled::start(Command::new(&bin));
        let pid = s.pid();

        let regs = regs_of(pid, pid, &[SYS_FUTEX]);
        let main = native_stack(pid, pid, regs).unwrap_or_else(|e| panic!("{flag}: {e}"));
        let pos = |name: &str| main.iter().position(|f| f.function == name);
        let (Some(waiting), Some(outer)) = (pos("wait_for_the_model_lock"), pos("main")) else {
            panic!("{flag}: main thread\n{}", show(&main));
        };
        assert!(waiting < outer, "{flag}: innermost first\n{}", show(&main));
        let f = &main[waiting];
        assert!(
            f.file.as_deref().is_some_and(|p| p.ends_with("lock_holder.c")) && f.line.is_some(),
            "{flag}: {f:?}"
        );
        assert_eq!(f.module.as_deref(), bin.file_name().and_then(|n| n.to_str()));
        assert!(main.iter().all(|f| f.kind == FrameKind::Native));

        let holder = tids(pid)
            .into_iter()
            .find(|&t| t != pid && blocked_in(pid, t).is_some_and(|(nr, ..)| nr != SYS_READ))
            .expect("holder thread");
        let regs = regs_of(pid, holder, &[SYS_NANOSLEEP, SYS_CLOCK_NANOSLEEP]);
        let held = native_stack(pid, holder, regs).unwrap_or_else(|e| panic!("{flag}: {e}"));
        assert!(held.iter().any(|f| f.function == "hold_the_model_lock"), "{flag}: holder\n{}", show(&held));
        eprintln!("{flag}: main thread\n{}holder\n{}", show(&main), show(&held));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_say_why() {
    if !privileged("errors_say_why") {
        return;
    }
    let mut sleep = Command::new("sleep").arg("30").spawn().expect("sleep");
    std::thread::sleep(Duration::from_millis(100));
    let err = python_stacks(sleep.id()).expect_err("sleep is no Python");
    assert!(matches!(err, CaptureError::NoPython(_)), "{err:?}");
    assert_eq!(err.as_label(), "no_python");
    let _ = sleep.kill();
    let _ = sleep.wait();

    let mut gone = Command::new("true").spawn().expect("true");
    let pid = gone.id();
    gone.wait().unwrap();
    let err = python_stacks(pid).expect_err("gone");
    assert!(matches!(err, CaptureError::Gone(p) if p == pid), "{err:?}");
    assert_eq!(err.as_label(), "gone");
    let err = native_stack(pid, pid, Regs { ip: 0x1000, sp: 0x2000, bp: 0 }).expect_err("gone");
    assert!(matches!(err, CaptureError::Gone(p) if p == pid), "{err:?}");
}

/// The native side of a Python stall: the main thread's C stack runs from
/// the lock wait through the interpreter (no frame pointers in most Python
/// builds: .eh_frame) to main.
#[test]
fn native_frames_of_a_python_service() {
    if !privileged("native_frames_of_a_python_service") {
        return;
    }
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(workloads().join("stand_in_lock.py"));
    let s = Stalled::start(cmd);
    let pid = s.pid();
    let regs = regs_of(pid, pid, &[SYS_FUTEX]);
    let frames = native_stack(pid, pid, regs).expect("native stack");
    eprintln!("python3 main thread\n{}", show(&frames));
    assert!(frames.iter().any(|f| f.function.contains("acquire")), "{}", show(&frames));
    assert!(frames.iter().any(|f| f.function == "main" || f.function == "Py_BytesMain"), "{}", show(&frames));
}
