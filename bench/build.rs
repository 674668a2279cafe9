//! Compiles the benchmark's reference BPF programs in `bpf/` (the floor,
//! the minimal and the minimal without one piece each) with the same clang
//! flags as the probe (`../sonic-probe-ebpf/build_bpf.rs`), for
//! `src/reference.rs` to embed. They include the probe's headers
//! (`../sonic-probe-ebpf/bpf/`: vmlinux_min.h, log2.h) and
//! `sonic_probe_layout.h`, generated here from sonic-probe-common as the
//! probe's build does. Nothing without the `reference-programs` feature:
//! xtask links this crate before clang is installed.

#[path = "../sonic-probe-ebpf/build_bpf.rs"]
mod build_bpf;

use std::{
    env,
    path::{Path, PathBuf},
};

use build_bpf::{compile_all, fail, Job};

const SOURCES: &[&str] = &[
    "bpf/floor.bpf.c",
    "bpf/minimal.bpf.c",
    "bpf/sched_minimal.bpf.c",
    "../sonic-probe-ebpf/bpf/vmlinux_min.h",
    "../sonic-probe-ebpf/bpf/log2.h",
    "../sonic-probe-ebpf/build_bpf.rs",
];
/// (source, object, define): the reference programs the benchmark compares
/// the probe with, and the minimal one with one piece removed each (the
/// breakdown; src/reference.rs names them in `MINIMAL_WITHOUT`).
const REFERENCE_OBJECTS: &[(&str, &str, Option<&str>)] = &[
    ("bpf/floor.bpf.c", "floor.bpf.o", None),
    ("bpf/minimal.bpf.c", "minimal.bpf.o", None),
    ("bpf/sched_minimal.bpf.c", "sched_minimal.bpf.o", None),
    ("bpf/minimal.bpf.c", "minimal_without_clock.bpf.o", Some("MINIMAL_WITHOUT_CLOCK")),
    ("bpf/minimal.bpf.c", "minimal_without_task_storage.bpf.o", Some("MINIMAL_WITHOUT_TASK_STORAGE")),
    ("bpf/minimal.bpf.c", "minimal_without_aggregation.bpf.o", Some("MINIMAL_WITHOUT_AGGREGATION")),
];

fn main() {
    if env::var_os("CARGO_FEATURE_REFERENCE_PROGRAMS").is_none() {
        return;
    }
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = out.join("sonic_probe_layout.h");
    std::fs::write(&header, sonic_probe_common::header::generate())
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", header.display())));
    let clang = build_bpf::clang();
    let jobs: Vec<Job> = REFERENCE_OBJECTS
        .iter()
        .map(|(source, object, define)| Job {
            source,
            object: object.to_string(),
            defines: define.iter().map(|d| d.to_string()).collect(),
        })
        .collect();
    compile_all(&clang, &out, &[Path::new("../sonic-probe-ebpf/bpf")], &jobs);
}
