//! One boot: qemu (TCG) with a kernel and the initramfs, the serial console
//! streamed and saved to target/vmtest/serial-VERSION.log, /init's markers
//! read into an [`Outcome`], judged per kernel.

use std::{
    collections::BTreeSet,
    fs::File,
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::{dir, kernel::Kernel, path_str, Mode, ALLOWED_FLAKY};

/// Serial-console markers printed by /init (xtask/vm/init.sh).
const MARK_KERNEL: &str = "SONIC-VMTEST-KERNEL ";
/// Something missing in the guest (no /sys/kernel/btf/vmlinux).
const MARK_WARNING: &str = "SONIC-VMTEST-WARNING ";
/// A kernel message of level warning or worse logged while the tests ran.
const MARK_KERNEL_LOG: &str = "SONIC-VMTEST-KERNEL-LOG ";
/// A kernel WARNING, BUG, oops or call trace while the tests ran: a failure.
const MARK_KERNEL_BUG: &str = "SONIC-VMTEST-KERNEL-BUG ";
const MARK_TEST: &str = "SONIC-VMTEST-TEST ";
const MARK_DONE: &str = "SONIC-VMTEST-DONE ";
const MARK_RESULT: &str = "SONIC-VMTEST-RESULT ";
/// A test that hung and was killed (init.sh's TEST_TIMEOUT).
const MARK_KILLED: &str = "SONIC-VMTEST-TIMEOUT ";
/// The command's start, and its exit status.
const MARK_COMMAND: &str = "SONIC-VMTEST-COMMAND ";
const MARK_EXIT: &str = "SONIC-VMTEST-COMMAND-EXIT ";

/// Console lines of a kernel that has stopped making progress. After the
/// first, the guest gets [`LOCKUP_GRACE`] to print its backtraces (the
/// command line asks for every CPU's) and is then stopped: waiting for the
/// whole timeout would only add minutes to a failed run.
const LOCKUP_SIGNS: &[&str] = &[
    "BUG: soft lockup",
    "self-detected stall",
    "detected stalls on CPUs",
    "Kernel panic",
    "hung_task_timeout_secs",
];
const LOCKUP_GRACE: Duration = Duration::from_secs(60);
/// /init kills a test after 180 s (init.sh's TEST_TIMEOUT) and says so: in
/// the test plan, a console silent for longer belongs to a guest that no
/// longer runs. A user's command (`vmtest -- COMMAND`) may be silent for as
/// long as it likes, within the timeout.
const SILENCE_LIMIT: Duration = Duration::from_secs(300);
/// Lines kept from a lockup's report (its backtraces).
const LOCKUP_LINES: usize = 200;

/// What the guest said.
pub struct Outcome {
    log: PathBuf,
    kernel: Option<String>,
    warnings: Vec<String>,
    kernel_log: Vec<String>,
    kernel_bugs: Vec<String>,
    /// Some(0) for pass, Some(n) for n failed tests.
    failed: Option<u32>,
    /// (binary::test, "ok"/"ok-on-retry"/"FLAKY"/"FAILED"/..., how long it took).
    tests: Vec<(String, String, Duration)>,
    command_started: bool,
    command_exit: Option<i32>,
    timed_out: Option<Duration>,
    lockup: Option<Lockup>,
    /// The console was silent for longer than [`SILENCE_LIMIT`].
    silent: bool,
    qemu_status: Option<std::process::ExitStatus>,
}

/// The kernel stopped making progress.
struct Lockup {
    /// The test then running.
    during: String,
    /// The console line that said so, then those that followed (its
    /// backtraces).
    lines: Vec<String>,
}

/// How the console reaches the terminal while the tests run (a command's
/// output is printed as it comes, whatever this says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Echo {
    /// Every byte at once: one guest at a time.
    Raw,
    /// Whole lines, each after this prefix: guests booted side by side.
    Lines(String),
    /// Not at all.
    Off,
}

