//! What `top` shows, computed from two scrapes of /metrics and the
//! findings: per workload, its processes (by name, as the metrics label
//! them) and their thread names, each with its rates over the interval
//! between the scrapes (never the counters since the daemon started), the
//! share of its threads' time in each state, the p99 of its watched calls
//! and its findings. Pure: the terminal and the HTTP are elsewhere.

use std::collections::BTreeMap;

use super::scrape::Sample;
use crate::{findings::Finding, threads::STATES};

/// States, in the order the thread time accounting numbers them.
pub const NR_STATES: usize = STATES.len();

/// The calls whose p99 is shown: a lock (futex waits), a file read, an
/// open, a mapping.
pub const WATCHED: [&str; 4] = ["futex", "read", "openat", "mmap"];

const CALLS: &str = "sonic_probe_syscall_duration_seconds_count";
const BUCKETS: &str = "sonic_probe_syscall_duration_seconds_bucket";
const FUTEX_WAIT_BUCKETS: &str = "sonic_probe_futex_wait_duration_seconds_bucket";
const ERRORS: &str = "sonic_probe_syscall_errors_total";
const THREAD_SECONDS: &str = "sonic_probe_thread_seconds_total";

/// What rows are ordered by (largest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Findings, then calls per second.
    Findings,
    /// Calls per second.
    Calls,
    /// The share of time waiting for a CPU (runqueue).
    Cpu,
    /// The p99 of its futex waits (a lock held long), then the share of
    /// time blocked in futex (an idle pool's workers are blocked there all
    /// the time, harmlessly).
    Futex,
    /// The share of time waiting for the GPU.
    Gpu,
    /// Failed calls per second.
    Errors,
}

impl SortKey {
    pub const ALL: [SortKey; 6] =
        [SortKey::Findings, SortKey::Calls, SortKey::Cpu, SortKey::Futex, SortKey::Gpu, SortKey::Errors];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Findings => "findings",
            SortKey::Calls => "calls",
            SortKey::Cpu => "cpu wait",
            SortKey::Futex => "futex",
            SortKey::Gpu => "gpu",
            SortKey::Errors => "errors",
        }
    }

    /// The next key (the sort key cycles).
    pub fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// What one row (a workload, a process name or a thread name) adds up
/// over the interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Traced calls (None for a thread: calls are counted per process name).
    pub calls: Option<f64>,
    pub errors: Option<f64>,
    /// Seconds its threads spent in each state (STATES order).
    pub states: [f64; NR_STATES],
    /// Calls of each watched syscall per bucket upper bound (seconds).
    buckets: BTreeMap<&'static str, BTreeMap<OrderedBound, f64>>,
    pub findings: usize,
}

