//! `sp-reference floor|minimal|minimal-without-PIECE|sched-minimal`,
//! `sp-reference uprobe-floor LIBRARY SYMBOL`:
//! attaches one of the benchmark's reference BPF programs to raw_syscalls
//! sys_enter/sys_exit (PIECE: clock, task-storage or aggregation removed,
//! for the breakdown), or the minimal thread-time accountant to
//! sched_switch/sched_wakeup (sched-minimal), or empty programs at the
//! entry and return of SYMBOL in LIBRARY, for every process that calls it
//! (uprobe-floor: what any uprobe tracer pays per call), prints `attached` on
//! stderr and holds them until it is killed (SIGINT/SIGTERM) or its stdin
//! closes; the kernel detaches them when the process ends.
//!
//! Why a binary of its own: `cargo xtask bench` compares sonic-probe with
//! these programs, and xtask must build on a fresh machine before clang
//! and libbpf's headers (which the BPF objects need) are installed by its
//! own `setup`; so xtask links this crate without them (no
//! `reference-programs` feature), and this binary, built with them, loads
//! them.

use std::{io::Read, process::ExitCode};

use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        BtfTracePoint, UProbe,
    },
    Btf, EbpfLoader,
};
use sonic_probe_bench::reference::{FLOOR_OBJECT, MINIMAL_OBJECT, MINIMAL_WITHOUT, SCHED_MINIMAL_OBJECT};

fn attach(object: &[u8], enter: &str, exit: &str) -> anyhow::Result<aya::Ebpf> {
    attach_to(object, &[(enter, "sys_enter"), (exit, "sys_exit")])
}

/// Loads `object` and attaches each (program, tracepoint).
fn attach_to(object: &[u8], programs: &[(&str, &str)]) -> anyhow::Result<aya::Ebpf> {
    let btf = Btf::from_sys_fs()?;
    // aya 0.14 has no type for task storage maps; the kernel does.
    let mut ebpf = EbpfLoader::new().btf(Some(&btf)).allow_unsupported_maps().load(object)?;
    for &(name, tp) in programs {
        let p: &mut BtfTracePoint =
            ebpf.program_mut(name).ok_or_else(|| anyhow::anyhow!("no program {name}"))?.try_into()?;
        p.load(tp, &btf)?;
        p.attach()?;
    }
    Ok(ebpf)
}

/// Loads the floor's empty uprobe programs and attaches them at the entry
/// and the return of `symbol` in `library`.
fn attach_uprobe_floor(library: &str, symbol: &str) -> anyhow::Result<aya::Ebpf> {
    let mut ebpf = EbpfLoader::new().load(FLOOR_OBJECT)?;
    for name in ["floor_uprobe", "floor_uretprobe"] {
        let p: &mut UProbe =
            ebpf.program_mut(name).ok_or_else(|| anyhow::anyhow!("no program {name}"))?.try_into()?;
        p.load()?;
        p.attach(UProbeAttachLocation::Symbol(symbol), library, UProbeScope::AllProcesses)?;
    }
    Ok(ebpf)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().cloned().unwrap_or_default();
    let attached = match which.as_str() {
        "floor" => attach(FLOOR_OBJECT, "floor_enter", "floor_exit"),
        "uprobe-floor" => match (args.get(1), args.get(2)) {
            (Some(library), Some(symbol)) => attach_uprobe_floor(library, symbol),
            _ => {
                eprintln!("usage: sp-reference uprobe-floor LIBRARY SYMBOL");
                return ExitCode::from(2);
            }
        },
        "minimal" => attach(MINIMAL_OBJECT, "minimal_enter", "minimal_exit"),
        "sched-minimal" => attach_to(
            SCHED_MINIMAL_OBJECT,
            &[("minimal_switch", "sched_switch"), ("minimal_wakeup", "sched_wakeup")],
        ),
        other => match other
            .strip_prefix("minimal-without-")
            .and_then(|piece| MINIMAL_WITHOUT.iter().find(|(p, _)| *p == piece))
        {
            Some((_, object)) => attach(object, "minimal_enter", "minimal_exit"),
            None => {
                let pieces: Vec<&str> = MINIMAL_WITHOUT.iter().map(|(p, _)| *p).collect();
                eprintln!(
                    "usage: sp-reference floor|minimal|minimal-without-{{{}}}|sched-minimal|uprobe-floor LIBRARY SYMBOL",
                    pieces.join(",")
                );
                return ExitCode::from(2);
            }
        },
    };
    let _ebpf = match attached {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sp-reference: cannot attach {which}: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("attached {which}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    ExitCode::SUCCESS
}
