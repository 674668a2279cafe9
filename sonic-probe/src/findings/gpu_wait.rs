//! gpu_wait: a request thread that spent most of its time waiting for the
//! GPU: inside CUDA's synchronizes and synchronous copies (the uprobes of
//! bpf/gpu_wait.h), spinning or blocked, or blocked in an ioctl on a GPU
//! device.
//!
//! Why: with CUDA's default scheduling the waiting thread spins on a CPU,
//! making no system call; without this the service looks busy on CPU.
//! The classic cause is a needless synchronize per step (`.item()` or
//! `.cpu()` in a loop): each step waits for the GPU to drain.
//!
//! Its shares come from no event: at each sweep the daemon hands it the
//! GPU waits the uprobes counted per (workload cgroup, process name, api)
//! ([`GpuWaitSample`], sonic_probe_gpu_wait_duration_seconds' map) and
//! then the scheduler programs' totals ([`ThreadSample`]), as cpu_starved
//! gets them. Its one event is a long wait's end (EVENT_GPU_WAIT).
//!
//! The rule. Over the last `window` (--gpu-wait-window, default 10 s; from
//! the last sweep at or before `window` ago, as cpu_starved's):
//! 1. the key is a request thread's (cpu_starved's rule: the process's
//!    name, or a --stall-thread pattern, and no --stall-ignore-thread);
//! 2. its threads were alive most of the window ([`ALIVE_SHARE`]);
//! 3. the share of that time in state `gpu` is at least `share`
//!    (--gpu-wait-share, default 0.5): a process that synchronizes now and
//!    then is far below it;
//! 4. a process of that name in that cgroup runs now and started before
//!    the window did.
//!
//! Or, whatever the share: a single wait of a request thread lasted at
//! least --stall-threshold (the uprobes send each wait of at least the
//! kernel's slow-call threshold as an event at its return) within the
//! window: the GPU stuck on a long kernel, or a copy behind one.
//!
//! The finding says how long and which calls: the process's waits per api
//! in the window (time, count, waits per second), the longest first. Waits
//! are counted per process name, so a process with several waiting
//! threads shows them all under each thread's finding. With
//! --stack-captures on it leads with the line that waited: the stack read
//! during the long wait, or, for a share, one read at a later wait of that
//! thread, asked of the capturer when the finding is made (the thread is
//! in a wait most of the time, so the capturer sees one within a poll or
//! two).

use std::collections::{BTreeMap, HashMap, VecDeque};

use prometheus::proto::{MetricFamily, MetricType::COUNTER};
use serde::{Deserialize, Serialize};

use super::{
    cpu_starved::{Incarnations, ThreadFacts, ALIVE_SHARE},
    tally::Tally,
    thread_share::{self, delta, trim, Config, Found, Key},
    DetailKind, Detector, DetectorCounts, Evictions, Input, LiveFile, Record, Registration,
};
use crate::{
    events::Event,
    gpu::waits::GpuWaitSample,
    metrics::family::{def, Fold, MetricDef},
    stacks::{capture::CaptureStore, frame, Frame},
    stats::labels::OTHER,
    threads::{StateNs, ThreadSample},
};
use sonic_probe_common::THREAD_GPU;

pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, shared| Box::new(GpuWait::new(s, shared)) };

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The share of a request thread's time waiting for the GPU that makes
    /// a finding (0 < share <= 1).
    pub share: f64,
    /// Over this long.
    pub window: std::time::Duration,
}

/// Apis listed per finding at most.
pub const MAX_APIS: usize = 4;
/// Keys followed at most (the kernel has 2048 thread slots).
const MAX_TRACKS: usize = 8192;
/// (cgroup, process name) pairs whose waits are followed at most (the
/// kernel's gpu_waits map has 1024 entries).
const MAX_PROCESSES: usize = 4096;

/// One api's waits in a finding's window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiWaits {
    pub api: String,
    pub seconds: f64,
    pub waits: u64,
    pub waits_per_second: f64,
}

/// The longest single wait of a finding's thread, one of at least
/// --stall-threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongWait {
    pub api: String,
    pub seconds: f64,
    pub tid: u32,
}

/// Its finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub thread: String,
    /// The window the share is of.
    pub window_seconds: f64,
    /// Time its threads waited for the GPU in the window.
    pub gpu_seconds: f64,
    /// gpu_seconds over all of its threads' time in the window (the
    /// largest seen).
    pub gpu_share: f64,
    /// The process's waits in CUDA's calls in the window, the longest
    /// first (at most [`MAX_APIS`]); none: it waited in ioctls on a GPU
    /// device only.
    pub apis: Vec<ApiWaits>,
    /// Seconds (sweeps) the rule held.
    pub count: u64,
    /// Its longest wait, when one lasted at least --stall-threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_wait: Option<LongWait>,
    /// The waiting thread's stack during a wait, innermost frame first:
    /// its Python frames, then its native ones (`run --stack-captures`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<Frame>,
    /// Why the stack is missing or partial, and when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_note: Option<String>,
}

