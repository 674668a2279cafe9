//! syscall_errors: failed calls that explain "task failed, please retry"
//! (scenario 5: openat ENOENT or EACCES on a model path, mmap ENOMEM).
//!
//! Rule: every failed call the kernel sends (all syscalls but futex, whose
//! EAGAIN/ETIMEDOUT are ordinary control flow) counts, per process, syscall
//! and errno, except the errnos that mean "try again": EAGAIN (non-blocking
//! I/O), EINTR and the kernel's restart codes (a signal arrived). For openat
//! the last few failing paths are kept, for connect the addresses (and how
//! long each failure took: a timeout is seconds, a refusal microseconds),
//! for mmap/munmap the last length. A non-blocking connect's EINPROGRESS
//! is the connection under way, not a failure. A short write (a write or
//! pwrite64 to a regular file that wrote fewer bytes than it asked, without
//! an error: the disk filling up, sent where write is traced) is a problem
//! of its own, under the name [`SHORT_WRITE`] in place of an errno.
//! Exact per-process counts are also in sonic_probe_syscall_errors_total.
//!
//! A failure is reported only once it *recurs* in its process (unless
//! `--findings-verbose`): the same path failing again (openat), or the same
//! syscall and errno failing again (the others), at least
//! [`RECUR_AFTER_NS`] after it first failed. The count then includes the
//! earlier failures, so it stays exact. What this keeps out is a tool's
//! start-up: the locale catalogs a coreutils command looks for, the config
//! files git or a CLI probes for, a search path tried candidate by candidate
//! (many distinct paths failing within milliseconds, then a success or a
//! give-up); none of them comes back within the same process. Also never a
//! finding: `close` failing with EBADF (a shell closing descriptors that
//! were never open, as `exec 9>&-` does), and failures on ignored paths,
//! for calls on a descriptor too (the row's `fd_arg`: read, pread64, write,
//! mmap, ...) when its path is ignored (a monitoring agent reading
//! /proc/PID/stat of a process that just exited).
//! A reported state adds sonic_probe_recurring_errors_total.

use std::{collections::VecDeque, sync::Arc};

use prometheus::proto::{MetricFamily, MetricType::COUNTER};
use serde::{Deserialize, Serialize};
use sonic_probe_common::syscalls;

use super::{
    path_patterns::PathPatterns,
    state::{tracked, StateMap},
    tally::Tally,
    DetailKind, Detector, DetectorCounts, Evictions, Input, LiveFile, PathDisplay, Record, Registration,
    Settings, RECUR_AFTER_NS,
};
use crate::{
    config::units::human_bytes,
    events::Event,
    metrics::family::{def, Fold, MetricDef},
    os::errno,
};

/// It has no thresholds of its own: the shared window, path patterns and
/// `verbose` of [`Settings`] are all it reads.
pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, _| Box::new(SyscallErrors::new(s)) };

/// Its finding: failed system calls of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub syscall: String,
    pub errno: String,
    pub count: u64,
    /// The last few failing paths (openat), addresses (connect) or files
    /// of the descriptors (write, read, ... on a file whose open was seen).
    pub paths: Vec<String>,
    /// The last requested length (mmap, munmap).
    pub length: Option<u64>,
    /// How long the failing calls took, on average (connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<f64>,
}

impl DetailKind for Detail {
    const KIND: &'static str = "syscall_errors";

    fn problem_key(&self) -> String {
        format!("{} {}", self.syscall, self.errno)
    }

    fn fold(&mut self, later: Self) {
        self.count += later.count;
        for p in later.paths {
            self.paths.retain(|q| *q != p);
            self.paths.push(p);
        }
        let extra = self.paths.len().saturating_sub(MAX_PATHS);
        self.paths.drain(..extra);
        if later.length.is_some() {
            self.length = later.length;
        }
        if let Some(w) = later.wait_seconds {
            // Weighted by the counts (self's already includes later's).
            let mine = self.count - later.count;
            let before = self.wait_seconds.unwrap_or(w) * mine as f64;
            self.wait_seconds = Some((before + w * later.count as f64) / self.count.max(1) as f64);
        }
    }

    fn show_paths(&mut self, display: PathDisplay) {
        for p in &mut self.paths {
            *p = display.show(p);
        }
    }

