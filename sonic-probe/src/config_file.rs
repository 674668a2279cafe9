//! The config file (/etc/sonic-probe/config.toml for the service): every
//! `sonic-probe run` flag is a key of the same name (`--slow-threshold` is
//! `slow_threshold`, a repeatable flag is a list), plus `log_level`. Values
//! are spelled as on the command line ("100ms", "16MiB", "0.0.0.0:9580").
//!
//! An unknown key or a bad value is an error that names the key and its
//! line, in one line, so that `sonic-probe check-config` and a failed
//! service start say exactly what to fix.

use std::{net::SocketAddr, path::Path, time::Duration};

use serde::{de::Error as _, Deserialize, Deserializer};

use crate::{
    config::{parse_duration, parse_listen, parse_size},
    error::{Error, Result},
};

/// What a config file may say. Field names are the keys.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOptions {
    #[serde(default)]
    pub pid: Vec<i64>,
    #[serde(default)]
    pub comm: Vec<String>,
    #[serde(default)]
    pub cgroup: Vec<String>,
    #[serde(default, deserialize_with = "listen")]
    pub listen: Option<SocketAddr>,
    #[serde(default, deserialize_with = "duration")]
    pub slow_threshold: Option<Duration>,
    #[serde(default, deserialize_with = "size")]
    pub large_map_threshold: Option<u64>,
    #[serde(default, deserialize_with = "size")]
    pub small_read_threshold: Option<u64>,
    pub max_comms: Option<usize>,
    #[serde(default, deserialize_with = "size")]
    pub ringbuf_size: Option<u64>,
    #[serde(default, deserialize_with = "duration")]
    pub stall_threshold: Option<Duration>,
    #[serde(default)]
    pub stall_thread: Vec<String>,
    #[serde(default)]
    pub stall_ignore_thread: Vec<String>,
    pub repeated_open_count: Option<u64>,
    #[serde(default, deserialize_with = "duration")]
    pub repeated_open_window: Option<Duration>,
    pub small_read_min_count: Option<u64>,
    #[serde(default, deserialize_with = "duration")]
    pub churn_window: Option<Duration>,
    pub churn_cycles: Option<u64>,
    #[serde(default)]
    pub ignore_path: Vec<String>,
    #[serde(default, deserialize_with = "duration")]
    pub findings_window: Option<Duration>,
    pub max_findings: Option<usize>,
    pub bpf_stats: Option<bool>,
    pub btf: Option<std::path::PathBuf>,
    pub log_level: Option<String>,
}

/// Every key (kept equal to the `run` flags plus log_level by a test).
pub const KEYS: &[&str] = &[
    "pid",
    "comm",
    "cgroup",
    "listen",
    "slow_threshold",
    "large_map_threshold",
    "small_read_threshold",
    "max_comms",
    "ringbuf_size",
    "stall_threshold",
    "stall_thread",
    "stall_ignore_thread",
    "repeated_open_count",
    "repeated_open_window",
    "small_read_min_count",
    "churn_window",
    "churn_cycles",
    "ignore_path",
    "findings_window",
    "max_findings",
    "bpf_stats",
    "btf",
    "log_level",
];

fn duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map(Some).map_err(D::Error::custom)
}

fn listen<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map(Some).map_err(D::Error::custom)
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

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<FileOptions> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::usage(format!("config {}: cannot read it: {e}", path.display())))?;
    parse(&text, path)
}

/// Parses config text; errors name the file, the line and the key.
pub fn parse(text: &str, path: &Path) -> Result<FileOptions> {
    toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().replace('\n', " ");
        let Some(span) = e.span() else {
            return Error::usage(format!("config {}: {msg}", path.display()));
        };
        let line_no = text[..span.start.min(text.len())].matches('\n').count() + 1;
        let line = text.lines().nth(line_no - 1).unwrap_or("");
        let key = line
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.is_empty() && !msg.contains(&format!("`{k}`")));
        match key {
            Some(k) => Error::usage(format!("config {} line {line_no}: {k}: {msg}", path.display())),
            None => Error::usage(format!("config {} line {line_no}: {msg}", path.display())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn err(text: &str) -> String {
        match parse(text, Path::new("/etc/sonic-probe/config.toml")) {
            Err(Error::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn every_run_flag_is_a_key() {
        let cli = crate::cli::Cli::command();
        let run = cli.find_subcommand("run").unwrap();
        let mut flags: Vec<String> = run
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "config" && *l != "help")
            .map(|l| l.replace('-', "_"))
            .collect();
        flags.push("log_level".into());
        flags.sort();
        let mut keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
        keys.sort();
        assert_eq!(flags, keys);
    }

    #[test]
    fn every_key_parses() {
        let text = r#"
            pid = [1, 2]
            comm = ["python3"]
            cgroup = ["system.slice/sonic.service"]
            listen = "0.0.0.0:9580"
            slow_threshold = "250ms"
            large_map_threshold = "32MiB"
            small_read_threshold = 2048
            max_comms = 100
            ringbuf_size = "8MiB"
            stall_threshold = "2s"
            stall_thread = ["pt_main*"]
            stall_ignore_thread = ["pin_memory"]
            repeated_open_count = 4
            repeated_open_window = "2m"
            small_read_min_count = 16
            churn_window = "30s"
            churn_cycles = 3
            ignore_path = ["/tmp/*"]
            findings_window = "1h"
            max_findings = 50
            bpf_stats = true
            btf = "/boot/vmlinux.btf"
            log_level = "debug"
        "#;
        let o = parse(text, Path::new("x.toml")).unwrap();
        assert_eq!(o.pid, vec![1, 2]);
        assert_eq!(o.slow_threshold, Some(Duration::from_millis(250)));
        assert_eq!(o.large_map_threshold, Some(32 << 20));
        assert_eq!(o.small_read_threshold, Some(2048));
        assert_eq!(o.listen.unwrap().port(), 9580);
        assert_eq!(o.findings_window, Some(Duration::from_secs(3600)));
        assert_eq!(o.bpf_stats, Some(true));
        // A key of KEYS missing from the struct would be "unknown".
        for k in KEYS {
            assert!(text.contains(&format!("{k} =")), "{k} not exercised");
        }
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = err("listen = \"0.0.0.0:9580\"\nslow_treshold = \"1s\"\n");
        assert!(
            e.starts_with("config /etc/sonic-probe/config.toml line 2: unknown field `slow_treshold`"),
            "{e}"
        );
        let e = err("# comment\n\nslow_threshold = \"fast\"\n");
        assert!(e.contains("line 3: slow_threshold: 'fast' is not a duration"), "{e}");
        let e = err("large_map_threshold = \"12 parsecs\"\n");
        assert!(e.contains("line 1: large_map_threshold: '12 parsecs' is not a size"), "{e}");
        let e = err("max_comms = \"many\"\n");
        assert!(e.contains("line 1: max_comms:"), "{e}");
        let e = err("listen = \"nowhere\"\n");
        assert!(e.contains("line 1: listen: 'nowhere' is not an address"), "{e}");
        let e = err("pid = 5\n");
        assert!(e.contains("line 1: pid:"), "{e}");
        let e = err("listen = \n");
        assert!(e.contains("line 1"), "{e}");
        assert!(!err("comm = [\"a\"\n").contains('\n'), "one line");
    }
}
