//! Diagnoses: the five field problems of scenarios.md, found automatically
//! and listed as findings a person can read (GET /findings).
//!
//! Events flow in through [`Engine::observe`]: the engine first keeps its
//! descriptor table ([`files`]) current, then shows the event to every
//! [`Detector`], one module per problem, each registered once in
//! [`DETECTORS`] with its kind and the metric families it exports (it
//! counts and exports them itself). Its module owns its kind of finding
//! too: its `Detail` (the fields of its JSON, what makes two findings the
//! same problem and how they fold, how its paths are shown, how it reads in
//! `sonic-probe findings`: [`DetailKind`]), and its thresholds (its
//! `Settings`, a field of [`Settings`]). One line of the `detectors!` list
//! names each detector, and makes [`DETECTORS`] and [`Detail`] of them.
//!
//! A library: events in, findings and counts out. It reads no kernel map
//! and no /proc; the daemon (`run::findings`) feeds it what it needs of
//! them as events. [`Engine::read`] asks each detector for its current
//! findings and folds the same problem of many exited processes into one
//! finding ([`merge`]); reading changes nothing. Everything is bounded:
//! [`Engine::prune`] (the daemon's one-second tick) drops what was not seen
//! for `window` and keeps at most `max_findings` findings per detector,
//! and working state is capped with a fair share per process that never
//! evicts a finding ([`state`]).
//!
//! Watching a whole host, most of what the detectors see is churn: tools
//! that run for milliseconds and do the same harmless things at every
//! start. The rules tell a service's recurring problem from that (see each
//! detector and docs/metrics.md, "What is not a finding"); `verbose` turns
//! those rules off.
//!
//! Times inside are CLOCK_MONOTONIC nanoseconds (the events' clock); they
//! become RFC 3339 wall-clock times only on the way out.

pub mod cpu_starved;
pub mod files;
pub mod futex_stall;
pub mod gpu_wait;
pub mod merge;
pub mod mmap_churn;
pub mod path_patterns;
pub mod paths;
pub mod repeated_open;
pub mod request_paths;
pub mod small_reads;
pub(crate) mod state;
pub mod syscall_errors;
pub mod tally;
pub mod thread_share;

use std::{
    any::Any,
    collections::HashMap,
    time::{Duration, SystemTime},
};

use prometheus::proto::MetricFamily;
use serde::{Deserialize, Serialize};

use crate::{
    events::Event,
    metrics::family::{Fold, MetricDef},
    os::monotonic_ns,
};
pub use files::{FileTable, FileTotals, KnownFile};
pub use paths::{show_paths, PathDisplay};
use sonic_probe_common::OpenFile;
pub use state::Evictions;

pub use crate::workloads::WorkloadNames;

/// One finding, as GET /findings returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    #[serde(flatten)]
    pub detail: Detail,
    /// The process; for a problem of several processes, the one seen last.
    pub pid: u32,
    pub comm: String,
    /// Processes with this problem (1 but for problems of processes that
    /// have exited, which are folded into one finding).
    #[serde(default = "one")]
    pub processes: u64,
    /// A few of their pids, the most recently seen first.
    #[serde(default)]
    pub pids: Vec<u32>,
    /// The workload (systemd unit, container, pod) the process runs in.
    #[serde(default)]
    pub workload: WorkloadNames,
    /// Its cgroup v2 id, named into `workload` when the findings are read.
    #[serde(skip)]
    pub cgroup: u64,
    /// RFC 3339.
    pub first_seen: String,
    /// RFC 3339.
    pub last_seen: String,
}

fn one() -> u64 {
    1
}

/// What one kind of finding says, beyond the process and the times: a
/// struct in its detector's module (`mmap_churn::Detail`, ...), serialized
/// flat into the finding after its `kind`.
pub trait DetailKind: Sized {
    /// Its `kind` in JSON, and its detector's registered kind.
    const KIND: &'static str;
    /// What makes two findings of this kind the same problem (besides the
    /// process name and cgroup), for folding those of exited processes.
    fn problem_key(&self) -> String;
    /// Folds in the finding of the same problem of a process seen later.
    fn fold(&mut self, later: Self);
    /// Rewrites the file paths it shows (`--findings-paths`); a kind
    /// without data paths has nothing to do.
    fn show_paths(&mut self, _display: PathDisplay) {}
    /// What it says, in one line of prose (`sonic-probe findings`).
    fn describe(&self) -> String;
    /// The lines printed under that one with `sonic-probe findings
    /// --stacks`; none for a kind without stacks.
    fn stacks(&self) -> String {
        String::new()
    }
}

/// A finding as detectors keep it (monotonic times).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub detail: Detail,
    pub pid: u32,
    /// The process incarnation (see [`Input`]).
    pub incarnation: u64,
    pub comm: String,
    /// The process's cgroup v2 id at its latest event (the engine fills
    /// it in; detectors leave 0).
    pub cgroup: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// What a detector sees of one event.
