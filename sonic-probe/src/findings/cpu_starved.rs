//! cpu_starved: a request thread that spent a large share of its time
//! runnable but not running: waiting for a CPU, because its cgroup's CPU
//! limit throttled it or because the node's CPUs were busy.
//!
//! It sees no events: once a second the daemon hands it the scheduler
//! programs' totals per (workload cgroup, process name, thread name)
//! ([`ThreadSample`], from sonic_probe_thread_seconds_total's maps) and the
//! facts it asks for ([`ThreadFacts`]: a live process, its cgroup's CPU
//! throttling, a workload's name).
//!
//! The rule. Over the last `window` (--starved-window, default 10 s; it
//! starts at the last sweep at or before `window` ago, so it is up to a
//! sweep longer when sweeps run late: the finding's `window_seconds` says
//! how long it was):
//! 1. the key is a request thread's: its thread name is the process name
//!    (the main thread, and the unnamed threads that inherit its name) or
//!    matches a --stall-thread pattern, and no --stall-ignore-thread one;
//! 2. its threads were alive most of the window: their states add up to at
//!    least [`ALIVE_SHARE`] of it (tools that run for milliseconds, however
//!    many, never reach a window's worth of life at load 1);
//! 3. the share of that time in the run queue is at least `share`
//!    (--starved-share, default 0.2);
//! 4. a process of that name in that cgroup is running now and started
//!    before the window did (so a burst of namesakes is never one).
//!
//! The finding says how long it waited, whether the cgroup was throttled
//! (its CPU limit, and the throttled time over the window) or the node was
//! busy, and the busiest other (workload, process name) pairs by CPU time
//! in the same window.

use std::collections::{HashMap, VecDeque};

use prometheus::proto::{MetricFamily, MetricType::COUNTER};
use serde::{Deserialize, Serialize};

use super::{
    tally::Tally,
    thread_share::{self, delta, trim, Config, Found, Key},
    DetailKind, Detector, DetectorCounts, Evictions, Input, LiveFile, Record, Registration,
};
use crate::{
    metrics::family::{def, Fold, MetricDef},
    os::cgroup_cpu::CpuThrottle,
    stats::labels::OTHER,
    threads::{StateNs, ThreadSample},
};
use sonic_probe_common::{THREAD_ON_CPU, THREAD_RUNQUEUE};

pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, _| Box::new(CpuStarved::new(s)) };

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The share of a request thread's time in the run queue that makes a
    /// finding (0 < share <= 1).
    pub share: f64,
    /// Over this long.
    pub window: std::time::Duration,
}

/// A key's threads must have lived this share of the window, at least.
pub const ALIVE_SHARE: f64 = 0.8;
/// Other (workload, process name) pairs listed by CPU time.
pub const MAX_BUSIEST: usize = 3;
/// Keys followed at most (the kernel has 2048 slots).
const MAX_TRACKS: usize = 8192;
/// (CPU, time) entries of the windows' per-CPU times kept at most, over
/// all keys (a key busy on every CPU of a 128-CPU node for a 10 s window
/// takes 1280); beyond it a key's second is not kept, and the busiest list
/// may miss it.
const MAX_CPU_ENTRIES: usize = 262_144;

/// What the detector asks the daemon (procfs and cgroupfs; unit tests
/// answer from tables).
pub trait ThreadFacts {
    /// A running process named `comm` in cgroup `cgroup` that started
    /// before `before_ns` (CLOCK_MONOTONIC): its pid.
    fn process(&mut self, cgroup: u64, comm: &str, before_ns: u64) -> Option<u32>;
    /// The CPU limit over cgroup `cgroup` (its own or its nearest limited
    /// ancestor's) and its throttled time; None: no limit.
    fn throttle(&mut self, cgroup: u64) -> Option<CpuThrottle>;
    /// The `workload` label value of cgroup `cgroup`.
    fn workload(&mut self, cgroup: u64) -> String;
}

/// The engine's incarnation of a process (see [`Input`]).
pub type Incarnations<'a> = dyn FnMut(u32) -> u64 + 'a;

/// A process name of a workload, busy on CPU in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Busy {
    pub workload: String,
    pub comm: String,
    pub cpu_seconds: f64,
}

