//! How much of a file path `/findings` shows (`--findings-paths`).
//!
//! On inference nodes paths often carry customer or request identifiers
//! (`/data/<customer>/<request>/speech.mp3`). Detectors keep full paths (they
//! key on them); this is applied to the answer only, so the setting can
//! change on SIGHUP and the metrics (which carry file classes, never paths)
//! are unaffected. Each kind of finding rewrites its own paths with
//! [`PathDisplay::show`] (`DetailKind::show_paths`).

use serde::{Deserialize, Serialize};

use super::Finding;

/// `full`: as opened; `name`: the last component; `none`: the file class
/// only, written `[model]`, `[audio]`, ...
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum PathDisplay {
    #[default]
    Full,
    Name,
    None,
}

impl PathDisplay {
    /// `path` as this setting shows it.
    pub fn show(self, path: &str) -> String {
        match self {
            PathDisplay::Full => path.to_string(),
            PathDisplay::Name => path.rsplit('/').next().unwrap_or(path).to_string(),
            PathDisplay::None => format!(
                "[{}]",
                sonic_probe_common::file_class_name(sonic_probe_common::class_of_path(path.as_bytes()))
            ),
        }
    }
}

/// Rewrites every path of `findings` as `display` says.
pub fn show_paths(findings: &mut [Finding], display: PathDisplay) {
    if display == PathDisplay::Full {
        return;
    }
    for f in findings {
        f.detail.show_paths(display);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{mmap_churn, small_reads, syscall_errors, Detail};

    fn finding(detail: Detail) -> Finding {
        Finding {
            workload: Default::default(),
            cgroup: 0,
            detail,
            pid: 1,
            comm: "python3".into(),
            processes: 1,
            pids: vec![1],
            first_seen: String::new(),
            last_seen: String::new(),
        }
    }

    #[test]
    fn paths_shown_in_full_by_name_or_not_at_all() {
        let path = "/data/acme/req-17/speech.mp3";
        let all = vec![
            finding(Detail::SmallReads(small_reads::Detail {
                path: path.into(),
                file_class: "audio".into(),
                count: 9,
                bytes: 9216,
                typical_size: 1024,
                files: Vec::new(),
            })),
            finding(Detail::MmapChurn(mmap_churn::Detail {
                size_bytes: 1 << 25,
                count: 3,
                path: Some("/m/acme/x.pth".into()),
            })),
            finding(Detail::SyscallErrors(syscall_errors::Detail {
                syscall: "openat".into(),
                errno: "ENOENT".into(),
                count: 2,
                paths: vec!["/etc/acme.conf".into()],
                length: None,
                wait_seconds: None,
            })),
        ];
        let shown = |d: PathDisplay| {
            let mut f = all.clone();
            show_paths(&mut f, d);
            serde_json::to_string(&f).unwrap()
        };
        assert_eq!(shown(PathDisplay::Full), serde_json::to_string(&all).unwrap());
        let name = shown(PathDisplay::Name);
        assert!(
            name.contains("\"speech.mp3\"") && name.contains("\"x.pth\"") && name.contains("\"acme.conf\"")
        );
        assert!(!name.contains("req-17") && !name.contains("/m/acme"), "{name}");
        let none = shown(PathDisplay::None);
        assert!(none.contains("\"[audio]\"") && none.contains("\"[model]\"") && none.contains("\"[other]\""));
        assert!(!none.contains("acme") && !none.contains("speech"), "{none}");
    }
}
