//! The guest kernels: Debian's cloud kernels, found and fetched with apt
//! under a private configuration, unpacked once into target/vmtest/kernel/.
//!
//! Each kernel has its own apt root, target/vmtest/apt/VERSION/: apt.conf
//! (passed in APT_CONFIG), sources.list, state/ (lists) and cache/. APT_CONFIG
//! is read before anything else, so it can keep the machine's
//! /etc/apt/apt.conf.d out (`-o Dir::Etc::Parts=...` on the command line
//! comes too late for that: its update hooks, e.g. appstream's refresh or
//! docker-clean's rm in /var/cache/apt, would still run). Nothing of the
//! machine's apt is written; only its mirror (from /etc/apt/sources.list*)
//! and its network settings (Acquire::http*, Check-Valid-Until, from
//! `apt-config dump`) are reused. The lists are refreshed once a day.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use anyhow::{bail, Context, Result};

use super::{dir, path_str};

/// The metapackage whose dependency names the kernel package.
const KERNEL_META: &str = "linux-image-cloud-amd64";

/// The keyring that signs every Debian release here (bullseye's keys
/// included, in bookworm's debian-archive-keyring).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// How long apt lists are used before `apt-get update` again.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Options of the kernels the guest relies on: all must be built in.
pub const KERNEL_CONFIG: &[&str] = &[
    "CONFIG_BPF_SYSCALL",
    "CONFIG_BPF_JIT",
    "CONFIG_BPF_EVENTS",
    "CONFIG_DEBUG_INFO_BTF",
    "CONFIG_FTRACE_SYSCALLS",
    "CONFIG_CGROUPS",
    "CONFIG_CGROUP_BPF",
    "CONFIG_FUTEX",
    "CONFIG_BLK_DEV_INITRD",
    "CONFIG_DEVTMPFS",
    "CONFIG_TMPFS",
    "CONFIG_DEBUG_FS",
    "CONFIG_SERIAL_8250",
    "CONFIG_SERIAL_8250_CONSOLE",
    "CONFIG_UNIX",
    "CONFIG_INET",
];

/// The one module the guest loads (init.sh's insmod): FUSE, a module in
/// Debian's 5.10 and 6.1 cloud kernels (built into 6.12's), for the tests'
/// slow filesystem (tests/src/slow_fs.rs: the `file` state of a read that
/// really blocks). Kept uncompressed in the cache as modules/fuse.ko.
pub const FUSE_MODULE: &str = "kernel/fs/fuse/fuse.ko";

/// Which Debian archive a suite is in.
#[derive(Debug, Clone, Copy)]
enum Archive {
    Main,
    Security,
}

/// A kernel vmtest boots.
#[derive(Debug)]
pub struct Spec {
    /// What --kernel takes, and the kernel package's version prefix.
    pub version: &'static str,
    /// The Debian release it comes from.
    pub release: &'static str,
    /// The suites apt looks in; the metapackage of the newest wins.
    suites: &'static [(Archive, &'static str)],
}

pub const KERNELS: &[Spec] = &[
    Spec {
        version: "5.10",
        release: "Debian 11 bullseye",
        suites: &[
            (Archive::Main, "bullseye"),
            (Archive::Main, "bullseye-updates"),
            (Archive::Security, "bullseye-security"),
        ],
    },
    Spec {
        version: "6.1",
        release: "Debian 12 bookworm",
        suites: &[
            (Archive::Main, "bookworm"),
            (Archive::Main, "bookworm-updates"),
            (Archive::Security, "bookworm-security"),
        ],
    },
    // Alone in its sources: with bookworm's lists too, bookworm's
    // metapackage (6.1) would win over the backport.
    Spec {
        version: "6.12",
        release: "Debian 12 bookworm-backports",
        suites: &[(Archive::Main, "bookworm-backports")],
    },
];

/// `all`, or versions separated by commas (in [`KERNELS`] order, once each).
pub fn select(arg: &str) -> Option<Vec<&'static Spec>> {
    if arg == "all" {
        return Some(KERNELS.iter().collect());
    }
    let wanted: Vec<&str> = arg.split(',').collect();
    if wanted.iter().any(|w| !KERNELS.iter().any(|k| k.version == *w)) {
        return None;
    }
    Some(KERNELS.iter().filter(|k| wanted.contains(&k.version)).collect())
}

