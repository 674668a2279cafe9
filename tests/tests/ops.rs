//! Operating sonic-probe as a service: the systemd notify protocol, the
//! config file (errors, check-config, SIGHUP reload without resetting
//! counters), capabilities dropped after attach, the unit file.

use std::{
    collections::BTreeMap,
    io::Write,
    os::unix::net::UnixDatagram,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use sonic_probe_tests::{
    kernel_line, parse_strace_summary, privileged, sonic_probe_bin, unique_name, unknown_kernel, Daemon,
    Metrics,
};

fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Receives notify messages until one contains `needle`.
fn expect_notify(sock: &UnixDatagram, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.push(m.clone());
            if m.contains(needle) {
                return;
            }
        }
    }
    panic!("no {needle:?} from sd_notify; got {seen:?}");
}

#[test]
fn systemd_notify_ready_after_attach_reload_and_stopping() {
    if !privileged("systemd_notify_ready_after_attach_reload_and_stopping") {
        return;
    }
    let dir = temp_dir("ntf");
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let d = Daemon::start_with(&["--pid", "1"], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let mut seen = Vec::new();
    expect_notify(&sock, "READY=1", &mut seen);
    assert!(seen.iter().any(|m| m.contains("STATUS=loading the BPF programs")), "{seen:?}");
    assert!(seen.iter().any(|m| m.contains("STATUS=attaching")), "{seen:?}");
    assert!(seen.last().unwrap().contains("STATUS=watching pid 1"), "{seen:?}");
    // READY=1 came after attach: the programs are there.
    let (status, _) = d.get("/healthz");
    assert_eq!(status, 200);
    d.signal(libc::SIGHUP);
    expect_notify(&sock, "RELOADING=1", &mut seen);
    expect_notify(&sock, "READY=1", &mut seen);
    d.signal(libc::SIGTERM);
    expect_notify(&sock, "STOPPING=1", &mut seen);
    assert!(d.stop().success());
    let _ = std::fs::remove_dir_all(&dir);
}

const CAP_SYS_PTRACE: u64 = 1 << 19;
const CAP_BPF: u64 = 1 << 39;
const CAP_PERFMON: u64 = 1 << 38;

/// One capability set of a thread, from its /proc status line.
fn cap_set(status: &str, set: &str) -> u64 {
    let line =
        status.lines().find_map(|l| l.strip_prefix(set)).unwrap_or_else(|| panic!("no {set} in {status}"));
    u64::from_str_radix(line.trim_start_matches(':').trim(), 16).unwrap()
}

/// The threads of daemon `d` hold exactly `kept` as effective and permitted
/// sets, nothing inheritable or ambient, as the kernel shows them in
/// /proc/PID/task/*/status.
fn assert_thread_capabilities(d: &Daemon, kept: u64, what: &str) {
    // In every thread, not only the main one: capabilities are per thread,
    // and the runtime's workers (which serve HTTP and decode events) were
    // started before the drop. A scrape first, so that blocking-pool
    // threads exist too.
    assert_eq!(
        d.metrics().get("sonic_probe_bpf_programs_attached", &[]),
        Some(sonic_probe_tests::PROGRAMS_ATTACHED)
    );
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap().flatten().collect();
    assert!(tasks.len() >= 3, "{} threads", tasks.len());
    for task in tasks {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        let sets = ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"].map(|set| cap_set(&status, set));
        // Started as root (CAP_SETPCAP): the bounding set is emptied too,
        // and no thread may gain privileges by an exec.
        assert_eq!(
            sets,
            [kept, kept, 0, 0, 0],
            "thread {:?}: CapEff, CapPrm, CapInh, CapAmb, CapBnd ({what})",
            task.file_name()
        );
        assert!(
            status.lines().any(|l| l == "NoNewPrivs:\t1"),
            "thread {:?}: no_new_privs unset",
            task.file_name()
        );
    }
}

/// Whether the daemon must keep CAP_BPF after attach on this kernel, written
/// down per kernel line CI runs on (None: a kernel not in the table). Up to
/// 5.18, with kernel.unprivileged_bpf_disabled set, every bpf() command
/// (map lookups through fds already open too) needs CAP_BPF; from 5.19 on
/// only map creation and program loads do.
fn keeps_cap_bpf() -> Option<bool> {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled").unwrap();
    match kernel_line().as_str() {
        "5.10" => Some(disabled.trim() != "0"),
        "6.1" | "6.12" | "6.18" => Some(false),
        _ => None,
    }
}

#[test]
fn capabilities_are_dropped_after_attach() {
    let test = "capabilities_are_dropped_after_attach";
    if !privileged(test) {
        return;
    }
    let Some(keeps_bpf) = keeps_cap_bpf() else { return unknown_kernel(test, &kernel_line()) };
    let bpf = if keeps_bpf { CAP_BPF } else { 0 };
    // The test runs as root with every capability: CAP_SYS_PTRACE is there
    // to keep.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_ne!(cap_set(&own, "CapEff") & CAP_SYS_PTRACE, 0, "the test itself lacks CAP_SYS_PTRACE");

    // Stack captures on (the default): CAP_SYS_PTRACE is kept (they read
    // stalled processes' memory) and CAP_PERFMON (they sample a running
    // lock holder), and the log says so.
    let mut d = Daemon::start(&["--pid", "1"]);
    assert_thread_capabilities(&d, CAP_SYS_PTRACE | CAP_PERFMON | bpf, "stack captures on");
    let said = if keeps_bpf { "but CAP_BPF (" } else { "but CAP_SYS_PTRACE (" };
    assert!(
        d.log().iter().any(|l| l.contains("dropped every capability")
            && l.contains(said)
            && l.contains("CAP_SYS_PTRACE (")
            && l.contains("CAP_PERFMON (")),
        "{:?}",
        d.log()
    );
    // And it still works: scrapes read the maps through the fds it holds.
    assert_eq!(
        d.metrics().get("sonic_probe_bpf_programs_attached", &[]),
        Some(sonic_probe_tests::PROGRAMS_ATTACHED)
    );
    drop(d);

    // Without stack captures nothing needs CAP_SYS_PTRACE: it goes too.
    let mut d = Daemon::start(&["--pid", "1", "--stack-captures", "off"]);
    assert_thread_capabilities(&d, bpf, "stack captures off");
    let said = if keeps_bpf { "dropped every capability but CAP_BPF (" } else { "dropped all capabilities" };
    assert!(d.log().iter().any(|l| l.contains(said)), "{:?}", d.log());
    assert!(!d.log().iter().any(|l| l.contains("CAP_SYS_PTRACE")), "{:?}", d.log());
    assert_eq!(
        d.metrics().get("sonic_probe_bpf_programs_attached", &[]),
        Some(sonic_probe_tests::PROGRAMS_ATTACHED)
    );
}

#[test]
fn btf_from_a_file_is_used_for_loading() {
    if !privileged("btf_from_a_file_is_used_for_loading") {
        return;
    }
    // Kernels without /sys/kernel/btf/vmlinux get their BTF from a file
    // (e.g. a BTFHub download); the kernel's own file is a valid one.
    let d = Daemon::start(&["--pid", "1", "--btf", "/sys/kernel/btf/vmlinux"]);
    assert_eq!(
        d.metrics().get("sonic_probe_bpf_programs_attached", &[]),
        Some(sonic_probe_tests::PROGRAMS_ATTACHED)
    );
}

#[test]
fn config_file_errors_name_the_key_and_line() {
    let dir = temp_dir("cfg");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:9580\"\n\nstall_threshold = \"soon\"\n").unwrap();
    for args in [
        vec!["run", "--config", bad.to_str().unwrap()],
        vec!["check-config", "--config", bad.to_str().unwrap()],
    ] {
        let o = Command::new(sonic_probe_bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("line 3: stall_threshold: 'soon' is not a duration"), "{err}");
    }
    std::fs::write(&bad, "listen = \"127.0.0.1:9580\"\nstall_treshold = \"1s\"\n").unwrap();
    let o = Command::new(sonic_probe_bin())
        .args(["check-config", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("line 2: unknown field `stall_treshold`"), "{err}");
    let o = Command::new(sonic_probe_bin())
        .args(["check-config", "--config", "/no/such/file.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read it"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_config_accepts_the_shipped_config_and_attaches() {
    let shipped = repo().join("deploy/config.toml");
    let o =
        Command::new(sonic_probe_bin()).args(["check-config", "--config"]).arg(&shipped).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(": OK: watching whole host, listening on 0.0.0.0:9580")
    );
    if !privileged("check_config_accepts_the_shipped_config_and_attaches") {
        return;
    }
    let o = Command::new(sonic_probe_bin())
        .args(["check-config", "--attach", "--config"])
        .arg(&shipped)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out} {}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("attached 9 BPF programs and detached them: OK"), "{out}");
}

/// The calls the tests compare exactly.
const CALLS: [&str; 6] = ["futex", "openat", "read", "mmap", "munmap", "close"];

/// Per syscall, calls of one process name.
type Calls = BTreeMap<&'static str, u64>;

/// Runs sp-workload through `link` (so that its process name is the link's)
/// under `strace -f -c`, lets it go, and adds strace's counts of its calls,
/// start-up included, to `total`.
fn run_counted(link: &Path, args: &[&str], total: Option<&mut Calls>) {
    let summary = link.with_extension("strace");
    let mut child = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&summary)
        .arg(link)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run strace");
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    assert!(child.wait().unwrap().success(), "{} {args:?}", link.display());
    let counts = parse_strace_summary(&std::fs::read_to_string(&summary).unwrap());
    if let Some(total) = total {
        for syscall in CALLS {
            *total.entry(syscall).or_default() += counts.get(syscall).map_or(0, |c| c.0);
        }
    }
}

