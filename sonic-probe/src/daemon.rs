//! `sonic-probe run`: the daemon's life from start to shutdown.
//!
//! Order matters and is the point of this module: validate all input, bind
//! the HTTP port (a port in use fails before anything touches the kernel),
//! load and verify the programs, write targets and settings, attach the
//! lifecycle programs, scan /proc for --comm matches, attach the syscall
//! programs, then report ready. SIGINT/SIGTERM drop everything, which
//! detaches every program and frees every map.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context};
use prometheus::{process_collector::ProcessCollector, Registry};
use sonic_probe_common::{
    syscalls::{mask_of, FUTEX, SYSCALLS},
    ProbeConfig, EMIT_ERROR, EMIT_LARGE_MAP, EMIT_SLOW,
};
use sonic_probe_ebpf::ProgramGroup;
use tokio::{
    net::TcpListener,
    signal::unix::{signal, SignalKind},
    sync::mpsc,
};
use tracing::{debug, info};

use crate::{
    cli::RunArgs,
    config::RunConfig,
    error::Result,
    events::{self, reader::ReaderStats, Event, ProcessKind},
    findings::FindingsService,
    http::{self, HttpState},
    labels::CommLabels,
    metrics::{FindingsCollector, ProbeCollector},
    probe::Probe,
    stats::StatsStore,
};

/// Events waiting between the ring buffer reader and their consumer.
const EVENT_QUEUE: usize = 65_536;
/// How often exited processes are folded out of the kernel maps when
/// nobody scrapes (a scrape folds too).
const FOLD_INTERVAL: Duration = Duration::from_secs(5);

