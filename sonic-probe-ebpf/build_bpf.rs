//! Compiling BPF C with clang, for two build scripts: this crate's
//! (`build.rs`: the probe's variants and the feature probes) and the
//! benchmark's (`bench/build.rs`: the reference programs, which are
//! compared with the probe and so are compiled as it is). One set of clang
//! flags, both cores, and errors in one line naming the Debian package to
//! install. Both include this file with `#[path]`: a crate of its own for
//! sixty lines of build script would be more to read, not less.

use std::{
    env,
    path::Path,
    process::{exit, Command},
};

/// One clang run: a source, the object it makes, its -D switches.
pub struct Job {
    pub source: &'static str,
    pub object: String,
    pub defines: Vec<String>,
}

pub fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1)
}

/// The clang to run (SONIC_PROBE_CLANG, or clang-16), once libbpf's headers
/// are known to be there.
pub fn clang() -> String {
    println!("cargo:rerun-if-env-changed=SONIC_PROBE_CLANG");
    let clang = env::var("SONIC_PROBE_CLANG").unwrap_or_else(|_| "clang-16".into());
    let helpers = Path::new("/usr/include/bpf/bpf_helpers.h");
    if !helpers.exists() {
        fail(&format!(
            "{} not found: install libbpf's headers with `apt-get install libbpf-dev`",
            helpers.display()
        ));
    }
    clang
}

/// Compiles every job into `out` (which is also the first include
/// directory: the generated headers), `include` the next ones; fails the
/// build with the first error.
pub fn compile_all(clang: &str, out: &Path, include: &[&Path], jobs: &[Job]) {
    // Both cores: a dozen objects.
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(2))
            .map(|chunk| {
                scope.spawn(move || chunk.iter().try_for_each(|job| compile(clang, out, include, job)))
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

fn compile(clang: &str, out: &Path, include: &[&Path], job: &Job) -> Result<(), String> {
    let mut cmd = Command::new(clang);
    cmd.args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-D__TARGET_ARCH_x86"])
        .args(["-Wall", "-Werror", "-Wno-unused-function"])
        .args(job.defines.iter().map(|d| format!("-D{d}")))
        .arg("-I")
        .arg(out);
    for dir in include {
        cmd.arg("-I").arg(dir);
    }
    let status = cmd.arg("-c").arg(job.source).arg("-o").arg(out.join(&job.object)).status();
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
