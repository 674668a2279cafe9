//! Stall stack captures: the stacks of a stalled process, read
//! while the stall lasts.
//!
//! Why here and not at the stall's end: by the time the futex_stall
//! finding's event arrives, the lock holder has moved on, and what it was
//! doing is gone. So the kernel enters every futex wait of a target in
//! `futex_waiting` (with the user registers at the system call) and deletes
//! it at the call's exit; a [`Capturer`] thread looks at that map every
//! [`POLL_INTERVAL`], and for each wait of a request thread older than the
//! stall threshold captures once: the Python frames of every thread of the
//! process, and the native stack of each thread in a futex wait (the
//! waiting thread, and a waker that waits too). The result waits in the
//! [`CaptureStore`] until the futex_stall detector sees the stall's exit
//! event, matched by thread id and the call's entry time.
//!
//! GPU waits the same way (with GPU waits on): the kernel enters each wait
//! of a target in one of CUDA's waiting calls in `gpu_waiting` (with the
//! user registers at the function's entry). One lasting past the stall
//! threshold is captured as a futex wait is, for the gpu_wait finding of
//! a single long wait (matched by its event's thread and entry time).
//! A sync-bound loop's waits are short, but it is in one most of the time:
//! for its finding, the gpu_wait detector asks the store for a stack of
//! that process's thread ([`CaptureStore::want_gpu`]), and the capturer
//! captures at the next GPU wait of that thread it sees in progress.
//!
//! Bounded: at most [`MAX_PENDING`] captures wait (the oldest go first, and
//! any older than the findings window), at most one capture per process
//! per `--stack-capture-interval` (further stalls within it are counted as
//! `rate_limited` and their findings say so), and the keys remembered as
//! captured are those of waits still in the kernel map.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use sonic_probe_common::{gpu_apis::gpu_api, GpuWaiting, InflightWait};
use tracing::debug;

use crate::{
    os::monotonic_ns,
    stacks::{self, CaptureError, Frame, Regs},
};

/// Captures waiting for their stall's exit event.
pub const MAX_PENDING: usize = 256;
/// How often the kernel's in-flight waits are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);
/// Native stacks read per capture (the waiting thread first, then other
/// threads of the process in a futex wait: possible wakers).
const MAX_NATIVE_THREADS: usize = 8;

/// The `result` label values of sonic_probe_stack_captures_total.
pub const RESULTS: [&str; 7] = ["ok", "partial", "no_python", "gone", "unreadable", "rate_limited", "error"];

/// What the capturer needs to know (from `run`'s options; SIGHUP updates it).
#[derive(Debug, Clone)]
pub struct CaptureSettings {
    pub stall_threshold: Duration,
    pub request_threads: Vec<glob::Pattern>,
    pub ignore_threads: Vec<glob::Pattern>,
    /// At most one capture per process per interval.
    pub interval: Duration,
    /// Captures not claimed by a stall within this long are dropped.
    pub window: Duration,
}

/// The stacks of one stalled process, read while one of its request
/// threads waited.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    pub tgid: u32,
    /// The waiting thread.
    pub tid: u32,
    /// Its name then.
    pub thread: String,
    /// What it waited in: a GPU api's name (a GPU wait), or None (a futex wait).
    pub gpu_api: Option<&'static str>,
    /// Its call's entry time.
    pub start_ns: u64,
    /// When the stacks were read (CLOCK_MONOTONIC ns).
    pub captured_ns: u64,
    /// One of [`RESULTS`].
    pub result: &'static str,
    /// Python frames of every thread of the process, by thread id.
    pub python: HashMap<u32, Vec<Frame>>,
    /// Native frames of the waiting thread and of the other threads that
    /// were in a futex wait then, by thread id.
    pub native: HashMap<u32, Vec<Frame>>,
    /// What could not be read, e.g. "python: no_python: ...".
    pub problems: Vec<String>,
    /// The capture interval (for the note of a rate-limited stall).
    pub interval: Duration,
}

impl Capture {
    /// A thread's frames: its Python frames, then its native ones.
    pub fn stack_of(&self, tid: u32) -> Vec<Frame> {
        let mut out = self.python.get(&tid).cloned().unwrap_or_default();
        out.extend(self.native.get(&tid).cloned().unwrap_or_default());
        out
    }

