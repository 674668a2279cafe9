//! A cgroup's CPU limit and the time the kernel throttled it, read where
//! the CPU controller is, for the two users of the answer: the
//! `sonic_probe_cpu_throttled_seconds_total` metric (is a workload's
//! run-queue time its own limit's doing?) and the cpu_starved finding
//! (throttled or node_busy).
//!
//! The controller is on cgroup v2 (cpu.max, cpu.stat's `throttled_usec`)
//! or, on hosts whose CPU controller is still on cgroup v1 (Amazon Linux 2,
//! hybrid systemd), in the v1 `cpu` hierarchy at the same path (cpu.stat's
//! `throttled_time`, cpu.cfs_quota_us and cpu.cfs_period_us): systemd and
//! the kubelet make a unit's or a pod's cgroup at the same path in every
//! hierarchy.
//!
//! A limit throttles every cgroup below it, and the kernel counts the
//! throttled time where the limit is (a container without a limit of its
//! own in a pod with one is throttled by the pod's). So a cgroup's answer
//! is its nearest limited ancestor's, itself included: found by walking
//! the path up, kept [`RECHECK`] per path (limits are set rarely; the
//! throttled time is read fresh every time), at most [`MAX_PATHS`] paths.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// A cgroup's CPU limit and throttling, as its files say.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuThrottle {
    /// The limit in CPUs (quota / period); None: no limit.
    pub limit_cores: Option<f64>,
    /// Time its threads were throttled, since the cgroup was made.
    pub throttled_ns: u64,
}

/// The limit that applies to a cgroup: where it is and what it says now.
#[derive(Debug, Clone, PartialEq)]
pub struct Limiting {
    /// The limited cgroup's path from the hierarchy's root ("/...").
    pub cgroup: String,
    pub throttle: CpuThrottle,
}

/// How long a path's nearest limited ancestor is trusted before it is
/// looked for again (a limit set or lifted shows within this).
pub const RECHECK: Duration = Duration::from_secs(30);
/// Paths whose answer is kept at most (cleared when full).
pub const MAX_PATHS: usize = 4096;

/// Which hierarchy holds a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hierarchy {
    V2,
    V1,
}

/// The nearest limited ancestor of each path asked about, cached.
#[derive(Debug)]
pub struct CpuLimits {
    v2: Option<PathBuf>,
    v1: Option<PathBuf>,
    /// path -> (its limiter: path and hierarchy, or none; when looked for).
    known: HashMap<String, (Option<(String, Hierarchy)>, Instant)>,
}

impl CpuLimits {
    /// Limits under the cgroup v2 mount `v2` and the v1 `cpu` hierarchy's
    /// mount `v1` (either may be absent).
    pub fn new(v2: Option<PathBuf>, v1: Option<PathBuf>) -> Self {
        CpuLimits { v2, v1, known: HashMap::new() }
    }

    /// The host's: the v1 `cpu` hierarchy from mountinfo beside `v2`.
    pub fn host(v2: Option<PathBuf>) -> Self {
        Self::new(v2, cpu_v1_mount())
    }

    /// The limit that applies to the cgroup at `path` ("/..." from the
    /// root), with its throttled time now; None: no limit above it.
    pub fn limiting(&mut self, path: &str) -> Option<Limiting> {
        let now = Instant::now();
        let cached = match self.known.get(path) {
            Some((limiter, at)) if now.duration_since(*at) < RECHECK => Some(limiter.clone()),
            _ => None,
        };
        let limiter = match cached {
            Some(l) => l,
            None => {
                let l = self.find(path);
                if self.known.len() >= MAX_PATHS {
                    self.known.clear();
                }
                self.known.insert(path.to_string(), (l.clone(), now));
                l
            }
        };
        let (cgroup, h) = limiter?;
        match self.read(&cgroup, h) {
            Some(throttle) if throttle.limit_cores.is_some() => Some(Limiting { cgroup, throttle }),
            // Lifted, or the cgroup is gone: look again next time.
            _ => {
                self.known.remove(path);
                None
            }
        }
    }

