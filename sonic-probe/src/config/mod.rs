//! Turns `run`'s options (its flags over its config file over the defaults,
//! all defined in `options.rs`) into a validated run configuration.
//!
//! Every check on user input happens here, before anything is loaded into
//! the kernel, so that bad input costs one clear line and exit code 2 and
//! never leaves a probe attached. The spellings of values (durations, sizes,
//! addresses) are parsed in `units.rs`, shared by flags and keys.

pub mod cli;
pub mod file;
pub mod options;
pub mod units;

use std::{net::SocketAddr, time::Duration};

use crate::{
    config::options::{flag, RunArgs},
    error::{Error, Result},
    findings::{cpu_starved, futex_stall, gpu_wait, mmap_churn, repeated_open, small_reads, Settings},
    probe::targets::Targets,
};

/// Everything `sonic-probe run` needs, checked.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub targets: Targets,
    pub listen: SocketAddr,
    pub slow_call: Duration,
    pub large_map_bytes: u64,
    pub small_read_bytes: u64,
    pub max_comms: usize,
    /// Thread names with their own `thread` label, per process name.
    pub max_thread_names: usize,
    /// Where each watched thread's time goes (`--thread-time`).
    pub thread_time: bool,
    /// Uprobes on CUDA's waiting calls (`--gpu-waits`).
    pub gpu_waits: bool,
    /// Library files that get them at most.
    pub gpu_max_libraries: usize,
    /// Where workloads come from, and where their names are read.
    pub workloads: crate::workloads::WorkloadSettings,
    pub ringbuf_bytes: u32,
    /// Syscall indices traced (probe_config.syscall_mask).
    pub syscalls: u32,
    pub bpf_stats: bool,
    pub findings: Settings,
    /// The config file, re-read on SIGHUP.
    pub config_file: Option<std::path::PathBuf>,
    /// BTF file to use instead of /sys/kernel/btf/vmlinux.
    pub btf: Option<std::path::PathBuf>,
    pub log_level: String,
    /// TLS and users of the HTTP endpoint (checked; re-read on SIGHUP).
    pub web: std::sync::Arc<crate::web::web_config::WebConfig>,
    /// How much of a path /findings shows.
    pub findings_paths: crate::findings::PathDisplay,
    /// Stacks captured while stalls last (`--stack-captures`).
    pub stack_captures: bool,
    /// At most one capture per process per this long.
    pub stack_capture_interval: Duration,
}

/// Largest ring buffer accepted (the kernel allows more; nobody needs it).
pub const MAX_RINGBUF_BYTES: u64 = 1 << 30;
/// Smallest ring buffer: one page.
pub const MIN_RINGBUF_BYTES: u64 = 4096;
/// Upper bound of --max-comms, to keep label cardinality sane.
pub const MAX_COMM_LABELS: usize = 100_000;
/// Upper bound of --max-thread-names: thread names per process name.
pub const MAX_THREAD_NAME_LABELS: usize = 10_000;
/// Upper bound of --max-workloads: a node runs tens of services, not thousands.
pub const MAX_WORKLOAD_LABELS: usize = 4096;

impl RunConfig {
    /// The configuration of `run`: its flags over its config file (if any).
    pub fn load(cli: &RunArgs, cli_log_level: Option<&str>) -> Result<Self> {
        let file = match &cli.config {
            Some(p) => crate::config::file::load(p)?,
            None => RunArgs::default(),
        };
        // --log-level is global to every command: the one flag not in RunArgs.
        let cli = RunArgs { log_level: cli_log_level.map(str::to_string), ..cli.clone() };
        RunConfig::from_args(&cli.over(&file))
    }

