//! Where each watched thread's time goes (sonic_probe_thread_seconds_total),
//! against the kernel's own per-thread accounting and the workload's known
//! numbers: on-CPU and run-queue time against /proc/PID/task/TID/schedstat
//! (sum_exec_runtime, run_delay: the scheduler's counts, not our
//! programs'), blocked time by cause against what each thread measured
//! around its blocking calls, and every state of a thread adding up to its
//! life.

use sonic_probe::threads::STATES;
use sonic_probe_tests::{privileged, schedstat, unique_name, Daemon, Metrics, Workload};

const THREAD_SECONDS: &str = "sonic_probe_thread_seconds_total";

/// One thread line of sp-workload cpu/blocked: name, tid, start and end
/// (CLOCK_MONOTONIC ns), what it measured around its blocking calls, and
/// when its parent was about to spawn it.
struct ThreadLine {
    name: String,
    tid: u32,
    life_s: f64,
    blocked_s: f64,
    /// From just before its parent spawned it to its end (blocked only).
    spawned_s: f64,
    /// The kernel's count of its time on and waiting for a CPU around its
    /// calls (blocked only).
    busy_s: f64,
}

fn thread_lines(lines: &[String]) -> Vec<ThreadLine> {
    lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"thread")).then(|| {
                let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                ThreadLine {
                    name: f[1].to_string(),
                    tid: n(2) as u32,
                    life_s: (n(4) - n(3)) as f64 / 1e9,
                    blocked_s: n(5) as f64 / 1e9,
                    spawned_s: n(4).saturating_sub(n(6)) as f64 / 1e9,
                    busy_s: n(7) as f64 / 1e9,
                }
            })
        })
        .collect()
}

/// Seconds a thread name of process name `comm` spent in `state`.
fn state_s(m: &Metrics, comm: &str, thread: &str, state: &str) -> f64 {
    m.sum(THREAD_SECONDS, &[("comm", comm), ("thread", thread), ("state", state)])
}

/// Every state of a thread name, added up.
fn all_states_s(m: &Metrics, comm: &str, thread: &str) -> f64 {
    m.sum(THREAD_SECONDS, &[("comm", comm), ("thread", thread)])
}

/// Seconds CPU `cpu` spent in interrupts and stolen by the hypervisor
/// (/proc/stat: irq, softirq, steal), which the kernel's task clock, and so
/// sum_exec_runtime, leaves out.
fn cpu_not_task_s(cpu: usize) -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().find(|l| l.starts_with(&format!("cpu{cpu} "))).expect("cpu line");
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f.get(5).unwrap_or(&0.0) + f.get(6).unwrap_or(&0.0) + f.get(7).unwrap_or(&0.0)) / hz
}

