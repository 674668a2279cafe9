//! The five field problems, found for real: a Python stand-in for the Sonic
//! service (tests/workloads/sonic_sim.py) with each problem, its healthy
//! twin, and every futex wait operation; exact counts, paths, sizes and
//! threads in GET /findings, and the diagnosis metrics.

use std::process::Command;

use serde_json::Value;
use sonic_probe_tests::{privileged, sonic_sim, unique_name, Daemon, Workload};

const REQUESTS: u64 = 3;
const MODEL_BYTES: u64 = 32 << 20;
const AUDIO_BYTES: u64 = 64 << 10;
/// 64 reads of 1 KiB and the read that finds the end of the file.
const AUDIO_READS: u64 = AUDIO_BYTES / 1024 + 1;

fn sim(mode: &str, dir: &std::path::Path) -> Workload {
    let mut cmd = Command::new("python3");
    cmd.arg(sonic_sim()).arg(mode).args(["--requests", &REQUESTS.to_string(), "--stall", "0.5", "--wait-go"]);
    cmd.arg("--dir").arg(dir);
    Workload::start_command(cmd, None, &[])
}

fn of_kind<'a>(findings: &'a [Value], kind: &str) -> Vec<&'a Value> {
    findings.iter().filter(|f| f["kind"] == kind).collect()
}

fn daemon_for(pid: u32) -> Daemon {
    Daemon::start(&["--pid", &pid.to_string(), "--stall-threshold", "300ms"])
}

/// Findings once the sweep has seen the process go (it is gone already).
fn settled_findings(d: &Daemon) -> Vec<Value> {
    std::thread::sleep(std::time::Duration::from_millis(1200));
    d.findings()
}

