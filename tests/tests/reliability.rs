//! Reliability under abuse: floods through a tiny ring buffer, churn of
//! thousands of processes, pid reuse, targets that come and go, and HTTP
//! clients that misbehave. A daemon on every GPU node must keep working,
//! stay bounded and lose nothing silently; these tests check each claim on
//! the real programs with exact numbers.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use sonic_probe_tests::{
    bench_bin, http_request, privileged, rss_bytes, unique_name,
    workload::{exact, spawn},
    Daemon, Metrics, Workload,
};

/// Scrapes until `done` holds (the reader drains the ring buffer every few
/// milliseconds, the target set is updated at exit), or fails with the last
/// scrape.
fn metrics_when(d: &Daemon, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = d.metrics();
        if done(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; last scrape:\n{}", m.text);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads of `comm` from devices and pipes (file_class="not_file"): the
/// workload's reads of /dev/zero and its go read, without the variable
/// number of /proc/self/maps reads the Rust runtime makes as threads come
/// and go (file_class="other").
fn device_reads(m: &Metrics, comm: &str) -> u64 {
    m.sum("sonic_probe_read_size_bytes_count", &[("comm", comm), ("file_class", "not_file")]) as u64
}

fn events_received(m: &Metrics) -> u64 {
    m.sum("sonic_probe_events_total", &[]) as u64
}

fn dropped(m: &Metrics, stage: &str) -> u64 {
    m.sum("sonic_probe_events_dropped_total", &[("stage", stage)]) as u64
}

fn produced(m: &Metrics) -> u64 {
    m.get("sonic_probe_events_produced_total", &[]).expect("events_produced_total") as u64
}

fn map_entries(m: &Metrics, map: &str) -> u64 {
    m.get("sonic_probe_kernel_map_entries", &[("map", map)]).unwrap_or_else(|| panic!("no {map} entries"))
        as u64
}

#[test]
fn a_flood_through_a_tiny_ring_buffer_is_accounted_exactly() {
    if !privileged("a_flood_through_a_tiny_ring_buffer_is_accounted_exactly") {
        return;
    }
    // Every read-write openat sends its path: 300000 of them cannot fit
    // through a 4 KiB ring buffer, so the kernel drops some, and counts
    // each one.
    const OPENS: u64 = 300_000;
    let w = Workload::start_command(
        Command::new(bench_bin()),
        None,
        &["openat-rw", &OPENS.to_string(), "--wait"],
    );
    // No slow-call or stall events (the go read and the thread join are
    // slow) and no large-map events (the thread's malloc arena): only the
    // path events and the exit, so that `produced` is known exactly.
    let pid = w.pid().to_string();
    let d = Daemon::start(&[
        "--pid",
        &pid,
        "--ringbuf-size",
        "4KiB",
        "--slow-threshold",
        "1h",
        "--stall-threshold",
        "1h",
        "--large-map-threshold",
        "1GiB",
    ]);
    assert!(w.go().success());
    let m = metrics_when(&d, "the ring buffer drained", |m| {
        events_received(m) + dropped(m, "ringbuf") == produced(m) && m.calls("openat", "sp-bench") > 0
    });
    let lost = dropped(&m, "ringbuf");
    assert!(lost > 0, "a 4 KiB ring buffer should have overflowed: {}", m.text);
    assert!(events_received(&m) > 0);
    // The daemon's queue kept up, and decoded everything it got.
    assert_eq!(dropped(&m, "user_queue"), 0);
    assert_eq!(m.get("sonic_probe_event_decode_errors_total", &[]), Some(0.0));
    // Counts never depend on the ring buffer: the benchmark's own open of
    // its file (O_CREAT) plus the loop, exactly, losses or not.
    assert_eq!(m.calls("openat", "sp-bench"), OPENS + 1);
    // What the kernel tried to send: a path event per openat and the
    // process's exit, exactly.
    assert_eq!(produced(&m), OPENS + 1 + 1);
    assert!(d.stop().success());
}

#[test]
fn ten_thousand_short_lived_processes_and_threads_leave_nothing_behind() {
    if !privileged("ten_thousand_short_lived_processes_and_threads_leave_nothing_behind") {
        return;
    }
    // The whole host is watched, and every one of the 10000 is a target
    // while it lives. Kernel maps (keyed by name, by descriptor, by target
    // process) and the daemon's memory must come back to where they were.
    // (Every name on the host gets its own label, so that the names that
    // appear meanwhile can be counted: see below.) Without stack captures:
    // watching the whole host, the capturer reads the stacks of any
    // process whose main thread waits on a futex for a second (this test
    // binary's own harness, a build's jobserver), and the memory of such a
    // capture is not what this test measures (stacks.rs measures it for the
    // captures it makes); once, on a CI run, one during the test left the
    // daemon's resident size 28 MiB up.
    let name = unique_name("spn");
    let d = Daemon::start(&["--max-comms", "100000", "--stack-captures", "off"]);
    let settle = |what: &str| {
        // Descriptor tables of exited processes are swept every second.
        std::thread::sleep(Duration::from_secs(3));
        let m = d.metrics();
        eprintln!(
            "{what}: syscall_stats {} syscall_errors {} open_files {} rss {} KiB",
            map_entries(&m, "syscall_stats"),
            map_entries(&m, "syscall_errors"),
            map_entries(&m, "open_files"),
            rss_bytes(d.pid()) / 1024
        );
        m
    };
    // Warm up: the first scrapes and sweeps allocate what they keep.
    let warm = Workload::start(Some(&name), &["spawn", "200", "200", "2"]);
    assert!(warm.go().success());
    let before = settle("before");
    let rss_before = rss_bytes(d.pid());

    const THREADS: u64 = 5000;
    const FORKS: u64 = 5000;
    const READS: u64 = 3;
    let w = Workload::start(
        Some(&name),
        &["spawn", &THREADS.to_string(), &FORKS.to_string(), &READS.to_string()],
    );
    assert!(w.go().success());
    let m = d.metrics();
    // Exact through the churn, each call under its name: warm-up and the
    // 10000, plus the two go reads.
    assert_eq!(device_reads(&m, &name), spawn::reads(200, 200, 2) + spawn::reads(THREADS, FORKS, READS) + 2);
    for s in m.matching("sonic_probe_events_dropped_total", &[]) {
        assert_eq!(s.value, 0.0, "{:?}", s.labels);
    }
    assert_eq!(m.sum("sonic_probe_aggregation_overflow_total", &[]), 0.0, "no call fell back to \"other\"");

    let after = settle("after");
    // The 10000 add nothing: syscall entries are keyed by process name
    // (theirs was there after the warm-up), descriptors and per-thread state
    // go at exit. What grows is the rest of the host's meanwhile: new process
    // names (this binary's other tests, compilers of a build running
    // alongside: 0 to 20 of them here), each with at most 25 syscall_stats
    // entries (14 futex commands, 6 file classes of read, 5 other calls) and
    // in practice a few errno entries; and the files busy processes hold open
    // at that moment. Measured on the 2-core machine: +1 to +165
    // syscall_stats entries (about 8 per new name), +0 to +33 syscall_errors,
    // open_files -3 to +21, thread_states alike. A leak per process or thread
    // would be thousands.
    let names = |m: &Metrics| -> std::collections::BTreeSet<String> {
        m.matching("sonic_probe_syscall_duration_seconds_count", &[])
            .map(|s| s.labels["comm"].clone())
            .collect()
    };
    let new_names = names(&after).difference(&names(&before)).count() as u64;
    assert!(!names(&after).contains("other"), "a name without a label: the count of new names is short");
    let mut maps = vec![
        ("syscall_stats", 16 + 25 * new_names),
        ("syscall_errors", 8 + 10 * new_names),
        ("open_files", 64),
    ];
    // Per-thread state is a map of its own where the kernel lacks task
    // storage (or SONIC_PROBE_FALLBACK=entry_state): freed at thread exit.
    let thread_map =
        after.get("sonic_probe_bpf_variant", &[("piece", "entry_state"), ("variant", "thread_map")]);
    if thread_map == Some(1.0) {
        maps.push(("thread_states", 64));
    }
    eprintln!("{new_names} new process names meanwhile");
    for (map, noise) in maps {
        let (b, a) = (map_entries(&before, map), map_entries(&after, map));
        assert!(
            a <= b + noise,
            "{map}: {b} entries before, {a} after 10000 processes ({new_names} new names meanwhile)"
        );
    }
    // Measured: +0.3 to +2.6 MiB (debug and release builds), from what the
    // sweeps, the scrapes and the new names' labels keep; allowed twice that.
    // 10000 processes' worth of state would be more.
    let rss_after = rss_bytes(d.pid());
    assert!(
        rss_after <= rss_before + (6 << 20),
        "daemon memory {} KiB before, {} KiB after",
        rss_before / 1024,
        rss_after / 1024
    );
    assert!(d.stop().success());
}

#[test]
fn a_reused_pid_is_never_counted_under_the_old_name() {
    if !privileged("a_reused_pid_is_never_counted_under_the_old_name") {
        return;
    }
    // Verbose: `exact` fails each call once, at start-up, which only the
    // verbose findings list (docs/metrics.md, "What is not a finding").
    let d = Daemon::start(&["--findings-verbose"]);
    // The old process runs `exact` (failed openat, read and mmap calls:
    // three syscall_errors findings under its name), exits, and its pid is
    // handed out again at once (ns_last_pid) to a new process that does the
    // same under another name.
    let (old_name, new_name) = (unique_name("spo"), unique_name("spr"));
    let old = Workload::start(Some(&old_name), &["exact"]);
    let pid = old.pid();
    assert!(old.go().success());
    let mut new = None;
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).expect("write ns_last_pid");
        let w = Workload::start(Some(&new_name), &["exact"]);
        if w.pid() == pid {
            new = Some(w);
            break;
        }
        // Another process on the host took it first; try again. (The try is
        // killed in its go read, which then never completes: not counted.)
    }
    let new = new.expect("could not get the old pid again in 50 tries");
    assert!(new.go().success());
    // The whole host is watched from before both started: each name has the
    // known calls and its go read, exactly.
    let m = d.metrics();
    for name in [&old_name, &new_name] {
        assert_eq!(m.calls("read", name), exact::READ + 1, "{name}");
        assert_eq!(m.calls("openat", name), exact::OPENAT, "{name}");
        assert_eq!(m.errors("openat", name, "ENOENT"), exact::ENOENT_OPENS, "{name}");
    }
    // The findings engine keys processes by pid too: each process's failures
    // are a finding of its own under its own name, the old one's unchanged.
    // (Were the new process taken for the old, its failures would add to the
    // old findings, under the old name.)
    let errors = [
        ("openat", "ENOENT", exact::ENOENT_OPENS),
        ("read", "EBADF", exact::READS_EBADF),
        ("mmap", "EINVAL", exact::MMAP_EINVAL),
    ];
    let of_pid = |f: &[serde_json::Value]| -> Vec<serde_json::Value> {
        f.iter().filter(|f| f["pid"] == pid).cloned().collect()
    };
    let f = of_pid(&d.findings_when(|f| of_pid(f).len() >= 2 * errors.len()));
    for (syscall, errno, count) in errors {
        let mut got: Vec<(String, u64)> = f
            .iter()
            .filter(|f| f["kind"] == "syscall_errors" && f["syscall"] == syscall && f["errno"] == errno)
            .map(|f| (f["comm"].as_str().unwrap_or("").to_string(), f["count"].as_u64().unwrap_or(0)))
            .collect();
        got.sort();
        let mut want = vec![(old_name.clone(), count), (new_name.clone(), count)];
        want.sort();
        assert_eq!(got, want, "{syscall} {errno} findings of pid {pid}: {f:#?}");
    }
    assert_eq!(f.len(), 2 * errors.len(), "nothing else for pid {pid}: {f:#?}");
    let old_open = f.iter().find(|f| f["comm"] == old_name.as_str() && f["syscall"] == "openat").unwrap();
    assert_eq!(old_open["paths"], serde_json::json!([exact::MISSING_PATH]));
    assert!(d.stop().success());
}

