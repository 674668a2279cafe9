//! What the detectors of a thread's share of time have in common
//! (cpu_starved: waiting for a CPU; gpu_wait: waiting for the GPU): a
//! track per (workload cgroup, process name, thread name) of the sweeps'
//! totals, each with its finding while the rule holds; findings kept until
//! the findings window passes them, at most --max-findings of them.

use std::collections::{HashMap, VecDeque};

use super::{Evictions, Record};
use crate::{os::futex::is_request_thread, threads::StateNs};

/// What a detector is told by the options (findings::Settings): its share
/// and window, and what they all share.
pub struct Config {
    pub share: f64,
    pub window_ns: u64,
    /// Findings are dropped once not seen for this long.
    pub keep_ns: u64,
    pub max: usize,
    threads: Vec<glob::Pattern>,
    ignore_threads: Vec<glob::Pattern>,
}

impl Config {
    pub fn new(share: f64, window: std::time::Duration, s: &super::Settings) -> Self {
        Config {
            share,
            window_ns: (window.as_nanos() as u64).max(1_000_000_000),
            keep_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
            threads: s.futex_stall.threads.clone(),
            ignore_threads: s.futex_stall.ignore_threads.clone(),
        }
    }

    /// Is `thread` of process `comm` a request thread (futex_stall's rule:
    /// the main thread's name is the process name)?
    pub fn is_request_thread(&self, comm: &str, thread: &str) -> bool {
        is_request_thread(u32::from(thread == comm), 1, thread, &self.threads, &self.ignore_threads)
    }

    /// The same, of a thread whose ids are known (an event's).
    pub fn is_request_tid(&self, tgid: u32, tid: u32, thread: &str) -> bool {
        is_request_thread(tgid, tid, thread, &self.threads, &self.ignore_threads)
    }
}

/// (cgroup, process name, thread name).
pub type Key = (u64, String, String);

/// The growth of each state from `a` to `b`.
pub fn delta(a: &StateNs, b: &StateNs) -> StateNs {
    let mut d = [0; sonic_probe_common::NR_THREAD_STATES as usize];
    for (i, x) in d.iter_mut().enumerate() {
        *x = b[i].saturating_sub(a[i]);
    }
    d
}

/// Drops the points before the one at or just before `oldest` (kept: the
/// window's start).
pub fn trim<T>(points: &mut VecDeque<T>, oldest: u64, t: impl Fn(&T) -> u64) {
    while points.len() >= 2 && t(&points[1]) <= oldest {
        points.pop_front();
    }
}

/// A track's finding, while it lasts.
#[derive(Debug, Clone)]
pub struct Found<D> {
    pub pid: u32,
    pub incarnation: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub detail: D,
}

/// A detector's track of one key.
pub trait Track {
    type Detail: Clone + Into<super::Detail>;
    fn finding(&self) -> &Option<Found<Self::Detail>>;
    fn finding_mut(&mut self) -> &mut Option<Found<Self::Detail>>;
    /// The time of its last sweep.
    fn last_ns(&self) -> Option<u64>;
    /// What else it keeps, in the detector's bounded entries.
    fn entries(&self) -> usize {
        0
    }
}

/// The rule held at the sweep at `now_ns` for process `pid` (incarnation
/// `incarnation`): a new finding, or the one of the same incarnation
/// updated with `update(earlier, detail)`.
pub fn found<D>(
    finding: &mut Option<Found<D>>,
    pid: u32,
    incarnation: u64,
    now_ns: u64,
    detail: D,
    update: impl FnOnce(&D, D) -> D,
) {
    match finding {
        Some(f) if f.incarnation == incarnation => {
            f.detail = update(&f.detail, detail);
            f.last_ns = now_ns;
            f.pid = pid;
        }
        _ => *finding = Some(Found { pid, incarnation, first_ns: now_ns, last_ns: now_ns, detail }),
    }
}

/// Drops the findings not seen for `keep_ns`, the tracks with neither a
/// finding nor a sweep within `window_ns`, and the findings beyond `max`
/// (the oldest, counted in `ev` under `kind`). Returns the entries of the
/// tracks dropped.
pub fn prune<T: Track>(
    tracks: &mut HashMap<Key, T>,
    now_ns: u64,
    keep_ns: u64,
    window_ns: u64,
    max: usize,
    kind: &'static str,
    ev: &mut Evictions,
) -> usize {
    let oldest = now_ns.saturating_sub(keep_ns);
    let window = now_ns.saturating_sub(window_ns);
    for t in tracks.values_mut() {
        if t.finding().as_ref().is_some_and(|f| f.last_ns < oldest) {
            *t.finding_mut() = None;
        }
    }
    // Keys the sweeps no longer see (their slot's totals are kept by the
    // kernel, so a key seen once is seen every sweep while the daemon
    // runs: this drops only what a SIGHUP or a bound left).
    let mut dropped = 0;
    tracks.retain(|_, t| {
        let keep = t.finding().is_some() || t.last_ns().is_some_and(|l| l >= window);
        if !keep {
            dropped += t.entries();
        }
        keep
    });
    let mut found: Vec<(u64, Key)> =
        tracks.iter().filter_map(|(k, t)| t.finding().as_ref().map(|f| (f.last_ns, k.clone()))).collect();
    if found.len() > max {
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (_, k) in found.drain(max..) {
            if let Some(t) = tracks.get_mut(&k) {
                *t.finding_mut() = None;
            }
            ev.add(kind, "finding", 1);
        }
    }
    dropped
}

/// Appends the findings seen within `keep_ns` of `now_ns`.
pub fn findings<T: Track>(tracks: &HashMap<Key, T>, now_ns: u64, keep_ns: u64, out: &mut Vec<Record>) {
    let oldest = now_ns.saturating_sub(keep_ns);
    for ((cgroup, comm, _), t) in tracks {
        let Some(f) = t.finding() else { continue };
        if f.last_ns < oldest {
            continue;
        }
        out.push(Record {
            detail: f.detail.clone().into(),
            pid: f.pid,
            incarnation: f.incarnation,
            comm: comm.clone(),
            cgroup: *cgroup,
            first_ns: f.first_ns,
            last_ns: f.last_ns,
        });
    }
}
