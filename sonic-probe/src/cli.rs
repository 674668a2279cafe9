//! The command line: clap definitions, logging setup, and the one place
//! where a command's result becomes an exit code.
//!
//! Raw arguments are only parsed here; `config.rs` turns them into a
//! validated configuration.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{parse_duration, parse_listen, parse_size};

#[derive(Parser, Debug)]
#[command(
    name = "sonic-probe",
    version,
    about = "Watch a service's futex, openat, read, mmap and munmap calls through eBPF, \
             continuously and cheaply, and export them as Prometheus metrics."
)]
pub struct Cli {
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    /// RUST_LOG overrides it. [default: info]
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once
pub enum Command {
    /// Attach the probes and serve Prometheus metrics until SIGINT or SIGTERM.
    ///
    /// Without targets every process on the host is watched. Targets combine
    /// as a union: a process is watched if any of them matches.
    Run(RunArgs),
    /// Trace system calls like strace, at eBPF cost.
    ///
    /// One line per call in strace's format, from the kernel's exact events.
    /// Buffers are not captured: read's data and futex_waitv's array are
    /// printed as their address. -c prints strace's summary table from the
    /// kernel's counts; its times are wall-clock durations (like strace -c -w).
    #[command(
        override_usage = "sonic-probe trace [-f] [-T] [-t|-tt|-ttt] [-y] [-e trace=LIST] [-o FILE] [-c] (-p PID[,PID...] | -- COMMAND [ARGS...])"
    )]
    Trace(TraceArgs),
    /// Check a config file (and the command line options given with it):
    /// every key, value, target; with --attach also load and attach the BPF
    /// programs, then detach them.
    CheckConfig(CheckConfigArgs),
    /// Print the findings of a running `sonic-probe run`: futex stalls,
    /// repeated opens, small reads, mmap churn, syscall errors.
    Findings(FindingsArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Follow threads and the processes the traced ones fork (with -p: all
    /// threads of the process); lines start with the thread id.
    #[arg(short = 'f')]
    pub follow: bool,

    /// Print each call's duration, <seconds.micros>, at the end of its line.
    #[arg(short = 'T')]
    pub durations: bool,

    /// Print the time of day each call started: -t seconds, -tt
    /// microseconds, -ttt seconds since the epoch.
    #[arg(short = 't', action = clap::ArgAction::Count)]
    pub time: u8,

    /// Print the paths of descriptors: read(3</etc/hostname>, ...).
    #[arg(short = 'y')]
    pub paths: bool,

    /// Which calls: trace=LIST (or just LIST), LIST a comma-separated subset
    /// of futex,openat,read,mmap,munmap,close,futex_waitv, or all (the default).
    #[arg(short = 'e', value_name = "EXPR")]
    pub expr: Vec<String>,

    /// Write the trace (or the -c table) to FILE instead of stderr.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// Count calls, errors and time per syscall and print strace's summary
    /// table at the end instead of every call.
    #[arg(short = 'c')]
    pub summary: bool,

    /// Trace these running processes (threads; with -f their processes).
    /// Comma-separated or repeated.
    #[arg(short = 'p', value_name = "PID[,PID...]")]
    pub pids: Vec<String>,

    /// Size of the BPF ring buffer the calls come through (a power of two).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub ringbuf_size: u64,

    /// The command to start and trace (after --); sonic-probe exits with its
    /// exit status.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CheckConfigArgs {
    /// The config file to check.
    #[arg(long, value_name = "FILE", default_value = "/etc/sonic-probe/config.toml")]
    pub config: std::path::PathBuf,

    /// Also load, verify and attach the BPF programs, then detach (needs the
    /// privileges of `run`).
    #[arg(long)]
    pub attach: bool,
}

#[derive(Args, Debug, Clone)]
pub struct FindingsArgs {
    /// The daemon's HTTP address (its --listen).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9580")]
    pub url: String,

    /// Print the JSON of GET /findings instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `sonic-probe run`'s options. Each is also a key of the config file
/// (same name, `-` written `_`); a flag given here overrides the file.
/// Defaults are applied in config.rs, after merging.
#[derive(Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Read options from this TOML file (see deploy/config.toml); flags
    /// given on the command line override it. SIGHUP re-reads it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Watch this process: all its threads, and the processes it forks after
    /// attach (like strace -f). A thread id selects its whole process.
    /// Repeatable.
    #[arg(long, value_name = "PID", allow_negative_numbers = true)]
    pub pid: Vec<i64>,

    /// Watch processes with this name (the thread-group leader's comm, at
    /// most 15 bytes), those running now and those that exec later.
    /// Repeatable.
    #[arg(long, value_name = "NAME")]
    pub comm: Vec<String>,

    /// Watch processes in this cgroup v2 directory or below it: an absolute
    /// path (/sys/fs/cgroup/system.slice/x.service) or one relative to the
    /// cgroup2 mount (system.slice/x.service). Repeatable.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,

    /// Address of the HTTP server (/metrics, /findings, /healthz). Port 0
    /// picks a free port; the ready log line says which.
    /// [default: 127.0.0.1:9580]
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: Option<std::net::SocketAddr>,

    /// Calls lasting at least this long are sent to user space one by one
    /// (slow-call events, logged at debug level). [default: 100ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub slow_threshold: Option<std::time::Duration>,

    /// mmap/munmap calls of at least this size are large: sent to user space
    /// one by one, and the size of an mmap_churn cycle. Accepts B, KiB, MiB,
    /// GiB (and K, M, G). [default: 16MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub large_map_threshold: Option<u64>,

    /// Reads from files asking for fewer bytes than this are small reads
    /// (sonic_probe_small_reads_total, the small_reads finding). [default: 4KiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub small_read_threshold: Option<u64>,

    /// Distinct process names exported as their own `comm` label; further
    /// names are exported as comm="other". [default: 256]
    #[arg(long, value_name = "N")]
    pub max_comms: Option<usize>,

    /// Size of the BPF ring buffer that carries per-call events: a power of
    /// two, at least 4KiB. Losses are counted in
    /// sonic_probe_events_dropped_total{stage="ringbuf"}. [default: 4MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub ringbuf_size: Option<u64>,

    /// Futex waits of a request thread lasting at least this long are
    /// stalls (the futex_stall finding; see README, diagnoses). [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stall_threshold: Option<std::time::Duration>,

    /// Threads whose name matches this glob are request threads too (the
    /// main thread of a process always is). Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub stall_thread: Vec<String>,

    /// Threads whose name matches this glob are never reported as stalled.
    /// Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub stall_ignore_thread: Vec<String>,

    /// A path opened this many times by one process within
    /// --repeated-open-window is a repeated_open finding. [default: 3]
    #[arg(long, value_name = "N")]
    pub repeated_open_count: Option<u64>,

    /// Window of --repeated-open-count. [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub repeated_open_window: Option<std::time::Duration>,

    /// A file read with at least this many small reads is a small_reads
    /// finding (see --small-read-threshold). [default: 8]
    #[arg(long, value_name = "N")]
    pub small_read_min_count: Option<u64>,

    /// A mapping of at least --large-map-threshold unmapped within this long
    /// of being mapped is one churn cycle. [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub churn_window: Option<std::time::Duration>,

    /// Cycles of one size (and file) in one process that make an
    /// mmap_churn finding. [default: 2]
    #[arg(long, value_name = "N")]
    pub churn_cycles: Option<u64>,

    /// Paths (globs) never reported by repeated_open, small_reads and, as
    /// failing openat paths, syscall_errors; added to the defaults
    /// (/proc/*, /sys/*, /dev/*, /etc/ld.so.cache, *.so, *.so.*,
    /// /usr/lib/locale/*, */pybuilddir.txt, */pyvenv.cfg, *._pth). Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub ignore_path: Vec<String>,

    /// A finding not seen again for this long is dropped. [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub findings_window: Option<std::time::Duration>,

    /// Findings kept per kind (the least recently seen go first). [default: 1000]
    #[arg(long, value_name = "N")]
    pub max_findings: Option<usize>,

    /// Read the kernel's BTF (type information) from this file instead of
    /// /sys/kernel/btf/vmlinux: for kernels built without it, with a BTF
    /// file from BTFHub or `pahole --btf_encode_detached`.
    #[arg(long, value_name = "PATH")]
    pub btf: Option<std::path::PathBuf>,

    /// Turn on the kernel's BPF run-time statistics while running (like
    /// sysctl kernel.bpf_stats_enabled=1) to export
    /// sonic_probe_bpf_program_run_seconds_total. Costs ~20 ns per program
    /// run, and needs CAP_SYS_ADMIN.
    #[arg(long)]
    pub bpf_stats: bool,
}

/// Parses the command line, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if !matches!(cli.command, Command::Run(_)) {
        if let Err(e) = init_logging(cli.log_level.as_deref().unwrap_or("info")) {
            eprintln!("sonic-probe: error: {}", one_line(&e));
            return e.exit_code();
        }
    }
    let result = match cli.command {
        // run reads its log level from the config file too.
        Command::Run(args) => crate::daemon::run(args, cli.log_level).map(|()| ExitCode::SUCCESS),
        Command::Trace(args) => crate::trace::run(args),
        Command::CheckConfig(args) => crate::daemon::check_config(&args).map(|()| ExitCode::SUCCESS),
        Command::Findings(args) => crate::client::run(&args.url, args.json).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sonic-probe: error: {}", one_line(&e));
            e.exit_code()
        }
    }
}

