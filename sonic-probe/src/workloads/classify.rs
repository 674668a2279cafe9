//! Names the service a cgroup belongs to from its cgroup v2 path.
//!
//! Kubernetes (either cgroup driver, any runtime, possibly nested inside
//! another container as kind does), standalone Docker and systemd each lay
//! out cgroups their own way; this module recognises those layouts and
//! otherwise falls back to the path itself, so every cgroup gets a name.
//! Sub-cgroups inside a container or unit belong to it.

use super::{docker::DockerNames, is_container_id, pods::PodNames, short_id};

/// What kind of thing a cgroup was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The root cgroup: processes not placed anywhere.
    Host,
    /// A systemd service or scope outside any container.
    Systemd,
    /// A Kubernetes pod or one of its containers.
    Kubernetes,
    /// A Docker container not run by Kubernetes.
    Docker,
    /// Any other cgroup (a slice alone, a hand-made group).
    Cgroup,
    /// The cgroup was gone before it could be named.
    Unresolved,
    /// Workloads beyond --max-workloads, and calls counted while a kernel
    /// map was full (the `other` label value).
    Other,
}

impl Kind {
    /// The kind as a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Systemd => "systemd",
            Kind::Kubernetes => "kubernetes",
            Kind::Docker => "docker",
            Kind::Cgroup => "cgroup",
            Kind::Unresolved => "unresolved",
            Kind::Other => "other",
        }
    }
}

/// The service a cgroup belongs to, and what is known about it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    /// The `workload` label value.
    pub name: String,
    pub kind: Kind,
    /// The systemd unit (service or scope) the cgroup is in; "" if none.
    pub unit: String,
    /// Kubernetes names, when the node published them; "" otherwise.
    pub namespace: String,
    pub pod: String,
    /// Container name (Kubernetes or Docker); "" if unknown.
    pub container: String,
    /// The full container id as written in the cgroup path; "" if none.
    pub container_id: String,
}

impl Workload {
    fn named(name: impl Into<String>, kind: Kind) -> Self {
        Workload {
            name: name.into(),
            kind,
            unit: String::new(),
            namespace: String::new(),
            pod: String::new(),
            container: String::new(),
            container_id: String::new(),
        }
    }

    /// The root cgroup: name "", kind Host.
    pub fn host() -> Self {
        Self::named("", Kind::Host)
    }

    /// A cgroup that was gone before it was named.
    pub fn unresolved() -> Self {
        Self::named("unresolved", Kind::Unresolved)
    }
}

/// The workload of the cgroup at `path`, relative to the cgroup2 mount and
/// starting with "/" ("/" is the root). Never fails: an unrecognised path
/// names itself.
pub fn classify(path: &str, pods: &mut PodNames, docker: &mut DockerNames) -> Workload {
    let elements: Vec<&str> = path.split('/').filter(|e| !e.is_empty()).collect();
    if elements.is_empty() {
        return Workload::host();
    }
    if let Some(workload) = kubernetes(&elements, pods) {
        return workload;
    }
    if let Some(workload) = standalone_docker(&elements, docker) {
        return workload;
    }
    if let Some(unit) = elements.iter().rev().find(|e| is_unit(e)) {
        let mut workload = Workload::named(*unit, Kind::Systemd);
        workload.unit = unit.to_string();
        return workload;
    }
    Workload::named(path, Kind::Cgroup)
}

/// A systemd service or scope (not a slice) with a non-empty name.
fn is_unit(element: &str) -> bool {
    [".service", ".scope"].iter().any(|suffix| element.strip_suffix(suffix).is_some_and(|n| !n.is_empty()))
}

/// The element under which kubelet puts pods: `kubepods` (cgroupfs driver),
/// `kubepods.slice` (systemd driver), or a nested `<parent>-kubepods.slice`
/// (e.g. kind's `kubelet-kubepods.slice`).
fn is_kubepods(element: &str) -> bool {
    let stem = element.strip_suffix(".slice").unwrap_or(element);
    stem == "kubepods" || stem.ends_with("-kubepods")
}