    fn describe(&self) -> String {
        let mut s = if self.errno == SHORT_WRITE {
            format!("{} wrote fewer bytes than asked {} times", self.syscall, self.count)
        } else {
            format!("{} failed {} times with {}", self.syscall, self.count, self.errno)
        };
        if !self.paths.is_empty() {
            s.push_str(&format!(": {}", self.paths.join(", ")));
        }
        if let Some(l) = self.length {
            s.push_str(&format!(" (length {})", human_bytes(l)));
        }
        if let Some(w) = self.wait_seconds {
            let each = if self.count == 1 { "" } else { " each" };
            s.push_str(&format!(" (waited {}{each})", human_wait(w)));
        }
        s
    }
}

/// `3.0 s`, `12 ms`, `40 µs`.
fn human_wait(seconds: f64) -> String {
    if seconds >= 0.1 {
        format!("{seconds:.1} s")
    } else if seconds >= 0.001 {
        format!("{:.0} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_recurring_errors_total", COUNTER, &["comm", "workload", "syscall", "errno"],
        "Failed calls counted in syscall_errors findings: failures that recur within their process."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Failures counted in findings, by (syscall, errno name).
    recurring: Tally<(&'static str, String)>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(
            self.recurring
                .export(&METRICS[0], fold, |_, (syscall, errno)| [syscall.to_string(), errno.clone()]),
        );
    }
}

/// Failing paths kept per finding.
pub const MAX_PATHS: usize = 5;

/// The errno label of short writes (EMIT_SHORT), which returned no errno.
pub const SHORT_WRITE: &str = "short_write";

/// The errno a short call is kept under: no errno is 0.
const SHORT: u16 = 0;

/// The errno's name, or [`SHORT_WRITE`].
fn problem_name(e: u16) -> String {
    if e == SHORT {
        SHORT_WRITE.to_string()
    } else {
        errno::name(e)
    }
}

/// errnos that ask the caller to try again: not failures.
const RETRY: &[u16] = &[libc::EAGAIN as u16, libc::EINTR as u16, 512, 513, 514, 516];

/// Distinct failing paths remembered per state, to see one fail again.
const MAX_SEEN_PATHS: usize = 32;

struct ErrState {
    pid: u32,
    comm: String,
    count: u64,
    paths: VecDeque<String>,
    length: Option<u64>,
    /// Time the failing calls took, in all (connect).
    wait_ns: u64,
    first_ns: u64,
    last_ns: u64,
    /// openat: failing paths with the time each first failed.
    seen: VecDeque<(Arc<str>, u64)>,
    reported: bool,
}

tracked!(ErrState, count);

/// (incarnation, syscall, errno).
type Key = (u64, u16, u16);

/// What it is told by the options (findings::Settings).
struct Config {
    ignore: PathPatterns,
    window_ns: u64,
    max: usize,
    verbose: bool,
}

impl Config {
    fn new(s: &Settings) -> Self {
        Config {
            ignore: PathPatterns::new(&s.ignore_paths),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
            verbose: s.verbose,
        }
    }
}

pub struct SyscallErrors {
    /// Its thresholds and windows, replaced whole on SIGHUP.
    cfg: Config,
    errors: StateMap<Key, ErrState>,
    counts: Counts,
}

impl SyscallErrors {
    pub fn new(s: &Settings) -> Self {
        SyscallErrors {
            cfg: Config::new(s),
            errors: StateMap::new(DETECTOR.kind, |k: &Key| k.0, s.max_findings),
            counts: Counts::default(),
        }
    }
}

/// Whether this failure shows that the problem recurs in its process.
fn recurs(st: &mut ErrState, path: Option<&str>, t: u64) -> bool {
    let Some(p) = path else { return t.saturating_sub(st.first_ns) >= RECUR_AFTER_NS };
    if let Some((_, first)) = st.seen.iter().find(|(q, _)| &**q == p) {
        return t.saturating_sub(*first) >= RECUR_AFTER_NS;
    }
    st.seen.push_back((Arc::from(p), t));
    if st.seen.len() > MAX_SEEN_PATHS {
        st.seen.pop_front();
    }
    false
}

impl Detector for SyscallErrors {
    fn observe(&mut self, input: &Input<'_>, evictions: &mut Evictions) {
        let Event::Call(c) = input.event else { return };
        let Some(e) = c.failure().or(c.is_short().then_some(SHORT)) else { return };
        if c.raw.syscall == syscalls::FUTEX || RETRY.contains(&e) {
            return;
        }
        // A descriptor that was never open: nothing failed that was meant to work.
        if c.raw.syscall == syscalls::CLOSE && e == libc::EBADF as u16 && !self.cfg.verbose {
            return;
        }
        let ignored = |p: &str| self.cfg.ignore.matches(p);
        // A call on a descriptor (a read, write or mmap of a file; the
        // descriptor is the argument its row says) is named by its file's
        // path, when its open was seen.
        let file = c.syscall().fd_arg.and_then(|arg| {
            let fd = c.raw.args[usize::from(arg)];
            input
                .files
                .of_call(c.tgid(), fd as u32, c.raw.file_dev, c.raw.file_ino)
                .map(|f| f.path.to_string())
        });
        if file.as_deref().is_some_and(ignored) {
            return;
        }
        // Recurrence is by the path or address the call names; a
        // descriptor's file is only shown.
        let path = c.target();
        if path.as_deref().is_some_and(ignored) {
            return;
        }
        let shown = path.clone().or(file);
        let t = c.raw.header.time_ns;
        let key = (input.incarnation, c.raw.syscall, e);
        let new = (!self.errors.map.contains_key(&key)).then_some(key);
        let st = self.errors.map.entry(key).or_insert_with(|| ErrState {
            pid: c.tgid(),
            comm: c.process_name(),
            count: 0,
            paths: VecDeque::new(),
            length: None,
            wait_ns: 0,
            first_ns: t,
            last_ns: t,
            seen: VecDeque::new(),
            reported: false,
        });
        st.count += 1;
        st.last_ns = t;
        let name = syscalls::by_index(c.raw.syscall).map_or("?", |s| s.name);
        // Failures counted in findings: all so far once it recurs, then each.
        let counted = if st.reported {
            Some(1)
        } else if self.cfg.verbose || recurs(st, path.as_deref(), t) {
            st.reported = true;
            st.seen = VecDeque::new();
            Some(st.count)
        } else {
            None
        };
        if let Some(n) = counted {
            let key = (name, problem_name(e));
            self.counts.recurring.add(&st.comm, input.cgroup, key.clone(), key, n);
        }
        if let Some(p) = shown {
            st.paths.retain(|q| *q != p);
            st.paths.push_back(p);
            if st.paths.len() > MAX_PATHS {
                st.paths.pop_front();
            }
        }
        if matches!(c.raw.syscall, syscalls::MMAP | syscalls::MUNMAP) {
            st.length = Some(c.raw.args[1]);
        }
        st.wait_ns += c.raw.duration_ns;
        if let Some(key) = new {
            self.errors.inserted(key, evictions);
        }
    }

    fn exited(&mut self, incarnation: u64) {
        self.errors.exited(incarnation);
    }

    fn reconfigure(&mut self, s: &Settings) {
        self.cfg = Config::new(s);
        self.errors.set_max_findings(s.max_findings);
    }

    fn prune(&mut self, now_ns: u64, _live: &[LiveFile<'_>], evictions: &mut Evictions) {
        self.errors.prune(now_ns.saturating_sub(self.cfg.window_ns), self.cfg.max, evictions);
    }

    fn findings(&self, now_ns: u64, _live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        let current = self.errors.current(now_ns.saturating_sub(self.cfg.window_ns));
        for ((inc, sc, e), st) in current.filter(|(_, st)| st.reported) {
            out.push(
                st.record(
                    Detail {
                        syscall: syscalls::by_index(*sc).map_or("?", |s| s.name).to_string(),
                        errno: problem_name(*e),
                        count: st.count,
                        paths: st.paths.iter().cloned().collect(),
                        length: st.length,
                        wait_seconds: syscalls::by_index(*sc)
                            .is_some_and(|s| s.addr_arg.is_some())
                            .then(|| st.wait_ns as f64 / 1e9 / st.count.max(1) as f64),
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
    use crate::findings::{self, testing::*, Engine};

    fn found(e: &mut Engine, now: u64) -> Vec<findings::Detail> {
        let mut v: Vec<findings::Detail> = e
            .findings(now, &[])
            .into_iter()
            .filter(|f| f.detail.kind() == "syscall_errors")
            .map(|f| f.detail)
            .collect();
        v.sort_by_key(|d| format!("{d:?}"));
        v
    }

    fn verbose() -> Settings {
        Settings { verbose: true, ..Settings::default() }
    }

    #[test]
    fn missing_model_paths_and_mmap_enomem() {
        let mut e = Engine::new(&verbose());
        for i in 0..7 {
            e.observe(&openat(4, SEC + i, &format!("/models/v{i}/lip_decoder.pth"), -2, 0));
        }
        e.observe(&openat(4, 2 * SEC, "/models/secret.pth", -13, 0));
        e.observe(&Event::Call(call(
            syscalls::MMAP,
            4,
            4,
            3 * SEC,
            100,
            -12,
            [0, 1 << 40, 3, 0x22, u64::MAX, 0],
        )));
        let f = found(&mut e, 4 * SEC);
        assert_eq!(f.len(), 3);
        let findings::Detail::SyscallErrors(Detail { syscall, errno, count, length, .. }) = &f[0] else {
            panic!()
        };
        assert_eq!((syscall.as_str(), errno.as_str(), *count, *length), ("mmap", "ENOMEM", 1, Some(1 << 40)));
        let findings::Detail::SyscallErrors(Detail { errno, count, paths, .. }) = &f[2] else { panic!() };
        assert_eq!((errno.as_str(), *count), ("ENOENT", 7));
        assert_eq!(paths.len(), MAX_PATHS);
        assert_eq!(paths.last().unwrap(), "/models/v6/lip_decoder.pth");
        let findings::Detail::SyscallErrors(Detail { errno, paths, .. }) = &f[1] else { panic!() };
        assert_eq!((errno.as_str(), paths.as_slice()), ("EACCES", &["/models/secret.pth".to_string()][..]));
    }

    /// A connect to 10.0.0.5:`port` that returned `ret` after `took` ns.
    fn connect(t: u64, port: u16, ret: i64, took: u64) -> Event {
        let mut c = call(syscalls::CONNECT, 4, 4, t, took, ret, [3, 0x1000, 16, 0, 0, 0]);
        c.raw.header.kind = sonic_probe_common::EVENT_SYSCALL_PATH;
        c.raw.reasons = sonic_probe_common::EMIT_ERROR | sonic_probe_common::EMIT_PATH;
        let mut sa = 2u16.to_ne_bytes().to_vec();
        sa.extend(port.to_be_bytes());
        sa.extend([10, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.raw.path_len = sa.len() as u16;
        c.path = Some(sa);
        Event::Call(c)
    }

    #[test]
    fn a_model_store_that_times_out_is_named_with_how_long_each_try_waited() {
        let mut e = Engine::new(&Settings::default());
        // Non-blocking connects under way: no failure.
        for i in 0..5 {
            e.observe(&connect(SEC + i, 443, -115, 20_000));
        }
        for i in 0..3 {
            e.observe(&connect((2 + 3 * i) * SEC, 9000, -110, 3 * SEC));
        }
        let f = found(&mut e, 9 * SEC);
        let [findings::Detail::SyscallErrors(d)] = &f[..] else { panic!("{f:?}") };
        assert_eq!(
            (d.errno.as_str(), d.count, d.paths.as_slice()),
            ("ETIMEDOUT", 3, &["10.0.0.5:9000".to_string()][..])
        );
        assert_eq!(d.describe(), "connect failed 3 times with ETIMEDOUT: 10.0.0.5:9000 (waited 3.0 s each)");
        // Findings of the same problem merged: the mean of all.
        let mut a = d.clone();
        a.fold(Detail { count: 1, wait_seconds: Some(1.0), ..d.clone() });
        assert_eq!((a.count, a.wait_seconds), (4, Some(2.5)));
    }

    #[test]
    fn a_missing_model_retried_every_request_is_found_with_every_failure() {
        let mut e = Engine::new(&Settings::default());
        // A start-up's probes of the same process first: distinct paths.
        for i in 0..6 {
            e.observe(&openat(4, SEC / 2 + i, &format!("/usr/share/locale/de/LC_MESSAGES/x{i}.mo"), -2, 0));
        }
        e.observe(&openat(4, SEC, "/models/v2.pth", -2, 0));
        assert!(found(&mut e, SEC + 1).is_empty(), "once is not yet a problem");
        e.observe(&openat(4, SEC + 300_000_000, "/models/v2.pth", -2, 0));
        assert!(found(&mut e, 2 * SEC).is_empty(), "within 400 ms of the first: the same start-up");
        e.observe(&openat(4, 2 * SEC, "/models/v2.pth", -2, 0));
        let f = found(&mut e, 3 * SEC);
        let [findings::Detail::SyscallErrors(Detail { count, paths, .. })] = &f[..] else { panic!("{f:?}") };
        assert_eq!(*count, 9, "every failure of (openat, ENOENT) in the process, probes included");
        assert_eq!(paths.last().unwrap(), "/models/v2.pth");
        e.observe(&openat(4, 3 * SEC, "/models/v2.pth", -2, 0));
        assert_eq!(counts::<Counts>(&e).recurring.get("app", 0, ("openat", "ENOENT".into())), 10);
        // Another errno without a path recurs by itself.
        let mmap =
            |t| Event::Call(call(syscalls::MMAP, 4, 4, t, 100, -12, [0, 1 << 40, 3, 0x22, u64::MAX, 0]));
        e.observe(&mmap(4 * SEC));
        assert_eq!(found(&mut e, 4 * SEC).len(), 1);
        e.observe(&mmap(5 * SEC));
        assert_eq!(found(&mut e, 5 * SEC).len(), 2);
    }

    #[test]
    fn a_tools_start_up_is_not_a_finding() {
        let mut e = Engine::new(&Settings::default());
        for pid in 100..200 {
            let t = u64::from(pid) * SEC;
            // Catalog lookups, the same config file twice, a search path
            // tried candidate by candidate, spread over 300 ms.
            for (i, p) in
                ["/usr/share/locale/de/LC_MESSAGES/coreutils.mo", "/root/.gitconfig", "/root/.gitconfig"]
                    .iter()
                    .enumerate()
            {
                e.observe(&openat(pid, t + i as u64 * 100_000_000, p, -2, 0));
            }
            for i in 0..20 {
                e.observe(&openat(pid, t + i * 50_000_000, &format!("/usr/etc/hooks.d/{i}/exec"), -2, 0));
            }
            e.observe(&exit(pid, t + SEC / 2));
        }
        assert!(found(&mut e, 300 * SEC).is_empty());
        let mut v = Engine::new(&verbose());
        v.observe(&openat(100, SEC, "/root/.gitconfig", -2, 0));
        assert_eq!(found(&mut v, 2 * SEC).len(), 1, "verbose lists everything");
    }

    #[test]
    fn the_same_error_of_many_exited_processes_is_one_finding() {
        let mut e = Engine::new(&verbose());
        for pid in 100..150 {
            e.observe(&openat(pid, u64::from(pid) * SEC, "/etc/tool.conf", -2, 0));
            e.observe(&exit(pid, u64::from(pid) * SEC + 1));
        }
        e.observe(&openat(7, SEC, "/etc/tool.conf", -2, 0));
        let mut f = e.findings(200 * SEC, &[]);
        f.sort_by_key(|f| f.pid);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!((f[0].pid, f[0].processes, &f[0].pids[..]), (7, 1, &[7][..]), "still running: its own");
        assert_eq!((f[1].pid, f[1].processes, &f[1].pids[..]), (149, 50, &[149, 148, 147, 146, 145][..]));
        assert!(matches!(f[1].detail, findings::Detail::SyscallErrors(Detail { count: 50, .. })));
    }

    #[test]
    fn closing_what_was_never_open_and_reads_of_ignored_files_are_not_failures() {
        let close = |t| Event::Call(call(syscalls::CLOSE, 4, 4, t, 10, -9, [9, 0, 0, 0, 0, 0]));
        let mut e = Engine::new(&Settings::default());
        // A shell loop: exec 9>&- every second, for a minute.
        for i in 0..60 {
            e.observe(&close(i * SEC));
        }
        // A monitoring agent reading the status of a process that just exited.
        e.observe(&openat(4, SEC, "/proc/1234/status", 5, 1));
        for i in 0..3 {
            e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC + i * SEC, 10, -3, [5, 0, 4096, 0, 0, 0])));
        }
        assert!(found(&mut e, 61 * SEC).is_empty());
        let mut v = Engine::new(&verbose());
        v.observe(&close(SEC));
        assert_eq!(found(&mut v, 2 * SEC).len(), 1);
    }

    /// Every call with a descriptor argument (its row's `fd_arg`), not
    /// only read's: a failure on a descriptor of an ignored path is no
    /// finding, the same failure on another file's descriptor is one.
    #[test]
    fn failures_on_descriptors_of_ignored_paths_are_not_failures_whatever_the_call() {
        let with_fd: Vec<_> = syscalls::SYSCALLS.iter().filter(|s| s.fd_arg.is_some()).collect();
        for name in ["read", "pread64", "write", "mmap"] {
            assert!(with_fd.iter().any(|s| s.name == name), "{name} has a descriptor argument");
        }
        let failed = |row: &syscalls::Syscall, fd: u64, t: u64| {
            let mut args = [0, 0, 4096, 0, 0, 0];
            args[usize::from(row.fd_arg.unwrap())] = fd;
            Event::Call(call(row.index, 4, 4, t, 10, -3, args))
        };
        // Verbose: any failure that is not filtered out is a finding at once.
        let mut e = Engine::new(&verbose());
        e.observe(&openat(4, SEC, "/proc/1234/stat", 5, 1));
        for row in &with_fd {
            e.observe(&failed(row, 5, 2 * SEC));
        }
        assert!(found(&mut e, 3 * SEC).is_empty(), "{:?}", found(&mut e, 3 * SEC));
        e.observe(&openat(4, 4 * SEC, "/srv/models/a.bin", 6, 1));
        for row in &with_fd {
            e.observe(&failed(row, 6, 5 * SEC));
        }
        let mut calls: Vec<String> = found(&mut e, 6 * SEC)
            .into_iter()
            .map(|f| match f {
                findings::Detail::SyscallErrors(d) => d.syscall,
                other => panic!("{other:?}"),
            })
            .collect();
        calls.sort();
        let mut want: Vec<String> = with_fd.iter().map(|s| s.name.to_string()).collect();
        want.sort();
        assert_eq!(calls, want);
    }

    #[test]
    fn short_writes_that_recur_are_a_problem_of_their_own_named_by_the_file() {
        // A write of 10000 bytes to descriptor 6 that wrote `ret`.
        let write = |t, ret, reasons| {
            let mut c = call(syscalls::WRITE, 4, 4, t, 1_000, ret, [6, 0, 10_000, 0, 0, 0]);
            c.raw.reasons = reasons;
            Event::Call(c)
        };
        use sonic_probe_common::{EMIT_ERROR, EMIT_SHORT, EMIT_TRACE};
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(4, SEC / 2, "/srv/out/frames.bin", 6, 1));
        // Whole writes sent for another reason (traced): nothing.
        e.observe(&write(SEC, 10_000, EMIT_TRACE));
        e.observe(&write(SEC + 1, 4_096, EMIT_SHORT));
        assert!(found(&mut e, SEC + 2).is_empty(), "once is not yet a problem");
        e.observe(&write(2 * SEC, 0, EMIT_SHORT));
        e.observe(&write(2 * SEC + 1, -28, EMIT_ERROR));
        e.observe(&write(3 * SEC, -28, EMIT_ERROR));
        let f = found(&mut e, 3 * SEC);
        let [findings::Detail::SyscallErrors(nospc), findings::Detail::SyscallErrors(short)] = &f[..] else {
            panic!("{f:?}")
        };
        assert_eq!((short.errno.as_str(), short.count), (SHORT_WRITE, 2));
        assert_eq!(short.describe(), "write wrote fewer bytes than asked 2 times: /srv/out/frames.bin");
        assert_eq!((nospc.errno.as_str(), nospc.count), ("ENOSPC", 2), "an ENOSPC is another problem");
        let recurring = counts::<Counts>(&e).recurring;
        assert_eq!(recurring.get("app", 0, ("write", SHORT_WRITE.into())), 2);
    }

    #[test]
    fn library_probing_is_not_a_failure() {
        let mut e = Engine::new(&verbose());
        e.observe(&openat(4, SEC, "/usr/lib/glibc-hwcaps/x86-64-v3/libc.so.6", -2, 0));
        e.observe(&openat(4, SEC, "/opt/py/bin/pybuilddir.txt", -2, 0));
        assert!(found(&mut e, 2 * SEC).is_empty());
    }

    #[test]
    fn retries_and_futex_are_not_failures() {
        let mut e = Engine::new(&verbose());
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -11, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -4, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::READ, 4, 4, SEC, 10, -512, [5, 0, 4096, 0, 0, 0])));
        e.observe(&Event::Call(call(syscalls::FUTEX, 4, 4, SEC, 10, -110, [0; 6])));
        assert!(found(&mut e, 2 * SEC).is_empty());
    }
}