/// Its finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub thread: String,
    /// The window the shares are of.
    pub window_seconds: f64,
    /// Time its threads were runnable, waiting for a CPU, in the window.
    pub runqueue_seconds: f64,
    pub on_cpu_seconds: f64,
    /// runqueue_seconds over all of its threads' time in the window (the
    /// largest seen).
    pub runqueue_share: f64,
    /// "throttled" (its cgroup's CPU limit) or "node_busy".
    pub cause: String,
    /// Its cgroup's CPU limit, in CPUs.
    pub cpu_limit_cores: Option<f64>,
    /// Time its cgroup was throttled in the window.
    pub throttled_seconds: Option<f64>,
    /// The other process names that used the CPUs it waited for the most in
    /// the window.
    pub busiest: Vec<Busy>,
    /// The CPUs it waited for (where its run-queue time was), at most 16.
    pub cpus: Vec<u32>,
    /// Seconds (sweeps) the rule held.
    pub count: u64,
}

impl DetailKind for Detail {
    const KIND: &'static str = "cpu_starved";

    fn problem_key(&self) -> String {
        self.thread.clone()
    }

    fn fold(&mut self, later: Self) {
        let count = self.count + later.count;
        let share = self.runqueue_share.max(later.runqueue_share);
        *self = later;
        self.count = count;
        self.runqueue_share = share;
    }

    fn describe(&self) -> String {
        let cause = match (self.cause.as_str(), self.cpu_limit_cores, self.throttled_seconds) {
            ("throttled", Some(limit), Some(t)) => {
                format!("throttled by its CPU limit of {limit:.2} CPUs ({t:.1} s throttled)")
            }
            _ => "the node's CPUs were busy".to_string(),
        };
        let busiest: Vec<String> = self
            .busiest
            .iter()
            .map(|b| {
                let w = if b.workload.is_empty() { String::new() } else { format!(" ({})", b.workload) };
                format!("{}{w} {:.1} CPU-s", b.comm, b.cpu_seconds)
            })
            .collect();
        let busiest = if busiest.is_empty() {
            String::new()
        } else {
            format!("; busiest others: {}", busiest.join(", "))
        };
        format!(
            "thread {} waited for a CPU {:.0}% of its time ({:.1} s runnable, not running, in {:.0} s; \
             {:.1} s on CPU): {cause}{busiest}",
            self.thread,
            self.runqueue_share * 100.0,
            self.runqueue_seconds,
            self.window_seconds,
            self.on_cpu_seconds,
        )
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_cpu_starved_seconds_total", COUNTER, &["comm", "workload", "thread"],
        "Run-queue time of request threads while they were cpu_starved (the share of their time waiting \
         for a CPU over --starved-window at least --starved-share)."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Run-queue nanoseconds while starved, by thread name.
    starved_ns: Tally<String>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(self.starved_ns.export(&METRICS[0], fold, |f, t| [f.thread(t)]));
    }
}

/// One sweep's totals of a key.
#[derive(Debug, Clone, Copy)]
struct Point {
    t_ns: u64,
    ns: StateNs,
    throttled_ns: Option<u64>,
}

/// A key's per-CPU time of one kind, second by second: the totals at the
/// last sweep and what each sweep added on each CPU (only CPUs it used).
#[derive(Debug, Default)]
struct PerCpu {
    last: Vec<u64>,
    seconds: VecDeque<(u64, Vec<(u32, u64)>)>,
}

impl PerCpu {
    /// Adds a sweep's totals (their growth kept if `keep`); returns the
    /// entries it added. A key's first totals are its baseline, unless
    /// `new_slot`: its slot was made since the last sweep (the kernel's
    /// slots are never freed), so all of them grew since then.
    fn push(&mut self, t_ns: u64, totals: impl Iterator<Item = u64>, keep: bool, new_slot: bool) -> usize {
        let mut added = Vec::new();
        let mut last = Vec::new();
        let first = self.last.is_empty();
        for (cpu, v) in totals.enumerate() {
            let before = self.last.get(cpu).copied().unwrap_or(if first && new_slot { 0 } else { v });
            if v > before && keep {
                added.push((cpu as u32, v - before));
            }
            last.push(v);
        }
        self.last = last;
        let n = added.len();
        self.seconds.push_back((t_ns, added));
        n
    }