pub struct Input<'a> {
    pub event: &'a Event,
    /// The process's incarnation: a pid reused after an exit, or a process
    /// that exec'd a new program, gets a new one, so a new process (or
    /// program) never continues an old one's findings.
    pub incarnation: u64,
    /// The cgroup v2 id of the event's thread: what the detectors' counts
    /// are added under.
    pub cgroup: u64,
    /// For a file-close event: the file, as the descriptor table knew it.
    pub closed: Option<&'a KnownFile>,
    /// For a successful openat: the opens it stands for (see
    /// [`files::Observed::opens`]).
    pub opens: u64,
    /// The descriptor table after this event.
    pub files: &'a FileTable,
}

/// A file still open now, with what has been read through it so far.
#[derive(Debug, Clone)]
pub struct LiveFile<'a> {
    pub file: std::borrow::Cow<'a, KnownFile>,
    pub totals: FileTotals,
}

/// One diagnosis. Implementations keep bounded state, and count what they
/// export themselves ([`DetectorCounts`]).
pub trait Detector: Send {
    /// Sees every event, in ring-buffer order.
    fn observe(&mut self, input: &Input<'_>, evictions: &mut Evictions);
    /// Drops what has aged out of its windows at `now_ns` and bounds its
    /// findings to `max_findings` (the daemon's one-second tick, never a
    /// read). `live` are the files open right now.
    fn prune(&mut self, now_ns: u64, live: &[LiveFile<'_>], evictions: &mut Evictions);
    /// Appends the current findings at `now_ns`: what a prune at `now_ns`
    /// would keep, changing nothing. `live` are the files open right now.
    fn findings(&self, now_ns: u64, live: &[LiveFile<'_>], out: &mut Vec<Record>);
    /// Opens the kernel counted without sending them (its reopens map,
    /// read by the sweep): `opens` more read-only opens of `file`, the last
    /// at `last_ns`; `cgroup` as [`Input::cgroup`].
    fn reopened(&mut self, _file: &KnownFile, _opens: u64, _last_ns: u64, _cgroup: u64, _ev: &mut Evictions) {
    }
    /// The daemon's sweep read the GPU waits the uprobes counted, just
    /// before the scheduler programs' totals (gpu_wait's input; see
    /// [`crate::gpu::waits::GpuWaitSample`]).
    fn gpu_waits(&mut self, _now_ns: u64, _waits: &[crate::gpu::waits::GpuWaitSample]) {}
    /// The daemon's sweep read the scheduler programs' totals
    /// (cpu_starved's and gpu_wait's input; see [`crate::threads::ThreadSample`]).
    fn thread_times(
        &mut self,
        _now_ns: u64,
        _samples: &[crate::threads::ThreadSample],
        _facts: &mut dyn cpu_starved::ThreadFacts,
        _incarnation: &mut cpu_starved::Incarnations<'_>,
    ) {
    }
    /// A process exited: its working state can go (its findings stay).
    fn exited(&mut self, _incarnation: u64) {}
    /// New thresholds and windows (SIGHUP): state and findings are kept.
    fn reconfigure(&mut self, settings: &Settings);
    /// Its counters as they are now: taken under the engine's lock,
    /// exported after it is released. `listed` are the findings it has
    /// just listed, as the engine completed them (their cgroups filled in).
    fn counts(&self, _listed: &[Record]) -> Box<dyn DetectorCounts> {
        Box::new(tally::Uncounted)
    }
}

/// A detector's counters at one moment, and how they are exported.
pub trait DetectorCounts: Send + Any {
    /// Appends the families of its registration's `metrics`, with the
    /// process names, cgroups and thread names folded by `fold`.
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>);
}

/// A detector as the engine and the exporter know it; each detector's
/// module declares its own.
pub struct Registration {
    /// The kind of finding it reports ([`DetailKind::KIND`]): the `kind` label
    /// of sonic_probe_findings and sonic_probe_findings_evictions_total.
    pub kind: &'static str,
    /// The families its counts export (part of crate::metrics::metric_defs,
    /// documented in docs/metrics.md).
    pub metrics: &'static [MetricDef],
    pub new: fn(&Settings, &Shared) -> Box<dyn Detector>,
}

/// Makes, from the one list of detectors, [`DETECTORS`], [`Detail`] (a
/// variant per detector, holding its module's `Detail`) and the dispatch
/// of [`DetailKind`] over it.
macro_rules! detectors {
    ($($variant:ident($module:ident),)*) => {
        /// Every detector, in the order they see each event.
        pub const DETECTORS: &[Registration] = &[$($module::DETECTOR,)*];

        /// What was found; `kind` names it in JSON (each variant is
        /// serialized as its detector's fields, flat after `kind`).
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum Detail {
            $($variant($module::Detail),)*
        }

        $(impl From<$module::Detail> for Detail {
            fn from(d: $module::Detail) -> Self {
                Detail::$variant(d)
            }
        })*

        /// Each detector's kind of finding, in [`DETECTORS`] order.
        #[cfg(test)]
        const DETAIL_KINDS: &[&str] = &[$(<$module::Detail as DetailKind>::KIND,)*];

        impl Detail {
            /// Its kind's name ([`DetailKind::KIND`]).
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Detail::$variant(_) => <$module::Detail as DetailKind>::KIND,)*
                }
            }

            /// See [`DetailKind::problem_key`].
            pub fn problem_key(&self) -> String {
                match self {
                    $(Detail::$variant(d) => d.problem_key(),)*
                }
            }

            /// See [`DetailKind::fold`]; `later` is of the same kind.
            pub fn fold(&mut self, later: Detail) {
                match (self, later) {
                    $((Detail::$variant(d), Detail::$variant(l)) => d.fold(l),)*
                    (d, l) => unreachable!("folding a {} into a {}", l.kind(), d.kind()),
                }
            }

            /// See [`DetailKind::show_paths`].
            pub fn show_paths(&mut self, display: PathDisplay) {
                match self {
                    $(Detail::$variant(d) => d.show_paths(display),)*
                }
            }

            /// See [`DetailKind::describe`].
            pub fn describe(&self) -> String {
                match self {
                    $(Detail::$variant(d) => d.describe(),)*
                }
            }

            /// See [`DetailKind::stacks`].
            pub fn stacks(&self) -> String {
                match self {
                    $(Detail::$variant(d) => d.stacks(),)*
                }
            }
        }
    };
}

// Every detector, in the order they see each event, with the variant of
// `Detail` its findings are: the one place that names them all.
detectors! {
    FutexStall(futex_stall),
    RepeatedOpen(repeated_open),
    SmallReads(small_reads),
    MmapChurn(mmap_churn),
    SyscallErrors(syscall_errors),
    CpuStarved(cpu_starved),
    GpuWait(gpu_wait),
}

/// Thresholds and windows of every detector (flags; documented in README):
/// those they share, and each one's own (its module's `Settings`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// A finding not seen again for this long is dropped.
    pub window: Duration,
    /// Records kept per detector.
    pub max_findings: usize,
    pub futex_stall: futex_stall::Settings,
    pub repeated_open: repeated_open::Settings,
    pub small_reads: small_reads::Settings,
    pub mmap_churn: mmap_churn::Settings,
    pub cpu_starved: cpu_starved::Settings,
    pub gpu_wait: gpu_wait::Settings,
    /// Paths never reported by repeated_open, small_reads and (as failing
    /// openat paths) syscall_errors.
    pub ignore_paths: Vec<glob::Pattern>,
    /// Report everything: turns off the rules that keep one-off start-up
    /// behaviour of short-lived processes out of the findings.
    pub verbose: bool,
}