    /// Why the stacks are missing or partial, and how fresh they are.
    pub fn note(&self, waker_tid: Option<u32>) -> String {
        if self.result == "rate_limited" {
            return format!(
                "rate_limited: at most one stack capture per process every {}",
                humantime::format_duration(self.interval)
            );
        }
        let mut parts = self.problems.clone();
        if let Some(w) = waker_tid {
            if !self.python.contains_key(&w) && !self.native.contains_key(&w) && self.result != "gone" {
                parts.push(format!("no stack of the waker (tid {w}) was captured"));
            }
        }
        let into = self.captured_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        parts.push(format!("captured {into:.1} s into the wait"));
        parts.join("; ")
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// (tid, start_ns) -> its capture.
    pending: HashMap<(u32, u64), Capture>,
    /// (tgid, thread name) -> when a stack of one of its GPU waits was
    /// asked for (at most [`MAX_PENDING`], each for a findings window).
    wanted: HashMap<(u32, String), u64>,
    /// result -> captures.
    results: BTreeMap<&'static str, u64>,
    /// Time spent reading stacks, all captures together.
    spent: Duration,
}

/// Captures waiting for their stall, and the counts of their results.
#[derive(Clone, Default)]
pub struct CaptureStore {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
}

impl fmt::Debug for CaptureStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureStore").finish_non_exhaustive()
    }
}

impl CaptureStore {
    pub fn new() -> Self {
        CaptureStore::default()
    }

    /// Keeps a capture until its stall claims it (a GPU wait's answers
    /// the request for it).
    pub fn insert(&self, c: Capture) {
        let mut inner = self.inner.lock().expect("captures lock");
        *inner.results.entry(c.result).or_default() += 1;
        if c.gpu_api.is_some() && c.result != "rate_limited" {
            inner.wanted.remove(&(c.tgid, c.thread.clone()));
        }
        if inner.pending.len() >= MAX_PENDING {
            let oldest = inner.pending.iter().min_by_key(|(_, c)| c.captured_ns).map(|(k, _)| *k);
            if let Some(k) = oldest {
                inner.pending.remove(&k);
            }
        }
        inner.pending.insert((c.tid, c.start_ns), c);
    }

    /// The capture of the wait of `tid` that started at `start_ns`, taken out.
    pub fn take(&self, tid: u32, start_ns: u64) -> Option<Capture> {
        self.inner.lock().expect("captures lock").pending.remove(&(tid, start_ns))
    }

    /// The latest capture of a GPU wait of thread `thread` of `tgid`, taken out.
    pub fn take_gpu(&self, tgid: u32, thread: &str) -> Option<Capture> {
        let mut inner = self.inner.lock().expect("captures lock");
        let key = inner
            .pending
            .iter()
            .filter(|(_, c)| c.gpu_api.is_some() && c.tgid == tgid && c.thread == thread)
            .max_by_key(|(_, c)| c.captured_ns)
            .map(|(k, _)| *k)?;
        inner.pending.remove(&key)
    }

    /// Asks for the stacks of `tgid` at the next GPU wait of its thread
    /// `thread` seen in progress, however short (a sync-bound loop's).
    pub fn want_gpu(&self, tgid: u32, thread: &str, now_ns: u64) {
        let mut inner = self.inner.lock().expect("captures lock");
        let key = (tgid, thread.to_string());
        if inner.wanted.len() < MAX_PENDING || inner.wanted.contains_key(&key) {
            inner.wanted.insert(key, now_ns);
        }
    }

    /// Whether a stack of a GPU wait of that thread is asked for.
    fn wants_gpu(&self, tgid: u32, thread: &str) -> bool {
        self.inner.lock().expect("captures lock").wanted.contains_key(&(tgid, thread.to_string()))
    }

    /// Drops captures taken before `oldest_ns`, and requests made before it.
    pub fn prune(&self, oldest_ns: u64) {
        let mut inner = self.inner.lock().expect("captures lock");
        inner.pending.retain(|_, c| c.captured_ns >= oldest_ns);
        inner.wanted.retain(|_, t| *t >= oldest_ns);
    }

    pub fn pending(&self) -> usize {
        self.inner.lock().expect("captures lock").pending.len()
    }

    /// Adds the time one capture (of one process) took.
    pub fn add_time(&self, took: Duration) {
        self.inner.lock().expect("captures lock").spent += took;
    }

    /// Time spent reading stacks since the start.
    pub fn time_spent(&self) -> Duration {
        self.inner.lock().expect("captures lock").spent
    }

    /// Captures by result, every result of [`RESULTS`] listed.
    pub fn results(&self) -> Vec<(&'static str, u64)> {
        let inner = self.inner.lock().expect("captures lock");
        RESULTS.iter().map(|r| (*r, inner.results.get(r).copied().unwrap_or(0))).collect()
    }

