//! `sonic-probe run`: the daemon's life from start to shutdown.
//!
//! Order matters and is the point of this module: validate all input, bind
//! the HTTP port (a port in use fails before anything touches the kernel),
//! load and verify the programs, write targets and settings, attach the
//! lifecycle programs, scan /proc for --comm matches, attach the syscall
//! programs, then report ready. SIGINT/SIGTERM drop everything, which
//! detaches every program and frees every map.

pub mod capabilities;
mod check_config;
mod findings;
mod reload;
mod thread_facts;

pub use check_config::check_config;
use findings::FindingsService;
use reload::Reloader;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context};
use prometheus::{process_collector::ProcessCollector, Registry};
use sonic_probe_common::{
    syscalls::{mask_of, SYSCALLS},
    ProbeConfig, EMIT_ERROR, EMIT_LARGE_MAP, EMIT_SHORT, EMIT_SLOW,
};
use sonic_probe_ebpf::ProgramGroup;
use tokio::{
    net::TcpListener,
    signal::unix::{signal, SignalKind},
    sync::mpsc,
};
use tracing::{debug, info, warn};

use crate::{
    config::options::RunArgs,
    config::RunConfig,
    error::Result,
    events::{self, reader::ReaderStats, Event, ProcessKind},
    gpu::{
        helper::PerfHelper,
        libraries::{Candidate, GpuLibraries},
        waits::GpuWaitStore,
    },
    metrics::gpu::GpuSources,
    metrics::{findings::FindingsCollector, probe::ProbeCollector},
    os::{cgroup_cpu::CpuLimits, signals::ShutdownSignals},
    probe::{Probe, ProbeConfigBuilder},
    stacks::capture::{CaptureStore, Capturer},
    stats::labels::CommLabels,
    stats::StatsStore,
    threads::{ThreadAggregator, ThreadTimeStore},
    web::{self, HttpState},
    workloads::Workloads,
};

/// Events waiting between the ring buffer reader and their consumer.
const EVENT_QUEUE: usize = 65_536;

pub fn run(args: RunArgs, log_level: Option<String>) -> Result<()> {
    let config = RunConfig::load(&args, log_level.as_deref())?;
    crate::logging::init_logging(&config.log_level)?;
    crate::probe::privileges::check()?;
    crate::stacks::capture::keep_large_buffers_off_the_heap();
    // Forked while the process has one thread (before the runtime's).
    let gpu_helper = if config.gpu_waits {
        match PerfHelper::start() {
            Ok(h) => Some(h),
            Err(e) => {
                warn!("cannot start the GPU probe helper, GPU waits are off: {e}");
                None
            }
        }
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sonic-probe")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config, args, log_level, gpu_helper))
}

/// Tells systemd (Type=notify) where we are; a no-op without NOTIFY_SOCKET.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        debug!("sd_notify: {e}");
    }
}

fn status(text: &str) {
    notify(&[sd_notify::NotifyState::Status(text)]);
}