/// A bucket bound that sorts (the daemon's are finite or +Inf).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedBound(f64);
impl Eq for OrderedBound {}
impl PartialOrd for OrderedBound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        let sum = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.calls = sum(self.calls, o.calls);
        self.errors = sum(self.errors, o.errors);
        for (s, x) in self.states.iter_mut().zip(o.states) {
            *s += x;
        }
        for (call, b) in &o.buckets {
            let mine = self.buckets.entry(call).or_default();
            for (le, n) in b {
                *mine.entry(*le).or_default() += n;
            }
        }
        self.findings += o.findings;
    }

    /// All its threads' time over the interval.
    pub fn thread_seconds(&self) -> f64 {
        self.states.iter().sum()
    }

    /// The share of its threads' time in `state` (0 without thread time).
    pub fn share(&self, state: &str) -> f64 {
        let total = self.thread_seconds();
        match STATES.iter().position(|s| *s == state) {
            Some(i) if total > 0.0 => self.states[i] / total,
            _ => 0.0,
        }
    }

    /// The p99 of `call` over the interval: the upper bound of the bucket
    /// its 99th percentile falls in (the buckets are powers of two of
    /// nanoseconds); None without calls.
    pub fn p99(&self, call: &str) -> Option<f64> {
        let b = self.buckets.get(call)?;
        // Cumulative counts: the +Inf bucket (the largest) is every call.
        let total = b.values().copied().fold(0.0, f64::max);
        if total <= 0.0 {
            return None;
        }
        b.iter().find(|(_, &n)| n >= 0.99 * total).map(|(le, _)| le.0)
    }

    /// The watched call with the largest p99, and that p99.
    pub fn slowest(&self) -> Option<(&'static str, f64)> {
        WATCHED.iter().filter_map(|&c| self.p99(c).map(|p| (c, p))).max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Nothing to show: no traced call, no finding, and most of its
    /// thread time `other` (a kernel thread: it makes no system calls). A
    /// thread computing without a system call is on CPU: shown.
    fn is_quiet(&self) -> bool {
        let other = STATES.iter().position(|s| *s == "other").unwrap_or(NR_STATES - 1);
        self.calls.unwrap_or(0.0) == 0.0
            && self.findings == 0
            && self.states[other] >= 0.5 * self.thread_seconds()
    }

    fn key(&self, k: SortKey) -> f64 {
        match k {
            SortKey::Findings => self.findings as f64 * 1e12 + self.calls.unwrap_or(0.0),
            SortKey::Calls => self.calls.unwrap_or(0.0),
            SortKey::Cpu => self.share("runqueue"),
            // A lock held long is a long wait (an idle pool's threads block in
            // futex all the time, and harmlessly): the p99, then the share.
            SortKey::Futex => self.p99("futex").unwrap_or(0.0) + self.share("futex") * 1e-7,
            SortKey::Gpu => self.share("gpu"),
            SortKey::Errors => self.errors.unwrap_or(0.0),
        }
    }
}

/// A thread name of a process and its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub name: String,
    pub figures: Figures,
}

/// A process name in a workload (all its processes of that name, as the
/// metrics count them), with its thread names.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub comm: String,
    pub figures: Figures,
    pub threads: Vec<Thread>,
}

/// A workload (systemd unit, pod, container; "" for the host's own
/// processes) and its processes.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub figures: Figures,
    pub processes: Vec<Process>,
}

/// One screen's data: every workload, rates over `seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub seconds: f64,
    pub workloads: Vec<Workload>,
}

/// The increase of a counter from `before` to `after`: a series new in
/// the interval counts from 0, one that went down (the daemon restarted)
/// from its new value.
fn increase(before: Option<f64>, after: f64) -> f64 {
    match before {
        Some(b) if b <= after => after - b,
        _ => after,
    }
}

/// The key of a series: its name and labels, for matching the two scrapes.
type SeriesKey<'a> = (&'a str, &'a BTreeMap<String, String>);

