//! The kernel-dependent variants of the BPF programs (sonic-probe-ebpf's
//! bpf/variant.h): the one picked follows what the kernel accepts, not its
//! version, and each fallback, forced on this kernel with
//! SONIC_PROBE_FALLBACK, keeps every promise: exact counts and the waker
//! of a futex stall. (`cargo xtask test` also runs the core, diagnoses,
//! trace, reliability and cli tests with every fallback forced, and
//! `cargo xtask vmtest` runs them on kernels that lack the features.)

use std::process::Command;

use sonic_probe_tests::{
    kernel_line, privileged, sonic_probe_bin, unique_name, unknown_kernel, workload::exact, Daemon, Metrics,
    Workload,
};

/// (piece, fast variant, fallback variant), as exported by
/// sonic_probe_bpf_variant.
const PIECES: [(&str, &str, &str); 3] = [
    ("task_access", "btf_pointer", "core_read"),
    ("entry_state", "task_storage", "thread_map"),
    ("futex_waker", "percpu_rings", "wake_map"),
];

fn variant(m: &Metrics, piece: &str) -> String {
    let labels = [("piece", piece)];
    let series: Vec<_> = m.matching("sonic_probe_bpf_variant", &labels).collect();
    assert_eq!(series.len(), 1, "{piece}: {series:?}");
    assert_eq!(series[0].value, 1.0);
    series[0].labels["variant"].clone()
}

fn feature(m: &Metrics, name: &str) -> bool {
    match m.get("sonic_probe_kernel_feature", &[("feature", name)]) {
        Some(1.0) => true,
        Some(0.0) => false,
        other => panic!("sonic_probe_kernel_feature{{feature={name:?}}} = {other:?}"),
    }
}

/// Every feature the daemon probes (sonic_probe_kernel_feature{feature}).
const FEATURES: [&str; 7] = [
    "btf_tracepoint",
    "ringbuf",
    "task_btf",
    "ancestor_cgroup_id",
    "task_storage",
    "bpf_loop",
    "percpu_lookup",
];

/// What each kernel line CI runs on lacks and which variants it gets,
/// written down from the kernels' history (sonic-probe-ebpf's Feature docs,
/// the README's kernel table), never from the probe under test: task_btf
/// and task storage for tracing came in 5.11, bpf_loop in 5.17,
/// bpf_map_lookup_percpu_elem in 5.19, and 5.10 has no
/// bpf_get_current_ancestor_cgroup_id for tracing programs.
const KERNELS: [(&str, &[&str], [&str; 3]); 4] = [
    (
        "5.10",
        &["task_btf", "ancestor_cgroup_id", "task_storage", "bpf_loop", "percpu_lookup"],
        ["core_read", "thread_map", "wake_map"],
    ),
    ("6.1", &[], ["btf_pointer", "task_storage", "percpu_rings"]),
    ("6.12", &[], ["btf_pointer", "task_storage", "percpu_rings"]),
    ("6.18", &[], ["btf_pointer", "task_storage", "percpu_rings"]),
];

#[test]
fn the_variant_in_use_follows_the_kernels_features() {
    let test = "the_variant_in_use_follows_the_kernels_features";
    if !privileged(test) {
        return;
    }
    let line = kernel_line();
    let Some(&(_, lacks, variants)) = KERNELS.iter().find(|k| k.0 == line) else {
        return unknown_kernel(test, &line);
    };
    let w = Workload::start(None, &["idle"]);
    let d = Daemon::start(&["--pid", &w.pid().to_string()]);
    let m = d.metrics();
    let found: Vec<_> = FEATURES.iter().map(|f| (*f, feature(&m, f))).collect();
    let want: Vec<_> = FEATURES.iter().map(|f| (*f, !lacks.contains(f))).collect();
    assert_eq!(found, want, "kernel {line}: sonic_probe_kernel_feature");
    // SONIC_PROBE_FALLBACK (CI runs the tests again with `all`) forces a
    // fallback whatever the kernel has; entry_state's fast variant needs
    // task_access's.
    let forced = std::env::var("SONIC_PROBE_FALLBACK").unwrap_or_default();
    let forced = |piece: &str| forced.split(',').any(|p| p.trim() == piece || p.trim() == "all");
    for (i, (piece, _, fallback)) in PIECES.iter().enumerate() {
        let forced = forced(piece) || (*piece == "entry_state" && forced("task_access"));
        let want = if forced { fallback } else { variants[i] };
        assert_eq!(variant(&m, piece), *want, "kernel {line}: {piece}");
    }
    assert!(w.go().success());
    assert!(d.stop().success());
}

#[test]
fn each_fallback_alone_counts_exactly_and_names_the_waker() {
    if !privileged("each_fallback_alone_counts_exactly_and_names_the_waker") {
        return;
    }
    // Where the kernel's own variant of a piece is its fallback (every
    // piece on 5.10), forcing it runs what every other test there runs
    // already: core's exact counts and diagnoses' wakers.
    let line = kernel_line();
    let natural = KERNELS.iter().find(|k| k.0 == line).map(|k| k.2);
    for (i, (piece, _, fallback)) in PIECES.into_iter().enumerate() {
        if natural.is_some_and(|v| v[i] == fallback) {
            eprintln!("{piece}: kernel {line} runs the fallback {fallback} unforced; not forced again");
            continue;
        }
        let env = [("SONIC_PROBE_FALLBACK", piece)];

        let name = unique_name("spf");
        let w = Workload::start(Some(&name), &["exact"]);
        let d = Daemon::start_with(&["--pid", &w.pid().to_string()], &env);
        let m = d.metrics();
        assert_eq!(variant(&m, piece), fallback);
        assert!(w.go().success());
        let m = d.metrics();
        exact::assert_counts(&m, &name);
        for s in m.matching("sonic_probe_events_dropped_total", &[]) {
            assert_eq!(s.value, 0.0, "{piece}: {:?}", s.labels);
        }
        assert!(d.stop().success());

        // A 400 ms wait on a lock another thread ("holder") releases.
        let comm = unique_name("spw");
        let w = Workload::start(Some(&comm), &["stall", "wait", "400"]);
        let d = Daemon::start_with(&["--pid", &w.pid().to_string(), "--stall-threshold", "300ms"], &env);
        assert!(w.go().success());
        let f = d.findings_when(|f| !f.is_empty());
        let stalls: Vec<_> = f.iter().filter(|f| f["kind"] == "futex_stall").collect();
        assert_eq!(stalls.len(), 1, "{piece}: {f:#?}");
        assert_eq!(stalls[0]["waker_thread"], "holder", "{piece}: {:#}", stalls[0]);
        assert!(stalls[0]["waker_tid"].as_u64().unwrap_or(0) > 0, "{piece}: {:#}", stalls[0]);
        assert!(d.stop().success());
    }
}

#[test]
fn a_kernel_that_reports_version_2_6_is_judged_by_its_features() {
    if !privileged("a_kernel_that_reports_version_2_6_is_judged_by_its_features") {
        return;
    }
    // The UNAME26 personality: uname says 2.6.x. No version is compared,
    // so this kernel's features still load and attach.
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/config.toml");
    let o = Command::new("setarch")
        .args(["x86_64", "--uname-2.6"])
        .arg(sonic_probe_bin())
        .args(["check-config", "--attach", "--config", config])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("kernel BPF features: has btf_tracepoint ringbuf"), "{out}");
    assert!(out.contains("programs: task_access="), "{out}");
    assert!(out.contains("attached 9 BPF programs and detached them: OK"), "{out}");
}
