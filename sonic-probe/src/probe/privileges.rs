//! Checks that we may load tracing BPF programs before trying to, so that
//! a missing privilege is one clear line instead of an EPERM from deep in
//! the loader.

use anyhow::anyhow;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Ok if the effective set has CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN.
pub fn check() -> anyhow::Result<()> {
    let caps = crate::os::procfs::effective_capabilities()
        .map_err(|e| anyhow!("cannot read our capabilities from /proc/self/status: {e}"))?;
    missing(caps).map_or(Ok(()), |m| Err(anyhow!(m)))
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

fn missing(caps: u64) -> Option<String> {
    if has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON)) {
        return None;
    }
    let names: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .iter()
        .filter(|(c, _)| !has(caps, *c))
        .map(|(_, n)| *n)
        .collect();
    Some(format!(
        "missing privileges: loading the BPF programs needs CAP_BPF and CAP_PERFMON (missing: {}); \
         run as root or grant them, e.g. setpriv --inh-caps +bpf,+perfmon --ambient-caps +bpf,+perfmon",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert!(missing(1 << CAP_SYS_ADMIN).is_none());
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_none());
        let m = missing(1 << CAP_BPF).unwrap();
        assert!(m.contains("missing: CAP_PERFMON") && !m.contains("CAP_BPF,"), "{m}");
        assert!(missing(0).unwrap().contains("CAP_BPF, CAP_PERFMON"));
    }
}
