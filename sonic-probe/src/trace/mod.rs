//! `sonic-probe trace`: strace's habits (`-p`, `-f`, `-T`, `-tt`, `-y`,
//! `-e trace=`, `-o`, `-c`) on sonic-probe's BPF programs.
//!
//! In this mode the kernel sends every call of the traced processes and
//! syscalls through the ring buffer (probe_config.trace_mask); the daemon's
//! reader ([`RingReader`]) drains and decodes it, and the loop here prints
//! each event as strace would ([`format`]); `-c` needs no events at all: it
//! prints the kernel's exact counts ([`summary`]). The pids of `-p` are
//! checked as `run --pid`'s are, and the programs' settings come from the
//! same builder as the daemon's. A loss is never silent: when the kernel
//! could not send events, a `+++ lost N events +++` line marks the place,
//! and the total is printed at the end; records the reader could not decode
//! are counted and their number printed at the end too.

mod child;
pub mod fds;
pub mod format;
pub mod summary;
pub mod syscall_args;

use std::{
    collections::HashSet,
    io::Write,
    path::PathBuf,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use sonic_probe_common::{
    syscalls::{self, SYSCALLS},
    ProbeConfig, COUNTER_DROP_RINGBUF, COUNTER_DROP_THREAD_STATE, FILTER_TARGETS, TARGET_FOLLOW_FORKS,
    TARGET_PID, TARGET_THREADS_ONLY,
};
use sonic_probe_ebpf::ProgramGroup;

use crate::{
    config::cli::TraceArgs,
    error::{Error, Result},
    events::{
        reader::{ReaderStats, RingReader, Wakeup},
        Event, ProcessKind,
    },
    os::procfs,
    probe::targets::PidTarget,
    probe::{Probe, ProbeConfigBuilder},
    stats::labels::CommLabels,
    stats::{call_count, StatsStore},
};
use child::WaitingChild;
use fds::FdNames;
use format::{Formatter, Style};

/// What to trace: running processes, or a command started here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Pids(Vec<PidTarget>),
    Command(Vec<String>),
}

/// `sonic-probe trace`'s arguments, checked.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    pub target: Target,
    pub style: Style,
    /// Syscall indices to print.
    pub syscalls: u32,
    pub output: Option<PathBuf>,
    pub summary: bool,
    pub ringbuf_bytes: u32,
}

/// `-e trace=futex,read` (or `-e futex,read`, `-e trace=all`) -> a mask.
pub fn parse_expr(exprs: &[String]) -> Result<u32> {
    let all = syscalls::all_mask();
    let mut mask = None::<u32>;
    for e in exprs {
        let list = match e.split_once('=') {
            Some(("trace" | "t", list)) => list,
            Some((q, _)) => {
                return Err(Error::usage(format!("-e {e}: only trace= is supported (not {q}=)")));
            }
            None => e.as_str(),
        };
        let mut m = 0;
        for name in list.split(',').filter(|n| !n.is_empty()) {
            if name == "all" {
                m = all;
                continue;
            }
            let s = syscalls::by_name(name).ok_or_else(|| {
                let known: Vec<&str> = SYSCALLS.iter().map(|s| s.name).collect();
                Error::usage(format!(
                    "-e {e}: sonic-probe does not trace {name} (it traces {})",
                    known.join(",")
                ))
            })?;
            m |= 1 << s.index;
        }
        if m == 0 {
            return Err(Error::usage(format!("-e {e}: no system call named")));
        }
        mask = Some(mask.unwrap_or(0) | m);
    }
    Ok(mask.unwrap_or(all))
}

impl TraceOptions {
    pub fn from_args(a: &TraceArgs) -> Result<Self> {
        let target = match (a.pids.is_empty(), a.command.is_empty()) {
            (true, true) => return Err(Error::usage("trace: give -p PID or -- COMMAND")),
            (false, false) => return Err(Error::usage("trace: give -p PID or -- COMMAND, not both")),
            (false, true) => Target::Pids(
                a.pids
                    .iter()
                    .flat_map(|p| p.split(','))
                    .map(|item| PidTarget::parse("-p", item))
                    .collect::<Result<_>>()?,
            ),
            (true, false) => Target::Command(a.command.clone()),
        };
        if a.time > 3 {
            return Err(Error::usage("-t: at most -ttt"));
        }
        Ok(TraceOptions {
            target,
            style: Style {
                follow: a.follow,
                to_file: a.output.is_some(),
                time: a.time,
                durations: a.durations,
                paths: a.paths,
            },
            syscalls: parse_expr(&a.expr)?,
            output: a.output.clone(),
            summary: a.summary,
            ringbuf_bytes: crate::config::check_ringbuf_size(a.ringbuf_size)?,
        })
    }

    /// The calls the kernel must send: those printed, and with -y the
    /// openat/close calls that keep descriptor paths right. None for -c.
    fn kernel_mask(&self) -> u32 {
        if self.summary {
            return 0;
        }
        let mut m = self.syscalls;
        if self.style.paths {
            m |= syscalls::mask_of([syscalls::OPENAT, syscalls::CLOSE]);
        }
        m
    }

