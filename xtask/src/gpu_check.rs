//! `cargo xtask gpu-check`: the GPU waits on a machine that has an NVIDIA
//! GPU, its driver and PyTorch, which CI and this project's machines do
//! not (their tests use NVIDIA's real runtime library without a driver,
//! and a stand-in for durations: docs/testing.md).
//!
//! It runs the daemon (`--comm sp-gpu-check`) and a request loop
//! (xtask/gpu_check.py) whose every step waits for the GPU in `.item()`,
//! under PyTorch's own profiler, and checks three things:
//! 1. sonic-probe's count of `cudaStreamSynchronize` over the loop is the
//!    profiler's (the other runtime calls both saw are printed beside);
//! 2. the request thread's share of time in state `gpu` over the loop is
//!    at least [`MIN_GPU_SHARE`];
//! 3. the gpu_wait finding names the loop's line (the one marked
//!    `sp-sync-line` in the script).
//!
//! Without a GPU it prints one line and succeeds: there is nothing to check.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{is_root, root, sh};

/// The loop's share of time in state gpu that passes.
pub const MIN_GPU_SHARE: f64 = 0.8;
/// The name the loop gives itself (the daemon's --comm).
const COMM: &str = "sp-gpu-check";
const SCRIPT: &str = "xtask/gpu_check.py";

/// Where this machine's NVIDIA GPU shows, if it has one.
fn gpu_present() -> Option<String> {
    if Path::new("/dev/nvidiactl").exists() || Path::new("/dev/nvidia0").exists() {
        let name = Command::new("nvidia-smi")
            .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\n', "; "));
        return Some(name.unwrap_or_else(|| "/dev/nvidiactl".into()));
    }
    None
}

pub fn run(args: &[String]) -> Result<()> {
    let mut python = "python3".to_string();
    let mut seconds = 10u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--python" => python = it.next().context("gpu-check: --python needs a path")?.clone(),
            "--seconds" => {
                let v = it.next().context("gpu-check: --seconds needs a number")?;
                seconds = v
                    .parse()
                    .ok()
                    .filter(|s| *s >= 6)
                    .with_context(|| format!("gpu-check: --seconds {v}: not a whole number of 6 or more"))?;
            }
            other => bail!("gpu-check: unknown argument {other:?}; usage: cargo xtask gpu-check [--python PATH] [--seconds N]"),
        }
    }
    let Some(gpu) = gpu_present() else {
        println!("gpu-check: skipped: no NVIDIA GPU here (no /dev/nvidiactl): nothing to check");
        return Ok(());
    };
    crate::setup(false)?;
    sh("cargo", &["build", "--release", "-p", "sonic-probe"], &[])?;
    if !is_root() {
        bail!("sonic-probe loads BPF programs: run `cargo xtask gpu-check` as root");
    }
    println!("gpu-check: {gpu}");
    let bin = root().join("target/release/sonic-probe");
    // A window half the loop's: the finding holds for its second half.
    let window = format!("{}s", seconds / 2);
    let mut daemon =
        Daemon::start(&bin, &["--comm", COMM, "--gpu-wait-window", &window, "--gpu-wait-share", "0.8"])?;
    let outcome = check(&daemon, &python, seconds);
    daemon.stop();
    let lines = outcome?;
    let mut failed = false;
    for (ok, line) in &lines {
        println!("  {} {line}", if *ok { "ok  " } else { "FAIL" });
        failed |= !ok;
    }
    if failed {
        bail!("gpu-check failed");
    }
    println!("gpu-check: pass");
    Ok(())
}

