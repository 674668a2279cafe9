//! What to watch: `--pid`, `--comm` and `--cgroup` resolved into the ids the
//! BPF programs filter on.
//!
//! The kernel side decides per system call whether the calling process is a
//! target. It looks the process up in `target_processes` (filled from --pid,
//! from --comm matches, and by the fork/exec programs as processes come and
//! go), then, if there are cgroup targets, compares the caller's cgroup
//! ancestors with `target_cgroups`. This module resolves the user's words
//! into those ids and checks them, so that a typo is a usage error before
//! anything is attached.

use std::path::{Component, Path, PathBuf};

use sonic_probe_common::{COMM_LEN, FILTER_CGROUPS, FILTER_TARGETS, MAX_CGROUP_LEVEL};

use crate::{
    error::{Error, Result},
    os::procfs,
};

/// The resolved target set. Empty means the whole host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    pub pids: Vec<PidTarget>,
    pub comms: Vec<String>,
    pub cgroups: Vec<CgroupTarget>,
}

/// A --pid target: what the user typed and the process it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidTarget {
    pub requested: u32,
    pub tgid: u32,
}

/// A --cgroup target: its directory, cgroup id (the directory's inode on
/// cgroup2) and level (depth below the root cgroup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupTarget {
    pub path: PathBuf,
    pub id: u64,
    pub level: u32,
}

impl Targets {
    pub fn resolve(pids: &[i64], comms: &[String], cgroups: &[String]) -> Result<Self> {
        let mut t = Targets::default();
        for &pid in pids {
            let p = PidTarget::check("--pid", pid)?;
            if !t.pids.iter().any(|q| q.tgid == p.tgid) {
                t.pids.push(p);
            }
        }
        for c in comms {
            let c = check_comm(c)?;
            if !t.comms.contains(&c) {
                t.comms.push(c);
            }
        }
        if !cgroups.is_empty() {
            let mount = procfs::cgroup2_mount();
            for spec in cgroups {
                let cg = resolve_cgroup(spec, mount.as_deref())?;
                if !t.cgroups.iter().any(|c| c.id == cg.id) {
                    t.cgroups.push(cg);
                }
            }
        }
        Ok(t)
    }

    pub fn is_whole_host(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty() && self.cgroups.is_empty()
    }

    /// `probe_config.filter_flags` for this set.
    pub fn filter_flags(&self) -> u32 {
        let mut f = 0;
        if !self.is_whole_host() {
            f |= FILTER_TARGETS;
        }
        if !self.cgroups.is_empty() {
            f |= FILTER_CGROUPS;
        }
        f
    }

    /// `probe_config.cgroup_levels`: one bit per level holding a target.
    pub fn cgroup_levels(&self) -> u32 {
        self.cgroups.iter().fold(0, |m, c| m | (1 << c.level))
    }

    /// For the ready log line.
    pub fn describe(&self) -> String {
        if self.is_whole_host() {
            return "whole host".into();
        }
        let mut parts = Vec::new();
        for p in &self.pids {
            if p.requested == p.tgid {
                parts.push(format!("pid {}", p.tgid));
            } else {
                parts.push(format!("pid {} (process of thread {})", p.tgid, p.requested));
            }
        }
        parts.extend(self.comms.iter().map(|c| format!("comm {c}")));
        parts.extend(self.cgroups.iter().map(|c| format!("cgroup {}", c.path.display())));
        parts.join(", ")
    }
}

impl PidTarget {
    /// A process id the user gave (`run --pid`, `trace -p`), checked: in
    /// range (0 < pid < pid_max), a live process or thread, not sonic-probe
    /// itself. `flag` names the option in the error.
    pub fn check(flag: &str, pid: i64) -> Result<Self> {
        Self::check_against(flag, pid, std::process::id())
    }

    /// The same from the text of one id (`trace -p 12,34` gives two).
    pub fn parse(flag: &str, text: &str) -> Result<Self> {
        let pid =
            text.trim().parse().map_err(|_| Error::usage(format!("{flag} {text}: not a process id")))?;
        Self::check(flag, pid)
    }

    /// [`PidTarget::check`], with `me` the process that may not be a target.
    fn check_against(flag: &str, pid: i64, me: u32) -> Result<Self> {
        let max = procfs::pid_max();
        if pid <= 0 {
            return Err(Error::usage(format!("{flag} {pid}: a process id is a positive number")));
        }
        if pid >= i64::from(max) {
            return Err(Error::usage(format!(
                "{flag} {pid}: larger than the kernel's pid_max ({max}), no such process"
            )));
        }
        let requested = pid as u32;
        let tgid =
            procfs::tgid_of(requested).map_err(|_| Error::usage(format!("{flag} {pid}: no such process")))?;
        if tgid == me {
            return Err(Error::usage(format!("{flag} {pid}: that is sonic-probe itself")));
        }
        Ok(PidTarget { requested, tgid })
    }
}