    /// The programs' settings: the targets only, every call of the traced
    /// syscalls sent, user space woken at an eighth of the ring.
    fn probe_config(&self) -> ProbeConfig {
        ProbeConfigBuilder::new()
            .targets(FILTER_TARGETS, 0)
            // The calls printed or counted (-c), and those -y follows.
            .syscalls(self.syscalls | self.kernel_mask())
            .every_call_of(self.kernel_mask())
            .wakeup_at(self.ringbuf_bytes, 8)
            .build()
    }
}

/// How often the ring is drained when the kernel does not wake us (it
/// submits silently until the ring is an eighth full): lines come soon.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

pub fn run(args: TraceArgs) -> Result<ExitCode> {
    let opts = TraceOptions::from_args(&args)?;
    crate::probe::privileges::check()?;
    // Fork the command now, while we are single-threaded.
    let child = match &opts.target {
        Target::Command(argv) => Some(WaitingChild::spawn(argv)?),
        Target::Pids(_) => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(trace(opts, child))
}

/// Where lines go: stderr like strace, or -o FILE.
fn output(opts: &TraceOptions) -> Result<Box<dyn Write>> {
    Ok(match &opts.output {
        Some(p) => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(p).map_err(|e| Error::usage(format!("-o {}: {e}", p.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stderr())),
    })
}

struct Lost {
    reported: u64,
}

impl Lost {
    /// Calls the kernel could not send (ring buffer full) or not measure.
    fn now(store: &StatsStore) -> u64 {
        let c = store.counters();
        c[COUNTER_DROP_RINGBUF as usize] + c[COUNTER_DROP_THREAD_STATE as usize]
    }

    fn report(&mut self, store: &StatsStore, out: &mut dyn Write) -> std::io::Result<()> {
        let n = Self::now(store);
        if n > self.reported {
            writeln!(out, "+++ lost {} events +++", n - self.reported)?;
            self.reported = n;
        }
        Ok(())
    }
}

fn write_err(e: std::io::Error) -> Error {
    Error::Runtime(anyhow::anyhow!("cannot write the trace: {e}"))
}

/// Turns events into lines and keeps the set of live traced processes.
struct Printer<'a> {
    live: HashSet<u32>,
    fmt: Formatter,
    names: FdNames,
    out: Box<dyn Write>,
    opts: &'a TraceOptions,
}

impl Printer<'_> {
    fn handle(&mut self, ev: Event) -> Result<()> {
        match ev {
            Event::Call(c) => {
                self.names.before(&c);
                if !self.opts.summary && self.opts.syscalls & (1 << c.raw.syscall) != 0 {
                    self.out.write_all(self.fmt.call(&c, &self.names).as_bytes()).map_err(write_err)?;
                }
                self.names.after(&c);
            }
            Event::Process(p) => match p.kind {
                ProcessKind::Fork if self.opts.style.follow && self.live.contains(&p.raw.parent_tgid) => {
                    self.live.insert(p.tgid());
                    self.names.forked(p.raw.parent_tgid, p.tgid());
                }
                ProcessKind::Exit if self.live.contains(&p.tgid()) || !self.opts.summary => {
                    if !self.opts.summary {
                        self.out.write_all(self.fmt.exit(&p).as_bytes()).map_err(write_err)?;
                    }
                    self.live.remove(&p.tgid());
                    self.names.forget(p.tgid());
                }
                _ => {}
            },
            Event::FileClosed(_) | Event::GpuWait(_) => {}
        }
        Ok(())
    }
}