fn check(daemon: &Daemon, python: &str, seconds: u64) -> Result<Vec<(bool, String)>> {
    let script = root().join(SCRIPT);
    let mut child = Command::new(python)
        .arg(&script)
        .arg(seconds.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {python}"))?;
    let result = drive(daemon, &mut child, seconds);
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn drive(daemon: &Daemon, child: &mut Child, seconds: u64) -> Result<Vec<(bool, String)>> {
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut stdin = child.stdin.take().expect("piped");
    let mut line = String::new();
    out.read_line(&mut line)?;
    if let Some(why) = line.trim().strip_prefix("unusable: ") {
        bail!("gpu-check: the loop cannot use the GPU: {why} (--python names the interpreter with PyTorch)");
    }
    let Some(what) = line.trim().strip_prefix("loaded ") else { bail!("the loop did not start: {line:?}") };
    println!("gpu-check: torch and device: {what}");
    // Its CUDA libraries are mapped: wait for the daemon's uprobes on them
    // (the runtime library and the driver's), then for a quiet second.
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&daemon.get("/metrics")?, "sonic_probe_gpu_libraries_total", &[("result", "attached")]) < 2.0
    {
        if Instant::now() > deadline {
            bail!("the daemon did not attach to the loop's CUDA libraries (libcudart, libcuda) within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = daemon.get("/metrics")?;
    stdin.write_all(b"g")?;
    stdin.flush()?;
    line.clear();
    out.read_line(&mut line)?;
    if line.trim() != "done" {
        bail!("the loop did not finish: {line:?}");
    }
    let after = daemon.get("/metrics")?;
    line.clear();
    out.read_line(&mut line)?;
    let profiled: serde_json::Value = serde_json::from_str(line.trim()).context("the profiler's counts")?;
    let findings: serde_json::Value = serde_json::from_str(&daemon.get("/findings")?).context("/findings")?;
    let _ = stdin.write_all(b"g");
    let calls: BTreeMap<String, u64> = profiled["calls"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    println!("gpu-check: {} steps in {seconds} s", profiled["steps"]);
    let script = std::fs::read_to_string(root().join(SCRIPT))?;
    Ok(judge(&before, &after, &calls, &findings, marked_line(&script)))
}

/// The line of `script` marked `sp-sync-line` (1-based).
fn marked_line(script: &str) -> u64 {
    script.lines().position(|l| l.ends_with("# sp-sync-line")).map_or(0, |i| i as u64 + 1)
}

/// The three checks: (passed, what it says).
fn judge(
    before: &str,
    after: &str,
    profiled: &BTreeMap<String, u64>,
    findings: &serde_json::Value,
    line: u64,
) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let count = |body: &str, api: &str| {
        metric(body, "sonic_probe_gpu_wait_duration_seconds_count", &[("comm", COMM), ("api", api)])
    };
    let ours = |api: &str| (count(after, api) - count(before, api)).round() as u64;
    let syncs = profiled.get("cudaStreamSynchronize").copied().unwrap_or(0);
    out.push((
        syncs > 0 && ours("cudaStreamSynchronize") == syncs,
        format!(
            "cudaStreamSynchronize: the profiler saw {syncs}, sonic-probe counted {}",
            ours("cudaStreamSynchronize")
        ),
    ));
    let in_table = |api: &str| sonic_probe_common::gpu_apis::GPU_APIS.iter().any(|a| a.name == api);
    let others: Vec<String> = profiled
        .iter()
        .filter(|(api, _)| *api != "cudaStreamSynchronize" && in_table(api))
        .map(|(api, n)| format!("{api} {n}/{}", ours(api)))
        .collect();
    if !others.is_empty() {
        out.push((
            true,
            format!("other waiting calls (profiler/sonic-probe, not judged): {}", others.join(", ")),
        ));
    }
    let state = |body: &str, s: &str| {
        metric(body, "sonic_probe_thread_seconds_total", &[("comm", COMM), ("thread", COMM), ("state", s)])
    };
    let states = ["on_cpu", "runqueue", "futex", "file", "socket", "pipe", "gpu", "poll", "sleep", "other"];
    let total: f64 = states.iter().map(|s| state(after, s) - state(before, s)).sum();
    let gpu = state(after, "gpu") - state(before, "gpu");
    let share = if total > 0.0 { gpu / total } else { 0.0 };
    out.push((
        share >= MIN_GPU_SHARE,
        format!(
            "the request thread's time in state gpu: {gpu:.2} s of {total:.2} s ({:.0}%, at least {:.0}%)",
            share * 100.0,
            MIN_GPU_SHARE * 100.0
        ),
    ));
    let finding =
        findings.as_array().and_then(|f| f.iter().find(|f| f["kind"] == "gpu_wait" && f["comm"] == COMM));
    let frame =
        finding.and_then(|f| f["stack"].as_array()).and_then(|s| s.iter().find(|fr| fr["kind"] == "python"));
    let said = match (finding, frame) {
        (None, _) => "no gpu_wait finding".to_string(),
        (Some(_), None) => "a gpu_wait finding without a Python frame".to_string(),
        (Some(_), Some(fr)) => {
            format!("gpu_wait finding at {}() line {}", fr["function"].as_str().unwrap_or("?"), fr["line"])
        }
    };
    let at_line = frame.is_some_and(|fr| fr["function"] == "step" && fr["line"].as_u64() == Some(line));
    out.push((at_line, format!("{said} (the loop's .item() is step() line {line})")));
    out
}

/// The sum of the samples of `name` whose labels include `labels`, in a
/// Prometheus text exposition.
fn metric(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            if n != name {
                return None;
            }
            let have = rest.trim_end_matches('}');
            let all = labels.iter().all(|(k, v)| have.split(',').any(|p| p == format!("{k}=\"{v}\"")));
            all.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// The daemon under check, serving on a port of its choosing.
struct Daemon {
    child: Child,
    addr: String,
}

impl Daemon {
    fn start(bin: &Path, args: &[&str]) -> Result<Daemon> {
        let mut child = Command::new(bin)
            .args(["run", "--listen", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start sonic-probe")?;
        let log = BufReader::new(child.stderr.take().expect("piped"));
        let mut lines = log.lines();
        let mut addr = None;
        for line in lines.by_ref() {
            let line = line?;
            if let Some(rest) = line.split("serving http://").nth(1) {
                addr = rest.split('/').next().map(str::to_string);
                break;
            }
        }
        // The rest of its log goes on to our stderr.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("   {l}")));
        let mut d = Daemon { child, addr: String::new() };
        match addr {
            Some(a) => {
                d.addr = a;
                Ok(d)
            }
            None => {
                d.stop();
                bail!("sonic-probe did not get ready")
            }
        }
    }

    fn get(&self, path: &str) -> Result<String> {
        let mut s = std::net::TcpStream::connect(&self.addr)?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body.split_once("\r\n\r\n").map_or(body.clone(), |(_, b)| b.to_string()))
    }

    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# HELP x
sonic_probe_gpu_wait_duration_seconds_count{api=\"cudaStreamSynchronize\",comm=\"sp-gpu-check\",workload=\"\"} 3
sonic_probe_thread_seconds_total{comm=\"sp-gpu-check\",state=\"gpu\",thread=\"sp-gpu-check\",workload=\"\"} 1
sonic_probe_thread_seconds_total{comm=\"sp-gpu-check\",state=\"on_cpu\",thread=\"sp-gpu-check\",workload=\"\"} 1
sonic_probe_thread_seconds_total{comm=\"other\",state=\"gpu\",thread=\"other\",workload=\"\"} 100
";

    fn after(syncs: u64, gpu: f64) -> String {
        format!(
            "sonic_probe_gpu_wait_duration_seconds_count{{api=\"cudaStreamSynchronize\",comm=\"sp-gpu-check\",workload=\"\"}} {}\n\
             sonic_probe_gpu_wait_duration_seconds_count{{api=\"cudaMemcpy\",comm=\"sp-gpu-check\",workload=\"\"}} 2\n\
             sonic_probe_thread_seconds_total{{comm=\"sp-gpu-check\",state=\"gpu\",thread=\"sp-gpu-check\",workload=\"\"}} {}\n\
             sonic_probe_thread_seconds_total{{comm=\"sp-gpu-check\",state=\"on_cpu\",thread=\"sp-gpu-check\",workload=\"\"}} 2\n",
            3 + syncs,
            1.0 + gpu
        )
    }

    fn finding(function: &str, line: u64) -> serde_json::Value {
        serde_json::json!([{"kind": "gpu_wait", "comm": COMM, "stack": [
            {"kind": "python", "function": function, "line": line},
        ]}])
    }

    #[test]
    fn metrics_are_summed_over_the_labels_asked_for() {
        assert_eq!(metric(BEFORE, "sonic_probe_thread_seconds_total", &[("state", "gpu")]), 101.0);
        assert_eq!(metric(BEFORE, "sonic_probe_thread_seconds_total", &[("comm", COMM)]), 2.0);
        assert_eq!(metric(BEFORE, "sonic_probe_thread_seconds", &[]), 0.0);
    }

    #[test]
    fn it_passes_on_exact_counts_a_gpu_bound_thread_and_the_line() {
        let calls: BTreeMap<String, u64> = [
            ("cudaStreamSynchronize".to_string(), 500),
            ("cudaMemcpy".into(), 2),
            ("cudaLaunchKernel".into(), 2000),
        ]
        .into();
        let v = judge(BEFORE, &after(500, 9.0), &calls, &finding("step", 33), 33);
        assert!(v.iter().all(|(ok, _)| *ok), "{v:?}");
        assert_eq!(v[1].1, "other waiting calls (profiler/sonic-probe, not judged): cudaMemcpy 2/2");
        assert!(
            v[2].1.starts_with("the request thread's time in state gpu: 9.00 s of 10.00 s (90%"),
            "{v:?}"
        );
        // A count off by one, a share below 80 %, another line: each fails alone.
        let v = judge(BEFORE, &after(499, 9.0), &calls, &finding("step", 33), 33);
        assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), [false, true, true, true]);
        let v = judge(BEFORE, &after(500, 3.0), &calls, &finding("step", 33), 33);
        assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), [true, true, false, true]);
        let v = judge(BEFORE, &after(500, 9.0), &calls, &finding("main", 50), 33);
        assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), [true, true, true, false]);
        let v = judge(BEFORE, &after(500, 9.0), &calls, &serde_json::json!([]), 33);
        assert!(v[3].1.starts_with("no gpu_wait finding"), "{v:?}");
        // No synchronize seen by the profiler is no pass.
        let v = judge(BEFORE, &after(0, 9.0), &BTreeMap::new(), &finding("step", 33), 33);
        assert!(!v[0].0, "{v:?}");
    }

    #[test]
    fn the_scripts_marked_line_is_found() {
        let script = std::fs::read_to_string(root().join(SCRIPT)).unwrap();
        let line = marked_line(&script);
        assert!(script.lines().nth(line as usize - 1).unwrap().contains(".item()"));
    }
}