impl Detail {
    /// A finding of `thread` over `span_ns` in which it waited `gpu_ns`
    /// (`share` of its time) in `apis`, no more known yet.
    fn of_window(thread: &str, span_ns: u64, gpu_ns: u64, share: f64, apis: Vec<ApiWaits>) -> Detail {
        Detail {
            thread: thread.to_string(),
            window_seconds: span_ns as f64 / 1e9,
            gpu_seconds: gpu_ns as f64 / 1e9,
            gpu_share: share,
            apis,
            count: 1,
            longest_wait: None,
            stack: Vec::new(),
            stack_note: None,
        }
    }

    /// `update` of a finding seen again: `later`, with the peak share, the
    /// longest wait and, if `later` has none, the earlier stack.
    fn updated(&self, later: Detail) -> Detail {
        let (stack, stack_note) = if later.stack.is_empty() && !self.stack.is_empty() {
            (self.stack.clone(), self.stack_note.clone())
        } else {
            (later.stack, later.stack_note)
        };
        let longest_wait = match (&self.longest_wait, later.longest_wait) {
            (Some(a), Some(b)) => Some(if b.seconds >= a.seconds { b } else { a.clone() }),
            (a, b) => b.or_else(|| a.clone()),
        };
        Detail {
            gpu_share: self.gpu_share.max(later.gpu_share),
            longest_wait,
            stack,
            stack_note,
            count: self.count + later.count,
            ..later
        }
    }
}

impl DetailKind for Detail {
    const KIND: &'static str = "gpu_wait";

    fn problem_key(&self) -> String {
        self.thread.clone()
    }

    fn fold(&mut self, later: Self) {
        *self = self.updated(later);
    }

    // Its stack frames name source files of code, not data: no paths to hide.

    fn stacks(&self) -> String {
        if self.stack.is_empty() && self.stack_note.is_none() {
            return String::new();
        }
        let mut out = String::new();
        if !self.stack.is_empty() {
            out.push_str("    waiting thread:\n");
            for fr in &self.stack {
                out.push_str(&format!("      {}\n", frame::long_frame(fr)));
            }
        }
        if let Some(note) = &self.stack_note {
            out.push_str(&format!("    stacks: {note}\n"));
        }
        out
    }

    fn describe(&self) -> String {
        let how = match self.apis.first() {
            _ if self.window_seconds == 0.0 => String::new(),
            Some(a) => {
                let others: Vec<String> =
                    self.apis[1..].iter().map(|o| format!("{} {:.1} s", o.api, o.seconds)).collect();
                let others =
                    if others.is_empty() { String::new() } else { format!("; also {}", others.join(", ")) };
                let rate = if a.waits_per_second < 10.0 {
                    format!("{:.1}", a.waits_per_second)
                } else {
                    format!("{:.0}", a.waits_per_second)
                };
                let plural = if a.waits == 1 { "" } else { "s" };
                format!(" in {}: {:.1} s, {} wait{plural} ({rate}/s){others}", a.api, a.seconds, a.waits)
            }
            None if self.longest_wait.is_some() => String::new(),
            None => " in ioctls on a GPU device".to_string(),
        };
        let lead = frame::meaningful_frame(&self.stack)
            .map_or(String::new(), |f| format!("{}: ", frame::short_frame(f)));
        let share = format!(
            "{:.0}% of its time ({:.1} s of {:.0} s){how}",
            self.gpu_share * 100.0,
            self.gpu_seconds,
            self.window_seconds
        );
        let mut s = match &self.longest_wait {
            // Without the scheduler's totals (no window): the wait alone.
            Some(l) if self.window_seconds == 0.0 => {
                format!(
                    "{lead}thread {} waited {:.2} s for the GPU in {} (tid {})",
                    self.thread, l.seconds, l.api, l.tid
                )
            }
            Some(l) => format!(
                "{lead}thread {} waited {:.2} s for the GPU in {} (tid {}); it waits {share}",
                self.thread, l.seconds, l.api, l.tid
            ),
            None => format!("{lead}thread {} waits for the GPU {share}", self.thread),
        };
        if self.stack.is_empty() {
            if let Some(note) = &self.stack_note {
                let why = note.split(';').next().unwrap_or(note);
                if !why.starts_with("captured") {
                    s.push_str(&format!("; no stack: {why}"));
                }
            }
        }
        s
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_gpu_bound_seconds_total", COUNTER, &["comm", "workload", "thread"],
        "Time request threads waited for the GPU while they were gpu_wait (the share of their time in \
         state gpu over --gpu-wait-window at least --gpu-wait-share)."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// GPU time while GPU-bound, by thread name.
    bound_ns: Tally<String>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(self.bound_ns.export(&METRICS[0], fold, |f, t| [f.thread(t)]));
    }
}