fn assert_calls(m: &Metrics, name: &str, want: &Calls, what: &str) {
    for syscall in CALLS {
        assert_eq!(
            m.calls(syscall, name),
            want.get(syscall).copied().unwrap_or(0),
            "{what}: {syscall} calls"
        );
    }
}

fn stalls<'a>(f: &'a [serde_json::Value], comm: &str) -> Vec<&'a serde_json::Value> {
    f.iter().filter(|f| f["kind"] == "futex_stall" && f["comm"] == comm).collect()
}

#[test]
fn a_daemon_whose_log_reader_is_gone_runs_on() {
    if !privileged("a_daemon_whose_log_reader_is_gone_runs_on") {
        return;
    }
    // Log lines written to a closed pipe are lost, and nothing else: no
    // panic of the thread that logged (the demo's stack captures lost their
    // Python frames so), and a clean exit.
    let own = std::process::id().to_string();
    let mut d = Daemon::start(&["--pid", &own]);
    d.close_log();
    for _ in 0..3 {
        // Each reload logs a line: the first closes the pipe.
        d.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(d.get("/healthz").0, 200);
    let status = d.stop();
    assert!(status.success(), "exit status with its log gone: {status:?}");
}

#[test]
fn sighup_reloads_targets_and_thresholds_without_resetting_counters() {
    if !privileged("sighup_reloads_targets_and_thresholds_without_resetting_counters") {
        return;
    }
    let dir = temp_dir("hup");
    let config = dir.join("config.toml");
    let (a, b) = (unique_name("hupa"), unique_name("hupb"));
    // findings_verbose: `exact` fails each call once, at start-up, which
    // only the verbose findings list (docs/metrics.md).
    let verbose = "findings_verbose = true\n";
    std::fs::write(&config, format!("comm = [\"{a}\"]\nstall_threshold = \"1s\"\n{verbose}")).unwrap();
    // comm targets match at exec: start the workloads through links named a
    // and b. strace counts each run (start-up included): the exact numbers
    // expected of a target from its exec on.
    let link = |name: &str| {
        let l = dir.join(name);
        std::os::unix::fs::symlink(sonic_probe_tests::workload_bin(), &l).unwrap();
        l
    };
    let (la, lb) = (link(&a), link(&b));
    let (mut want_a, mut want_b) = (Calls::new(), Calls::new());
    // A 400 ms futex stall of the main thread: a stall at 250 ms, not at 1 s.
    let stall = ["stall", "wait", "400"];
    let mut d = Daemon::start(&["--config", config.to_str().unwrap()]);

    run_counted(&la, &stall, Some(&mut want_a));
    run_counted(&la, &["exact"], Some(&mut want_a));
    run_counted(&lb, &["exact"], None);
    // a's failed calls are findings; its stall, before them, is not one at 1 s.
    let f = d.findings_when(|f| f.iter().any(|f| f["kind"] == "syscall_errors" && f["comm"] == a.as_str()));
    assert!(f.iter().any(|f| f["comm"] == a.as_str()), "{f:#?}");
    assert!(stalls(&f, &a).is_empty(), "a 400 ms wait is no stall at 1 s: {f:#?}");
    let m = d.metrics();
    assert_calls(&m, &a, &want_a, "a, a target");
    assert_calls(&m, &b, &Calls::new(), "b, not a target yet");
    // The wait was there: a's one futex wait above 2^28 ns (0.27 s).
    let long = m.sum("sonic_probe_futex_wait_duration_seconds_count", &[("comm", &a)])
        - m.sum("sonic_probe_futex_wait_duration_seconds_bucket", &[("comm", &a), ("le", "0.268435456")]);
    assert_eq!(long, 1.0, "a's 400 ms wait");

    std::fs::write(&config, format!("comm = [\"{b}\"]\nstall_threshold = \"250ms\"\n{verbose}")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("SIGHUP: reloaded");
    run_counted(&la, &stall, None);
    run_counted(&la, &["exact"], None);
    run_counted(&lb, &["exact"], Some(&mut want_b));
    run_counted(&lb, &stall, Some(&mut want_b));
    // The new threshold: b's 400 ms wait is a stall now.
    let f = d.findings_when(|f| !stalls(f, &b).is_empty());
    let s = stalls(&f, &b);
    assert_eq!(s.len(), 1, "b's 400 ms wait is a stall at 250 ms: {f:#?}");
    assert_eq!((s[0]["thread"].as_str(), s[0]["count"].as_u64()), (Some(b.as_str()), Some(1)), "{:#}", s[0]);
    assert_eq!(s[0]["waker_thread"], "holder", "{:#}", s[0]);
    let wait = s[0]["wait_seconds"].as_f64().unwrap();
    // The holder wakes it 400 ms after it blocked; 5 s allows for a loaded
    // machine or qemu TCG.
    assert!((0.39..5.0).contains(&wait), "{:#}", s[0]);
    assert!(stalls(&f, &a).is_empty(), "{f:#?}");
    let m = d.metrics();
    assert_calls(&m, &a, &want_a, "a is no target any more, and its counts are kept");
    assert_calls(&m, &b, &want_b, "b is a target now");

    // A bad file is refused and the running configuration stays: targets
    // and the 250 ms threshold (not the 1 s default).
    std::fs::write(&config, "comm = [\"x\"]\nslow_threshold = \"never\"\n").unwrap();
    d.signal(libc::SIGHUP);
    let line = d.wait_for_log("SIGHUP: reload failed");
    assert!(line.contains("slow_threshold"), "{line}");
    run_counted(&lb, &["exact"], Some(&mut want_b));
    run_counted(&lb, &stall, Some(&mut want_b));
    // Both of b's runs have exited: their stalls are one problem, one finding.
    let f = d.findings_when(|f| stalls(f, &b).iter().any(|s| s["processes"] == 2));
    let s = stalls(&f, &b);
    assert_eq!(s.len(), 1, "{f:#?}");
    assert_eq!(
        (s[0]["processes"].as_u64(), s[0]["count"].as_u64()),
        (Some(2), Some(2)),
        "still stalls at 250 ms: {f:#?}"
    );
    assert_calls(&d.metrics(), &b, &want_b, "still watching b");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_unit_file_verifies() {
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/sonic-probe.service")).unwrap();
    assert!(
        unit.contains("Type=notify")
            && unit.contains("CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYS_PTRACE")
    );
    // systemd-analyze checks that ExecStart exists: point it at our build.
    let dir = temp_dir("unit");
    let copy = dir.join("sonic-probe.service");
    std::fs::write(&copy, unit.replace("/usr/bin/sonic-probe", sonic_probe_bin().to_str().unwrap())).unwrap();
    let o = Command::new("systemd-analyze").arg("verify").arg(&copy).output().expect("systemd-analyze");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.trim().is_empty(), "systemd-analyze verify:\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn it_runs_with_only_cap_bpf_and_cap_perfmon() {
    if !privileged("it_runs_with_only_cap_bpf_and_cap_perfmon") {
        return;
    }
    // As the service runs it: no CAP_SYS_ADMIN, only the two capabilities.
    let caps = "-all,+bpf,+perfmon";
    let mut setpriv = Command::new("setpriv");
    // As the systemd unit's LimitMEMLOCK=infinity does: kernels before 5.11
    // charge BPF maps to RLIMIT_MEMLOCK, which CAP_BPF does not lift.
    // (Where even root may not raise it, as in some containers, the kernel
    // is new enough not to charge it.)
    // SAFETY: setrlimit is async-signal-safe; the child is still only ours.
    unsafe {
        use std::os::unix::process::CommandExt;
        setpriv.pre_exec(|| {
            let inf = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf);
            Ok(())
        });
    }
    let mut child = setpriv
        .args([
            &format!("--inh-caps={caps}"),
            &format!("--ambient-caps={caps}"),
            &format!("--bounding-set={caps}"),
        ])
        .args(["--no-new-privs", "--"])
        .arg(sonic_probe_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--pid", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut ready = false;
    let mut log = String::new();
    for _ in 0..20 {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0) == 0 {
            break;
        }
        log.push_str(&line);
        if line.contains(" ready in ") {
            ready = true;
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(ready, "{log}");
    assert!(status.success(), "{log}");
}
