//! The system-call families: the duration and error families every traced
//! call has, and those its row of the syscall table names
//! (sonic_probe_common::syscalls), built from one snapshot of the kernel's
//! aggregation maps.

use std::{borrow::Cow, collections::BTreeMap};

use prometheus::proto::{MetricFamily, MetricType};
use sonic_probe_common::{
    device_class_name, file_class_name,
    syscalls::{Family, Syscall, SyscallId, Variant, SYSCALLS},
    SharedStruct, SyscallStats,
};

use super::family::{counter, def, family, latency_histogram, named, size_histogram, MetricDef};
use crate::{
    os::errno,
    os::futex,
    stats::{add_stats, call_count, Snapshot, Who},
};

use MetricType::{COUNTER, HISTOGRAM};

pub const SYSCALL_DURATION: &str = "sonic_probe_syscall_duration_seconds";
pub const SYSCALL_ERRORS: &str = "sonic_probe_syscall_errors_total";

/// The two families every traced call has.
const EVERY_CALL: [MetricDef; 2] = [
    def(
        SYSCALL_DURATION,
        HISTOGRAM,
        &["syscall", "comm", "workload"],
        "Duration of traced system calls, from entry to exit. _count is the exact number of calls.",
    ),
    def(
        SYSCALL_ERRORS,
        COUNTER,
        &["syscall", "comm", "workload", "errno"],
        "Traced system calls that returned an error, by errno name.",
    ),
];

/// What a family named in the syscall table exports of a call's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// `bytes`, a counter by comm.
    Bytes,
    /// The size histogram.
    Size,
    /// `small`, a counter.
    Small,
    /// `short_calls`, a counter.
    Short,
    /// Calls that did not fail, a counter.
    Succeeded,
    /// The latency histogram.
    Duration,
}

impl Use {
    fn kind(self) -> MetricType {
        match self {
            Use::Size | Use::Duration => HISTOGRAM,
            Use::Bytes | Use::Small | Use::Short | Use::Succeeded => COUNTER,
        }
    }
}

/// The families a row names, with what each exports.
fn row_families(s: &Syscall) -> impl Iterator<Item = (Use, Family)> {
    let f = s.families;
    [
        (Use::Bytes, f.bytes),
        (Use::Size, f.size),
        (Use::Small, f.small),
        (Use::Short, f.short),
        (Use::Succeeded, f.succeeded),
        (Use::Duration, f.duration),
    ]
    .into_iter()
    .filter_map(|(u, f)| f.map(|f| (u, f)))
}

/// Whether a family of this use is labelled by the row's variant too.
fn by_variant(u: Use, s: &Syscall) -> Option<&'static str> {
    (u != Use::Bytes).then(|| s.variant.label()).flatten()
}

/// The value of a row's variant label for the kernel's variant `v`; None:
/// the call has no value (a futex wake in a family of waits) and is left out.
fn variant_value(s: &Syscall, v: u16) -> Option<&'static str> {
    match s.variant {
        Variant::None => None,
        Variant::FutexCommand => futex::is_wait(u64::from(v)).then(|| futex::command_label(u64::from(v))),
        Variant::Fixed { value, .. } => Some(value),
        Variant::FileClass => Some(file_class_name(v)),
        Variant::DeviceClass => Some(device_class_name(v)),
    }
}

/// The families of every traced call and those the rows of the syscall
/// table name (each once, however many rows name it).
pub fn defs() -> &'static [MetricDef] {
    static DEFS: std::sync::OnceLock<Vec<MetricDef>> = std::sync::OnceLock::new();
    DEFS.get_or_init(|| {
        let mut defs = EVERY_CALL.to_vec();
        for s in &SYSCALLS {
            for (u, f) in row_families(s) {
                if defs.iter().any(|d| d.name == f.name) {
                    continue;
                }
                let mut labels = vec!["comm", "workload"];
                labels.extend(by_variant(u, s));
                defs.push(MetricDef {
                    name: f.name,
                    kind: u.kind(),
                    labels: Cow::Owned(labels),
                    help: f.help,
                });
            }
        }
        defs
    })
}

