//! Fuzzes the config file the way `sonic-probe run --config` and SIGHUP read
//! it: the text is parsed (`config_file::parse`), merged under a command
//! line (`RunArgs::over`) and validated (`RunConfig::from_args`). Any input
//! must end in a config or in a one-line usage error, never in a panic, a
//! hang or a huge allocation.
//!
//! Input: the file's text, optionally followed by a NUL byte and the
//! command line, one argument per line (TOML text cannot hold a NUL, so
//! nothing is lost by splitting there).
#![no_main]

use std::path::Path;

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use sonic_probe::{
    config::{
        cli::{Cli, Command},
        file as config_file,
        options::RunArgs,
        RunConfig, MAX_COMM_LABELS, MAX_RINGBUF_BYTES, MIN_RINGBUF_BYTES,
    },
    error::Error,
};

const PATH: &str = "/etc/sonic-probe/config.toml";

fuzz_target!(|data: &[u8]| {
    let (file, argv) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    // config_file::load reads with read_to_string, so only UTF-8 gets
    // here; lossy conversion turns stray bytes into U+FFFD, which puts
    // multi-byte characters everywhere (spans, slicing) for free.
    let text = String::from_utf8_lossy(file);
    let cli = argv.map_or_else(RunArgs::default, command_line);

    let file = match config_file::parse(&text, Path::new(PATH)) {
        Ok(f) => f,
        Err(Error::Usage(m)) => {
            assert!(m.starts_with(&format!("config {PATH}")), "error without the file: {m}");
            assert!(!m.contains('\n'), "a config error must be one line: {m:?}");
            return;
        }
        Err(e) => panic!("a bad config file is a usage error, got {e:?}"),
    };
    let merged = cli.over(&file);
    match RunConfig::from_args(&merged) {
        Ok(c) => check(&c, &cli, &file),
        Err(Error::Usage(_)) => {}
        Err(e) => panic!("bad options are a usage error, got {e:?}"),
    }
});

/// `sonic-probe run ARGS`, one argument per line; anything clap rejects
/// means no command line.
fn command_line(bytes: &[u8]) -> RunArgs {
    let text = String::from_utf8_lossy(bytes);
    let argv = ["sonic-probe", "run"].into_iter().chain(text.split('\n'));
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: Command::Run(a), .. }) => a,
        _ => RunArgs::default(),
    }
}

/// What a validated config promises the rest of the daemon.
fn check(c: &RunConfig, cli: &RunArgs, file: &RunArgs) {
    assert!(c.ringbuf_bytes.is_power_of_two());
    assert!((MIN_RINGBUF_BYTES..=MAX_RINGBUF_BYTES).contains(&u64::from(c.ringbuf_bytes)));
    assert!((1..=MAX_COMM_LABELS).contains(&c.max_comms));
    let f = &c.findings;
    for d in [f.window, f.futex_stall.threshold, f.repeated_open.window, f.mmap_churn.window] {
        assert!(!d.is_zero());
    }
    assert!(f.max_findings >= 1 && f.repeated_open.count >= 1);
    assert!(f.small_reads.min_count >= 1 && f.mmap_churn.cycles >= 1 && f.mmap_churn.bytes >= 1);
    assert!(c.kernel_slow_threshold() <= c.slow_call);
    // The command line wins over the file, the file over the default.
    let defaults = RunArgs::defaults();
    let listen = cli.listen.or(file.listen).or(defaults.listen).unwrap();
    assert_eq!(c.listen, listen);
    let slow = cli.slow_threshold.or(file.slow_threshold).or(defaults.slow_threshold).unwrap();
    assert_eq!(c.slow_call, slow);
    assert_eq!(c.bpf_stats, cli.bpf_stats || file.bpf_stats);
}
