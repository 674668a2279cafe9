//! futex_stall: a request thread blocked on a lock for seconds.
//!
//! The rule. A futex call is a stall when all of these hold:
//! 1. it is a wait: FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI,
//!    FUTEX_LOCK_PI2, FUTEX_WAIT_REQUEUE_PI, or futex_waitv (wakes are not
//!    waits);
//! 2. it lasted at least the stall threshold (default 1 s);
//! 3. it ended because it was woken or got the lock (it returned 0, or a
//!    futex_waitv index): waits that time out (ETIMEDOUT, e.g. the Python
//!    GIL's 5 ms timed waits) or are interrupted are not stalls;
//! 4. the thread is a request thread: the process's main thread (in a
//!    Python worker the request usually runs there), or a thread whose name
//!    matches a --stall-thread pattern, and no --stall-ignore-thread pattern.
//!    Idle pool workers (data-loader and intra-op threads waiting for work)
//!    are other threads, so their long waits are not stalls.
//!
//! The thread that woke it, when the kernel saw the wake, is reported too,
//! and with `run --stack-captures on` the stacks read while the stall
//! lasted (crate::stacks::capture): the waiting thread's, and the waker's.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use glob::Pattern;
use prometheus::proto::{
    MetricFamily,
    MetricType::{COUNTER, GAUGE},
};
use serde::{Deserialize, Serialize};
use sonic_probe_common::syscalls;

use super::{
    state::{StateMap, Tracked},
    tally::Tally,
    DetailKind, Detector, DetectorCounts, Evictions, Input, LiveFile, Record, Registration,
};
use crate::{
    events::Event,
    metrics::family::{def, family, gauge, Fold, MetricDef},
    os::futex,
    stacks::capture::CaptureStore,
    stacks::{frame, Frame},
    stats::labels::OTHER,
};

pub const DETECTOR: Registration = Registration {
    kind: Detail::KIND,
    metrics: METRICS,
    new: |s, shared| Box::new(FutexStall::new(s, shared)),
};

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Waits at least this long are stalls.
    pub threshold: Duration,
    /// Thread-name patterns of request threads besides the main thread.
    pub threads: Vec<Pattern>,
    /// Thread-name patterns never reported as stalled.
    pub ignore_threads: Vec<Pattern>,
}

/// Its finding: a request thread waited on a futex for at least the stall
/// threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub tid: u32,
    pub thread: String,
    /// The longest stall of this thread.
    pub wait_seconds: f64,
    /// The futex operation of that stall (FUTEX_WAIT_PRIVATE, ...).
    pub op: String,
    /// Its futex word, hex.
    pub uaddr: String,
    pub waker_tid: Option<u32>,
    pub waker_thread: Option<String>,
    /// Stalls of this thread.
    pub count: u64,
    /// The waiting thread's stack during that stall, innermost frame
    /// first: its Python frames, then its native ones (`run
    /// --stack-captures`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<Frame>,
    /// The waker's stack while the request waited (what the holder was
    /// doing): its Python frames, then its native ones if it was in a
    /// futex wait itself then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waker_stack: Vec<Frame>,
    /// Why a stack is missing or partial, and how far into the wait
    /// the stacks were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_note: Option<String>,
    /// The wait of the stall the stacks are of: the longest stall that
    /// was captured (a later, longer one may not be: rate limited), so it
    /// may be less than `wait_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_wait_seconds: Option<f64>,
}

impl Detail {
    fn has_stacks(&self) -> bool {
        !self.stack.is_empty() || !self.waker_stack.is_empty()
    }

    /// The stacks of a shorter stall than the longest, said so (shorter
    /// as printed, to the hundredth of a second: stalls of one known
    /// length differ by microseconds).
    fn of_shorter_stall(&self) -> Option<f64> {
        let cs = |s: f64| (s * 100.0).round();
        self.stack_wait_seconds.filter(|w| self.has_stacks() && cs(*w) < cs(self.wait_seconds))
    }
}

impl DetailKind for Detail {
    const KIND: &'static str = "futex_stall";

    fn problem_key(&self) -> String {
        self.thread.clone()
    }