#[test]
fn a_pid_target_that_exits_is_reported_and_the_daemon_keeps_serving() {
    if !privileged("a_pid_target_that_exits_is_reported_and_the_daemon_keeps_serving") {
        return;
    }
    let name = unique_name("spe");
    let w = Workload::start(Some(&name), &["idle"]);
    let pid = w.pid();
    let mut d = Daemon::start(&["--pid", &pid.to_string()]);
    assert_eq!(d.metrics().get("sonic_probe_target_processes", &[]), Some(1.0));
    assert!(w.go().success());
    let line = d.wait_for_log(&format!("target process {pid} ({name}) exited with status 0"));
    assert!(line.contains("still watching"), "{line}");
    metrics_when(&d, "the target set emptied", |m| m.get("sonic_probe_target_processes", &[]) == Some(0.0));
    assert_eq!(d.get("/healthz").0, 200);
    assert!(d.stop().success());
}

#[test]
fn processes_entering_a_cgroup_target_later_are_picked_up() {
    if !privileged("processes_entering_a_cgroup_target_later_are_picked_up") {
        return;
    }
    let mount =
        sonic_probe_tests::cgroup2_mount().expect("no cgroup2 mount: the cgroup target needs cgroup v2");
    let name = unique_name("spl");
    let cgroup = mount.join(&name);
    std::fs::create_dir_all(&cgroup).expect("create a test cgroup");
    let _cleanup = sonic_probe_tests::RemoveCgroups(vec![cgroup.clone()]);
    let d = Daemon::start(&["--cgroup", cgroup.to_str().unwrap()]);
    // Empty when the daemon started; one process moved in afterwards, one
    // started inside it afterwards (a service restart). The moved one's go
    // read began before it was a target, so only its thread's 5 reads count;
    // the other's 9 and its go read do.
    let moved = Workload::start(Some(&name), &["spawn", "1", "0", "5"]);
    std::fs::write(cgroup.join("cgroup.procs"), moved.pid().to_string()).expect("move into the cgroup");
    assert!(moved.go().success());
    let mut cmd = Command::new(sonic_probe_tests::workload_bin());
    let procs = cgroup.join("cgroup.procs");
    // SAFETY: pre_exec runs in the child between fork and exec; it only
    // writes to a file.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || std::fs::write(&procs, "0"));
    }
    let started = Workload::start_command(cmd, Some(&name), &["spawn", "1", "0", "9"]);
    assert!(started.go().success());
    assert_eq!(device_reads(&d.metrics(), &name), 5 + 9 + 1);
    drop(d);
}

