//! Turns raw command-line arguments into a validated run configuration.
//!
//! Every check on user input happens here, before anything is loaded into
//! the kernel, so that bad input costs one clear line and exit code 2 and
//! never leaves a probe attached. The value parsers are shared by clap (and
//! later the config file) so a flag and a key accept the same spellings.

use std::{net::SocketAddr, time::Duration};

use crate::{
    cli::RunArgs,
    config_file::FileOptions,
    error::{Error, Result},
    findings::Settings,
    targets::Targets,
};

/// Defaults of the options (also written in their --help).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9580";
pub const DEFAULT_SLOW_THRESHOLD: Duration = Duration::from_millis(100);
pub const DEFAULT_LARGE_MAP_THRESHOLD: u64 = 16 << 20;
pub const DEFAULT_SMALL_READ_THRESHOLD: u64 = 4 << 10;
pub const DEFAULT_MAX_COMMS: usize = 256;
pub const DEFAULT_RINGBUF_BYTES: u64 = sonic_probe_common::DEFAULT_RINGBUF_BYTES as u64;
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(1);
pub const DEFAULT_REPEATED_OPEN_COUNT: u64 = 3;
pub const DEFAULT_REPEATED_OPEN_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_SMALL_READ_MIN_COUNT: u64 = 8;
pub const DEFAULT_CHURN_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_CHURN_CYCLES: u64 = 2;
pub const DEFAULT_FINDINGS_WINDOW: Duration = Duration::from_secs(600);
pub const DEFAULT_MAX_FINDINGS: usize = 1000;
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// The command line over the config file: a flag given wins; a list given
/// on the command line replaces the file's.
pub fn merge(cli: &RunArgs, file: &FileOptions) -> RunArgs {
    fn list<T: Clone>(c: &[T], f: &[T]) -> Vec<T> {
        if c.is_empty() {
            f.to_vec()
        } else {
            c.to_vec()
        }
    }
    RunArgs {
        config: cli.config.clone(),
        pid: list(&cli.pid, &file.pid),
        comm: list(&cli.comm, &file.comm),
        cgroup: list(&cli.cgroup, &file.cgroup),
        listen: cli.listen.or(file.listen),
        slow_threshold: cli.slow_threshold.or(file.slow_threshold),
        large_map_threshold: cli.large_map_threshold.or(file.large_map_threshold),
        small_read_threshold: cli.small_read_threshold.or(file.small_read_threshold),
        max_comms: cli.max_comms.or(file.max_comms),
        ringbuf_size: cli.ringbuf_size.or(file.ringbuf_size),
        stall_threshold: cli.stall_threshold.or(file.stall_threshold),
        stall_thread: list(&cli.stall_thread, &file.stall_thread),
        stall_ignore_thread: list(&cli.stall_ignore_thread, &file.stall_ignore_thread),
        repeated_open_count: cli.repeated_open_count.or(file.repeated_open_count),
        repeated_open_window: cli.repeated_open_window.or(file.repeated_open_window),
        small_read_min_count: cli.small_read_min_count.or(file.small_read_min_count),
        churn_window: cli.churn_window.or(file.churn_window),
        churn_cycles: cli.churn_cycles.or(file.churn_cycles),
        ignore_path: list(&cli.ignore_path, &file.ignore_path),
        findings_window: cli.findings_window.or(file.findings_window),
        max_findings: cli.max_findings.or(file.max_findings),
        btf: cli.btf.clone().or_else(|| file.btf.clone()),
        bpf_stats: cli.bpf_stats || file.bpf_stats.unwrap_or(false),
    }
}

/// Everything `sonic-probe run` needs, checked.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub targets: Targets,
    pub listen: SocketAddr,
    pub slow_call: Duration,
    pub large_map_bytes: u64,
    pub small_read_bytes: u64,
    pub max_comms: usize,
    pub ringbuf_bytes: u32,
    pub bpf_stats: bool,
    pub findings: Settings,
    /// The config file, re-read on SIGHUP.
    pub config_file: Option<std::path::PathBuf>,
    /// BTF file to use instead of /sys/kernel/btf/vmlinux.
    pub btf: Option<std::path::PathBuf>,
    pub log_level: String,
}

/// Largest ring buffer accepted (the kernel allows more; nobody needs it).
pub const MAX_RINGBUF_BYTES: u64 = 1 << 30;
/// Smallest ring buffer: one page.
pub const MIN_RINGBUF_BYTES: u64 = 4096;
/// Upper bound of --max-comms, to keep label cardinality sane.
pub const MAX_COMM_LABELS: usize = 100_000;

impl RunConfig {
    /// The configuration of `run`: its flags over its config file (if any).
    pub fn load(cli: &RunArgs, cli_log_level: Option<&str>) -> Result<Self> {
        let file = match &cli.config {
            Some(p) => crate::config_file::load(p)?,
            None => FileOptions::default(),
        };
        let mut c = RunConfig::from_args(&merge(cli, &file))?;
        c.log_level =
            cli_log_level.map(str::to_string).or(file.log_level).unwrap_or(DEFAULT_LOG_LEVEL.into());
        Ok(c)
    }