/// Boots the guest, streams its console (as `echo` says for the tests, the
/// command's output for a command) and saves it, and reads the markers.
pub fn boot(kernel: &Kernel, initramfs: &Path, timeout: Duration, mode: Mode, echo: Echo) -> Result<Outcome> {
    let log_path = dir().join(format!("serial-{}.log", kernel.spec.version));
    let mut log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let args: Vec<String> = [
        "-accel",
        // One host thread runs both vCPUs in turn. Multi-threaded TCG
        // (Debian 12's QEMU 7.2) can go on running a stale translation of
        // kernel text another vCPU has just patched: at every daemon start
        // and stop the kernel patches the sys_enter tracepoint's jump label
        // and static call in syscall_trace_enter (text_poke_bp), and 5.10's
        // guests locked up with both CPUs trapping forever on an int3 that
        // memory no longer held, 6.12's oopsed on one. Real CPUs serialize
        // after text_poke_bp's IPIs; under one thread nothing runs stale.
        "tcg,thread=single",
        "-cpu",
        // No CMPXCHG16B: Debian 12's QEMU 7.2 gets it wrong under TCG (the
        // flags after `cmpxchg16b %gs:(%rsi)`), and 6.12's SLUB fast path
        // double-faults on it in about half the boots. Without it the
        // kernels take their generic path; nothing of BPF depends on it.
        "max,cx16=off",
        "-smp",
        "2",
        "-m",
        "2G",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        path_str(&kernel.vmlinuz)?,
        "-initrd",
        path_str(initramfs)?,
        "-append",
        "console=ttyS0 panic=-1 softlockup_all_cpu_backtrace=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    eprintln!("\n== vmtest {}: {} ({})", kernel.spec.version, kernel.package, kernel.spec.release);
    eprintln!("+ qemu-system-x86_64 {}", args.join(" "));
    eprintln!("vmtest: booting (timeout {} s, log {})", timeout.as_secs(), log_path.display());
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run qemu-system-x86_64")?;
    let mut stdout = qemu.stdout.take().expect("piped");

    // The reader thread saves every line, echoes the console while the
    // tests run (every byte at once, or whole prefixed lines), and hands
    // over whole lines.
    let echo = if mode == Mode::Tests { echo } else { Echo::Off };
    let (tx, rx) = mpsc::channel::<(String, Instant)>();
    let reader = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        let mut line = Vec::new();
        let term = std::io::stdout();
        loop {
            let n = stdout.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if echo == Echo::Raw {
                let mut t = term.lock();
                t.write_all(&buf[..n])?;
                t.flush()?;
            }
            for &b in &buf[..n] {
                match b {
                    b'\r' => {}
                    b'\n' => {
                        line.push(b'\n');
                        log.write_all(&line)?;
                        if let Echo::Lines(prefix) = &echo {
                            let mut t = term.lock();
                            t.write_all(prefix.as_bytes())?;
                            t.write_all(&line)?;
                            t.flush()?;
                        }
                        line.pop();
                        let _ = tx.send((String::from_utf8_lossy(&line).into_owned(), Instant::now()));
                        line.clear();
                    }
                    _ => line.push(b),
                }
            }
        }
        log.write_all(&line)?;
        let _ = tx.send((String::from_utf8_lossy(&line).into_owned(), Instant::now()));
        Ok(())
    });

    let start = Instant::now();
    let deadline = start + timeout;
    let mut outcome = Outcome {
        log: log_path,
        kernel: None,
        warnings: Vec::new(),
        kernel_log: Vec::new(),
        kernel_bugs: Vec::new(),
        failed: None,
        tests: Vec::new(),
        command_started: false,
        command_exit: None,
        timed_out: None,
        lockup: None,
        silent: false,
        qemu_status: None,
    };
    let silence_limit = if mode == Mode::Tests { SILENCE_LIMIT } else { timeout };
    let mut deadline = deadline;
    // The test running: (binary::test, since, libtest named it).
    let mut running: Option<(String, Instant, bool)> = None;
    let mut killed = BTreeSet::new();
    let mut out = std::io::stdout();
    loop {
        let now = Instant::now();
        let wait = deadline.min(now + silence_limit).saturating_duration_since(now);
        let (line, at) = match rx.recv_timeout(wait) {
            Ok(got) => got,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if outcome.lockup.is_none() {
                    if Instant::now() >= deadline {
                        outcome.timed_out = Some(timeout);
                    } else {
                        outcome.silent = true;
                    }
                }
                let _ = qemu.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(lockup) = outcome.lockup.as_mut() {
            if lockup.lines.len() < LOCKUP_LINES {
                lockup.lines.push(line.clone());
            }
        } else if LOCKUP_SIGNS.iter().any(|sign| line.contains(sign)) {
            let during = running.as_ref().map_or_else(|| "between tests".to_string(), |(n, _, _)| n.clone());
            eprintln!(
                "\nvmtest {}: the guest kernel stopped making progress during {during}; stopping it in {} s",
                kernel.spec.version,
                LOCKUP_GRACE.as_secs()
            );
            outcome.lockup = Some(Lockup { during, lines: vec![line.clone()] });
            deadline = deadline.min(at + LOCKUP_GRACE);
        }
        // The command's output, up to its exit status (a line of output
        // may end in the marker when it had no newline of its own).
        if outcome.command_started && outcome.command_exit.is_none() {
            let exit = line
                .split_once(MARK_EXIT)
                .and_then(|(before, status)| Some((before, status.trim().parse::<i32>().ok()?)));
            match exit {
                Some((before, status)) => {
                    if !before.is_empty() {
                        writeln!(out, "{before}")?;
                    }
                    outcome.command_exit = Some(status);
                }
                None => writeln!(out, "{line}")?,
            }
            out.flush()?;
            continue;
        }
        if let Some((_, v)) = line.split_once(MARK_KERNEL_LOG) {
            outcome.kernel_log.push(v.trim().to_string());
        } else if let Some((_, v)) = line.split_once(MARK_KERNEL_BUG) {
            outcome.kernel_bugs.push(v.trim().to_string());
        } else if let Some((_, v)) = line.split_once(MARK_KERNEL) {
            outcome.kernel = Some(v.trim().to_string());
            if mode == Mode::Command {
                eprintln!("vmtest: guest up after {:.0} s, kernel {}", (at - start).as_secs_f64(), v.trim());
            }
        } else if let Some((_, v)) = line.split_once(MARK_WARNING) {
            outcome.warnings.push(v.trim().to_string());
            if mode == Mode::Command {
                eprintln!("vmtest: guest: {}", v.trim());
            }
        } else if let Some((_, v)) = line.split_once(MARK_COMMAND) {
            outcome.command_started = true;
            eprintln!("vmtest: running {}", v.trim());
        } else if let Some((_, v)) = line.split_once(MARK_TEST) {
            running = Some((v.trim().to_string(), at, false));
        } else if let Some((_, v)) = line.split_once(MARK_DONE) {
            let (name, result) = v.trim().rsplit_once(' ').unwrap_or((v.trim(), "?"));
            let (since, named) = match running.take() {
                Some((n, since, named)) if n == name => (since, named),
                _ => (at, false),
            };
            // An --exact filter that matches nothing passes with 0 tests.
            let result = if result == "ok" && !named {
                "never ran (no such test?)"
            } else if result == "FAILED" && killed.contains(name) {
                "HUNG (killed)"
            } else {
                result
            };
            outcome.tests.push((name.to_string(), result.to_string(), at - since));
        } else if let Some((_, v)) = line.split_once(MARK_KILLED) {
            killed.insert(v.split_whitespace().next().unwrap_or_default().to_string());
        } else if let Some((_, v)) = line.split_once(MARK_RESULT) {
            let v = v.trim();
            outcome.failed = Some(match v {
                "pass" => 0,
                _ => v.strip_prefix("fail ").and_then(|n| n.parse().ok()).unwrap_or(u32::MAX),
            });
        } else if let Some((name, _, named)) = running.as_mut() {
            let short = name.split_once("::").map_or(name.as_str(), |(_, t)| t);
            if line.starts_with(&format!("test {short} ... ")) {
                *named = true;
            }
        }
    }
    if let Some((name, since, _)) = running {
        outcome.tests.push((name, "unfinished".to_string(), Instant::now() - since));
    }
    outcome.qemu_status = Some(qemu.wait().context("wait for qemu")?);
    match reader.join() {
        Ok(r) => r.context("cannot read qemu's output")?,
        Err(_) => bail!("the serial console reader panicked"),
    }
    Ok(outcome)
}

