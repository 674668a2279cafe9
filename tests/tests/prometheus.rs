//! The operations kit against a real Prometheus (Debian's `prometheus`):
//! it scrapes sonic-probe while the faulty Python service runs, with the
//! alert rules of deploy/prometheus loaded and a 1 s evaluation interval.
//! Every PromQL expression of every dashboard panel must return data, the
//! futex stall alert must fire; with the healthy twin nothing may fire.
//! Watching the whole host inside the noise mix of a busy node
//! (tests/workloads/noise_mix.py), the alerts of the stand-in's five
//! problems go pending and none of the mix's churn raises any.
//! Everything is polled, nothing slept blindly beyond the polls.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sonic_probe_tests::{
    privileged, sonic_sim,
    tls::{bcrypt_hash, Pki},
    unique_name, Daemon, NoiseMix, Workload,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// (status, body); status 0 if nothing listens yet.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else { return (0, String::new()) };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default())
}

struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: PathBuf,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        Self::start_with_jobs(&format!(
            "  - job_name: sonic-probe\n    static_configs:\n      - targets: ['{target}']\n"
        ))
    }

    /// With these `scrape_configs` entries.
    fn start_with_jobs(jobs: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(unique_name("prom"));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = repo().join("deploy/prometheus/alerts.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n{jobs}",
            rules.display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (apt-get install prometheus)");
        let p = Prometheus { child, addr, _dir: dir };
        p.poll("ready", Duration::from_secs(60), || get(p.addr, "/-/ready").0 == 200);
        p
    }

    fn poll(&self, what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !ok() {
            assert!(Instant::now() < deadline, "prometheus: {what} within {limit:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn query(&self, expr: &str) -> Value {
        let (status, body) = get(self.addr, &format!("/api/v1/query?query={}", encode(expr)));
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(status, 200, "query {expr}: {body}");
        v
    }

    fn series(&self, expr: &str) -> usize {
        self.query(expr)["data"]["result"].as_array().map_or(0, Vec::len)
    }

    fn alerts(&self) -> Vec<Value> {
        let (_, body) = get(self.addr, "/api/v1/alerts");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["alerts"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// Every `expr` of every panel (rows may nest panels).
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out.sort();
    out.dedup();
    out
}

fn sim(mode: &str, dir: &Path, requests: &str) -> Workload {
    sim_named(mode, dir, requests, None)
}

/// The stand-in under its own process name, if given.
fn sim_named(mode: &str, dir: &Path, requests: &str, name: Option<&str>) -> Workload {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(sonic_sim())
        .arg(mode)
        .args(["--requests", requests, "--stall", "0.6", "--wait-go", "--dir"])
        .arg(dir);
    Workload::start_command(cmd, name, &[])
}

#[test]
fn dashboard_queries_have_data_and_the_stall_alert_fires() {
    if !privileged("dashboard_queries_have_data_and_the_stall_alert_fires") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("e2e-f"));
    let w = sim("faulty", &dir, "6");
    let d = Daemon::start(&["--pid", &w.pid().to_string(), "--stall-threshold", "300ms", "--bpf-stats"]);
    let prom = Prometheus::start(d.addr);
    prom.poll("first scrape", Duration::from_secs(30), || prom.series("up{job=\"sonic-probe\"} == 1") == 1);
    assert!(w.go().success());
    // Scraped after the service is done, long enough for rate()s.
    prom.poll("the stalls scraped", Duration::from_secs(30), || {
        prom.series("sonic_probe_futex_stalls_total >= 6") == 1
    });

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/sonic-probe.json")).unwrap(),
    )
    .unwrap();
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    let queries: Vec<String> = exprs
        .iter()
        .map(|e| {
            e.replace("$instance", ".*")
                .replace("$comm", ".*")
                .replace("$namespace", ".*")
                .replace("$workload", ".*")
                .replace("$__rate_interval", "1m")
                .replace("$__interval", "15s")
        })
        .collect();
    // rate()s need two scrapes after the calls: poll until every panel has
    // data, and name the ones that never get any.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let empty: Vec<&String> = queries.iter().filter(|q| prom.series(q) == 0).collect();
        if empty.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dashboard queries without data after 60 s:\n{}",
            empty.iter().map(|q| q.as_str()).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    prom.poll("SonicProbeFutexStall firing", Duration::from_secs(60), || {
        prom.alerts()
            .iter()
            .any(|a| a["labels"]["alertname"] == "SonicProbeFutexStall" && a["state"] == "firing")
    });
    let firing: Vec<Value> = prom.alerts().into_iter().filter(|a| a["state"] == "firing").collect();
    let stall = firing.iter().find(|a| a["labels"]["alertname"] == "SonicProbeFutexStall").unwrap();
    assert_eq!(stall["labels"]["severity"], "page");
    assert!(stall["annotations"]["runbook"].as_str().unwrap().contains("sonic-probe findings"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nothing_fires_for_the_healthy_twin() {
    if !privileged("nothing_fires_for_the_healthy_twin") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("e2e-h"));
    let w = sim("healthy", &dir, "4");
    let d = Daemon::start(&["--pid", &w.pid().to_string(), "--stall-threshold", "300ms"]);
    let prom = Prometheus::start(d.addr);
    prom.poll("first scrape", Duration::from_secs(30), || prom.series("up{job=\"sonic-probe\"} == 1") == 1);
    assert!(w.go().success());
    // Its calls were scraped, and the rules evaluated many times since.
    prom.poll("the healthy calls scraped", Duration::from_secs(30), || {
        prom.series("sonic_probe_syscall_errors_total{syscall=\"futex\",errno=\"ETIMEDOUT\"} > 10") > 0
    });
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        let active: Vec<Value> = prom.alerts();
        assert!(active.is_empty(), "alerts for the healthy twin: {active:#?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // And the rules were loaded and evaluated, all of them, without error.
    let (_, body) = get(prom.addr, "/api/v1/rules");
    let v: Value = serde_json::from_str(&body).unwrap();
    let rules: Vec<&Value> =
        v["data"]["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    let file = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let in_file = file.lines().filter(|l| l.trim_start().starts_with("- alert:")).count();
    assert_eq!(rules.len(), in_file, "{body}");
    for r in rules {
        assert_eq!(r["health"], "ok", "{r:#}");
        assert!(!r["lastEvaluation"].as_str().unwrap_or("0001").starts_with("0001"), "{r:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prometheus_scrapes_through_tls_with_basic_auth() {
    if !privileged("prometheus_scrapes_through_tls_with_basic_auth") {
        return;
    }
    let pki = Pki::new(&std::env::temp_dir().join(unique_name("e2e-tls")));
    let web = pki.web_config(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{}'\n",
            bcrypt_hash("scrape-pw", 10)
        ),
    );
    let d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    let right = pki.web_config("right-pw", "scrape-pw\n");
    let wrong = pki.web_config("wrong-pw", "guess\n");
    // The deploy/prometheus/scrape.yml job, as it is written there for TLS
    // and basic auth; and the same with a wrong password.
    let job = |name: &str, password_file: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {}\n\
             \x20   basic_auth:\n      username: prometheus\n      password_file: {password_file}\n\
             \x20   static_configs:\n      - targets: ['{}']\n",
            pki.path("ca.crt"),
            d.addr
        )
    };
    let prom = Prometheus::start_with_jobs(&(job("sonic-probe", &right) + &job("wrong-password", &wrong)));
    prom.poll("a scrape through TLS with basic auth", Duration::from_secs(30), || {
        prom.series("up{job=\"sonic-probe\"} == 1") == 1
            && prom.series("sonic_probe_bpf_programs_attached{job=\"sonic-probe\"}") == 1
    });
    prom.poll("the wrong password refused", Duration::from_secs(30), || {
        prom.series("up{job=\"wrong-password\"} == 0") == 1
    });
    assert_eq!(prom.series("sonic_probe_bpf_programs_attached{job=\"wrong-password\"}"), 0);
    assert!(d.stop().success());
    let _ = std::fs::remove_dir_all(&pki.dir);
}

/// The alerts of the stand-in's five problems.
const PROBLEM_ALERTS: &[&str] = &[
    "SonicProbeFutexStall",
    "SonicProbeModelReopened",
    "SonicProbeSmallReads",
    "SonicProbeMmapChurn",
    "SonicProbeSyscallErrors",
];

#[test]
fn on_a_busy_node_the_problems_alert_and_the_churn_does_not() {
    if !privileged("on_a_busy_node_the_problems_alert_and_the_churn_does_not") {
        return;
    }
    // As shipped: the whole host, every process of the node.
    let d = Daemon::start(&["--stall-threshold", "300ms"]);
    let prom = Prometheus::start(d.addr);
    let noise = NoiseMix::start(1.0, &format!("{}-", unique_name("nq")));
    let mix = format!("{}.*", noise.prefix);
    prom.poll("first scrape", Duration::from_secs(30), || prom.series("up{job=\"sonic-probe\"} == 1") == 1);
    // The churn is real: its tools fail more than once a second, which an
    // alert on the kernel's error counter would take for a problem.
    prom.poll("the mix's errors scraped", Duration::from_secs(30), || {
        prom.series(&format!(
            "sum by (comm) (rate(sonic_probe_syscall_errors_total{{comm=~\"{mix}\",syscall!=\"futex\"}}[5m])) > 1"
        )) > 0
    });
    let dir = std::env::temp_dir().join(unique_name("e2e-b"));
    let name = unique_name("sonicb");
    // 8 requests: 520 small reads of audio, over the alert's 300 in 5 minutes.
    let w = sim_named("faulty", &dir, "8", Some(&name));
    assert!(w.go().success());
    let of_mix = |a: &Value| a["labels"]["comm"].as_str().is_some_and(|c| c.starts_with(&noise.prefix));
    // Each goes pending within seconds; the small-reads rate only stays
    // above its threshold for a while after the requests, so each alert
    // counts once seen.
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !PROBLEM_ALERTS.iter().all(|n| seen.iter().any(|s| s == n)) {
        assert!(
            Instant::now() < deadline,
            "within 60 s only {seen:?} of {PROBLEM_ALERTS:?}; small reads: {}",
            prom.query(&format!(
                "max_over_time(rate(sonic_probe_small_reads_total{{comm=\"{name}\",file_class=\"audio\"}}[5m])[2m:1s])"
            ))
        );
        let alerts = prom.alerts();
        let churn: Vec<&Value> = alerts.iter().filter(|a| of_mix(a)).collect();
        assert!(churn.is_empty(), "alerts on the churn: {churn:#?}");
        for a in alerts.iter().filter(|a| a["labels"]["comm"] == name.as_str()) {
            let n = a["labels"]["alertname"].as_str().unwrap().to_string();
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // The rules keep being evaluated on the churn: still nothing for it.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let churn: Vec<Value> = prom.alerts().into_iter().filter(|a| of_mix(a)).collect();
        assert!(churn.is_empty(), "alerts on the churn: {churn:#?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(noise);
    let _ = std::fs::remove_dir_all(&dir);
}