    /// Checks merged options and fills in the defaults.
    pub fn from_args(args: &RunArgs) -> Result<Self> {
        let targets = Targets::resolve(&args.pid, &args.comm, &args.cgroup)?;
        Ok(RunConfig {
            targets,
            listen: args.listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
            slow_call: args.slow_threshold.unwrap_or(DEFAULT_SLOW_THRESHOLD),
            large_map_bytes: args.large_map_threshold.unwrap_or(DEFAULT_LARGE_MAP_THRESHOLD),
            small_read_bytes: args.small_read_threshold.unwrap_or(DEFAULT_SMALL_READ_THRESHOLD),
            max_comms: check_max_comms(args.max_comms.unwrap_or(DEFAULT_MAX_COMMS))?,
            ringbuf_bytes: check_ringbuf_size(args.ringbuf_size.unwrap_or(DEFAULT_RINGBUF_BYTES))?,
            bpf_stats: args.bpf_stats,
            findings: findings_settings(args)?,
            config_file: args.config.clone(),
            btf: args.btf.clone(),
            log_level: DEFAULT_LOG_LEVEL.into(),
        })
    }

    /// The threshold the kernel sends slow calls at: low enough for every
    /// detector that needs them.
    pub fn kernel_slow_threshold(&self) -> Duration {
        self.slow_call.min(self.findings.stall_threshold)
    }
}

fn findings_settings(a: &RunArgs) -> Result<Settings> {
    let patterns = |flag: &str, globs: &[String]| -> Result<Vec<glob::Pattern>> {
        globs
            .iter()
            .map(|g| {
                glob::Pattern::new(g)
                    .map_err(|e| Error::usage(format!("{flag} '{g}': not a glob pattern ({e})")))
            })
            .collect()
    };
    let at_least_one = |flag: &str, n: u64| {
        if n == 0 {
            Err(Error::usage(format!("{flag} 0: must be at least 1")))
        } else {
            Ok(n)
        }
    };
    let positive = |flag: &str, d: Duration| {
        if d.is_zero() {
            Err(Error::usage(format!("{flag}: must be longer than 0")))
        } else {
            Ok(d)
        }
    };
    let large = a.large_map_threshold.unwrap_or(DEFAULT_LARGE_MAP_THRESHOLD);
    if large == 0 {
        return Err(Error::usage("--large-map-threshold 0: must be at least 1 byte"));
    }
    Ok(Settings {
        window: positive("--findings-window", a.findings_window.unwrap_or(DEFAULT_FINDINGS_WINDOW))?,
        max_findings: at_least_one("--max-findings", a.max_findings.unwrap_or(DEFAULT_MAX_FINDINGS) as u64)?
            as usize,
        stall_threshold: positive("--stall-threshold", a.stall_threshold.unwrap_or(DEFAULT_STALL_THRESHOLD))?,
        stall_threads: patterns("--stall-thread", &a.stall_thread)?,
        stall_ignore_threads: patterns("--stall-ignore-thread", &a.stall_ignore_thread)?,
        repeated_open_count: at_least_one(
            "--repeated-open-count",
            a.repeated_open_count.unwrap_or(DEFAULT_REPEATED_OPEN_COUNT),
        )?,
        repeated_open_window: positive(
            "--repeated-open-window",
            a.repeated_open_window.unwrap_or(DEFAULT_REPEATED_OPEN_WINDOW),
        )?,
        small_read_bytes: a.small_read_threshold.unwrap_or(DEFAULT_SMALL_READ_THRESHOLD),
        small_read_min_count: at_least_one(
            "--small-read-min-count",
            a.small_read_min_count.unwrap_or(DEFAULT_SMALL_READ_MIN_COUNT),
        )?,
        churn_bytes: large,
        churn_window: positive("--churn-window", a.churn_window.unwrap_or(DEFAULT_CHURN_WINDOW))?,
        churn_cycles: at_least_one("--churn-cycles", a.churn_cycles.unwrap_or(DEFAULT_CHURN_CYCLES))?,
        ignore_paths: {
            let mut p = crate::findings::default_ignore_paths();
            p.extend(patterns("--ignore-path", &a.ignore_path)?);
            p
        },
    })
}

fn check_max_comms(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_COMM_LABELS {
        return Err(Error::usage(format!("--max-comms {n}: must be between 1 and {MAX_COMM_LABELS}")));
    }
    Ok(n)
}

pub fn check_ringbuf_size(bytes: u64) -> Result<u32> {
    if !(MIN_RINGBUF_BYTES..=MAX_RINGBUF_BYTES).contains(&bytes) || !bytes.is_power_of_two() {
        return Err(Error::usage(format!(
            "--ringbuf-size {bytes}: must be a power of two between 4KiB and 1GiB"
        )));
    }
    Ok(bytes as u32)
}