    fn fold(&mut self, later: Self) {
        let count = self.count + later.count;
        // The details are those of the longest wait (the thread name is the
        // same: it is the problem's key); the stacks, those of the longest
        // captured one.
        let stacks =
            |d: &Detail| (d.stack.clone(), d.waker_stack.clone(), d.stack_note.clone(), d.stack_wait_seconds);
        // (An older daemon's stacks, without stack_wait_seconds: the longest's.)
        let of = |d: &Detail| d.stack_wait_seconds.unwrap_or(d.wait_seconds);
        let captured = match (self.has_stacks(), later.has_stacks()) {
            (true, true) if of(&later) >= of(self) => Some(stacks(&later)),
            (true, _) => Some(stacks(self)),
            (false, true) => Some(stacks(&later)),
            (false, false) => None,
        };
        if later.wait_seconds >= self.wait_seconds {
            *self = later;
        }
        if let Some((st, ws, sn, sw)) = captured {
            (self.stack, self.waker_stack, self.stack_note, self.stack_wait_seconds) = (st, ws, sn, sw);
        }
        self.count = count;
    }

    // Its stack frames name source files of code, not data: no paths to hide.

    fn describe(&self) -> String {
        let Detail { tid, thread, wait_seconds, op, uaddr, waker_tid, waker_thread, count, .. } = self;
        let woken = match (waker_thread, waker_tid) {
            (Some(name), Some(t)) => format!(", woken by {name} (tid {t})"),
            (None, Some(t)) => format!(", woken by tid {t}"),
            _ => String::new(),
        };
        let plural = if *count == 1 { "" } else { "s" };
        let mut s = format!(
            "thread {thread} (tid {tid}) waited {wait_seconds:.2} s in {op} on {uaddr}{woken}; {count} stall{plural}"
        );
        let mut where_ = Vec::new();
        if let Some(f) = frame::meaningful_frame(&self.stack) {
            where_.push(format!("{} waits", frame::short_frame(f)));
        }
        if let Some(f) = frame::meaningful_frame(&self.waker_stack) {
            where_.push(format!("{} holds", frame::short_frame(f)));
        }
        if !where_.is_empty() {
            s.push_str(&format!("; {}", where_.join("; ")));
            if let Some(w) = self.of_shorter_stall() {
                s.push_str(&format!(" (stacks of a {w:.2} s stall)"));
            }
        } else if let Some(note) = &self.stack_note {
            // Only the reason (the part before any detail).
            let why = note.split(';').next().unwrap_or(note);
            if !why.starts_with("captured") {
                s.push_str(&format!("; no stack: {why}"));
            }
        }
        s
    }

    fn stacks(&self) -> String {
        let mut out = String::new();
        let mut block = |title: String, frames: &[Frame]| {
            if frames.is_empty() {
                return;
            }
            out.push_str(&format!("    {title}:\n"));
            for fr in frames {
                out.push_str(&format!("      {}\n", frame::long_frame(fr)));
            }
        };
        block(format!("waiting thread (tid {})", self.tid), &self.stack);
        let waker = self.waker_tid.map_or_else(|| "waker".to_string(), |w| format!("waker (tid {w})"));
        block(waker, &self.waker_stack);
        if let Some(note) = &self.stack_note {
            out.push_str(&format!("    stacks: {note}\n"));
        }
        if let Some(w) = self.of_shorter_stall() {
            out.push_str(&format!(
                "    of a {w:.2} s stall: the longest ({:.2} s) was not captured\n",
                self.wait_seconds
            ));
        }
        out
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_futex_stalls_total", COUNTER, &["comm", "workload", "thread"],
        "Futex waits of request threads that lasted at least --stall-threshold (the futex_stall rule)."),
    def("sonic_probe_futex_stall_max_seconds", GAUGE, &["comm", "workload"],
        "Longest futex stall among the current findings (within --findings-window)."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Stalls by thread name.
    stalls: Tally<String>,
    /// (comm, cgroup) -> the longest stall among the current findings (seconds).
    max_seconds: HashMap<(String, u64), f64>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(self.stalls.export(&METRICS[0], fold, |f, thread| [f.thread(thread)]));
        let mut max: BTreeMap<_, f64> = BTreeMap::new();
        for ((comm, cgroup), s) in &self.max_seconds {
            let e = max.entry(fold.who(comm, *cgroup)).or_default();
            *e = e.max(*s);
        }
        out.push(family(&METRICS[1], max.iter().map(|(w, s)| gauge(&w.pairs(), *s)).collect()));
    }
}

/// What it is told by the options (findings::Settings).
struct Config {
    threshold_ns: u64,
    request_threads: Vec<Pattern>,
    ignore_threads: Vec<Pattern>,
    window_ns: u64,
    max: usize,
}