/// The pod UID of a pod element, `-` restored: `pod<UID>` (cgroupfs) or
/// `<prefix>-pod<UID with _ for ->.slice` (systemd).
fn pod_uid(element: &str) -> Option<String> {
    let uid = match element.strip_suffix(".slice") {
        Some(stem) => stem.rsplit('-').next()?.strip_prefix("pod")?,
        None => element.strip_prefix("pod")?,
    };
    let valid = uid.bytes().any(|b| b.is_ascii_hexdigit())
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    valid.then(|| uid.replace('_', "-"))
}

/// What a pod's child cgroup holds.
enum PodChild<'a> {
    /// A container, by id.
    Container(&'a str),
    /// Not a container of the pod (cri-o's conmon, anything unrecognised):
    /// counted at pod level.
    PodLevel,
}

/// Parses a pod's child element: `cri-containerd-<ID>.scope`,
/// `crio-<ID>.scope`, `docker-<ID>.scope` (systemd driver) or `<ID>`,
/// `crio-<ID>` (cgroupfs driver). `crio-conmon-<ID>` is conmon.
fn pod_child(element: &str) -> PodChild<'_> {
    let stem = element.strip_suffix(".scope").unwrap_or(element);
    if stem.starts_with("crio-conmon-") {
        return PodChild::PodLevel;
    }
    let id =
        ["cri-containerd-", "crio-", "docker-"].iter().find_map(|p| stem.strip_prefix(p)).unwrap_or(stem);
    if is_container_id(id) {
        PodChild::Container(id)
    } else {
        PodChild::PodLevel
    }
}

fn kubernetes(elements: &[&str], pods: &mut PodNames) -> Option<Workload> {
    let kubepods = elements.iter().position(|e| is_kubepods(e))?;
    let (pod_index, uid) =
        elements.iter().enumerate().skip(kubepods + 1).find_map(|(i, e)| Some((i, pod_uid(e)?)))?;
    let pod_name = format!("pod-{uid}");
    let mut workload = Workload::named(pod_name.as_str(), Kind::Kubernetes);
    let Some(child) = elements.get(pod_index + 1) else {
        return Some(workload);
    };
    if child.ends_with(".scope") {
        workload.unit = child.to_string();
    }
    let PodChild::Container(id) = pod_child(child) else {
        return Some(workload);
    };
    workload.container_id = id.to_string();
    match pods.lookup(id) {
        Some(names) => {
            workload.name = format!("{}/{}/{}", names.namespace, names.pod, names.container);
            workload.namespace = names.namespace;
            workload.pod = names.pod;
            workload.container = names.container;
        }
        None => workload.name = format!("{pod_name}/{}", short_id(id, 12)),
    }
    Some(workload)
}