/// The machine's Debian mirror: the archive and the security archive.
pub struct Mirror {
    main: String,
    security: String,
}

impl Mirror {
    /// From the machine's sources (one-line .list and deb822 .sources
    /// files): the first URI ending in /debian, and one ending in
    /// /debian-security (or the same host's). deb.debian.org if none.
    pub fn of_machine() -> Result<Mirror> {
        let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
        if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
            let mut more: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
                .collect();
            more.sort();
            files.extend(more);
        }
        let mut uris = Vec::new();
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else { continue };
            for line in text.lines().map(str::trim) {
                if let Some(v) = line.strip_prefix("URIs:") {
                    uris.extend(v.split_whitespace().map(str::to_string));
                } else if let Some(rest) = line.strip_prefix("deb ") {
                    // deb [options] URI suite components
                    let rest = match rest.trim_start().strip_prefix('[') {
                        Some(r) => r.split_once(']').map_or("", |(_, r)| r),
                        None => rest,
                    };
                    uris.extend(rest.split_whitespace().next().map(str::to_string));
                }
            }
        }
        let uris: Vec<String> = uris.iter().map(|u| u.trim_end_matches('/').to_string()).collect();
        let main = uris
            .iter()
            .find(|u| u.ends_with("/debian"))
            .cloned()
            .unwrap_or_else(|| "http://deb.debian.org/debian".to_string());
        let security = uris
            .iter()
            .find(|u| u.ends_with("/debian-security"))
            .cloned()
            .unwrap_or(format!("{main}-security"));
        eprintln!("vmtest: Debian mirror {main} and {security} (the machine's)");
        Ok(Mirror { main, security })
    }

    fn uri(&self, archive: Archive) -> &str {
        match archive {
            Archive::Main => &self.main,
            Archive::Security => &self.security,
        }
    }
}

/// The kernel image (and its config) cached in target/vmtest/kernel/PKG/boot.
pub struct Kernel {
    pub spec: &'static Spec,
    pub package: String,
    pub vmlinuz: PathBuf,
    /// boot/config-RELEASE
    pub config: PathBuf,
    /// modules/fuse.ko, its FUSE module (see [`FUSE_MODULE`]; None: FUSE
    /// is built in).
    pub fuse_module: Option<PathBuf>,
}

impl Kernel {
    /// Its release (uname -r), from boot/config-RELEASE.
    pub fn release(&self) -> Result<&str> {
        self.config
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("config-"))
            .context("a kernel config's name")
    }
}

/// The kernel of `spec`: the package its release's metapackage names,
/// downloaded and unpacked unless cached.
pub fn fetch(spec: &'static Spec, mirror: &Mirror) -> Result<Kernel> {
    let apt = Apt::new(spec, mirror)?;
    let package = apt.kernel_package()?;
    let cache = dir().join("kernel").join(&package);
    let module = cache.join("modules/fuse.ko");
    // (A cache from before the module was kept is downloaded again.)
    if boot_file(&cache, "vmlinuz-")?.is_some() && (module.exists() || fuse_built_in(&cache)?) {
        eprintln!("vmtest: {} kernel {package} (cached in {})", spec.version, cache.display());
    } else {
        download(&apt, &package, &cache)?;
    }
    let config = check_config(&cache)?;
    let vmlinuz = boot_file(&cache, "vmlinuz-")?.context("the kernel package has no boot/vmlinuz-*")?;
    let fuse_module = (!fuse_built_in(&cache)?).then_some(module);
    Ok(Kernel { spec, package, vmlinuz, config, fuse_module })
}

/// apt with a private configuration, lists and cache.
struct Apt {
    spec: &'static Spec,
    root: PathBuf,
    config: PathBuf,
    /// What the lists were fetched for: the configuration and sources.
    setup: String,
}