    /// Checks merged options and fills in the defaults.
    pub fn from_args(args: &RunArgs) -> Result<Self> {
        let targets = Targets::resolve(&args.pid, &args.comm, &args.cgroup)?;
        let a = args.with_defaults();
        Ok(RunConfig {
            targets,
            listen: given(a.listen),
            slow_call: given(a.slow_threshold),
            large_map_bytes: given(a.large_map_threshold),
            small_read_bytes: given(a.small_read_threshold),
            max_comms: check_max_comms(given(a.max_comms))?,
            max_thread_names: check_max_thread_names(given(a.max_thread_names))?,
            thread_time: given(a.thread_time).is_on(),
            gpu_waits: given(a.gpu_waits).is_on(),
            gpu_max_libraries: check_gpu_max_libraries(given(a.gpu_max_libraries))?,
            workloads: crate::workloads::WorkloadSettings::new(
                given(a.workload_from),
                crate::os::procfs::cgroup2_mount(),
                given(a.containers_log_dir.clone()),
                check_max_workloads(given(a.max_workloads))?,
            )
            .map_err(Error::usage)?,
            ringbuf_bytes: check_ringbuf_size(given(a.ringbuf_size))?,
            syscalls: check_syscalls(given(a.syscalls))?,
            bpf_stats: a.bpf_stats,
            findings: findings_settings(&a)?,
            config_file: a.config.clone(),
            btf: a.btf.clone(),
            log_level: given(a.log_level),
            web: std::sync::Arc::new(match &a.web_config {
                Some(p) => crate::web::web_config::WebConfig::load(p)
                    .map_err(|e| Error::usage(format!("{} {}: {e}", flag!(web_config), p.display())))?,
                None => crate::web::web_config::WebConfig::none(),
            }),
            findings_paths: given(a.findings_paths),
            stack_captures: given(a.stack_captures).is_on(),
            stack_capture_interval: check_capture_interval(given(a.stack_capture_interval))?,
        })
    }

    /// What the stack capturer needs of the options.
    pub fn capture_settings(&self) -> crate::stacks::capture::CaptureSettings {
        crate::stacks::capture::CaptureSettings {
            stall_threshold: self.findings.futex_stall.threshold,
            request_threads: self.findings.futex_stall.threads.clone(),
            ignore_threads: self.findings.futex_stall.ignore_threads.clone(),
            interval: self.stack_capture_interval,
            window: self.findings.window,
        }
    }

    /// The threshold the kernel sends slow calls at: low enough for every
    /// detector that needs them.
    pub fn kernel_slow_threshold(&self) -> Duration {
        self.slow_call.min(self.findings.futex_stall.threshold)
    }
}

/// The value of an option that has a default, after `with_defaults`.
fn given<T>(value: Option<T>) -> T {
    value.expect("every option with a default is set by RunArgs::with_defaults")
}

fn findings_settings(a: &RunArgs) -> Result<Settings> {
    let a = &a.with_defaults();
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
    // A share of a thread's time (cpu_starved, gpu_wait) and its window.
    let share = |flag: &str, s: f64| {
        if s > 0.0 && s <= 1.0 {
            Ok(s)
        } else {
            Err(Error::usage(format!("{flag} {s}: must be above 0 and at most 1")))
        }
    };
    let window = |flag: &str, w: Duration| {
        if w >= Duration::from_secs(1) {
            Ok(w)
        } else {
            Err(Error::usage(format!("{flag} {}: must be at least 1s", humantime::format_duration(w))))
        }
    };
    let large = given(a.large_map_threshold);
    if large == 0 {
        return Err(Error::usage(format!("{} 0: must be at least 1 byte", flag!(large_map_threshold))));
    }
    Ok(Settings {
        window: positive(&flag!(findings_window), given(a.findings_window))?,
        max_findings: at_least_one(&flag!(max_findings), given(a.max_findings) as u64)? as usize,
        futex_stall: futex_stall::Settings {
            threshold: positive(&flag!(stall_threshold), given(a.stall_threshold))?,
            threads: patterns(&flag!(stall_thread), &a.stall_thread)?,
            ignore_threads: patterns(&flag!(stall_ignore_thread), &a.stall_ignore_thread)?,
        },
        repeated_open: repeated_open::Settings {
            count: at_least_one(&flag!(repeated_open_count), given(a.repeated_open_count))?,
            window: positive(&flag!(repeated_open_window), given(a.repeated_open_window))?,
        },
        small_reads: small_reads::Settings {
            bytes: given(a.small_read_threshold),
            min_count: at_least_one(&flag!(small_read_min_count), given(a.small_read_min_count))?,
        },
        mmap_churn: mmap_churn::Settings {
            bytes: large,
            window: positive(&flag!(churn_window), given(a.churn_window))?,
            cycles: at_least_one(&flag!(churn_cycles), given(a.churn_cycles))?,
        },
        cpu_starved: cpu_starved::Settings {
            share: share(&flag!(starved_share), given(a.starved_share))?,
            window: window(&flag!(starved_window), given(a.starved_window))?,
        },
        gpu_wait: gpu_wait::Settings {
            share: share(&flag!(gpu_wait_share), given(a.gpu_wait_share))?,
            window: window(&flag!(gpu_wait_window), given(a.gpu_wait_window))?,
        },
        ignore_paths: {
            let mut p = crate::findings::default_ignore_paths();
            p.extend(patterns(&flag!(ignore_path), &a.ignore_path)?);
            p
        },
        verbose: a.findings_verbose,
    })
}

