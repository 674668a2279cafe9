//! `cargo xtask fuzz`: runs the cargo-fuzz targets of `fuzz/` for a bounded
//! time each, so that CI and a developer get the same smoke run of the two
//! parsers that read bytes sonic-probe does not control (the config file,
//! the ring buffer) with one command, and a crash fails it with the input
//! that caused it.
//!
//! cargo-fuzz needs unstable compiler flags (-Zsanitizer=address and
//! sanitizer coverage): the `nightly` toolchain when rustup has it, else the
//! current (stable) toolchain with RUSTC_BOOTSTRAP=1. `fuzz/` is its own
//! workspace with its own target directory: nothing here touches the main
//! build.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};

use super::{root, setup, sh};

/// The targets, in fuzz/fuzz_targets/.
const TARGETS: &[&str] = &["config_file", "event_decode"];
/// Seconds per target unless --seconds says otherwise: a minute in all.
const DEFAULT_SECONDS: u64 = 30;
/// cargo-fuzz is installed at this version if missing.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// libFuzzer limits: resident memory of the process, and one allocation
/// (inputs are at most 4 KiB: a bigger allocation is a bug), in MB; and
/// seconds one input may take before it counts as a hang.
const RSS_LIMIT_MB: u32 = 2048;
const MALLOC_LIMIT_MB: u32 = 256;
const TIMEOUT_SECONDS: u32 = 10;

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--toolchain NAME] [TARGET...]";

struct Outcome {
    target: &'static str,
    crashed: Vec<String>,
    /// libFuzzer's last status line and final stats.
    status: String,
    exec_per_sec: String,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut seconds = DEFAULT_SECONDS;
    let mut toolchain = None;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).context(USAGE)?
            }
            "--toolchain" => toolchain = Some(it.next().context(USAGE)?.clone()),
            name => match TARGETS.iter().find(|t| **t == name) {
                Some(t) => targets.push(*t),
                None => bail!("unknown fuzz target or option {name}\n{USAGE}; targets: {TARGETS:?}"),
            },
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    // The fuzz build compiles sonic-probe, whose build script needs clang-16.
    setup(false)?;
    if !Command::new("cargo").args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success()) {
        sh("cargo", &["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ_VERSION], &[])?;
    }
    let toolchain = toolchain.unwrap_or_else(|| {
        let nightly = Command::new("cargo").args(["+nightly", "--version"]).output();
        if nightly.is_ok_and(|o| o.status.success()) { "nightly" } else { "stable" }.to_string()
    });
    let cargo_fuzz = |sub: &str| {
        let mut c = Command::new("cargo");
        c.arg(format!("+{toolchain}")).args(["fuzz", sub]).current_dir(root());
        if !toolchain.starts_with("nightly") {
            c.env("RUSTC_BOOTSTRAP", "1");
        }
        c
    };

    let started = Instant::now();
    eprintln!("+ cargo +{toolchain} fuzz build");
    let status = cargo_fuzz("build").status().context("cannot run cargo fuzz")?;
    if !status.success() {
        bail!("cargo +{toolchain} fuzz build failed ({status})");
    }
    eprintln!("fuzz build: {:.0} s", started.elapsed().as_secs_f64());

    let mut outcomes = Vec::new();
    for target in targets {
        // New inputs go to a corpus under target/, kept between runs; the
        // committed seeds in fuzz/corpus/ are only read.
        let work = format!("fuzz/target/corpus/{target}");
        std::fs::create_dir_all(root().join(&work))?;
        let mut cmd = cargo_fuzz("run");
        cmd.args([target, &work, &format!("fuzz/corpus/{target}"), "--"]).args([
            format!("-max_total_time={seconds}"),
            format!("-rss_limit_mb={RSS_LIMIT_MB}"),
            format!("-malloc_limit_mb={MALLOC_LIMIT_MB}"),
            format!("-timeout={TIMEOUT_SECONDS}"),
            "-print_final_stats=1".into(),
        ]);
        eprintln!("+ cargo +{toolchain} fuzz run {target} ({seconds} s)");
        outcomes.push(run_one(target, cmd)?);
    }

    eprintln!("\nfuzz: {:.0} s in all", started.elapsed().as_secs_f64());
    for o in &outcomes {
        let result = if o.crashed.is_empty() { "ok" } else { "CRASHED" };
        eprintln!("  {:<14} {result:<8} {} exec/s; {}", o.target, o.exec_per_sec, o.status);
    }
    let crashed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.crashed.is_empty()).collect();
    if !crashed.is_empty() {
        for o in &crashed {
            for a in &o.crashed {
                eprintln!("{}: crashing input {a}", o.target);
                let env = if toolchain.starts_with("nightly") { "" } else { "RUSTC_BOOTSTRAP=1 " };
                eprintln!("  reproduce: {env}cargo +{toolchain} fuzz run {} {a}", o.target);
            }
        }
        bail!("{} fuzz target(s) crashed", crashed.len());
    }
    Ok(())
}

/// Runs one target, passing libFuzzer's output through without its
/// per-input progress lines.
fn run_one(target: &'static str, mut cmd: Command) -> Result<Outcome> {
    let mut child = cmd.stderr(Stdio::piped()).spawn().context("cannot run cargo fuzz")?;
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut o = Outcome { target, crashed: Vec::new(), status: String::new(), exec_per_sec: "?".into() };
    let mut in_dictionary = false;
    for line in stderr.lines() {
        let line = line?;
        if line.starts_with("###### Recommended dictionary") {
            in_dictionary = true;
        }
        // "#1234\tNEW    cov: ..." and the like, and the functions reached.
        let progress = (line.starts_with('#')
            && matches!(line.split_whitespace().nth(1), Some("NEW" | "REDUCE" | "pulse" | "RELOAD")))
            || line.trim_start().starts_with("NEW_FUNC[");
        if line.starts_with('#') && line.contains(" cov: ") {
            o.status = line.split_once(' ').map_or(&*line, |(_, s)| s).trim().to_string();
        }
        if let Some(n) = line.strip_prefix("stat::average_exec_per_sec:") {
            o.exec_per_sec = n.trim().to_string();
        }
        if let Some(path) = line.split("Test unit written to ").nth(1) {
            o.crashed.push(path.trim().to_string());
        }
        if !progress && !in_dictionary {
            eprintln!("{line}");
        }
        if line.starts_with("###### End of recommended dictionary") {
            in_dictionary = false;
        }
    }
    let status = child.wait()?;
    if !status.success() && o.crashed.is_empty() {
        o.crashed.push(format!("(none written: cargo fuzz run exited with {status})"));
    }
    Ok(o)
}