impl Config {
    fn new(s: &super::Settings) -> Self {
        Config {
            threshold_ns: s.futex_stall.threshold.as_nanos() as u64,
            request_threads: s.futex_stall.threads.clone(),
            ignore_threads: s.futex_stall.ignore_threads.clone(),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
        }
    }
}

pub struct FutexStall {
    /// Its thresholds and windows, replaced whole on SIGHUP.
    cfg: Config,
    /// (incarnation, tid) -> its stalls: every one is a finding.
    records: StateMap<(u64, u32), Record>,
    /// Stacks captured while waits lasted (None: captures off).
    captures: Option<CaptureStore>,
    counts: Counts,
}

/// The stacks of a stall and why they are missing or partial.
type Stacks = (Vec<Frame>, Vec<Frame>, Option<String>);

impl FutexStall {
    pub fn new(s: &super::Settings, shared: &super::Shared) -> Self {
        FutexStall {
            cfg: Config::new(s),
            records: StateMap::new(DETECTOR.kind, |k: &(u64, u32)| k.0, s.max_findings),
            captures: shared.captures.clone(),
            counts: Counts::default(),
        }
    }

    /// The stacks captured during the wait of `tid` that started at
    /// `start_ns` (the call's entry), taken out of the store.
    fn stacks(&self, tid: u32, start_ns: u64, waker_tid: Option<u32>) -> Stacks {
        let Some(store) = &self.captures else { return (Vec::new(), Vec::new(), None) };
        match store.take(tid, start_ns) {
            Some(c) => (
                c.stack_of(tid),
                waker_tid.map(|w| c.stack_of(w)).unwrap_or_default(),
                Some(c.note(waker_tid)),
            ),
            None => (
                Vec::new(),
                Vec::new(),
                Some("not captured: the wait ended before the capturer saw it past the threshold".into()),
            ),
        }
    }

    fn is_request_thread(&self, tgid: u32, tid: u32, name: &str) -> bool {
        futex::is_request_thread(tgid, tid, name, &self.cfg.request_threads, &self.cfg.ignore_threads)
    }
}

impl Detector for FutexStall {
    fn observe(&mut self, input: &Input<'_>, _evictions: &mut Evictions) {
        let Event::Call(c) = input.event else { return };
        let (op, woken) = match c.raw.syscall {
            syscalls::FUTEX if futex::is_wait(c.raw.args[1]) => {
                (futex::op_name(c.raw.args[1]), c.raw.ret == 0)
            }
            syscalls::FUTEX_WAITV => ("futex_waitv".to_string(), c.raw.ret >= 0),
            _ => return,
        };
        if !woken || c.raw.duration_ns < self.cfg.threshold_ns {
            return;
        }
        let thread = c.thread_name();
        if !self.is_request_thread(c.tgid(), c.tid(), &thread) {
            return;
        }
        let end = c.raw.header.time_ns + c.raw.duration_ns;
        let wait = c.raw.duration_ns as f64 / 1e9;
        let waker_tid = (c.raw.waker_tid != 0).then_some(c.raw.waker_tid);
        let waker_thread = c.waker_name();
        let comm = c.process_name();
        let (stack, waker_stack, stack_note) = self.stacks(c.tid(), c.raw.header.time_ns, waker_tid);
        self.counts.stalls.add(&comm, input.cgroup, thread.clone(), OTHER.to_string(), 1);
        let rec = self.records.map.entry((input.incarnation, c.tid())).or_insert_with(|| Record {
            cgroup: 0,
            detail: Detail {
                tid: c.tid(),
                thread: thread.clone(),
                wait_seconds: 0.0,
                op: String::new(),
                uaddr: String::new(),
                waker_tid: None,
                waker_thread: None,
                count: 0,
                stack: Vec::new(),
                waker_stack: Vec::new(),
                stack_note: None,
                stack_wait_seconds: None,
            }
            .into(),
            pid: c.tgid(),
            incarnation: input.incarnation,
            comm: comm.clone(),
            first_ns: end,
            last_ns: end,
        });
        rec.last_ns = end;
        rec.comm = comm;
        if let super::Detail::FutexStall(Detail {
            wait_seconds,
            op: o,
            uaddr,
            waker_tid: w,
            waker_thread: wt,
            count,
            thread: t,
            stack: st,
            waker_stack: ws,
            stack_note: sn,
            stack_wait_seconds: sw,
            ..
        }) = &mut rec.detail
        {
            *count += 1;
            *t = thread;
            let longest = wait >= *wait_seconds;
            // The details are those of the longest stall.
            if longest {
                *wait_seconds = wait;
                *o = op;
                *uaddr = format!("{:#x}", c.raw.args[0]);
                *w = waker_tid;
                *wt = waker_thread;
            }
            // The stacks, those of the longest stall captured; the note of
            // the longest while none was.
            let captured = !stack.is_empty() || !waker_stack.is_empty();
            let had = !st.is_empty() || !ws.is_empty();
            if captured && (!had || sw.is_none_or(|k| wait >= k)) {
                (*st, *ws, *sn, *sw) = (stack, waker_stack, stack_note, Some(wait));
            } else if !had && longest {
                *sn = stack_note;
            }
        }
    }