/// One sweep's totals of a process's waits: api -> (waits, ns).
#[derive(Debug, Clone, Default, PartialEq)]
struct ApiTotals(BTreeMap<&'static str, (u64, u64)>);

#[derive(Debug)]
struct Track {
    /// (sweep time, its totals).
    points: VecDeque<(u64, StateNs)>,
    finding: Option<Found<Detail>>,
}

impl Track {
    fn new() -> Self {
        Track { points: VecDeque::new(), finding: None }
    }

    /// Its thread's time in state gpu from the first sweep kept to the
    /// last: (ns, share of all its time, span ns); None before two sweeps.
    fn window(&self) -> Option<(u64, f64, u64)> {
        let (first, last) = (self.points.front()?, self.points.back()?);
        let span = last.0.saturating_sub(first.0);
        if span == 0 {
            return None;
        }
        let d = delta(&first.1, &last.1);
        let total: u64 = d.iter().sum();
        let gpu = d[THREAD_GPU as usize];
        Some((gpu, if total == 0 { 0.0 } else { gpu as f64 / total as f64 }, span))
    }

    /// Whether its finding of `incarnation` has a stack.
    fn has_stack(&self, incarnation: u64) -> bool {
        self.finding.as_ref().is_some_and(|f| f.incarnation == incarnation && !f.detail.stack.is_empty())
    }
}

impl thread_share::Track for Track {
    type Detail = Detail;
    fn finding(&self) -> &Option<Found<Detail>> {
        &self.finding
    }
    fn finding_mut(&mut self) -> &mut Option<Found<Detail>> {
        &mut self.finding
    }
    fn last_ns(&self) -> Option<u64> {
        self.points.back().map(|p| p.0)
    }
}

fn config(s: &super::Settings) -> Config {
    Config::new(s.gpu_wait.share, s.gpu_wait.window, s)
}

/// A single wait this long is a finding: --stall-threshold.
fn long_ns(s: &super::Settings) -> u64 {
    u64::try_from(s.futex_stall.threshold.as_nanos()).unwrap_or(u64::MAX)
}

pub struct GpuWait {
    cfg: Config,
    /// A single wait this long is a finding (--stall-threshold).
    long_ns: u64,
    /// Stacks captured while waits lasted (None: captures off).
    captures: Option<CaptureStore>,
    tracks: HashMap<Key, Track>,
    /// (cgroup, process name) -> its waits' totals at each sweep.
    waits: HashMap<(u64, String), VecDeque<(u64, ApiTotals)>>,
    counts: Counts,
}

impl GpuWait {
    pub fn new(s: &super::Settings, shared: &super::Shared) -> Self {
        GpuWait {
            cfg: config(s),
            long_ns: long_ns(s),
            captures: shared.captures.clone(),
            tracks: HashMap::new(),
            waits: HashMap::new(),
            counts: Counts::default(),
        }
    }

    /// A wait that ended (an event: it lasted at least the kernel's
    /// slow-call threshold): one of a request thread of at least
    /// --stall-threshold is a finding at once, with the stack captured
    /// while it lasted.
    fn long_wait(&mut self, input: &Input<'_>) {
        let Event::GpuWait(g) = input.event else { return };
        if g.raw.duration_ns < self.long_ns {
            return;
        }
        let thread = g.thread_name();
        if !self.cfg.is_request_tid(g.tgid(), g.tid(), &thread) {
            return;
        }
        let key = (input.cgroup, g.process_name(), thread);
        if self.tracks.len() >= MAX_TRACKS && !self.tracks.contains_key(&key) {
            return;
        }
        let start = g.raw.header.time_ns;
        let end = start.saturating_add(g.raw.duration_ns);
        let (stack, stack_note) = match &self.captures {
            None => (Vec::new(), None),
            Some(store) => match store.take(g.tid(), start) {
                Some(c) => (c.stack_of(g.tid()), Some(c.note(None))),
                None => (
                    Vec::new(),
                    Some("not captured: the wait ended before the capturer saw it past the threshold".into()),
                ),
            },
        };
        let track = self.tracks.entry(key.clone()).or_insert_with(Track::new);
        let (gpu, _, span) = track.window().unwrap_or((0, 0.0, 0));
        // Of the window's time (see sample's after_long).
        let share = if span == 0 { 0.0 } else { (gpu as f64 / span as f64).min(1.0) };
        let apis = if span == 0 {
            Vec::new()
        } else {
            let last = track.points.back().map_or(end, |p| p.0);
            self.apis(key.0, &key.1, last.saturating_sub(span), span)
        };
        let detail = Detail {
            longest_wait: Some(LongWait {
                api: g.api().to_string(),
                seconds: g.raw.duration_ns as f64 / 1e9,
                tid: g.tid(),
            }),
            stack,
            stack_note,
            ..Detail::of_window(&key.2, span, gpu, share, apis)
        };
        let track = self.tracks.get_mut(&key).expect("made above");
        thread_share::found(&mut track.finding, g.tgid(), input.incarnation, end, detail, |e, d| {
            e.updated(d)
        });
    }

    /// The stack of a share finding of `thread` of `pid`: none while its
    /// finding has one already (kept), a GPU wait's capture of that thread
    /// if the capturer made one, else asked for (at its next wait).
    fn share_stack(
        &self,
        pid: u32,
        thread: &str,
        has_stack: bool,
        now_ns: u64,
    ) -> (Vec<Frame>, Option<String>) {
        let Some(store) = &self.captures else { return (Vec::new(), None) };
        if has_stack {
            return (Vec::new(), None);
        }
        match store.take_gpu(pid, thread) {
            Some(c) => (c.stack_of(c.tid), Some(c.note(None))),
            None => {
                store.want_gpu(pid, thread, now_ns);
                (Vec::new(), Some("not captured yet: asked for at the thread's next wait".into()))
            }
        }
    }

    /// A sweep's waits: every (cgroup, process name, api)'s totals at `now_ns`.
    fn waits_at(&mut self, now_ns: u64, samples: &[GpuWaitSample]) {
        let oldest = now_ns.saturating_sub(self.cfg.window_ns);
        let mut now: HashMap<(u64, String), ApiTotals> = HashMap::new();
        for s in samples {
            let e = now.entry((s.cgroup, s.comm.clone())).or_default().0.entry(s.api).or_default();
            e.0 += s.waits;
            e.1 += s.total_ns;
        }
        // A process whose entries are gone (the kernel never deletes them:
        // only a SIGHUP or the bound leaves one out) is forgotten.
        self.waits.retain(|k, _| now.contains_key(k));
        for (k, totals) in now {
            if self.waits.len() >= MAX_PROCESSES && !self.waits.contains_key(&k) {
                continue;
            }
            let points = self.waits.entry(k).or_default();
            points.push_back((now_ns, totals));
            trim(points, oldest, |p| p.0);
        }
    }

    /// The waits of (cgroup, comm) per api from the sweep at `since` to the
    /// last, the longest first. A process first seen after `since` had its
    /// entries made since: all of their waits are in the window.
    fn apis(&self, cgroup: u64, comm: &str, since: u64, span_ns: u64) -> Vec<ApiWaits> {
        let Some(points) = self.waits.get(&(cgroup, comm.to_string())) else { return Vec::new() };
        let Some(last) = points.back() else { return Vec::new() };
        let empty = ApiTotals::default();
        let first = points.iter().rev().find(|p| p.0 <= since).map_or(&empty, |p| &p.1);
        Self::listed(&last.1, first, span_ns)
    }

    fn listed(last: &ApiTotals, first: &ApiTotals, span_ns: u64) -> Vec<ApiWaits> {
        let mut out: Vec<ApiWaits> = last
            .0
            .iter()
            .filter_map(|(api, &(n, ns))| {
                let (n0, ns0) = first.0.get(api).copied().unwrap_or((0, 0));
                let waits = n.saturating_sub(n0);
                (waits > 0).then(|| ApiWaits {
                    api: api.to_string(),
                    seconds: ns.saturating_sub(ns0) as f64 / 1e9,
                    waits,
                    waits_per_second: waits as f64 / (span_ns.max(1) as f64 / 1e9),
                })
            })
            .collect();
        out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then_with(|| a.api.cmp(&b.api)));
        out.truncate(MAX_APIS);
        out
    }

    /// One sweep of the scheduler programs' totals at `now_ns`.
    fn sample(
        &mut self,
        now_ns: u64,
        samples: &[ThreadSample],
        facts: &mut dyn ThreadFacts,
        incarnation: &mut Incarnations<'_>,
    ) {
        let oldest = now_ns.saturating_sub(self.cfg.window_ns);
        let mut bound = Vec::new();
        // Long waits' findings of the window, whose thread's totals are
        // read after the wait (a blocked thread's time is accounted when
        // it wakes, so the share is of the window's time, not of the
        // time accounted): (key, gpu ns, span).
        let mut after_long = Vec::new();
        for s in samples {
            if s.comm.is_empty() || !self.cfg.is_request_thread(&s.comm, &s.thread) {
                continue;
            }
            let key = (s.cgroup, s.comm.clone(), s.thread.clone());
            if self.tracks.len() >= MAX_TRACKS && !self.tracks.contains_key(&key) {
                continue;
            }
            let track = self.tracks.entry(key.clone()).or_insert_with(Track::new);
            track.points.push_back((now_ns, s.ns));
            trim(&mut track.points, oldest, |p| p.0);
            let first = track.points[0];
            let span = now_ns.saturating_sub(first.0);
            let d = delta(&first.1, &s.ns);
            let total: u64 = d.iter().sum();
            let gpu = d[THREAD_GPU as usize];
            let share = if total == 0 { 0.0 } else { gpu as f64 / total as f64 };
            let full = span as f64 >= 0.9 * self.cfg.window_ns as f64;
            if share < self.cfg.share || !full || (total as f64) < ALIVE_SHARE * span as f64 {
                let long = track.finding.as_ref().filter(|f| f.detail.longest_wait.is_some());
                if span > 0 && long.is_some_and(|f| f.last_ns >= oldest) {
                    after_long.push((key, gpu, span));
                }
                continue;
            }
            bound.push((key, gpu, share, span));
        }
        for (key, gpu, span) in after_long {
            let apis = self.apis(key.0, &key.1, now_ns.saturating_sub(span), span);
            let Some(f) = self.tracks.get_mut(&key).and_then(|t| t.finding.as_mut()) else { continue };
            let d = &mut f.detail;
            (d.window_seconds, d.gpu_seconds, d.apis) = (span as f64 / 1e9, gpu as f64 / 1e9, apis);
            d.gpu_share = (gpu as f64 / span as f64).min(1.0);
        }
        for (key, gpu, share, span) in bound {
            let Some(pid) = facts.process(key.0, &key.1, now_ns.saturating_sub(span)) else { continue };
            let apis = self.apis(key.0, &key.1, now_ns.saturating_sub(span), span);
            let incarnation = incarnation(pid);
            let has_stack = self.tracks.get(&key).is_some_and(|t| t.has_stack(incarnation));
            let (stack, stack_note) = self.share_stack(pid, &key.2, has_stack, now_ns);
            let track = self.tracks.get_mut(&key).expect("tracked above");
            let detail = Detail { stack, stack_note, ..Detail::of_window(&key.2, span, gpu, share, apis) };
            // GPU time while bound: the whole window the first time, then
            // each sweep's growth.
            let at = |p: &(u64, StateNs)| p.1[THREAD_GPU as usize];
            let added = match (&track.finding, track.points.iter().rev().nth(1)) {
                (Some(_), Some(prev)) => track.points.back().map_or(0, at).saturating_sub(at(prev)),
                _ => gpu,
            };
            self.counts.bound_ns.add(&key.1, key.0, key.2.clone(), OTHER.to_string(), added);
            thread_share::found(&mut track.finding, pid, incarnation, now_ns, detail, |e, d| e.updated(d));
        }
    }
}

