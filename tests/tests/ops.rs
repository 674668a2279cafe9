//! Operating sonic-probe as a service: the systemd notify protocol, the
//! config file (errors, check-config, SIGHUP reload without resetting
//! counters), capabilities dropped after attach, the unit file.

use std::{
    os::unix::net::UnixDatagram,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use sonic_probe_tests::{privileged, sonic_probe_bin, unique_name, workload::exact, Daemon, Workload};

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

#[test]
fn capabilities_are_dropped_after_attach() {
    if !privileged("capabilities_are_dropped_after_attach") {
        return;
    }
    let d = Daemon::start(&["--pid", "1"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    for set in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        let line = status.lines().find(|l| l.starts_with(set)).unwrap();
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    // And it still works: scrapes read the maps through the fds it holds.
    assert_eq!(d.metrics().get("sonic_probe_bpf_programs_attached", &[]), Some(5.0));
}

#[test]
fn btf_from_a_file_is_used_for_loading() {
    if !privileged("btf_from_a_file_is_used_for_loading") {
        return;
    }
    // Kernels without /sys/kernel/btf/vmlinux get their BTF from a file
    // (e.g. a BTFHub download); the kernel's own file is a valid one.
    let d = Daemon::start(&["--pid", "1", "--btf", "/sys/kernel/btf/vmlinux"]);
    assert_eq!(d.metrics().get("sonic_probe_bpf_programs_attached", &[]), Some(5.0));
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
    assert!(out.contains("attached 5 BPF programs and detached them: OK"), "{out}");
}

#[test]
fn sighup_reloads_targets_and_thresholds_without_resetting_counters() {
    if !privileged("sighup_reloads_targets_and_thresholds_without_resetting_counters") {
        return;
    }
    let dir = temp_dir("hup");
    let config = dir.join("config.toml");
    let (a, b) = (unique_name("hupa"), unique_name("hupb"));
    std::fs::write(&config, format!("comm = [\"{a}\"]\nstall_threshold = \"1s\"\n")).unwrap();
    // comm targets match at exec: start the workloads through links named a and b.
    let link = |name: &str| {
        let l = dir.join(name);
        std::os::unix::fs::symlink(sonic_probe_tests::workload_bin(), &l).unwrap();
        l
    };
    let (la, lb) = (link(&a), link(&b));
    let mut d = Daemon::start(&["--config", config.to_str().unwrap()]);
    let run = |l: &PathBuf| {
        let w = Workload::start_command(Command::new(l), None, &["exact"]);
        assert!(w.go().success());
    };
    run(&la);
    run(&lb);
    let m = d.metrics();
    let a_reads = m.calls("read", &a);
    assert!(a_reads >= exact::READ, "{a_reads}");
    assert_eq!(m.calls("read", &b), 0);

    std::fs::write(&config, format!("comm = [\"{b}\"]\nstall_threshold = \"250ms\"\n")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("SIGHUP: reloaded");
    run(&la);
    run(&lb);
    let m = d.metrics();
    assert_eq!(m.calls("read", &a), a_reads, "a is no target any more, and its counts are kept");
    assert!(m.calls("read", &b) >= exact::READ, "b is a target now");

    // A bad file is refused and the running configuration stays.
    std::fs::write(&config, "comm = [\"x\"]\nslow_threshold = \"never\"\n").unwrap();
    d.signal(libc::SIGHUP);
    let line = d.wait_for_log("SIGHUP: reload failed");
    assert!(line.contains("slow_threshold"), "{line}");
    run(&lb);
    assert!(d.metrics().calls("read", &b) >= 2 * exact::READ, "still watching b");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_unit_file_verifies() {
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/sonic-probe.service")).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("CapabilityBoundingSet=CAP_BPF CAP_PERFMON"));
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
    let mut child = Command::new("setpriv")
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