/// The system-call families, from one snapshot of the aggregation maps:
/// the duration and error families of every call, and the families its
/// row of the syscall table names.
pub fn collect(out: &mut Vec<MetricFamily>, snap: &Snapshot) {
    let mut per_syscall: BTreeMap<(SyscallId, &Who), SyscallStats> = BTreeMap::new();
    // family -> (who, variant label value) -> what it adds up.
    type Group<'a> = (&'a Who, Option<&'static str>);
    let mut grouped: BTreeMap<&'static str, BTreeMap<Group, (Use, SyscallStats)>> = BTreeMap::new();
    for ((k, who), v) in &snap.calls {
        add_stats(per_syscall.entry((k.syscall, who)).or_insert_with(SyscallStats::zeroed), v);
        let row = k.syscall.row();
        for (u, f) in row_families(row) {
            let value = match by_variant(u, row) {
                None => None,
                Some(_) => match variant_value(row, k.variant) {
                    Some(value) => Some(value),
                    None => continue,
                },
            };
            let e = grouped
                .entry(f.name)
                .or_default()
                .entry((who, value))
                .or_insert_with(|| (u, SyscallStats::zeroed()));
            add_stats(&mut e.1, v);
        }
    }

    let durations = per_syscall
        .iter()
        .filter(|(_, s)| call_count(s) > 0)
        .map(|((sc, who), s)| {
            let [c, w] = who.pairs();
            latency_histogram(&[("syscall", sc.row().name), c, w], s)
        })
        .collect();
    out.push(family(named(defs(), SYSCALL_DURATION), durations));
    for def in &defs()[EVERY_CALL.len()..] {
        let mut metrics = Vec::new();
        for ((who, value), (u, s)) in grouped.get(def.name).into_iter().flatten() {
            let values = [&*who.comm, &*who.workload].into_iter().chain(*value);
            let pairs: Vec<(&str, &str)> = def.labels.iter().copied().zip(values).collect();
            let calls = call_count(s);
            match u {
                Use::Bytes if calls > 0 => metrics.push(counter(&pairs, s.bytes as f64)),
                Use::Size if calls > 0 => metrics.push(size_histogram(&pairs, s)),
                Use::Small if calls > 0 => metrics.push(counter(&pairs, s.small as f64)),
                Use::Short if calls > 0 => metrics.push(counter(&pairs, s.short_calls as f64)),
                Use::Succeeded if calls > s.errors => {
                    metrics.push(counter(&pairs, (calls - s.errors) as f64))
                }
                Use::Duration if calls > 0 => metrics.push(latency_histogram(&pairs, s)),
                _ => {}
            }
        }
        out.push(family(def, metrics));
    }

    let errors = snap
        .errors
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|((sc, who, e), &n)| {
            let errno = if *e == 0 { "unknown".to_string() } else { errno::name(*e) };
            let [c, w] = who.pairs();
            counter(&[("syscall", sc.row().name), c, w, ("errno", &errno)], n as f64)
        })
        .collect();
    out.push(family(named(defs(), SYSCALL_ERRORS), errors));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_of_the_table_is_defined_once_with_one_shape() {
        for s in &SYSCALLS {
            for (u, f) in row_families(s) {
                let found: Vec<&MetricDef> =
                    super::super::metric_defs().iter().filter(|d| d.name == f.name).collect();
                assert_eq!(found.len(), 1, "{}", f.name);
                let mut labels = vec!["comm", "workload"];
                labels.extend(by_variant(u, s));
                assert_eq!(
                    &found[0].labels[..],
                    &labels[..],
                    "{}: rows that share it label it alike",
                    f.name
                );
                assert_eq!(found[0].kind, u.kind(), "{}: one use per family", f.name);
            }
        }
    }

    #[test]
    fn variant_labels_by_row() {
        use sonic_probe_common::{syscalls, FILE_CLASS_GPU, FILE_CLASS_MODEL};
        let row = |i: u16| syscalls::by_index(i).unwrap();
        assert_eq!(variant_value(row(syscalls::FUTEX), 9), Some("wait_bitset"));
        assert_eq!(variant_value(row(syscalls::FUTEX), 1), None, "a wake is no wait");
        assert_eq!(variant_value(row(syscalls::FUTEX_WAITV), 0), Some("waitv"));
        assert_eq!(variant_value(row(syscalls::PREAD64), FILE_CLASS_MODEL), Some("model"));
        assert_eq!(variant_value(row(syscalls::IOCTL), FILE_CLASS_GPU), Some("gpu"));
        assert_eq!(variant_value(row(syscalls::IOCTL), 0), Some("other"));
    }
}
