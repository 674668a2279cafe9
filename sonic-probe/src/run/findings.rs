//! The findings engine as the daemon runs it: fed by the event consumer,
//! asked by GET /findings and by the metrics exporter (as their
//! [`findings::Source`]), and kept in step with the kernel's descriptor
//! table by a periodic sweep. The engine is a library that only sees
//! events; what it needs of the kernel's maps and of /proc reaches it from
//! here, as events: a descriptor the sweep finds stale is a file-close
//! event, the opens the kernel counted without sending them are its
//! reopens counts.
//!
//! Lock order, everywhere: open files, then engine; reopens, then engine;
//! engine, then workloads.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sonic_probe_common::{
    EventHeader, FileCloseEvent, FileKey, OpenFile, ReopenKey, Reopens, EVENT_FILE_CLOSE,
};

use crate::{
    events::{Event, FileClosed, ProcessKind},
    findings::{self, DetectorMetrics, Engine, Finding, Settings, Shared, REOPEN_IDLE_NS},
    gpu::waits::GpuWaitStore,
    metrics::probe::SweptMaps,
    os::{monotonic_ns, procfs},
    probe::{OpenFiles, ReopenCounts},
    run::thread_facts::HostFacts,
    threads::ThreadTimeStore,
    workloads::Workloads,
};

#[derive(Clone)]
pub struct FindingsService {
    engine: Arc<Mutex<Engine>>,
    open_files: Arc<Mutex<OpenFiles>>,
    /// The kernel's count of repeated opens (None: every open is sent).
    reopens: Option<Arc<Mutex<ReopenCounts>>>,
    /// Processes whose kernel descriptor entries are stale: tgid -> the
    /// exec time (entries opened before it are stale) or None (it exited).
    stale: Arc<Mutex<HashMap<u32, Option<u64>>>>,
    /// Names the findings' cgroups (lock order: engine, then workloads).
    workloads: Arc<Mutex<Workloads>>,
    /// cpu_starved's processes found by earlier /proc walks.
    starved_pids: Arc<Mutex<HashMap<(u64, String), u32>>>,
}

fn is_regular(mode: u16) -> bool {
    u32::from(mode) & libc::S_IFMT == libc::S_IFREG
}

/// The kernel's open-file entries of regular files open now, as the
/// engine takes them: (tgid, fd, entry).
fn live_files(entries: Vec<(FileKey, OpenFile)>) -> Vec<(u32, u32, OpenFile)> {
    entries
        .into_iter()
        .filter(|(_, f)| f.opened_ns != 0 && is_regular(f.mode))
        .map(|(k, f)| (k.tgid, k.fd, f))
        .collect()
}