    fn reconfigure(&mut self, s: &super::Settings) {
        self.cfg = Config::new(s);
    }

    fn prune(&mut self, now_ns: u64, _live: &[LiveFile<'_>], ev: &mut Evictions) {
        self.records.prune(now_ns.saturating_sub(self.cfg.window_ns), self.cfg.max, ev);
    }

    fn findings(&self, now_ns: u64, _live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        out.extend(self.records.current(now_ns.saturating_sub(self.cfg.window_ns)).map(|(_, r)| r.clone()));
    }

    fn counts(&self, listed: &[Record]) -> Box<dyn DetectorCounts> {
        let mut counts = self.counts.clone();
        for r in listed {
            if let super::Detail::FutexStall(Detail { wait_seconds, .. }) = r.detail {
                let m = counts.max_seconds.entry((r.comm.clone(), r.cgroup)).or_insert(0.0);
                *m = m.max(wait_seconds);
            }
        }
        Box::new(counts)
    }
}

impl Tracked for Record {
    fn last_ns(&self) -> u64 {
        self.last_ns
    }
    fn reported(&self) -> bool {
        true
    }
    fn hits(&self) -> u64 {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{self, testing::*, Engine, Settings, Shared};

    const WAIT_PRIVATE: u64 = 128;
    const WAIT_BITSET_RT: u64 = 9 | 128 | 256;
    const ETIMEDOUT: i64 = -110;

    fn engine(f: impl FnOnce(&mut Settings)) -> Engine {
        engine_sharing(f, &Shared::default())
    }

    fn engine_sharing(f: impl FnOnce(&mut Settings), shared: &Shared) -> Engine {
        let mut s = Settings::default();
        s.futex_stall.threshold = Duration::from_secs(1);
        f(&mut s);
        Engine::sharing(&s, shared)
    }

    fn wait(tgid: u32, tid: u32, t: u64, dur: u64, ret: i64, op: u64, waker: u32) -> Event {
        let mut c = call(syscalls::FUTEX, tgid, tid, t, dur, ret, [0x7f00_1234, op, 1, 0, 0, 0]);
        c.raw.waker_tid = waker;
        c.raw.waker_comm = sonic_probe_common::comm_bytes("loader");
        Event::Call(c)
    }

    fn stalls(e: &mut Engine, now: u64) -> Vec<findings::Detail> {
        e.findings(now, &[])
            .into_iter()
            .filter(|f| f.detail.kind() == "futex_stall")
            .map(|f| f.detail)
            .collect()
    }

    #[test]
    fn main_thread_woken_after_seconds_is_a_stall() {
        let mut e = engine(|_| {});
        e.observe(&wait(100, 100, SEC, 3 * SEC + SEC / 5, 0, WAIT_PRIVATE, 105));
        let s = stalls(&mut e, 10 * SEC);
        assert_eq!(s.len(), 1);
        let findings::Detail::FutexStall(Detail { tid, wait_seconds, op, uaddr, waker_tid, count, .. }) =
            &s[0]
        else {
            panic!()
        };
        assert_eq!((*tid, *count, *waker_tid), (100, 1, Some(105)));
        assert_eq!(op, "FUTEX_WAIT_PRIVATE");
        assert_eq!(uaddr, "0x7f001234");
        assert!((wait_seconds - 3.2).abs() < 1e-9);
        assert_eq!(counts::<Counts>(&e).stalls.get("app", 0, "app".into()), 1);
    }

    #[test]
    fn idle_pool_workers_timeouts_and_short_waits_are_not() {
        let mut e = engine(|_| {});
        // An idle worker thread woken after 5 s: not a request thread.
        e.observe(&wait(100, 101, SEC, 5 * SEC, 0, WAIT_BITSET_RT, 100));
        // GIL-like timed waits of the main thread that time out.
        for i in 0..100 {
            e.observe(&wait(100, 100, 2 * SEC + i * 5_000_000, 5_000_000, ETIMEDOUT, WAIT_BITSET_RT, 0));
        }
        // A long timed wait that timed out is not a stall either.
        e.observe(&wait(100, 100, 3 * SEC, 2 * SEC, ETIMEDOUT, WAIT_BITSET_RT, 0));
        // A wake is not a wait, however long.
        e.observe(&wait(100, 100, 4 * SEC, 2 * SEC, 1, 1 | 128, 0));
        // Just under the threshold.
        e.observe(&wait(100, 100, 5 * SEC, SEC - 1, 0, WAIT_PRIVATE, 101));
        assert!(stalls(&mut e, 10 * SEC).is_empty());
    }

    #[test]
    fn thread_patterns_select_and_ignore() {
        let mut e = engine(|s| {
            s.futex_stall.threads = vec![Pattern::new("worker").unwrap()];
        });
        e.observe(&wait(100, 101, SEC, 2 * SEC, 0, WAIT_PRIVATE, 0));
        assert_eq!(stalls(&mut e, 5 * SEC).len(), 1, "named request thread");
        let mut e = engine(|s| {
            s.futex_stall.ignore_threads = vec![Pattern::new("ap*").unwrap()];
        });
        e.observe(&wait(100, 100, SEC, 2 * SEC, 0, WAIT_PRIVATE, 0));
        assert!(stalls(&mut e, 5 * SEC).is_empty(), "ignored main thread");
    }

    #[test]
    fn every_wait_op_counts_and_the_longest_is_reported() {
        let mut e = engine(|_| {});
        for (i, op) in [0u64, 6, 9, 11, 13].iter().enumerate() {
            e.observe(&wait(100, 100, SEC * (i as u64 * 10), SEC + i as u64, 0, *op, 0));
        }
        let mut waitv = call(syscalls::FUTEX_WAITV, 100, 100, 60 * SEC, 4 * SEC, 0, [0; 6]);
        waitv.raw.waker_tid = 0;
        e.observe(&Event::Call(waitv));
        let s = stalls(&mut e, 70 * SEC);
        let findings::Detail::FutexStall(Detail { count, op, wait_seconds, .. }) = &s[0] else { panic!() };
        assert_eq!(*count, 6);
        assert_eq!(op, "futex_waitv");
        assert_eq!(*wait_seconds, 4.0);
    }

    #[test]
    fn stalls_age_out_after_the_window() {
        let mut e = engine(|s| s.window = Duration::from_secs(60));
        e.observe(&wait(100, 100, SEC, 2 * SEC, 0, WAIT_PRIVATE, 0));
        assert_eq!(stalls(&mut e, 62 * SEC).len(), 1, "last seen at 3 s, inside the window");
        assert!(stalls(&mut e, 64 * SEC).is_empty(), "gone after 60 s without a stall");
    }

    #[test]
    fn stalls_carry_the_stacks_captured_while_they_lasted() {
        use crate::{
            stacks::capture::{Capture, CaptureStore},
            stacks::{Frame, FrameKind},
        };
        let frame = |f: &str| Frame {
            function: f.into(),
            file: Some("/srv/app.py".into()),
            line: Some(7),
            module: None,
            kind: FrameKind::Python,
        };
        let store = CaptureStore::new();
        let mut e = engine_sharing(|_| {}, &Shared { captures: Some(store.clone()) });
        let mut c = Capture {
            tgid: 100,
            tid: 100,
            thread: "app".into(),
            gpu_api: None,
            start_ns: SEC,
            captured_ns: SEC + SEC / 2,
            result: "ok",
            python: Default::default(),
            native: Default::default(),
            native_how: Default::default(),
            problems: Vec::new(),
            interval: Duration::from_secs(10),
        };
        c.python.insert(100, vec![frame("infer")]);
        c.python.insert(105, vec![frame("load_weights")]);
        c.native.insert(100, vec![Frame { kind: FrameKind::Native, ..frame("futex_wait") }]);
        store.insert(c);
        e.observe(&wait(100, 100, SEC, 2 * SEC, 0, WAIT_PRIVATE, 105));
        let s = stalls(&mut e, 5 * SEC);
        let findings::Detail::FutexStall(Detail { stack, waker_stack, stack_note, .. }) = &s[0] else {
            panic!()
        };
        let names = |st: &[Frame]| st.iter().map(|f| f.function.clone()).collect::<Vec<_>>();
        assert_eq!(names(stack), ["infer", "futex_wait"]);
        assert_eq!(names(waker_stack), ["load_weights"]);
        assert_eq!(stack_note.as_deref(), Some("captured 0.5 s into the wait"));
        assert_eq!(store.pending(), 0, "used once");
        // A shorter stall without a capture leaves the longest's stacks.
        e.observe(&wait(100, 100, 4 * SEC, SEC, 0, WAIT_PRIVATE, 105));
        let s = stalls(&mut e, 6 * SEC);
        let findings::Detail::FutexStall(Detail { stack, count, .. }) = &s[0] else { panic!() };
        assert_eq!((*count, stack.len()), (2, 2));
        // A longer one without a capture (rate limited, or over before the
        // capturer saw it) keeps the captured stall's stacks, and says so.
        e.observe(&wait(100, 100, 7 * SEC, 3 * SEC, 0, WAIT_PRIVATE, 105));
        let s = stalls(&mut e, 11 * SEC);
        let findings::Detail::FutexStall(d) = &s[0] else { panic!() };
        assert_eq!(
            (names(&d.stack), d.wait_seconds, d.stack_wait_seconds),
            (vec!["infer".into(), "futex_wait".into()], 3.0, Some(2.0))
        );
        assert_eq!(d.stack_note.as_deref(), Some("captured 0.5 s into the wait"));
        assert!(
            d.describe().ends_with(
                "infer() at app.py:7 waits; load_weights() at app.py:7 holds (stacks of a 2.00 s stall)"
            ),
            "{}",
            d.describe()
        );
        assert!(
            d.stacks().ends_with("    of a 2.00 s stall: the longest (3.00 s) was not captured\n"),
            "{}",
            d.stacks()
        );
        // Folded with another process's finding without stacks, longer
        // still: its details, these stacks.
        let mut folded = d.clone();
        folded.fold(Detail {
            wait_seconds: 4.0,
            stack: Vec::new(),
            waker_stack: Vec::new(),
            stack_note: Some("not captured".into()),
            stack_wait_seconds: None,
            ..d.clone()
        });
        assert_eq!((folded.wait_seconds, folded.stack_wait_seconds, folded.stack.len()), (4.0, Some(2.0), 2));
        // A stall never captured says why it has none.
        let mut e = engine_sharing(|_| {}, &Shared { captures: Some(store.clone()) });
        e.observe(&wait(100, 100, 7 * SEC, 3 * SEC, 0, WAIT_PRIVATE, 105));
        let s = stalls(&mut e, 11 * SEC);
        let findings::Detail::FutexStall(Detail { stack, stack_note, stack_wait_seconds, .. }) = &s[0] else {
            panic!()
        };
        assert!(stack.is_empty() && stack_wait_seconds.is_none());
        assert!(stack_note.as_deref().unwrap().starts_with("not captured"), "{stack_note:?}");
        // JSON without the new fields (an older daemon's) still parses.
        let old = serde_json::json!({"kind": "futex_stall", "tid": 1, "thread": "t", "wait_seconds": 1.0,
            "op": "FUTEX_WAIT", "uaddr": "0x1", "waker_tid": null, "waker_thread": null, "count": 1});
        let d: findings::Detail = serde_json::from_value(old).unwrap();
        assert!(
            matches!(d, findings::Detail::FutexStall(Detail { ref stack, stack_note: None, .. }) if stack.is_empty())
        );
    }

    #[test]
    fn a_reused_pid_gets_its_own_finding() {
        let mut e = engine(|_| {});
        e.observe(&wait(100, 100, SEC, 2 * SEC, 0, WAIT_PRIVATE, 0));
        e.observe(&exit(100, 4 * SEC));
        e.observe(&wait(100, 100, 5 * SEC, 2 * SEC, 0, WAIT_PRIVATE, 0));
        let s = stalls(&mut e, 10 * SEC);
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|d| matches!(d, findings::Detail::FutexStall(Detail { count: 1, .. }))));
    }
}
