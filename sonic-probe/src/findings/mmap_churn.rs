//! mmap_churn: large regions mapped and unmapped again and again (scenario
//! 4: the model's memory freed after each inference and mapped again for
//! the next).
//!
//! Rule: an mmap of at least `bytes` (--large-map-threshold, default
//! 16 MiB) that is unmapped whole (munmap at its start address, of its
//! length) within `window` (--churn-window, default 60 s) is one cycle.
//! Cycles are grouped per process by size and file (or anonymous); a group
//! with at least `cycles` (--churn-cycles, default 2) cycles is reported. Not churn: glibc's arena
//! reservations when threads start (PROT_NONE mappings, trimmed by partial
//! munmaps), partial unmaps, and the unmapping at process exit (the kernel
//! tears the address space down without munmap calls).

use std::{collections::HashMap, sync::Arc, time::Duration};

use prometheus::proto::{MetricFamily, MetricType::COUNTER};
use serde::{Deserialize, Serialize};
use sonic_probe_common::syscalls;

use super::{
    state::{tracked, StateMap},
    tally::Tally,
    DetailKind, Detector, DetectorCounts, Evictions, Input, LiveFile, PathDisplay, Record, Registration,
};
use crate::{
    config::units::human_bytes,
    events::Event,
    metrics::family::{def, Fold, MetricDef},
};

pub const DETECTOR: Registration =
    Registration { kind: Detail::KIND, metrics: METRICS, new: |s, _| Box::new(MmapChurn::new(s)) };

/// Its thresholds (part of the findings' [`super::Settings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Mappings at least this large make cycles.
    pub bytes: u64,
    /// Unmapped within this long of being mapped: a cycle.
    pub window: Duration,
    /// Cycles of one size (and file) that make a finding.
    pub cycles: u64,
}

/// Its finding: large regions mapped and unmapped again and again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    pub size_bytes: u64,
    pub count: u64,
    pub path: Option<String>,
}

impl DetailKind for Detail {
    const KIND: &'static str = "mmap_churn";

    fn problem_key(&self) -> String {
        format!("{} {}", self.size_bytes, self.path.as_deref().unwrap_or(""))
    }

    fn fold(&mut self, later: Self) {
        self.count += later.count;
    }

    fn show_paths(&mut self, display: PathDisplay) {
        if let Some(p) = &mut self.path {
            *p = display.show(p);
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} {} mapped and unmapped {} times",
            human_bytes(self.size_bytes),
            self.path.as_ref().map_or_else(|| "anonymous".to_string(), |p| format!("of {p}")),
            self.count
        )
    }
}

#[rustfmt::skip]
const METRICS: &[MetricDef] = &[
    def("sonic_probe_mmap_churn_total", COUNTER, &["comm", "workload"],
        "Large map/unmap cycles counted in mmap_churn findings."),
];

/// What it exports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Cycles counted in findings.
    cycles: Tally<()>,
}

impl DetectorCounts for Counts {
    fn collect(&self, fold: &mut Fold<'_>, out: &mut Vec<MetricFamily>) {
        out.push(self.cycles.export(&METRICS[0], fold, |_, ()| []));
    }
}

/// Large mappings remembered at once (over all processes).
const MAX_REGIONS: usize = 16384;
const PAGE: u64 = 4096;

struct Region {
    len: u64,
    mapped_ns: u64,
    path: Option<Arc<str>>,
}

struct Group {
    pid: u32,
    comm: String,
    cycles: u64,
    first_ns: u64,
    last_ns: u64,
    /// Enough cycles for a finding.
    reported: bool,
}

tracked!(Group, cycles);

type GroupKey = (u64, u64, Option<Arc<str>>);

/// What it is told by the options (findings::Settings).
struct Config {
    min_bytes: u64,
    cycle_ns: u64,
    min_cycles: u64,
    window_ns: u64,
    max: usize,
}

impl Config {
    fn new(s: &super::Settings) -> Self {
        Config {
            min_bytes: s.mmap_churn.bytes.max(1),
            cycle_ns: s.mmap_churn.window.as_nanos() as u64,
            min_cycles: s.mmap_churn.cycles.max(1),
            window_ns: s.window.as_nanos() as u64,
            max: s.max_findings,
        }
    }
}