impl View {
    /// The view of the interval from `before` to `after` (`seconds` apart),
    /// with `findings` counted per workload and process name.
    pub fn new(before: &[Sample], after: &[Sample], seconds: f64, findings: &[Finding]) -> View {
        let old: BTreeMap<SeriesKey, f64> =
            before.iter().map(|s| ((s.name.as_str(), &s.labels), s.value)).collect();
        // (workload, comm) and (workload, comm, thread) figures.
        let mut procs: BTreeMap<(String, String), Figures> = BTreeMap::new();
        let mut threads: BTreeMap<(String, String, String), Figures> = BTreeMap::new();
        for s in after {
            let inc = || increase(old.get(&(s.name.as_str(), &s.labels)).copied(), s.value);
            let who = || (s.label("workload").to_string(), s.label("comm").to_string());
            match s.name.as_str() {
                CALLS => {
                    let f = procs.entry(who()).or_default();
                    f.calls = Some(f.calls.unwrap_or(0.0) + inc());
                }
                ERRORS => {
                    let f = procs.entry(who()).or_default();
                    f.errors = Some(f.errors.unwrap_or(0.0) + inc());
                }
                BUCKETS | FUTEX_WAIT_BUCKETS => {
                    let call = if s.name == FUTEX_WAIT_BUCKETS {
                        Some("futex")
                    } else {
                        // futex's waits come from their own family (its wakes
                        // are no waits).
                        WATCHED.iter().copied().find(|&c| c != "futex" && c == s.label("syscall"))
                    };
                    let (Some(call), Ok(le)) = (call, s.label("le").replace("+Inf", "inf").parse::<f64>())
                    else {
                        continue;
                    };
                    let f = procs.entry(who()).or_default();
                    *f.buckets.entry(call).or_default().entry(OrderedBound(le)).or_default() += inc();
                }
                THREAD_SECONDS => {
                    let Some(i) = STATES.iter().position(|st| *st == s.label("state")) else { continue };
                    let (w, c) = who();
                    let t = threads.entry((w, c, s.label("thread").to_string())).or_default();
                    t.states[i] += inc();
                }
                _ => {}
            }
        }
        for f in findings {
            procs.entry((f.workload.name.clone(), f.comm.clone())).or_default().findings += 1;
        }
        for ((w, c, _), t) in &threads {
            let p = procs.entry((w.clone(), c.clone())).or_default();
            for (s, x) in p.states.iter_mut().zip(t.states) {
                *s += x;
            }
        }
        let mut workloads: BTreeMap<String, Workload> = BTreeMap::new();
        for ((w, c), figures) in procs {
            let wl = workloads.entry(w.clone()).or_insert_with(|| Workload {
                name: w.clone(),
                figures: Figures::default(),
                processes: Vec::new(),
            });
            wl.figures.add(&figures);
            let threads = threads
                .iter()
                .filter(|((tw, tc, _), _)| *tw == w && *tc == c)
                .map(|((_, _, name), f)| Thread { name: name.clone(), figures: f.clone() })
                .collect();
            wl.processes.push(Process { comm: c, figures, threads });
        }
        View { seconds, workloads: workloads.into_values().collect() }
    }

    /// Ordered by `key` at each level, largest first (names break ties),
    /// and only what matches `filter` (a part of a workload's, process's
    /// or thread's name; a match keeps what is above and below it). Left
    /// out: quiet processes (kernel threads: nothing but `other` time, no
    /// calls, no findings), and the one thread name of a process that is
    /// the process's own name (its row says the same).
    pub fn arranged(&self, key: SortKey, filter: &str) -> View {
        let matches = |s: &str| filter.is_empty() || s.contains(filter);
        let by = |a: &Figures, an: &str, b: &Figures, bn: &str| {
            b.key(key).total_cmp(&a.key(key)).then_with(|| an.cmp(bn))
        };
        let mut workloads: Vec<Workload> = self
            .workloads
            .iter()
            .filter_map(|w| {
                let mut w = w.clone();
                w.processes.retain(|p| !p.figures.is_quiet());
                for p in &mut w.processes {
                    if p.threads.len() == 1 && p.threads[0].name == p.comm {
                        p.threads.clear();
                    }
                }
                if w.processes.is_empty() {
                    return None;
                }
                if !matches(&w.name) {
                    w.processes.retain(|p| matches(&p.comm) || p.threads.iter().any(|t| matches(&t.name)));
                    if w.processes.is_empty() {
                        return None;
                    }
                }
                for p in &mut w.processes {
                    p.threads.sort_by(|a, b| by(&a.figures, &a.name, &b.figures, &b.name));
                }
                w.processes.sort_by(|a, b| by(&a.figures, &a.comm, &b.figures, &b.comm));
                Some(w)
            })
            .collect();
        workloads.sort_by(|a, b| by(&a.figures, &a.name, &b.figures, &b.name));
        View { seconds: self.seconds, workloads }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::scrape::parse;

    const BEFORE: &str = r#"
sonic_probe_syscall_duration_seconds_count{syscall="read",comm="python3",workload="lipsync.service"} 100
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="0.000001024"} 90
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="0.268435456"} 100
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="+Inf"} 100
sonic_probe_thread_seconds_total{workload="lipsync.service",comm="python3",thread="python3",state="on_cpu"} 5
sonic_probe_thread_seconds_total{workload="lipsync.service",comm="python3",thread="python3",state="futex"} 1
sonic_probe_syscall_duration_seconds_count{syscall="openat",comm="bash",workload=""} 7
"#;

    const AFTER: &str = r#"
