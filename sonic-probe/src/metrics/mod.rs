//! The Prometheus side: every metric sonic-probe exports, built at scrape
//! time from the kernel maps, the findings engine and the daemon's own
//! counters.
//!
//! Like Cloudflare's ebpf_exporter, nothing is copied into a registry ahead
//! of time: the collectors read the maps when Prometheus asks, so the
//! numbers are exactly the kernel's at that moment. [`metric_defs`] is the
//! contract (names, types, labels, help); docs/metrics.md documents every
//! entry and a test keeps the two in step.
//!
//! - [`family`]: the contract's entry type and the builders (named by the
//!   detectors too, which declare and build their own families);
//! - [`syscalls`]: the system-call families, from the aggregation maps;
//! - [`probe`]: [`probe::ProbeCollector`], the kernel's counts and the
//!   daemon's own health;
//! - [`threads`]: where watched threads' time goes (collected by the
//!   probe's collector);
//! - [`gpu`]: GPU waits and the libraries probed (collected by the probe's
//!   collector);
//! - [`findings`]: [`findings::FindingsCollector`], the findings engine and
//!   its detectors.

pub mod family;
pub mod findings;
pub mod gpu;
pub mod probe;
pub mod syscalls;
pub mod threads;

use family::MetricDef;

/// Every metric family sonic-probe exports (besides the process_* ones of
/// the prometheus crate): the system-call families, the probe's and the
/// findings engine's, each detector's included.
pub fn metric_defs() -> &'static [MetricDef] {
    static DEFS: std::sync::OnceLock<Vec<MetricDef>> = std::sync::OnceLock::new();
    DEFS.get_or_init(|| {
        syscalls::defs()
            .iter()
            .chain(probe::METRICS)
            .chain(threads::METRICS)
            .chain(gpu::METRICS)
            .chain(findings::defs())
            .cloned()
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_documented() {
        let doc = include_str!("../../../docs/metrics.md");
        for m in metric_defs() {
            assert!(doc.contains(&format!("`{}`", m.name)), "{} missing from docs/metrics.md", m.name);
            for l in m.labels.iter() {
                assert!(doc.contains(&format!("`{l}`")), "label {l} of {} undocumented", m.name);
            }
        }
    }

    #[test]
    fn every_family_is_defined_once() {
        let mut names: Vec<&str> = metric_defs().iter().map(|d| d.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a family defined twice");
    }
}
