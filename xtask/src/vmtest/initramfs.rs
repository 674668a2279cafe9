//! The guest: an initramfs (cpio newc, uncompressed) with busybox,
//! xtask/vm/init.sh as /init, a few host tools, the workspace's binaries,
//! the shared libraries of both (the host's loader and libc), and what /init reads: /vmtest/plan (the tests),
//! /vmtest/env (--env) and /vmtest/command (`-- COMMAND`).

use std::{
    collections::BTreeSet,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::{binaries::Binaries, dir, kernel::Kernel, path_str, ALLOWED_FLAKY, RETRY_ONCE};
use crate::root;

pub const BUSYBOX: &str = "/bin/busybox";

/// The host's programs the tests run, put in the guest's /bin (ahead of
/// busybox's links, which do not replace them) with the shared libraries
/// they need: the strace oracle; bpftool (BPF objects left in the kernel);
/// util-linux's setpriv (busybox's has no --bounding-set) and setarch (an
/// old kernel's release); GNU dd (core.rs copies /bin/dd, and busybox's
/// would not run under another name) and GNU cat (busybox's uses sendfile:
/// too few calls to compare with strace).
pub const HOST_TOOLS: &[(&str, &str)] = &[
    ("strace", "/usr/bin/strace"),
    ("bpftool", "/usr/sbin/bpftool"),
    ("setpriv", "/usr/bin/setpriv"),
    ("setarch", "/usr/bin/setarch"),
    ("dd", "/usr/bin/dd"),
    ("cat", "/usr/bin/cat"),
];

/// Repository files tests read (from the path they were built in).
pub const REPO_FILES: &[&str] = &["deploy/config.toml", "docs/bad-input.md"];

/// The guest's /init.
const INIT: &str = include_str!("../../vm/init.sh");

/// Writes target/vmtest/initramfs.cpio. In the guest, the binaries sit in
/// /vmtest/target as cargo lays them out (tests in deps/, sp-workload and
/// sp-bench next to deps/), where the test harness looks for them.
pub fn write(
    kernels: &[Kernel],
    bins: &Binaries,
    plan: &[(&str, Vec<&str>)],
    env: &[(String, String)],
    command: Option<&[String]>,
) -> Result<PathBuf> {
    let path = dir().join("initramfs.cpio");
    let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut cpio = Cpio::new(BufWriter::new(file));
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "tmp", "run", "root"] {
        cpio.dir(d)?;
    }
    // The kernel opens /dev/console for /init before anything is mounted.
    cpio.char_device("dev/console", 5, 1)?;
    cpio.bytes("init", 0o755, INIT.as_bytes())?;
    cpio.copy("bin/busybox", Path::new(BUSYBOX))?;

    // The host's tools, in /bin, before busybox's links (which do not
    // replace them); their libraries and ours.
    let mut libraries = BTreeSet::new();
    for (name, host) in HOST_TOOLS {
        let host = Path::new(host);
        cpio.copy(&format!("bin/{name}"), host)?;
        libraries.extend(shared_libraries(host)?);
    }
    for binary in bins.all() {
        libraries.extend(shared_libraries(binary)?);
    }
    for lib in &libraries {
        cpio.copy(path_str(lib)?.trim_start_matches('/'), lib)?;
    }
    cpio.bytes("etc/hostname", 0o644, b"sonic-vmtest\n")?;
    let os_release = std::fs::read("/etc/os-release").context("cannot read /etc/os-release")?;
    cpio.bytes("etc/os-release", 0o644, &os_release)?;

    // Each kernel's config where bpftool's feature probe looks for it:
    // /boot/config-RELEASE (uname -r).
    for k in kernels {
        let name = k.config.file_name().and_then(|n| n.to_str()).context("a kernel config's name")?;
        cpio.bytes(&format!("boot/{name}"), 0o644, &std::fs::read(&k.config)?)?;
        // And its FUSE module, which /init loads (kernel::FUSE_MODULE).
        if let Some(m) = &k.fuse_module {
            cpio.copy(&format!("lib/modules/{}/fuse.ko", k.release()?), m)?;
        }
    }

    cpio.copy("vmtest/target/sonic-probe", &bins.daemon)?;
    cpio.copy("vmtest/target/sp-workload", &bins.workload)?;
    cpio.copy("vmtest/target/sp-bench", &bins.bench)?;
    cpio.copy("vmtest/target/sp-cuda", &bins.cuda_caller)?;
    let mut env = env.to_vec();
    if plan.iter().any(|(bin, _)| *bin == "gpu") {
        let built = super::dir().join("stand-in-cuda");
        super::binaries::stand_in_cuda(&built)?;
        let guest = super::binaries::STAND_IN_CUDA_GUEST_DIR;
        cpio.dir(guest)?;
        for lib in ["libcuda.so.1", "libcudart.so.12"] {
            cpio.copy(&format!("{guest}/{lib}"), &built.join(lib))?;
        }
        env.push(("SONIC_PROBE_STAND_IN_CUDA".into(), format!("/{guest}")));
    }
    for (name, p) in &bins.tests {
        cpio.copy(&format!("vmtest/target/deps/{name}"), p)?;
    }
    // Tests that read the repository's files find them where they were built.
    let repo = root();
    // (cli.rs goes through the manifest directory: CARGO_MANIFEST_DIR/../docs.)
    cpio.dir(path_str(&repo.join("tests"))?.trim_start_matches('/'))?;
    for f in REPO_FILES {
        let data = std::fs::read(repo.join(f)).with_context(|| format!("cannot read {f}"))?;
        cpio.bytes(path_str(&repo.join(f))?.trim_start_matches('/'), 0o644, &data)?;
    }
    cpio.bytes("vmtest/plan", 0o644, plan_text(plan).as_bytes())?;
    if !env.is_empty() {
        let text: String =
            env.iter().map(|(name, value)| format!("export {name}={}\n", quote(value))).collect();
        cpio.bytes("vmtest/env", 0o644, text.as_bytes())?;
    }
    if let Some(command) = command {
        // Where the Debian package puts it, for `sonic-probe run` and
        // `check-config` without --config (only for a command: tests may
        // count on its absence).
        let config =
            std::fs::read(repo.join("deploy/config.toml")).context("cannot read deploy/config.toml")?;
        cpio.bytes("etc/sonic-probe/config.toml", 0o644, &config)?;
        let words: Vec<String> = command.iter().map(|w| quote(w)).collect();
        cpio.bytes("vmtest/command", 0o755, format!("exec {}\n", words.join(" ")).as_bytes())?;
    }
    cpio.finish()?.flush()?;
    let size = std::fs::metadata(&path)?.len();
    eprintln!("vmtest: {} ({} MiB)", path.display(), size >> 20);
    Ok(path)
}