/// Longest --stack-capture-interval: a day (longer is "never again").
pub const MAX_CAPTURE_INTERVAL: Duration = Duration::from_secs(86_400);

fn check_capture_interval(d: Duration) -> Result<Duration> {
    if d < Duration::from_secs(1) || d > MAX_CAPTURE_INTERVAL {
        return Err(Error::usage(format!(
            "{} {}: must be between 1s and 1day",
            flag!(stack_capture_interval),
            humantime::format_duration(d)
        )));
    }
    Ok(d)
}

fn check_max_comms(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_COMM_LABELS {
        return Err(Error::usage(format!(
            "{} {n}: must be between 1 and {MAX_COMM_LABELS}",
            flag!(max_comms)
        )));
    }
    Ok(n)
}

fn check_max_thread_names(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_THREAD_NAME_LABELS {
        return Err(Error::usage(format!(
            "{} {n}: must be between 1 and {MAX_THREAD_NAME_LABELS}",
            flag!(max_thread_names)
        )));
    }
    Ok(n)
}

/// Library files with GPU probes at most: each is an entry and a return
/// probe per waiting call (about 50 perf events).
const MAX_GPU_LIBRARIES: usize = 1024;

fn check_gpu_max_libraries(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_GPU_LIBRARIES {
        return Err(Error::usage(format!(
            "{} {n}: must be between 1 and {MAX_GPU_LIBRARIES} (--gpu-waits off turns GPU probes off)",
            flag!(gpu_max_libraries)
        )));
    }
    Ok(n)
}

fn check_max_workloads(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_WORKLOAD_LABELS {
        return Err(Error::usage(format!(
            "{} {n}: must be between 1 and {MAX_WORKLOAD_LABELS}",
            flag!(max_workloads)
        )));
    }
    Ok(n)
}

/// The traced set: rows of the table only (the parser makes no other bits),
/// and at least one.
fn check_syscalls(mask: u32) -> Result<u32> {
    let known = sonic_probe_common::syscalls::all_mask();
    if mask == 0 || mask & !known != 0 {
        return Err(Error::usage(format!(
            "{}: {mask:#x} is not a set of traced system calls",
            flag!(syscalls)
        )));
    }
    Ok(mask)
}