/// After attach nothing needs a capability any more on most kernels: map
/// reads and updates go through the file descriptors we hold, /proc is
/// readable. Dropping them all means a bug in the HTTP server or the event
/// decoder can't be turned into BPF access. Some kernels (Debian 11's 5.10
/// with kernel.unprivileged_bpf_disabled set) check CAP_BPF on every bpf()
/// call, even on our own maps: asked with the effective set cleared for a
/// moment, such a kernel refuses to read a map, and CAP_BPF alone is kept
/// (or SIGHUP reloads and scrapes would fail). With stack captures on,
/// CAP_SYS_PTRACE is kept too: reading a stalled process's memory
/// (process_vm_readv, /proc/PID/mem) needs it; and CAP_PERFMON, for the
/// perf event that samples a running lock holder.
fn drop_capabilities(probe: &Probe, stack_captures: bool) {
    use caps::{CapSet, Capability};
    let keep_bpf = match caps::read(None, CapSet::Permitted) {
        Ok(permitted) => {
            let _ = caps::clear(None, CapSet::Effective);
            let readable = probe.maps_readable();
            let _ = caps::set(None, CapSet::Effective, &permitted);
            !readable && permitted.contains(&Capability::CAP_BPF)
        }
        Err(_) => false,
    };
    // The bounding set and no_new_privs: in every thread, with the rest
    // (capabilities.rs).
    let keep_ptrace = stack_captures
        && caps::read(None, CapSet::Permitted).is_ok_and(|p| p.contains(&Capability::CAP_SYS_PTRACE));
    if stack_captures && !keep_ptrace {
        warn!(
            "--stack-captures on without CAP_SYS_PTRACE: the stacks of stalled processes can't be read \
             (sonic_probe_stack_captures_total{{result=\"unreadable\"}})"
        );
    }
    // A running lock holder is sampled with a perf event on its thread,
    // which kernels with perf_event_paranoid above 2 (Debian's, Ubuntu's
    // patches) allow only with CAP_PERFMON.
    let keep_perfmon = keep_ptrace
        && caps::read(None, CapSet::Permitted).is_ok_and(|p| p.contains(&Capability::CAP_PERFMON));
    let mut keep = 0u64;
    let mut why = Vec::new();
    if keep_bpf {
        keep |= 1u64 << Capability::CAP_BPF.index();
        why.push("CAP_BPF (this kernel checks it on every bpf() call, also on maps already open)");
    }
    if keep_ptrace {
        keep |= 1u64 << Capability::CAP_SYS_PTRACE.index();
        why.push("CAP_SYS_PTRACE (stack captures read stalled processes' memory)");
    }
    if keep_perfmon {
        keep |= 1u64 << Capability::CAP_PERFMON.index();
        why.push("CAP_PERFMON (stack captures sample a running lock holder)");
    }
    // In every thread: the runtime's workers exist already.
    match crate::run::capabilities::drop_in_every_thread(keep) {
        Ok(n) => debug!("capabilities dropped in all {n} threads"),
        Err(e) => {
            warn!("cannot drop the capabilities: {e}");
            return;
        }
    }
    if why.is_empty() {
        info!("dropped all capabilities");
    } else {
        info!("dropped every capability but {}", why.join(", "));
    }
}

/// The settings the BPF programs read from their `config` map.
pub fn probe_config(config: &RunConfig) -> ProbeConfig {
    ProbeConfigBuilder::new()
        .targets(config.targets.filter_flags(), config.targets.cgroup_levels())
        .syscalls(config.syscalls)
        // Failed calls of the rows that say so (not futex: EAGAIN, ETIMEDOUT
        // and EINTR are its control flow, counted, not sent one by one).
        .failed_calls_of(mask_of(SYSCALLS.iter().filter(|s| s.error_events).map(|s| s.index)))
        // write, pwrite64, writev: their failures (a full disk) even when
        // they are not traced.
        .failures_always_of(sonic_probe_common::syscalls::errors_always_mask())
        .with_paths()
        .count_reopens(crate::findings::REOPEN_COUNT_WINDOW)
        .slow_calls(config.kernel_slow_threshold())
        .large_calls(config.large_map_bytes)
        .small_calls(config.small_read_bytes)
        .wakeup_at(config.ringbuf_bytes, 4)
        .workload_cgroups(config.workloads.enabled())
        .inflight_waits(match (config.stack_captures, config.findings.futex_stall.threads.is_empty()) {
            (false, _) => 0,
            (true, true) => sonic_probe_common::INFLIGHT_MAIN_THREADS,
            (true, false) => sonic_probe_common::INFLIGHT_ALL_THREADS,
        })
        .thread_time(config.thread_time)
        .build()
}

