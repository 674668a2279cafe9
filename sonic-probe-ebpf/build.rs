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
    "bpf/vmlinux_min.h",
    "bpf/maps.h",
    "bpf/common.h",
    "bpf/targets.h",
    "bpf/stats.h",
    "bpf/log2.h",
    "bpf/files.h",
    "bpf/futex.h",
    "bpf/events.h",
];
/// (source, object): the probe, and the reference programs benchmarks
/// compare it with.
const OBJECTS: &[(&str, &str)] = &[
    ("bpf/sonic_probe.bpf.c", "sonic_probe.bpf.o"),
    ("bpf/floor.bpf.c", "floor.bpf.o"),
    ("bpf/minimal.bpf.c", "minimal.bpf.o"),
];

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
    std::fs::write(&header, sonic_probe_common::cgen::header())
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", header.display())));

    let clang = env::var("SONIC_PROBE_CLANG").unwrap_or_else(|_| "clang-16".into());
    let helpers = Path::new("/usr/include/bpf/bpf_helpers.h");
    if !helpers.exists() {
        fail(&format!(
            "{} not found: install libbpf's headers with `apt-get install libbpf-dev`",
            helpers.display()
        ));
    }

    for (source, object) in OBJECTS {
        let status = Command::new(&clang)
            .args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-D__TARGET_ARCH_x86"])
            .args(["-Wall", "-Werror", "-Wno-unused-function"])
            .arg("-I")
            .arg(&out)
            .arg("-I")
            .arg("bpf")
            .arg("-c")
            .arg(source)
            .arg("-o")
            .arg(out.join(object))
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => fail(&format!("{clang} failed to compile {source} ({s})")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fail(&format!(
                "{clang} not found: install it with `apt-get install clang-16` \
                 (or set SONIC_PROBE_CLANG to a clang >= 16)"
            )),
            Err(e) => fail(&format!("cannot run {clang}: {e}")),
        }
    }
}