async fn trace(opts: TraceOptions, mut child: Option<WaitingChild>) -> Result<ExitCode> {
    let out = output(&opts)?;
    let mut probe = Probe::load(opts.ringbuf_bytes, None)?;
    tracing::debug!("{}", probe.describe_kernel());
    probe.set_config(&opts.probe_config())?;
    let mut targets = probe.take_targets()?;
    let store = StatsStore::new(
        probe.take_aggregates()?,
        Arc::new(Mutex::new(CommLabels::new(usize::MAX))),
        Arc::new(Mutex::new(crate::workloads::Workloads::disabled())),
    );
    let ring = probe.take_events()?;

    let flags =
        if opts.style.follow { TARGET_PID | TARGET_FOLLOW_FORKS } else { TARGET_PID | TARGET_THREADS_ONLY };
    let roots: Vec<PidTarget> = match (&opts.target, &child) {
        (Target::Pids(p), _) => p.clone(),
        (Target::Command(_), Some(c)) => vec![PidTarget { requested: c.pid(), tgid: c.pid() }],
        (Target::Command(_), None) => unreachable!("the command was forked"),
    };
    for root in &roots {
        targets.add_process(root.tgid, flags)?;
        if !opts.style.follow {
            targets.add_thread(root.requested)?;
        }
    }
    let mut shutdown = crate::os::signals::ShutdownSignals::new()?;
    probe.attach(ProgramGroup::Lifecycle)?;
    probe.attach(ProgramGroup::Syscalls)?;
    // What the roots hold now, before the command runs (it may be gone by
    // the time its lines are printed).
    let mut names = FdNames::default();
    for root in &roots {
        names.snapshot(root.tgid);
    }
    if let Some(c) = child.as_mut() {
        c.release()?;
    } else {
        for root in &roots {
            eprintln!("sonic-probe: Process {} attached", root.requested);
        }
    }

    for root in &roots {
        // The command starts in our directory; a running process in its own.
        let cwd = match &child {
            Some(_) => std::env::current_dir().ok().map(|d| d.to_string_lossy().into_owned()),
            None => names.cwd(root.tgid),
        };
        if let Some(cwd) = cwd {
            names.set_cwd(root.tgid, cwd);
        }
    }
    let mut printer = Printer {
        live: roots.iter().map(|r| r.tgid).collect(),
        fmt: Formatter::new(opts.style),
        names,
        out,
        opts: &opts,
    };
    let mut lost = Lost { reported: 0 };
    // Records it cannot decode are counted there, never dropped silently.
    let reader_stats = Arc::new(ReaderStats::default());
    let mut reader = RingReader::new(ring, POLL_INTERVAL, reader_stats.clone())?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut interrupted = false;

    while !printer.live.is_empty() {
        tokio::select! {
            wakeup = reader.wait_and_drain(|ev| printer.handle(ev)) => {
                if wakeup? == Wakeup::Kernel {
                    lost.report(&store, &mut *printer.out).map_err(write_err)?;
                }
                printer.out.flush().map_err(write_err)?;
            }
            _ = tick.tick() => {
                // An exit event may have been lost: trust /proc too.
                printer.live.retain(|&t| procfs::is_alive(t) && !is_zombie(t));
                if let Some(c) = &child {
                    if printer.live.contains(&c.pid()) && c.try_wait().is_some() {
                        printer.live.remove(&c.pid());
                    }
                }
                lost.report(&store, &mut *printer.out).map_err(write_err)?;
            }
            _ = shutdown.wait_ref() => {
                interrupted = true;
                break;
            }
        }
    }
    // What the last processes sent before they went.
    reader.drain(|ev| printer.handle(ev))?;
    lost.report(&store, &mut *printer.out).map_err(write_err)?;
    let undecodable = reader_stats.undecodable();
    let mut out = printer.out;
    drop(reader);

    if opts.summary {
        let snap = store.snapshot();
        lost.reported = Lost::now(&store);
        let rows: Vec<summary::Row> = SYSCALLS
            .iter()
            .filter(|s| opts.syscalls & (1 << s.index) != 0)
            .map(|s| {
                let mut r = summary::Row { name: s.name, calls: 0, errors: 0, total_ns: 0 };
                for ((k, _), v) in &snap.calls {
                    if k.syscall.index() == s.index {
                        r.calls += call_count(v);
                        r.errors += v.errors;
                        r.total_ns += v.total_ns;
                    }
                }
                r
            })
            .collect();
        out.write_all(summary::render(&rows).as_bytes()).map_err(write_err)?;
    }
    if undecodable > 0 {
        writeln!(out, "+++ {undecodable} records could not be decoded +++").map_err(write_err)?;
        eprintln!("sonic-probe: {undecodable} ring buffer records could not be decoded");
    }
    if lost.reported > 0 {
        writeln!(out, "+++ lost {} events in total +++", lost.reported).map_err(write_err)?;
        eprintln!("sonic-probe: lost {} events (raise --ringbuf-size)", lost.reported);
    }
    out.flush().map_err(write_err)?;
    drop(probe);

    let code = match &child {
        // Interrupted: the command got the signal too, or goes on untraced.
        Some(c) if interrupted => c.try_wait().unwrap_or(130),
        Some(c) => c.wait(),
        None => 0,
    };
    if interrupted && child.is_none() {
        for root in &roots {
            eprintln!("sonic-probe: Process {} detached", root.requested);
        }
    }
    Ok(ExitCode::from(code))
}

/// A zombie has exited: nothing more will come from it.
fn is_zombie(tgid: u32) -> bool {
    procfs::status_field(tgid, "State").is_ok_and(|s| s.starts_with('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_expressions() {
        let all = syscalls::mask_of(SYSCALLS.iter().map(|s| s.index));
        assert_eq!(parse_expr(&[]).unwrap(), all);
        assert_eq!(parse_expr(&["trace=all".into()]).unwrap(), all);
        assert_eq!(
            parse_expr(&["trace=futex,read".into()]).unwrap(),
            syscalls::mask_of([syscalls::FUTEX, syscalls::READ])
        );
        assert_eq!(parse_expr(&["openat".into()]).unwrap(), 1 << syscalls::OPENAT);
        for bad in ["trace=sendmsg", "signal=all", "trace="] {
            assert!(matches!(parse_expr(&[bad.into()]), Err(Error::Usage(_))), "{bad}");
        }
    }
}
