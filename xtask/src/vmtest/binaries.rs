//! The guest's binaries: sonic-probe, sp-workload, sp-bench and the test
//! binaries of the plan, built static (`+crt-static`) into target/vmtest.

use std::{
    collections::BTreeMap,
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use super::{dir, path_str};
use crate::root;

/// The only target installed; `+crt-static` makes its binaries static.
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// The static binaries for the guest.
pub struct Binaries {
    pub daemon: PathBuf,
    pub workload: PathBuf,
    pub bench: PathBuf,
    /// Test binary name (core, ops, ...) to its path; none for a command.
    pub tests: BTreeMap<String, PathBuf>,
}

/// Builds what the plan needs (the tests' package binaries and the daemon
/// only, for an empty plan: a command instead of the tests).
pub fn build(plan: &[(&str, Vec<&str>)]) -> Result<Binaries> {
    let mut first = vec!["test", "--no-run", "-p", "sonic-probe-tests"];
    for (bin, _) in plan {
        first.extend(["--test", bin]);
    }
    if plan.is_empty() {
        first = vec!["build", "-p", "sonic-probe-tests", "--bins"];
    }
    let mut artifacts = cargo_artifacts(&first)?;
    // sp-bench is the bench crate's (bench/); the reliability tests load the
    // daemon with it.
    artifacts.extend(cargo_artifacts(&[
        "build",
        "-p",
        "sonic-probe",
        "--bin",
        "sonic-probe",
        "-p",
        "sonic-probe-bench",
        "--bin",
        "sp-bench",
    ])?);
    let find = |kind: &str, name: &str| {
        artifacts
            .iter()
            .find(|(k, n, _)| k == kind && n == name)
            .map(|(_, _, p)| p.clone())
            .with_context(|| format!("cargo built no {kind} {name}"))
    };
    let bins = Binaries {
        daemon: find("bin", "sonic-probe")?,
        workload: find("bin", "sp-workload")?,
        bench: find("bin", "sp-bench")?,
        tests: plan
            .iter()
            .map(|(bin, _)| Ok((bin.to_string(), find("test", bin)?)))
            .collect::<Result<_>>()?,
    };
    for p in [&bins.daemon, &bins.workload, &bins.bench].into_iter().chain(bins.tests.values()) {
        if !is_static(p)? {
            bail!("{} is dynamically linked: the guest has no libc to load", p.display());
        }
    }
    Ok(bins)
}

/// Runs cargo ARGS for the guest; (kind, name, executable) of what it built.
fn cargo_artifacts(args: &[&str]) -> Result<Vec<(String, String, PathBuf)>> {
    let target_dir = dir();
    let mut full = args.to_vec();
    full.extend(["--target", TARGET, "--target-dir", path_str(&target_dir)?]);
    full.push("--message-format=json-render-diagnostics");
    eprintln!("+ cargo {}", full.join(" "));
    let mut child = Command::new("cargo")
        .args(&full)
        .current_dir(root())
        // With --target, RUSTFLAGS reach only the target's crates, not build
        // scripts or proc macros, which must stay dynamic.
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // Line tables keep backtraces readable; full debug info would make
        // the daemon alone >100 MB of initramfs.
        .env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        // TCG runs the guest 10-50 times slower than the host: unoptimized,
        // the daemon's start (BTF and ELF parsing) took seconds of each
        // test and 5.10's plan 912 s; at opt-level 1, 432 s. Debug
        // assertions and overflow checks stay on.
        .env("CARGO_PROFILE_DEV_OPT_LEVEL", "1")
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run cargo")?;
    let mut out = String::new();
    child.stdout.take().expect("piped").read_to_string(&mut out)?;
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    let mut found = Vec::new();
    for line in out.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(exe), Some(kind), Some(name)) =
            (msg["executable"].as_str(), msg["target"]["kind"][0].as_str(), msg["target"]["name"].as_str())
        else {
            continue;
        };
        found.push((kind.to_string(), name.to_string(), PathBuf::from(exe)));
    }
    Ok(found)
}

/// True if the ELF file at `path` has no program interpreter (static or
/// static-pie).
pub fn is_static(path: &Path) -> Result<bool> {
    let mut head = vec![0u8; 64];
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    f.read_exact(&mut head).with_context(|| format!("{}: not an ELF file", path.display()))?;
    if &head[..5] != b"\x7fELF\x02" {
        bail!("{}: not a 64-bit ELF file", path.display());
    }
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into()?) as usize;
    let phentsize = u16::from_le_bytes(head[0x36..0x38].try_into()?) as usize;
    let phnum = u16::from_le_bytes(head[0x38..0x3a].try_into()?) as usize;
    let mut table = vec![0u8; phoff + phentsize * phnum];
    let mut f = File::open(path)?;
    f.read_exact(&mut table).with_context(|| format!("{}: truncated program headers", path.display()))?;
    const PT_INTERP: u32 = 3;
    Ok((0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(table[at..at + 4].try_into().expect("4 bytes")) != PT_INTERP
    }))
}