fn check_comm(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(Error::usage("--comm: the process name is empty"));
    }
    if name.contains('\0') {
        return Err(Error::usage("--comm: a process name cannot contain NUL"));
    }
    if name.len() > COMM_LEN - 1 {
        let cut = String::from_utf8_lossy(&name.as_bytes()[..COMM_LEN - 1]).into_owned();
        return Err(Error::usage(format!(
            "--comm {name}: process names are at most {} bytes (the kernel cuts longer ones; \
             this one would be '{cut}')",
            COMM_LEN - 1
        )));
    }
    Ok(name.to_string())
}

fn resolve_cgroup(spec: &str, mount: Option<&Path>) -> Result<CgroupTarget> {
    let Some(mount) = mount else {
        return Err(Error::usage(format!(
            "--cgroup {spec}: no cgroup v2 filesystem is mounted (sonic-probe filters on cgroup v2)"
        )));
    };
    let given = Path::new(spec);
    let path =
        if given.starts_with(mount) { given.to_path_buf() } else { mount.join(spec.trim_start_matches('/')) };
    let not_a_cgroup = || {
        Error::usage(format!(
            "--cgroup {spec}: {} is not a cgroup v2 directory (cgroup v2 is mounted at {})",
            path.display(),
            mount.display()
        ))
    };
    let real = path.canonicalize().map_err(|_| not_a_cgroup())?;
    if !real.starts_with(mount) || !real.join("cgroup.procs").is_file() {
        return Err(not_a_cgroup());
    }
    let rel = real.strip_prefix(mount).expect("checked above");
    let level = rel.components().filter(|c| matches!(c, Component::Normal(_))).count() as u32;
    if level > MAX_CGROUP_LEVEL {
        return Err(Error::usage(format!(
            "--cgroup {spec}: nested {level} levels deep, deeper than the {MAX_CGROUP_LEVEL} supported"
        )));
    }
    let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&real).map_err(|_| not_a_cgroup())?);
    Ok(CgroupTarget { path: real, id, level })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_checked() {
        let me = std::process::id();
        for bad in [0, -1, i64::from(u32::MAX) + 5] {
            assert!(matches!(PidTarget::check_against("--pid", bad, me), Err(Error::Usage(_))), "{bad}");
        }
        assert!(matches!(PidTarget::check_against("--pid", i64::from(me), me), Err(Error::Usage(_))));
        // pid 1 exists on every Linux host.
        assert_eq!(PidTarget::check_against("--pid", 1, me).unwrap(), PidTarget { requested: 1, tgid: 1 });
    }

    #[test]
    fn pids_are_parsed_and_named_by_their_flag() {
        assert_eq!(PidTarget::parse("-p", " 1").unwrap(), PidTarget { requested: 1, tgid: 1 });
        let msg = |r: Result<PidTarget>| r.unwrap_err().to_string();
        assert_eq!(msg(PidTarget::parse("-p", "abc")), "-p abc: not a process id");
        assert_eq!(msg(PidTarget::parse("-p", "0")), "-p 0: a process id is a positive number");
        assert_eq!(
            msg(PidTarget::parse("-p", &std::process::id().to_string())),
            format!("-p {}: that is sonic-probe itself", std::process::id())
        );
    }

    #[test]
    fn a_thread_id_names_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        let p = PidTarget::check_against("--pid", i64::from(tid), 1).unwrap();
        assert_eq!(p.tgid, std::process::id());
        assert_eq!(p.requested, tid);
        h.join().unwrap();
    }

    #[test]
    fn comm_names_are_checked() {
        assert_eq!(check_comm("python3").unwrap(), "python3");
        assert!(check_comm("123456789012345").is_ok());
        assert!(check_comm("1234567890123456").is_err());
        assert!(check_comm("").is_err());
    }

    #[test]
    fn cgroups_resolve_under_the_mount() {
        let Some(mount) = procfs::cgroup2_mount() else {
            eprintln!("skipped: no cgroup2 mount on this host");
            return;
        };
        let root = resolve_cgroup("/", Some(&mount)).unwrap();
        assert_eq!(root.level, 0);
        let abs = resolve_cgroup(mount.to_str().unwrap(), Some(&mount)).unwrap();
        assert_eq!(abs, root);
        assert!(matches!(resolve_cgroup("no/such/group", Some(&mount)), Err(Error::Usage(_))));
        assert!(matches!(resolve_cgroup("../../etc", Some(&mount)), Err(Error::Usage(_))));
        assert!(matches!(resolve_cgroup("x", None), Err(Error::Usage(_))));
    }

    #[test]
    fn flags_and_levels() {
        let mut t = Targets::default();
        assert!(t.is_whole_host());
        assert_eq!(t.filter_flags(), 0);
        t.comms.push("python3".into());
        assert_eq!(t.filter_flags(), FILTER_TARGETS);
        t.cgroups.push(CgroupTarget { path: "/x".into(), id: 7, level: 2 });
        t.cgroups.push(CgroupTarget { path: "/y".into(), id: 8, level: 4 });
        assert_eq!(t.filter_flags(), FILTER_TARGETS | FILTER_CGROUPS);
        assert_eq!(t.cgroup_levels(), 0b10100);
        assert_eq!(t.describe(), "comm python3, cgroup /x, cgroup /y");
    }
}