/// Longest duration any option takes: thresholds and windows are kept in
/// nanoseconds as u64 (584 years); a year is more than any use needs.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A duration such as `100ms`, `1s`, `2.5s`, `1m30s`, at most a year.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.strip_suffix('s').and_then(|n| n.parse::<f64>().ok()) {
        // humantime has no fractions; "2.5s" is common enough to accept.
        Some(secs) if (0.0..1e9).contains(&secs) => Duration::from_secs_f64(secs),
        _ => humantime::parse_duration(s)
            .map_err(|e| format!("'{s}' is not a duration ({e}); use e.g. 500us, 100ms, 1s, 2.5s, 1m"))?,
    };
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year, the longest duration sonic-probe takes"));
    }
    Ok(d)
}

/// A size in bytes: `4096`, `64KiB`, `16MiB`, `1GiB` (also K/M/G, KB/MB/GB as
/// powers of 1024, as `free` and `ls -h` do).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("'{s}' is not a size; use e.g. 4096, 64KiB, 16MiB, 1GiB");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

/// An `IP:PORT` socket address.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.trim().parse().map_err(|_| {
        format!("'{s}' is not an address to listen on; use IP:PORT, e.g. 127.0.0.1:9580 or [::]:9580")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["", "fast", "-1s", "1 parsec", "1e99s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Found by the config fuzzer: huge values wrapped to short windows
        // where they were turned into nanoseconds.
        assert_eq!(parse_duration("365days").unwrap(), MAX_DURATION);
        for huge in ["1000years", "366days", "99999999s"] {
            assert!(parse_duration(huge).unwrap_err().contains("longer than a year"), "{huge}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("1 GiB").unwrap(), 1 << 30);
        for bad in ["", "MiB", "-5", "1.5MiB", "12 parsecs", "99999999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("127.0.0.1:9580").unwrap().port(), 9580);
        assert!(parse_listen("[::]:0").is_ok());
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("1.2.3.4:99999").is_err());
    }

    #[test]
    fn ringbuf_sizes() {
        assert_eq!(check_ringbuf_size(4 << 20).unwrap(), 4 << 20);
        assert!(check_ringbuf_size(4096).is_ok());
        for bad in [0, 1000, 3 << 20, 2 << 30] {
            assert!(matches!(check_ringbuf_size(bad), Err(Error::Usage(_))), "{bad}");
        }
    }

    fn run_args(extra: &[&str]) -> RunArgs {
        use clap::Parser;
        let mut argv = vec!["sonic-probe", "run"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn findings_settings_defaults_and_checks() {
        let s = findings_settings(&run_args(&[])).unwrap();
        assert_eq!(s.stall_threshold, Duration::from_secs(1));
        assert_eq!((s.repeated_open_count, s.churn_cycles, s.small_read_bytes), (3, 2, 4096));
        assert_eq!(s.churn_bytes, 16 << 20);
        assert_eq!(s.window, Duration::from_secs(600));
        let s =
            findings_settings(&run_args(&["--stall-thread", "pt_*", "--stall-threshold", "250ms"])).unwrap();
        assert!(s.stall_threads[0].matches("pt_main"));
        assert_eq!(s.stall_threshold, Duration::from_millis(250));
        for bad in [
            &["--stall-thread", "[x"][..],
            &["--repeated-open-count", "0"],
            &["--churn-cycles", "0"],
            &["--stall-threshold", "0s"],
            &["--max-findings", "0"],
            &["--large-map-threshold", "0"],
        ] {
            assert!(matches!(findings_settings(&run_args(bad)), Err(Error::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        let file = crate::config_file::parse(
            "listen = \"0.0.0.0:9580\"\ncomm = [\"python3\"]\nstall_threshold = \"2s\"\nbpf_stats = true\nlog_level = \"debug\"\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let cli = run_args(&["--listen", "127.0.0.1:1", "--comm", "dd"]);
        let m = merge(&cli, &file);
        assert_eq!(m.listen.unwrap().port(), 1);
        assert_eq!(m.comm, vec!["dd".to_string()]);
        assert_eq!(m.stall_threshold, Some(Duration::from_secs(2)));
        assert!(m.bpf_stats);
        let c = RunConfig::from_args(&merge(&run_args(&[]), &file)).unwrap();
        assert_eq!(c.listen.port(), 9580);
        assert_eq!(c.targets.comms, vec!["python3".to_string()]);
        let c = RunConfig::from_args(&run_args(&[])).unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.slow_call, DEFAULT_SLOW_THRESHOLD);
        assert_eq!(c.ringbuf_bytes as u64, DEFAULT_RINGBUF_BYTES);
    }

    #[test]
    fn max_comms_bounds() {
        assert!(check_max_comms(0).is_err());
        assert!(check_max_comms(1).is_ok());
        assert!(check_max_comms(MAX_COMM_LABELS + 1).is_err());
    }
}