impl FindingsService {
    pub fn new(
        settings: &Settings,
        shared: &Shared,
        open_files: OpenFiles,
        reopens: Option<ReopenCounts>,
        workloads: Arc<Mutex<Workloads>>,
    ) -> Self {
        FindingsService {
            engine: Arc::new(Mutex::new(Engine::sharing(settings, shared))),
            open_files: Arc::new(Mutex::new(open_files)),
            reopens: reopens.map(|r| Arc::new(Mutex::new(r))),
            stale: Arc::new(Mutex::new(HashMap::new())),
            workloads,
            starved_pids: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    pub fn observe(&self, event: &Event) {
        if let Event::Process(p) = event {
            let when = match p.kind {
                ProcessKind::Exec => Some(p.raw.header.time_ns),
                ProcessKind::Exit => None,
                ProcessKind::Fork => return self.engine.lock().expect("engine lock").observe(event),
            };
            // The opens the kernel counted for the program that ends here
            // reach the detectors before its end does (they end its runs).
            if self.engine.lock().expect("engine lock").has_reopened(p.tgid()) {
                self.count_reopens();
            }
            self.stale.lock().expect("stale lock").insert(p.tgid(), when);
        }
        self.engine.lock().expect("engine lock").observe(event);
    }

    /// Current findings and the detectors' counters.
    fn current_findings(&self) -> (Vec<Finding>, DetectorMetrics) {
        let live = live_files(self.open_files.lock().expect("open files lock").entries());
        let (mut findings, metrics) = self.engine.lock().expect("engine lock").read(monotonic_ns(), &live);
        let mut workloads = self.workloads.lock().expect("workloads lock");
        workloads.next_generation();
        for f in &mut findings {
            f.workload = workloads.names(f.cgroup);
        }
        (findings, metrics)
    }

    /// The daemon's one-second tick. Deletes the kernel's entries of
    /// processes that exec'd or are gone; what was read through their
    /// regular files reaches the detectors as if they had been closed.
    /// First the opens the kernel counted without sending them reach the
    /// detectors (while the processes that made them are still known).
    /// Then the detectors drop what has aged out of their windows, with the
    /// files still open (the entries the sweep kept): reading the findings
    /// never does.
    pub fn sweep(&self) {
        let stale = std::mem::take(&mut *self.stale.lock().expect("stale lock"));
        self.sweep_reopens(&stale);
        let mut alive: HashMap<u32, bool> = HashMap::new();
        let mut files = self.open_files.lock().expect("open files lock");
        let (gone, kept) = files.sweep(
            |k, v| match stale.get(&k.tgid) {
                Some(Some(exec_ns)) => v.opened_ns < *exec_ns,
                Some(None) => true,
                None => !*alive.entry(k.tgid).or_insert_with(|| procfs::is_alive(k.tgid)),
            },
            !stale.is_empty(),
        );
        let now = monotonic_ns();
        let mut engine = self.engine.lock().expect("engine lock");
        for (k, f) in &gone {
            if f.opened_ns == 0 || !is_regular(f.mode) {
                continue;
            }
            let raw = FileCloseEvent {
                header: EventHeader {
                    kind: EVENT_FILE_CLOSE,
                    tgid: k.tgid,
                    tid: k.tgid,
                    cpu: 0,
                    time_ns: now,
                    cgroup: 0,
                },
                fd: k.fd,
                _pad: 0,
                file: *f,
            };
            engine.observe(&Event::FileClosed(FileClosed { raw }));
        }
        let dead = alive.into_iter().filter(|(_, a)| !a).map(|(t, _)| t);
        for tgid in stale.keys().copied().chain(dead) {
            engine.forget_files(tgid);
        }
        engine.prune(now, &live_files(kept));
    }

    /// The daemon's one-second tick, with the scheduler programs on: their
    /// totals reach the detectors (cpu_starved, gpu_wait), before the sweep
    /// prunes; with the GPU probes on, the GPU waits' totals first.
    pub fn sweep_thread_times(&self, store: &ThreadTimeStore, gpu: Option<&GpuWaitStore>) {
        let waits = gpu.map(|g| g.samples());
        let samples = store.samples();
        let now = monotonic_ns();
        if let Some(w) = &waits {
            self.engine.lock().expect("engine lock").gpu_waits(now, w);
        }
        let mut known = self.starved_pids.lock().expect("starved pids lock");
        let mut facts = HostFacts { workloads: &self.workloads, known: &mut known, store };
        self.engine.lock().expect("engine lock").thread_times(now, &samples, &mut facts);
    }

    /// The opens the kernel's reopens entries counted that the detectors
    /// have not seen reach them.
    fn count_reopens(&self) {
        self.read_reopens(|_, _, _| false);
    }

    /// Counts the kernel's reopens entries' opens (as count_reopens), then
    /// deletes those of files not opened for REOPEN_IDLE_NS and those of
    /// processes in `stale` (that exited, or exec'd after the entry's last
    /// open), all their opens counted.
    fn sweep_reopens(&self, stale: &HashMap<u32, Option<u64>>) {
        let now = self.read_reopens(|k, v, now| match stale.get(&k.tgid) {
            Some(None) => true,
            Some(Some(exec_ns)) => v.last_ns < *exec_ns,
            None => now.saturating_sub(v.last_ns.max(v.sent_ns)) >= REOPEN_IDLE_NS,
        });
        self.engine.lock().expect("engine lock").expire_reopened(now.saturating_sub(REOPEN_IDLE_NS));
    }

    /// Reads every reopens entry: its opens not counted yet reach the
    /// detectors, and it is deleted if `done(key, entry, now)` and all
    /// its opens are counted. Returns `now`.
    fn read_reopens(&self, done: impl Fn(&ReopenKey, &Reopens, u64) -> bool) -> u64 {
        let now = monotonic_ns();
        let Some(reopens) = &self.reopens else { return now };
        let mut reopens = reopens.lock().expect("reopens lock");
        let entries = reopens.entries();
        let mut engine = self.engine.lock().expect("engine lock");
        for (k, v) in &entries {
            let id = (k.tgid, k.dev, k.ino, v.created_ns);
            engine.reopened(id, v.opens, v.last_ns);
            if done(k, v, now) && engine.settle_reopened(id, v.opens, now) {
                reopens.remove(k);
            }
        }
        now
    }

    pub fn reconfigure(&self, settings: &Settings) {
        self.engine.lock().expect("engine lock").reconfigure(settings);
    }
}

impl SweptMaps for FindingsService {
    /// Entries of the kernel's reopens map (0 if it is not used).
    fn reopen_entries(&self) -> usize {
        self.reopens.as_ref().map_or(0, |r| r.lock().expect("reopens lock").len())
    }

    fn open_file_entries(&self) -> usize {
        self.open_files.lock().expect("open files lock").len()
    }
}

impl findings::Source for FindingsService {
    fn current(&self) -> (Vec<Finding>, DetectorMetrics) {
        self.current_findings()
    }
}