impl Apt {
    fn new(spec: &'static Spec, mirror: &Mirror) -> Result<Apt> {
        let root = dir().join("apt").join(spec.version);
        for d in ["empty", "state/lists/partial", "cache/archives/partial", "log"] {
            let d = root.join(d);
            std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let sources: String = spec
            .suites
            .iter()
            .map(|(archive, suite)| {
                format!("deb [signed-by={KEYRING}] {} {suite} main\n", mirror.uri(*archive))
            })
            .collect();
        std::fs::write(root.join("sources.list"), &sources)?;
        let r = path_str(&root)?;
        let mut config = format!(
            "// Written by cargo xtask vmtest: apt for {version} kernels only, nothing of the machine's.\n\
             Dir::Etc \"{r}/\";\n\
             Dir::Etc::Main \"/dev/null\";\n\
             Dir::Etc::Parts \"{r}/empty\";\n\
             Dir::Etc::SourceList \"{r}/sources.list\";\n\
             Dir::Etc::SourceParts \"{r}/empty\";\n\
             Dir::Etc::Preferences \"/dev/null\";\n\
             Dir::Etc::PreferencesParts \"{r}/empty\";\n\
             Dir::State \"{r}/state/\";\n\
             Dir::State::status \"/dev/null\";\n\
             Dir::Cache \"{r}/cache/\";\n\
             // Small on disk: lists kept compressed, no binary caches.\n\
             Dir::Cache::pkgcache \"\";\n\
             Dir::Cache::srcpkgcache \"\";\n\
             Acquire::GzipIndexes \"true\";\n\
             Dir::Log \"{r}/log/\";\n\
             APT::Architecture \"amd64\";\n\
             APT::Architectures {{ \"amd64\"; }};\n\
             // apt's _apt user may not reach target/.\n\
             APT::Sandbox::User \"root\";\n\
             Acquire::Languages \"none\";\n\
             // The machine's network settings (proxy, a snapshot mirror's dates):\n",
            version = spec.version,
        );
        config.push_str(&machine_network_settings());
        let path = root.join("apt.conf");
        std::fs::write(&path, &config).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Apt { spec, root, config: path, setup: config + &sources })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("APT_CONFIG", &self.config).env("LC_ALL", "C").stdin(Stdio::null());
        c
    }

    /// `apt-get update` unless lists for this configuration and these
    /// sources are younger than a day. A failed update with older lists
    /// there goes on with those.
    fn update(&self) -> Result<()> {
        let stamp = self.root.join("state/updated-for");
        let old = std::fs::read_to_string(&stamp).ok().filter(|s| *s == self.setup);
        let age = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        if old.is_some() && age.is_some_and(|a| a < LISTS_MAX_AGE) {
            return Ok(());
        }
        eprintln!("+ APT_CONFIG={} apt-get update -q", self.config.display());
        // apt writes progress to stdout: to stderr here, stdout is the guest's.
        let status = self
            .command("apt-get")
            .args(["update", "-q"])
            .stdout(std::io::stderr())
            .status()
            .context("cannot run apt-get")?;
        if status.success() {
            std::fs::write(&stamp, &self.setup)?;
        } else if old.is_some() {
            eprintln!(
                "vmtest: apt-get update failed ({status}): going on with the lists of an earlier update"
            );
        } else {
            bail!("apt-get update for {} failed ({status})", self.spec.release);
        }
        Ok(())
    }