/// What the daemon gives the detectors when it makes them, besides their
/// options: what lives as long as the daemon and changes with no SIGHUP.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// The stacks captured while stalls last (None: `--stack-captures off`).
    pub captures: Option<crate::stacks::capture::CaptureStore>,
}

/// A problem recurs within a process when it shows again at least this long
/// after it first showed: a tool's start-up (locale catalogs, config files
/// it looks for, search-path probes) is over in milliseconds, a service's
/// problem comes back with the next request. The stand-in's requests are
/// half a second apart at the least.
pub const RECUR_AFTER_NS: u64 = 400_000_000;

/// A read-only open of a file within this long of the last one the kernel
/// sent for the same process is counted in the kernel (the reopens map,
/// files.h), not sent: the next sent open carries the count, and the
/// daemon's sweep reads the counts in between, each with its last time.
/// At most one open per second of a file per process costs the traced call
/// a path read and an event; the repeated-open rule sees every open.
pub const REOPEN_COUNT_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// The sweep deletes a reopens entry whose opens it has all seen once the
/// file has not been opened for this long (the next open is sent anyway,
/// after [`REOPEN_COUNT_WINDOW`]): the map holds the files opened lately.
pub const REOPEN_IDLE_NS: u64 = 10_000_000_000;

/// Paths ignored by default: pseudo-files, what the dynamic loader and
/// the Python interpreter open (or probe for) on every start, and nscd's
/// socket (glibc tries it again every 100 user, group or host lookups of a
/// process on a host without nscd).
pub const DEFAULT_IGNORE_PATHS: &[&str] = &[
    "/var/run/nscd/socket",
    "/run/nscd/socket",
    "/proc/*",
    "/sys/*",
    "/dev/*",
    "/etc/ld.so.cache",
    "*.so",
    "*.so.*",
    "/usr/lib/locale/*",
    "*/pybuilddir.txt",
    "*/pyvenv.cfg",
    "*._pth",
];

