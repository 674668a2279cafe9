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
    stacks::{self, frame, native::Start, threads::ThreadState, CaptureError, Frame, Regs},
};

/// Captures waiting for their stall's exit event.
pub const MAX_PENDING: usize = 256;
/// How often the kernel's in-flight waits are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);
/// Native stacks read per capture: the waiting threads, then the others
/// in the order of [`stacks::threads`] (the possible holders).
pub const MAX_NATIVE_THREADS: usize = 16;
/// Threads of a process whose state is looked at per capture.
const MAX_THREADS_LOOKED_AT: usize = 4096;
/// Running threads sampled per capture, and how long the capture waits for
/// their samples (all together).
const MAX_SAMPLED: usize = 4;
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(100);

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
    /// Native frames of the waiting thread and of the other threads read
    /// (possible holders), by thread id.
    pub native: HashMap<u32, Vec<Frame>>,
    /// Where each thread read was ("blocked in read", "running: sampled"),
    /// or why its native stack is missing, by thread id.
    pub native_how: HashMap<u32, String>,
    /// What could not be read, e.g. "python: no_python: ...".
    pub problems: Vec<String>,
    /// The capture interval (for the note of a rate-limited stall).
    pub interval: Duration,
}

impl Capture {
    /// A thread's frames, innermost first. A Python thread's are the native
    /// frames above the interpreter (a C extension's, the C library's), its
    /// Python frames, then the interpreter's own native frames; if its
    /// native stack never reaches the interpreter, the Python frames come
    /// first.
    pub fn stack_of(&self, tid: u32) -> Vec<Frame> {
        let python = self.python.get(&tid).map(Vec::as_slice).unwrap_or_default();
        let native = self.native.get(&tid).map(Vec::as_slice).unwrap_or_default();
        let above =
            if python.is_empty() { 0 } else { native.iter().position(frame::is_interpreter).unwrap_or(0) };
        let (above, below) = native.split_at(above);
        above.iter().chain(python).chain(below).cloned().collect()
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
        let into = self.captured_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        parts.push(format!("captured {into:.1} s into the wait"));
        if let Some(w) = waker_tid.filter(|&w| w != self.tid) {
            let how = self.native_how.get(&w);
            if self.native.contains_key(&w) {
                if let Some(how) = how {
                    parts.push(format!("the waker (tid {w}) was {how}"));
                }
            } else if self.python.contains_key(&w) {
                if let Some(how) = how {
                    parts.push(format!("no native stack of the waker (tid {w}): {how}"));
                }
            } else if self.result != "gone" {
                match how {
                    Some(how) => parts.push(format!("no stack of the waker (tid {w}): {how}")),
                    None => parts.push(format!("no stack of the waker (tid {w}) was captured")),
                }
            }
        }
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
    /// The futex word and op (0 for a GPU wait).
    uaddr: u64,
    op: u32,
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
            uaddr: w.uaddr,
            op: w.op,
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
            uaddr: 0,
            op: 0,
            gpu_api: Some(gpu_api(w.api).map_or("?", |a| a.name)),
        }
    }
}

/// How a thread's native stack is to be read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Planned {
    /// A wait the kernel recorded, with its registers.
    Recorded(Wait),
    /// Blocked, with the registers /proc publishes, in that call (None:
    /// outside a call).
    Blocked(Regs, Option<u64>),
    /// On a CPU: sampled.
    Running,
}

/// The threads of `tgid` whose native stacks a capture reads, in the order
/// of [`stacks::threads`], at most [`MAX_NATIVE_THREADS`].
fn plan_threads(tgid: u32, due: &[(Wait, String)], waiting: &[Wait]) -> Vec<(u32, Planned)> {
    let mut tids = stacks::threads::tids_of(tgid);
    tids.truncate(MAX_THREADS_LOOKED_AT);
    let threads: HashSet<u32> = tids.iter().copied().collect();
    let recorded: HashMap<u32, Wait> = waiting.iter().map(|w| (w.tid, *w)).collect();
    let state_of = |tid: u32| -> Option<Planned> {
        if let Some(w) = recorded.get(&tid) {
            return Some(Planned::Recorded(*w));
        }
        Some(match stacks::threads::thread_state(tgid, tid)? {
            ThreadState::InSyscall { nr, regs, .. } => Planned::Blocked(regs, Some(nr)),
            ThreadState::Blocked { regs } => Planned::Blocked(regs, None),
            ThreadState::Running => Planned::Running,
        })
    };
    let mut plan: Vec<(u32, Planned)> = due.iter().map(|(w, _)| (w.tid, Planned::Recorded(*w))).collect();
    for (w, _) in due.iter().filter(|(w, _)| w.gpu_api.is_none()) {
        if let Some(owner) = stacks::threads::lock_owner(tgid, w.uaddr, w.op, &threads) {
            if !plan.iter().any(|p| p.0 == owner) {
                plan.extend(state_of(owner).map(|p| (owner, p)));
            }
        }
    }
    let mut others: Vec<(u32, Planned)> = tids
        .iter()
        .filter(|t| !plan.iter().any(|p| p.0 == **t))
        .filter_map(|&t| state_of(t).map(|p| (t, p)))
        .collect();
    others.sort_by_key(|(_, p)| rank(p));
    plan.extend(others);
    plan.truncate(MAX_NATIVE_THREADS);
    plan
}

