//! Bad input and shutdown: one clear line and the right exit code for every
//! mistake, and no BPF program, link or map of ours left in the kernel
//! after any exit (SIGINT, SIGTERM, even SIGKILL).
//!
//! These tests look at the kernel's global list of BPF objects, so they run
//! one at a time (LOCK) and no other daemon of this binary runs meanwhile.

use std::{
    net::TcpListener,
    process::{Command, Output},
    sync::Mutex,
    time::{Duration, Instant},
};

use sonic_probe_tests::{privileged, sonic_probe_bin, Daemon};

static LOCK: Mutex<()> = Mutex::new(());

/// Our programs (bpftool shows their full BTF names) and maps (15 bytes max).
const OUR_PROGRAMS: &[&str] = &[
    "sys_enter",
    "sys_exit",
    "sched_process_fork",
    "sched_process_exec",
    "sched_process_exit",
    "task_rename",
    "sched_switch",
    "sched_wakeup",
    "sched_wakeup_new",
];
const OUR_MAPS: &[&str] =
    &["thread_states", "syscall_stats", "syscall_errors", "target_processe", "target_comms"];

/// How many of our programs and maps the kernel holds.
fn our_bpf_objects() -> usize {
    let count = |what: &str, names: &[&str]| {
        let out =
            Command::new("bpftool").args([what, "show"]).output().expect("bpftool (apt-get install bpftool)");
        assert!(out.status.success(), "bpftool {what} show failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| names.iter().any(|n| l.contains(&format!(" name {n} "))))
            .count()
    };
    let gpu = gpu_programs();
    let gpu: Vec<&str> = gpu.iter().map(String::as_str).collect();
    count("prog", OUR_PROGRAMS) + count("prog", &gpu) + count("map", OUR_MAPS)
}

/// The GPU uprobe programs, loaded with the rest and attached only to the
/// CUDA libraries the daemon finds (none here): one per api, and the
/// return program.
fn gpu_programs() -> Vec<String> {
    use sonic_probe_common::gpu_apis::{gpu_enter_program, GPU_APIS, GPU_EXIT_PROGRAM};
    GPU_APIS.iter().map(|a| gpu_enter_program(a.id)).chain([GPU_EXIT_PROGRAM.to_string()]).collect()
}

/// Waits (the kernel frees objects after the last fd closes) until the
/// kernel holds no more of ours than `baseline` (other daemons on the host).
fn assert_back_to(baseline: usize, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while our_bpf_objects() > baseline {
        assert!(Instant::now() < deadline, "{context}: BPF objects left:\n{}", bpftool_dump());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (kind, id) of every BPF program, map and link a process holds an fd of.
fn bpf_ids_held_by(pid: u32) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        for line in text.lines() {
            for kind in ["prog", "map", "link"] {
                if let Some(id) = line.strip_prefix(&format!("{kind}_id:")) {
                    let key = (kind.to_string(), id.trim().parse().unwrap());
                    if !out.contains(&key) {
                        out.push(key);
                    }
                }
            }
        }
    }
    out
}

fn bpf_object_exists(kind: &str, id: u32) -> bool {
    let out = Command::new("bpftool").args([kind, "show", "id", &id.to_string()]).output().unwrap();
    out.status.success()
}

fn bpftool_dump() -> String {
    let p = Command::new("bpftool").args(["prog", "show"]).output().unwrap();
    String::from_utf8_lossy(&p.stdout).into_owned()
}

fn stderr_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr).lines().filter(|l| !l.trim().is_empty()).map(String::from).collect()
}

/// One row of docs/bad-input.md.
struct Row {
    number: u32,
    args: String,
    exit: i32,
    says: String,
}

fn bad_input_table() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/bad-input.md")).unwrap();
    doc.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            // | # | `arguments` | exit | says |
            let number = cols.get(1)?.parse().ok()?;
            Some(Row {
                number,
                args: cols[2].trim_matches('`').to_string(),
                exit: cols[3].parse().ok()?,
                says: cols[4].to_string(),
            })
        })
        .collect()
}

