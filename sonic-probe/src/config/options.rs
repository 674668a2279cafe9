//! `sonic-probe run`'s options, each defined once.
//!
//! One entry of the table below is all an option is: its doc (the `--help`
//! text and the README row), its flag (clap's `arg`), its config-file key
//! (the field's name; serde's attributes say how its value is read) and its
//! default. From the table come the clap arguments, the config file's
//! struct, the merge (a flag given wins over the file, the file over the
//! default), the defaults and the documentation. Checks of the values live
//! in `config/mod.rs`: a new option is one entry here plus its check there.
//!
//! A default is written as its TOML value and read the way the config file
//! is read, so a default is spelled like a key and can't disagree with it.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use serde::{de::Error as _, Deserialize, Deserializer};

use crate::{
    config::units::{parse_duration, parse_listen, parse_size, parse_syscalls},
    findings::PathDisplay,
    workloads::WorkloadFrom,
};

/// A switch given as `on` or `off` (in the config file also `true` or
/// `false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Bool(bool),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Bool(b) => Ok(if b { OnOff::On } else { OnOff::Off }),
            Given::Text(t) => match t.as_str() {
                "on" | "true" => Ok(OnOff::On),
                "off" | "false" => Ok(OnOff::Off),
                _ => Err(D::Error::custom(format!("'{t}' is not on or off"))),
            },
        }
    }
}

/// One option's documentation: what the README table and `--help` show.
#[derive(Debug, Clone, Copy)]
pub struct OptionDoc {
    /// The field: the key of the config file; the flag is it with `-`.
    pub name: &'static str,
    /// Its help text, one doc line per item.
    pub doc: &'static [&'static str],
    /// Its default as written in TOML (`"100ms"`, `256`), if it has one.
    pub default: Option<&'static str>,
}

impl OptionDoc {
    /// The help text on one line, without the default; the syscall table's
    /// lists where the doc says `{default_syscalls}` or `{opt_in_syscalls}`.
    pub fn help(&self) -> String {
        let text = self.doc.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        if !text.contains('{') {
            return text;
        }
        text.replace("{default_syscalls}", &default_syscalls_text())
            .replace("{opt_in_syscalls}", &opt_in_syscalls_text())
    }

    /// The default as a user writes it on the command line (`100ms`).
    pub fn default_text(&self) -> Option<&'static str> {
        self.default.map(|d| d.trim_matches('"'))
    }

    /// The flag: `--slow-threshold`.
    pub fn flag(&self) -> String {
        flag_of(self.name)
    }
}

/// The flag of the option whose field is `$field` (`flag!(slow_threshold)`
/// is `--slow-threshold`), from the option's one definition, for messages
/// about its value; a name that is not an option does not compile.
macro_rules! flag {
    ($field:ident) => {{
        let _ = |a: &$crate::config::options::RunArgs| {
            let _ = &a.$field;
        };
        $crate::config::options::flag_of(stringify!($field))
    }};
}
pub(crate) use flag;

/// The flag of the option `field` ([`flag!`]).
pub fn flag_of(field: &str) -> String {
    format!("--{}", field.replace('_', "-"))
}

/// `a, b and c`.
fn spoken_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The calls `run` traces by default (`--syscalls default`), from the
/// syscall table, in its order: `futex, openat, ... and pread64`.
pub fn default_syscalls_text() -> String {
    use sonic_probe_common::syscalls;
    spoken_list(&syscalls::names_of(syscalls::default_mask()))
}

/// The calls `run` traces only when `--syscalls` names them.
pub fn opt_in_syscalls_text() -> String {
    use sonic_probe_common::syscalls;
    spoken_list(&syscalls::names_of(syscalls::all_mask() & !syscalls::default_mask()))
}

