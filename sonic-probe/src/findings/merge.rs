//! One finding per problem, not per pid.
//!
//! Detectors keep their findings per process incarnation, which is what
//! exact counts need. Listed like that, a harmless pattern of a tool that
//! runs a thousand times becomes a thousand findings. Here the findings of
//! processes that have exited are folded by problem: the same kind, process
//! name, cgroup (workload) and key (each kind says what its key is: the
//! path; the syscall and errno; the size and file; the thread name) make
//! one finding, with the number of processes, a few pids and the sums of
//! their counts (each kind folds its own fields, `DetailKind::fold`). A
//! process that is still running keeps its own finding with its own pid,
//! so a long-lived service's numbers are its own, never mixed with those of
//! short-lived namesakes.

use std::collections::HashMap;

use super::Record;

/// Pids listed per finding.
pub const MAX_PIDS: usize = 5;

/// A finding of one or more processes.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// The folded record: sums, the longest wait, the latest paths; the pid
    /// and comm of the process seen last.
    pub record: Record,
    pub processes: u64,
    /// The most recently seen first, at most [`MAX_PIDS`].
    pub pids: Vec<u32>,
}

/// Folds the records of exited processes by problem; `alive` tells whether
/// a record's process is still running.
pub fn merge(records: Vec<Record>, alive: impl Fn(&Record) -> bool) -> Vec<Merged> {
    let mut out: Vec<Merged> = Vec::new();
    let mut gone: HashMap<(&'static str, String, u64, String), Vec<Record>> = HashMap::new();
    for r in records {
        if alive(&r) {
            out.push(Merged { pids: vec![r.pid], processes: 1, record: r });
        } else {
            gone.entry((r.detail.kind(), r.comm.clone(), r.cgroup, r.detail.problem_key()))
                .or_default()
                .push(r);
        }
    }
    for (_, mut group) in gone {
        // Oldest first, so that "last" values come from the latest.
        group.sort_by_key(|r| (r.last_ns, r.pid));
        let processes = group.len() as u64;
        let pids: Vec<u32> = group.iter().rev().take(MAX_PIDS).map(|r| r.pid).collect();
        let mut iter = group.into_iter();
        let mut acc = iter.next().expect("a group has a record");
        for r in iter {
            fold(&mut acc, r);
        }
        out.push(Merged { record: acc, processes, pids });
    }
    out
}

/// Adds `r` (seen later) into `acc`; its detector folds the details
/// ([`super::DetailKind::fold`]).
fn fold(acc: &mut Record, r: Record) {
    acc.first_ns = acc.first_ns.min(r.first_ns);
    acc.last_ns = acc.last_ns.max(r.last_ns);
    acc.pid = r.pid;
    acc.incarnation = r.incarnation;
    acc.detail.fold(r.detail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{futex_stall, small_reads, syscall_errors, syscall_errors::MAX_PATHS, Detail};

    fn err(pid: u32, inc: u64, comm: &str, errno: &str, count: u64, path: &str, last: u64) -> Record {
        Record {
            cgroup: 0,
            detail: Detail::SyscallErrors(syscall_errors::Detail {
                syscall: "openat".into(),
                errno: errno.into(),
                count,
                paths: vec![path.into()],
                length: None,
                wait_seconds: None,
            }),
            pid,
            incarnation: inc,
            comm: comm.into(),
            first_ns: last - 1,
            last_ns: last,
        }
    }

    #[test]
    fn exited_processes_fold_by_problem_running_ones_keep_their_own() {
        let mut records: Vec<Record> = (0..1000u32)
            .map(|i| {
                err(10_000 + i, u64::from(i), "git", "ENOENT", 2, &format!("/p{}", i % 7), 100 + u64::from(i))
            })
            .collect();
        records.push(err(10_000, 5000, "git", "EACCES", 1, "/x", 50));
        // The service, running, with the same problem as an exited namesake.
        records.push(err(77, 9000, "python3", "ENOENT", 3, "/models/v2.pth", 60));
        records.push(err(78, 9001, "python3", "ENOENT", 4, "/tmp/a", 70));
        let mut m = merge(records, |r| r.pid == 77);
        m.sort_by_key(|m| (m.record.comm.clone(), m.record.pid));
        assert_eq!(m.len(), 4, "{m:#?}");
        let git: Vec<&Merged> = m.iter().filter(|m| m.record.comm == "git").collect();
        let enoent = git.iter().find(|m| m.processes == 1000).unwrap();
        assert_eq!(enoent.pids, vec![10_999, 10_998, 10_997, 10_996, 10_995]);
        assert_eq!(enoent.record.pid, 10_999);
        let Detail::SyscallErrors(syscall_errors::Detail { count, paths, .. }) = &enoent.record.detail else {
            panic!()
        };
        assert_eq!(*count, 2000);
        assert_eq!(paths.len(), MAX_PATHS);
        assert_eq!(paths.last().unwrap(), &format!("/p{}", 999 % 7));
        assert_eq!((enoent.record.first_ns, enoent.record.last_ns), (99, 1099));
        let service: Vec<&Merged> = m.iter().filter(|m| m.record.comm == "python3").collect();
        assert_eq!(service.len(), 2);
        assert_eq!((service[0].record.pid, service[0].processes, &service[0].pids), (77, 1, &vec![77]));
        let Detail::SyscallErrors(syscall_errors::Detail { count, .. }) = &service[0].record.detail else {
            panic!()
        };
        assert_eq!(*count, 3, "the running service's count is its own");
    }

    #[test]
    fn folded_stalls_keep_the_longest_and_reads_a_weighted_size() {
        let stall = |pid: u32, wait: f64, count: u64| Record {
            cgroup: 0,
            detail: Detail::FutexStall(futex_stall::Detail {
                tid: pid,
                thread: "main".into(),
                wait_seconds: wait,
                op: "FUTEX_WAIT".into(),
                uaddr: format!("{pid:#x}"),
                waker_tid: None,
                waker_thread: None,
                count,
                stack: vec![crate::stacks::Frame {
                    function: format!("f{pid}"),
                    file: None,
                    line: None,
                    module: None,
                    kind: crate::stacks::FrameKind::Python,
                }],
                waker_stack: Vec::new(),
                stack_note: None,
                stack_wait_seconds: None,
            }),
            pid,
            incarnation: u64::from(pid),
            comm: "tool".into(),
            first_ns: u64::from(pid),
            last_ns: u64::from(pid),
        };
        let reads = |pid: u32, count: u64, size: u64| Record {
            cgroup: 0,
            detail: Detail::SmallReads(small_reads::Detail {
                path: "/etc/x".into(),
                file_class: "other".into(),
                count,
                bytes: count * size,
                typical_size: size,
                files: Vec::new(),
            }),
            ..stall(pid, 0.0, 0)
        };
        let m = merge(vec![stall(1, 2.0, 1), stall(2, 5.0, 2), stall(3, 1.5, 1)], |_| false);
        let Detail::FutexStall(futex_stall::Detail { wait_seconds, count, uaddr, stack, .. }) =
            &m[0].record.detail
        else {
            panic!()
        };
        assert_eq!((*wait_seconds, *count, uaddr.as_str(), m[0].processes), (5.0, 4, "0x2", 3));
        assert_eq!(stack[0].function, "f2", "the stacks of the longest wait");
        let m = merge(vec![reads(1, 10, 100), reads(2, 30, 500)], |_| false);
        let Detail::SmallReads(small_reads::Detail { count, bytes, typical_size, .. }) = &m[0].record.detail
        else {
            panic!()
        };
        assert_eq!((*count, *bytes, *typical_size), (40, 16_000, 400));
    }
}