    /// Drops the seconds that ended at or before `oldest`; returns the
    /// entries dropped.
    fn trim(&mut self, oldest: u64) -> usize {
        let mut n = 0;
        while self.seconds.front().is_some_and(|s| s.0 <= oldest) {
            n += self.seconds.pop_front().map_or(0, |s| s.1.len());
        }
        n
    }

    /// Time on each CPU over the seconds kept that ended after `since` (a
    /// finding's window starts at a sweep: the seconds before it are out).
    fn by_cpu(&self, since: u64) -> HashMap<u32, u64> {
        let mut out = HashMap::new();
        for (_, s) in self.seconds.iter().filter(|s| s.0 > since) {
            for &(cpu, v) in s {
                *out.entry(cpu).or_default() += v;
            }
        }
        out
    }

    fn entries(&self) -> usize {
        self.seconds.iter().map(|s| s.1.len()).sum()
    }
}

#[derive(Debug)]
struct Track {
    points: VecDeque<Point>,
    /// Its run-queue time per CPU.
    waited: PerCpu,
    /// The finding, while it lasts.
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
        self.points.back().map(|p| p.t_ns)
    }
    fn entries(&self) -> usize {
        self.waited.entries()
    }
}

fn config(s: &super::Settings) -> Config {
    Config::new(s.cpu_starved.share, s.cpu_starved.window, s)
}

pub struct CpuStarved {
    cfg: Config,
    tracks: HashMap<Key, Track>,
    /// (cgroup, process name) -> its on-CPU time per CPU (every key's, for
    /// the busiest others).
    busy: HashMap<(u64, String), PerCpu>,
    /// Entries in `busy`'s and the tracks' seconds.
    cpu_entries: usize,
    /// A sweep was made before (so a key not in it has a new slot).
    swept: bool,
    counts: Counts,
}

impl CpuStarved {
    pub fn new(s: &super::Settings) -> Self {
        CpuStarved {
            cfg: config(s),
            tracks: HashMap::new(),
            busy: HashMap::new(),
            cpu_entries: 0,
            swept: false,
            counts: Counts::default(),
        }
    }

    /// The (workload, process name) pairs that used the CPUs of `cpus`
    /// most in the window from the sweep at `since` to now, but `skip`'s.
    fn busiest(
        &self,
        skip: &(u64, String),
        cpus: &HashMap<u32, u64>,
        since: u64,
        facts: &mut dyn ThreadFacts,
    ) -> Vec<Busy> {
        let mut all: Vec<(u64, &(u64, String))> = self
            .busy
            .iter()
            .filter(|(k, _)| *k != skip)
            .filter_map(|(k, p)| {
                let d: u64 = p
                    .seconds
                    .iter()
                    .filter(|s| s.0 > since)
                    .flat_map(|s| s.1.iter())
                    .filter(|(cpu, _)| cpus.contains_key(cpu))
                    .map(|(_, v)| v)
                    .sum();
                (d > 0).then_some((d, k))
            })
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        all.into_iter()
            .take(MAX_BUSIEST)
            .map(|(d, (cgroup, comm))| Busy {
                workload: facts.workload(*cgroup),
                comm: comm.clone(),
                cpu_seconds: d as f64 / 1e9,
            })
            .collect()
    }