impl Detector for GpuWait {
    fn observe(&mut self, input: &Input<'_>, _evictions: &mut Evictions) {
        self.long_wait(input);
    }

    fn gpu_waits(&mut self, now_ns: u64, waits: &[GpuWaitSample]) {
        self.waits_at(now_ns, waits);
    }

    fn thread_times(
        &mut self,
        now_ns: u64,
        samples: &[ThreadSample],
        facts: &mut dyn ThreadFacts,
        incarnation: &mut Incarnations<'_>,
    ) {
        self.sample(now_ns, samples, facts, incarnation);
    }

    fn prune(&mut self, now_ns: u64, _live: &[LiveFile<'_>], ev: &mut Evictions) {
        let c = &self.cfg;
        thread_share::prune(&mut self.tracks, now_ns, c.keep_ns, c.window_ns, c.max, DETECTOR.kind, ev);
    }

    fn findings(&self, now_ns: u64, _live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        thread_share::findings(&self.tracks, now_ns, self.cfg.keep_ns, out);
    }

    fn reconfigure(&mut self, s: &super::Settings) {
        self.cfg = config(s);
        self.long_ns = long_ns(s);
    }

    fn counts(&self, _listed: &[Record]) -> Box<dyn DetectorCounts> {
        Box::new(self.counts.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{testing::SEC, Settings, Shared};
    use crate::os::cgroup_cpu::CpuThrottle;
    use crate::stacks::{capture::Capture, FrameKind};
    use sonic_probe_common::{NR_THREAD_STATES, THREAD_ON_CPU};

    /// A "server" (pid 7, started at 0) in cgroup 1.
    struct Facts;

    impl ThreadFacts for Facts {
        fn process(&mut self, cgroup: u64, comm: &str, before_ns: u64) -> Option<u32> {
            (cgroup == 1 && comm == "server" && before_ns > 0).then_some(7)
        }
        fn throttle(&mut self, _cgroup: u64) -> Option<CpuThrottle> {
            None
        }
        fn workload(&mut self, cgroup: u64) -> String {
            format!("w{cgroup}")
        }
    }

    fn thread(comm: &str, thread: &str, gpu: u64, on_cpu: u64) -> ThreadSample {
        let mut ns = [0; NR_THREAD_STATES as usize];
        ns[THREAD_GPU as usize] = gpu;
        ns[THREAD_ON_CPU as usize] = on_cpu;
        ThreadSample { cgroup: 1, comm: comm.into(), thread: thread.into(), ns, per_cpu: vec![[on_cpu, 0]] }
    }

    fn waits(api: &'static str, waits: u64, total_ns: u64) -> GpuWaitSample {
        GpuWaitSample { cgroup: 1, comm: "server".into(), api, waits, total_ns }
    }

    /// `secs` + 1 sweeps a second apart from 100 s: each second the thread
    /// waits `gpu_per_s` for the GPU in 250 cudaStreamSynchronize calls
    /// and, after the sweep at `copies_from`, 10 cudaMemcpy of 10 ms of
    /// that time.
    fn run(d: &mut GpuWait, secs: u64, thread_name: &str, gpu_per_s: u64, copies_from: u64) {
        for i in 0..=secs {
            let t = 100 * SEC + i * SEC;
            let copies = i.saturating_sub(copies_from);
            let mut w = vec![waits("cudaStreamSynchronize", 250 * i, i * gpu_per_s - copies * SEC / 10)];
            if i > copies_from {
                w.push(waits("cudaMemcpy", 10 * copies, copies * SEC / 10));
            }
            d.gpu_waits(t, &w);
            let s = [thread("server", thread_name, i * gpu_per_s, i * (SEC - gpu_per_s))];
            d.thread_times(t, &s, &mut Facts, &mut |pid| u64::from(pid) + 1000);
        }
    }

    fn found(d: &GpuWait, now: u64) -> Vec<Record> {
        let mut out = Vec::new();
        d.findings(now, &[], &mut out);
        out
    }

    #[test]
    fn a_request_thread_waiting_for_the_gpu_is_found_with_its_calls() {
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        run(&mut d, 8, "server", SEC * 84 / 100, 1000);
        assert!(found(&d, 108 * SEC).is_empty(), "before a window (9 s of 10)");
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        run(&mut d, 12, "server", SEC * 84 / 100, 1000);
        let f = found(&d, 112 * SEC);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].pid, f[0].incarnation, f[0].comm.as_str()), (7, 1007, "server"));
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert!((x.gpu_share - 0.84).abs() < 1e-9 && (x.window_seconds - 10.0).abs() < 1e-9, "{x:?}");
        assert!((x.gpu_seconds - 8.4).abs() < 1e-9, "{x:?}");
        assert_eq!(x.apis.len(), 1);
        let a = &x.apis[0];
        assert_eq!((a.api.as_str(), a.waits), ("cudaStreamSynchronize", 2500));
        assert!((a.seconds - 8.4).abs() < 1e-9 && (a.waits_per_second - 250.0).abs() < 1e-9, "{a:?}");
        assert_eq!(x.count, 4, "sweeps 9 (90 % of a window), 10, 11, 12");
        assert_eq!(
            x.describe(),
            "thread server waits for the GPU 84% of its time (8.4 s of 10 s) in cudaStreamSynchronize: \
             8.4 s, 2500 waits (250/s)"
        );
        // The first window's 7.56 s (9 s of it), then 0.84 s a sweep.
        assert_eq!(d.counts.bound_ns.get("server", 1, "server".into()), 7_560_000_000 + 3 * 840_000_000);
    }