/// Up to 5 names, and how many more (the summary above lists them all).
fn names(all: &[&str]) -> String {
    match all.len() {
        0..=5 => all.join(", "),
        n => format!("{} and {} more", all[..4].join(", "), n - 4),
    }
}

fn passed(result: &str) -> bool {
    result == "ok" || result == "ok-on-retry"
}

impl Outcome {
    fn print_kernel_messages(&self) {
        for w in &self.warnings {
            eprintln!("guest warning: {w}");
        }
        if let Some(lockup) = &self.lockup {
            eprintln!("the kernel's report of its lockup (during {}):", lockup.during);
            for l in &lockup.lines {
                eprintln!("  | {l}");
            }
        }
        if !self.kernel_log.is_empty() {
            eprintln!("kernel warnings and errors logged meanwhile:");
            for l in &self.kernel_log {
                eprintln!("  {l}");
            }
        }
        if !self.kernel_bugs.is_empty() {
            eprintln!("kernel WARNING/BUG/oops/call trace lines meanwhile:");
            for l in &self.kernel_bugs {
                eprintln!("  {l}");
            }
        }
    }

    /// The kernel's summary: each test's result and time.
    pub fn print_summary(&self, kernel: &Kernel, took: Duration) {
        eprintln!("\n== vmtest {} summary", kernel.spec.version);
        eprintln!("guest kernel: {}", self.kernel.as_deref().unwrap_or("(never printed)"));
        self.print_kernel_messages();
        for (name, result, took) in &self.tests {
            eprintln!("  {:>6.1} s  {result:<11}  {name}", took.as_secs_f64());
        }
        for (name, result, _) in &self.tests {
            let short = name.split_once("::").map_or(name.as_str(), |(_, t)| t);
            if result == "ok-on-retry" {
                let why = ALLOWED_FLAKY.iter().find(|(t, _)| *t == short).map_or("?", |(_, why)| why);
                eprintln!("flaky, allowed to be: {name} (failed, then passed on the retry): {why}");
            } else if result == "FLAKY" {
                eprintln!("FLAKY: {name} failed, then passed on the retry (see the log)");
            }
        }
        let passed = self.tests.iter().filter(|(_, r, _)| passed(r)).count();
        eprintln!(
            "vm: {:.0} s (boot to power-off); {passed} passed, {} not",
            took.as_secs_f64(),
            self.tests.len() - passed
        );
    }