#[test]
fn only_get_and_head_on_known_paths() {
    if !privileged("only_get_and_head_on_known_paths") {
        return;
    }
    let d = Daemon::start(&["--pid", "1"]);
    for path in ["/metrics", "/healthz", "/findings", "/"] {
        assert_eq!(http_request(d.addr, "GET", path).0, 200, "GET {path}");
        assert_eq!(http_request(d.addr, "HEAD", path).0, 200, "HEAD {path}");
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            assert_eq!(http_request(d.addr, method, path).0, 405, "{method} {path}");
        }
    }
    for path in ["/nope", "/metrics/x", "/../etc/passwd"] {
        assert_eq!(http_request(d.addr, "GET", path).0, 404, "GET {path}");
    }
    // The query string is not part of the path (scrapers may add one).
    assert_eq!(http_request(d.addr, "GET", "/metrics?x=1x").0, 200);
    assert!(d.stop().success());
}

#[test]
fn oversized_request_heads_are_refused() {
    if !privileged("oversized_request_heads_are_refused") {
        return;
    }
    let d = Daemon::start(&["--pid", "1"]);
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let big = "a".repeat(64 * 1024);
    // The server may close while we still write: that is a refusal too.
    let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 431"), "answer to a 64 KiB head: {text:.200}");
    assert!(!text.contains("sonic_probe_"), "a 64 KiB head was served");
    // And the daemon is fine.
    assert_eq!(d.get("/healthz").0, 200);
    assert!(d.stop().success());
}