impl Settings {
    pub fn is_ignored(&self, path: &str) -> bool {
        self.ignore_paths.iter().any(|p| p.matches(path))
    }
}

pub fn default_ignore_paths() -> Vec<glob::Pattern> {
    DEFAULT_IGNORE_PATHS.iter().map(|p| glob::Pattern::new(p).expect("valid default pattern")).collect()
}

/// What the detectors counted at one moment, for /metrics.
pub struct DetectorMetrics {
    pub evictions: Evictions,
    /// Each detector's counts, in [`DETECTORS`] order.
    pub counts: Vec<Box<dyn DetectorCounts>>,
}

/// Where the presenters (GET /findings, the metrics exporter) read the
/// findings from: the engine as the daemon runs it (`run::findings`), fed
/// with the kernel's events and sweeps.
pub trait Source: Send + Sync {
    /// Current findings (their workloads named) and the detectors' counts.
    fn current(&self) -> (Vec<Finding>, DetectorMetrics);
}

/// Converts event times (CLOCK_MONOTONIC ns) to wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// realtime - monotonic, in ns, when the clock was made.
    offset_ns: i128,
}

impl Clock {
    pub fn new() -> Self {
        let mono = monotonic_ns() as i128;
        let real = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        Clock { offset_ns: real - mono }
    }

    pub fn wall(&self, mono_ns: u64) -> SystemTime {
        let ns = (mono_ns as i128 + self.offset_ns).max(0) as u128;
        SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }

    pub fn rfc3339(&self, mono_ns: u64) -> String {
        humantime::format_rfc3339_millis(self.wall(mono_ns)).to_string()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// The detectors, the descriptor table, and the process incarnations.
pub struct Engine {
    files: FileTable,
    detectors: Vec<Box<dyn Detector>>,
    incarnations: HashMap<u32, u64>,
    /// incarnation -> cgroup v2 id at its latest event.
    cgroups: HashMap<u64, u64>,
    next_incarnation: u64,
    evictions: Evictions,
    clock: Clock,
}

/// The kernel's open-file entries (tgid, fd and the entry) as the files
/// the descriptor table knows.
fn live_files<'f>(files: &'f FileTable, live: &[(u32, u32, OpenFile)]) -> Vec<LiveFile<'f>> {
    live.iter()
        .filter_map(|(tgid, fd, f)| {
            let file = files.resolve(*tgid, *fd, f.opened_ns, f.dev, f.ino)?;
            Some(LiveFile { file, totals: FileTotals::from(f) })
        })
        .collect()
}

/// Processes whose incarnation is remembered (live ones, in practice).
const MAX_INCARNATIONS: usize = 65536;

/// The incarnation of process `tgid`, a new one if it has none.
fn incarnation_of(incarnations: &mut HashMap<u32, u64>, next: &mut u64, tgid: u32) -> u64 {
    if let Some(&i) = incarnations.get(&tgid) {
        return i;
    }
    if incarnations.len() >= MAX_INCARNATIONS {
        incarnations.clear();
    }
    let i = *next;
    *next += 1;
    incarnations.insert(tgid, i);
    i
}

impl Engine {
    /// An engine whose detectors share nothing with the daemon (no stack
    /// captures).
    pub fn new(settings: &Settings) -> Self {
        Self::sharing(settings, &Shared::default())
    }

    pub fn sharing(settings: &Settings, shared: &Shared) -> Self {
        Engine {
            files: FileTable::default(),
            detectors: DETECTORS.iter().map(|d| (d.new)(settings, shared)).collect(),
            incarnations: HashMap::new(),
            cgroups: HashMap::new(),
            next_incarnation: 1,
            evictions: Evictions::default(),
            clock: Clock::new(),
        }
    }

    fn incarnation(&mut self, tgid: u32) -> u64 {
        incarnation_of(&mut self.incarnations, &mut self.next_incarnation, tgid)
    }

    pub fn observe(&mut self, event: &Event) {
        let tgid = event.tgid();
        let incarnation = self.incarnation(tgid);
        let cgroup = event.header().cgroup;
        if cgroup != 0 {
            if self.cgroups.len() >= MAX_INCARNATIONS && !self.cgroups.contains_key(&incarnation) {
                let live: std::collections::HashSet<u64> = self.incarnations.values().copied().collect();
                self.cgroups.retain(|i, _| live.contains(i));
            }
            self.cgroups.insert(incarnation, cgroup);
        }
        let seen = self.files.observe(event, incarnation);
        let input = Input {
            event,
            incarnation,
            cgroup,
            closed: seen.closed.as_ref(),
            opens: seen.opens,
            files: &self.files,
        };
        for d in &mut self.detectors {
            d.observe(&input, &mut self.evictions);
        }
        if let Event::Process(p) = event {
            if p.kind != crate::events::ProcessKind::Fork {
                for d in &mut self.detectors {
                    d.exited(incarnation);
                }
                // The pid may be reused: the next process with it is new.
                // A program exec'd is a new start too: what a wrapper (a
                // pyenv shim, a shell) failed at before the exec is not the
                // program's.
                self.incarnations.remove(&tgid);
            }
        }
    }

