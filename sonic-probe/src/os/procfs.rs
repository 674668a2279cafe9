//! The little we read from /proc and /sys: process names, thread groups,
//! liveness, the cgroup2 mount, our own capabilities, the GPU drivers' majors.
//!
//! Hand-written because each is a one-line parse; none is on a hot path.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

/// A field of /proc/PID/status (e.g. "Tgid"), trimmed.
pub fn status_field(pid: u32, field: &str) -> io::Result<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status_field(&text, field)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {field} in status")))
}

fn parse_status_field(text: &str, field: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == field).then(|| v.trim().to_string())
    })
}

/// The character-device majors of the GPU drivers loaded now (from
/// /proc/devices), as probe_config.gpu_majors holds them; none if unreadable.
pub fn gpu_majors() -> [u32; sonic_probe_common::MAX_GPU_MAJORS] {
    sonic_probe_common::gpu_majors(&fs::read_to_string("/proc/devices").unwrap_or_default())
}

/// The process (thread group) a thread id belongs to.
pub fn tgid_of(pid: u32) -> io::Result<u32> {
    status_field(pid, "Tgid")?.parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad Tgid"))
}

/// The name of a process (its thread-group leader's comm).
pub fn comm_of(pid: u32) -> io::Result<String> {
    let mut s = fs::read_to_string(format!("/proc/{pid}/comm"))?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

/// True while the process exists, zombies included: until it is reaped no
/// other process can get its pid.
pub fn is_alive(tgid: u32) -> bool {
    Path::new(&format!("/proc/{tgid}")).exists()
}

/// Every process id on the host (thread-group leaders only).
pub fn processes() -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc")? {
        if let Some(pid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(pid);
        }
    }
    Ok(out)
}

/// The kernel's pid_max (4194304 on 64-bit hosts by default).
pub fn pid_max() -> u32 {
    fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304)
}

/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on unified
/// hosts, /sys/fs/cgroup/unified on hybrid ones), if it is.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_cgroup2_mount(&text)
}

fn parse_cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(unescape_mount(pre.split_whitespace().nth(4)?)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Our effective capability set (CapEff), as a bit mask.
pub fn effective_capabilities() -> io::Result<u64> {
    let v = status_field(std::process::id(), "CapEff")?;
    u64::from_str_radix(&v, 16).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad CapEff"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let t = "Name:\tpython3\nTgid:\t1234\nPid:\t1240\n";
        assert_eq!(parse_status_field(t, "Tgid").as_deref(), Some("1234"));
        assert_eq!(parse_status_field(t, "Pid").as_deref(), Some("1240"));
        assert_eq!(parse_status_field(t, "PPid"), None);
    }

    #[test]
    fn cgroup2_mount_on_hybrid_and_unified_hosts() {
        let hybrid = "35 25 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      40 25 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(parse_cgroup2_mount(hybrid), Some("/sys/fs/cgroup/unified".into()));
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(parse_cgroup2_mount(unified), Some("/sys/fs/cgroup".into()));
        let escaped = "30 23 0:26 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(parse_cgroup2_mount(escaped), Some("/mnt/my cg".into()));
        assert_eq!(parse_cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/vda rw\n"), None);
    }

    #[test]
    fn our_own_process_is_readable() {
        let me = std::process::id();
        assert_eq!(tgid_of(me).unwrap(), me);
        assert!(is_alive(me));
        assert!(!comm_of(me).unwrap().is_empty());
        assert!(processes().unwrap().contains(&me));
    }
}
