//! The GPU seen from the CPU: sonic_probe_gpu_wait_duration_seconds, one
//! histogram per (workload, comm, api) from the uprobes' counts
//! (gpu::waits), and the library files the probes are on
//! (gpu::libraries).

use std::sync::Arc;

use prometheus::proto::{MetricFamily, MetricType};

use super::family::{counter, def, family, gauge, log2_seconds_histogram, named, MetricDef};
use crate::gpu::{
    libraries::{LibraryCounts, LibraryResult},
    waits::GpuWaitStore,
};

use MetricType::{COUNTER, GAUGE, HISTOGRAM};

pub const GPU_WAIT_DURATION: &str = "sonic_probe_gpu_wait_duration_seconds";
pub const GPU_LIBRARIES: &str = "sonic_probe_gpu_libraries_total";
pub const GPU_PROBES: &str = "sonic_probe_gpu_probes_attached";

#[rustfmt::skip]
pub const METRICS: &[MetricDef] = &[
    def(GPU_WAIT_DURATION, HISTOGRAM, &["workload", "comm", "api"],
        "Time watched threads waited inside CUDA's waiting calls (api: cudaStreamSynchronize, \
         cudaDeviceSynchronize, cudaMemcpy, cuCtxSynchronize, ... see docs/metrics.md), counted exactly \
         from uprobes at their entry and return; a call made inside another (the runtime's in the \
         driver's) is the outer one's wait. Log2 buckets from 1 us."),
    def(GPU_LIBRARIES, COUNTER, &["result"],
        "CUDA library files (libcudart.so.*, libcuda.so.*) watched processes mapped or opened, each file \
         once, by what became of it: attached (its waiting calls have probes), no_waiting_calls, \
         unreadable, attach_failed, over_limit (--gpu-max-libraries), unavailable (the kernel refused \
         the GPU programs)."),
    def(GPU_PROBES, GAUGE, &[],
        "Uprobes attached on CUDA's waiting calls (an entry and a return probe per call per library file)."),
];

/// What the GPU families are built from.
pub struct GpuSources {
    /// Shared with the findings' sweep (gpu_wait).
    pub waits: Arc<GpuWaitStore>,
    pub libraries: Arc<LibraryCounts>,
}

/// The families; `probes`: uprobes attached now.
pub fn collect(out: &mut Vec<MetricFamily>, gpu: &GpuSources, probes: usize) {
    let waits = gpu
        .waits
        .snapshot()
        .into_iter()
        .map(|((workload, comm, api), w)| {
            log2_seconds_histogram(
                &[("workload", &workload), ("comm", &comm), ("api", api)],
                &w.buckets,
                w.total_ns,
            )
        })
        .collect();
    out.push(family(named(METRICS, GPU_WAIT_DURATION), waits));
    out.push(family(
        named(METRICS, GPU_LIBRARIES),
        LibraryResult::ALL
            .iter()
            .map(|&r| counter(&[("result", r.label())], gpu.libraries.get(r) as f64))
            .collect(),
    ));
    out.push(family(named(METRICS, GPU_PROBES), vec![gauge(&[], probes as f64)]));
}
