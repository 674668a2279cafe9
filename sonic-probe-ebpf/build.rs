//! Compiles the BPF programs in `bpf/` with clang into one object file that
//! `src/lib.rs` embeds.
//!
//! The C code includes `sonic_probe_layout.h`, generated here from
//! sonic-probe-common, so the structures it shares with the daemon are never
//! written twice. A missing compiler or libbpf header fails the build with one
//! line naming the Debian package to install.

use std::{
    env,
    path::{Path, PathBuf},
    process::{exit, Command},
};

const SOURCES: &[&str] = &[
    "bpf/sonic_probe.bpf.c",
    "bpf/floor.bpf.c",
    "bpf/minimal.bpf.c",
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
];
/// (source, object, define): the reference programs benchmarks compare the
/// probe with, and the minimal one with one piece removed each (the
/// benchmark's breakdown; src/lib.rs names them in `MINIMAL_WITHOUT`).
const REFERENCE_OBJECTS: &[(&str, &str, Option<&str>)] = &[
    ("bpf/floor.bpf.c", "floor.bpf.o", None),
    ("bpf/minimal.bpf.c", "minimal.bpf.o", None),
    ("bpf/minimal.bpf.c", "minimal_without_clock.bpf.o", Some("MINIMAL_WITHOUT_CLOCK")),
    ("bpf/minimal.bpf.c", "minimal_without_task_storage.bpf.o", Some("MINIMAL_WITHOUT_TASK_STORAGE")),
    ("bpf/minimal.bpf.c", "minimal_without_aggregation.bpf.o", Some("MINIMAL_WITHOUT_AGGREGATION")),
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

/// One clang run: a source, the object it makes, its -D switches.
struct Job {
    source: &'static str,
    object: String,
    defines: Vec<String>,
}

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

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1)
}

fn main() {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    println!("cargo:rerun-if-env-changed=SONIC_PROBE_CLANG");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = out.join("sonic_probe_layout.h");
    std::fs::write(&header, sonic_probe_common::header::generate())
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", header.display())));

    let clang = env::var("SONIC_PROBE_CLANG").unwrap_or_else(|_| "clang-16".into());
    let helpers = Path::new("/usr/include/bpf/bpf_helpers.h");
    if !helpers.exists() {
        fail(&format!(
            "{} not found: install libbpf's headers with `apt-get install libbpf-dev`",
            helpers.display()
        ));
    }

    let mut rust = String::new();
    let mut jobs = variant_jobs(&mut rust);
    for (source, object, define) in REFERENCE_OBJECTS {
        jobs.push(Job {
            source,
            object: object.to_string(),
            defines: define.iter().map(|d| d.to_string()).collect(),
        });
    }
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

    // Both cores: a dozen objects.
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(2))
            .map(|chunk| {
                let (clang, out) = (&clang, &out);
                scope.spawn(move || chunk.iter().try_for_each(|job| compile(clang, out, job)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a compile thread panicked".into())))
            .collect()
    });
    for r in results {
        if let Err(msg) = r {
            fail(&msg);
        }
    }
}

fn compile(clang: &str, out: &Path, job: &Job) -> Result<(), String> {
    let status = Command::new(clang)
        .args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-D__TARGET_ARCH_x86"])
        .args(["-Wall", "-Werror", "-Wno-unused-function"])
        .args(job.defines.iter().map(|d| format!("-D{d}")))
        .arg("-I")
        .arg(out)
        .arg("-I")
        .arg("bpf")
        .arg("-c")
        .arg(job.source)
        .arg("-o")
        .arg(out.join(&job.object))
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{clang} failed to compile {} {:?} ({s})", job.source, job.defines)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{clang} not found: install it with `apt-get install clang-16` \
             (or set SONIC_PROBE_CLANG to a clang >= 16)"
        )),
        Err(e) => Err(format!("cannot run {clang}: {e}")),
    }
}