async fn serve(
    config: RunConfig,
    cli: RunArgs,
    cli_log_level: Option<String>,
    gpu_helper: Option<PerfHelper>,
) -> Result<()> {
    let started = Instant::now();
    // Handle SIGINT/SIGTERM from the start: a signal that arrives while
    // attaching must still end in a clean detach, never a default kill.
    let mut shutdown = ShutdownSignals::new()?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().context("listening socket has no address")?;
    let registry = Registry::new();
    let http_state = Arc::new(HttpState::new(registry.clone()));
    http_state.set_web_config(config.web.clone());
    http_state.set_path_display(config.findings_paths);
    let server = tokio::spawn(web::serve(listener, http_state.clone()));

    status("loading the BPF programs");
    let mut probe = Probe::load(config.ringbuf_bytes, config.btf.as_deref())?;
    info!("{}", probe.describe_kernel());
    probe.set_config(&probe_config(&config))?;
    probe.set_file_classes(sonic_probe_common::DEFAULT_FILE_CLASSES)?;
    let mut targets = probe.take_targets()?;
    targets.apply(&config.targets)?;
    let aggregates = probe.take_aggregates()?;
    let open_files = probe.take_open_files()?;
    let reopens = probe.take_reopens()?;
    let ring = probe.take_events()?;
    let futex_waiting = probe.take_futex_waiting()?;
    let thread_times = probe.take_thread_times()?;
    let gpu_waits = match gpu_helper {
        Some(helper) => Some((probe.take_gpu_waits()?, helper)),
        None => None,
    };
    let gpu_waiting = match (&gpu_waits, config.stack_captures) {
        (Some(_), true) => Some(probe.take_gpu_waiting()?),
        _ => None,
    };
    if let (true, Some(why)) = (config.gpu_waits, probe.gpu_error()) {
        warn!("GPU waits are unavailable (the rest runs): {why}");
    }
    if config.bpf_stats {
        probe.enable_run_time_stats()?;
    }

    status("attaching");
    probe.attach(ProgramGroup::Lifecycle)?;
    let comm_matches = targets.scan_comms(&config.targets.comms)?;
    probe.attach(ProgramGroup::Syscalls)?;
    if config.thread_time {
        probe.attach(ProgramGroup::Scheduler)?;
    }
    // The CUDA libraries mapped now: read before the capabilities go.
    let gpu_mapped = gpu_waits.as_ref().map(|_| {
        let pids = (!config.targets.is_whole_host() && config.targets.cgroups.is_empty())
            .then(|| targets.processes());
        crate::gpu::libraries::mapped_now(pids)
    });
    drop_capabilities(&probe, config.stack_captures);
    // Loading parsed the kernel's BTF (megabytes, freed since).
    crate::stacks::capture::give_back_memory();

    let reader_stats = Arc::new(ReaderStats::default());
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let reader = tokio::spawn(events::reader::run(ring, tx, reader_stats.clone()));
    let pid_targets: Vec<u32> = config.targets.pids.iter().map(|p| p.tgid).collect();
    let workloads = Arc::new(Mutex::new(Workloads::from_settings(&config.workloads)));
    // Stack captures: a thread of its own (it reads other processes'
    // memory, which may take a while), never the event loop.
    let capture_settings = Arc::new(Mutex::new(config.capture_settings()));
    let captures = config.stack_captures.then(CaptureStore::new);
    if let Some(store) = &captures {
        Capturer::new(futex_waiting, gpu_waiting, store.clone(), capture_settings.clone())
            .spawn()
            .context("cannot start the stack capture thread")?;
    }
    let shared = crate::findings::Shared { captures: captures.clone() };
    let findings =
        FindingsService::new(&config.findings, &shared, open_files, Some(reopens), workloads.clone());
    let attached = probe.attached().join(", ");
    let n_attached = probe.attached().len();
    let probe = Arc::new(Mutex::new(probe));
    let labels = Arc::new(Mutex::new(CommLabels::new(config.max_comms)));
    // GPU waits: the libraries the targets map now, then those they open.
    let (gpu, gpu_candidates, gpu_store) = match gpu_waits {
        Some((map, helper)) => {
            let libraries = GpuLibraries::new(probe.clone(), helper, config.gpu_max_libraries);
            let counts = libraries.counts();
            let tx = libraries
                .spawn(gpu_mapped.unwrap_or_default())
                .context("cannot start the GPU probe thread")?;
            let waits = Arc::new(GpuWaitStore::new(map, labels.clone(), workloads.clone()));
            (Some(GpuSources { waits: waits.clone(), libraries: counts }), Some(tx), Some(waits))
        }
        None => (None, None, None),
    };
    let consumer = tokio::spawn(consume(rx, pid_targets, findings.clone(), gpu_candidates));

    let store = Arc::new(Mutex::new(StatsStore::new(aggregates, labels.clone(), workloads.clone())));
    let threads = config.thread_time.then(|| {
        let aggregator = ThreadAggregator::new(labels.clone(), workloads.clone(), config.max_thread_names);
        let limits = CpuLimits::host(workloads.lock().expect("workloads lock").cgroup2_mount());
        Arc::new(ThreadTimeStore::new(thread_times, aggregator, limits))
    });
    let targets = Arc::new(Mutex::new(targets));
    let collector = ProbeCollector::new(
        probe.clone(),
        store.clone(),
        targets.clone(),
        reader_stats.clone(),
        labels.clone(),
        workloads.clone(),
        Arc::new(findings.clone()),
        config.targets.is_whole_host(),
    )
    .with_threads(threads.clone())
    .with_gpu(gpu);
    registry.register(Box::new(collector)).context("cannot register the metrics")?;
    registry
        .register(Box::new(
            FindingsCollector::new(
                Arc::new(findings.clone()),
                labels.clone(),
                workloads.clone(),
                config.max_comms,
            )
            .with_captures(captures.clone()),
        ))
        .context("cannot register the findings metrics")?;
    http_state.set_findings(Arc::new(findings.clone()));
    registry
        .register(Box::new(ProcessCollector::for_self()))
        .context("cannot register the process metrics")?;
    let sweeper = tokio::spawn(sweep_periodically(findings.clone(), threads, gpu_store));

    http_state.set_ready();
    let comm_note = if config.targets.comms.is_empty() {
        String::new()
    } else {
        format!(" ({comm_matches} running processes match --comm)")
    };
    info!(
        "ready in {} ms: attached {n_attached} BPF programs ({attached}); watching {}{comm_note}; \
         serving {}://{addr}/metrics ({})",
        started.elapsed().as_millis(),
        config.targets.describe(),
        if config.web.tls().is_some() { "https" } else { "http" },
        config.web.describe(),
    );

    let ready = format!("watching {}", config.targets.describe());
    notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&ready)]);

    let mut reloader = Reloader {
        cli,
        cli_log_level,
        current: config,
        probe: probe.clone(),
        targets: targets.clone(),
        findings: findings.clone(),
        http: http_state.clone(),
        capture_settings,
    };
    let why = loop {
        tokio::select! {
            why = shutdown.wait_ref() => break why,
            _ = hangup.recv() => {
                notify(&[sd_notify::NotifyState::Reloading]);
                let outcome = reloader.reload();
                let text = match &outcome {
                    Ok(()) => format!("reloaded; watching {}", reloader.current.targets.describe()),
                    Err(e) => format!("reload failed, running on: {}", crate::logging::one_line(e)),
                };
                match outcome {
                    Ok(()) => info!("SIGHUP: {text}"),
                    Err(_) => warn!("SIGHUP: {text}"),
                }
                notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&text)]);
            }
        }
    };
    notify(&[sd_notify::NotifyState::Stopping]);
    info!("{why}: detaching and exiting");
    for task in [server, sweeper, consumer] {
        task.abort();
    }
    if let Some(store) = &captures {
        store.stop();
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

/// The CUDA library a successful open of `c` opened, as its process names it.
fn opened_gpu_library(c: &events::Call) -> Option<String> {
    if c.raw.ret < 0 || !matches!(c.syscall().name, "openat" | "open" | "openat2") {
        return None;
    }
    let path = c.path_lossy()?;
    sonic_probe_common::gpu_apis::library_of(&path).map(|_| path)
}

/// How often the kernel's descriptor table is swept of processes that
/// exec'd or exited.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

async fn sweep_periodically(
    findings: FindingsService,
    threads: Option<Arc<ThreadTimeStore>>,
    gpu: Option<Arc<GpuWaitStore>>,
) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let f = findings.clone();
        let (t, g) = (threads.clone(), gpu.clone());
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(t) = &t {
                f.sweep_thread_times(t, g.as_deref());
            }
            f.sweep()
        })
        .await;
    }
}

