//! The guest's binaries: sonic-probe, sp-workload, sp-bench, sp-cuda and the test
//! binaries of the plan, the very ones the host's `cargo xtask test` built
//! and ran (target/debug, the workspace's dev profile), copied into the
//! initramfs with the shared libraries ldd names for them.
//!
//! Why the host's build and not one of its own: a static build for the
//! guest (`+crt-static` in a target directory of its own) compiled the
//! workspace a second time, some five minutes of every CI run, for
//! binaries that differ from the tested ones only in how they link. The
//! dev profile is opt-level 1 with line tables only (Cargo.toml says why),
//! which is what TCG needs; the guest runs the host's loader and libc.
//!
//! The whole workspace is built, as `cargo xtask test` builds it: a build
//! of a few packages alone would unify their dependencies' features
//! differently and rebuild them, then the next host build would again.

use std::{
    collections::BTreeMap,
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::root;

/// The guest's binaries.
pub struct Binaries {
    pub daemon: PathBuf,
    pub workload: PathBuf,
    pub bench: PathBuf,
    /// The GPU tests' CUDA caller.
    pub cuda_caller: PathBuf,
    /// Test binary name (core, ops, ...) to its path; none for a command.
    pub tests: BTreeMap<String, PathBuf>,
}

impl Binaries {
    /// Every binary, for their shared libraries.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.daemon, &self.workload, &self.bench, &self.cuda_caller].into_iter().chain(self.tests.values())
    }
}

/// Builds (or finds fresh) the workspace's binaries and tests and picks
/// what the plan needs.
pub fn build(plan: &[(&str, Vec<&str>)]) -> Result<Binaries> {
    let artifacts = cargo_artifacts(&["build", "--workspace", "--all-targets"])?;
    // A binary proper, not its unit-test harness (also kind "bin").
    let find = |kind: &str, name: &str, test: bool| {
        artifacts
            .iter()
            .find(|a| a.kind == kind && a.name == name && a.test == test)
            .map(|a| a.executable.clone())
            .with_context(|| format!("cargo built no {kind} {name}"))
    };
    Ok(Binaries {
        daemon: find("bin", "sonic-probe", false)?,
        workload: find("bin", "sp-workload", false)?,
        bench: find("bin", "sp-bench", false)?,
        cuda_caller: find("bin", "sp-cuda", false)?,
        tests: plan
            .iter()
            .map(|(bin, _)| Ok((bin.to_string(), find("test", bin, true)?)))
            .collect::<Result<_>>()?,
    })
}

/// What cargo reported it built (or found fresh).
struct Artifact {
    kind: String,
    name: String,
    /// Built as a test harness.
    test: bool,
    executable: PathBuf,
}

/// Runs cargo ARGS; the executables it built.
fn cargo_artifacts(args: &[&str]) -> Result<Vec<Artifact>> {
    let mut full = args.to_vec();
    full.push("--message-format=json-render-diagnostics");
    eprintln!("+ cargo {}", full.join(" "));
    let mut child = Command::new("cargo")
        .args(&full)
        .current_dir(root())
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
        let (Some(exe), Some(kind), Some(name), Some(test)) = (
            msg["executable"].as_str(),
            msg["target"]["kind"][0].as_str(),
            msg["target"]["name"].as_str(),
            msg["profile"]["test"].as_bool(),
        ) else {
            continue;
        };
        found.push(Artifact {
            kind: kind.to_string(),
            name: name.to_string(),
            test,
            executable: PathBuf::from(exe),
        });
    }
    Ok(found)
}

/// Where the guest finds the GPU tests' stand-in CUDA libraries (the
/// tests' SONIC_PROBE_STAND_IN_CUDA: the guest has no C compiler).
pub const STAND_IN_CUDA_GUEST_DIR: &str = "vmtest/stand-in-cuda";

/// Builds tests/workloads/stand_in_cuda.c into `dir` as the GPU tests do
/// (tests/tests/gpu.rs, stand_in: the same two commands): libcuda.so.1,
/// and libcudart.so.12 linked to it through $ORIGIN.
pub fn stand_in_cuda(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let src = root().join("tests/workloads/stand_in_cuda.c");
    let build = |out: &str, extra: &[&str]| -> Result<()> {
        let status = Command::new("cc")
            .args(["-O1", "-shared", "-fPIC", "-o"])
            .arg(dir.join(out))
            .arg(&src)
            .args(extra)
            .status()
            .context("cannot run cc")?;
        if !status.success() {
            bail!("cc {out} failed ({status})");
        }
        Ok(())
    };
    build("libcuda.so.1", &[])?;
    let l = format!("-L{}", dir.display());
    build("libcudart.so.12", &["-DSP_RUNTIME", &l, "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"])
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