/// Waits until thread `tid` is blocked in read(2) and off its CPU (its
/// last stretch on it accounted by both sides), then 20 ms more.
fn wait_blocked_in_read(pid: u32, tid: u32) {
    let task = format!("/proc/{pid}/task/{tid}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let syscall = std::fs::read_to_string(format!("{task}/syscall")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
        // The state follows the name in parentheses.
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        if syscall.starts_with("0 ") && state == Some('S') {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{task} never blocked in read: {syscall:?} {stat:?}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
}

/// |ours - theirs| within 2 % of theirs, and `more` seconds.
fn assert_close(what: &str, ours: f64, theirs: f64, more: f64) {
    let slack = 0.02 * theirs + more;
    assert!(
        (ours - theirs).abs() <= slack,
        "{what}: sonic-probe {ours:.4} s, kernel {theirs:.4} s (allowed {slack:.4} s apart)"
    );
}

/// The tests here run one at a time: each is the other's noise.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two CPU-bound threads pinned to one CPU for 3 s share it (each about
/// half on CPU, half waiting), a third alone on another CPU hardly waits:
/// over that interval each thread's on_cpu and runqueue grow as the
/// kernel's sum_exec_runtime and run_delay do. (An interval between two
/// readings with the threads named and blocked: the time before a thread
/// takes its name counts under the name it had.)
#[test]
fn on_cpu_and_runqueue_time_are_the_kernels_own() {
    if !privileged("on_cpu_and_runqueue_time_are_the_kernels_own") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs 2 CPUs");
        return;
    }
    let comm = unique_name("spt");
    let mut w = Workload::start(Some(&comm), &["cpu", "3"]);
    let d = Daemon::start(&["--pid", &w.pid().to_string()]);
    let named = w.go_until("named");
    assert_eq!(named.len(), 3, "spin_a, spin_b, solo: {named:?}");
    let pid = w.pid();
    let read = |m: &Metrics, t: &ThreadLine| {
        let kernel = schedstat(pid, t.tid);
        let ours = (state_s(m, &comm, &t.name, "on_cpu"), state_s(m, &comm, &t.name, "runqueue"));
        (kernel, ours)
    };
    let before_threads = thread_lines(&named);
    for t in &before_threads {
        wait_blocked_in_read(pid, t.tid);
    }
    let m = d.metrics();
    let before: Vec<_> = before_threads.iter().map(|t| read(&m, t)).collect();
    let not_task_before = [cpu_not_task_s(0), cpu_not_task_s(1)];
    let threads = thread_lines(&w.go_until("parked"));
    assert_eq!(threads.len(), 3, "spin_a, spin_b, solo");
    for t in &threads {
        wait_blocked_in_read(pid, t.tid);
    }
    let m = d.metrics();
    let not_task = [cpu_not_task_s(0) - not_task_before[0], cpu_not_task_s(1) - not_task_before[1]];
    for (t0, (kernel0, ours0)) in before_threads.iter().zip(&before) {
        let t = threads.iter().find(|t| t.tid == t0.tid).expect("the same threads");
        let (kernel, ours) = read(&m, t);
        let on_cpu = (ours.0 - ours0.0, kernel.0 - kernel0.0);
        let runqueue = (ours.1 - ours0.1, kernel.1 - kernel0.1);
        // Where the kernel's conventions differ from a stopwatch: its on-CPU
        // time leaves out the interrupts and the hypervisor's steal while
        // the thread ran (what /proc/stat counted of them on its CPU, at
        // most, in 10 ms ticks), and a thread preempted by a wake-up waits, in
        // its run_delay, from the wake-up (the clock is not read again
        // until the switch) where ours starts at the switch: 2 ms, and for
        // the wait 1 % of the interval more (solo's "near 0" is 0.05-0.2 s
        // beside other tests). Under qemu's TCG a wake-up reaches another
        // CPU late (its vCPUs take turns in one host thread): 3 %. The
        // direction is asserted too: ours is the larger on CPU, the kernel's
        // the larger waiting.
        let interval = t.life_s;
        let tcg = std::env::var_os("SONIC_PROBE_UNDER_TCG").is_some();
        let wait_slack = if tcg { 0.03 } else { 0.01 } * interval;
        let cpu = if t.name == "solo" { 1 } else { 0 };
        let what = format!("{} on_cpu (CPU {cpu} in interrupts or stolen {:.3} s)", t.name, not_task[cpu]);
        assert_close(&what, on_cpu.0, on_cpu.1, 0.002 + not_task[cpu] + 0.01);
        assert_close(&format!("{} runqueue", t.name), runqueue.0, runqueue.1, 0.002 + wait_slack);
        // Under TCG the guest's scheduler clock (the TSC, calibrated
        // against an emulated timer) and its monotonic clock (ours) run at
        // rates that differ by up to a percent or two (seen: 1.4998 s ours
        // against the kernel's 1.5039 s of a 1.5 s spin on 6.1; 1.3954 s
        // against 1.4161 s on 5.10, whose guest refines its TSC
        // calibration after boot): the direction holds within that.
        let rate_slack = if tcg { 0.02 * interval } else { 0.0 };
        assert!(on_cpu.0 >= on_cpu.1 - 0.002 - rate_slack, "{}: on_cpu {on_cpu:?}", t.name);
        assert!(runqueue.0 <= runqueue.1 + 0.002 + rate_slack, "{}: runqueue {runqueue:?}", t.name);
        // The workload's own numbers: spinning, a thread is on CPU or
        // waiting for it; the pair shares CPU 0, solo has CPU 1 (how much
        // of it depends on what else the machine runs).
        // Every nanosecond in one state: spinning, a thread is on CPU or
        // waiting for one, from the wake-up that started it to its block
        // (a little more than it measured itself).
        let running = on_cpu.0 + runqueue.0;
        assert!(
            running >= t.life_s && running <= 1.005 * t.life_s,
            "{}: on CPU or waiting {running:.4} s, it spun {:.4} s",
            t.name,
            t.life_s
        );
        if t.name != "solo" {
            assert!(
                on_cpu.0 > 0.25 * t.life_s && runqueue.0 > 0.25 * t.life_s,
                "{}: {on_cpu:?} {runqueue:?}",
                t.name
            );
        }
    }
    assert_eq!(m.sum("sonic_probe_events_dropped_total", &[("stage", "thread_clock")]), 0.0);
    assert_eq!(m.sum("sonic_probe_aggregation_overflow_total", &[("map", "thread_time_slots")]), 0.0);
}

/// A thread woken from each of its sleeps waits in the run queue until it
/// runs, from its wake-up to its switch: `sp-workload woken` has "napper"
/// (nice 19) sleep 100 x 10 ms on CPU 0, which "hog" (nice 0) keeps busy,
/// so that after each wake-up it waits for the hog's slice to end (it
/// never preempts the hog). The oracles are the thread's own clock (each
/// nanosleep returns late by its wait for the CPU, and by little else: a
/// timer slack of 1 ns, the timer interrupt's latency and the call's own
/// instructions on CPU) and the kernel's run_delay. (The kernel's split of
/// a wake-up that does preempt is not this one's: its clock is not read
/// again between that wake-up and the switch, so that the woken thread's
/// wait is its time on CPU there and the preempted thread's last stretch
/// on CPU its wait; ours are at the switch. That is why this thread never
/// preempts.)
#[test]
fn a_woken_thread_waits_in_the_run_queue_until_it_runs() {
    if !privileged("a_woken_thread_waits_in_the_run_queue_until_it_runs") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const NAPS: f64 = 100.0;
    let comm = unique_name("spw");
    let mut w = Workload::start(Some(&comm), &["woken", "100", "10"]);
    let d = Daemon::start(&["--pid", &w.pid().to_string()]);
    let pid = w.pid();
    let named = w.go_until("named");
    let tid: u32 = named
        .iter()
        .find_map(|l| l.strip_prefix("thread napper "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no napper: {named:?}"));
    let states = |m: &Metrics| STATES.map(|s| state_s(m, &comm, "napper", s));
    wait_blocked_in_read(pid, tid);
    let (m0, kernel0) = (d.metrics(), schedstat(pid, tid));
    let lines = w.go_until("parked");
    wait_blocked_in_read(pid, tid);
    let (m1, kernel1) = (d.metrics(), schedstat(pid, tid));
    let line = lines.iter().find(|l| l.starts_with("thread napper ")).expect("the napper's line");
    let f: Vec<u64> = line.split_whitespace().skip(2).filter_map(|v| v.parse().ok()).collect();
    let (life, late) = ((f[2] - f[1]) as f64 / 1e9, f[3] as f64 / 1e9);
    let (before, after) = (states(&m0), states(&m1));
    let delta = |s: &str| {
        let i = STATES.iter().position(|x| *x == s).expect("a state");
        after[i] - before[i]
    };
    let every = STATES.map(|s| format!("{s} {:.4}", delta(s))).join(", ");
    let (runqueue, on_cpu, sleep) = (delta("runqueue"), delta("on_cpu"), delta("sleep"));
    let kernel = (kernel1.0 - kernel0.0, kernel1.1 - kernel0.1);
    eprintln!(
        "napper: {every}; it returned {late:.4} s late in {life:.4} s; kernel on_cpu {:.4} runqueue {:.4}",
        kernel.0, kernel.1
    );
    // It did wait: about a slice of the hog's after each wake-up.
    assert!(runqueue >= NAPS * 0.0005, "runqueue {runqueue:.4} s after 100 wake-ups behind a hog; {every}");
    // The sleeps themselves: 100 x 10 ms, each returning late by its
    // timer's latency (ours: the sleep state past 10 ms) and its wait for
    // the CPU. The host's timer latency is its own (0.15 ms a sleep seen on
    // a loaded CI host, more under qemu's TCG): a sanity bound of 1 ms a
    // sleep, and the split checked against the thread's own clock below.
    let timer = sleep - NAPS * 0.01;
    assert!(
        (0.0..=NAPS * 0.001).contains(&timer),
        "sleep {sleep:.4} s of 100 x 10 ms in a loop of {life:.4} s; {every} {}",
        sonic_probe_tests::TIMING
    );
    // The thread's own lateness is its timers' latency and its waits for
    // the CPU (ours never more than it), and nothing else but its time on
    // CPU between its clock reads (ours no less than it, but for the
    // microseconds of the pipe's wake-up that started the loop; under
    // TCG, whose system calls are slow, 2 ms).
    let tcg = std::env::var_os("SONIC_PROBE_UNDER_TCG").is_some();
    let slack = if tcg { 0.002 } else { 0.0005 };
    assert!(
        runqueue + timer <= late + slack && runqueue + timer + on_cpu >= late - slack,
        "runqueue {runqueue:.4} s and timers {timer:.4} s, the napper returned {late:.4} s late \
         ({on_cpu:.4} s on CPU); {every} {}",
        sonic_probe_tests::TIMING
    );
    assert_close("napper runqueue", runqueue, kernel.1, 0.002);
    assert_close("napper on_cpu", on_cpu, kernel.0, 0.002);
    assert_eq!(m1.sum("sonic_probe_events_dropped_total", &[("stage", "thread_clock")]), 0.0);
}

/// Threads blocked for known times, each in one kind of call: the time
/// goes to that cause (sleep, futex, pipe, socket, and file: preads of a
/// FUSE filesystem of the test's own whose reads take a known time), and
/// each thread's states add up to its life.
#[test]
fn blocked_time_goes_to_its_cause_and_states_add_up_to_a_life() {
    if !privileged("blocked_time_goes_to_its_cause_and_states_add_up_to_a_life") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let comm = unique_name("spb");
    // The slow filesystem where the kernel has FUSE (in the qemu guests,
    // the module the initramfs carries), served by this process: declared
    // before the workload, it outlives it (a killed workload's close of
    // the file is answered) and is unmounted once the workload is gone.
    let fuse = sonic_probe_tests::slow_fs::kernel_has_fuse();
    let dir = std::env::temp_dir().join(&comm);
    let mut args = vec!["blocked".to_string()];
    let session = if fuse {
        std::fs::create_dir_all(&dir).unwrap();
        args.push(dir.display().to_string());
        Some(sonic_probe_tests::slow_fs::mount(&dir).expect("mounting the slow filesystem"))
    } else {
        eprintln!("the file state is not tested here: this kernel has no FUSE (/proc/filesystems)");
        None
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let w = Workload::start(Some(&comm), &args);
    let d = Daemon::start(&["--pid", &w.pid().to_string()]);
    let (status, out) = w.go_output();
    drop(session);
    let still_mounted = fuse
        && std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some(&*dir.to_string_lossy()));
    let _ = std::fs::remove_dir(&dir);
    assert!(status.success(), "{out}");
    assert!(!still_mounted, "the slow filesystem at {} outlived its session", dir.display());
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    let threads = thread_lines(&lines);
    assert_eq!(threads.len(), if fuse { 5 } else { 4 }, "{out}");
    let mut known = vec![
        ("sleeper", "sleep", 2.0),
        ("waiter", "futex", 1.5),
        ("piper", "pipe", 1.0),
        ("socker", "socket", 1.0),
    ];
    if fuse {
        // READS preads, each answered READ_DELAY after the filesystem got it.
        use sonic_probe_tests::slow_fs::{READS, READ_DELAY};
        known.push(("filer", "file", READS as f64 * READ_DELAY.as_secs_f64()));
    }
    let m = d.metrics();
    for (name, state, known) in known {
        let t = threads.iter().find(|t| t.name == name).expect(name);
        let ours = state_s(&m, &comm, name, state);
        eprintln!("{name}: {state} {ours:.4} s (known {known} s, measured {:.4} s)", t.blocked_s);
        // The workload's known number: 4 x 0.5 s of nanosleep, a wake 1.5
        // s (1 s) after the waker saw the thread blocked (how long after
        // it blocked that was, the thread's own measurement below bounds).
        assert!(ours >= 0.98 * known, "{name}: {state} {ours:.4} s, known {known} s");
        // What the thread measured around its calls holds its block and
        // the wait for a CPU after each wake-up, and its time on a CPU in
        // them, which the kernel counts (schedstat, read by the thread
        // around its calls): its block is at least the rest (a filer's
        // ten reads are ten wake-ups, whose waits for a CPU a busy host,
        // or qemu's TCG, makes tens of ms).
        // Under TCG the vCPUs' clocks disagree by a few ms (a block begun
        // on one vCPU ends on another: seen 1.5181 s ours against 1.5073 s
        // the thread measured): 1 % more there.
        let clock_slack =
            if std::env::var_os("SONIC_PROBE_UNDER_TCG").is_some() { 0.01 * known } else { 0.0 };
        assert!(
            ours <= t.blocked_s + clock_slack && ours >= 0.98 * (t.blocked_s - t.busy_s),
            "{name}: {state} {ours:.4} s, the thread measured {:.4} s, of which the kernel counted {:.4} s \
             on or waiting for a CPU",
            t.blocked_s,
            t.busy_s
        );
        // Every nanosecond in one state: from its creation to its last
        // switch, at least what it measured of itself, and within 1 % of
        // its life seen from its parent (from before the spawn to the
        // thread's last timestamp; its exit after that is the 1 %).
        let total = all_states_s(&m, &comm, name);
        assert!(
            total >= t.life_s && total <= 1.01 * t.spawned_s,
            "{name}: states add up to {total:.4} s, its life {:.4} s ({:.4} s from its spawn)",
            t.life_s,
            t.spawned_s
        );
    }
}

/// `sp-workload spin`: a process named `name` whose main thread spins on
/// a CPU (`cpu`, or any) for `secs` s once started.
fn spinner(name: &str, cpu: Option<usize>, secs: u64) -> Workload {
    let cpu = cpu.map_or("any".to_string(), |c| c.to_string());
    Workload::start(Some(name), &["spin", &cpu, &secs.to_string()])
}

/// Lets a spinner finish: it said "done".
fn spun(w: Workload) {
    let (status, out) = w.go_output();
    assert!(status.success() && out.trim() == "done", "{status}: {out}");
}

/// The cpu_starved finding of process name `comm`, once there (or panics
/// with the findings there are).
fn starved_of(d: &Daemon, comm: &str) -> serde_json::Value {
    let is = |f: &serde_json::Value| f["kind"] == "cpu_starved" && f["comm"] == comm;
    let found = d.findings_when(|f| f.iter().any(is));
    found.iter().find(|f| is(f)).cloned().unwrap_or_else(|| panic!("no cpu_starved of {comm}: {found:#?}"))
}

/// (on CPU, run queue) of a process's main thread, from the kernel.
fn main_schedstat(pid: u32) -> (f64, f64) {
    schedstat(pid, pid)
}

/// Two spinning processes pinned to one CPU: each waits for it about half
/// of its time, a cpu_starved finding with cause node_busy naming the other
/// as the busiest; the kernel's run_delay gives the same share. A third
/// spinning alone on the other CPU is no finding.
#[test]
fn cpu_starved_finds_a_shared_cpu_and_names_who_used_it() {
    if !privileged("cpu_starved_finds_a_shared_cpu_and_names_who_used_it") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs 2 CPUs");
        return;
    }
    let (a, b, c) = (unique_name("spsa"), unique_name("spsb"), unique_name("spsc"));
    let d = Daemon::start(&["--comm", &a, "--comm", &b, "--comm", &c, "--starved-window", "3s"]);
    let mut spin = [spinner(&a, Some(0), 6), spinner(&b, Some(0), 6), spinner(&c, Some(1), 6)];
    let before: Vec<(f64, f64)> = spin.iter().map(|s| main_schedstat(s.pid())).collect();
    for s in &mut spin {
        s.signal();
    }
    std::thread::sleep(std::time::Duration::from_secs(4));
    let f = starved_of(&d, &a);
    let after = main_schedstat(spin[0].pid());
    let kernel_share = (after.1 - before[0].1) / ((after.0 - before[0].0) + (after.1 - before[0].1));
    let share = f["runqueue_share"].as_f64().unwrap();
    assert_eq!(f["cause"], "node_busy", "{f:#}");
    assert_eq!(f["thread"], a.as_str(), "{f:#}");
    assert_eq!(f["pid"], spin[0].pid(), "{f:#}");
    // The largest share of a 3 s window, against the kernel's over the run
    // so far: about a half each.
    assert!((0.35..=0.7).contains(&share), "share {share}: {f:#}");
    assert!((share - kernel_share).abs() <= 0.15, "share {share}, kernel's {kernel_share:.3}: {f:#}");
    let busiest = f["busiest"].as_array().unwrap();
    assert_eq!(busiest[0]["comm"], b.as_str(), "the other spinner on its CPU: {f:#}");
    let b_cpu = busiest[0]["cpu_seconds"].as_f64().unwrap();
    eprintln!(
        "{a}: run-queue share {share:.3} (the kernel's {kernel_share:.3}); {b} beside it {b_cpu:.3} s on CPU"
    );
    // The window runs from the last sweep at or before its start: 3 s and
    // up to a sweep more (the finding says how long).
    let window = f["window_seconds"].as_f64().unwrap();
    assert!((2.9..=4.1).contains(&window), "a 3 s window and at most a sweep more: {f:#}");
    assert!(
        (0.4..=0.6).contains(&(b_cpu / window)),
        "{b} used about half of the {window:.3} s window: {f:#}"
    );
    // One CPU: the two together had no more than the window.
    let a_cpu = f["on_cpu_seconds"].as_f64().unwrap();
    assert!(a_cpu + b_cpu <= 1.02 * window, "{a_cpu} + {b_cpu} s on one CPU in {window} s: {f:#}");
    let all = d.findings();
    assert!(
        !all.iter().any(|f| f["kind"] == "cpu_starved" && f["comm"] == c.as_str()),
        "{c} had its CPU to itself: {all:#?}"
    );
    let m = d.metrics();
    let counted = m.sum("sonic_probe_cpu_starved_seconds_total", &[("comm", &a), ("thread", &a)]);
    assert!(counted >= 0.9, "{a}'s starved run-queue time counted: {counted}");
    for s in spin {
        spun(s);
    }
}

/// A spinning process alone under a CPU limit of 0.2 CPUs set on its
/// cgroup's parent (cgroup v2 cpu.max, or where the CPU controller is on
/// cgroup v1, the same path's cpu.cfs_quota_us), as a pod's limit is over
/// its containers: waiting for a CPU about 80 % of its time, cause
/// throttled with the limit, and no more throttled time than the limited
/// cgroup's own cpu.stat counted; sonic_probe_cpu_throttled_seconds_total
/// names the parent and says what its cpu.stat says.
#[test]
fn cpu_starved_says_when_a_cpu_limit_throttles() {
    if !privileged("cpu_starved_says_when_a_cpu_limit_throttles") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mount = sonic_probe_tests::cgroup2_mount().expect("a cgroup2 mount");
    let name = unique_name("spthr");
    let (v2, v2_child) = (mount.join(&name), mount.join(&name).join("ctr"));
    std::fs::create_dir_all(&v2_child).unwrap();
    let mut made = vec![v2_child.clone(), v2.clone()];
    let controllers = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
    let (limited, child, stat_key) = if controllers.split_whitespace().any(|c| c == "cpu") {
        std::fs::write(mount.join("cgroup.subtree_control"), "+cpu").expect("enable the cpu controller");
        std::fs::write(v2.join("cpu.max"), "20000 100000").unwrap();
        (v2.clone(), v2_child.clone(), "throttled_usec")
    } else {
        let v1 = std::path::Path::new("/sys/fs/cgroup/cpu").join(&name);
        std::fs::create_dir_all(v1.join("ctr")).expect("the cgroup v1 cpu hierarchy");
        made.splice(0..0, [v1.join("ctr"), v1.clone()]);
        std::fs::write(v1.join("cpu.cfs_period_us"), "100000").unwrap();
        std::fs::write(v1.join("cpu.cfs_quota_us"), "20000").unwrap();
        (v1.clone(), v1.join("ctr"), "throttled_time")
    };
    let _remove = sonic_probe_tests::RemoveCgroups(made);
    let throttled_s = || {
        let s = std::fs::read_to_string(limited.join("cpu.stat")).unwrap();
        let v: f64 =
            s.lines().find_map(|l| l.strip_prefix(&format!("{stat_key} "))).unwrap().parse().unwrap();
        if stat_key == "throttled_usec" {
            v / 1e6
        } else {
            v / 1e9
        }
    };
    let d = Daemon::start(&["--comm", &name, "--starved-window", "3s"]);
    let mut s = spinner(&name, None, 6);
    std::fs::write(v2_child.join("cgroup.procs"), s.pid().to_string()).unwrap();
    if child != v2_child {
        std::fs::write(child.join("cgroup.procs"), s.pid().to_string()).unwrap();
    }
    let before = throttled_s();
    s.signal();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let f = starved_of(&d, &name);
    let kernel = throttled_s() - before;
    assert_eq!(f["cause"], "throttled", "{f:#}");
    assert_eq!(f["cpu_limit_cores"], 0.2, "{f:#}");
    let share = f["runqueue_share"].as_f64().unwrap();
    assert!((0.6..=0.9).contains(&share), "0.2 CPUs of one wanted: {f:#}");
    let ours = f["throttled_seconds"].as_f64().unwrap();
    assert!(
        ours > 0.5 && ours <= kernel + 0.01,
        "throttled {ours} s in the window, the cgroup's {kernel:.3} s: {f:#}"
    );
    // The metric: the limited cgroup (the parent), its count since it was
    // made, between two reads of its cpu.stat around the scrape.
    let cgroup = format!("/{name}");
    let low = throttled_s();
    let m = d.metrics();
    let high = throttled_s();
    let labels = [("cgroup", cgroup.as_str())];
    let exported = m.get("sonic_probe_cpu_throttled_seconds_total", &labels);
    assert!(
        exported.is_some_and(|v| v >= low - 1e-6 && v <= high + 1e-6),
        "exported {exported:?} s, cpu.stat {low:.6}-{high:.6} s"
    );
    assert_eq!(m.get("sonic_probe_cpu_limit_cores", &labels), Some(0.2));
    assert_eq!(m.sum("sonic_probe_cpu_limit_cores", &[]), 0.2, "no other limited cgroup for {name}");
    spun(s);
}
