//! The `workload` label on real cgroups: directories named exactly like
//! systemd's units and like the kubelet's pods and containers (containerd
//! and cri-o, systemd and cgroupfs drivers), a containers-log directory of
//! links named like the kubelet's, real workload processes moved into them,
//! and exact counts per workload. There is no Kubernetes or systemd here;
//! the layouts are what sonic-probe reads, so they are what is built.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
};

use sonic_probe_tests::{privileged, unique_name, workload_bin, Daemon, Metrics, RemoveCgroups, Workload};

/// A 64-hex container id unique to this run.
fn container_id(n: u32) -> String {
    format!("{:08x}{:056x}", std::process::id(), u64::from(n) * 0x9e37_79b9)
}

/// A pod UID (dashes; the systemd driver writes them with underscores).
fn pod_uid(n: u32) -> String {
    format!("{:08x}-4b1d-4e5a-9c3f-{:012x}", std::process::id(), n)
}

/// Starts sp-workload inside `cgroup` (moved there between fork and exec).
fn start_in(cgroup: &Path, comm: &str, args: &[&str]) -> Workload {
    let mut cmd = Command::new(workload_bin());
    let procs = cgroup.join("cgroup.procs");
    // SAFETY: pre_exec runs in the child between fork and exec; it only
    // writes to a file.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, "0"));
    }
    Workload::start_command(cmd, Some(comm), args)
}

/// Device and pipe reads of `comm` in `workload`: sp-workload's /dev/zero
/// reads and its go read (not the loader's file reads).
fn reads(m: &Metrics, comm: &str, workload: &str) -> u64 {
    m.sum(
        "sonic_probe_read_size_bytes_count",
        &[("comm", comm), ("workload", workload), ("file_class", "not_file")],
    ) as u64
}

/// Test cgroups under one parent at the cgroup2 root, removed at the end
/// (deepest first), and a containers-log directory.
struct Layout {
    parent: PathBuf,
    logs: PathBuf,
    made: Vec<PathBuf>,
}

impl Layout {
    fn new(tag: &str) -> Layout {
        let mount = sonic_probe_tests::cgroup2_mount().expect("no cgroup2 mount: workloads need cgroup v2");
        let parent = mount.join(unique_name(tag));
        std::fs::create_dir_all(&parent).expect("create the test cgroup");
        let logs = std::env::temp_dir()
            .join(format!("sp-containers-{}", parent.file_name().unwrap().to_str().unwrap()));
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        Layout { made: vec![parent.clone()], parent, logs }
    }

    /// Creates `rel` (and its parents) under the test parent.
    fn cgroup(&mut self, rel: &str) -> PathBuf {
        let mut p = self.parent.clone();
        for part in rel.split('/') {
            p = p.join(part);
            if !p.exists() {
                std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
                self.made.push(p.clone());
            }
        }
        p
    }

    /// Publishes a container's names the way the kubelet does: a link named
    /// <pod>_<namespace>_<container>-<id>.log into /var/log/pods.
    fn publish(&self, pod: &str, namespace: &str, container: &str, id: &str) {
        let target = format!("/var/log/pods/{namespace}_{pod}_uid/{container}/0.log");
        std::os::unix::fs::symlink(target, self.logs.join(format!("{pod}_{namespace}_{container}-{id}.log")))
            .unwrap();
    }

    fn daemon(&self, extra: &[&str]) -> Daemon {
        let mut args = vec![
            "--cgroup",
            self.parent.to_str().unwrap(),
            "--containers-log-dir",
            self.logs.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Daemon::start(&args)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.logs);
        drop(RemoveCgroups(self.made.iter().rev().cloned().collect()));
    }
}