sonic_probe_syscall_duration_seconds_count{syscall="read",comm="python3",workload="lipsync.service"} 300
sonic_probe_syscall_duration_seconds_count{syscall="futex",comm="python3",workload="lipsync.service"} 50
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="0.000001024"} 190
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="0.268435456"} 300
sonic_probe_syscall_duration_seconds_bucket{syscall="read",comm="python3",workload="lipsync.service",le="+Inf"} 300
sonic_probe_futex_wait_duration_seconds_bucket{comm="python3",workload="lipsync.service",op="wait",le="0.000001024"} 0
sonic_probe_futex_wait_duration_seconds_bucket{comm="python3",workload="lipsync.service",op="wait",le="0.536870912"} 10
sonic_probe_futex_wait_duration_seconds_bucket{comm="python3",workload="lipsync.service",op="wait",le="+Inf"} 10
sonic_probe_syscall_errors_total{syscall="openat",comm="python3",workload="lipsync.service",errno="ENOENT"} 4
sonic_probe_thread_seconds_total{workload="lipsync.service",comm="python3",thread="python3",state="on_cpu"} 5.5
sonic_probe_thread_seconds_total{workload="lipsync.service",comm="python3",thread="python3",state="futex"} 2.5
sonic_probe_thread_seconds_total{workload="lipsync.service",comm="python3",thread="pt_worker",state="runqueue"} 2
sonic_probe_syscall_duration_seconds_count{syscall="openat",comm="bash",workload=""} 27
"#;

    fn view() -> View {
        View::new(&parse(BEFORE).unwrap(), &parse(AFTER).unwrap(), 2.0, &[])
    }

    #[test]
    fn rates_come_from_the_difference_of_the_two_scrapes() {
        let v = view();
        let names: Vec<&str> = v.workloads.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["", "lipsync.service"]);
        let w = &v.workloads[1];
        // read 200 more, futex 50 new in the interval.
        assert_eq!(w.figures.calls, Some(250.0));
        assert_eq!(w.figures.errors, Some(4.0), "a series new in the interval counts from 0");
        let p = &w.processes[0];
        assert_eq!(p.comm, "python3");
        let threads: Vec<&str> = p.threads.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(threads, ["pt_worker", "python3"]);
        // 0.5 on CPU, 1.5 futex, 2 runqueue of 4 s.
        assert_eq!(
            (p.figures.share("on_cpu"), p.figures.share("futex"), p.figures.share("runqueue")),
            (0.125, 0.375, 0.5)
        );
        assert_eq!(p.threads[0].figures.calls, None, "calls are counted per process name");
        assert_eq!(v.workloads[0].figures.calls, Some(20.0));
    }

    #[test]
    fn p99_is_the_bucket_of_the_99th_percentile_of_the_interval() {
        let w = &view().workloads[1].figures;
        // 200 reads in the interval: 100 fast, 100 up to 268 ms.
        assert_eq!(w.p99("read"), Some(0.268435456));
        // futex from the waits' family: 10 waits up to 537 ms.
        assert_eq!(w.p99("futex"), Some(0.536870912));
        assert_eq!(w.p99("mmap"), None);
        assert_eq!(w.slowest(), Some(("futex", 0.536870912)));
    }

    #[test]
    fn sorting_and_filtering() {
        let v = view();
        let by_calls = v.arranged(SortKey::Calls, "");
        assert_eq!(by_calls.workloads[0].name, "lipsync.service");
        let by_cpu = v.arranged(SortKey::Cpu, "");
        assert_eq!(by_cpu.workloads[0].name, "lipsync.service");
        assert_eq!(by_cpu.workloads[0].processes[0].threads[0].name, "pt_worker");
        let by_futex = v.arranged(SortKey::Futex, "");
        assert_eq!(by_futex.workloads[0].processes[0].threads[0].name, "python3");
        // A thread's name keeps its process and workload.
        let f = v.arranged(SortKey::Calls, "pt_w");
        assert_eq!(f.workloads.len(), 1);
        assert_eq!(f.workloads[0].processes[0].comm, "python3");
        assert!(v.arranged(SortKey::Calls, "nothing").workloads.is_empty());
        assert_eq!(SortKey::Errors.next(), SortKey::Findings);
    }

    #[test]
    fn kernel_threads_and_a_lone_namesake_thread_are_left_out() {
        let after = parse(
            r#"
sonic_probe_thread_seconds_total{workload="",comm="kworker/0:1",thread="kworker/0:1",state="other"} 1
sonic_probe_thread_seconds_total{workload="",comm="kworker/0:1",thread="kworker/0:1",state="on_cpu"} 0.1
sonic_probe_thread_seconds_total{workload="",comm="numpy",thread="numpy",state="on_cpu"} 1
sonic_probe_thread_seconds_total{workload="",comm="sleep",thread="sleep",state="sleep"} 1
sonic_probe_syscall_duration_seconds_count{syscall="read",comm="bash",workload=""} 1
sonic_probe_thread_seconds_total{workload="",comm="bash",thread="bash",state="on_cpu"} 1
"#,
        )
        .unwrap();
        let v = View::new(&[], &after, 1.0, &[]).arranged(SortKey::Calls, "");
        let shown: Vec<(&str, usize)> =
            v.workloads[0].processes.iter().map(|p| (p.comm.as_str(), p.threads.len())).collect();
        assert_eq!(shown, [("bash", 0), ("numpy", 0), ("sleep", 0)]);
    }

    #[test]
    fn a_restarted_daemon_counts_from_its_new_values() {
        let before = parse(
            "sonic_probe_syscall_duration_seconds_count{syscall=\"read\",comm=\"a\",workload=\"\"} 900",
        )
        .unwrap();
        let after =
            parse("sonic_probe_syscall_duration_seconds_count{syscall=\"read\",comm=\"a\",workload=\"\"} 30")
                .unwrap();
        assert_eq!(View::new(&before, &after, 1.0, &[]).workloads[0].figures.calls, Some(30.0));
    }

    #[test]
    fn a_filter_keeps_the_findings_of_the_processes_it_keeps() {
        let finding = |comm: &str, workload: &str| {
            let mut f: Finding = serde_json::from_str(&format!(
                r#"{{"kind":"mmap_churn","size_bytes":1,"count":2,"path":null,"pid":7,"comm":"{comm}",
                    "first_seen":"","last_seen":""}}"#
            ))
            .unwrap();
            f.workload.name = workload.into();
            f
        };
        let found = [finding("python3", "lipsync.service"), finding("bash", "")];
        let v = view();
        let comms = |filter: &str| -> Vec<String> {
            crate::top::matching(&found, filter, &v.arranged(SortKey::Calls, filter))
                .into_iter()
                .map(|f| f.comm.clone())
                .collect()
        };
        assert_eq!(comms(""), ["python3", "bash"]);
        // By a thread's name: its process's findings.
        assert_eq!(comms("pt_w"), ["python3"]);
        assert_eq!(comms("lipsync"), ["python3"]);
        assert_eq!(comms("bas"), ["bash"]);
        assert!(comms("nothing").is_empty());
    }
}