    /// One sweep: `samples` are every key's totals at `now_ns`.
    pub fn sample(
        &mut self,
        now_ns: u64,
        samples: &[ThreadSample],
        facts: &mut dyn ThreadFacts,
        incarnation: &mut Incarnations<'_>,
    ) {
        let oldest = now_ns.saturating_sub(self.cfg.window_ns);
        // On-CPU time per (cgroup, process name) and CPU, for the busiest
        // others.
        let mut on_cpu: HashMap<(u64, String), Vec<u64>> = HashMap::new();
        for s in samples {
            let v = on_cpu.entry((s.cgroup, s.comm.clone())).or_default();
            v.resize(v.len().max(s.per_cpu.len()), 0);
            for (x, c) in v.iter_mut().zip(&s.per_cpu) {
                *x += c[0];
            }
        }
        let mut dropped = 0;
        self.busy.retain(|k, p| {
            let keep = on_cpu.contains_key(k);
            if !keep {
                dropped += p.entries();
            }
            keep
        });
        self.cpu_entries -= dropped;
        // A key first seen after the first sweep got its slot since the
        // last one: what it ran before this sweep is in the window (two
        // processes started side by side, one a sweep after the other,
        // would otherwise show the later one's first second missing).
        let new_slot = std::mem::replace(&mut self.swept, true);
        for (k, totals) in on_cpu {
            if self.busy.len() >= MAX_TRACKS && !self.busy.contains_key(&k) {
                continue;
            }
            let room = self.cpu_entries + totals.len() <= MAX_CPU_ENTRIES;
            let p = self.busy.entry(k).or_default();
            self.cpu_entries -= p.trim(oldest);
            self.cpu_entries += p.push(now_ns, totals.into_iter(), room, new_slot);
        }

        let mut starved = Vec::new();
        for s in samples {
            if s.comm.is_empty() || !self.cfg.is_request_thread(&s.comm, &s.thread) {
                continue;
            }
            let key = (s.cgroup, s.comm.clone(), s.thread.clone());
            if self.tracks.len() >= MAX_TRACKS && !self.tracks.contains_key(&key) {
                continue;
            }
            let track = self.tracks.entry(key.clone()).or_insert(Track {
                points: VecDeque::new(),
                waited: PerCpu::default(),
                finding: None,
            });
            track.points.push_back(Point { t_ns: now_ns, ns: s.ns, throttled_ns: None });
            trim(&mut track.points, oldest, |p| p.t_ns);
            let room = self.cpu_entries + s.per_cpu.len() <= MAX_CPU_ENTRIES;
            self.cpu_entries -= track.waited.trim(oldest);
            self.cpu_entries += track.waited.push(now_ns, s.per_cpu.iter().map(|c| c[1]), room, new_slot);
            let first = track.points[0];
            let span = now_ns.saturating_sub(first.t_ns);
            let d = delta(&first.ns, &s.ns);
            let total: u64 = d.iter().sum();
            let runq = d[THREAD_RUNQUEUE as usize];
            let share = if total == 0 { 0.0 } else { runq as f64 / total as f64 };
            if share < self.cfg.share {
                continue;
            }
            // Its cgroup's throttling at this sweep, for the window's delta.
            let throttle = facts.throttle(s.cgroup);
            if let (Some(th), Some(last)) = (throttle, track.points.back_mut()) {
                last.throttled_ns = Some(th.throttled_ns);
            }
            let full = span as f64 >= 0.9 * self.cfg.window_ns as f64;
            if !full || (total as f64) < ALIVE_SHARE * span as f64 {
                continue;
            }
            starved.push((key, d, share, span, throttle));
        }

        for (key, d, share, span, throttle) in starved {
            let Some(pid) = facts.process(key.0, &key.1, now_ns.saturating_sub(span)) else { continue };
            // The window's first sweep: the seconds kept may start a sweep
            // earlier (they are trimmed by `oldest`, and the first point
            // may be after it).
            let since = now_ns.saturating_sub(span);
            let waited = self.tracks[&key].waited.by_cpu(since);
            let busiest = self.busiest(&(key.0, key.1.clone()), &waited, since, facts);
            let mut cpus: Vec<u32> = waited.keys().copied().collect();
            cpus.sort_unstable();
            cpus.truncate(16);
            let incarnation = incarnation(pid);
            let track = self.tracks.get_mut(&key).expect("tracked above");
            let throttled = match (track.points.iter().find_map(|p| p.throttled_ns), throttle) {
                (Some(first), Some(now)) => Some(now.throttled_ns.saturating_sub(first)),
                _ => None,
            };
            let limit = throttle.and_then(|t| t.limit_cores);
            let cause = if limit.is_some() && throttled.unwrap_or(0) > 0 { "throttled" } else { "node_busy" };
            let runq = d[THREAD_RUNQUEUE as usize];
            let detail = Detail {
                thread: key.2.clone(),
                window_seconds: span as f64 / 1e9,
                runqueue_seconds: runq as f64 / 1e9,
                on_cpu_seconds: d[THREAD_ON_CPU as usize] as f64 / 1e9,
                runqueue_share: share,
                cause: cause.to_string(),
                cpu_limit_cores: limit,
                throttled_seconds: throttled.map(|t| t as f64 / 1e9),
                busiest,
                cpus,
                count: 1,
            };
            // Run-queue time while starved: the whole window the first
            // time, then each sweep's growth.
            let prev_runq = track.points.iter().rev().nth(1).map(|p| p.ns[THREAD_RUNQUEUE as usize]);
            let added = match (&track.finding, prev_runq) {
                (Some(_), Some(prev)) => {
                    track.points.back().map_or(0, |p| p.ns[THREAD_RUNQUEUE as usize]) - prev
                }
                _ => runq,
            };
            self.counts.starved_ns.add(&key.1, key.0, key.2.clone(), OTHER.to_string(), added);
            thread_share::found(&mut track.finding, pid, incarnation, now_ns, detail, |earlier, detail| {
                let peak = earlier.runqueue_share.max(share);
                Detail { count: earlier.count + 1, runqueue_share: peak, ..detail }
            });
        }
    }
}

