//! The command line's shape: clap's definitions of the commands and their
//! flags, and nothing that runs them (`dispatch.rs` does), so the commands
//! can name their arguments' types without importing their own dispatcher.
//!
//! Raw arguments are only parsed here; `config/mod.rs` turns them into a
//! validated configuration.

use clap::{Args, Parser, Subcommand};
use sonic_probe_common::syscalls;

use crate::config::{
    options::{default_syscalls_text, opt_in_syscalls_text, RunArgs},
    units::{parse_duration, parse_size},
};

/// The command's `about`: what it watches, from the syscall table.
fn about() -> String {
    let opt_in = opt_in_syscalls_text();
    let on_request = if opt_in.is_empty() { String::new() } else { format!(" (and on request {opt_in})") };
    format!(
        "Watch a service's {} calls{on_request} through eBPF, continuously and cheaply, and export \
         them as Prometheus metrics.",
        default_syscalls_text()
    )
}

/// trace's `-e` help: the names it takes are the table's.
fn trace_expr_help() -> String {
    format!(
        "Which calls: trace=LIST (or just LIST), LIST a comma-separated subset of {}, or all (the \
         default).",
        syscalls::names_of(syscalls::all_mask()).join(",")
    )
}

#[derive(Parser, Debug)]
#[command(name = "sonic-probe", version, about = about())]
pub struct Cli {
    // Documented with the options of `run` (also a key of its config file).
    #[arg(long, global = true, value_name = "FILTER", help = crate::config::options::help_of("log_level"))]
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
    /// The node at a glance, refreshed every second: per workload, its
    /// processes and thread names with calls and errors per second, where
    /// their threads' time goes (on CPU, waiting for a CPU, a lock, a file,
    /// the network, the GPU), the p99 of their watched calls and their
    /// findings, from a running `sonic-probe run`.
    Top(TopArgs),
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

    // Its help names the table's calls: trace_expr_help.
    #[arg(short = 'e', value_name = "EXPR", help = trace_expr_help())]
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
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Print the JSON of GET /findings instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print the whole stacks captured during stalls under each finding
    /// (the table shows the innermost meaningful frame of each).
    #[arg(long, conflicts_with = "json")]
    pub stacks: bool,
}

/// How `findings` and `top` reach the daemon.
#[derive(Args, Debug, Clone)]
pub struct ConnectionArgs {
    /// The daemon's HTTP address (its --listen).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9580")]
    pub url: String,

    /// For an https:// URL: the CA certificate(s), PEM, that signed the
    /// daemon's certificate. [default: the system's CA bundle]
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,

    /// For an https:// URL whose daemon asks for client certificates: this
    /// certificate (PEM), with --key-file.
    #[arg(long, value_name = "FILE")]
    pub cert_file: Option<std::path::PathBuf>,

    /// The private key (PEM) of --cert-file.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,

    /// Basic-auth user (the daemon's web-config basic_auth_users). The
    /// password is read from $SONIC_PROBE_PASSWORD or --password-file, never
    /// from the command line.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,

    /// A file holding --user's password (one line).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
}

impl ConnectionArgs {
    pub fn client_options(&self) -> crate::client::ClientOptions {
        crate::client::ClientOptions {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            user: self.user.clone(),
            password_file: self.password_file.clone(),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Time between two screens; the rates are over it (the difference of
    /// two scrapes of /metrics), never since the daemon started.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_top_interval)]
    pub interval: std::time::Duration,

    /// Print one screen as plain text and exit (two scrapes --interval
    /// apart, then the findings), for scripts and tickets.
    #[arg(long)]
    pub once: bool,

    /// What rows are ordered by, largest first (`s` in the live view cycles
    /// through them).
    #[arg(long, value_name = "KEY", value_enum, default_value = "findings")]
    pub sort: crate::top::SortKey,

    /// Only workloads, process names and thread names containing TEXT
    /// (`/` in the live view).
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub filter: String,

    /// Thread names shown under each process name with --once, the busiest
    /// first.
    #[arg(long, value_name = "N", default_value = "5")]
    pub threads: usize,
}

/// --interval: 100ms to 1 hour.
fn parse_top_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d < std::time::Duration::from_millis(100) || d > std::time::Duration::from_secs(3600) {
        return Err(format!("{s}: give 100ms to 1h"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The README's table of `run`'s flags, made from the options table.
    fn run_flags_table() -> String {
        let cli = Cli::command();
        let run = cli.find_subcommand("run").expect("run");
        let mut out = String::from("| flag | default | meaning |\n|---|---|---|\n");
        for o in crate::config::options::OPTIONS {
            let arg = run
                .get_arguments()
                .chain(cli.get_arguments())
                .find(|a| a.get_id() == o.name)
                .unwrap_or_else(|| panic!("{} is no flag", o.name));
            let flag = match arg.get_value_names() {
                Some(v) if arg.get_action().takes_values() => format!("{} {}", o.flag(), v[0]),
                _ => o.flag(),
            };
            let default = match o.default_text() {
                Some(d) => format!("`{d}`"),
                None if matches!(arg.get_action(), clap::ArgAction::SetTrue) => "off".into(),
                None => String::new(),
            };
            out.push_str(&format!("| `{flag}` | {default} | {} |\n", o.help().replace('*', "\\*")));
        }
        out
    }

    #[test]
    fn the_readme_lists_every_run_flag_as_defined() {
        const START: &str = "<!-- generated from sonic-probe/src/config/options.rs";
        const END: &str = "<!-- end of the generated table -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme.find(START).expect("README has the generated table");
        let start = start + readme[start..].find('\n').unwrap() + 1;
        let end = readme.find(END).expect("README marks the table's end");
        let want = run_flags_table();
        if readme[start..end] != want && std::env::var_os("SONIC_PROBE_UPDATE_DOCS").is_some() {
            std::fs::write(path, format!("{}{want}{}", &readme[..start], &readme[end..])).unwrap();
            return;
        }
        assert_eq!(
            readme[start..end],
            want,
            "README's table of run flags is not the options table's: SONIC_PROBE_UPDATE_DOCS=1 \
             cargo test -p sonic-probe readme rewrites it"
        );
    }

    /// The command's about, trace's -e and run's --syscalls name every
    /// row of the syscall table, none by hand.
    #[test]
    fn help_texts_name_every_traced_call() {
        let cli = Cli::command();
        let about = cli.get_about().expect("about").to_string();
        let help = |sub: &str, arg: &str| {
            let c = cli.find_subcommand(sub).expect(sub);
            let a = c.get_arguments().find(|a| a.get_id() == arg).expect(arg);
            a.get_help().expect("help").to_string()
        };
        let (expr, list) = (help("trace", "expr"), help("run", "syscalls"));
        for row in syscalls::SYSCALLS {
            for (what, text) in [("about", &about), ("trace -e", &expr), ("run --syscalls", &list)] {
                assert!(
                    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|w| w == row.name),
                    "{what} does not name {}: {text}",
                    row.name
                );
            }
        }
        assert!(!list.contains('{'), "{list}");
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