    /// Only the window's waits, the longest call first; a call first seen
    /// inside the window (its entry made since) counts from 0.
    #[test]
    fn the_calls_are_the_windows_longest_first() {
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        run(&mut d, 20, "server", SEC * 9 / 10, 14);
        let f = found(&d, 120 * SEC);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        let apis: Vec<(&str, u64)> = x.apis.iter().map(|a| (a.api.as_str(), a.waits)).collect();
        // From the sweep at 110 s: 9 s of waits, 0.6 s of them in 60
        // copies (from the sweep at 114 s).
        assert_eq!(apis, [("cudaStreamSynchronize", 2500), ("cudaMemcpy", 60)], "{x:?}");
        assert!((x.apis[0].seconds - 8.4).abs() < 1e-9 && (x.apis[1].seconds - 0.6).abs() < 1e-9, "{x:?}");
        assert!(x.describe().ends_with("; also cudaMemcpy 0.6 s"), "{}", x.describe());
    }

    #[test]
    fn rare_waits_worker_threads_and_namesakes_are_no_finding() {
        // 5 % of its time: a process that synchronizes now and then.
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        run(&mut d, 12, "server", SEC / 20, 1000);
        assert!(found(&d, 112 * SEC).is_empty());
        // A worker thread (not the process's name, no --stall-thread).
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        run(&mut d, 12, "pt_worker", SEC * 9 / 10, 1000);
        assert!(found(&d, 112 * SEC).is_empty());
        // No process of that name (Facts knows only cgroup 1's server).
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        for i in 0..=12 {
            let s = [thread("client", "client", i * SEC, 0)];
            d.thread_times(100 * SEC + i * SEC, &s, &mut Facts, &mut |pid| u64::from(pid));
        }
        assert!(found(&d, 112 * SEC).is_empty());
    }