#[test]
fn every_bad_input_of_the_table() {
    if !privileged("every_bad_input_of_the_table") {
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let rows = bad_input_table();
    assert!(rows.len() >= 25, "docs/bad-input.md lists {} bad inputs", rows.len());
    let baseline = our_bpf_objects();

    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().to_string();
    gone.wait().unwrap();
    let dir = std::env::temp_dir().join(sonic_probe_tests::unique_name("bad"));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("unknown.toml", "listen = \"127.0.0.1:9580\"\nstall_treshold = \"1s\"\n"),
        ("baddur.toml", "# comment\nslow_threshold = \"fast\"\n"),
        ("badsize.toml", "ringbuf_size = \"big\"\n"),
        ("malformed.toml", "listen = [\n"),
        ("badpid.toml", "pid = [\"x\"]\n"),
        ("plainpass.yml", "basic_auth_users:\n  alice: secret\n"),
        ("nokey.yml", "tls_server_config:\n  cert_file: server.crt\n"),
        ("tls10.yml", "tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n  min_version: TLS10\n"),
        ("typo.yml", "basic_auth_user:\n  alice: x\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let dir_s = dir.to_str().unwrap().to_string();

    for row in &rows {
        let args =
            row.args.replace("{busy}", &busy_addr).replace("{gone}", &gone_pid).replace("{dir}", &dir_s);
        let mut words: Vec<&str> = args.split_whitespace().collect();
        let mut cmd = if words.first() == Some(&"{nopriv}") {
            words.remove(0);
            // Root with an empty bounding set execs with no capabilities at all.
            let mut c = Command::new("setpriv");
            c.args(["--bounding-set=-all", "--inh-caps=-all", "--"]).arg(sonic_probe_bin());
            c
        } else if words.first() == Some(&"{badfallback}") {
            words.remove(0);
            let mut c = Command::new(sonic_probe_bin());
            c.env("SONIC_PROBE_FALLBACK", "bogus");
            c
        } else {
            Command::new(sonic_probe_bin())
        };
        // A run that got past its checks must not take the default port.
        let extra: &[&str] = if words.first() == Some(&"run") && !words.contains(&"--listen") {
            &["--listen", "127.0.0.1:0"]
        } else {
            &[]
        };
        let o = cmd.args(&words).args(extra).output().unwrap();
        let lines = stderr_lines(&o);
        let n = row.number;
        assert_eq!(o.status.code(), Some(row.exit), "row {n} ({args}): {lines:?}");
        assert_eq!(lines.len(), 1, "row {n} ({args}) should print one line: {lines:?}");
        assert!(lines[0].starts_with("sonic-probe: error: "), "row {n}: {:?}", lines[0]);
        assert!(lines[0].contains(&row.says), "row {n} ({args}): {:?} lacks {:?}", lines[0], row.says);
        assert_back_to(baseline, &format!("row {n} ({args})"));
    }
    drop(busy);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_privileges_are_one_clear_line() {
    if !privileged("missing_privileges_are_one_clear_line") {
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let baseline = our_bpf_objects();
    // Root with an empty bounding set execs with no capabilities at all.
    let o = Command::new("setpriv")
        .args(["--bounding-set=-all", "--inh-caps=-all", "--"])
        .arg(sonic_probe_bin())
        .args(["run", "--listen", "127.0.0.1:0"])
        .output()
        .expect("setpriv (util-linux)");
    let lines = stderr_lines(&o);
    assert_eq!(o.status.code(), Some(1), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("missing privileges") && lines[0].contains("CAP_BPF"), "{lines:?}");
    assert_back_to(baseline, "without privileges");
}

#[test]
fn every_way_of_stopping_detaches_everything() {
    if !privileged("every_way_of_stopping_detaches_everything") {
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for (signal, clean) in [(libc::SIGINT, true), (libc::SIGTERM, true), (libc::SIGKILL, false)] {
        let d = Daemon::start(&[]);
        let ids = bpf_ids_held_by(d.pid());
        let count = |kind: &str| ids.iter().filter(|(k, _)| k == kind).count();
        assert_eq!(count("prog"), OUR_PROGRAMS.len() + gpu_programs().len(), "{ids:?}");
        assert_eq!(count("link"), OUR_PROGRAMS.len(), "{ids:?}");
        assert!(count("map") >= OUR_MAPS.len(), "{ids:?}");
        let status = d.stop_with(signal);
        if clean {
            assert_eq!(status.code(), Some(0), "signal {signal}");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left: Vec<_> = ids.iter().filter(|(kind, id)| bpf_object_exists(kind, *id)).collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "after signal {signal}, still in the kernel: {left:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