/// Help and version go out whole; a bad argument is one line (clap's first),
/// exit code 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind::*;
    match e.kind() {
        DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
        }
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("error: bad arguments");
            eprintln!("sonic-probe: {first} (see --help)");
        }
    }
    ExitCode::from(e.exit_code() as u8)
}

/// The error and its causes on one line.
pub(crate) fn one_line(e: &crate::error::Error) -> String {
    match e {
        // Usage errors quote the user's input, which may hold a newline:
        // show control characters escaped, so the message stays one line.
        crate::error::Error::Usage(m) => m
            .chars()
            .flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] })
            .collect(),
        crate::error::Error::Runtime(e) => {
            // Some libraries repeat their cause in their own message: keep
            // each piece of text once.
            let mut out = String::new();
            for cause in e.chain().map(|c| c.to_string()) {
                if !out.contains(&cause) {
                    if !out.is_empty() {
                        out.push_str(": ");
                    }
                    out.push_str(&cause);
                }
            }
            out.replace('\n', " ")
        }
    }
}

/// Sets up logging to stderr; a filter that does not parse is a usage error.
pub(crate) fn init_logging(filter: &str) -> crate::error::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match EnvFilter::try_from_default_env() {
        Ok(f) => f,
        Err(_) => EnvFilter::try_new(filter).map_err(|e| {
            crate::error::Error::usage(format!("--log-level {filter}: not a log filter ({e})"))
        })?,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init()
        .ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn errors_are_one_line_whatever_the_input() {
        // Found by the config fuzzer: --comm quoted a name with a newline.
        let e = crate::error::Error::usage("--comm a\nb: process names are at most 15 bytes");
        assert_eq!(one_line(&e), "--comm a\\nb: process names are at most 15 bytes");
        let e = crate::error::Error::Runtime(anyhow::anyhow!("verifier log:\n0: r1 = 1").context("load"));
        assert_eq!(one_line(&e), "load: verifier log: 0: r1 = 1");
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_default_to_unset() {
        let cli = Cli::try_parse_from(["sonic-probe", "run"]).unwrap();
        let Command::Run(a) = cli.command else { panic!("not run") };
        assert!(a.pid.is_empty() && a.comm.is_empty() && a.cgroup.is_empty());
        assert!(a.listen.is_none() && a.slow_threshold.is_none() && a.config.is_none());
        let cli =
            Cli::try_parse_from(["sonic-probe", "run", "--listen", "0.0.0.0:1", "--pid", "5", "--pid", "6"])
                .unwrap();
        let Command::Run(a) = cli.command else { panic!("not run") };
        assert_eq!(a.listen.unwrap().port(), 1);
        assert_eq!(a.pid, vec![5, 6]);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["sonic-probe", "run", "--listen", "nowhere"][..],
            &["sonic-probe", "run", "--slow-threshold", "fast"],
            &["sonic-probe", "run", "--large-map-threshold", "12 parsecs"],
            &["sonic-probe", "run", "--pid", "abc"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
    }
}