pub fn check_ringbuf_size(bytes: u64) -> Result<u32> {
    if !(MIN_RINGBUF_BYTES..=MAX_RINGBUF_BYTES).contains(&bytes) || !bytes.is_power_of_two() {
        return Err(Error::usage(format!(
            "{} {bytes}: must be a power of two between 4KiB and 1GiB",
            flag!(ringbuf_size)
        )));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ringbuf_sizes() {
        assert_eq!(check_ringbuf_size(4 << 20).unwrap(), 4 << 20);
        assert!(check_ringbuf_size(4096).is_ok());
        for bad in [0, 1000, 3 << 20, 2 << 30] {
            assert!(matches!(check_ringbuf_size(bad), Err(Error::Usage(_))), "{bad}");
        }
    }

    /// The detectors' settings when every option has its default.
    impl Default for Settings {
        fn default() -> Self {
            findings_settings(&RunArgs::default()).expect("the defaults are valid")
        }
    }

    fn run_args(extra: &[&str]) -> RunArgs {
        use clap::Parser;
        let mut argv = vec!["sonic-probe", "run"];
        argv.extend_from_slice(extra);
        match crate::config::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::config::cli::Command::Run(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn findings_settings_defaults_and_checks() {
        let s = findings_settings(&run_args(&[])).unwrap();
        assert_eq!(s.futex_stall.threshold, Duration::from_secs(1));
        assert_eq!((s.repeated_open.count, s.mmap_churn.cycles, s.small_reads.bytes), (3, 2, 4096));
        assert_eq!(s.mmap_churn.bytes, 16 << 20);
        assert_eq!(s.window, Duration::from_secs(600));
        let s =
            findings_settings(&run_args(&["--stall-thread", "pt_*", "--stall-threshold", "250ms"])).unwrap();
        assert!(s.futex_stall.threads[0].matches("pt_main"));
        assert_eq!(s.futex_stall.threshold, Duration::from_millis(250));
        for bad in [
            &["--stall-thread", "[x"][..],
            &["--repeated-open-count", "0"],
            &["--churn-cycles", "0"],
            &["--starved-share", "0"],
            &["--starved-share", "1.5"],
            &["--starved-window", "500ms"],
            &["--gpu-wait-share", "0"],
            &["--gpu-wait-share", "1.01"],
            &["--gpu-wait-window", "999ms"],
            &["--stall-threshold", "0s"],
            &["--max-findings", "0"],
            &["--large-map-threshold", "0"],
        ] {
            assert!(matches!(findings_settings(&run_args(bad)), Err(Error::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        let file = crate::config::file::parse(
            "listen = \"0.0.0.0:9580\"\ncomm = [\"python3\"]\nstall_threshold = \"2s\"\nbpf_stats = true\nlog_level = \"debug\"\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let cli = run_args(&["--listen", "127.0.0.1:1", "--comm", "dd"]);
        let m = cli.over(&file);
        assert_eq!(m.listen.unwrap().port(), 1);
        assert_eq!(m.comm, vec!["dd".to_string()]);
        assert_eq!(m.stall_threshold, Some(Duration::from_secs(2)));
        assert!(m.bpf_stats);
        let c = RunConfig::from_args(&run_args(&[]).over(&file)).unwrap();
        assert_eq!(c.listen.port(), 9580);
        assert_eq!(c.targets.comms, vec!["python3".to_string()]);
        let c = RunConfig::from_args(&run_args(&[])).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:9580");
        assert_eq!(c.slow_call, Duration::from_millis(100));
        assert_eq!(c.ringbuf_bytes, 4 << 20);
        assert_eq!(c.syscalls, sonic_probe_common::syscalls::default_mask());
    }

    #[test]
    fn syscall_sets() {
        use sonic_probe_common::syscalls::{self, mask_of};
        let c = RunConfig::from_args(&run_args(&["--syscalls", "default,write,ioctl"])).unwrap();
        assert_eq!(c.syscalls, syscalls::default_mask() | mask_of([syscalls::WRITE, syscalls::IOCTL]));
        let file = crate::config::file::parse(
            "syscalls = [\"read\", \"pread64\"]\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let c = RunConfig::from_args(&run_args(&[]).over(&file)).unwrap();
        assert_eq!(c.syscalls, mask_of([syscalls::READ, syscalls::PREAD64]));
        assert!(
            crate::config::file::parse("syscalls = \"sendmsg\"\n", std::path::Path::new("x.toml")).is_err()
        );
        use clap::Parser;
        assert!(crate::config::cli::Cli::try_parse_from(["sonic-probe", "run", "--syscalls", ","]).is_err());
        assert!(check_syscalls(1 << 31).is_err());
    }

    #[test]
    fn max_workloads_bounds() {
        assert!(check_max_workloads(0).is_err());
        assert!(check_max_workloads(1).is_ok());
        assert!(check_max_workloads(MAX_WORKLOAD_LABELS).is_ok());
        assert!(check_max_workloads(MAX_WORKLOAD_LABELS + 1).is_err());
    }

    #[test]
    fn stack_capture_options() {
        let c = RunConfig::from_args(&run_args(&[])).unwrap();
        assert!(c.stack_captures);
        assert_eq!(c.stack_capture_interval, Duration::from_secs(10));
        let c =
            RunConfig::from_args(&run_args(&["--stack-captures", "off", "--stack-capture-interval", "1m"]))
                .unwrap();
        assert!(!c.stack_captures);
        assert_eq!(c.stack_capture_interval, Duration::from_secs(60));
        for bad in ["0s", "500ms", "2days"] {
            let r = RunConfig::from_args(&run_args(&["--stack-capture-interval", bad]));
            assert!(matches!(r, Err(Error::Usage(_))), "{bad}");
        }
        use clap::Parser;
        assert!(crate::config::cli::Cli::try_parse_from(["sonic-probe", "run", "--stack-captures", "maybe"])
            .is_err());
        for (text, on) in [("\"off\"", false), ("false", false), ("\"on\"", true), ("true", true)] {
            let file = crate::config::file::parse(
                &format!("stack_captures = {text}\n"),
                std::path::Path::new("x.toml"),
            )
            .unwrap();
            assert_eq!(RunConfig::from_args(&file).unwrap().stack_captures, on, "{text}");
        }
        assert!(crate::config::file::parse("stack_captures = \"maybe\"\n", std::path::Path::new("x.toml"))
            .is_err());
    }

    #[test]
    fn max_comms_bounds() {
        assert!(check_max_comms(0).is_err());
        assert!(check_max_comms(1).is_ok());
        assert!(check_max_comms(MAX_COMM_LABELS + 1).is_err());
    }
}