    fn stack(function: &str, line: u32) -> Vec<Frame> {
        vec![
            Frame {
                function: function.into(),
                file: Some("/srv/app/server.py".into()),
                line: Some(line),
                module: Some("server".into()),
                kind: FrameKind::Python,
            },
            Frame {
                function: "cuStreamSynchronize".into(),
                file: None,
                line: None,
                module: Some("libcuda.so.1".into()),
                kind: FrameKind::Native,
            },
        ]
    }

    fn gpu_capture(tid: u32, start_ns: u64, captured_ns: u64, line: u32) -> Capture {
        let mut c = Capture {
            tgid: 7,
            tid,
            thread: "server".into(),
            gpu_api: Some("cuStreamSynchronize"),
            start_ns,
            captured_ns,
            result: "ok",
            python: HashMap::new(),
            native: HashMap::new(),
            native_how: HashMap::new(),
            problems: Vec::new(),
            interval: std::time::Duration::from_secs(10),
        };
        let st = stack("infer", line);
        c.python.insert(tid, vec![st[0].clone()]);
        c.native.insert(tid, vec![st[1].clone()]);
        c
    }

    /// A cuStreamSynchronize of `ns` by thread `tid` of "server" (pid 7,
    /// cgroup 1) that began at `start_ns`.
    fn wait_event(tid: u32, thread: &str, start_ns: u64, ns: u64) -> Event {
        use sonic_probe_common::SharedStruct;
        let mut raw = sonic_probe_common::GpuWaitEvent::zeroed();
        raw.header = sonic_probe_common::EventHeader {
            kind: sonic_probe_common::EVENT_GPU_WAIT,
            tgid: 7,
            tid,
            cpu: 0,
            time_ns: start_ns,
            cgroup: 1,
        };
        raw.api = sonic_probe_common::gpu_apis::GPU_APIS
            .iter()
            .find(|a| a.name == "cuStreamSynchronize")
            .expect("in the table")
            .id;
        raw.duration_ns = ns;
        raw.thread_comm = sonic_probe_common::comm_bytes(thread);
        raw.process_comm = sonic_probe_common::comm_bytes("server");
        Event::GpuWait(crate::events::GpuWaitEnd { raw })
    }

