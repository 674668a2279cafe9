//! GPU waits: what sonic-probe's uprobes on CUDA's waiting calls
//! (sonic-probe-ebpf's bpf/gpu_wait.h: an entry uprobe and a return probe
//! on each) cost per call, next to bpftrace's uprobe and uretprobe on the
//! same function timing it into a histogram, the usual way to get the
//! same number by hand, and next to the floor: empty programs at the same
//! entry and return (sp-reference uprobe-floor), what any uprobe tracer
//! pays per call before its programs do anything.
//!
//! The call: NVIDIA's real runtime library's cudaStreamSynchronize(NULL)
//! (tests/fetch_cuda_runtime.py; without a driver it returns an error at
//! once, through its real entry point), so that what is timed is the
//! probes' cost and not a wait. And the proof that nothing else pays: a
//! call of the same library that is not probed (cudaGetDeviceCount), whose
//! time must not move. Wall clock, ns per call of sp-bench's loop pinned
//! to the benchmark's CPU, each tracer attached for the whole host;
//! kernel-side, each tracer's programs' run time per call (BPF
//! statistics: the programs alone, not the traps that run them, which
//! both pay alike: two per call, at the entry and at the return).

use std::{
    ffi::OsStr,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{
    bpfstats::{self, Programs},
    harness::{spawn_until, Bench},
    statistics::median,
    tracers::{Attached, Tracer},
};

/// What is compared, in the report's order.
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Nothing,
    Floor,
    Bpftrace,
    Sonic,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Nothing => "no tracer",
            Who::Floor => "empty uprobe + uretprobe (floor)",
            Who::Bpftrace => "bpftrace uprobe + uretprobe, histogram (reference)",
            Who::Sonic => "sonic-probe run (whole host)",
        }
    }
}

/// One round's figures of one tracer: wall ns per probed call, per call
/// not probed; its programs' ns per probed call (kernel-side).
struct Sample {
    sync: f64,
    other: f64,
    kernel: Option<f64>,
}

