//! The findings engine's families: the findings by kind, the detector state
//! evicted, the stack captures' results, and each registered detector's own
//! families (crate::findings::DETECTORS), which the detectors declare and
//! build themselves.

use std::sync::{Arc, Mutex};

use prometheus::{
    core::{Collector, Desc},
    proto::{MetricFamily, MetricType},
};

use super::family::{counter, def, descs, family, gauge, named, Fold, MetricDef};
use crate::{
    findings::{Source, DETECTORS},
    stacks::capture::{CaptureStore, RESULTS},
    stats::labels::CommLabels,
    workloads::Workloads,
};

use MetricType::{COUNTER, GAUGE};

/// The engine's own families (besides those of the detectors).
#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_stack_captures_total", COUNTER, &["result"],
        "Stack captures of stalled processes (--stack-captures), by result: ok, partial (the Python or the \
         native stack could not be read), no_python (not a Python process: native stack only), gone (the \
         process exited first), unreadable (its memory could not be read), rate_limited (a stall within \
         --stack-capture-interval of the process's last capture), error."),
    def("sonic_probe_stack_capture_seconds_total", COUNTER, &[],
        "Time the daemon spent reading stacks of stalled processes (off the event loop); divided by the \
         captures that were not rate_limited, the time one capture takes."),
    def("sonic_probe_findings", GAUGE, &["kind"],
        "Current findings (GET /findings) by kind."),
    def("sonic_probe_findings_evictions_total", COUNTER, &["kind", "state"],
        "Detector state evicted to bound memory: state=\"working\" (not yet a finding, evicted with a fair \
         share per process), state=\"finding\" (a finding dropped beyond --max-findings)."),
];

/// The engine's families and those of every registered detector.
pub fn defs() -> impl Iterator<Item = &'static MetricDef> {
    METRICS.iter().chain(DETECTORS.iter().flat_map(|d| d.metrics))
}

/// Exports what the detectors counted, and the findings by kind.
pub struct FindingsCollector {
    findings: Arc<dyn Source>,
    labels: Arc<Mutex<CommLabels>>,
    workloads: Arc<Mutex<Workloads>>,
    thread_labels: Mutex<CommLabels>,
    descs: Vec<Desc>,
    /// Where the stack captures count their results (None: captures off).
    captures: Option<CaptureStore>,
}

impl FindingsCollector {
    /// Also exports the stack captures' results.
    pub fn with_captures(mut self, captures: Option<CaptureStore>) -> Self {
        self.captures = captures;
        self
    }

    pub fn new(
        findings: Arc<dyn Source>,
        labels: Arc<Mutex<CommLabels>>,
        workloads: Arc<Mutex<Workloads>>,
        max_threads: usize,
    ) -> Self {
        FindingsCollector {
            findings,
            labels,
            workloads,
            thread_labels: Mutex::new(CommLabels::new(max_threads)),
            descs: descs(defs()),
            captures: None,
        }
    }
}

impl Collector for FindingsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (findings, m) = self.findings.current();
        let mut out = Vec::new();
        {
            // Fold raw names and cgroups into bounded label values, adding
            // up what folds together.
            let mut comms = self.labels.lock().expect("labels lock");
            let mut workloads = self.workloads.lock().expect("workloads lock");
            let mut threads = self.thread_labels.lock().expect("thread labels lock");
            let mut fold = Fold { comms: &mut comms, workloads: &mut workloads, threads: &mut threads };
            for counts in &m.counts {
                counts.collect(&mut fold, &mut out);
            }
        }
        // Every kind and state, 0 until something is evicted.
        let evictions = DETECTORS
            .iter()
            .flat_map(|d| ["working", "finding"].map(|s| (d.kind, s)))
            .map(|(k, s)| counter(&[("kind", k), ("state", s)], m.evictions.get(k, s) as f64))
            .collect();
        let engine = |name| named(METRICS, name);
        out.push(family(engine("sonic_probe_findings_evictions_total"), evictions));
        out.push(family(
            engine("sonic_probe_stack_captures_total"),
            match &self.captures {
                Some(c) => c.results(),
                None => RESULTS.iter().map(|r| (*r, 0)).collect(),
            }
            .into_iter()
            .map(|(r, n)| counter(&[("result", r)], n as f64))
            .collect(),
        ));
        out.push(family(
            engine("sonic_probe_stack_capture_seconds_total"),
            vec![counter(&[], self.captures.as_ref().map_or(0.0, |c| c.time_spent().as_secs_f64()))],
        ));
        out.push(family(
            engine("sonic_probe_findings"),
            DETECTORS
                .iter()
                .map(|d| {
                    let n = findings.iter().filter(|f| f.detail.kind() == d.kind).count();
                    gauge(&[("kind", d.kind)], n as f64)
                })
                .collect(),
        ));
        out
    }
}