    /// Walks from `path` up to the root for the first limited cgroup.
    fn find(&self, path: &str) -> Option<(String, Hierarchy)> {
        let mut p = normalize(path);
        loop {
            for h in [Hierarchy::V2, Hierarchy::V1] {
                if self.read(&p, h).is_some_and(|t| t.limit_cores.is_some()) {
                    return Some((p, h));
                }
            }
            if p == "/" {
                return None;
            }
            p = match p.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => p[..i].to_string(),
            };
        }
    }

    fn read(&self, path: &str, h: Hierarchy) -> Option<CpuThrottle> {
        let (root, read): (_, fn(&Path) -> Option<CpuThrottle>) = match h {
            Hierarchy::V2 => (self.v2.as_ref()?, throttle_v2),
            Hierarchy::V1 => (self.v1.as_ref()?, throttle_v1),
        };
        read(&root.join(path.trim_start_matches('/')))
    }
}

/// "/a/b/" and "a/b" as "/a/b"; "" as "/".
fn normalize(path: &str) -> String {
    let t = path.trim_matches('/');
    format!("/{t}")
}

/// The cgroup v1 hierarchy with the `cpu` controller, from mountinfo.
pub fn cpu_v1_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        if post.next()? != "cgroup" {
            return None;
        }
        let opts = post.nth(1)?;
        let dir = pre.split_whitespace().nth(4)?;
        opts.split(',').any(|o| o == "cpu").then(|| PathBuf::from(dir))
    })
}

/// A key of a cgroup file (`name value` lines).
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// cgroup v2: cpu.stat's throttled_usec and cpu.max (`max 100000` or
/// `quota period`). None where the CPU controller is not enabled.
pub fn throttle_v2(dir: &Path) -> Option<CpuThrottle> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let throttled_us = stat_field(&stat, "throttled_usec")?;
    let max = fs::read_to_string(dir.join("cpu.max")).unwrap_or_default();
    let mut it = max.split_whitespace();
    let limit = match (it.next(), it.next().and_then(|p| p.parse::<f64>().ok())) {
        (Some(q), Some(p)) if p > 0.0 => q.parse::<f64>().ok().map(|q| q / p),
        _ => None,
    };
    Some(CpuThrottle { limit_cores: limit, throttled_ns: throttled_us * 1000 })
}