    /// Ends the capturer thread (at its next look).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The result label of a capture: ok when what applies was read; no_python
/// when the process runs no Python (its native stack alone was read);
/// partial when one part failed; else the reason of the first failure.
fn result_of(python: &Result<(), CaptureError>, native: &Result<(), CaptureError>) -> &'static str {
    match (python, native) {
        (Ok(()), Ok(())) => "ok",
        (Err(CaptureError::NoPython(_)), Ok(())) => "no_python",
        (Ok(()), Err(_)) | (Err(_), Ok(())) => "partial",
        (Err(e), Err(_)) => e.as_label(),
    }
}

/// A wait in progress, futex or GPU, as the capturer looks at it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Wait {
    tgid: u32,
    tid: u32,
    start_ns: u64,
    regs: Regs,
    /// The GPU api (None: a futex wait).
    gpu_api: Option<&'static str>,
}

impl From<&InflightWait> for Wait {
    fn from(w: &InflightWait) -> Self {
        Wait {
            tgid: w.tgid,
            tid: w.tid,
            start_ns: w.start_ns,
            regs: Regs { ip: w.ip, sp: w.sp, bp: w.bp },
            gpu_api: None,
        }
    }
}

impl From<&GpuWaiting> for Wait {
    fn from(w: &GpuWaiting) -> Self {
        Wait {
            tgid: w.tgid,
            tid: w.tid,
            start_ns: w.start_ns,
            regs: Regs { ip: w.ip, sp: w.sp, bp: w.bp },
            gpu_api: Some(gpu_api(w.api).map_or("?", |a| a.name)),
        }
    }
}

/// Reads the stacks of `tgid` for the waits `due` (its request threads'
/// long waits, named), `waiting` being every wait of the process in progress.
fn capture(tgid: u32, due: &[(Wait, String)], waiting: &[Wait], interval: Duration) -> Vec<Capture> {
    // The stacks show the process as it was from here on.
    let captured_ns = monotonic_ns();
    let mut problems = Vec::new();
    let (python, py_result) = match stacks::python_stacks(tgid) {
        Ok(p) => (p, Ok(())),
        Err(e) => {
            problems.push(format!("python: {}: {e}", e.as_label()));
            (HashMap::new(), Err(e))
        }
    };
    let mut native = HashMap::new();
    // The due threads first, then the other waiting threads (a thread in
    // a GPU wait and a futex wait inside it: the innermost, the futex's).
    let is_due = |tid: u32| due.iter().any(|d| d.0.tid == tid);
    let mut order: Vec<&Wait> = due.iter().map(|d| &d.0).collect();
    order.extend(waiting.iter().filter(|w| !is_due(w.tid)));
    let mut native_results = HashMap::new();
    for w in order.into_iter().take(MAX_NATIVE_THREADS) {
        if native_results.contains_key(&w.tid) {
            continue;
        }
        match stacks::native_stack(tgid, w.tid, w.regs) {
            Ok(frames) => {
                native.insert(w.tid, frames);
                native_results.insert(w.tid, Ok(()));
            }
            Err(e) => {
                if is_due(w.tid) {
                    problems.push(format!("native (tid {}): {}: {e}", w.tid, e.as_label()));
                }
                native_results.insert(w.tid, Err(e));
            }
        }
    }
    due.iter()
        .map(|(w, thread)| {
            let native_result = native_results.remove(&w.tid).unwrap_or(Ok(()));
            Capture {
                tgid,
                tid: w.tid,
                thread: thread.clone(),
                gpu_api: w.gpu_api,
                start_ns: w.start_ns,
                captured_ns,
                result: result_of(&py_result, &native_result),
                python: python.clone(),
                native: native.clone(),
                problems: problems.clone(),
                interval,
            }
        })
        .collect()
}

/// A capture reads a process's binaries and their symbols (tens of MiB
/// for a large one with debug information), in this thread and in the
/// readers' helper threads, and frees it all; glibc keeps freed memory in
/// those threads' arenas, where the daemon's resident size would keep it.
/// Handing it back to the kernel after each capture keeps the daemon's
/// memory where it was. (The daemon does the same once after attach, for
/// the kernel BTF parsed to load the programs.)
pub fn give_back_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The thread that looks for long waits and captures their stacks.
pub struct Capturer {
    waiting: BpfHashMap<MapData, u32, InflightWait>,
    /// GPU waits in progress (None: GPU waits off).
    gpu_waiting: Option<BpfHashMap<MapData, u32, GpuWaiting>>,
    store: CaptureStore,
    settings: Arc<Mutex<CaptureSettings>>,
    /// (tid, start_ns) of waits looked at already (captured or rate
    /// limited), while they are in the kernel map.
    seen: HashSet<(u32, u64)>,
    /// tgid -> time of its last capture.
    last: HashMap<u32, u64>,
}