/// A Docker container outside Kubernetes: `docker-<ID>.scope` (systemd
/// driver) or `docker/<ID>` (cgroupfs driver). The outermost one wins:
/// everything inside a container belongs to it, and the engine on this host
/// only knows its own containers.
fn standalone_docker(elements: &[&str], docker: &mut DockerNames) -> Option<Workload> {
    let (id, unit) = elements.iter().enumerate().find_map(|(i, e)| {
        if let Some(id) = e.strip_prefix("docker-").and_then(|s| s.strip_suffix(".scope")) {
            return is_container_id(id).then_some((id, Some(*e)));
        }
        let id = elements.get(i + 1).filter(|_| *e == "docker")?;
        is_container_id(id).then_some((*id, None))
    })?;
    let container = docker.name(id);
    let name = container.clone().unwrap_or_else(|| format!("docker-{}", short_id(id, 12)));
    let mut workload = Workload::named(name, Kind::Docker);
    workload.unit = unit.unwrap_or_default().to_string();
    workload.container = container.unwrap_or_default();
    workload.container_id = id.to_string();
    Some(workload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::TestDir;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const ID2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    const UID: &str = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901";
    const UID_: &str = "1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901";

    /// A log directory naming container ID as default/triton-0/server, and a
    /// Docker directory naming ID2 "triton".
    struct Names {
        _logs: TestDir,
        _docker: TestDir,
        pods: PodNames,
        docker: DockerNames,
    }

    fn names() -> Names {
        let logs = TestDir::new("classify-logs");
        let target = logs.0.join("does-not-exist");
        std::os::unix::fs::symlink(target, logs.0.join(format!("triton-0_default_server-{ID}.log"))).unwrap();
        let docker = TestDir::new("classify-docker");
        std::fs::create_dir(docker.0.join(ID2)).unwrap();
        std::fs::write(docker.0.join(ID2).join("config.v2.json"), r#"{"ID":"x","Name":"/triton"}"#).unwrap();
        Names {
            pods: PodNames::new(Some(logs.0.clone())),
            docker: DockerNames::new(Some(docker.0.clone())),
            _logs: logs,
            _docker: docker,
        }
    }

    fn run(path: &str) -> Workload {
        let mut n = names();
        classify(path, &mut n.pods, &mut n.docker)
    }

    fn known_container(unit: &str) -> Workload {
        Workload {
            name: "default/triton-0/server".into(),
            kind: Kind::Kubernetes,
            unit: unit.into(),
            namespace: "default".into(),
            pod: "triton-0".into(),
            container: "server".into(),
            container_id: ID.into(),
        }
    }

    fn pod_level(unit: &str) -> Workload {
        Workload { unit: unit.into(), ..Workload::named(format!("pod-{UID}"), Kind::Kubernetes) }
    }

    #[test]
    fn kind_names() {
        let all = [Kind::Host, Kind::Systemd, Kind::Kubernetes, Kind::Docker, Kind::Cgroup, Kind::Unresolved];
        let names: Vec<_> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, ["host", "systemd", "kubernetes", "docker", "cgroup", "unresolved"]);
        assert_eq!(Workload::host().name, "");
        assert_eq!(Workload::host().kind, Kind::Host);
        assert_eq!(Workload::unresolved().name, "unresolved");
        assert_eq!(Workload::unresolved().kind, Kind::Unresolved);
    }

    #[test]
    fn root_is_host() {
        assert_eq!(run("/"), Workload::host());
        assert_eq!(run(""), Workload::host());
        assert_eq!(run("//"), Workload::host());
    }

    #[test]
    fn kubernetes_systemd_driver_containerd() {
        for qos in ["burstable", "besteffort"] {
            let unit = format!("cri-containerd-{ID}.scope");
            let path = format!("/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{UID_}.slice/{unit}");
            assert_eq!(run(&path), known_container(&unit), "{path}");
        }
        // Guaranteed pods sit directly under kubepods.slice.
        let unit = format!("cri-containerd-{ID}.scope");
        assert_eq!(run(&format!("/kubepods.slice/kubepods-pod{UID_}.slice/{unit}")), known_container(&unit));
    }

    #[test]
    fn kubernetes_crio_and_docker_runtimes() {
        for unit in [format!("crio-{ID}.scope"), format!("docker-{ID}.scope")] {
            let path =
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{unit}");
            assert_eq!(run(&path), known_container(&unit), "{path}");
        }
    }

    #[test]
    fn crio_conmon_counts_at_pod_level() {
        let unit = format!("crio-conmon-{ID}.scope");
        let path =
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/{unit}");
        assert_eq!(run(&path), pod_level(&unit));
        assert_eq!(run(&format!("/kubepods/besteffort/pod{UID}/crio-conmon-{ID}")), pod_level(""));
    }

    #[test]
    fn kubernetes_cgroupfs_driver() {
        for path in [
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            format!("/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods/pod{UID}/{ID}"),
            format!("/kubepods/pod{UID}/crio-{ID}"),
        ] {
            assert_eq!(run(&path), known_container(""), "{path}");
        }
    }

    #[test]
    fn kubernetes_nested_in_kind_and_docker() {
        let unit = format!("cri-containerd-{ID}.scope");
        let kind = format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/\
             kubelet-kubepods-burstable-pod{UID_}.slice/{unit}"
        );
        assert_eq!(run(&kind), known_container(&unit));
        let in_docker = format!("/docker/{ID2}/kubepods/burstable/pod{UID}/{ID}");
        assert_eq!(run(&in_docker), known_container(""));
    }

    #[test]
    fn sub_cgroups_belong_to_their_container() {
        let unit = format!("cri-containerd-{ID}.scope");
        let path = format!("/kubepods.slice/kubepods-pod{UID_}.slice/{unit}/worker/deeper");
        assert_eq!(run(&path), known_container(&unit));
        assert_eq!(run(&format!("/kubepods/pod{UID}/{ID}/sub")), known_container(""));
    }

    #[test]
    fn unnamed_container_falls_back_to_pod_uid_and_short_id() {
        // A pause container has no log file.
        let unit = format!("cri-containerd-{ID2}.scope");
        let path = format!("/kubepods.slice/kubepods-pod{UID_}.slice/{unit}");
        let expected = Workload {
            name: format!("pod-{UID}/fedcba987654"),
            container_id: ID2.into(),
            ..pod_level(&unit)
        };
        assert_eq!(run(&path), expected);
        // No log directory at all.
        let mut pods = PodNames::new(None);
        let mut docker = DockerNames::new(None);
        let got = classify(&format!("/kubepods/pod{UID}/{ID}"), &mut pods, &mut docker);
        assert_eq!(got.name, format!("pod-{UID}/0123456789ab"));
        assert_eq!((got.namespace.as_str(), got.pod.as_str(), got.container.as_str()), ("", "", ""));
    }

    #[test]
    fn processes_directly_in_the_pod() {
        assert_eq!(
            run(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice")),
            pod_level("")
        );
        assert_eq!(run(&format!("/kubepods/pod{UID}")), pod_level(""));
    }

    #[test]
    fn standalone_docker() {
        let unit = format!("docker-{ID2}.scope");
        let expected = Workload {
            name: "triton".into(),
            kind: Kind::Docker,
            unit: unit.clone(),
            container: "triton".into(),
            container_id: ID2.into(),
            ..Workload::host()
        };
        assert_eq!(run(&format!("/system.slice/{unit}")), expected);
        assert_eq!(run(&format!("/system.slice/{unit}/init.scope")), expected);
        assert_eq!(run(&format!("/docker/{ID2}")), Workload { unit: String::new(), ..expected.clone() });
        let unknown = run(&format!("/docker/{ID}/system.slice/x.service"));
        assert_eq!(unknown.name, "docker-0123456789ab");
        assert_eq!(
            (unknown.kind, unknown.container.as_str(), unknown.container_id.as_str()),
            (Kind::Docker, "", ID)
        );
    }

    #[test]
    fn systemd_units() {
        for (path, unit) in [
            ("/system.slice/inference.service", "inference.service"),
            ("/user.slice/user-0.slice/session-3.scope", "session-3.scope"),
            ("/system.slice/inference.service/worker", "inference.service"),
            ("/init.scope", "init.scope"),
            ("/system.slice/docker.service", "docker.service"),
            ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.scope", "app-x.scope"),
        ] {
            let got = run(path);
            assert_eq!(
                (got.kind, got.name.as_str(), got.unit.as_str()),
                (Kind::Systemd, unit, unit),
                "{path}"
            );
            assert_eq!(got.container_id, "");
        }
    }

    #[test]
    fn slices_and_other_cgroups_name_themselves() {
        for path in [
            "/system.slice",
            "/user.slice/user-1000.slice",
            "/mygroup/sub",
            "/kubepods.slice",
            "/kubepods/burstable",
        ] {
            assert_eq!(run(path), Workload::named(path, Kind::Cgroup), "{path}");
        }
    }

    #[test]
    fn garbage_never_panics_and_is_not_a_container() {
        for path in [
            "/kubepods/pod/",
            "/kubepods/pod",
            "/kubepods.slice/x.slice/cri-containerd-.scope",
            "/kubepods.slice/kubepods-pod.slice/cri-containerd-.scope",
            "/kubepods/podzz/0123",
            "/docker/",
            "/docker/xyz",
            "/docker/0123",
            "/system.slice/docker-.scope",
            "/system.slice/docker-../../etc.scope",
            "/.service",
            "/.scope",
            "/a\u{0}b/\u{7f}/é\u{200b}/\u{fffd}",
            "kubepods",
            "/../..",
            "/kubepods/pod-/-",
        ] {
            let got = run(path);
            assert_eq!(got.container_id, "", "{path}");
            assert_ne!(got.kind, Kind::Docker, "{path}");
        }
        // A pod with a child that is not a container counts at pod level.
        let got = run(&format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-.scope"));
        assert_eq!((got.kind, got.name), (Kind::Kubernetes, format!("pod-{UID}")));
        assert_eq!(run("/kubepods/pod/").kind, Kind::Cgroup);
        assert_eq!(run("/kubepods.slice/x.slice/cri-containerd-.scope").kind, Kind::Systemd);
        assert_eq!(run("/.scope").kind, Kind::Cgroup);
    }
}
