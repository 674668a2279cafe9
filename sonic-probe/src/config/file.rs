//! The config file (/etc/sonic-probe/config.toml for the service): every
//! `sonic-probe run` flag is a key of the same name (`--slow-threshold` is
//! `slow_threshold`, a repeatable flag is a list), plus `log_level`. Values
//! are spelled as on the command line ("100ms", "16MiB", "0.0.0.0:9580").
//! The keys and how each value is read are the options' (`options.rs`);
//! this module reads the file and says where it is wrong.
//!
//! An unknown key or a bad value is an error that names the key and its
//! line, in one line, so that `sonic-probe check-config` and a failed
//! service start say exactly what to fix.

use std::path::Path;

use crate::{
    config::options::RunArgs,
    error::{Error, Result},
};

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<RunArgs> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::usage(format!("config {}: cannot read it: {e}", path.display())))?;
    parse(&text, path)
}

/// Parses config text; errors name the file, the line and the key.
pub fn parse(text: &str, path: &Path) -> Result<RunArgs> {
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
    use std::time::Duration;

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
        let cli = crate::config::cli::Cli::command();
        let run = cli.find_subcommand("run").unwrap();
        let mut flags: Vec<String> = run
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "config" && *l != "help")
            .map(|l| l.replace('-', "_"))
            .collect();
        flags.push("log_level".into());
        flags.sort();
        let mut keys: Vec<String> = crate::config::options::keys().iter().map(|k| k.to_string()).collect();
        keys.sort();
        assert_eq!(flags, keys);
    }

    #[test]
    fn the_shipped_config_file_shows_every_key() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/config.toml");
        let text = std::fs::read_to_string(path).unwrap();
        assert!(parse(&text, Path::new(path)).is_ok());
        for k in crate::config::options::keys() {
            let shown = text.lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} =")));
            assert!(shown, "deploy/config.toml does not show the key {k}");
        }
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
            syscalls = "default,write"
            max_comms = 100
            max_thread_names = 16
            thread_time = "off"
            gpu_waits = "off"
            gpu_max_libraries = 8
            workload_from = "cgroup"
            containers_log_dir = "/host/var/log/containers"
            max_workloads = 64
            ringbuf_size = "8MiB"
            stall_threshold = "2s"
            stall_thread = ["pt_main*"]
            stall_ignore_thread = ["pin_memory"]
            stack_captures = "off"
            stack_capture_interval = "30s"
            repeated_open_count = 4
            repeated_open_window = "2m"
            small_read_min_count = 16
            churn_window = "30s"
            churn_cycles = 3
            starved_share = 0.3
            starved_window = "20s"
            gpu_wait_share = 0.8
            gpu_wait_window = "30s"
            ignore_path = ["/tmp/*"]
            findings_window = "1h"
            max_findings = 50
            findings_verbose = true
            bpf_stats = true
            btf = "/boot/vmlinux.btf"
            log_level = "debug"
            web_config = "/etc/sonic-probe/web-config.yml"
            findings_paths = "name"
        "#;
        let o = parse(text, Path::new("x.toml")).unwrap();
        assert_eq!(o.pid, vec![1, 2]);
        assert_eq!(o.slow_threshold, Some(Duration::from_millis(250)));
        assert_eq!(o.large_map_threshold, Some(32 << 20));
        assert_eq!(o.small_read_threshold, Some(2048));
        assert_eq!(
            o.syscalls,
            Some(sonic_probe_common::syscalls::default_mask() | 1 << sonic_probe_common::syscalls::WRITE)
        );
        assert_eq!(o.listen.unwrap().port(), 9580);
        assert_eq!(o.findings_window, Some(Duration::from_secs(3600)));
        assert!(o.bpf_stats);
        assert_eq!(o.findings_paths, Some(crate::findings::PathDisplay::Name));
        assert_eq!(o.workload_from, Some(crate::workloads::WorkloadFrom::Cgroup));
        assert_eq!(o.containers_log_dir.as_deref(), Some(Path::new("/host/var/log/containers")));
        assert_eq!(o.max_workloads, Some(64));
        // Every key is exercised above.
        for k in crate::config::options::keys() {
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
