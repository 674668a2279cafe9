//! Where watched threads' time goes: sonic_probe_thread_seconds_total, one
//! series per (workload, comm, thread, state), from one snapshot of the
//! scheduler programs' maps (threads::ThreadTimeStore); and the CPU limits
//! over those threads with the time they throttled (os::cgroup_cpu), which
//! tell a `runqueue` share a limit caused from a busy node's.

use prometheus::proto::{MetricFamily, MetricType};

use super::family::{counter, def, family, gauge, named, MetricDef};
use crate::threads::{ThreadTimeStore, STATES};

use MetricType::{COUNTER, GAUGE};

pub const THREAD_SECONDS: &str = "sonic_probe_thread_seconds_total";
pub const THREAD_NAMES_FOLDED: &str = "sonic_probe_thread_names_folded_total";
pub const CPU_THROTTLED: &str = "sonic_probe_cpu_throttled_seconds_total";
pub const CPU_LIMIT: &str = "sonic_probe_cpu_limit_cores";

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
    def(CPU_THROTTLED, COUNTER, &["workload", "cgroup"],
        "Time the CPU limit over watched threads throttled its cgroup (the kernel's own count: cgroup v2 \
         cpu.stat throttled_usec, or the v1 cpu hierarchy's throttled_time). cgroup is the limited cgroup, \
         the threads' own or its nearest ancestor with a limit (a pod's, a slice's), from the hierarchy's \
         root; one series per (workload, limited cgroup), for cgroups with threads in \
         sonic_probe_thread_seconds_total. Since the cgroup was made (it may predate the daemon: rate() it)."),
    def(CPU_LIMIT, GAUGE, &["workload", "cgroup"],
        "The CPU limit of that cgroup in CPUs (cpu.max quota / period, or the v1 cfs_quota_us / \
         cfs_period_us); limits are looked for again every 30 s."),
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
    let (mut throttled, mut limit) = (Vec::new(), Vec::new());
    for l in store.limits() {
        let labels = [("workload", &*l.workload), ("cgroup", l.limit.cgroup.as_str())];
        throttled.push(counter(&labels, l.limit.throttle.throttled_ns as f64 / 1e9));
        if let Some(cores) = l.limit.throttle.limit_cores {
            limit.push(gauge(&labels, cores));
        }
    }
    out.push(family(named(METRICS, CPU_THROTTLED), throttled));
    out.push(family(named(METRICS, CPU_LIMIT), limit));
}