#[test]
fn a_slow_client_is_cut_off() {
    if !privileged("a_slow_client_is_cut_off") {
        return;
    }
    let d = Daemon::start(&["--pid", "1"]);
    let mut slow = TcpStream::connect(d.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Half a request head, then nothing (slowloris).
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n").unwrap();
    let start = Instant::now();
    // Others are served meanwhile.
    assert_eq!(d.get("/healthz").0, 200);
    let mut out = Vec::new();
    let _ = slow.read_to_end(&mut out);
    let waited = start.elapsed();
    let text = String::from_utf8_lossy(&out);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "answer to a slow client: {text:.200}");
    // Closed after the header timeout (5 s), not kept forever.
    assert!(waited >= Duration::from_secs(4) && waited < Duration::from_secs(15), "closed after {waited:?}");
    assert!(d.stop().success());
}

#[test]
fn idle_connections_in_every_slot_do_not_hold_up_a_scrape() {
    if !privileged("idle_connections_in_every_slot_do_not_hold_up_a_scrape") {
        return;
    }
    let d = Daemon::start(&["--pid", "1"]);
    // More connections than the daemon serves at once (64), each sending
    // nothing or half a request head and then waiting.
    let idle: Vec<TcpStream> = (0..80)
        .map(|i| {
            let mut s = TcpStream::connect(d.addr).unwrap();
            if i % 2 == 1 {
                s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            }
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // The idle ones are closed to make room: a scrape doesn't wait for
    // their header timeout (5 s).
    let start = Instant::now();
    for _ in 0..3 {
        assert_eq!(d.get("/healthz").0, 200);
    }
    let (status, _) = d.get("/metrics");
    assert_eq!(status, 200);
    assert!(start.elapsed() < Duration::from_secs(3), "served after {:?}", start.elapsed());
    drop(idle);
    assert!(d.stop().success());
}

#[test]
fn fifty_concurrent_scrapes_while_the_probes_see_a_flood_of_calls() {
    if !privileged("fifty_concurrent_scrapes_while_the_probes_see_a_flood_of_calls") {
        return;
    }
    // Two threads reading as fast as they can: on the 2-CPU test machines
    // that is about a million traced calls per second.
    const READS: u64 = 2_000_000;
    let w = Workload::start_command(
        Command::new(bench_bin()),
        None,
        &["read", &READS.to_string(), "--threads", "2", "--wait"],
    );
    // The flood's main thread waits in pthread_join for over a second: a
    // stall, whose stack capture (reading the symbols of the debug build of
    // sp-bench, transiently tens of MiB) would be measured here too. What
    // is measured is what scrapes cost; a capture's memory is checked in
    // stacks.rs.
    let d = Daemon::start(&["--pid", &w.pid().to_string(), "--stack-captures", "off"]);
    let rss_before = rss_bytes(d.pid());
    let addr = d.addr;
    let bench = std::thread::spawn(move || {
        let start = Instant::now();
        assert!(w.go().success());
        start.elapsed()
    });
    let scrapers: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || {
                // The reads each scrape saw.
                (0..5)
                    .map(|_| {
                        let (status, body) = http_request(addr, "GET", "/metrics");
                        assert_eq!(status, 200);
                        Metrics::parse(&body).calls("read", "sp-bench")
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let seen: Vec<u64> = scrapers.into_iter().flat_map(|s| s.join().expect("a scraper failed")).collect();
    let took = bench.join().unwrap();
    assert_eq!(seen.len(), 250);
    // A scrape that saw some of the reads but not all of them ran while the
    // flood did: most do (the flood lasts seconds, 250 scrapes take about
    // as long), and at least a fifth must, or they did not overlap.
    let during = seen.iter().filter(|&&n| n > 0 && n < 2 * READS).count();
    eprintln!(
        "{} traced reads in {took:?} ({:.0}/s) under 250 scrapes, {during} of them during the flood",
        2 * READS,
        (2 * READS) as f64 / took.as_secs_f64()
    );
    assert!(during >= 50, "only {during} of 250 scrapes ran during the flood: {seen:?}");
    let m = d.metrics();
    assert_eq!(m.calls("read", "sp-bench"), 2 * READS, "exact under load");
    let rss_after = rss_bytes(d.pid());
    eprintln!("daemon RSS {} KiB before, {} KiB after", rss_before / 1024, rss_after / 1024);
    // The documented figure is 30 MiB resident at steady state (release
    // build, docs/performance.md), with a target of at most 64 MiB. Measured
    // here: the debug build the tests run 31 MiB before (the memory freed
    // after loading the kernel's BTF is handed back to the kernel at attach),
    // 47-48 MiB after 250 scrapes under the flood (+16-17 MiB: 50 bodies
    // rendered at once, each series with its comm and workload labels). The
    // target holds, and what the scrapes add is bounded.
    assert!(
        rss_after <= 64 << 20 && rss_after <= rss_before + (20 << 20),
        "daemon RSS {} KiB before, {} KiB after the scrapes",
        rss_before / 1024,
        rss_after / 1024
    );
    assert!(d.stop().success());
}