#[test]
fn units_pods_and_containers_are_named_with_exact_counts() {
    if !privileged("units_pods_and_containers_are_named_with_exact_counts") {
        return;
    }
    let mut l = Layout::new("spwl");
    let comm = unique_name("spw");
    let d = l.daemon(&["--stall-threshold", "200ms"]);

    // A cgroup that is gone before any scrape could name it: "unresolved".
    let gone = l.cgroup("system.slice/gone.service");
    assert!(start_in(&gone, &comm, &["spawn", "1", "0", "2"]).go().success());
    std::fs::remove_dir(&gone).expect("remove the finished cgroup");
    l.made.retain(|p| p != &gone);
    let m = d.metrics();
    assert_eq!(reads(&m, &comm, "unresolved"), 2 + 1, "{}", m.text);
    assert_eq!(
        m.get("sonic_probe_workload_info", &[("workload", "unresolved"), ("kind", "unresolved")]),
        Some(1.0)
    );

    // Everything below appears after that scrape (the daemon has read the
    // containers-log directory once already): pods started later are named.
    let parent_name = l.parent.file_name().unwrap().to_str().unwrap().to_string();
    let (u1, u2, u3, u4) = (pod_uid(1), pod_uid(2), pod_uid(3), pod_uid(4));
    let (c1, c2, c3, c4, c5) =
        (container_id(1), container_id(2), container_id(3), container_id(4), container_id(5));
    let under_score = |u: &str| u.replace('-', "_");
    let cases: Vec<(String, String, u64)> = vec![
        ("system.slice/inference.service".into(), "inference.service".into(), 3),
        (
            format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{c1}.scope",
                under_score(&u1)
            ),
            "ml/triton-0/server".into(),
            4,
        ),
        (format!("kubepods/besteffort/pod{u2}/{c2}"), "speech/asr-7f9/worker".into(), 5),
        (format!("kubepods.slice/kubepods-pod{}.slice/crio-{c3}.scope", under_score(&u3)), "speech/tts-1/synth".into(), 6),
        (format!("kubepods/burstable/pod{u4}/crio-{c4}"), "speech/vad-2/vad".into(), 7),
        // Not published (a pause container, say): named by pod and id.
        (format!("kubepods/burstable/pod{u4}/{c5}"), format!("pod-{u4}/{}", &c5[..12]), 8),
        ("batch/job7".into(), format!("/{parent_name}/batch/job7"), 9),
    ];
    l.publish("triton-0", "ml", "server", &c1);
    l.publish("asr-7f9", "speech", "worker", &c2);
    l.publish("tts-1", "speech", "synth", &c3);
    l.publish("vad-2", "speech", "vad", &c4);
    for (rel, _, n) in &cases {
        let cg = l.cgroup(rel);
        assert!(start_in(&cg, &comm, &["spawn", "1", "0", &n.to_string()]).go().success(), "{rel}");
    }
    // A process that moves: reads in one unit, is moved to another while
    // blocked in its second go read, and reads on. Each call counts where
    // it ended, also the reads after the move, whose process name and
    // syscall the thread's statistics slot cache already holds (from its
    // reads before): the cache must see the cgroup changed.
    let (from, to) = (l.cgroup("system.slice/mover-a.service"), l.cgroup("system.slice/mover-b.service"));
    let mut mover = start_in(&from, &comm, &["move", "10", "20"]);
    mover.go_to_pause();
    std::fs::write(to.join("cgroup.procs"), mover.pid().to_string()).unwrap();
    assert!(mover.go().success());
    // A stall inside the containerd pod: its finding names the pod.
    let stall = start_in(&l.cgroup(&cases[1].0), &comm, &["stall", "wait", "400"]);
    assert!(stall.go().success());
    d.findings_when(|f| f.iter().any(|f| f["kind"] == "futex_stall"));

    let m = d.metrics();
    for (i, (rel, name, n)) in cases.iter().enumerate() {
        // The stall workload's go read was in the containerd pod too.
        let stall_read = u64::from(i == 1);
        assert_eq!(reads(&m, &comm, name), n + 1 + stall_read, "{rel} as {name}:\n{}", m.text);
    }
    // Before the move: the first go read and 10 reads; after: the second go
    // read (it ended there) and 20 reads.
    assert_eq!(reads(&m, &comm, "mover-a.service"), 1 + 10, "{}", m.text);
    assert_eq!(reads(&m, &comm, "mover-b.service"), 1 + 20, "{}", m.text);
    // Exactly these, and nothing under another workload.
    let total: u64 = cases.iter().map(|c| c.2 + 1).sum::<u64>() + 3 + 11 + 21;
    assert_eq!(
        m.sum("sonic_probe_read_size_bytes_count", &[("comm", &comm), ("file_class", "not_file")]) as u64,
        total + 1, // the stall workload's go read
    );

    // The info metric: what each value stands for.
    let info = |w: &str, k: &[(&str, &str)]| {
        let mut labels = vec![("workload", w)];
        labels.extend_from_slice(k);
        m.get("sonic_probe_workload_info", &labels)
    };
    assert_eq!(info("inference.service", &[("kind", "systemd"), ("unit", "inference.service")]), Some(1.0));
    assert_eq!(
        info(
            "ml/triton-0/server",
            &[
                ("kind", "kubernetes"),
                ("namespace", "ml"),
                ("pod", "triton-0"),
                ("container", "server"),
                ("container_id", &c1)
            ]
        ),
        Some(1.0),
        "{}",
        m.text
    );
    assert_eq!(info("speech/vad-2/vad", &[("kind", "kubernetes"), ("container_id", &c4)]), Some(1.0));
    assert_eq!(info(&format!("/{parent_name}/batch/job7"), &[("kind", "cgroup")]), Some(1.0));
    assert_eq!(m.get("sonic_probe_workload_resolutions_total", &[("result", "unresolved")]), Some(1.0));
    assert!(m.get("sonic_probe_workload_labels", &[]).unwrap() >= 9.0);

    // Findings carry the workload and its names; so does the stall counter.
    let findings = d.findings();
    let f = findings
        .iter()
        .find(|f| f["kind"] == "futex_stall" && f["comm"] == comm.as_str())
        .expect("the stall finding");
    assert_eq!(f["workload"]["name"], "ml/triton-0/server", "{f}");
    assert_eq!(f["workload"]["namespace"], "ml");
    assert_eq!(f["workload"]["pod"], "triton-0");
    assert_eq!(f["workload"]["container_id"], c1.as_str());
    assert_eq!(
        m.sum("sonic_probe_futex_stalls_total", &[("comm", &comm), ("workload", "ml/triton-0/server")]),
        1.0,
        "{}",
        m.text
    );
    let table = Command::new(sonic_probe_tests::sonic_probe_bin())
        .args(["findings", "--url", &format!("http://{}", d.addr)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap_or("").contains("WORKLOAD"), "{text}");
    assert!(text.contains("ml/triton-0/server"), "{text}");

    assert!(d.stop().success());
}