    /// The sweep read the kernel's reopens entry `id` (see
    /// [`files::FileTable::reopened`]): its opens not counted yet reach the
    /// detectors.
    pub fn reopened(&mut self, id: files::ReopenId, total: u64, last_ns: u64) {
        let Some((file, n)) = self.files.reopened(id, total) else { return };
        let cgroup = self.cgroups.get(&file.incarnation).copied().unwrap_or(0);
        for d in &mut self.detectors {
            d.reopened(&file, n, last_ns, cgroup, &mut self.evictions);
        }
    }

    /// The sweep read the GPU waits' totals at `now_ns` (before its
    /// [`Engine::thread_times`] of the same `now_ns`).
    pub fn gpu_waits(&mut self, now_ns: u64, waits: &[crate::gpu::waits::GpuWaitSample]) {
        for d in &mut self.detectors {
            d.gpu_waits(now_ns, waits);
        }
    }

    /// The sweep read the scheduler programs' totals at `now_ns`.
    pub fn thread_times(
        &mut self,
        now_ns: u64,
        samples: &[crate::threads::ThreadSample],
        facts: &mut dyn cpu_starved::ThreadFacts,
    ) {
        let Engine { detectors, incarnations, next_incarnation, .. } = self;
        let mut incarnation = |tgid: u32| incarnation_of(incarnations, next_incarnation, tgid);
        for d in detectors.iter_mut() {
            d.thread_times(now_ns, samples, facts, &mut incarnation);
        }
    }

    /// Whether the table knows kernel reopens entries of process `tgid`.
    pub fn has_reopened(&self, tgid: u32) -> bool {
        self.files.has_reopened(tgid)
    }

    /// Whether the kernel's reopens entry `id` may be deleted (every open
    /// of it counted); see [`files::FileTable::settle_reopened`].
    pub fn settle_reopened(&mut self, id: files::ReopenId, total: u64, now_ns: u64) -> bool {
        self.files.settle_reopened(id, total, now_ns)
    }

    /// Forgets the kernel's reopens entries deleted before `before_ns`.
    pub fn expire_reopened(&mut self, before_ns: u64) {
        self.files.expire_reopened(before_ns);
    }

    /// Drops what has aged out of every detector's windows at `now_ns` and
    /// bounds their findings; `live` as in [`Engine::read`]. The daemon
    /// calls it once a second, never from a read.
    pub fn prune(&mut self, now_ns: u64, live: &[(u32, u32, OpenFile)]) {
        let live_files = live_files(&self.files, live);
        for d in &mut self.detectors {
            d.prune(now_ns, &live_files, &mut self.evictions);
        }
    }

    /// Current findings, newest last-seen first.
    pub fn findings(&self, now_ns: u64, live: &[(u32, u32, OpenFile)]) -> Vec<Finding> {
        self.read(now_ns, live).0
    }

    /// Current findings, newest last-seen first, and the detectors' counts;
    /// changes nothing. `live` are the kernel's open-file entries (tgid, fd
    /// and the entry).
    pub fn read(&self, now_ns: u64, live: &[(u32, u32, OpenFile)]) -> (Vec<Finding>, DetectorMetrics) {
        let live_files = live_files(&self.files, live);
        let mut records = Vec::new();
        let mut counts = Vec::with_capacity(self.detectors.len());
        for d in &self.detectors {
            let first = records.len();
            d.findings(now_ns, &live_files, &mut records);
            for r in records[first..].iter_mut().filter(|r| r.cgroup == 0) {
                r.cgroup = self.cgroups.get(&r.incarnation).copied().unwrap_or(0);
            }
            counts.push(d.counts(&records[first..]));
        }
        let metrics = DetectorMetrics { evictions: self.evictions.clone(), counts };
        let incarnations = &self.incarnations;
        let mut merged = merge::merge(records, |r| incarnations.get(&r.pid) == Some(&r.incarnation));
        merged.sort_by_key(|m| std::cmp::Reverse(m.record.last_ns));
        let findings = merged
            .into_iter()
            .map(|m| Finding {
                first_seen: self.clock.rfc3339(m.record.first_ns),
                last_seen: self.clock.rfc3339(m.record.last_ns),
                detail: m.record.detail,
                pid: m.record.pid,
                comm: m.record.comm,
                processes: m.processes,
                pids: m.pids,
                workload: WorkloadNames::default(),
                cgroup: m.record.cgroup,
            })
            .collect();
        (findings, metrics)
    }

    /// What the detectors have counted so far (of the findings' own
    /// counts, none: they come with [`Engine::read`]).
    #[cfg(test)]
    pub fn metrics(&self) -> DetectorMetrics {
        DetectorMetrics {
            evictions: self.evictions.clone(),
            counts: self.detectors.iter().map(|d| d.counts(&[])).collect(),
        }
    }