/// One "BINARY TEST RETRY" a line, RETRY one of `-` (never retried),
/// `retry` (a pass on the retry is flaky: a failure) and `retry-flaky-ok`.
fn plan_text(plan: &[(&str, Vec<&str>)]) -> String {
    plan.iter()
        .flat_map(|(bin, tests)| {
            tests.iter().map(move |t| {
                let retry = if !RETRY_ONCE.contains(t) {
                    "-"
                } else if ALLOWED_FLAKY.iter().any(|(name, _)| name == t) {
                    "retry-flaky-ok"
                } else {
                    "retry"
                };
                format!("{bin} {t} {retry}\n")
            })
        })
        .collect()
}

/// `word` as one shell word.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A writer of cpio "newc" archives, the format the kernel unpacks.
/// Parent directories are written before the first entry inside them.
struct Cpio<W: Write> {
    out: W,
    ino: u32,
    dirs: BTreeSet<String>,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

impl<W: Write> Cpio<W> {
    fn new(out: W) -> Self {
        Cpio { out, ino: 0, dirs: BTreeSet::new() }
    }

    fn header(&mut self, name: &str, mode: u32, size: u64, rdev: (u32, u32)) -> Result<()> {
        if let Some((parent, _)) = name.rsplit_once('/') {
            self.dir(parent)?;
        }
        self.ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let size = u32::try_from(size).context("a file of 4 GiB or more")?;
        let fields = [self.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, name.len() as u32 + 1, 0];
        let mut head = String::from("070701");
        for f in fields {
            head.push_str(&format!("{f:08x}"));
        }
        self.out.write_all(head.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(head.len() + name.len() + 1)
    }

    fn pad(&mut self, len: usize) -> Result<()> {
        self.out.write_all(&[0; 3][..(4 - len % 4) % 4])?;
        Ok(())
    }

    /// A directory (and its parents), once.
    fn dir(&mut self, name: &str) -> Result<()> {
        if self.dirs.insert(name.to_string()) {
            self.header(name, S_IFDIR | 0o755, 0, (0, 0))?;
        }
        Ok(())
    }

    fn char_device(&mut self, name: &str, major: u32, minor: u32) -> Result<()> {
        self.header(name, S_IFCHR | 0o600, 0, (major, minor))
    }

    fn bytes(&mut self, name: &str, perm: u32, data: &[u8]) -> Result<()> {
        self.header(name, S_IFREG | perm, data.len() as u64, (0, 0))?;
        self.out.write_all(data)?;
        self.pad(data.len())
    }

    /// A file from the host (symbolic links followed), as an executable.
    fn copy(&mut self, name: &str, from: &Path) -> Result<()> {
        let mut f = File::open(from).with_context(|| format!("cannot open {}", from.display()))?;
        let size = f.metadata()?.len();
        self.header(name, S_IFREG | 0o755, size, (0, 0))?;
        let copied = std::io::copy(&mut f, &mut self.out)?;
        if copied != size {
            bail!("{} changed while being copied", from.display());
        }
        self.pad(copied as usize)
    }

    fn finish(mut self) -> Result<W> {
        self.ino = 0;
        self.header("TRAILER!!!", 0, 0, (0, 0))?;
        Ok(self.out)
    }
}

/// The shared libraries (and the loader) a host binary needs, from ldd.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output().context("cannot run ldd")?;
    if !out.status.success() {
        bail!("ldd {} failed: {}", binary.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    // "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "\t/lib64/ld-linux-x86-64.so.2 (0x...)",
    // "\tlinux-vdso.so.1 (0x...)" (in the kernel: nothing to copy).
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split_once("=>").map_or(l, |(_, p)| p).split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_survive_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("a b;$c"), "'a b;$c'");
    }

    #[test]
    fn the_plan_says_how_each_test_is_retried() {
        let text = plan_text(&[(
            "core",
            vec!["exact_counts_for_a_known_workload", "a_200ms_futex_wait_lands_in_the_right_bucket"],
        )]);
        assert_eq!(
            text,
            "core exact_counts_for_a_known_workload -\n\
             core a_200ms_futex_wait_lands_in_the_right_bucket retry-flaky-ok\n"
        );
    }
}
