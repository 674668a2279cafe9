//! repeated_open: the same path opened again and again by one process
//! (scenario 2: lip_decoder.pth reloaded on every request).
//!
//! Rule: successful openat calls of one regular file by one process; when
//! at least `count` (--repeated-open-count, default 3) of them fall within
//! `window` (--repeated-open-window, default 60 s), the path is reported. The finding
//! counts every open of the run (a run ends when the window passes without
//! an open) and the bytes read through those opens (from the kernel's
//! per-descriptor totals at close, plus those of opens still open).
//!
//! Not a finding (unless `--findings-verbose`): opens for writing (a log
//! appended to, a state file rewritten: written, not reloaded), and opens
//! that all fall within [`super::RECUR_AFTER_NS`] of the first of the run:
//! an interpreter's start-up opens locale.alias or gconv-modules.cache
//! several times within milliseconds and never again, a service reloads its
//! model with every request.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use prometheus::proto::{MetricFamily, MetricType::COUNTER};
use serde::{Deserialize, Serialize};
use sonic_probe_common::{file_class_name, syscalls};

use super::{
    path_patterns::PathPatterns,
    state::{tracked, StateMap},
    tally::Tally,
    DetailKind, Detector, DetectorCounts, Evictions, Input, KnownFile, LiveFile, PathDisplay, Record,
    Registration, RECUR_AFTER_NS,
};
use crate::{
    config::units::human_bytes,
    events::Event,
    metrics::family::{def, Fold, MetricDef},
};

pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, _| Box::new(RepeatedOpen::new(s)) };

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Opens of one path within `window` that make a finding.
    pub count: u64,
    pub window: Duration,
}

/// Its finding: the same path opened again and again by one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub path: String,
    pub file_class: String,
    pub count: u64,
    pub bytes_read: u64,
}

impl DetailKind for Detail {
    const KIND: &'static str = "repeated_open";

    fn problem_key(&self) -> String {
        self.path.clone()
    }

    fn fold(&mut self, later: Self) {
        self.count += later.count;
        self.bytes_read += later.bytes_read;
    }

    fn show_paths(&mut self, display: PathDisplay) {
        self.path = display.show(&self.path);
    }

    fn describe(&self) -> String {
        format!(
            "{} ({}) opened {} times, {} read through those opens",
            self.path,
            self.file_class,
            self.count,
            human_bytes(self.bytes_read)
        )
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_repeated_opens_total", COUNTER, &["comm", "workload", "file_class"],
        "Opens of paths that are being reopened repeatedly (the repeated_open rule)."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Opens counted in findings, by file class.
    opens: Tally<&'static str>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(self.opens.export(&METRICS[0], fold, |_, class| [class.to_string()]));
    }
}

/// Open times remembered per path within the window, the oldest first
/// (the rule needs `min_count` of them and the first one's time).
const MAX_TIMES: usize = 64;

struct PathState {
    pid: u32,
    comm: String,
    class: u16,
    /// Open times within the window, oldest first.
    recent: VecDeque<u64>,
    /// Opens since this run started.
    opens: u64,
    /// Bytes read through closed opens of this run.
    bytes_read: u64,
    first_ns: u64,
    last_ns: u64,
    /// Whether the run has reached the threshold.
    reported: bool,
}

tracked!(PathState, opens);

type Key = (u64, Arc<str>);

/// What it is told by the options (findings::Settings).
struct Config {
    ignore: PathPatterns,
    min_count: u64,
    run_window_ns: u64,
    window_ns: u64,
    max: usize,
    verbose: bool,
}

impl Config {
    fn new(s: &super::Settings) -> Self {
        Config {
            ignore: PathPatterns::new(&s.ignore_paths),
            min_count: s.repeated_open.count.max(1),
            run_window_ns: s.repeated_open.window.as_nanos() as u64,
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
            verbose: s.verbose,
        }
    }
}

pub struct RepeatedOpen {
    /// Its thresholds and windows, replaced whole on SIGHUP.
    cfg: Config,
    paths: StateMap<Key, PathState>,
    counts: Counts,
}