/// Consumes decoded events: the findings engine sees each one, and the log
/// gets what a person would want to see there. The metrics don't depend on
/// it (the kernel counts).
/// GPU waits on: a CUDA library a target opens goes to the GPU probe
/// thread (`gpu`).
async fn consume(
    mut rx: mpsc::Receiver<Event>,
    pid_targets: Vec<u32>,
    findings: FindingsService,
    gpu: Option<std::sync::mpsc::SyncSender<Candidate>>,
) {
    while let Some(ev) = rx.recv().await {
        findings.observe(&ev);
        if let (Some(gpu), Event::Call(c)) = (&gpu, &ev) {
            if let Some(path) = opened_gpu_library(c) {
                // Full only if a thousand opens of CUDA libraries wait: the
                // library's next open (or the daemon's restart) finds it.
                if gpu.try_send(Candidate { pid: c.tgid(), path }).is_err() {
                    debug!("GPU probe queue full: an open of a CUDA library skipped");
                }
            }
        }
        match &ev {
            Event::Process(p) if p.kind == ProcessKind::Exit && pid_targets.contains(&p.tgid()) => {
                info!(
                    "target process {} ({}) exited with status {}; still watching the other targets",
                    p.tgid(),
                    p.name(),
                    p.raw.exit_code
                );
            }
            Event::Call(c) if c.has_reason(EMIT_SLOW | EMIT_ERROR | EMIT_LARGE_MAP | EMIT_SHORT) => {
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