#[test]
fn workload_metrics_pass_promtool_check() {
    if !privileged("workload_metrics_pass_promtool_check") {
        return;
    }
    let mut l = Layout::new("spwp");
    let comm = unique_name("spp");
    let d = l.daemon(&[]);
    let id = container_id(9);
    l.publish("triton-0", "ml", "server", &id);
    let pod = l.cgroup(&format!("kubepods/burstable/pod{}/{id}", pod_uid(9)));
    let unit = l.cgroup("system.slice/inference.service");
    for cg in [&pod, &unit] {
        assert!(start_in(cg, &comm, &["spawn", "1", "0", "2"]).go().success());
    }
    let m = d.metrics();
    assert_eq!(reads(&m, &comm, "ml/triton-0/server"), 3, "{}", m.text);
    sonic_probe_tests::assert_promtool_accepts(&m.text);
    assert!(d.stop().success());
}

#[test]
fn workloads_beyond_the_limit_are_other_and_none_turns_them_off() {
    if !privileged("workloads_beyond_the_limit_are_other_and_none_turns_them_off") {
        return;
    }
    let mut l = Layout::new("spwm");
    let comm = unique_name("spm");
    let d = l.daemon(&["--max-workloads", "2"]);
    for (i, unit) in ["a.service", "b.service", "c.service", "d.service"].iter().enumerate() {
        let cg = l.cgroup(&format!("system.slice/{unit}"));
        assert!(start_in(&cg, &comm, &["spawn", "1", "0", &(i + 1).to_string()]).go().success());
        // One scrape per unit: the order of first sight is the order here.
        d.metrics();
    }
    let m = d.metrics();
    assert_eq!(reads(&m, &comm, "a.service"), 2);
    assert_eq!(reads(&m, &comm, "b.service"), 3);
    assert_eq!(reads(&m, &comm, "other"), 4 + 5, "{}", m.text);
    assert_eq!(m.get("sonic_probe_workload_labels", &[]), Some(2.0));
    assert!(d.stop().success());

    let d = l.daemon(&["--workload-from", "none"]);
    let cg = l.cgroup("system.slice/e.service");
    assert!(start_in(&cg, &comm, &["spawn", "1", "0", "3"]).go().success());
    let m = d.metrics();
    assert_eq!(reads(&m, &comm, ""), 4, "{}", m.text);
    assert_eq!(m.get("sonic_probe_workload_info", &[("workload", ""), ("kind", "host")]), Some(1.0));
    assert!(d.stop().success());
}