/// The real runtime library, fetched once into target/cuda-runtime (as
/// the GPU tests do).
fn cuda_runtime(root: &Path) -> Result<PathBuf> {
    let out = Command::new("/usr/bin/python3")
        .arg(root.join("tests/fetch_cuda_runtime.py"))
        .arg(root.join("target/cuda-runtime"))
        .output()
        .context("python3 tests/fetch_cuda_runtime.py")?;
    if !out.status.success() {
        bail!("fetch_cuda_runtime.py: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The probed function.
const PROBED: &str = "cudaStreamSynchronize";

fn bpftrace_program(lib: &Path) -> String {
    let f = format!("{}:{PROBED}", lib.display());
    format!(
        "uprobe:{f} {{ @start[tid] = nsecs; }}\n\
         uretprobe:{f} /@start[tid]/ {{ @lat = hist(nsecs - @start[tid]); delete(@start[tid]); }}\n"
    )
}

fn is_gpu_program(name: &str) -> bool {
    name.starts_with("gpu_")
}

impl Bench {
    /// ns per call of `n` calls of sp-bench `call` (cuda-sync, cuda-other).
    fn cuda_calls(&self, lib: &Path, call: &str, n: u64) -> Result<f64> {
        let out = Command::new(&self.spbench)
            .args(self.bench_args(call, n))
            .env("SP_BENCH_CUDA_LIB", lib)
            .output()?;
        if !out.status.success() {
            bail!("sp-bench {call}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        crate::calls::parse_ns(&String::from_utf8_lossy(&out.stdout))
    }

    /// Attaches `who`; for sonic-probe, once its uprobes are on `lib`: a
    /// process maps it (sp-bench, waiting), the daemon probes the file, and
    /// its programs run for a short loop of probed calls.
    fn attach_gpu(&self, who: Who, lib: &Path) -> Result<(Attached, Option<Programs>)> {
        match who {
            Who::Nothing => Ok((Attached::Nothing, None)),
            Who::Floor => {
                let child =
                    self.start_reference(&[OsStr::new("uprobe-floor"), lib.as_os_str(), OsStr::new(PROBED)])?;
                let programs = Programs::of_process_named(child.id(), |_| true)?;
                Ok((Attached::Process(child), Some(programs)))
            }
            Who::Bpftrace => {
                let mut c = Command::new("bpftrace");
                c.args(["-e", &bpftrace_program(lib)]);
                self.pin_tracer(&mut c);
                let child = spawn_until(c, "Attaching", true)?;
                std::thread::sleep(Duration::from_millis(500));
                // Its programs are the two probes' (BEGIN and END, if any,
                // do not run meanwhile).
                let programs = Programs::of_process_named(child.id(), |_| true)?;
                Ok((Attached::Process(child), Some(programs)))
            }
            Who::Sonic => {
                let attached = self.attach(Tracer::SonicRun)?;
                let Attached::Process(daemon) = &attached else { unreachable!("a process") };
                let programs = Programs::of_process_named(daemon.id(), is_gpu_program)?;
                let mut mapper = Command::new(&self.spbench)
                    .args(["cuda-sync", "1", "--wait"])
                    .env("SP_BENCH_CUDA_LIB", lib)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .spawn()
                    .context("sp-bench cuda-sync --wait")?;
                let on = bpfstats::enable()?;
                let deadline = Instant::now() + Duration::from_secs(30);
                let probed = loop {
                    let before = programs.snapshot()?;
                    self.cuda_calls(lib, "cuda-sync", 100)?;
                    if Programs::ran(&before, &programs.snapshot()?) {
                        break true;
                    }
                    if Instant::now() > deadline {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                };
                drop(on);
                let _ = mapper.stdin.take().map(|mut s| s.write_all(b"g"));
                let _ = mapper.wait();
                if !probed {
                    bail!("sonic-probe did not probe {} within 30 s", lib.display());
                }
                Ok((attached, Some(programs)))
            }
        }
    }

    fn gpu_sample(&self, who: Who, lib: &Path, n: u64) -> Result<Sample> {
        let (attached, programs) = self.attach_gpu(who, lib)?;
        self.cuda_calls(lib, "cuda-sync", n / 10)?; // warm-up
        let sync = self.cuda_calls(lib, "cuda-sync", n)?;
        let other = self.cuda_calls(lib, "cuda-other", n)?;
        let kernel = match &programs {
            None => None,
            Some(p) => {
                let on = bpfstats::enable()?;
                let before = p.snapshot()?;
                self.cuda_calls(lib, "cuda-sync", n)?;
                let after = p.snapshot()?;
                drop(on);
                // Entry and return programs per call.
                Some(p.per_program(&before, &after).iter().map(|(_, ns, _)| ns).sum())
            }
        };
        drop(attached);
        Ok(Sample { sync, other, kernel })
    }
}

/// The report's section.
pub(crate) fn section(b: &Bench, rounds: usize, smoke: bool) -> Result<String> {
    let lib = cuda_runtime(&b.root)?;
    let n: u64 = if smoke { 20_000 } else { 200_000 };
    let all = [Who::Nothing, Who::Floor, Who::Bpftrace, Who::Sonic];
    let mut samples: Vec<Vec<Sample>> = all.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for i in 0..all.len() {
            let k = (i + round) % all.len();
            let s = b
                .gpu_sample(all[k], &lib, n)
                .with_context(|| format!("GPU waits under {}", all[k].name()))?;
            eprintln!(
                "   cuda calls under {:<52} {:>6.0} ns probed, {:>4.0} ns not",
                all[k].name(),
                s.sync,
                s.other
            );
            samples[k].push(s);
        }
    }
    let med = |k: usize, f: fn(&Sample) -> f64| median(&mut samples[k].iter().map(f).collect::<Vec<_>>());
    let sync: Vec<f64> = (0..all.len()).map(|k| med(k, |s| s.sync)).collect();
    let other: Vec<f64> = (0..all.len()).map(|k| med(k, |s| s.other)).collect();
    let kernel: Vec<Option<f64>> = samples
        .iter()
        .map(|v| {
            let mut k: Vec<f64> = v.iter().filter_map(|s| s.kernel).collect();
            (!k.is_empty()).then(|| median(&mut k))
        })
        .collect();
    let mut out = String::from(
        "\n## GPU waits (uprobes on CUDA's waiting calls)\n\n\
         sp-bench cuda-sync: cudaStreamSynchronize(NULL) of NVIDIA's real libcudart.so.12 (no driver: it \
         returns at once), probed at entry and return; cuda-other: cudaGetDeviceCount of the same library, \
         not probed. Wall clock, ns per call, medians over rounds; kernel-side, the tracer's programs' run \
         time per probed call (entry and return, BPF statistics: without the two traps per call that run \
         them, which every uprobe tracer pays alike).\n\n\
         | tracer | probed call, ns | added vs no tracer | its programs, ns per call | call not probed, ns | added |\n\
         |---|---|---|---|---|---|\n",
    );
    for (i, who) in all.iter().enumerate() {
        let added = |v: &[f64]| if i == 0 { "-".to_string() } else { format!("{:+.0}", v[i] - v[0]) };
        let k = kernel[i].map_or("-".to_string(), |k| format!("{k:.0}"));
        out.push_str(&format!(
            "| {} | {:.0} | {} | {k} | {:.0} | {} |\n",
            who.name(),
            sync[i],
            added(&sync),
            other[i],
            added(&other)
        ));
    }
    // Each tracer's figures by who it is, not by its place in `all`.
    let at = |who: Who| all.iter().position(|w| *w == who).expect("every tracer is in `all`");
    let added_by = |who: Who| sync[at(who)] - sync[at(Who::Nothing)];
    let (floor, theirs, ours) = (added_by(Who::Floor), added_by(Who::Bpftrace), added_by(Who::Sonic));
    if theirs > 0.0 {
        out.push_str(&format!(
            "\nsonic-probe's added cost per probed call is {:.2}x bpftrace's (goal <= 0.5x); \
             the floor alone, empty programs at the same entry and return, is {:.2}x bpftrace's.",
            ours / theirs,
            floor / theirs
        ));
        if theirs > floor {
            out.push_str(&format!(
                " Above the floor, sonic-probe adds {:+.0} ns and bpftrace {:+.0} ns a call ({:.2}x).",
                ours - floor,
                theirs - floor,
                (ours - floor) / (theirs - floor)
            ));
        }
    }
    if let (Some(o), Some(t)) = (kernel[at(Who::Sonic)], kernel[at(Who::Bpftrace)]) {
        out.push_str(&format!(
            " Its programs' run time is {:.2}x bpftrace's; the rest of either's added cost is the traps.",
            o / t
        ));
    }
    out.push('\n');
    Ok(out)
}
