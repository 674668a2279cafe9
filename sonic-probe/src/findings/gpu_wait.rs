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
//! It sees no events: at each sweep the daemon hands it the GPU waits the
//! uprobes counted per (workload cgroup, process name, api)
//! ([`GpuWaitSample`], sonic_probe_gpu_wait_duration_seconds' map) and
//! then the scheduler programs' totals ([`ThreadSample`]), as cpu_starved
//! gets them.
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
//! The finding says how long and which calls: the process's waits per api
//! in the window (time, count, waits per second), the longest first. Waits
//! are counted per process name, so a process with several waiting
//! threads shows them all under each thread's finding.

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
    gpu::waits::GpuWaitSample,
    metrics::family::{def, Fold, MetricDef},
    stats::labels::OTHER,
    threads::{StateNs, ThreadSample},
};
use sonic_probe_common::THREAD_GPU;

pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, _| Box::new(GpuWait::new(s)) };

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
}

impl DetailKind for Detail {
    const KIND: &'static str = "gpu_wait";

    fn problem_key(&self) -> String {
        self.thread.clone()
    }

    fn fold(&mut self, later: Self) {
        let count = self.count + later.count;
        let share = self.gpu_share.max(later.gpu_share);
        *self = later;
        self.count = count;
        self.gpu_share = share;
    }

    fn describe(&self) -> String {
        let how = match self.apis.first() {
            Some(a) => {
                let others: Vec<String> =
                    self.apis[1..].iter().map(|o| format!("{} {:.1} s", o.api, o.seconds)).collect();
                let others =
                    if others.is_empty() { String::new() } else { format!("; also {}", others.join(", ")) };
                format!(
                    " in {}: {:.1} s, {} waits ({:.0}/s){others}",
                    a.api, a.seconds, a.waits, a.waits_per_second
                )
            }
            None => " in ioctls on a GPU device".to_string(),
        };
        format!(
            "thread {} waits for the GPU {:.0}% of its time ({:.1} s of {:.0} s){how}",
            self.thread,
            self.gpu_share * 100.0,
            self.gpu_seconds,
            self.window_seconds,
        )
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

pub struct GpuWait {
    cfg: Config,
    tracks: HashMap<Key, Track>,
    /// (cgroup, process name) -> its waits' totals at each sweep.
    waits: HashMap<(u64, String), VecDeque<(u64, ApiTotals)>>,
    counts: Counts,
}

impl GpuWait {
    pub fn new(s: &super::Settings) -> Self {
        GpuWait { cfg: config(s), tracks: HashMap::new(), waits: HashMap::new(), counts: Counts::default() }
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
        for s in samples {
            if s.comm.is_empty() || !self.cfg.is_request_thread(&s.comm, &s.thread) {
                continue;
            }
            let key = (s.cgroup, s.comm.clone(), s.thread.clone());
            if self.tracks.len() >= MAX_TRACKS && !self.tracks.contains_key(&key) {
                continue;
            }
            let track =
                self.tracks.entry(key.clone()).or_insert(Track { points: VecDeque::new(), finding: None });
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
                continue;
            }
            bound.push((key, gpu, share, span));
        }
        for (key, gpu, share, span) in bound {
            let Some(pid) = facts.process(key.0, &key.1, now_ns.saturating_sub(span)) else { continue };
            let apis = self.apis(key.0, &key.1, now_ns.saturating_sub(span), span);
            let incarnation = incarnation(pid);
            let track = self.tracks.get_mut(&key).expect("tracked above");
            let detail = Detail {
                thread: key.2.clone(),
                window_seconds: span as f64 / 1e9,
                gpu_seconds: gpu as f64 / 1e9,
                gpu_share: share,
                apis,
                count: 1,
            };
            // GPU time while bound: the whole window the first time, then
            // each sweep's growth.
            let at = |p: &(u64, StateNs)| p.1[THREAD_GPU as usize];
            let added = match (&track.finding, track.points.iter().rev().nth(1)) {
                (Some(_), Some(prev)) => track.points.back().map_or(0, at).saturating_sub(at(prev)),
                _ => gpu,
            };
            self.counts.bound_ns.add(&key.1, key.0, key.2.clone(), OTHER.to_string(), added);
            thread_share::found(&mut track.finding, pid, incarnation, now_ns, detail, |earlier, detail| {
                let peak = earlier.gpu_share.max(share);
                Detail { count: earlier.count + 1, gpu_share: peak, ..detail }
            });
        }
    }
}

impl Detector for GpuWait {
    fn observe(&mut self, _input: &Input<'_>, _evictions: &mut Evictions) {}

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
    }

    fn counts(&self, _listed: &[Record]) -> Box<dyn DetectorCounts> {
        Box::new(self.counts.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{testing::SEC, Settings};
    use crate::os::cgroup_cpu::CpuThrottle;
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
        let mut d = GpuWait::new(&Settings::default());
        run(&mut d, 8, "server", SEC * 84 / 100, 1000);
        assert!(found(&d, 108 * SEC).is_empty(), "before a window (9 s of 10)");
        let mut d = GpuWait::new(&Settings::default());
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
        let mut d = GpuWait::new(&Settings::default());
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
        let mut d = GpuWait::new(&Settings::default());
        run(&mut d, 12, "server", SEC / 20, 1000);
        assert!(found(&d, 112 * SEC).is_empty());
        // A worker thread (not the process's name, no --stall-thread).
        let mut d = GpuWait::new(&Settings::default());
        run(&mut d, 12, "pt_worker", SEC * 9 / 10, 1000);
        assert!(found(&d, 112 * SEC).is_empty());
        // No process of that name (Facts knows only cgroup 1's server).
        let mut d = GpuWait::new(&Settings::default());
        for i in 0..=12 {
            let s = [thread("client", "client", i * SEC, 0)];
            d.thread_times(100 * SEC + i * SEC, &s, &mut Facts, &mut |pid| u64::from(pid));
        }
        assert!(found(&d, 112 * SEC).is_empty());
    }

    #[test]
    fn ioctl_waits_without_cuda_calls_say_so() {
        let mut d = GpuWait::new(&Settings::default());
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