impl Detector for CpuStarved {
    fn observe(&mut self, _input: &Input<'_>, _evictions: &mut Evictions) {}

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
        self.cpu_entries -=
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
    use sonic_probe_common::{NR_THREAD_STATES, THREAD_FUTEX, THREAD_SLEEP};

    #[derive(Default)]
    struct Facts {
        /// (cgroup, comm) -> (pid, started_ns)
        processes: HashMap<(u64, String), (u32, u64)>,
        throttle: HashMap<u64, CpuThrottle>,
    }

    impl ThreadFacts for Facts {
        fn process(&mut self, cgroup: u64, comm: &str, before_ns: u64) -> Option<u32> {
            let (pid, started) = self.processes.get(&(cgroup, comm.to_string()))?;
            (*started < before_ns).then_some(*pid)
        }
        fn throttle(&mut self, cgroup: u64) -> Option<CpuThrottle> {
            self.throttle.get(&cgroup).copied()
        }
        fn workload(&mut self, cgroup: u64) -> String {
            format!("w{cgroup}")
        }
    }

    fn sample(cgroup: u64, comm: &str, thread: &str, states: &[(u32, u64)]) -> ThreadSample {
        let mut ns = [0; NR_THREAD_STATES as usize];
        for &(s, v) in states {
            ns[s as usize] = v;
        }
        // All on CPU 0 but the idle one's (CPU 1).
        let mut per_cpu = vec![[0; 2]; 2];
        per_cpu[usize::from(comm == "idle")] = [ns[THREAD_ON_CPU as usize], ns[THREAD_RUNQUEUE as usize]];
        ThreadSample { cgroup, comm: comm.into(), thread: thread.into(), ns, per_cpu }
    }

    fn settings() -> Settings {
        Settings::default()
    }

    fn found(d: &CpuStarved, now: u64) -> Vec<Record> {
        let mut out = Vec::new();
        d.findings(now, &[], &mut out);
        out
    }

    /// `secs` sweeps, a second apart, of a thread `runq_per_s` of each
    /// second in the run queue and the rest on CPU, beside a busy `enc`.
    fn run(d: &mut CpuStarved, facts: &mut Facts, secs: u64, runq_per_s: u64, comm: &str, thread: &str) {
        for i in 0..=secs {
            let t = 100 * SEC + i * SEC;
            let samples = [
                sample(
                    1,
                    comm,
                    thread,
                    &[(THREAD_RUNQUEUE, i * runq_per_s), (THREAD_ON_CPU, i * (SEC - runq_per_s))],
                ),
                sample(2, "enc", "enc", &[(THREAD_ON_CPU, i * SEC)]),
                sample(3, "idle", "idle", &[(THREAD_ON_CPU, i * SEC / 100)]),
            ];
            d.sample(t, &samples, facts, &mut |pid| u64::from(pid) + 1000);
        }
    }

    #[test]
    fn a_request_thread_waiting_for_a_cpu_is_found_with_the_busiest_others() {
        let mut d = CpuStarved::new(&settings());
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        // 9 s: the window is not full yet.
        run(&mut d, &mut facts, 8, SEC / 2, "server", "server");
        assert!(found(&d, 108 * SEC).is_empty(), "before a window");
        let mut d = CpuStarved::new(&settings());
        run(&mut d, &mut facts, 12, SEC / 2, "server", "server");
        let f = found(&d, 112 * SEC);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].pid, f[0].incarnation, f[0].cgroup, f[0].comm.as_str()), (7, 1007, 1, "server"));
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!() };
        assert!((x.runqueue_share - 0.5).abs() < 1e-9);
        assert!((x.runqueue_seconds - 5.0).abs() < 1e-9 && (x.window_seconds - 10.0).abs() < 1e-9);
        assert_eq!(x.cause, "node_busy");
        assert_eq!(x.busiest[0], Busy { workload: "w2".into(), comm: "enc".into(), cpu_seconds: 10.0 });
        assert_eq!(x.busiest.len(), 1, "not itself, nor idle on the other CPU: {x:?}");
        assert_eq!(x.cpus, [0]);
        assert_eq!(x.count, 4, "sweeps 9 (90 % of a window), 10, 11, 12");
        assert!(x.describe().contains("waited for a CPU 50%"), "{}", x.describe());
        // Counted: the first window's 4.5 s, then 0.5 s a sweep.
        assert_eq!(d.counts.starved_ns.get("server", 1, "server".into()), 6 * SEC);
    }

    /// Two processes started side by side, the other's slot made a sweep
    /// after the starved one's: its first second on the CPU is in the
    /// window all the same (the CI run that had 0.99 s of 1.5).
    #[test]
    fn a_busy_process_first_seen_a_sweep_late_counts_its_first_second() {
        let mut s = settings();
        s.cpu_starved.window = std::time::Duration::from_secs(3);
        let mut d = CpuStarved::new(&s);
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        for i in 0..=3u64 {
            let mut samples = vec![sample(
                1,
                "server",
                "server",
                &[(THREAD_RUNQUEUE, i * SEC / 2), (THREAD_ON_CPU, i * SEC / 2)],
            )];
            if i > 0 {
                samples.push(sample(2, "enc", "enc", &[(THREAD_ON_CPU, i * SEC / 2)]));
            }
            d.sample(100 * SEC + i * SEC, &samples, &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        let f = found(&d, 103 * SEC);
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!("{f:?}") };
        assert_eq!(
            x.busiest[0],
            Busy { workload: "w2".into(), comm: "enc".into(), cpu_seconds: 1.5 },
            "{x:?}"
        );
        // At the first sweep, totals are history: a baseline.
        let mut d = CpuStarved::new(&s);
        for i in 0..=3u64 {
            let samples = [
                sample(
                    1,
                    "server",
                    "server",
                    &[(THREAD_RUNQUEUE, i * SEC / 2), (THREAD_ON_CPU, i * SEC / 2)],
                ),
                sample(2, "enc", "enc", &[(THREAD_ON_CPU, 50 * SEC + i * SEC / 2)]),
            ];
            d.sample(100 * SEC + i * SEC, &samples, &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        let f = found(&d, 103 * SEC);
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!("{f:?}") };
        assert_eq!(x.busiest[0].cpu_seconds, 1.5, "{x:?}");
    }

    /// The window starts at its first sweep, even when that is a little
    /// after `window` ago (sweeps run a little late or early): the other
    /// process's second that ended at that sweep is before the window (the
    /// run that had 1.99 s of a 3 s window for a process sharing the CPU).
    #[test]
    fn the_busiest_others_time_is_that_of_the_findings_window() {
        let mut s = settings();
        s.cpu_starved.window = std::time::Duration::from_secs(3);
        let mut d = CpuStarved::new(&s);
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        let first = 100 * SEC + 200_000;
        for (i, t) in [99 * SEC, first, 101 * SEC, 102 * SEC, 103 * SEC].into_iter().enumerate() {
            let mut samples = vec![sample(2, "enc", "enc", &[(THREAD_ON_CPU, i as u64 * SEC / 2)])];
            if t >= first {
                let half = (t - first) / 2;
                samples.push(sample(
                    1,
                    "server",
                    "server",
                    &[(THREAD_RUNQUEUE, half), (THREAD_ON_CPU, half)],
                ));
            }
            d.sample(t, &samples, &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        let f = found(&d, 103 * SEC);
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!("{f:?}") };
        assert!((x.window_seconds - 2.9998).abs() < 1e-9, "{x:?}");
        assert_eq!(x.busiest[0].cpu_seconds, 1.5, "three sweeps of enc's, not four: {x:?}");
    }

    #[test]
    fn below_the_share_churn_other_threads_and_new_processes_are_no_finding() {
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        // 15 % in the run queue: below 20 %.
        let mut d = CpuStarved::new(&settings());
        run(&mut d, &mut facts, 12, SEC * 15 / 100, "server", "server");
        assert!(found(&d, 112 * SEC).is_empty());
        // A worker thread (not the process's name, no --stall-thread).
        let mut d = CpuStarved::new(&settings());
        run(&mut d, &mut facts, 12, SEC / 2, "server", "pt_worker");
        assert!(found(&d, 112 * SEC).is_empty());
        // No process of that name started before the window: namesakes.
        let mut d = CpuStarved::new(&settings());
        run(&mut d, &mut facts, 12, SEC / 2, "ls", "ls");
        assert!(found(&d, 112 * SEC).is_empty());
        // Short-lived tools: half their time waiting, but 1 s of life in 10.
        let mut d = CpuStarved::new(&settings());
        facts.processes.insert((1, "bash".into()), (8, 0));
        for i in 0..=12 {
            let s =
                sample(1, "bash", "bash", &[(THREAD_RUNQUEUE, i * SEC / 20), (THREAD_SLEEP, i * SEC / 20)]);
            d.sample(100 * SEC + i * SEC, &[s], &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        assert!(found(&d, 112 * SEC).is_empty());
        // Blocked, not waiting for a CPU.
        let mut d = CpuStarved::new(&settings());
        for i in 0..=12 {
            let s = sample(1, "server", "server", &[(THREAD_FUTEX, i * SEC)]);
            d.sample(100 * SEC + i * SEC, &[s], &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        assert!(found(&d, 112 * SEC).is_empty());
    }

    #[test]
    fn a_throttled_cgroup_says_so_with_its_limit() {
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        let mut d = CpuStarved::new(&settings());
        for i in 0..=12u64 {
            facts
                .throttle
                .insert(1, CpuThrottle { limit_cores: Some(0.2), throttled_ns: 50 * SEC + i * SEC * 8 / 10 });
            let s = sample(
                1,
                "server",
                "server",
                &[(THREAD_RUNQUEUE, i * SEC * 8 / 10), (THREAD_ON_CPU, i * SEC / 5)],
            );
            d.sample(100 * SEC + i * SEC, &[s], &mut facts, &mut |pid| u64::from(pid) + 1000);
        }
        let f = found(&d, 112 * SEC);
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!() };
        assert_eq!((x.cause.as_str(), x.cpu_limit_cores), ("throttled", Some(0.2)));
        // Throttled in the window: 0.8 s a second over 10 s.
        assert!((x.throttled_seconds.unwrap() - 8.0).abs() < 1e-9, "{x:?}");
        assert!(x.describe().contains("CPU limit of 0.20 CPUs"), "{}", x.describe());
        // A limit that never throttled: the node was busy.
        let mut d = CpuStarved::new(&settings());
        facts.throttle.insert(1, CpuThrottle { limit_cores: Some(4.0), throttled_ns: 0 });
        run(&mut d, &mut facts, 12, SEC / 2, "server", "server");
        let f = found(&d, 112 * SEC);
        let crate::findings::Detail::CpuStarved(x) = &f[0].detail else { panic!() };
        assert_eq!((x.cause.as_str(), x.throttled_seconds), ("node_busy", Some(0.0)));
    }

    #[test]
    fn findings_age_out_and_are_bounded() {
        let mut facts = Facts::default();
        facts.processes.insert((1, "server".into()), (7, 0));
        let mut d = CpuStarved::new(&settings());
        run(&mut d, &mut facts, 12, SEC / 2, "server", "server");
        let mut ev = Evictions::default();
        d.prune(112 * SEC, &[], &mut ev);
        assert_eq!(found(&d, 112 * SEC).len(), 1);
        let keep = settings().window.as_secs();
        d.prune((113 + keep) * SEC, &[], &mut ev);
        assert!(found(&d, (113 + keep) * SEC).is_empty());
        assert_eq!(ev.get("cpu_starved", "finding"), 0, "aged out, not evicted");
    }
}