const FUTEX_NR: u64 = 202;
const FUTEX_WAITV_NR: u64 = 449;

/// The order of the threads that are neither waiting nor named by the
/// lock: running, then blocked in a call other than a futex wait, then the
/// other waits (a stable sort keeps thread id order within each).
fn rank(p: &Planned) -> u8 {
    match p {
        Planned::Running => 0,
        Planned::Blocked(_, nr) if *nr != Some(FUTEX_NR) && *nr != Some(FUTEX_WAITV_NR) => 1,
        _ => 2,
    }
}

/// Reads the stacks of `tgid` for the waits `due` (its request threads'
/// long waits, named), `waiting` being every wait of the process in
/// progress the kernel recorded.
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
    let plan = plan_threads(tgid, due, waiting);
    let running: Vec<u32> =
        plan.iter().filter(|(_, p)| *p == Planned::Running).map(|(t, _)| *t).take(MAX_SAMPLED).collect();
    let mut samples = stacks::sample::sample_threads(&running, SAMPLE_TIMEOUT);
    let mut starts = Vec::new();
    // Threads read from the registers /proc published: checked again after.
    let mut published: Vec<(u32, Regs)> = Vec::new();
    let mut native_how = HashMap::new();
    let mut native_results: HashMap<u32, Result<(), CaptureError>> = HashMap::new();
    for (tid, p) in plan {
        let (start, how) = match p {
            Planned::Recorded(w) => {
                (Start::Regs(w.regs), format!("waiting in {}", w.gpu_api.unwrap_or("futex")))
            }
            Planned::Blocked(regs, nr) => {
                published.push((tid, regs));
                let how = match nr {
                    Some(nr) => format!("blocked in {}", stacks::threads::syscall_name(nr)),
                    None => "blocked outside a system call".to_string(),
                };
                (Start::Regs(regs), how)
            }
            Planned::Running => match samples.remove(&tid) {
                Some(Ok(s)) => {
                    (Start::Sample(s), "running: its stack is a sample of that instant".to_string())
                }
                Some(Err(e)) => {
                    native_how.insert(tid, format!("running, not sampled: {e}"));
                    native_results.insert(tid, Err(CaptureError::Other(e)));
                    continue;
                }
                None => {
                    let why = if running.contains(&tid) {
                        format!("running, and no sample within {} ms", SAMPLE_TIMEOUT.as_millis())
                    } else {
                        format!("running (at most {MAX_SAMPLED} threads are sampled)")
                    };
                    native_how.insert(tid, why.clone());
                    native_results.insert(tid, Err(CaptureError::Other(why)));
                    continue;
                }
            },
        };
        native_how.insert(tid, how);
        starts.push((tid, start));
    }
    let mut native = HashMap::new();
    let is_due = |tid: u32| due.iter().any(|d| d.0.tid == tid);
    match stacks::native_stacks(tgid, &starts) {
        Ok(stacks) => {
            for (tid, r) in stacks {
                match r {
                    Ok(frames) => {
                        native.insert(tid, frames);
                        native_results.insert(tid, Ok(()));
                    }
                    Err(e) => {
                        native_how.insert(tid, format!("{}: {e}", e.as_label()));
                        native_results.insert(tid, Err(e));
                    }
                }
            }
        }
        Err(e) => {
            for (tid, _) in &starts {
                native_results.insert(*tid, Err(CaptureError::Other(e.to_string())));
            }
            // The process's error, for the due threads' result labels.
            for (w, _) in due {
                native_results.insert(w.tid, Err(e.clone()));
            }
        }
    }
    // A thread that woke while its stack was read may have changed it
    // under the unwinder: its stack is not kept. (One that blocked again
    // where it was has the same stack.)
    for (tid, regs) in published {
        let now = stacks::threads::thread_state(tgid, tid);
        let same = matches!(now, Some(ThreadState::InSyscall { regs: r, .. } | ThreadState::Blocked { regs: r }) if r == regs);
        if !same && native.remove(&tid).is_some() {
            native_how.insert(tid, "not kept: it woke while its stack was read".to_string());
        }
    }
    for (w, _) in due {
        if let Some(Err(e)) = native_results.get(&w.tid) {
            problems.push(format!("native (tid {}): {}: {e}", w.tid, e.as_label()));
        }
    }
    native_how.retain(|tid, _| !is_due(*tid));
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
                native_how: native_how.clone(),
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