impl RepeatedOpen {
    /// States last seen before this are past both windows.
    fn oldest(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.cfg.window_ns.max(self.cfg.run_window_ns))
    }

    pub fn new(s: &super::Settings) -> Self {
        RepeatedOpen {
            cfg: Config::new(s),
            paths: StateMap::new(DETECTOR.kind, |k: &Key| k.0, s.max_findings),
            counts: Counts::default(),
        }
    }
}

impl RepeatedOpen {
    /// `n` read-only opens of regular file `file` (its process's
    /// incarnation's), the last at `t`, counted under `cgroup`.
    fn opened(&mut self, file: &KnownFile, t: u64, n: u64, cgroup: u64, evictions: &mut Evictions) {
        let key = (file.incarnation, file.path.clone());
        let new = (!self.paths.map.contains_key(&key)).then(|| key.clone());
        let st = self.paths.map.entry(key).or_insert_with(|| PathState {
            pid: file.tgid,
            comm: file.comm.clone(),
            class: file.class,
            recent: VecDeque::new(),
            opens: 0,
            bytes_read: 0,
            first_ns: t,
            last_ns: t,
            reported: false,
        });
        if !st.reported && t.saturating_sub(st.last_ns) > self.cfg.run_window_ns {
            // An unreported run ended: start a new one. (A reported
            // one keeps counting until it ages out.)
            st.recent.clear();
            st.opens = 0;
            st.bytes_read = 0;
            st.first_ns = t;
        }
        while st.recent.front().is_some_and(|&f| t.saturating_sub(f) > self.cfg.run_window_ns) {
            st.recent.pop_front();
        }
        // The oldest times are kept, the newest dropped when it is full: the
        // rule asks how long ago the first open within the window was, and
        // a burst (many opens the kernel counted, read at one time) must
        // not push it out.
        let room = MAX_TIMES - st.recent.len();
        st.recent.extend(std::iter::repeat_n(t, n.min(room as u64) as usize));
        st.opens += n;
        st.last_ns = t;
        st.comm = file.comm.clone();
        let class = file_class_name(st.class);
        if st.reported {
            self.counts.opens.add(&st.comm, cgroup, class, class, n);
        } else if st.recent.len() as u64 >= self.cfg.min_count
            && (self.cfg.verbose || st.recent.front().is_some_and(|&f| t.saturating_sub(f) >= RECUR_AFTER_NS))
        {
            st.reported = true;
            self.counts.opens.add(&st.comm, cgroup, class, class, st.opens);
        }
        if let Some(key) = new {
            self.paths.inserted(key, evictions);
        }
    }
}

impl Detector for RepeatedOpen {
    fn observe(&mut self, input: &Input<'_>, evictions: &mut Evictions) {
        match input.event {
            Event::Call(c) if c.raw.syscall == syscalls::OPENAT && c.raw.ret >= 0 => {
                let Some(file) = input.files.get(c.tgid(), c.raw.ret as u32) else { return };
                let writes = c.raw.args[2] & libc::O_ACCMODE as u64 != libc::O_RDONLY as u64;
                if !file.is_regular()
                    || file.opened_ns != c.raw.header.time_ns
                    || (writes && !self.cfg.verbose)
                    || self.cfg.ignore.matches(&file.path)
                {
                    return;
                }
                if input.opens > 0 {
                    self.opened(file, c.raw.header.time_ns, input.opens, input.cgroup, evictions);
                }
            }
            Event::FileClosed(f) => {
                let Some(file) = input.closed else { return };
                if let Some(st) = self.paths.map.get_mut(&(file.incarnation, file.path.clone())) {
                    if file.opened_ns >= st.first_ns {
                        st.bytes_read += f.raw.file.read_bytes;
                    }
                }
            }
            _ => {}
        }
    }