pub fn run(args: RunArgs) -> Result<()> {
    let config = RunConfig::from_args(&args)?;
    crate::privileges::check()?;
    raise_memlock_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sonic-probe")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

/// The settings the BPF programs read from their `config` map.
pub fn probe_config(config: &RunConfig) -> ProbeConfig {
    ProbeConfig {
        filter_flags: config.targets.filter_flags(),
        cgroup_levels: config.targets.cgroup_levels(),
        self_tgid: std::process::id(),
        trace_mask: 0,
        // Failed futex calls (EAGAIN, ETIMEDOUT, EINTR) are ordinary control
        // flow and frequent: counted, not sent one by one.
        error_event_mask: mask_of(SYSCALLS.iter().map(|s| s.index).filter(|&i| i != FUTEX)),
        path_events: 1,
        slow_call_ns: u64::try_from(config.kernel_slow_threshold().as_nanos()).unwrap_or(u64::MAX),
        large_size: config.large_map_bytes,
        small_size: config.small_read_bytes,
    }
}

async fn serve(config: RunConfig) -> Result<()> {
    let started = Instant::now();
    // Handle SIGINT/SIGTERM from the start: a signal that arrives while
    // attaching must still end in a clean detach, never a default kill.
    let shutdown = ShutdownSignals::new()?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().context("listening socket has no address")?;
    let registry = Registry::new();
    let http_state = Arc::new(HttpState::new(registry.clone()));
    let server = tokio::spawn(http::serve(listener, http_state.clone()));

    let mut probe = Probe::load(config.ringbuf_bytes)?;
    probe.set_config(&probe_config(&config))?;
    probe.set_file_classes(sonic_probe_common::DEFAULT_FILE_CLASSES)?;
    let mut targets = probe.take_targets()?;
    targets.apply(&config.targets)?;
    let aggregates = probe.take_aggregates()?;
    let open_files = probe.take_open_files()?;
    let ring = probe.take_events()?;
    if config.bpf_stats {
        probe.enable_run_time_stats()?;
    }

    probe.attach(ProgramGroup::Lifecycle)?;
    let comm_matches = targets.scan_comms(&config.targets.comms)?;
    probe.attach(ProgramGroup::Syscalls)?;

    let reader_stats = Arc::new(ReaderStats::default());
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let reader = tokio::spawn(events::reader::run(ring, tx, reader_stats.clone()));
    let pid_targets: Vec<u32> = config.targets.pids.iter().map(|p| p.tgid).collect();
    let findings = FindingsService::new(&config.findings, open_files);
    let consumer = tokio::spawn(consume(rx, pid_targets, findings.clone()));

    let attached = probe.attached().join(", ");
    let n_attached = probe.attached().len();
    let probe = Arc::new(Mutex::new(probe));
    let labels = Arc::new(Mutex::new(CommLabels::new(config.max_comms)));
    let store = Arc::new(Mutex::new(StatsStore::new(aggregates, labels.clone())));
    let targets = Arc::new(Mutex::new(targets));
    let collector = ProbeCollector::new(
        probe.clone(),
        store.clone(),
        targets.clone(),
        reader_stats.clone(),
        labels.clone(),
        findings.clone(),
        config.targets.is_whole_host(),
    );
    registry.register(Box::new(collector)).context("cannot register the metrics")?;
    registry
        .register(Box::new(FindingsCollector::new(findings.clone(), labels.clone(), config.max_comms)))
        .context("cannot register the findings metrics")?;
    http_state.set_findings(findings.clone());
    registry
        .register(Box::new(ProcessCollector::for_self()))
        .context("cannot register the process metrics")?;
    let folder = tokio::spawn(fold_periodically(store.clone()));
    let sweeper = tokio::spawn(sweep_periodically(findings.clone()));

    http_state.set_ready();
    let comm_note = if config.targets.comms.is_empty() {
        String::new()
    } else {
        format!(" ({comm_matches} running processes match --comm)")
    };
    info!(
        "ready in {} ms: attached {n_attached} BPF programs ({attached}); watching {}{comm_note}; \
         serving http://{addr}/metrics",
        started.elapsed().as_millis(),
        config.targets.describe(),
    );

    let why = shutdown.wait().await;
    info!("{why}: detaching and exiting");
    for task in [server, folder, sweeper, consumer] {
        task.abort();
    }
    reader.abort();
    drop(registry);
    drop(http_state);
    // The last references: dropping them detaches the programs and closes
    // the maps (nothing is pinned).
    drop(store);
    drop(targets);
    drop(probe);
    Ok(())
}

/// SIGINT and SIGTERM, handled from the moment this is made.
pub(crate) struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub(crate) fn new() -> Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn wait(mut self) -> &'static str {
        self.wait_ref().await
    }

    /// The next signal (cancel-safe: usable in a select loop).
    pub(crate) async fn wait_ref(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

async fn fold_periodically(store: Arc<Mutex<StatsStore>>) {
    let mut tick = tokio::time::interval(FOLD_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let store = store.clone();
        let _ = tokio::task::spawn_blocking(move || {
            store.lock().expect("stats store lock").snapshot();
        })
        .await;
    }
}

/// How often the kernel's descriptor table is swept of processes that
/// exec'd or exited.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

async fn sweep_periodically(findings: FindingsService) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let f = findings.clone();
        let _ = tokio::task::spawn_blocking(move || f.sweep()).await;
    }
}

/// Consumes decoded events: the findings engine sees each one, and the log
/// gets what a person would want to see there. The metrics don't depend on
/// it (the kernel counts).
async fn consume(mut rx: mpsc::Receiver<Event>, pid_targets: Vec<u32>, findings: FindingsService) {
    while let Some(ev) = rx.recv().await {
        findings.observe(&ev);
        match &ev {
            Event::Process(p) if p.kind == ProcessKind::Exit && pid_targets.contains(&p.tgid()) => {
                info!(
                    "target process {} ({}) exited with status {}; still watching the other targets",
                    p.tgid(),
                    p.name(),
                    p.raw.exit_code
                );
            }
            Event::Call(c) if c.has_reason(EMIT_SLOW | EMIT_ERROR | EMIT_LARGE_MAP) => {
                debug!(
                    pid = c.tgid(),
                    tid = c.tid(),
                    comm = %c.process_name(),
                    syscall = c.syscall().name,
                    ret = c.raw.ret,
                    duration_us = c.raw.duration_ns / 1000,
                    path = c.path_lossy().unwrap_or_default(),
                    "call"
                );
            }
            _ => {}
        }
    }
}

fn raise_memlock_limit() {
    // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
    use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};
    if let Err(e) = setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY) {
        debug!("cannot raise RLIMIT_MEMLOCK: {e}");
    }
}