pub struct MmapChurn {
    /// Its thresholds and windows, replaced whole on SIGHUP.
    cfg: Config,
    /// (incarnation, address) -> a large mapping not yet unmapped.
    regions: HashMap<(u64, u64), Region>,
    /// (incarnation, size, path) -> cycles.
    groups: StateMap<GroupKey, Group>,
    counts: Counts,
}

impl MmapChurn {
    pub fn new(s: &super::Settings) -> Self {
        MmapChurn {
            cfg: Config::new(s),
            regions: HashMap::new(),
            groups: StateMap::new(DETECTOR.kind, |k: &GroupKey| k.0, s.max_findings),
            counts: Counts::default(),
        }
    }
}

fn pages(len: u64) -> u64 {
    len.div_ceil(PAGE)
}

impl Detector for MmapChurn {
    fn observe(&mut self, input: &Input<'_>, evictions: &mut Evictions) {
        let Event::Call(c) = input.event else { return };
        let [addr, len, prot, flags, fd, _] = c.raw.args;
        let t = c.raw.header.time_ns;
        match c.raw.syscall {
            syscalls::MMAP if c.errno().is_none() && len >= self.cfg.min_bytes => {
                // PROT_NONE: an address-space reservation (glibc arenas), not memory.
                if prot == libc::PROT_NONE as u64 {
                    return;
                }
                let path = if flags & libc::MAP_ANONYMOUS as u64 == 0 {
                    input
                        .files
                        .of_call(c.tgid(), fd as u32, c.raw.file_dev, c.raw.file_ino)
                        .map(|f| f.path.clone())
                } else {
                    None
                };
                if self.regions.len() >= MAX_REGIONS {
                    let oldest = t.saturating_sub(self.cfg.cycle_ns);
                    self.regions.retain(|_, r| r.mapped_ns >= oldest);
                }
                if self.regions.len() < MAX_REGIONS {
                    self.regions
                        .insert((input.incarnation, c.raw.ret as u64), Region { len, mapped_ns: t, path });
                }
            }
            syscalls::MUNMAP if c.raw.ret == 0 && len >= self.cfg.min_bytes => {
                let Some(r) = self.regions.remove(&(input.incarnation, addr)) else { return };
                if pages(r.len) != pages(len) || t.saturating_sub(r.mapped_ns) > self.cfg.cycle_ns {
                    return;
                }
                let comm = c.process_name();
                let key = (input.incarnation, r.len, r.path);
                let new = (!self.groups.map.contains_key(&key)).then(|| key.clone());
                let g = self.groups.map.entry(key).or_insert_with(|| Group {
                    pid: c.tgid(),
                    comm: comm.clone(),
                    cycles: 0,
                    first_ns: r.mapped_ns,
                    last_ns: t,
                    reported: false,
                });
                g.cycles += 1;
                g.last_ns = t;
                if g.cycles == self.cfg.min_cycles {
                    g.reported = true;
                    self.counts.cycles.add(&comm, input.cgroup, (), (), g.cycles);
                } else if g.cycles > self.cfg.min_cycles {
                    self.counts.cycles.add(&comm, input.cgroup, (), (), 1);
                }
                if let Some(key) = new {
                    self.groups.inserted(key, evictions);
                }
            }
            _ => {}
        }
    }

    fn reconfigure(&mut self, s: &super::Settings) {
        self.cfg = Config::new(s);
        self.groups.set_max_findings(s.max_findings);
    }

    fn exited(&mut self, incarnation: u64) {
        // The kernel tears the address space down without munmap calls.
        self.regions.retain(|(inc, _), _| *inc != incarnation);
        self.groups.exited(incarnation);
    }