impl Capturer {
    pub fn new(
        waiting: BpfHashMap<MapData, u32, InflightWait>,
        gpu_waiting: Option<BpfHashMap<MapData, u32, GpuWaiting>>,
        store: CaptureStore,
        settings: Arc<Mutex<CaptureSettings>>,
    ) -> Self {
        Capturer { waiting, gpu_waiting, store, settings, seen: HashSet::new(), last: HashMap::new() }
    }

    /// Starts the thread; it ends after [`CaptureStore::stop`].
    pub fn spawn(mut self) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("stack-capture".into()).spawn(move || {
            while !self.store.stop.load(Ordering::SeqCst) {
                std::thread::sleep(POLL_INTERVAL);
                self.look(monotonic_ns());
            }
        })
    }

    /// One look at the waits in progress.
    fn look(&mut self, now_ns: u64) {
        let s = self.settings.lock().expect("capture settings lock").clone();
        let mut waits: Vec<Wait> =
            self.waiting.iter().filter_map(Result::ok).map(|(_, w)| Wait::from(&w)).collect();
        if let Some(gpu) = &self.gpu_waiting {
            waits.extend(gpu.iter().filter_map(Result::ok).map(|(_, w)| Wait::from(&w)));
        }
        let current: HashSet<(u32, u64)> = waits.iter().map(|w| (w.tid, w.start_ns)).collect();
        self.seen.retain(|k| current.contains(k));
        let interval_ns = s.interval.as_nanos() as u64;
        self.last.retain(|_, t| now_ns.saturating_sub(*t) < interval_ns);
        self.store.prune(now_ns.saturating_sub(s.window.as_nanos() as u64));

        let threshold_ns = s.stall_threshold.as_nanos() as u64;
        let mut captured = false;
        let mut due: BTreeMap<u32, Vec<(Wait, String)>> = BTreeMap::new();
        // GPU waits asked for, whatever their age (rate limited, not noted).
        let mut asked: BTreeMap<u32, Vec<(Wait, String)>> = BTreeMap::new();
        for w in &waits {
            if self.seen.contains(&(w.tid, w.start_ns)) {
                continue;
            }
            let long = now_ns.saturating_sub(w.start_ns) >= threshold_ns;
            if !long && w.gpu_api.is_none() {
                continue;
            }
            let Ok(name) = std::fs::read_to_string(format!("/proc/{}/task/{}/comm", w.tgid, w.tid)) else {
                continue; // gone
            };
            let name = name.trim_end_matches('\n').to_string();
            if !long {
                if self.store.wants_gpu(w.tgid, &name) && !self.last.contains_key(&w.tgid) {
                    asked.entry(w.tgid).or_default().push((*w, name));
                }
                continue;
            }
            if crate::os::futex::is_request_thread(
                w.tgid,
                w.tid,
                &name,
                &s.request_threads,
                &s.ignore_threads,
            ) {
                due.entry(w.tgid).or_default().push((*w, name));
            } else {
                // An idle worker's long wait: not looked at again.
                self.seen.insert((w.tid, w.start_ns));
            }
        }
        for (tgid, mut more) in asked {
            let e = due.entry(tgid).or_default();
            more.retain(|m| !e.iter().any(|d| d.0.tid == m.0.tid));
            e.extend(more);
        }
        for (tgid, due) in due {
            for (w, _) in &due {
                self.seen.insert((w.tid, w.start_ns));
            }
            if self.last.contains_key(&tgid) {
                for (w, thread) in &due {
                    self.store.insert(Capture {
                        tgid,
                        tid: w.tid,
                        thread: thread.clone(),
                        gpu_api: w.gpu_api,
                        start_ns: w.start_ns,
                        captured_ns: now_ns,
                        result: "rate_limited",
                        python: HashMap::new(),
                        native: HashMap::new(),
                        problems: Vec::new(),
                        interval: s.interval,
                    });
                }
                continue;
            }
            self.last.insert(tgid, now_ns);
            let of_process: Vec<Wait> = waits.iter().filter(|w| w.tgid == tgid).copied().collect();
            let started = std::time::Instant::now();
            let done = capture(tgid, &due, &of_process, s.interval);
            self.store.add_time(started.elapsed());
            for c in done {
                debug!(pid = tgid, tid = c.tid, result = c.result, "stack capture");
                self.store.insert(c);
            }
            captured = true;
        }
        if captured {
            give_back_memory();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::FrameKind;

    fn frame(f: &str, kind: FrameKind) -> Frame {
        Frame { function: f.into(), file: None, line: None, module: None, kind }
    }

    fn cap(tid: u32, start: u64, captured: u64) -> Capture {
        Capture {
            tgid: 1,
            tid,
            thread: "server".into(),
            gpu_api: None,
            start_ns: start,
            captured_ns: captured,
            result: "ok",
            python: HashMap::new(),
            native: HashMap::new(),
            problems: Vec::new(),
            interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_store_is_bounded_and_hands_out_each_capture_once() {
        let s = CaptureStore::new();
        for i in 0..(MAX_PENDING as u64 + 10) {
            s.insert(cap(i as u32, i, 1000 + i));
        }
        assert_eq!(s.pending(), MAX_PENDING);
        assert!(s.take(0, 0).is_none(), "the oldest went first");
        assert!(s.take(300, 300).is_none());
        assert_eq!(s.take(265, 265).map(|c| c.tid), Some(265));
        assert!(s.take(265, 265).is_none(), "taken once");
        s.prune(1000 + 200);
        assert_eq!(s.pending(), MAX_PENDING - 1 - 190);
        let r: HashMap<_, _> = s.results().into_iter().collect();
        assert_eq!(r["ok"], MAX_PENDING as u64 + 10);
        assert_eq!(r.len(), RESULTS.len());
    }

    #[test]
    fn gpu_captures_are_asked_for_and_handed_out_by_thread_name() {
        let s = CaptureStore::new();
        s.want_gpu(1, "server", 1000);
        assert!(s.wants_gpu(1, "server") && !s.wants_gpu(1, "loader") && !s.wants_gpu(2, "server"));
        // A futex wait's capture answers nothing.
        s.insert(cap(7, 10, 2000));
        assert!(s.wants_gpu(1, "server"));
        assert!(s.take_gpu(1, "server").is_none());
        let gpu = |tid, start, captured| Capture {
            gpu_api: Some("cuStreamSynchronize"),
            ..cap(tid, start, captured)
        };
        s.insert(Capture { result: "rate_limited", ..gpu(7, 20, 2100) });
        assert!(s.wants_gpu(1, "server"), "a rate-limited capture answers nothing");
        s.insert(gpu(7, 30, 2200));
        s.insert(gpu(8, 40, 2300));
        assert!(!s.wants_gpu(1, "server"));
        assert!(s.take_gpu(1, "loader").is_none());
        assert_eq!(s.take_gpu(1, "server").map(|c| (c.tid, c.start_ns)), Some((8, 40)), "the latest");
        assert_eq!(s.take_gpu(1, "server").map(|c| c.start_ns), Some(30));
        assert_eq!(s.take(7, 10).map(|c| c.gpu_api), Some(None), "the futex capture is left");
        // Requests end with the findings window.
        s.want_gpu(3, "server", 5000);
        s.prune(5001);
        assert!(!s.wants_gpu(3, "server"));
    }

    #[test]
    fn stacks_put_python_first_and_notes_say_why() {
        let mut c = cap(7, 1_000_000_000, 2_200_000_000);
        c.python.insert(7, vec![frame("infer", FrameKind::Python)]);
        c.native.insert(7, vec![frame("futex_wait", FrameKind::Native)]);
        let s = c.stack_of(7);
        assert_eq!((s[0].function.as_str(), s[1].function.as_str()), ("infer", "futex_wait"));
        assert_eq!(c.note(Some(7)), "captured 1.2 s into the wait");
        assert!(c.note(Some(9)).starts_with("no stack of the waker (tid 9)"));
        c.result = "rate_limited";
        assert!(c.note(None).starts_with("rate_limited"));
    }

    #[test]
    fn results_follow_what_could_be_read() {
        let np = || Err(CaptureError::NoPython("static binary".into()));
        let gone = || Err(CaptureError::Gone(5));
        assert_eq!(result_of(&Ok(()), &Ok(())), "ok");
        assert_eq!(result_of(&np(), &Ok(())), "no_python");
        assert_eq!(result_of(&Ok(()), &gone()), "partial");
        assert_eq!(result_of(&gone(), &gone()), "gone");
        assert_eq!(result_of(&np(), &gone()), "no_python");
    }
}