    /// The number of tests passed, or every reason the kernel failed.
    pub fn judge(&self, plan: &[(&str, Vec<&str>)], kernel: &Kernel) -> Result<usize> {
        let log = self.log.display();
        let mut why = Vec::new();
        if let Some(t) = self.timed_out {
            why.push(format!("the guest did not finish within {} s", t.as_secs()));
        }
        if let Some(Lockup { during, lines }) = &self.lockup {
            let first = lines.first().map_or("", |l| l.trim());
            why.push(format!("the guest kernel stopped making progress during {during}: {first:?}"));
        }
        if self.silent {
            why.push(format!(
                "the guest's console was silent for {} s (hung) and it was stopped",
                SILENCE_LIMIT.as_secs()
            ));
        }
        if self.kernel.is_none() {
            why.push(format!("the guest never ran /init ({})", self.status()));
        }
        if let Some(first) = self.kernel_bugs.first() {
            why.push(format!(
                "the kernel logged a warning or oops while the tests ran: {first:?}{}",
                match self.kernel_bugs.len() {
                    1 => String::new(),
                    n => format!(" and {} more lines", n - 1),
                }
            ));
        }
        let with = |result: &str| -> Vec<&str> {
            self.tests.iter().filter(|(_, r, _)| r == result).map(|(n, _, _)| n.as_str()).collect()
        };
        let flaky = with("FLAKY");
        if !flaky.is_empty() {
            why.push(format!("flaky (passed only on the retry, not in ALLOWED_FLAKY): {}", flaky.join(", ")));
        }
        let failed: Vec<&str> = self
            .tests
            .iter()
            .filter(|(_, r, _)| !passed(r) && r != "FLAKY")
            .map(|(n, _, _)| n.as_str())
            .collect();
        if !failed.is_empty() {
            why.push(format!("{} failed: {}", failed.len(), names(&failed)));
        }
        let missing: Vec<String> = plan
            .iter()
            .flat_map(|(bin, tests)| tests.iter().map(move |t| format!("{bin}::{t}")))
            .filter(|full| !self.tests.iter().any(|(n, _, _)| n == full))
            .collect();
        if !missing.is_empty() && self.kernel.is_some() {
            let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
            why.push(format!("{} never ran: {}", missing.len(), names(&missing)));
        }
        match self.failed {
            None if self.kernel.is_some() && self.timed_out.is_none() => {
                why.push(format!("the guest printed no result line ({})", self.status()))
            }
            Some(n) if n > 0 && failed.is_empty() && flaky.is_empty() => {
                why.push(format!("the guest counted {n} failed tests"))
            }
            _ => {}
        }
        if !why.is_empty() {
            bail!("{} (kernel {}; see {log})", why.join("; "), kernel.package);
        }
        Ok(self.tests.iter().filter(|(_, r, _)| passed(r)).count())
    }

