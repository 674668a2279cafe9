//! The GPU waits the uprobes counted (bpf/gpu_wait.h's gpu_waits), read at
//! scrape time and grouped by the labels the call
//! statistics use (`comm`, bounded by --max-comms; `workload`) and the
//! gpu_apis row's name (`api`). Each api's overflow entry (empty comm and
//! cgroup, where the kernel counts when the map is full) is comm="other".

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aya::maps::{HashMap, MapData};
use sonic_probe_common::{comm_str, gpu_apis::gpu_api, GpuWaitKey, GpuWaitStats, LATENCY_BUCKETS};

use crate::{stats::labels::CommLabels, workloads::Workloads};

/// The labels of one histogram: (workload, comm, api).
pub type GpuWho = (Arc<str>, Arc<str>, &'static str);

/// The waits of one (workload, comm, api): their sum and log2 buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWaits {
    pub total_ns: u64,
    pub buckets: [u64; LATENCY_BUCKETS],
}

impl GpuWaits {
    /// Waits counted (every wait is in one bucket).
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

pub struct GpuWaitStore {
    map: HashMap<MapData, GpuWaitKey, GpuWaitStats>,
    comms: Arc<Mutex<CommLabels>>,
    workloads: Arc<Mutex<Workloads>>,
}

impl GpuWaitStore {
    pub fn new(
        map: HashMap<MapData, GpuWaitKey, GpuWaitStats>,
        comms: Arc<Mutex<CommLabels>>,
        workloads: Arc<Mutex<Workloads>>,
    ) -> Self {
        GpuWaitStore { map, comms, workloads }
    }

    /// Every (workload, comm, api) with waits, summed over the keys.
    pub fn snapshot(&self) -> BTreeMap<GpuWho, GpuWaits> {
        let entries: Vec<(GpuWaitKey, GpuWaitStats)> = self.map.iter().filter_map(|e| e.ok()).collect();
        group(
            entries,
            &mut self.comms.lock().expect("comm labels lock"),
            &mut self.workloads.lock().expect("workloads lock"),
        )
    }
}

/// One (workload cgroup, process name, api)'s waits as the kernel totals
/// them (the gpu_wait detector's input; raw names and cgroup ids, as
/// cpu_starved's [`crate::threads::ThreadSample`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuWaitSample {
    pub cgroup: u64,
    pub comm: String,
    pub api: &'static str,
    pub waits: u64,
    pub total_ns: u64,
}

impl GpuWaitStore {
    /// Every kernel entry with waits (an api's overflow entry has no name).
    pub fn samples(&self) -> Vec<GpuWaitSample> {
        self.map.iter().filter_map(|e| e.ok()).filter_map(|(k, v)| sample(&k, &v)).collect()
    }
}

fn sample(k: &GpuWaitKey, v: &GpuWaitStats) -> Option<GpuWaitSample> {
    let api = gpu_api(k.api)?;
    let waits: u64 = v.latency.iter().sum();
    (waits > 0).then(|| GpuWaitSample {
        cgroup: k.cgroup,
        comm: comm_str(&k.comm).to_string(),
        api: api.name,
        waits,
        total_ns: v.total_ns,
    })
}

/// Groups the kernel's entries by label; entries
/// without waits are left out.
pub fn group(
    entries: Vec<(GpuWaitKey, GpuWaitStats)>,
    comms: &mut CommLabels,
    workloads: &mut Workloads,
) -> BTreeMap<GpuWho, GpuWaits> {
    let mut out: BTreeMap<GpuWho, GpuWaits> = BTreeMap::new();
    for (k, v) in entries {
        let Some(api) = gpu_api(k.api) else { continue };
        if v.latency.iter().all(|&n| n == 0) {
            continue;
        }
        let name = comm_str(&k.comm);
        let (comm, workload) = if name.is_empty() {
            (comms.label(""), workloads.other())
        } else {
            (comms.label(&name), workloads.label(k.cgroup))
        };
        let sum = out
            .entry((workload, comm, api.name))
            .or_insert(GpuWaits { total_ns: 0, buckets: [0; LATENCY_BUCKETS] });
        sum.total_ns += v.total_ns;
        for (s, n) in sum.buckets.iter_mut().zip(v.latency.iter()) {
            *s += n;
        }
    }
    out
}
