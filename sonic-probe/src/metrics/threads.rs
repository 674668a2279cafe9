//! Where watched threads' time goes: sonic_probe_thread_seconds_total, one
//! series per (workload, comm, thread, state), from one snapshot of the
//! scheduler programs' maps (threads::ThreadTimeStore).

use prometheus::proto::{MetricFamily, MetricType};

use super::family::{counter, def, family, named, MetricDef};
use crate::threads::{ThreadTimeStore, STATES};

use MetricType::COUNTER;

pub const THREAD_SECONDS: &str = "sonic_probe_thread_seconds_total";
pub const THREAD_NAMES_FOLDED: &str = "sonic_probe_thread_names_folded_total";

#[rustfmt::skip]
pub const METRICS: &[MetricDef] = &[
    def(THREAD_SECONDS, COUNTER, &["workload", "comm", "thread", "state"],
        "Time watched threads spent in each state, exactly (every nanosecond of a thread's life after its \
         creation or first switch is in one): on_cpu, runqueue (runnable, waiting for a CPU: preempted, \
         woken, or throttled by its cgroup's CPU limit), or blocked in futex, file, socket, pipe, gpu, poll \
         (epoll_wait, poll, select, accept), sleep (nanosleep) or other (any other call, or outside a call: \
         page faults, reclaim). thread is the thread's own name; threads of one name add up."),
    def(THREAD_NAMES_FOLDED, COUNTER, &[],
        "Distinct (process name, thread name) exported as thread=\"other\" because the process name had \
         --max-thread-names thread names already."),
];

/// The families, from one read of the maps.
pub fn collect(out: &mut Vec<MetricFamily>, store: &ThreadTimeStore) {
    let mut series = Vec::new();
    for (who, ns) in store.snapshot() {
        for (state, &n) in STATES.iter().zip(ns.iter()) {
            if n == 0 {
                continue;
            }
            let labels = [
                ("workload", &*who.workload),
                ("comm", &*who.comm),
                ("thread", &*who.thread),
                ("state", *state),
            ];
            series.push(counter(&labels, n as f64 / 1e9));
        }
    }
    out.push(family(named(METRICS, THREAD_SECONDS), series));
    out.push(family(
        named(METRICS, THREAD_NAMES_FOLDED),
        vec![counter(&[], store.aggregator.folded() as f64)],
    ));
}