    fn observe(d: &mut GpuWait, ev: &Event) {
        let files = crate::findings::files::FileTable::default();
        let input = Input { event: ev, incarnation: 1007, cgroup: 1, closed: None, opens: 0, files: &files };
        d.observe(&input, &mut Evictions::default());
    }

    #[test]
    fn a_single_long_wait_is_found_with_the_line_that_waited() {
        let store = CaptureStore::new();
        let shared = Shared { captures: Some(store.clone()) };
        let mut d = GpuWait::new(&Settings::default(), &shared);
        // Rare short waits: 5 % of the time, no finding by share.
        run(&mut d, 12, "server", SEC / 20, 1000);
        assert!(found(&d, 112 * SEC).is_empty());
        // A worker thread's long wait, and one just short of the
        // threshold (--stall-threshold, 1 s by default): nothing.
        observe(&mut d, &wait_event(9, "pt_worker", 110 * SEC, 3 * SEC));
        observe(&mut d, &wait_event(7, "server", 110 * SEC, SEC - 1));
        assert!(found(&d, 112 * SEC).is_empty());
        // The capturer read its stack 1.1 s into it.
        store.insert(gpu_capture(7, 110 * SEC, 111 * SEC + SEC / 10, 88));
        observe(&mut d, &wait_event(7, "server", 110 * SEC, 3 * SEC / 2));
        let f = found(&d, 112 * SEC);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].pid, f[0].incarnation), (7, 1007));
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        let l = x.longest_wait.as_ref().expect("the long wait");
        assert_eq!((l.api.as_str(), l.seconds, l.tid), ("cuStreamSynchronize", 1.5, 7));
        assert_eq!(x.stack, stack("infer", 88));
        assert_eq!(x.stack_note.as_deref(), Some("captured 1.1 s into the wait"));
        assert_eq!(
            x.describe(),
            "infer() at server.py:88: thread server waited 1.50 s for the GPU in cuStreamSynchronize (tid 7); \
             it waits 5% of its time (0.5 s of 10 s) in cudaStreamSynchronize: 0.5 s, 2500 waits (250/s)"
        );
        assert!(x.stacks().contains("py     infer  /srv/app/server.py:88"), "{}", x.stacks());
        // A shorter one later, not captured: the longest's stack stays.
        observe(&mut d, &wait_event(7, "server", 112 * SEC, 6 * SEC / 5));
        let f = found(&d, 114 * SEC);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert_eq!((x.count, x.longest_wait.as_ref().map(|l| l.seconds)), (2, Some(1.5)));
        assert_eq!(x.stack, stack("infer", 88));
    }

    #[test]
    fn a_share_finding_asks_for_the_stack_of_a_later_wait() {
        let store = CaptureStore::new();
        let shared = Shared { captures: Some(store.clone()) };
        let mut d = GpuWait::new(&Settings::default(), &shared);
        run(&mut d, 10, "server", SEC * 9 / 10, 1000);
        let f = found(&d, 110 * SEC);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert!(x.stack.is_empty());
        assert_eq!(x.stack_note.as_deref(), Some("not captured yet: asked for at the thread's next wait"));
        assert!(x.describe().ends_with("; no stack: not captured yet: asked for at the thread's next wait"));
        // The capturer answers (a 4 ms wait, read 1 ms into it).
        store.insert(gpu_capture(7, 110 * SEC + SEC / 2, 110 * SEC + SEC / 2 + 1_000_000, 41));
        let t = 111 * SEC;
        d.gpu_waits(t, &[waits("cudaStreamSynchronize", 250 * 11, 11 * SEC * 9 / 10)]);
        let s = [thread("server", "server", 11 * SEC * 9 / 10, 11 * SEC / 10)];
        d.thread_times(t, &s, &mut Facts, &mut |pid| u64::from(pid) + 1000);
        let f = found(&d, t);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert_eq!(x.stack, stack("infer", 41));
        assert!(
            x.describe()
                .starts_with("infer() at server.py:41: thread server waits for the GPU 90% of its time"),
            "{}",
            x.describe()
        );
        // Kept while the finding lasts; nothing more is asked for.
        store.want_gpu(99, "x", t);
        let t = 112 * SEC;
        d.gpu_waits(t, &[waits("cudaStreamSynchronize", 250 * 12, 12 * SEC * 9 / 10)]);
        let s = [thread("server", "server", 12 * SEC * 9 / 10, 12 * SEC / 10)];
        d.thread_times(t, &s, &mut Facts, &mut |pid| u64::from(pid) + 1000);
        let f = found(&d, t);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert_eq!(x.stack, stack("infer", 41));
        assert!(store.take_gpu(7, "server").is_none());
    }

    #[test]
    fn ioctl_waits_without_cuda_calls_say_so() {
        let mut d = GpuWait::new(&Settings::default(), &Shared::default());
        for i in 0..=10 {
            let s = [thread("server", "server", i * SEC * 6 / 10, i * SEC * 4 / 10)];
            d.thread_times(100 * SEC + i * SEC, &s, &mut Facts, &mut |pid| u64::from(pid));
        }
        let f = found(&d, 110 * SEC);
        let crate::findings::Detail::GpuWait(x) = &f[0].detail else { panic!("{f:?}") };
        assert!(x.apis.is_empty());
        assert!(x.describe().ends_with("(6.0 s of 10 s) in ioctls on a GPU device"), "{}", x.describe());
    }
}