#[test]
fn the_faulty_service_shows_every_problem_exactly() {
    if !privileged("the_faulty_service_shows_every_problem_exactly") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("sim-f"));
    let w = sim("faulty", &dir);
    let (pid, comm) = (w.pid(), w.comm());
    let d = daemon_for(pid);
    assert!(w.go().success());
    let f = settled_findings(&d);
    let dir = dir.to_str().unwrap();
    let model = format!("{dir}/models/sonic/lip_decoder.pth");

    // 1. The request thread (the main thread) stalled on the loader's lock.
    let stalls = of_kind(&f, "futex_stall");
    assert_eq!(stalls.len(), 1, "{f:#?}");
    let s = stalls[0];
    assert_eq!((s["pid"].as_u64(), s["tid"].as_u64()), (Some(u64::from(pid)), Some(u64::from(pid))));
    assert_eq!(s["count"], REQUESTS);
    assert_eq!(s["thread"], comm.as_str());
    assert_eq!(s["waker_thread"], "loader", "{s:#}");
    assert!(s["waker_tid"].as_u64().is_some_and(|t| t != u64::from(pid)));
    let wait = s["wait_seconds"].as_f64().unwrap();
    assert!((0.4..1.5).contains(&wait), "{wait}");
    assert!(s["op"].as_str().unwrap().starts_with("FUTEX_WAIT"), "{s:#}");

    // 2. The model re-opened on every request, read whole each time.
    let opens = of_kind(&f, "repeated_open");
    assert_eq!(opens.len(), 1, "{f:#?}");
    assert_eq!(opens[0]["path"], model.as_str());
    assert_eq!(opens[0]["file_class"], "model");
    assert_eq!(opens[0]["count"], REQUESTS);
    assert_eq!(opens[0]["bytes_read"], REQUESTS * MODEL_BYTES);

    // 3. Each request's audio read 1 KiB at a time.
    let mut small = of_kind(&f, "small_reads");
    small.sort_by_key(|v| v["path"].as_str().unwrap().to_string());
    assert_eq!(small.len(), REQUESTS as usize, "{f:#?}");
    for (i, s) in small.iter().enumerate() {
        assert_eq!(s["path"], format!("{dir}/data/req-{i}/speech.mp3").as_str());
        assert_eq!(s["file_class"], "audio");
        assert_eq!((s["count"].as_u64(), s["bytes"].as_u64()), (Some(AUDIO_READS), Some(AUDIO_BYTES)));
        assert_eq!(s["typical_size"], 1024);
    }

    // 4. The model mapped and unmapped per request.
    let churn = of_kind(&f, "mmap_churn");
    assert_eq!(churn.len(), 1, "{f:#?}");
    assert_eq!(
        (churn[0]["size_bytes"].as_u64(), churn[0]["count"].as_u64()),
        (Some(MODEL_BYTES), Some(REQUESTS))
    );
    assert_eq!(churn[0]["path"], model.as_str());

    // 5. The wrong model path.
    let errors = of_kind(&f, "syscall_errors");
    assert_eq!(errors.len(), 1, "{f:#?}");
    assert_eq!(
        (errors[0]["syscall"].as_str(), errors[0]["errno"].as_str()),
        (Some("openat"), Some("ENOENT"))
    );
    assert_eq!(errors[0]["count"], REQUESTS);
    assert_eq!(errors[0]["paths"], serde_json::json!([format!("{dir}/models/sonic/lip_decoder_v2.pth")]));
    assert_eq!(f.len(), 4 + REQUESTS as usize, "nothing else: {f:#?}");

    // And the same in the metrics.
    let m = d.metrics();
    let c = comm.as_str();
    assert_eq!(m.get("sonic_probe_futex_stalls_total", &[("comm", c), ("thread", c)]), Some(REQUESTS as f64));
    assert!(m.get("sonic_probe_futex_stall_max_seconds", &[("comm", c)]).is_some_and(|s| s >= 0.4));
    assert_eq!(
        m.get("sonic_probe_repeated_opens_total", &[("comm", c), ("file_class", "model")]),
        Some(REQUESTS as f64)
    );
    assert_eq!(m.get("sonic_probe_mmap_churn_total", &[("comm", c)]), Some(REQUESTS as f64));
    assert_eq!(
        m.get("sonic_probe_file_opens_total", &[("comm", c), ("file_class", "model")]),
        Some(REQUESTS as f64)
    );
    let audio = [("comm", c), ("file_class", "audio")];
    assert_eq!(m.get("sonic_probe_small_reads_total", &audio), Some((REQUESTS * AUDIO_READS) as f64));
    assert_eq!(m.get("sonic_probe_read_size_bytes_count", &audio), Some((REQUESTS * AUDIO_READS) as f64));
    assert_eq!(
        m.get("sonic_probe_read_size_bytes_bucket", &[("comm", c), ("file_class", "audio"), ("le", "1024")]),
        Some((REQUESTS * AUDIO_READS) as f64)
    );
    assert_eq!(
        m.get("sonic_probe_read_size_bytes_bucket", &[("comm", c), ("file_class", "image"), ("le", "4096")]),
        Some(0.0),
        "the image is read in one 8 KiB call"
    );
    for (kind, n) in [
        ("futex_stall", 1),
        ("repeated_open", 1),
        ("small_reads", REQUESTS),
        ("mmap_churn", 1),
        ("syscall_errors", 1),
    ] {
        assert_eq!(m.get("sonic_probe_findings", &[("kind", kind)]), Some(n as f64), "{kind}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_healthy_twin_has_no_findings_at_all() {
    if !privileged("the_healthy_twin_has_no_findings_at_all") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("sim-h"));
    let w = sim("healthy", &dir);
    let (pid, comm) = (w.pid(), w.comm());
    let d = daemon_for(pid);
    assert!(w.go().success());
    let f = settled_findings(&d);
    assert!(f.is_empty(), "healthy twin: {f:#?}");
    let m = d.metrics();
    for s in m.matching("sonic_probe_findings", &[]) {
        assert_eq!(s.value, 0.0, "{:?}", s.labels);
    }
    // It did wait: idle workers for the whole run, and timed waits that timed out.
    assert!(m.errors("futex", &comm, "ETIMEDOUT") > 10, "{}", m.errors("futex", &comm, "ETIMEDOUT"));
    let long_waits = m.calls("futex", &comm) as f64
        - m.sum("sonic_probe_futex_wait_duration_seconds_bucket", &[("comm", &comm), ("le", "0.268435456")]);
    assert!(long_waits >= 4.0, "pool workers waited long: {long_waits}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_futex_wait_operation_is_a_stall_with_its_waker() {
    if !privileged("every_futex_wait_operation_is_a_stall_with_its_waker") {
        return;
    }
    for (op, name) in [
        ("wait", "FUTEX_WAIT_PRIVATE"),
        ("wait_bitset", "FUTEX_WAIT_BITSET_PRIVATE"),
        ("lock_pi", "FUTEX_LOCK_PI_PRIVATE"),
        ("lock_pi2", "FUTEX_LOCK_PI2_PRIVATE"),
        ("wait_requeue_pi", "FUTEX_WAIT_REQUEUE_PI_PRIVATE"),
        ("waitv", "futex_waitv"),
    ] {
        let comm = unique_name("stl");
        let w = Workload::start(Some(&comm), &["stall", op, "400"]);
        let pid = w.pid();
        let d = daemon_for(pid);
        assert!(w.go().success(), "{op}");
        let f = d.findings_when(|f| !f.is_empty());
        let stalls = of_kind(&f, "futex_stall");
        assert_eq!(stalls.len(), 1, "{op}: {f:#?}");
        let s = stalls[0];
        assert_eq!(s["op"], name, "{op}");
        assert_eq!((s["tid"].as_u64(), s["count"].as_u64()), (Some(u64::from(pid)), Some(1)), "{op}");
        assert_eq!(s["waker_thread"], "holder", "{op}: {s:#}");
        assert!(s["wait_seconds"].as_f64().unwrap() >= 0.39, "{op}: {s:#}");
        // Kernel-side op label of the wait.
        let label = if op == "waitv" { "waitv" } else { op };
        let m = d.metrics();
        assert_eq!(
            m.get("sonic_probe_futex_wait_duration_seconds_count", &[("comm", &comm), ("op", label)]),
            Some(1.0),
            "{op}"
        );
    }
}

#[test]
fn findings_command_prints_a_table_and_json() {
    if !privileged("findings_command_prints_a_table_and_json") {
        return;
    }
    let comm = unique_name("sfc");
    let w = Workload::start(Some(&comm), &["stall", "wait", "400"]);
    let d = daemon_for(w.pid());
    assert!(w.go().success());
    d.findings_when(|f| !f.is_empty());
    let url = format!("http://{}", d.addr);
    let bin = sonic_probe_tests::sonic_probe_bin();
    let table = Command::new(&bin).args(["findings", "--url", &url]).output().unwrap();
    assert!(table.status.success());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("KIND"), "{text}");
    assert!(text.contains("futex_stall") && text.contains("woken by holder"), "{text}");
    let json = Command::new(&bin).args(["findings", "--json", "--url", &url]).output().unwrap();
    let v: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["kind"], "futex_stall");
    for (args, code) in
        [(&["findings", "--url", "http://127.0.0.1:1"][..], 1), (&["findings", "--url", "nope"], 2)]
    {
        let o = Command::new(&bin).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
