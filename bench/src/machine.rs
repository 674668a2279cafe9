//! The machine's facts at the top of the report: why the same programs
//! cost more on one machine than on another (CPU, Spectre mitigations,
//! clock source, BPF JIT), so that a report is read with its machine.

use std::{fmt::Write as _, process::Command};

/// The machine's facts that explain why the same programs cost more on one
/// machine than on another: CPU, the kernel's Spectre/return-thunk
/// mitigations (retpolines make every indirect call dear, return thunks
/// every return), the clock source bpf_ktime_get_ns reads, the BPF JIT.
pub(crate) fn machine_facts() -> String {
    let read =
        |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into());
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|x| x.1.trim().to_string()))
        .unwrap_or_else(|| "?".into());
    let hypervisor =
        cpuinfo.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    let uname = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let mut out = String::from("## Machine\n\n| fact | value |\n|---|---|\n");
    let _ = writeln!(out, "| kernel | {uname} |");
    let _ = writeln!(
        out,
        "| CPU | {model}, {} CPUs{} |",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        if hypervisor { ", virtual machine" } else { "" }
    );
    let _ = writeln!(
        out,
        "| clock source | {} (available: {}) |",
        read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        read("/sys/devices/system/clocksource/clocksource0/available_clocksource")
    );
    let _ = writeln!(
        out,
        "| BPF JIT | bpf_jit_enable={}, bpf_jit_harden={} |",
        read("/proc/sys/net/core/bpf_jit_enable"),
        read("/proc/sys/net/core/bpf_jit_harden")
    );
    let _ = writeln!(
        out,
        "| kernel.bpf_stats_enabled (sysctl, before the run) | {} |",
        read("/proc/sys/kernel/bpf_stats_enabled")
    );
    // Every vulnerability the kernel reports, the ones on the traced path
    // first; those it is not affected by in one line.
    let dir = "/sys/devices/system/cpu/vulnerabilities";
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort_by_key(|n| {
        (!matches!(n.as_str(), "spectre_v2" | "retbleed" | "spec_rstack_overflow" | "spectre_v1"), n.clone())
    });
    let mut unaffected = Vec::new();
    for n in names {
        let v = read(&format!("{dir}/{n}"));
        if v == "Not affected" {
            unaffected.push(n);
        } else {
            let _ = writeln!(out, "| {n} | {v} |");
        }
    }
    if !unaffected.is_empty() {
        let _ = writeln!(out, "| not affected | {} |", unaffected.join(", "));
    }
    out
}