    /// New thresholds and windows for every detector, keeping what they found.
    pub fn reconfigure(&mut self, settings: &Settings) {
        for d in &mut self.detectors {
            d.reconfigure(settings);
        }
    }

    pub fn files(&self) -> &FileTable {
        &self.files
    }

    /// The kernel holds nothing more about `tgid`'s descriptors.
    pub fn forget_files(&mut self, tgid: u32) {
        self.files.forget(tgid);
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Synthetic events for the detectors' unit tests.
    use sonic_probe_common::{
        comm_bytes, syscalls, EventHeader, FileCloseEvent, ProcessEvent, SharedStruct, SyscallEvent,
        EMIT_PATH, EVENT_FILE_CLOSE, EVENT_PROCESS_EXIT, EVENT_SYSCALL, EVENT_SYSCALL_PATH, FILE_CLASS_OTHER,
    };

    use crate::events::{Call, Event, FileClosed, ProcessChange, ProcessKind};

    /// What the detector whose counts are of type `C` has counted so far.
    pub fn counts<C: super::DetectorCounts + Clone>(e: &super::Engine) -> C {
        e.metrics()
            .counts
            .into_iter()
            .find_map(|c| (c as Box<dyn std::any::Any>).downcast::<C>().ok())
            .map(|c| *c)
            .expect("a registered detector counts with this type")
    }

    pub const SEC: u64 = 1_000_000_000;
    pub const S_IFREG: u16 = 0o100644;

    pub fn call(
        syscall: u16,
        tgid: u32,
        tid: u32,
        start_ns: u64,
        duration_ns: u64,
        ret: i64,
        args: [u64; 6],
    ) -> Call {
        let mut raw = SyscallEvent::zeroed();
        raw.header = EventHeader { kind: EVENT_SYSCALL, tgid, tid, cpu: 0, time_ns: start_ns, cgroup: 0 };
        raw.syscall = syscall;
        raw.duration_ns = duration_ns;
        raw.ret = ret;
        raw.args = args;
        raw.process_comm = comm_bytes("app");
        raw.thread_comm = comm_bytes(if tid == tgid { "app" } else { "worker" });
        Call { raw, path: None }
    }

    pub fn openat(tgid: u32, t: u64, path: &str, ret: i64, class: u16) -> Event {
        let mut c = call(syscalls::OPENAT, tgid, tgid, t, 1000, ret, [0; 6]);
        c.raw.header.kind = EVENT_SYSCALL_PATH;
        c.raw.reasons = EMIT_PATH;
        c.raw.path_len = path.len() as u16;
        c.raw.file_class = if ret >= 0 { class } else { FILE_CLASS_OTHER };
        c.raw.file_mode = if ret >= 0 { S_IFREG } else { 0 };
        c.path = Some(path.as_bytes().to_vec());
        Event::Call(c)
    }

    /// A read-only openat the kernel sent with its file's reopens totals:
    /// the file (dev, ino) of reopens entry `created_ns`, opened `total`
    /// times so far.
    #[allow(clippy::too_many_arguments)]
    pub fn openat_counted(
        tgid: u32,
        t: u64,
        path: &str,
        fd: i64,
        class: u16,
        (dev, ino): (u32, u64),
        created_ns: u64,
        total: u64,
    ) -> Event {
        let Event::Call(mut c) = openat(tgid, t, path, fd, class) else { unreachable!() };
        c.raw.file_dev = dev;
        c.raw.file_ino = ino;
        c.raw.aux_kind = sonic_probe_common::AUX_OPEN_TOTAL;
        c.raw.aux = [total, created_ns];
        Event::Call(c)
    }

    /// A close (as [`close`]) of a descriptor of file (dev, ino).
    #[allow(clippy::too_many_arguments)]
    pub fn close_of(tgid: u32, t: u64, fd: u32, opened_ns: u64, (dev, ino): (u32, u64), bytes: u64) -> Event {
        let Event::FileClosed(mut f) = close(tgid, t, fd, opened_ns, 1, bytes, 0, 0) else { unreachable!() };
        f.raw.file.dev = dev;
        f.raw.file.ino = ino;
        Event::FileClosed(f)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn close(
        tgid: u32,
        t: u64,
        fd: u32,
        opened_ns: u64,
        reads: u64,
        bytes: u64,
        small: u64,
        small_requested: u64,
    ) -> Event {
        let mut raw = FileCloseEvent::zeroed();
        raw.header = EventHeader { kind: EVENT_FILE_CLOSE, tgid, tid: tgid, cpu: 0, time_ns: t, cgroup: 0 };
        raw.fd = fd;
        raw.file.opened_ns = opened_ns;
        raw.file.reads = reads;
        raw.file.read_bytes = bytes;
        raw.file.small_reads = small;
        raw.file.small_read_requested = small_requested;
        raw.file.small_read_bytes = small_requested;
        raw.file.mode = S_IFREG;
        Event::FileClosed(FileClosed { raw })
    }

    /// The kernel's open-file entries of [`super::Engine::findings`] from
    /// (tgid, fd, opened_ns, totals) of regular files.
    pub fn live(
        entries: &[(u32, u32, u64, crate::findings::FileTotals)],
    ) -> Vec<(u32, u32, sonic_probe_common::OpenFile)> {
        entries
            .iter()
            .map(|&(tgid, fd, opened_ns, t)| {
                let mut f = sonic_probe_common::OpenFile::zeroed();
                f.opened_ns = opened_ns;
                f.mode = S_IFREG;
                f.reads = t.reads;
                f.read_bytes = t.read_bytes;
                f.small_reads = t.small_reads;
                f.small_read_requested = t.small_read_requested;
                f.small_read_bytes = t.small_read_bytes;
                (tgid, fd, f)
            })
            .collect()
    }

    pub fn exit(tgid: u32, t: u64) -> Event {
        let mut raw = ProcessEvent::zeroed();
        raw.header = EventHeader { kind: EVENT_PROCESS_EXIT, tgid, tid: tgid, cpu: 0, time_ns: t, cgroup: 0 };
        raw.comm = comm_bytes("app");
        Event::Process(ProcessChange { kind: ProcessKind::Exit, raw })
    }
}

#[cfg(test)]
mod tests {
    use super::{testing::*, *};

    #[test]
    fn detectors_are_registered_once_and_own_their_families() {
        let mut kinds: Vec<&str> = DETECTORS.iter().map(|d| d.kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), DETECTORS.len(), "a kind registered twice");
        let e = Engine::new(&Settings::default());
        assert_eq!(e.detectors.len(), DETECTORS.len());
        // What each exports at a scrape is exactly what it declares.
        let mut comms = crate::stats::labels::CommLabels::new(10);
        let mut threads = crate::stats::labels::CommLabels::new(10);
        let mut workloads = crate::workloads::Workloads::disabled();
        let mut fold = Fold { comms: &mut comms, workloads: &mut workloads, threads: &mut threads };
        for (d, counts) in DETECTORS.iter().zip(e.metrics().counts) {
            let mut out = Vec::new();
            counts.collect(&mut fold, &mut out);
            let exported: Vec<&str> = out.iter().map(|f| f.name()).collect();
            let declared: Vec<&str> = d.metrics.iter().map(|m| m.name).collect();
            assert_eq!(exported, declared, "{}", d.kind);
        }
    }

    #[test]
    fn every_detector_has_its_kind_of_detail() {
        let registered: Vec<&str> = DETECTORS.iter().map(|d| d.kind).collect();
        assert_eq!(registered, DETAIL_KINDS);
        // Each kind's JSON tag is its name: serde knows the tag and asks for
        // the fields.
        for kind in DETAIL_KINDS {
            let e = serde_json::from_value::<Detail>(serde_json::json!({ "kind": kind })).unwrap_err();
            assert!(e.to_string().contains("missing field"), "{kind}: {e}");
        }
    }

    #[test]
    fn every_kind_reads_and_writes_the_same_json() {
        #[derive(Serialize, Deserialize)]
        struct Flat {
            #[serde(flatten)]
            detail: Detail,
            pid: u32,
        }
        for json in [
            r#"{"kind":"futex_stall","tid":1,"thread":"t","wait_seconds":1.5,"op":"o","uaddr":"0x1","waker_tid":null,"waker_thread":null,"count":2,"pid":7}"#,
            r#"{"kind":"futex_stall","tid":1,"thread":"t","wait_seconds":1.5,"op":"o","uaddr":"0x1","waker_tid":3,"waker_thread":"w","count":2,"stack":[{"function":"f","file":"a.py","line":3,"kind":"python"}],"waker_stack":[{"function":"f","file":"a.py","line":3,"kind":"python"}],"stack_note":"n","pid":7}"#,
            r#"{"kind":"repeated_open","path":"/p","file_class":"model","count":3,"bytes_read":4,"pid":7}"#,
            r#"{"kind":"small_reads","path":"/p","file_class":"audio","count":3,"bytes":4,"typical_size":5,"pid":7}"#,
            r#"{"kind":"small_reads","path":"/r-*/a","file_class":"audio","count":3,"bytes":4,"typical_size":5,"files":[{"path":"/r-1/a","count":1,"bytes":1,"typical_size":5},{"path":"/r-2/a","count":2,"bytes":3,"typical_size":5}],"pid":7}"#,
            r#"{"kind":"mmap_churn","size_bytes":1,"count":2,"path":null,"pid":7}"#,
            r#"{"kind":"mmap_churn","size_bytes":1,"count":2,"path":"/x","pid":7}"#,
            r#"{"kind":"syscall_errors","syscall":"openat","errno":"ENOENT","count":1,"paths":[],"length":null,"pid":7}"#,
            r#"{"kind":"syscall_errors","syscall":"mmap","errno":"ENOMEM","count":1,"paths":["/a"],"length":9,"pid":7}"#,
        ] {
            let f: Flat = serde_json::from_str(json).unwrap();
            assert_eq!(serde_json::to_string(&f).unwrap(), json);
        }
    }

    #[test]
    fn json_shape_is_flat_with_kind() {
        let f = Finding {
            workload: Default::default(),
            cgroup: 0,
            detail: Detail::RepeatedOpen(repeated_open::Detail {
                path: "/models/x.pth".into(),
                file_class: "model".into(),
                count: 5,
                bytes_read: 100,
            }),
            pid: 42,
            comm: "python3".into(),
            processes: 1,
            pids: vec![42],
            first_seen: "2026-01-01T00:00:00.000Z".into(),
            last_seen: "2026-01-01T00:00:01.000Z".into(),
        };
        let v: serde_json::Value = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "repeated_open");
        assert_eq!(v["pid"], 42);
        assert_eq!(v["path"], "/models/x.pth");
        assert_eq!(v["count"], 5);
        let back: Finding = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn an_exec_is_a_new_start() {
        use crate::events::{ProcessChange, ProcessKind};
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(7, SEC, "/usr/share/locale/C/LC_MESSAGES/bash.mo", -2, 0));
        let shim = e.incarnation(7);
        let Event::Process(ProcessChange { raw, .. }) = exit(7, 2 * SEC) else { unreachable!() };
        e.observe(&Event::Process(ProcessChange { kind: ProcessKind::Exec, raw }));
        assert_ne!(e.incarnation(7), shim);
        // The wrapper's one failure does not count toward the program's.
        e.observe(&openat(7, 3 * SEC, "/usr/share/locale/C/LC_MESSAGES/bash.mo", -2, 0));
        assert!(e.findings(4 * SEC, &[]).is_empty());
    }