    fn reopened(&mut self, file: &KnownFile, opens: u64, last_ns: u64, cgroup: u64, ev: &mut Evictions) {
        if file.is_regular() && !self.cfg.ignore.matches(&file.path) {
            self.opened(file, last_ns, opens, cgroup, ev);
        }
    }

    fn reconfigure(&mut self, s: &super::Settings) {
        self.cfg = Config::new(s);
        self.paths.set_max_findings(s.max_findings);
    }

    fn exited(&mut self, incarnation: u64) {
        self.paths.exited(incarnation);
    }

    fn prune(&mut self, now_ns: u64, _live: &[LiveFile<'_>], ev: &mut Evictions) {
        self.paths.prune(self.oldest(now_ns), self.cfg.max, ev);
    }

    fn findings(&self, now_ns: u64, live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        for ((inc, path), st) in self.paths.current(self.oldest(now_ns)) {
            if !st.reported {
                continue;
            }
            let live_bytes: u64 = live
                .iter()
                .filter(|l| {
                    l.file.incarnation == *inc && l.file.path == *path && l.file.opened_ns >= st.first_ns
                })
                .map(|l| l.totals.read_bytes)
                .sum();
            out.push(
                st.record(
                    Detail {
                        path: path.to_string(),
                        file_class: file_class_name(st.class).to_string(),
                        count: st.opens,
                        bytes_read: st.bytes_read + live_bytes,
                    }
                    .into(),
                    *inc,
                ),
            );
        }
    }

    fn counts(&self, _listed: &[Record]) -> Box<dyn DetectorCounts> {
        Box::new(self.counts.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{self, testing::*, Engine, FileTotals, Settings};

    const MODEL: u16 = 2;

    fn engine() -> Engine {
        Engine::new(&Settings {
            repeated_open: super::Settings { count: 3, window: Duration::from_secs(60) },
            ..Settings::default()
        })
    }

    fn found(e: &mut Engine, now: u64, live: &[(u32, u32, u64, FileTotals)]) -> Vec<(u32, findings::Detail)> {
        e.findings(now, &findings::testing::live(live))
            .into_iter()
            .filter(|f| f.detail.kind() == "repeated_open")
            .map(|f| (f.pid, f.detail))
            .collect()
    }

    /// One request: open, read `bytes`, close.
    fn request(e: &mut Engine, pid: u32, t: u64, path: &str, bytes: u64) {
        e.observe(&openat(pid, t, path, 3, MODEL));
        e.observe(&close(pid, t + 1000, 3, t, 10, bytes, 0, 0));
    }

    #[test]
    fn a_model_reloaded_every_request() {
        let mut e = engine();
        for i in 0..5 {
            request(&mut e, 9, (i + 1) * SEC, "/models/sonic/lip_decoder.pth", 1000);
        }
        let f = found(&mut e, 10 * SEC, &[]);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].1,
            findings::Detail::RepeatedOpen(Detail {
                path: "/models/sonic/lip_decoder.pth".into(),
                file_class: "model".into(),
                count: 5,
                bytes_read: 5000
            })
        );
        assert_eq!(counts::<Counts>(&e).opens.get("app", 0, "model"), 5);
    }

    #[test]
    fn opens_the_kernel_counted_without_sending_them() {
        // One open a second sent, the others (every 100 ms) counted in the
        // kernel and read by the sweep: the same finding as every open sent.
        let mut e = engine();
        let file = (0x803, 42);
        let path = "/models/sonic/lip_decoder.pth";
        let mut total = 0;
        for s in 1..=3u64 {
            total += 1;
            e.observe(&openat_counted(9, s * SEC, path, 3, MODEL, file, SEC, total));
            e.observe(&close_of(9, s * SEC + 1000, 3, s * SEC, file, 10));
            for k in 1..10u64 {
                let t = s * SEC + k * SEC / 10;
                total += 1;
                e.observe(&close_of(9, t + 1000, 4, t, file, 10));
            }
            e.reopened((9, file.0, file.1, SEC), total, s * SEC + 9 * SEC / 10);
        }
        let f = found(&mut e, 5 * SEC, &[]);
        assert_eq!(f.len(), 1);
        let findings::Detail::RepeatedOpen(d) = &f[0].1 else { panic!("{f:?}") };
        assert_eq!((d.path.as_str(), d.count, d.bytes_read), (path, 30, 300));
        assert_eq!(counts::<Counts>(&e).opens.get("app", 0, "model"), 30);
        // Bursts of hundreds of opens, each read by the sweep at once (the
        // MAX_TIMES newest times would all be the burst's): the first
        // open's time is kept, so the run is seen to recur.
        let mut e = engine();
        e.observe(&openat_counted(9, SEC, path, 3, MODEL, file, SEC, 1));
        e.observe(&openat_counted(9, SEC + 1_000_000, path, 3, MODEL, file, SEC, 2));
        for (k, total) in [(1u64, 400u64), (8, 800), (15, 1200)] {
            e.reopened((9, file.0, file.1, SEC), total, SEC + k * SEC / 10);
        }
        let f = found(&mut e, 3 * SEC, &[]);
        let [(_, findings::Detail::RepeatedOpen(d))] = f.as_slice() else { panic!("{f:?}") };
        assert_eq!(d.count, 1200);
        assert_eq!(counts::<Counts>(&e).opens.get("app", 0, "model"), 1200);
        // A start-up's burst, one sent and the rest counted within
        // milliseconds: not a recurring problem.
        let mut e = engine();
        e.observe(&openat_counted(9, SEC, "/usr/share/locale/locale.alias", 3, 0, file, SEC, 1));
        e.reopened((9, file.0, file.1, SEC), 6, SEC + 5_000_000);
        assert!(found(&mut e, 2 * SEC, &[]).is_empty());
    }

    #[test]
    fn below_the_count_or_spread_beyond_the_window_is_fine() {
        let mut e = engine();
        request(&mut e, 9, SEC, "/m.pth", 1);
        request(&mut e, 9, 2 * SEC, "/m.pth", 1);
        assert!(found(&mut e, 3 * SEC, &[]).is_empty(), "two opens");
        // The window's edge, from both sides: the third open exactly 60 s
        // after the first is within the window, 1 ns later it is not (and
        // the first has left the window, so no later open completes a
        // triple with it).
        let opens = |third: u64| {
            let mut e = engine();
            for t in [SEC, 31 * SEC, third] {
                request(&mut e, 9, t, "/n.pth", 1);
            }
            found(&mut e, 62 * SEC, &[])
        };
        assert_eq!(opens(61 * SEC).len(), 1, "exactly 60 s apart is within");
        assert!(opens(61 * SEC + 1).is_empty(), "60 s and 1 ns apart is beyond");
        // Opens 30 s and 31 s apart: any three span more than 60 s.
        let mut e = engine();
        for t in [0, 30, 61, 92, 123] {
            request(&mut e, 9, t * SEC + 1, "/n.pth", 1);
        }
        assert!(found(&mut e, 124 * SEC, &[]).is_empty());
    }

    #[test]
    fn two_processes_one_path_are_two_findings_and_pid_reuse_a_third() {
        let mut e = engine();
        for i in 0..3 {
            request(&mut e, 1, (i + 1) * SEC, "/shared.pth", 10);
            request(&mut e, 2, (i + 1) * SEC, "/shared.pth", 20);
        }
        e.observe(&exit(1, 5 * SEC));
        for i in 0..3 {
            request(&mut e, 1, (i + 6) * SEC, "/shared.pth", 30);
        }
        let mut f = found(&mut e, 10 * SEC, &[]);
        f.sort_by_key(|(p, d)| (*p, format!("{d:?}")));
        let bytes: Vec<(u32, u64)> = f
            .iter()
            .map(|(p, d)| match d {
                findings::Detail::RepeatedOpen(Detail { bytes_read, count: 3, .. }) => (*p, *bytes_read),
                _ => panic!("{d:?}"),
            })
            .collect();
        assert_eq!(bytes, vec![(1, 30), (1, 90), (2, 60)]);
    }

    #[test]
    fn files_still_open_count_their_bytes_so_far() {
        let mut e = engine();
        for i in 0..2 {
            request(&mut e, 9, (i + 1) * SEC, "/m.pth", 100);
        }
        e.observe(&openat(9, 3 * SEC, "/m.pth", 4, MODEL));
        let live = [(9, 4, 3 * SEC, FileTotals { read_bytes: 42, ..FileTotals::default() })];
        let f = found(&mut e, 4 * SEC, &live);
        assert!(
            matches!(f[0].1, findings::Detail::RepeatedOpen(Detail { count: 3, bytes_read: 242, .. })),
            "{f:?}"
        );
    }

    #[test]
    fn the_loader_cache_and_pseudo_files_are_ignored() {
        let mut e = engine();
        for i in 0..5 {
            request(&mut e, 9, (i + 1) * SEC, "/etc/ld.so.cache", 1);
            request(&mut e, 9, (i + 1) * SEC, "/proc/self/stat", 1);
        }
        assert!(found(&mut e, 10 * SEC, &[]).is_empty());
    }

    #[test]
    fn start_up_bursts_and_writes_are_not_reloads() {
        let mut e = engine();
        // An interpreter start-up: locale.alias three times within 5 ms.
        for i in 0..3 {
            request(&mut e, 9, SEC + i * 2_000_000, "/usr/share/locale/locale.alias", 100);
        }
        // A shell appending to its log every 100 ms for 10 s.
        for i in 0..100 {
            let Event::Call(mut c) = openat(8, SEC + i * SEC / 10, "/var/log/app.log", 3, 1) else {
                unreachable!()
            };
            c.raw.args[2] = (libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT) as u64;
            e.observe(&Event::Call(c));
        }
        assert!(found(&mut e, 20 * SEC, &[]).is_empty());
        // Verbose lists both.
        let mut v = Engine::new(&Settings { verbose: true, ..Settings::default() });
        for i in 0..3 {
            request(&mut v, 9, SEC + i * 2_000_000, "/usr/share/locale/locale.alias", 100);
        }
        assert_eq!(found(&mut v, 2 * SEC, &[]).len(), 1);
    }

    #[test]
    fn a_flood_of_paths_and_processes_never_evicts_the_service() {
        let mut e = engine();
        let model = "/models/sonic/lip_decoder.pth";
        let mut t = SEC;
        for req in 0..5u64 {
            request(&mut e, 9, t, model, 1000);
            // Between two requests: 10,000 distinct files opened by one
            // noisy process, and 2,000 short-lived processes opening 3 each.
            for i in 0..10_000u64 {
                request(&mut e, 10, t + i, &format!("/data/{req}/{i}"), 1);
            }
            for p in 0..2000u32 {
                let pid = 1000 + p + req as u32 * 2000;
                for f in 0..3 {
                    request(&mut e, pid, t + u64::from(p) * 100 + f, &format!("/tmp/{pid}/{f}"), 1);
                }
                e.observe(&exit(pid, t + u64::from(p) * 100 + 10));
            }
            t += SEC;
        }
        let f = found(&mut e, t, &[]);
        assert!(
            matches!(
                &f[..],
                [(9, findings::Detail::RepeatedOpen(Detail { count: 5, bytes_read: 5000, .. }))]
            ),
            "{f:?}"
        );
        let evicted = e.metrics().evictions.get("repeated_open", "working");
        assert!(evicted >= 50_000 - 4096, "{evicted}");
    }

    #[test]
    fn not_regular_files_are_ignored() {
        let mut e = engine();
        for i in 0..5 {
            let Event::Call(mut c) = openat(9, (i + 1) * SEC, "/dev/null", 3, 0) else { unreachable!() };
            c.raw.file_mode = 0o020666; // a character device
            e.observe(&Event::Call(c));
        }
        assert!(found(&mut e, 10 * SEC, &[]).is_empty());
    }
}