/// Defines [`RunArgs`] and [`OPTIONS`] from one list of options: each is
/// doc lines, `#[arg(..)]` (clap), optionally `#[serde(..)]`, then
/// `name: Type` and optionally `= default` (a TOML value).
macro_rules! run_options {
    ($(
        $(#[doc = $doc:literal])+
        #[arg($($arg:tt)*)]
        $(#[serde($($serde:tt)*)])?
        $field:ident : $ty:ty $(= $default:literal)?;
    )*) => {
        /// `sonic-probe run`'s options as given on its command line, in a
        /// config file, or both merged: `None` or empty is "not given".
        #[derive(clap::Args, Deserialize, Debug, Clone, Default, PartialEq)]
        #[command(mut_args(with_help_from_table))]
        #[serde(default, deny_unknown_fields)]
        pub struct RunArgs {
            $(
                $(#[doc = $doc])+
                #[arg($($arg)*)]
                $(#[serde($($serde)*)])?
                pub $field: $ty,
            )*
        }

        /// Every option, in the order of the table.
        pub const OPTIONS: &[OptionDoc] = &[$(
            OptionDoc {
                name: stringify!($field),
                doc: &[$($doc),+],
                default: default_of(&[$(stringify!($default))?]),
            },
        )*];

        impl RunArgs {
            /// `self` over `lower`: an option given in `self` wins (a list
            /// given replaces the lower one; a switch is on if either is).
            pub fn over(&self, lower: &RunArgs) -> RunArgs {
                RunArgs { $($field: Merge::over(&self.$field, &lower.$field),)* }
            }
        }
    };
}

const fn default_of(d: &[&'static str]) -> Option<&'static str> {
    match d {
        [d] => Some(d),
        _ => None,
    }
}

run_options! {
    /// Read options from this TOML file (see deploy/config.toml); flags
    /// given on the command line override it. SIGHUP re-reads it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>;

    /// Watch this process: all its threads, and the processes it forks after
    /// attach (like strace -f). A thread id selects its whole process.
    /// Repeatable.
    #[arg(long, value_name = "PID", allow_negative_numbers = true)]
    pid: Vec<i64>;

    /// Watch processes with this name (the thread-group leader's comm, at
    /// most 15 bytes), those running now and those that take it later: by
    /// exec or by renaming themselves (prctl PR_SET_NAME, setproctitle); a
    /// process renamed away is no longer watched. Repeatable.
    #[arg(long, value_name = "NAME")]
    comm: Vec<String>;

    /// Watch processes in this cgroup v2 directory or below it: an absolute
    /// path (/sys/fs/cgroup/system.slice/x.service) or one relative to the
    /// cgroup2 mount (system.slice/x.service). Repeatable.
    #[arg(long, value_name = "PATH")]
    cgroup: Vec<String>;

    /// Address of the HTTP server (/metrics, /findings, /healthz). Port 0
    /// picks a free port; the ready log line says which.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    #[serde(deserialize_with = "listen")]
    listen: Option<SocketAddr> = "127.0.0.1:9580";

    /// Calls lasting at least this long are sent to user space one by one
    /// (slow-call events, logged at debug level).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    slow_threshold: Option<Duration> = "100ms";

    /// mmap/munmap calls of at least this size are large: sent to user space
    /// one by one, and the size of an mmap_churn cycle. Accepts B, KiB, MiB,
    /// GiB (and K, M, G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "size")]
    large_map_threshold: Option<u64> = "16MiB";

    /// Reads from files asking for fewer bytes than this are small reads
    /// (sonic_probe_small_reads_total, the small_reads finding).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "size")]
    small_read_threshold: Option<u64> = "4KiB";

    /// System calls to trace, by name, with `default` ({default_syscalls})
    /// and `all`: e.g. default,write,ioctl. {opt_in_syscalls} are off by
    /// default: on inference nodes they are the hottest calls (logging,
    /// sockets, the GPU driver) and each traced call costs a few hundred ns.
    /// Failures of write, pwrite64 and writev (a full disk) are counted and
    /// named whether they are traced or not; short writes (fewer bytes
    /// written than asked: a disk filling up) where write or pwrite64 is
    /// traced. SIGHUP changes it.
    #[arg(long, value_name = "LIST", value_parser = parse_syscalls)]
    #[serde(deserialize_with = "syscalls")]
    syscalls: Option<u32> = "default";

    /// Distinct process names exported as their own `comm` label; further
    /// names are exported as comm="other".
    #[arg(long, value_name = "N")]
    max_comms: Option<usize> = 256;

    /// Distinct thread names exported as their own `thread` label of
    /// sonic_probe_thread_seconds_total, per process name; further names of
    /// that process name are exported as thread="other".
    #[arg(long, value_name = "N")]
    max_thread_names: Option<usize> = 64;

    /// Account where each watched thread's time goes: on CPU, waiting for a
    /// CPU, blocked by cause (sonic_probe_thread_seconds_total): on or off.
    /// On attaches three more BPF programs, on the scheduler's switches and
    /// wake-ups. Read at start only.
    #[arg(long, value_name = "on/off")]
    thread_time: Option<OnOff> = "on";

    /// Time watched threads spend waiting for the GPU inside CUDA's waiting
    /// calls (cudaStreamSynchronize, cudaMemcpy, cuCtxSynchronize...:
    /// sonic_probe_gpu_wait_duration_seconds, and state gpu of
    /// sonic_probe_thread_seconds_total): on or off. On puts uprobes on
    /// those calls in each CUDA library file (libcudart.so.*, libcuda.so.*)
    /// the watched processes map, found at start and when one opens one.
    /// Read at start only.
    #[arg(long, value_name = "on/off")]
    gpu_waits: Option<OnOff> = "on";

    /// CUDA library files (distinct files: one per virtualenv, conda env or
    /// container image) that get GPU probes at most; further ones are
    /// logged and counted (sonic_probe_gpu_libraries_total{result="over_limit"}).
    #[arg(long, value_name = "N")]
    gpu_max_libraries: Option<usize> = 64;

    /// Where the `workload` label (the systemd unit, Kubernetes container or
    /// Docker container of a process) comes from: auto (the cgroup v2
    /// hierarchy when one is mounted, else none, logged), cgroup (refuse to
    /// start without a cgroup v2 hierarchy) or none (workload="" on every
    /// series). Read at start only.
    #[arg(long, value_name = "HOW")]
    workload_from: Option<WorkloadFrom> = "auto";

    /// Directory where the kubelet publishes container names
    /// (<pod>_<namespace>_<container>-<id>.log), read again when a container
    /// is not found there, at most once per scrape. A missing directory
    /// leaves Kubernetes containers named by pod UID and container id.
    #[arg(long, value_name = "DIR")]
    containers_log_dir: Option<PathBuf> = "/var/log/containers";

    /// Distinct workloads exported as their own `workload` label; further
    /// ones are exported as workload="other".
    #[arg(long, value_name = "N")]
    max_workloads: Option<usize> = 128;

    /// Size of the BPF ring buffer that carries per-call events: a power of
    /// two, at least 4KiB. Losses are counted in
    /// sonic_probe_events_dropped_total{stage="ringbuf"}.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    #[serde(deserialize_with = "size")]
    ringbuf_size: Option<u64> = "4MiB";

    /// Futex waits of a request thread lasting at least this long are
    /// stalls (the futex_stall finding; see README, diagnoses); a single
    /// GPU wait this long is a gpu_wait finding.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    stall_threshold: Option<Duration> = "1s";

    /// Threads whose name matches this glob are request threads too (the
    /// main thread of a process always is). Repeatable.
    #[arg(long, value_name = "PATTERN")]
    stall_thread: Vec<String>;

    /// Threads whose name matches this glob are never reported as stalled.
    /// Repeatable.
    #[arg(long, value_name = "PATTERN")]
    stall_ignore_thread: Vec<String>;

    /// While a request thread's futex wait lasts past --stall-threshold,
    /// read the stacks of its process (the Python frames of every thread,
    /// the native stacks of the waiting thread and of up to 15 threads that
    /// may hold the lock) into the futex_stall finding (and, for the
    /// gpu_wait finding, during a GPU wait: the line that waits): on or off.
    /// On keeps CAP_SYS_PTRACE after attach (reading another process's
    /// memory needs it) and CAP_PERFMON (sampling a holder that runs on a
    /// CPU). Read at start only.
    #[arg(long, value_name = "on/off")]
    stack_captures: Option<OnOff> = "on";

    /// At most one stack capture per process per this long; further stalls
    /// within it are counted as rate_limited and their findings say so.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    stack_capture_interval: Option<Duration> = "10s";

    /// A path opened this many times by one process within
    /// --repeated-open-window is a repeated_open finding.
    #[arg(long, value_name = "N")]
    repeated_open_count: Option<u64> = 3;

    /// Window of --repeated-open-count.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    repeated_open_window: Option<Duration> = "60s";

    /// A file read with at least this many small reads is a small_reads
    /// finding (see --small-read-threshold).
    #[arg(long, value_name = "N")]
    small_read_min_count: Option<u64> = 8;

    /// A mapping of at least --large-map-threshold unmapped within this long
    /// of being mapped is one churn cycle.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    churn_window: Option<Duration> = "60s";

    /// Cycles of one size (and file) in one process that make an
    /// mmap_churn finding.
    #[arg(long, value_name = "N")]
    churn_cycles: Option<u64> = 2;

    /// A request thread (as for --stall-thread) that spent at least this
    /// share of its time over --starved-window runnable but waiting for a
    /// CPU is a cpu_starved finding: a number above 0, at most 1.
    #[arg(long, value_name = "SHARE")]
    starved_share: Option<f64> = 0.2;

    /// Window of --starved-share: the run-queue share is of the last this
    /// long (at least 1s; findings come at the earliest this long after a
    /// thread starts).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    starved_window: Option<Duration> = "10s";

    /// A request thread (as for --stall-thread) that spent at least this
    /// share of its time over --gpu-wait-window waiting for the GPU (in
    /// CUDA's synchronizes and synchronous copies, or an ioctl on a GPU
    /// device: state gpu) is a gpu_wait finding: a number above 0, at
    /// most 1.
    #[arg(long, value_name = "SHARE")]
    gpu_wait_share: Option<f64> = 0.5;

    /// Window of --gpu-wait-share (at least 1s; findings come at the
    /// earliest this long after a thread starts).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    gpu_wait_window: Option<Duration> = "10s";

    /// Paths (globs) never reported by repeated_open, small_reads and, as
    /// failing openat paths and connect's Unix socket paths,
    /// syscall_errors; added to the defaults (/var/run/nscd/socket,
    /// /run/nscd/socket, /proc/*, /sys/*, /dev/*, /etc/ld.so.cache, *.so,
    /// *.so.*, /usr/lib/locale/*, */pybuilddir.txt, */pyvenv.cfg, *._pth).
    /// Repeatable.
    #[arg(long, value_name = "GLOB")]
    ignore_path: Vec<String>;

    /// A finding not seen again for this long is dropped.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "duration")]
    findings_window: Option<Duration> = "10m";

    /// Findings kept per kind (the least recently seen go first).
    #[arg(long, value_name = "N")]
    max_findings: Option<usize> = 1000;

    /// List everything the detectors see: turn off the rules that keep a
    /// short-lived tool's one-off start-up out of the findings (errors and
    /// opens that never recur within their process, closes of descriptors
    /// that were never open, files opened for writing); see docs/metrics.md.
    #[arg(long)]
    findings_verbose: bool;

    /// Read the kernel's BTF (type information) from this file instead of
    /// /sys/kernel/btf/vmlinux: for kernels built without it, with a BTF
    /// file from BTFHub or `pahole --btf_encode_detached`.
    #[arg(long, value_name = "PATH")]
    btf: Option<PathBuf>;

    /// Turn on the kernel's BPF run-time statistics while running (like
    /// sysctl kernel.bpf_stats_enabled=1) to export
    /// sonic_probe_bpf_program_run_seconds_total. Costs ~20 ns per program
    /// run, and needs CAP_SYS_ADMIN.
    #[arg(long)]
    bpf_stats: bool;

    /// TLS and basic auth for the HTTP endpoint, from a Prometheus exporter
    /// web-config file (the YAML of node_exporter's --web.config.file:
    /// tls_server_config, basic_auth_users). Every path but /healthz then
    /// needs the credentials. Re-read on SIGHUP. Without it: plain HTTP, open.
    #[arg(long, value_name = "FILE")]
    web_config: Option<PathBuf>;

    /// How much of a file path GET /findings shows: full, name (the last
    /// component) or none (only the file class, e.g. [audio]), for nodes
    /// where paths carry customer or request ids.
    #[arg(long, value_name = "HOW")]
    findings_paths: Option<PathDisplay> = "full";

    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    /// RUST_LOG overrides it.
    #[arg(skip)]
    log_level: Option<String> = "info";
}

impl RunArgs {
    /// Every option's default (options without one are not given).
    pub fn defaults() -> RunArgs {
        let text: String =
            OPTIONS.iter().filter_map(|o| o.default.map(|d| format!("{} = {d}\n", o.name))).collect();
        toml::from_str(&text).expect("the defaults of the options table parse")
    }

    /// These options over the defaults: every option with a default is set.
    pub fn with_defaults(&self) -> RunArgs {
        self.over(&RunArgs::defaults())
    }
}

/// The documentation of the option named `name` (a field of [`RunArgs`]).
pub fn doc_of(name: &str) -> &'static OptionDoc {
    OPTIONS.iter().find(|o| o.name == name).expect("an option of the table")
}

/// The help of an option with its default, as `--help` shows it.
pub fn help_of(name: &str) -> String {
    let o = doc_of(name);
    match o.default_text() {
        Some(d) => format!("{} [default: {d}]", o.help()),
        None => o.help(),
    }
}

/// A flag's `--help`: its doc and default from the table.
fn with_help_from_table(arg: clap::Arg) -> clap::Arg {
    match OPTIONS.iter().find(|o| o.name == arg.get_id().as_str()) {
        Some(o) => arg.help(help_of(o.name)),
        None => arg,
    }
}

/// How a value given at a higher level combines with a lower one.
trait Merge {
    fn over(&self, lower: &Self) -> Self;
}

impl<T: Clone> Merge for Option<T> {
    fn over(&self, lower: &Self) -> Self {
        self.clone().or_else(|| lower.clone())
    }
}

impl<T: Clone> Merge for Vec<T> {
    fn over(&self, lower: &Self) -> Self {
        if self.is_empty() {
            lower.clone()
        } else {
            self.clone()
        }
    }
}

impl Merge for bool {
    fn over(&self, lower: &Self) -> Self {
        *self || *lower
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map(Some).map_err(D::Error::custom)
}

fn listen<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map(Some).map_err(D::Error::custom)
}

/// A set of system calls as a string ("default,write") or a list of names.
fn syscalls<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Set {
        Text(String),
        List(Vec<String>),
    }
    let text = match Set::deserialize(d)? {
        Set::Text(s) => s,
        Set::List(l) => l.join(","),
    };
    parse_syscalls(&text).map(Some).map_err(D::Error::custom)
}

/// A size as a number of bytes or a string ("16MiB").
fn size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(b) => Ok(Some(b)),
        Size::Text(s) => parse_size(&s).map(Some).map_err(D::Error::custom),
    }
}

/// The keys of the config file: the fields serde reads (every option but
/// those marked `#[serde(skip)]`), as serde itself lists them.
pub fn keys() -> &'static [&'static str] {
    use serde::de::{value::Error, Visitor};
    struct FieldNames(Option<&'static [&'static str]>);
    impl<'de> Deserializer<'de> for &mut FieldNames {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("only structs"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            self.0 = Some(fields);
            Err(Error::custom("field names taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = FieldNames(None);
    let _ = RunArgs::deserialize(&mut names);
    names.0.expect("RunArgs is a struct")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses_as_its_key() {
        let d = RunArgs::defaults();
        assert_eq!(d.listen.unwrap().to_string(), "127.0.0.1:9580");
        assert_eq!(d.slow_threshold, Some(Duration::from_millis(100)));
        assert_eq!(d.ringbuf_size, Some(u64::from(sonic_probe_common::DEFAULT_RINGBUF_BYTES)));
        assert_eq!(d.max_comms, Some(256));
        assert_eq!(d.log_level.as_deref(), Some("info"));
        assert_eq!(d.syscalls, Some(sonic_probe_common::syscalls::default_mask()));
        assert!(d.pid.is_empty() && d.config.is_none() && d.btf.is_none() && !d.bpf_stats);
        assert_eq!(d.stack_captures, Some(OnOff::On));
        assert_eq!(d.stack_capture_interval, Some(Duration::from_secs(10)));
        for o in OPTIONS.iter().filter(|o| o.default.is_some()) {
            assert!(keys().contains(&o.name), "{} has a default but no key", o.name);
        }
    }

    #[test]
    fn keys_are_the_options_but_config() {
        let mut names: Vec<&str> = OPTIONS.iter().map(|o| o.name).filter(|n| *n != "config").collect();
        let mut keys = keys().to_vec();
        names.sort();
        keys.sort();
        assert_eq!(names, keys);
    }

    #[test]
    fn merge_prefers_the_upper_level() {
        let upper = RunArgs { comm: vec!["dd".into()], max_comms: Some(5), ..RunArgs::default() };
        let lower = RunArgs {
            comm: vec!["python3".into()],
            pid: vec![1],
            max_comms: Some(9),
            btf: Some("/x".into()),
            bpf_stats: true,
            ..RunArgs::default()
        };
        let m = upper.over(&lower);
        assert_eq!((m.comm, m.pid, m.max_comms), (vec!["dd".to_string()], vec![1], Some(5)));
        assert_eq!(m.btf, Some(PathBuf::from("/x")));
        assert!(m.bpf_stats);
    }
}