/// cgroup v1: cpu.stat's throttled_time (ns), cpu.cfs_quota_us (-1: none)
/// and cpu.cfs_period_us.
pub fn throttle_v1(dir: &Path) -> Option<CpuThrottle> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let throttled_ns = stat_field(&stat, "throttled_time")?;
    let read = |f: &str| fs::read_to_string(dir.join(f)).ok().and_then(|s| s.trim().parse::<i64>().ok());
    let limit = match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
        (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
        _ => None,
    };
    Some(CpuThrottle { limit_cores: limit, throttled_ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sp-cpu-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn cgroup_cpu_files_read_as_the_kernel_writes_them() {
        let d = temp("files");
        fs::write(d.join("cpu.stat"), "usage_usec 10\nnr_periods 5\nnr_throttled 2\nthrottled_usec 1500\n")
            .unwrap();
        fs::write(d.join("cpu.max"), "20000 100000\n").unwrap();
        assert_eq!(throttle_v2(&d), Some(CpuThrottle { limit_cores: Some(0.2), throttled_ns: 1_500_000 }));
        fs::write(d.join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(throttle_v2(&d).unwrap().limit_cores, None);
        fs::write(d.join("cpu.stat"), "nr_periods 5\nnr_throttled 2\nthrottled_time 7000\n").unwrap();
        assert_eq!(throttle_v2(&d), None, "v1's cpu.stat has no throttled_usec");
        fs::write(d.join("cpu.cfs_quota_us"), "50000\n").unwrap();
        fs::write(d.join("cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(throttle_v1(&d), Some(CpuThrottle { limit_cores: Some(0.5), throttled_ns: 7000 }));
        fs::write(d.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        assert_eq!(throttle_v1(&d).unwrap().limit_cores, None);
        fs::remove_dir_all(&d).unwrap();
    }

    /// A v2 cgroup at `dir/rel` with cpu.max `max` and `throttled` µs.
    fn v2(root: &Path, rel: &str, max: &str, throttled_us: u64) {
        let d = root.join(rel.trim_start_matches('/'));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("cpu.stat"), format!("usage_usec 1\nthrottled_usec {throttled_us}\n")).unwrap();
        fs::write(d.join("cpu.max"), format!("{max}\n")).unwrap();
    }

    #[test]
    fn the_nearest_limited_ancestor_answers_for_a_cgroup() {
        let root = temp("walk");
        v2(&root, "/kubepods.slice", "max 100000", 0);
        v2(&root, "/kubepods.slice/pod-a", "200000 100000", 4000);
        v2(&root, "/kubepods.slice/pod-a/ctr-1", "max 100000", 0);
        v2(&root, "/kubepods.slice/pod-a/ctr-2", "50000 100000", 9000);
        let mut l = CpuLimits::new(Some(root.clone()), None);
        let pod = Limiting {
            cgroup: "/kubepods.slice/pod-a".into(),
            throttle: CpuThrottle { limit_cores: Some(2.0), throttled_ns: 4_000_000 },
        };
        assert_eq!(l.limiting("/kubepods.slice/pod-a/ctr-1"), Some(pod.clone()), "the pod's limit");
        assert_eq!(l.limiting("/kubepods.slice/pod-a/ctr-1/"), Some(pod.clone()));
        assert_eq!(l.limiting("/kubepods.slice/pod-a"), Some(pod));
        let own = l.limiting("/kubepods.slice/pod-a/ctr-2").unwrap();
        assert_eq!(
            (own.cgroup.as_str(), own.throttle.limit_cores),
            ("/kubepods.slice/pod-a/ctr-2", Some(0.5))
        );
        assert_eq!(l.limiting("/kubepods.slice"), None);
        assert_eq!(l.limiting("/"), None);
        assert_eq!(l.limiting("/no/such/cgroup"), None);

        // The throttled time is read fresh; the limiter is cached.
        v2(&root, "/kubepods.slice/pod-a", "200000 100000", 6000);
        assert_eq!(l.limiting("/kubepods.slice/pod-a/ctr-1").unwrap().throttle.throttled_ns, 6_000_000);
        // A lifted limit is seen at once, and looked for again next time.
        v2(&root, "/kubepods.slice/pod-a", "max 100000", 6000);
        assert_eq!(l.limiting("/kubepods.slice/pod-a/ctr-1"), None);
        v2(&root, "/kubepods.slice", "100000 100000", 1);
        assert_eq!(
            l.limiting("/kubepods.slice/pod-a/ctr-1").map(|x| x.cgroup),
            Some("/kubepods.slice".to_string())
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_v1_cpu_hierarchy_answers_where_v2_has_no_cpu_controller() {
        let (r2, r1) = (temp("v2only"), temp("v1cpu"));
        // v2 without the cpu controller: cpu.stat without throttled_usec.
        fs::create_dir_all(r2.join("system.slice/sonic.service")).unwrap();
        fs::write(r2.join("system.slice/sonic.service/cpu.stat"), "usage_usec 5\n").unwrap();
        let d = r1.join("system.slice");
        fs::create_dir_all(d.join("sonic.service")).unwrap();
        fs::write(d.join("cpu.stat"), "nr_periods 1\nthrottled_time 777\n").unwrap();
        fs::write(d.join("cpu.cfs_quota_us"), "150000\n").unwrap();
        fs::write(d.join("cpu.cfs_period_us"), "100000\n").unwrap();
        let mut l = CpuLimits::new(Some(r2.clone()), Some(r1.clone()));
        assert_eq!(
            l.limiting("/system.slice/sonic.service"),
            Some(Limiting {
                cgroup: "/system.slice".into(),
                throttle: CpuThrottle { limit_cores: Some(1.5), throttled_ns: 777 }
            })
        );
        fs::remove_dir_all(&r2).unwrap();
        fs::remove_dir_all(&r1).unwrap();
    }
}
