//! Compiles the BPF programs in `bpf/` with clang into the object files
//! that `src/lib.rs` embeds: one per variant of the probe, one per feature
//! probe. (The benchmark's reference programs are the bench crate's:
//! `bench/build.rs`, with the same clang run, `build_bpf.rs`.)
//!
//! The C code includes `sonic_probe_layout.h`, generated here from
//! sonic-probe-common, so the structures it shares with the daemon are never
//! written twice. A missing compiler or libbpf header fails the build with one
//! line naming the Debian package to install.

#[path = "build_bpf.rs"]
mod build_bpf;

use std::{
    env,
    path::{Path, PathBuf},
};

use build_bpf::{compile_all, fail, Job};

const SOURCES: &[&str] = &[
    "bpf/sonic_probe.bpf.c",
    "bpf/feature_probe.bpf.c",
    "bpf/vmlinux_min.h",
    "bpf/variant.h",
    "bpf/maps.h",
    "bpf/common.h",
    "bpf/entry_state.h",
    "bpf/targets.h",
    "bpf/stats.h",
    "bpf/log2.h",
    "bpf/files.h",
    "bpf/futex.h",
    "bpf/events.h",
    "bpf/thread_time.h",
    "bpf/gpu_wait.h",
    "build_bpf.rs",
];
/// (object, define): one feature probe each (bpf/feature_probe.bpf.c);
/// src/lib.rs names them in `Feature::probe_object`.
const FEATURE_PROBES: &[(&str, &str)] = &[
    ("feature_btf_tracepoint.bpf.o", "SP_PROBE_BTF_TRACEPOINT"),
    ("feature_ringbuf.bpf.o", "SP_PROBE_RINGBUF"),
    ("feature_task_btf.bpf.o", "SP_PROBE_TASK_BTF"),
    ("feature_ancestor_cgroup_id.bpf.o", "SP_PROBE_ANCESTOR_CGROUP_ID"),
    ("feature_task_storage.bpf.o", "SP_PROBE_TASK_STORAGE"),
    ("feature_bpf_loop.bpf.o", "SP_PROBE_BPF_LOOP"),
    ("feature_percpu_lookup.bpf.o", "SP_PROBE_PERCPU_LOOKUP"),
];

/// The probe's variants (bpf/variant.h): every valid combination of the
/// three switches, and the Rust function that picks one, written to
/// $OUT_DIR/variants.rs.
fn variant_jobs(rust: &mut String) -> Vec<Job> {
    let mut jobs = Vec::new();
    rust.push_str(
        "/// The object built with these switches (bpf/variant.h); None for the\n\
         /// invalid combination (task storage needs the BTF task pointer).\n\
         pub(crate) fn variant_object(task_btf: bool, task_storage: bool, waker_percpu: bool) \
         -> Option<&'static [u8]> {\n    match (task_btf, task_storage, waker_percpu) {\n",
    );
    for bits in 0..8u8 {
        let (task_btf, task_storage, waker_percpu) = (bits & 4 != 0, bits & 2 != 0, bits & 1 != 0);
        if task_storage && !task_btf {
            continue;
        }
        let object =
            format!("sonic_probe.{}{}{}.bpf.o", task_btf as u8, task_storage as u8, waker_percpu as u8);
        rust.push_str(&format!(
            "        ({task_btf}, {task_storage}, {waker_percpu}) => \
             Some(aya::include_bytes_aligned!(concat!(env!(\"OUT_DIR\"), \"/{object}\"))),\n"
        ));
        jobs.push(Job {
            source: "bpf/sonic_probe.bpf.c",
            object,
            defines: vec![
                format!("SP_TASK_BTF={}", task_btf as u8),
                format!("SP_ENTRY_TASK_STORAGE={}", task_storage as u8),
                format!("SP_WAKER_PERCPU={}", waker_percpu as u8),
            ],
        });
    }
    rust.push_str("        _ => None,\n    }\n}\n");
    jobs
}

fn main() {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = out.join("sonic_probe_layout.h");
    std::fs::write(&header, sonic_probe_common::header::generate())
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", header.display())));

    let clang = build_bpf::clang();

    let mut rust = String::new();
    let mut jobs = variant_jobs(&mut rust);
    for (object, define) in FEATURE_PROBES {
        jobs.push(Job {
            source: "bpf/feature_probe.bpf.c",
            object: object.to_string(),
            defines: vec![define.to_string()],
        });
    }
    let variants = out.join("variants.rs");
    std::fs::write(&variants, rust)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", variants.display())));

    compile_all(&clang, &out, &[Path::new("bpf")], &jobs);
}