    fn prune(&mut self, now_ns: u64, _live: &[LiveFile<'_>], ev: &mut Evictions) {
        let oldest = now_ns.saturating_sub(self.cfg.cycle_ns);
        self.regions.retain(|_, r| r.mapped_ns >= oldest);
        self.groups.prune(now_ns.saturating_sub(self.cfg.window_ns), self.cfg.max, ev);
    }

    fn findings(&self, now_ns: u64, _live: &[LiveFile<'_>], out: &mut Vec<Record>) {
        for ((inc, size, path), g) in self.groups.current(now_ns.saturating_sub(self.cfg.window_ns)) {
            if g.cycles < self.cfg.min_cycles {
                continue;
            }
            out.push(
                g.record(
                    Detail { size_bytes: *size, count: g.cycles, path: path.as_ref().map(|p| p.to_string()) }
                        .into(),
                    *inc,
                ),
            );
        }
    }

    fn counts(&self, _listed: &[Record]) -> Box<dyn DetectorCounts> {
        Box::new(self.counts.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::{testing::*, Engine, Settings};

    const GIB: u64 = 1 << 30;
    const RW: u64 = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    const PRIV_ANON: u64 = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;

    fn mmap(pid: u32, t: u64, addr: u64, len: u64, prot: u64, flags: u64, fd: i64) -> Event {
        Event::Call(call(syscalls::MMAP, pid, pid, t, 1000, addr as i64, [0, len, prot, flags, fd as u64, 0]))
    }

    fn munmap(pid: u32, t: u64, addr: u64, len: u64) -> Event {
        Event::Call(call(syscalls::MUNMAP, pid, pid, t, 1000, 0, [addr, len, 0, 0, 0, 0]))
    }

    fn found(e: &mut Engine, now: u64) -> Vec<crate::findings::Detail> {
        e.findings(now, &[])
            .into_iter()
            .filter(|f| f.detail.kind() == "mmap_churn")
            .map(|f| f.detail)
            .collect()
    }

    #[test]
    fn a_model_mapped_and_unmapped_per_request() {
        let mut e = Engine::new(&Settings::default());
        e.observe(&openat(3, SEC / 2, "/models/sonic.safetensors", 3, 2));
        for i in 0..5 {
            let t = (i + 1) * 10 * SEC;
            e.observe(&mmap(
                3,
                t,
                0x7f8a_1b00_0000,
                GIB,
                libc::PROT_READ as u64,
                libc::MAP_PRIVATE as u64,
                3,
            ));
            e.observe(&munmap(3, t + 5 * SEC, 0x7f8a_1b00_0000, GIB));
        }
        assert_eq!(
            found(&mut e, 60 * SEC),
            vec![crate::findings::Detail::MmapChurn(Detail {
                size_bytes: GIB,
                count: 5,
                path: Some("/models/sonic.safetensors".into())
            })]
        );
        assert_eq!(counts::<Counts>(&e).cycles.get("app", 0, ()), 5);
    }

    #[test]
    fn arena_reservations_partial_unmaps_and_one_offs_are_not_churn() {
        let mut e = Engine::new(&Settings::default());
        // glibc: reserve 128 MiB PROT_NONE, trim it with partial munmaps.
        let reserve = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64;
        for i in 0..4 {
            let base = 0x7f00_0000_0000 + i * 0x1000_0000;
            e.observe(&mmap(3, SEC, base, 128 << 20, 0, reserve, -1));
            e.observe(&munmap(3, SEC, base, 32 << 20));
            e.observe(&munmap(3, SEC, base + (96 << 20), 32 << 20));
        }
        // A big buffer mapped once and unmapped once.
        e.observe(&mmap(3, 2 * SEC, 0x7e00_0000_0000, GIB, RW, PRIV_ANON, -1));
        e.observe(&munmap(3, 3 * SEC, 0x7e00_0000_0000, GIB));
        // Unmapping half of a mapping, twice.
        for i in 0..2 {
            let a = 0x7d00_0000_0000 + i * 0x1000_0000;
            e.observe(&mmap(3, 4 * SEC, a, 64 << 20, RW, PRIV_ANON, -1));
            e.observe(&munmap(3, 4 * SEC, a, 32 << 20));
        }
        // Below the size threshold.
        for i in 0..5 {
            let a = 0x7c00_0000_0000 + i * 0x1000_0000;
            e.observe(&mmap(3, 5 * SEC, a, 1 << 20, RW, PRIV_ANON, -1));
            e.observe(&munmap(3, 5 * SEC, a, 1 << 20));
        }
        assert!(found(&mut e, 10 * SEC).is_empty());
    }

    #[test]
    fn unmapped_after_the_window_is_not_a_cycle() {
        let mut e = Engine::new(&Settings::default());
        for i in 0..3 {
            let t = i * 200 * SEC;
            e.observe(&mmap(3, t, 0x7e00_0000_0000, GIB, RW, PRIV_ANON, -1));
            e.observe(&munmap(3, t + 61 * SEC, 0x7e00_0000_0000, GIB));
        }
        assert!(found(&mut e, 700 * SEC).is_empty());
    }
}