    /// The exact kernel package, from the metapackage's dependency.
    fn kernel_package(&self) -> Result<String> {
        self.update()?;
        let out = self
            .command("apt-cache")
            .args(["depends", KERNEL_META])
            .output()
            .context("cannot run apt-cache")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let prefix = format!("linux-image-{}.", self.spec.version);
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.strip_prefix(&prefix).is_some_and(|rest| rest.ends_with("-cloud-amd64")))
            .map(str::to_string)
            .with_context(|| {
                format!(
                    "`apt-cache depends {KERNEL_META}` in {} names no {prefix}*-cloud-amd64 package: {}{}",
                    self.spec.release,
                    text.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    }
}

/// The machine's apt settings that say how to reach its mirror.
fn machine_network_settings() -> String {
    let Ok(out) = Command::new("apt-config").arg("dump").stdin(Stdio::null()).output() else {
        return String::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            ["Acquire::http", "Acquire::Check-Valid-Until ", "Acquire::Check-Date ", "Acquire::Retries "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// apt-get download, dpkg-deb -x, and boot/ and the FUSE module kept in
/// `cache`.
fn download(apt: &Apt, package: &str, cache: &Path) -> Result<()> {
    let tmp = dir().join("kernel/.download");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    eprintln!("+ APT_CONFIG={} apt-get download -q {package}  (in {})", apt.config.display(), tmp.display());
    let status = apt
        .command("apt-get")
        .args(["download", "-q", package])
        .current_dir(&tmp)
        .stdout(std::io::stderr())
        .status()
        .context("cannot run apt-get")?;
    if !status.success() {
        bail!("apt-get download {package} failed ({status})");
    }
    let deb = std::fs::read_dir(&tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", tmp.display()))?;
    let unpacked = tmp.join("root");
    crate::sh("dpkg-deb", &["-x", path_str(&deb)?, path_str(&unpacked)?], &[])?;
    // Only boot/ and FUSE's module are kept (see KERNEL_CONFIG and
    // FUSE_MODULE).
    let modules = unpacked.join("lib/modules");
    let release = std::fs::read_dir(&modules)
        .with_context(|| format!("the package has no {}", modules.display()))?
        .filter_map(|e| e.ok())
        .next()
        .context("the package's lib/modules is empty")?
        .path();
    let fuse = release.join(FUSE_MODULE);
    std::fs::create_dir_all(cache.join("modules"))?;
    let kept = cache.join("modules/fuse.ko");
    if fuse_built_in(&unpacked)? {
        // Built in: nothing to load.
    } else if fuse.exists() {
        std::fs::copy(&fuse, &kept).with_context(|| format!("cannot copy {}", fuse.display()))?;
    } else {
        // Compressed (CONFIG_MODULE_COMPRESS_*): busybox's insmod takes it plain.
        let (packed, tool) = [("xz", "xz"), ("zst", "zstd"), ("gz", "gzip")]
            .iter()
            .map(|(ext, tool)| (release.join(format!("{FUSE_MODULE}.{ext}")), *tool))
            .find(|(p, _)| p.exists())
            .with_context(|| {
                format!("the package has no {} (.ko, .ko.xz, .ko.zst, .ko.gz)", fuse.display())
            })?;
        let out = Command::new(tool)
            .arg("-dc")
            .arg(&packed)
            .output()
            .with_context(|| format!("cannot run {tool} -dc {}", packed.display()))?;
        if !out.status.success() {
            bail!("{tool} -dc {} failed ({})", packed.display(), out.status);
        }
        std::fs::write(&kept, out.stdout)?;
    }
    let boot = cache.join("boot");
    std::fs::create_dir_all(&boot)?;
    for entry in std::fs::read_dir(unpacked.join("boot")).context("the package has no boot/")? {
        let entry = entry?;
        std::fs::copy(entry.path(), boot.join(entry.file_name()))
            .with_context(|| format!("cannot copy {}", entry.path().display()))?;
    }
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}

/// Whether the kernel under `tree` (a cache, or the unpacked package) has
/// FUSE built in, by its boot/config-*.
fn fuse_built_in(tree: &Path) -> Result<bool> {
    Ok(match boot_file(tree, "config-")? {
        Some(c) => std::fs::read_to_string(c)?.lines().any(|l| l == "CONFIG_FUSE_FS=y"),
        None => false,
    })
}

/// boot/<prefix>* in a cached kernel, if there.
fn boot_file(cache: &Path, prefix: &str) -> Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(cache.join("boot")) else {
        return Ok(None);
    };
    for e in entries {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with(prefix) {
            return Ok(Some(e.path()));
        }
    }
    Ok(None)
}

/// The kernel's config, with every [`KERNEL_CONFIG`] option built in (or
/// an error naming those that are modules or unset).
fn check_config(cache: &Path) -> Result<PathBuf> {
    let path = boot_file(cache, "config-")?.context("the kernel package has no boot/config-*")?;
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = |opt: &str| {
        text.lines().find_map(|l| l.strip_prefix(opt).and_then(|rest| rest.strip_prefix('='))).unwrap_or("")
    };
    let missing: Vec<String> = KERNEL_CONFIG
        .iter()
        .filter(|opt| value(opt) != "y")
        .map(|opt| match value(opt) {
            "m" => format!("{opt} (=m, a module)"),
            "" => format!("{opt} (not set)"),
            v => format!("{opt} (={v})"),
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} lacks built-in {}: the guest would need modules (or another kernel)",
            path.display(),
            missing.join(", ")
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        let v = |s: &str| select(s).map(|ks| ks.iter().map(|k| k.version).collect::<Vec<_>>());
        assert_eq!(v("all").unwrap(), ["5.10", "6.1", "6.12"]);
        assert_eq!(v("6.12,6.1,6.12").unwrap(), ["6.1", "6.12"]);
        assert!(v("4.19").is_none());
        assert!(v("6.1,").is_none());
        assert!(v("6").is_none());
    }
}
