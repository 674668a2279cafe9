//! The GPU side seen from the CPU, with NVIDIA's real CUDA runtime library
//! (sonic_probe_tests::cuda_runtime; no GPU or driver here).

use sonic_probe::{gpu::symbols::waiting_calls, threads::STATES};
use sonic_probe_common::gpu_apis::{Library, GPU_APIS};

/// The probe points found in libcudart.so.12 are where the dynamic loader
/// puts its waiting calls: every table symbol the loader resolves is found
/// (one probe per address), and the bytes at each probe's file offset are
/// the function's own bytes in memory after dlopen. A private copy: the
/// other tests' daemons put breakpoints in the runtime library's pages.
#[test]
fn the_runtime_librarys_waiting_calls_are_where_the_loader_puts_them() {
    let dir = std::env::temp_dir().join(format!("sp-gpu-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcudart.so.12");
    std::fs::copy(sonic_probe_tests::cuda_runtime(), &lib).unwrap();
    let calls = waiting_calls(&lib, Library::Runtime).unwrap();
    let file = std::fs::read(&lib).unwrap();
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library; its constructors need no driver.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    let address = |symbol: &str| {
        let name = std::ffi::CString::new(symbol).unwrap();
        // SAFETY: a symbol lookup in the handle just opened.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p as usize)
    };
    let mut resolved: Vec<usize> = GPU_APIS
        .iter()
        .filter(|a| a.library == Library::Runtime)
        .flat_map(|a| a.symbols.iter())
        .filter_map(|s| address(s))
        .collect();
    resolved.sort_unstable();
    resolved.dedup();
    assert_eq!(calls.len(), resolved.len(), "probe points {calls:#?}");
    assert!(calls.len() >= 20, "libcudart 12.9 exports 25 of the table's names: {}", calls.len());
    for c in &calls {
        let at = address(&c.symbol).unwrap_or_else(|| panic!("{} not resolved by the loader", c.symbol));
        // SAFETY: 32 bytes of a function's code, mapped by dlopen.
        let in_memory = unsafe { std::slice::from_raw_parts(at as *const u8, 32) };
        let off = c.file_offset as usize;
        assert_eq!(&file[off..off + 32], in_memory, "{} at file offset {:#x}", c.symbol, c.file_offset);
    }
    // SAFETY: the handle opened above.
    unsafe { libc::dlclose(handle) };
    let _ = std::fs::remove_dir_all(&dir);
}

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use sonic_probe_tests::{
    cuda_caller_bin, privileged, schedstat, timeslices, Daemon, Metrics, Workload, TIMING,
};

const WAITS: &str = "sonic_probe_gpu_wait_duration_seconds";

/// A caller of `lib` named `name` making `calls` (SYMBOL:COUNT), stopped
/// at "ready".
fn caller(name: &str, lib: &Path, calls: &[&str], ns_copy: Option<&Path>) -> Workload {
    let mut c = Command::new(cuda_caller_bin());
    c.args(["--name", name]);
    if let Some(dir) = ns_copy {
        c.arg("--ns-copy").arg(dir);
    }
    let mut args = vec![lib.to_str().expect("a UTF-8 path")];
    args.extend_from_slice(calls);
    Workload::start_command(c, None, &args)
}

/// Waits until the daemon has probed `n` library files (the attach runs
/// beside the event loop); the calls made after it are all counted.
fn wait_attached(d: &Daemon, n: f64) -> Metrics {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = d.metrics();
        let attached = m.sum("sonic_probe_gpu_libraries_total", &[("result", "attached")]);
        if attached >= n || Instant::now() > deadline {
            assert_eq!(attached, n, "library files probed; log:\n{}", d.log_lines.join("\n"));
            return m;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(m: &Metrics, comm: &str, api: &str) -> u64 {
    m.sum(&format!("{WAITS}_count"), &[("comm", comm), ("api", api)]) as u64
}

fn seconds(m: &Metrics, comm: &str, api: &str) -> f64 {
    m.sum(&format!("{WAITS}_sum"), &[("comm", comm), ("api", api)])
}

/// Exact counts per api with NVIDIA's real runtime library, in the three
/// ways a library reaches the probes: mapped by a process before the
/// daemon started (its start-up scan), loaded by one after (its openat),
/// and from a file that exists only in a process's own mount namespace
/// (through /proc/PID/root). Two virtualenvs' copies are two files, each
/// probed once. The counts' oracle is the caller's own loop.
#[test]
fn waits_are_counted_exactly_in_the_real_runtime_library() {
    if !privileged("waits_are_counted_exactly_in_the_real_runtime_library") {
        return;
    }
    let real = sonic_probe_tests::cuda_runtime();
    // A second virtualenv: another copy, another file.
    let dir = std::env::temp_dir().join(format!("sp-gpu-{}", std::process::id()));
    let venv2 = dir.join("venv2/site-packages/nvidia/cuda_runtime/lib");
    std::fs::create_dir_all(&venv2).unwrap();
    let copy = venv2.join("libcudart.so.12");
    std::fs::copy(&real, &copy).unwrap();
    let ns_dir = dir.join("image");
    std::fs::create_dir_all(&ns_dir).unwrap();

    // Loaded before the daemon starts.
    let mut early =
        caller("spgpu-early", &real, &["cudaStreamSynchronize:100", "cudaDeviceSynchronize:10"], None);
    early.go_until("loaded");
    // Its own processes only: the other tests' libraries are theirs.
    let mut d = Daemon::start(&[
        "--stack-captures",
        "off",
        "--comm",
        "spgpu-early",
        "--comm",
        "spgpu-late",
        "--comm",
        "spgpu-ns",
    ]);
    d.wait_for_log("GPU waits: probed");
    let mut late =
        caller("spgpu-late", &copy, &["cudaStreamSynchronize:1000", "cudaDeviceSynchronize:10"], None);
    let mut boxed = caller("spgpu-ns", &real, &["cudaEventSynchronize:300", "cudaMemcpy:20"], Some(&ns_dir));
    late.go_until("loaded");
    boxed.go_until("loaded");
    assert!(!ns_dir.join("libcudart.so.12").exists(), "the namespace's copy is visible outside it");
    wait_attached(&d, 3.0);
    for w in [&mut early, &mut late, &mut boxed] {
        w.go_until("done");
    }
    let m = d.metrics();
    assert_eq!(count(&m, "spgpu-early", "cudaStreamSynchronize"), 100);
    assert_eq!(count(&m, "spgpu-early", "cudaDeviceSynchronize"), 10);
    assert_eq!(count(&m, "spgpu-late", "cudaStreamSynchronize"), 1000);
    assert_eq!(count(&m, "spgpu-late", "cudaDeviceSynchronize"), 10);
    assert_eq!(count(&m, "spgpu-ns", "cudaEventSynchronize"), 300);
    assert_eq!(count(&m, "spgpu-ns", "cudaMemcpy"), 20);
    // Nothing else of theirs is a wait (dlopen's own calls, the loop).
    let theirs: f64 = ["spgpu-early", "spgpu-late", "spgpu-ns"]
        .iter()
        .map(|c| m.sum(&format!("{WAITS}_count"), &[("comm", c)]))
        .sum();
    assert_eq!(theirs, 1440.0);
    // 26 waiting calls of libcudart 12.9, an entry and a return probe each, per file.
    assert_eq!(m.get("sonic_probe_gpu_probes_attached", &[]), Some(3.0 * 52.0));
    assert_eq!(m.sum("sonic_probe_events_dropped_total", &[("stage", "gpu_waits")]), 0.0);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The suite's stand-in libraries (tests/workloads/stand_in_cuda.c),
/// built into `dir`: libcuda.so.1 and libcudart.so.12 linked to it
/// (through $ORIGIN). Where SONIC_PROBE_STAND_IN_CUDA names a directory
/// of them built already (vmtest's guests have no compiler: xtask's
/// vmtest/binaries.rs builds them the same way), copied from there.
fn stand_in(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    if let Some(built) = std::env::var_os("SONIC_PROBE_STAND_IN_CUDA") {
        for lib in ["libcuda.so.1", "libcudart.so.12"] {
            std::fs::copy(Path::new(&built).join(lib), dir.join(lib))
                .unwrap_or_else(|e| panic!("{lib}: {e}"));
        }
        return dir.join("libcudart.so.12");
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/stand_in_cuda.c");
    let build = |out: &str, extra: &[&str]| {
        let status = Command::new("cc")
            .args(["-O1", "-shared", "-fPIC", "-o"])
            .arg(dir.join(out))
            .arg(&src)
            .args(extra)
            .status()
            .expect("cc");
        assert!(status.success(), "cc {out}");
    };
    build("libcuda.so.1", &[]);
    let l = format!("-L{}", dir.display());
    build("libcudart.so.12", &["-DSP_RUNTIME", &l, "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"]);
    dir.join("libcudart.so.12")
}

/// Durations and the `gpu` state with the stand-in, whose calls take a
/// known time: blocked in nanosleep (50 ms each) or spinning on the CPU
/// (100 ms each), as CUDA waits with blocking sync and by default. Both
/// are `gpu` for the thread, neither `sleep` nor `on_cpu`; a runtime call
/// that waits in the driver's is one wait, the outer call's.
#[test]
fn a_wait_takes_its_known_time_and_is_the_threads_gpu_state() {
    if !privileged("a_wait_takes_its_known_time_and_is_the_threads_gpu_state") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sp-gpu-stand-in-{}", std::process::id()));
    let lib = stand_in(&dir);
    let comm = "spgpu-stand";
    let d = Daemon::start(&["--stack-captures", "off", "--comm", comm]);
    let mut w = caller(
        comm,
        &lib,
        &["cuStreamSynchronize:10", "cuCtxSynchronize:5", "cudaDeviceSynchronize:3"],
        None,
    );
    w.go_until("loaded");
    wait_attached(&d, 2.0);
    w.wait_blocked_in_read();
    let before = d.metrics();
    let sched_before = schedstat(w.pid(), w.pid());
    let slices_before = timeslices(w.pid(), w.pid());
    // The caller's own clock, read around each call: what each symbol's
    // calls took, the entry and return probes' traps included.
    let took: Vec<(String, f64)> = w
        .go_until("done")
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("took ")?.split(' ');
            Some((it.next()?.to_string(), it.next()?.parse::<f64>().ok()? / 1e9))
        })
        .collect();
    let took_by = |api: &str| took.iter().find(|t| t.0 == api).map_or(0.0, |t| t.1);
    // Both counts of its time up to its next go read.
    w.wait_blocked_in_read();
    let m = d.metrics();
    // The kernel's own count of the time the caller waited for a CPU (a
    // call takes its known time, and longer by as much as it waited to
    // run again after its sleep or a preemption), and the caller's clock.
    let waited = schedstat(w.pid(), w.pid()).1 - sched_before.1;
    let slices = timeslices(w.pid(), w.pid()) - slices_before;
    assert_eq!(count(&m, comm, "cuStreamSynchronize"), 10);
    // The 3 inside cudaDeviceSynchronize are its waits, not theirs.
    assert_eq!(count(&m, comm, "cuCtxSynchronize"), 5);
    assert_eq!(count(&m, comm, "cudaDeviceSynchronize"), 3);
    let mut waits = 0.0;
    for (api, want) in
        [("cuStreamSynchronize", 0.5), ("cuCtxSynchronize", 0.5), ("cudaDeviceSynchronize", 0.3)]
    {
        let got = seconds(&m, comm, api);
        let clock = took_by(api);
        // At least the known time; at most what the caller's clock says
        // (entry to return lies inside the caller's reads), which is the
        // known time and the timers' lateness and waits for a CPU.
        assert!(
            got >= want - 0.001 && got <= clock + 0.0005,
            "{api}: {got:.4} s, the stand-in takes {want} s and the caller's clock {clock:.4} s \
             (it waited {waited:.4} s for a CPU) {TIMING}"
        );
        waits += got;
    }
    // The thread's states over the calls: their 1.3 s are GPU waits, but
    // for the time the thread waited for a CPU (runqueue, which the
    // kernel's schedstat counts too).
    let state = |m: &Metrics, s: &str| {
        m.sum("sonic_probe_thread_seconds_total", &[("comm", comm), ("thread", comm), ("state", s)])
    };
    let delta = |s: &str| state(&m, s) - state(&before, s);
    let every = || STATES.map(|s| format!("{s} {:.4}", delta(s))).join(", ");
    let (gpu, runqueue) = (delta("gpu"), delta("runqueue"));
    // Never more than the kernel counts, which can be more: a wake-up that
    // preempts the stand-in's spin starts the caller's run_delay at the
    // wake-up (the kernel's clock is not read again until the switch),
    // where the caller spun on, in state gpu, until the switch
    // (docs/metrics.md, "Where threads' time goes"). Nor much less at
    // each switch to it: the kernel dates it where __schedule updates its
    // clock, the sched_switch tracepoint comes after the next task is
    // picked, some 100 us later under qemu's TCG (1 on this machine).
    let per_switch = 0.0002;
    assert!(
        runqueue <= waited + 0.001 + slices as f64 * per_switch,
        "runqueue {runqueue:.4} s, the kernel's schedstat {waited:.4} s over {slices} switches to it; \
         every state: {} {TIMING}",
        every()
    );
    assert!(
        gpu <= waits + 0.001 && gpu + runqueue >= 1.3 - 0.01,
        "gpu {gpu:.4} s, runqueue {runqueue:.4} s, the waits {waits:.4} s; every state: {} {TIMING}",
        every()
    );
    assert!(delta("sleep") < 0.005, "the stand-in's nanosleep is a GPU wait: sleep {:.4} s", delta("sleep"));
    assert!(
        delta("on_cpu") < 0.1,
        "the stand-in's spin is a GPU wait: on_cpu {:.4} s {TIMING}",
        delta("on_cpu")
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python request loop (tests/workloads/gpu_loop.py) calling `lib`'s
/// cuStreamSynchronize in infer(), named `name`, stopped at "ready".
fn python_loop(name: &str, lib: &Path, steps: &[&str]) -> Workload {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/gpu_loop.py");
    let mut c = Command::new("/usr/bin/python3");
    c.arg(script).arg(name).arg(lib);
    Workload::start_command(c, None, steps)
}

/// The line of gpu_loop.py that synchronizes (the oracle of the finding's
/// Python frame: the file itself).
fn sync_line() -> u64 {
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/gpu_loop.py"))
        .expect("gpu_loop.py");
    1 + script.lines().position(|l| l.ends_with("# sp-sync-line")).expect("the marked line") as u64
}

/// The gpu_wait finding, with the line that waited (--stack-captures on):
/// a Python request loop that synchronizes every step (the stand-in's
/// cuStreamSynchronize, 50 ms each, back to back) is found with its call,
/// its known rate and infer()'s line (its stack read at a later wait, a
/// short one); a single wait of 1.5 s (past --stall-threshold 1s, 75 % of
/// the window: below --gpu-wait-share 0.9) is found as one, with the line
/// read while it lasted; one that synchronizes once a second is not,
/// though each of its waits is counted.
#[test]
fn a_sync_bound_loop_and_a_long_wait_are_gpu_wait_findings_with_their_line() {
    if !privileged("a_sync_bound_loop_and_a_long_wait_are_gpu_wait_findings_with_their_line") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sp-gpu-finding-{}", std::process::id()));
    let lib = stand_in(&dir);
    let driver = dir.join("libcuda.so.1");
    let (bound, long, rare) = ("spgpu-bound", "spgpu-long", "spgpu-rare");
    let d = Daemon::start(&[
        "--stack-captures",
        "on",
        "--comm",
        bound,
        "--comm",
        long,
        "--comm",
        rare,
        "--gpu-wait-window",
        "2s",
        "--gpu-wait-share",
        "0.9",
        "--stall-threshold",
        "1s",
    ]);
    let mut b = python_loop(bound, &driver, &["sync:100:50"]);
    let mut l = python_loop(long, &driver, &["sleep:2000", "sync:1:1500", "sleep:1500"]);
    let once_a_second = ["cuStreamSynchronize:1", "sleep:950"].repeat(4);
    let mut r = caller(rare, &lib, &once_a_second, None);
    for w in [&mut b, &mut l, &mut r] {
        w.go_until("loaded");
    }
    wait_attached(&d, 2.0);
    for w in [&mut b, &mut l, &mut r] {
        w.signal();
    }
    for w in [&mut b, &mut l, &mut r] {
        w.wait_for_line("done");
    }
    let findings = d.findings();
    let of = |comm: &str| findings.iter().find(|f| f["kind"] == "gpu_wait" && f["comm"] == comm);
    let line = sync_line();
    let python_frame = |f: &serde_json::Value| {
        f["stack"].as_array().and_then(|s| s.iter().find(|fr| fr["kind"] == "python")).cloned()
    };
    let f = of(bound).unwrap_or_else(|| panic!("no gpu_wait of {bound}: {findings:#?}"));
    assert_eq!(f["thread"], bound, "{f:#}");
    // Back to back: all of its time but the loop's own.
    let share = f["gpu_share"].as_f64().unwrap();
    assert!(share >= 0.95, "{f:#}");
    let a = &f["apis"][0];
    assert_eq!(a["api"], "cuStreamSynchronize", "{f:#}");
    let (waits, seconds) = (a["waits"].as_f64().unwrap(), a["seconds"].as_f64().unwrap());
    // Each wait takes 50 ms and a little more: at most 20 a second.
    assert!(seconds / waits >= 0.05 && seconds / waits <= 0.06, "{f:#}");
    let per_second = a["waits_per_second"].as_f64().unwrap();
    assert!((15.0..=20.5).contains(&per_second), "{f:#}");
    assert!(f.get("longest_wait").is_none(), "no wait of 1 s: {f:#}");
    let fr = python_frame(f).unwrap_or_else(|| panic!("no Python frame: {f:#}"));
    assert_eq!((fr["function"].as_str(), fr["line"].as_u64()), (Some("infer"), Some(line)), "{f:#}");
    // What `sonic-probe findings` says of it leads with that line.
    let o = Command::new(sonic_probe_tests::sonic_probe_bin())
        .args(["findings", "--url", &format!("http://{}", d.addr)])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    let said = format!("infer() at gpu_loop.py:{line}: thread {bound} waits for the GPU");
    assert!(table.contains(&said), "{said:?} not in:\n{table}");

    let f = of(long).unwrap_or_else(|| panic!("no gpu_wait of {long}: {findings:#?}"));
    let w = &f["longest_wait"];
    assert_eq!(
        (w["api"].as_str(), w["tid"].as_u64()),
        (Some("cuStreamSynchronize"), Some(l.pid() as u64)),
        "{f:#}"
    );
    let secs = w["seconds"].as_f64().unwrap();
    assert!((1.5..1.6).contains(&secs), "the stand-in's wait takes 1.5 s {TIMING}: {f:#}");
    // Its thread's GPU time, from the sweeps after it (a blocked thread's
    // time is accounted when it wakes): the 1.5 s, of the window's time
    // (2 s, up to a sweep's more).
    let (gpu, window) = (f["gpu_seconds"].as_f64().unwrap(), f["window_seconds"].as_f64().unwrap());
    assert!((1.5..1.6).contains(&gpu) && (2.0..3.1).contains(&window), "{f:#}");
    assert!((f["gpu_share"].as_f64().unwrap() - gpu / window).abs() < 1e-6, "{f:#}");
    let fr = python_frame(f).unwrap_or_else(|| panic!("no Python frame: {f:#}"));
    assert_eq!((fr["function"].as_str(), fr["line"].as_u64()), (Some("infer"), Some(line)), "{f:#}");

    assert!(of(rare).is_none(), "5 % of its time is no gpu_wait: {findings:#?}");
    assert_eq!(count(&d.metrics(), rare, "cuStreamSynchronize"), 4);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