    /// After a command: its status and what the kernel logged meanwhile.
    pub fn print_command_status(&self, kernel: &Kernel, took: Duration) {
        self.print_kernel_messages();
        match self.command_exit {
            Some(s) => eprintln!(
                "vmtest {}: exit status {s} ({:.0} s in the VM)",
                kernel.spec.version,
                took.as_secs_f64()
            ),
            None => {
                eprintln!(
                    "vmtest {}: the command did not finish; the end of {}:",
                    kernel.spec.version,
                    self.log.display()
                );
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                for l in &lines[lines.len().saturating_sub(30)..] {
                    eprintln!("  | {l}");
                }
            }
        }
    }

    /// The command's exit status, or why there is none.
    pub fn command_exit(&self, kernel: &Kernel) -> Result<i32> {
        if let Some(s) = self.command_exit {
            return Ok(s);
        }
        let log = self.log.display();
        if let Some(t) = self.timed_out {
            bail!("the command did not finish within {} s (see {log})", t.as_secs());
        }
        if self.kernel.is_none() {
            bail!("{} never ran /init ({}; see {log})", kernel.package, self.status());
        }
        bail!("the guest printed no exit status ({}; see {log})", self.status())
    }

    fn status(&self) -> String {
        self.qemu_status.map_or_else(|| "qemu still running".into(), |s| format!("qemu {s}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmtest::kernel::KERNELS;

    fn outcome(tests: &[(&str, &str)], bugs: &[&str]) -> Outcome {
        Outcome {
            log: PathBuf::from("serial.log"),
            kernel: Some("6.1.0-57-cloud-amd64".into()),
            warnings: Vec::new(),
            kernel_log: Vec::new(),
            kernel_bugs: bugs.iter().map(|b| b.to_string()).collect(),
            failed: Some(tests.iter().filter(|(_, r)| !passed(r)).count() as u32),
            tests: tests.iter().map(|(n, r)| (n.to_string(), r.to_string(), Duration::ZERO)).collect(),
            command_started: false,
            command_exit: None,
            timed_out: None,
            lockup: None,
            silent: false,
            qemu_status: None,
        }
    }

    fn judge(o: &Outcome) -> Result<usize> {
        let kernel = Kernel {
            spec: &KERNELS[1],
            package: "linux-image-6.1.0-57-cloud-amd64".into(),
            vmlinuz: PathBuf::new(),
            config: PathBuf::new(),
            fuse_module: None,
        };
        let plan = [("core", vec!["a", "b"])];
        o.judge(&plan, &kernel)
    }

    #[test]
    fn allowed_flaky_passes_and_other_flaky_fails() {
        assert_eq!(judge(&outcome(&[("core::a", "ok"), ("core::b", "ok-on-retry")], &[])).unwrap(), 2);
        let e = judge(&outcome(&[("core::a", "ok"), ("core::b", "FLAKY")], &[])).unwrap_err().to_string();
        assert!(e.contains("flaky (passed only on the retry, not in ALLOWED_FLAKY): core::b"), "{e}");
        assert!(!e.contains("failed:"), "{e}");
    }

    #[test]
    fn a_kernel_warning_fails_the_run_and_is_named() {
        let warn = "<4>[   12.5] WARNING: CPU: 1 PID: 99 at kernel/bpf/verifier.c:1234 do_check+0x1/0x2";
        let e = judge(&outcome(&[("core::a", "ok"), ("core::b", "ok")], &[warn, "<4>[   12.5] Call Trace:"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(warn) && e.contains("and 1 more lines"), "{e}");
    }

    #[test]
    fn missing_and_failed_tests_fail() {
        let e = judge(&outcome(&[("core::a", "FAILED")], &[])).unwrap_err().to_string();
        assert!(e.contains("1 failed: core::a") && e.contains("1 never ran: core::b"), "{e}");
        assert_eq!(names(&["a", "b", "c", "d", "e", "f"]), "a, b, c, d and 2 more");
    }

    #[test]
    fn a_lockup_fails_the_run_and_names_the_test() {
        let mut o = outcome(&[("core::a", "ok"), ("core::b", "unfinished")], &[]);
        let first = "[  99.1] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [sonic-probe:321]";
        o.lockup = Some(Lockup { during: "core::b".into(), lines: vec![first.into()] });
        let e = judge(&o).unwrap_err().to_string();
        assert!(e.contains("stopped making progress during core::b") && e.contains("soft lockup"), "{e}");
        assert!(LOCKUP_SIGNS.iter().any(|sign| first.contains(sign)));
    }
}