/// Large buffers (a binary's sections, a stack's copy) get pages of their
/// own, returned to the kernel when freed. By default glibc raises its
/// mmap threshold to the largest buffer freed so far (up to 32 MiB), and
/// its trim threshold with it, so that after one capture the next large
/// buffers come from a thread's arena, whose free top (up to twice that) no
/// trim hands back: a capture's megabytes stayed resident one time in
/// three. A fixed threshold turns that off. Called once, at start.
pub fn keep_large_buffers_off_the_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets the allocator's parameters (under its
    // lock); no allocation depends on their values.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_BUFFER as libc::c_int);
    }
}

/// glibc's default mmap threshold, fixed.
const LARGE_BUFFER: usize = 128 << 10;

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
                        native_how: HashMap::new(),
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
            // Before the stacks are shown: whoever sees them sees the
            // daemon's memory as it will stay.
            give_back_memory();
            self.store.add_time(started.elapsed());
            for c in done {
                debug!(pid = tgid, tid = c.tid, result = c.result, "stack capture");
                self.store.insert(c);
            }
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
            native_how: HashMap::new(),
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
        // A thread in a C extension: its C frames, its Python frames, then
        // the interpreter's; the table names the C function.
        let in_module = |f: &str, m: &str| Frame { module: Some(m.into()), ..frame(f, FrameKind::Native) };
        c.python.insert(8, vec![frame("load_weights", FrameKind::Python)]);
        c.native.insert(
            8,
            vec![
                in_module("hold_in_c", "/tmp/libhold.so"),
                in_module("ffi_call_unix64", "/usr/lib/x86_64-linux-gnu/libffi.so.8"),
                in_module("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
                in_module("main", "/usr/bin/python3.11"),
            ],
        );
        let s: Vec<String> = c.stack_of(8).into_iter().map(|f| f.function).collect();
        assert_eq!(s, ["hold_in_c", "ffi_call_unix64", "load_weights", "_PyEval_EvalFrameDefault", "main"]);
        assert_eq!(frame::meaningful_frame(&c.stack_of(8)).unwrap().function, "hold_in_c");
        // In the C library or calling through ctypes: the Python line.
        c.native.get_mut(&8).unwrap().remove(0);
        assert_eq!(frame::meaningful_frame(&c.stack_of(8)).unwrap().function, "load_weights");
        assert_eq!(c.note(Some(7)), "captured 1.2 s into the wait");
        assert!(c.note(Some(9)).ends_with("no stack of the waker (tid 9) was captured"));
        c.result = "rate_limited";
        assert!(c.note(None).starts_with("rate_limited"));
    }

    #[test]
    fn possible_holders_at_work_come_before_idle_waiters() {
        let regs = Regs { ip: 1, sp: 2, bp: 0 };
        let wait = Wait { tgid: 1, tid: 5, start_ns: 0, regs, uaddr: 0x10, op: 128, gpu_api: None };
        let mut others = [
            (2, Planned::Recorded(wait)),
            (3, Planned::Blocked(regs, Some(FUTEX_NR))),
            (4, Planned::Blocked(regs, Some(0))),
            (6, Planned::Running),
            (7, Planned::Blocked(regs, None)),
            (8, Planned::Blocked(regs, Some(230))),
        ];
        others.sort_by_key(|(_, p)| rank(p));
        let order: Vec<u32> = others.iter().map(|(t, _)| *t).collect();
        assert_eq!(order, [6, 4, 7, 8, 2, 3]);
    }

    #[test]
    fn the_note_says_what_the_waker_was_doing() {
        let mut c = cap(7, 1_000_000_000, 1_500_000_000);
        c.native.insert(7, vec![frame("__lll_lock_wait", FrameKind::Native)]);
        c.native.insert(9, vec![frame("hold_computing", FrameKind::Native)]);
        c.native_how.insert(9, "running: its stack is a sample of that instant".into());
        c.native_how.insert(11, "running, and no sample within 100 ms".into());
        assert_eq!(
            c.note(Some(9)),
            "captured 0.5 s into the wait; the waker (tid 9) was running: its stack is a sample of that instant"
        );
        assert!(c
            .note(Some(11))
            .ends_with("no stack of the waker (tid 11): running, and no sample within 100 ms"));
        assert!(c.note(Some(12)).ends_with("no stack of the waker (tid 12) was captured"));
        c.python.insert(11, vec![frame("load", FrameKind::Python)]);
        assert!(c.note(Some(11)).contains("; no native stack of the waker (tid 11): running"));
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