    #[test]
    fn reading_changes_nothing_the_tick_prunes() {
        let mut e = Engine::new(&Settings {
            window: Duration::from_secs(60),
            max_findings: 1,
            repeated_open: repeated_open::Settings { count: 3, window: Duration::from_secs(60) },
            ..Settings::default()
        });
        for (pid, path, start) in [(9, "/a.pth", 0), (10, "/b.pth", 10 * SEC)] {
            for i in 1..=5 {
                let t = start + i * SEC;
                e.observe(&openat(pid, t, path, 3, 2));
                e.observe(&close(pid, t + 1000, 3, t, 1, 100, 0, 0));
            }
        }
        let paths = |f: Vec<Finding>| -> Vec<String> {
            f.into_iter()
                .filter_map(|f| match f.detail {
                    Detail::RepeatedOpen(d) => Some(d.path),
                    _ => None,
                })
                .collect()
        };
        // Reads, late or not, change nothing: both findings stay, past the
        // bound of one, until the daemon's tick prunes.
        assert_eq!(paths(e.findings(20 * SEC, &[])), ["/b.pth", "/a.pth"]);
        assert!(e.findings(200 * SEC, &[]).is_empty(), "past the window");
        assert_eq!(paths(e.findings(20 * SEC, &[])), ["/b.pth", "/a.pth"]);
        assert_eq!(e.read(20 * SEC, &[]).1.evictions.get("repeated_open", "finding"), 0);
        e.prune(20 * SEC, &[]);
        assert_eq!(paths(e.findings(20 * SEC, &[])), ["/b.pth"], "the most recent kept");
        assert_eq!(e.read(20 * SEC, &[]).1.evictions.get("repeated_open", "finding"), 1);
        e.prune(200 * SEC, &[]);
        assert!(e.findings(20 * SEC, &[]).is_empty(), "pruned past the window");
    }

    #[test]
    fn pid_reuse_starts_a_new_incarnation() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(7, SEC, "/m.pth", 3, 2));
        let first = e.incarnation(7);
        e.observe(&exit(7, 2 * SEC));
        e.observe(&openat(7, 3 * SEC, "/m.pth", 3, 2));
        assert_ne!(e.incarnation(7), first);
    }

    #[test]
    fn clock_maps_monotonic_to_wall_time() {
        let c = Clock::new();
        let now = monotonic_ns();
        let wall = c.wall(now);
        // The absolute difference: a wall time in the future is as wrong as
        // one in the past (duration_since fails for it, with the distance).
        let diff = match SystemTime::now().duration_since(wall) {
            Ok(d) => d,
            Err(e) => e.duration(),
        };
        assert!(diff < Duration::from_secs(1), "wall time off by {diff:?}");
        assert!(c.rfc3339(now).ends_with('Z'));
    }
}
