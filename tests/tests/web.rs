//! Who may read it: the web-config's TLS and basic auth (--web-config, the
//! Prometheus exporters' format) against real clients (curl, openssl
//! s_client, `sonic-probe findings`), and --findings-paths.
//!
//! Certificates are made by the test with openssl (tests/src/tls.rs).

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Output},
    time::Duration,
};

use sonic_probe_tests::{
    http_request, privileged, sonic_probe_bin,
    tls::{bcrypt_hash, Pki},
    unique_name, Daemon, Workload,
};

fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// curl's exit code, the HTTP status and the body.
fn curl(addr: SocketAddr, path: &str, args: &[&str]) -> (i32, u16, String) {
    let url = format!("https://{addr}{path}");
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .arg(&url)
        .output()
        .expect("run curl");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (o.status.code().unwrap_or(-1), code.trim().parse().unwrap_or(0), body.to_string())
}

fn findings_cmd(addr: SocketAddr, args: &[&str], password: Option<&str>) -> Output {
    let mut c = Command::new(sonic_probe_bin());
    c.args(["findings", "--url", &format!("https://{addr}")]).args(args);
    c.env_remove("SONIC_PROBE_PASSWORD");
    if let Some(p) = password {
        c.env("SONIC_PROBE_PASSWORD", p);
    }
    c.output().unwrap()
}

#[test]
fn tls_and_basic_auth_guard_every_path_but_healthz() {
    if !privileged("tls_and_basic_auth_guard_every_path_but_healthz") {
        return;
    }
    let pki = Pki::new(&temp_dir("tls"));
    let web = pki.web_config(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: '{}'\n",
            bcrypt_hash("s3cret", 10)
        ),
    );
    let d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    assert!(d.log_lines.last().unwrap().contains("serving https://"), "{:?}", d.log_lines.last());
    let ca = pki.path("ca.crt");
    let good = ["--cacert", &ca, "-u", "alice:s3cret"];

    let (rc, status, body) = curl(d.addr, "/metrics", &good);
    assert_eq!((rc, status), (0, 200), "{body:.300}");
    assert!(body.contains("sonic_probe_bpf_programs_attached"), "{body:.300}");
    let (_, status, body) = curl(d.addr, "/findings", &good);
    assert_eq!(status, 200, "{body}");
    assert!(body.trim_start().starts_with('['), "{body}");
    // The web-config's headers are on the answers.
    let o = Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null"])
        .args(good)
        .arg(format!("https://{}/healthz", d.addr))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).to_lowercase().contains("x-frame-options: deny"));

    // No credentials, a wrong password, an unknown user: 401 on every path
    // but /healthz, and nothing of the answer leaks.
    for (what, auth) in [
        ("no credentials", &[][..]),
        ("wrong password", &["-u", "alice:wrong"][..]),
        ("unknown user", &["-u", "mallory:s3cret"][..]),
    ] {
        for path in ["/metrics", "/findings", "/", "/nope"] {
            let mut args = vec!["--cacert", ca.as_str()];
            args.extend_from_slice(auth);
            let (rc, status, body) = curl(d.addr, path, &args);
            assert_eq!((rc, status), (0, 401), "{what} {path}: {body}");
            assert_eq!(body, "Unauthorized\n", "{what} {path}");
        }
    }
    let (_, status, body) = curl(d.addr, "/healthz", &["--cacert", &ca]);
    assert_eq!((status, body.as_str()), (200, "ok\n"), "/healthz needs no credentials");

    // Plain HTTP to the TLS port: a clean 400, nothing else.
    let (status, body) = http_request(d.addr, "GET", "/metrics");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("HTTP request to an HTTPS server") && !body.contains("sonic_probe"), "{body}");
    // A client that does not trust the CA gets no answer at all.
    let (rc, status, _) = curl(d.addr, "/metrics", &["-u", "alice:s3cret"]);
    assert!(rc != 0 && status == 0, "curl without the CA: rc {rc}, HTTP {status}");

    // `sonic-probe findings` through TLS, the password from the environment
    // or a file, never a flag.
    let o = findings_cmd(d.addr, &["--ca-file", &ca, "--user", "alice"], Some("s3cret"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pw = pki.web_config("pw", "s3cret\n");
    let o =
        findings_cmd(d.addr, &["--ca-file", &ca, "--user", "alice", "--password-file", &pw, "--json"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with('['));
    let o = findings_cmd(d.addr, &["--ca-file", &ca, "--user", "alice"], Some("wrong"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("HTTP 401 Unauthorized: wrong user or password"));
    let o = findings_cmd(d.addr, &["--ca-file", &ca], None);
    assert!(String::from_utf8_lossy(&o.stderr).contains("give --user"), "{o:?}");
    // A CA that did not sign the server's certificate: refused, saying so,
    // with the same user and password that got in above.
    let o =
        findings_cmd(d.addr, &["--ca-file", &pki.path("rogue-ca.crt"), "--user", "alice"], Some("s3cret"));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("TLS handshake failed") && err.contains("UnknownIssuer"), "{err}");
    assert!(d.stop().success());
}

/// Median time to first byte of `n` requests on one kept-alive connection.
fn median_answer_time(addr: SocketAddr, ca: &str, user: &str, n: usize) -> f64 {
    let url = format!("https://{addr}/metrics");
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "/dev/null", "--cacert", ca, "-u", user, "-w", "%{time_starttransfer}\n"]);
    for _ in 0..n {
        c.arg(&url);
    }
    let o = c.output().unwrap();
    let mut times: Vec<f64> =
        String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(times.len(), n, "{o:?}");
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

#[test]
fn an_unknown_user_takes_as_long_as_a_wrong_password() {
    if !privileged("an_unknown_user_takes_as_long_as_a_wrong_password") {
        return;
    }
    let pki = Pki::new(&temp_dir("tlstime"));
    // Cost 12: some 200 ms a check, far above the noise of a request.
    let web = pki.web_config(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  alice: '{}'\n",
            bcrypt_hash("s3cret", 12)
        ),
    );
    let d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    let ca = pki.path("ca.crt");
    let wrong_password = median_answer_time(d.addr, &ca, "alice:wrong", 5);
    let unknown_user = median_answer_time(d.addr, &ca, "mallory:wrong", 5);
    // Were an unknown user answered without a bcrypt check, it would take
    // well under a millisecond against some 200 (measured: 0.3 ms).
    assert!(wrong_password > 0.05, "a cost-12 check took {wrong_password} s");
    assert!(
        unknown_user > 0.5 * wrong_password,
        "unknown user answered in {unknown_user} s, a wrong password in {wrong_password} s"
    );
    assert!(d.stop().success());
}

#[test]
fn client_certificates_are_checked() {
    if !privileged("client_certificates_are_checked") {
        return;
    }
    let pki = Pki::new(&temp_dir("mtls"));
    let web = pki.web_config(
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n  min_version: TLS13\n",
    );
    let d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    let ca = pki.path("ca.crt");
    let (cert, key) = (pki.path("client.crt"), pki.path("client.key"));
    let (rc, status, body) = curl(d.addr, "/metrics", &["--cacert", &ca, "--cert", &cert, "--key", &key]);
    assert_eq!((rc, status), (0, 200), "{body:.200}");
    // No certificate, or one another CA signed: the handshake fails, no HTTP.
    let (rogue_cert, rogue_key) = (pki.path("rogue-client.crt"), pki.path("rogue-client.key"));
    for (what, args) in [
        ("no client certificate", vec!["--cacert", ca.as_str()]),
        ("a rogue certificate", vec!["--cacert", &ca, "--cert", &rogue_cert, "--key", &rogue_key]),
    ] {
        let (rc, status, body) = curl(d.addr, "/metrics", &args);
        assert!(
            rc != 0 && status == 0 && !body.contains("sonic_probe"),
            "{what}: rc {rc} HTTP {status} {body:.200}"
        );
    }
    // TLS 1.2 is refused by min_version TLS13; the same client, the same
    // credentials, TLS 1.3 only: in.
    let (rc, status, _) =
        curl(d.addr, "/healthz", &["--cacert", &ca, "--cert", &cert, "--key", &key, "--tls-max", "1.2"]);
    assert!(rc != 0 && status == 0, "a TLS 1.2 handshake with min_version TLS13: rc {rc}, HTTP {status}");
    let (rc, status, body) =
        curl(d.addr, "/healthz", &["--cacert", &ca, "--cert", &cert, "--key", &key, "--tlsv1.3"]);
    assert_eq!((rc, status, body.as_str()), (0, 200, "ok\n"), "the same client with TLS 1.3");
    let o = findings_cmd(d.addr, &["--ca-file", &ca, "--cert-file", &cert, "--key-file", &key], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = findings_cmd(d.addr, &["--ca-file", &ca], None);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(d.stop().success());
}

#[test]
fn sighup_rereads_the_web_config_and_keeps_the_old_one_if_bad() {
    if !privileged("sighup_rereads_the_web_config_and_keeps_the_old_one_if_bad") {
        return;
    }
    let pki = Pki::new(&temp_dir("tlshup"));
    let users = |user: &str| {
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  {user}: '{}'\n",
            bcrypt_hash("pw", 4)
        )
    };
    let web = pki.web_config("web.yml", &users("alice"));
    let mut d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    let ca = pki.path("ca.crt");
    assert_eq!(curl(d.addr, "/metrics", &["--cacert", &ca, "-u", "alice:pw"]).1, 200);

    // A bad file (a password in clear): refused, naming the field; alice stays.
    pki.web_config("web.yml", "basic_auth_users:\n  alice: pw\n");
    d.signal(libc::SIGHUP);
    let line = d.wait_for_log("SIGHUP: reload failed");
    assert!(line.contains("basic_auth_users.alice: not a bcrypt hash"), "{line}");
    assert_eq!(curl(d.addr, "/metrics", &["--cacert", &ca, "-u", "alice:pw"]).1, 200);

    // A good one: bob in, alice out, without a restart.
    pki.web_config("web.yml", &users("bob"));
    d.signal(libc::SIGHUP);
    d.wait_for_log("SIGHUP: reloaded");
    assert_eq!(curl(d.addr, "/metrics", &["--cacert", &ca, "-u", "bob:pw"]).1, 200);
    assert_eq!(curl(d.addr, "/metrics", &["--cacert", &ca, "-u", "alice:pw"]).1, 401);
    assert!(d.stop().success());
}

/// One TLS connection kept open between requests: `openssl s_client`,
/// which checks the server's certificate against `ca` once, at its handshake.
struct KeptConnection {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl KeptConnection {
    fn open(addr: SocketAddr, ca: &str) -> KeptConnection {
        use std::io::Read;
        let mut child = Command::new("openssl")
            .args(["s_client", "-quiet", "-verify_return_error", "-verify_ip", "127.0.0.1", "-CAfile", ca])
            .args(["-connect", &addr.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run openssl s_client");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, out) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        KeptConnection { child, stdin, out }
    }

    /// GET /healthz on this connection: the whole answer, or what came
    /// before the connection closed or 10 s passed.
    fn healthz(&mut self) -> String {
        use std::io::Write;
        let _ = self.stdin.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
        let _ = self.stdin.flush();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !got.ends_with(b"\r\n\r\nok\n") {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.out.recv_timeout(left) {
                Ok(chunk) => got.extend(chunk),
                Err(_) => break,
            }
        }
        String::from_utf8_lossy(&got).to_string()
    }
}

impl Drop for KeptConnection {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sighup_rotates_the_certificate_for_new_connections_and_keeps_old_ones() {
    if !privileged("sighup_rotates_the_certificate_for_new_connections_and_keeps_old_ones") {
        return;
    }
    let pki = Pki::new(&temp_dir("tlsrotate"));
    // Certificate B: same names, signed by the other CA, so that which of
    // the two a client is shown is told by which CA it trusts.
    pki.server_cert("server-b", "rogue-ca");
    let web =
        pki.web_config("web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    let mut d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    let (ca_a, ca_b) = (pki.path("ca.crt"), pki.path("rogue-ca.crt"));
    assert_eq!(curl(d.addr, "/healthz", &["--cacert", &ca_a]).0, 0, "certificate A before the swap");
    assert_ne!(curl(d.addr, "/healthz", &["--cacert", &ca_b]).0, 0, "certificate B before the swap");
    let mut old = KeptConnection::open(d.addr, &ca_a);
    let first = old.healthz();
    assert!(first.starts_with("HTTP/1.1 200"), "first request on the kept connection: {first:?}");

    // B's files in place of A's, under the same names (each by a rename, as
    // a certificate manager does), then SIGHUP.
    for ext in ["key", "crt"] {
        let tmp = pki.dir.join(format!("server.{ext}.new"));
        std::fs::copy(pki.dir.join(format!("server-b.{ext}")), &tmp).unwrap();
        std::fs::rename(&tmp, pki.dir.join(format!("server.{ext}"))).unwrap();
    }
    d.signal(libc::SIGHUP);
    d.wait_for_log("SIGHUP: reloaded");

    // A new connection is shown B: a client trusting only B's CA gets in,
    // one trusting only A's is refused at the handshake.
    let (rc, status, body) = curl(d.addr, "/healthz", &["--cacert", &ca_b]);
    assert_eq!((rc, status, body.as_str()), (0, 200, "ok\n"), "a new connection trusting B");
    let (rc, status, _) = curl(d.addr, "/healthz", &["--cacert", &ca_a]);
    assert!(rc != 0 && status == 0, "a new connection trusting only A: rc {rc}, HTTP {status}");
    // The connection made under A still answers.
    let second = old.healthz();
    assert!(second.starts_with("HTTP/1.1 200"), "second request on the kept connection: {second:?}");
    drop(old);
    assert!(d.stop().success());
}

#[test]
fn a_tls_client_that_never_finishes_its_handshake_is_cut_off() {
    if !privileged("a_tls_client_that_never_finishes_its_handshake_is_cut_off") {
        return;
    }
    use std::io::{Read, Write};
    let pki = Pki::new(&temp_dir("tlsslow"));
    let web =
        pki.web_config("web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    let d = Daemon::start(&["--pid", "1", "--web-config", &web]);
    // Half a TLS record header, then nothing.
    let mut slow = std::net::TcpStream::connect(d.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    slow.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let start = std::time::Instant::now();
    // Others are served meanwhile.
    let (_, status, _) = curl(d.addr, "/healthz", &["--cacert", &pki.path("ca.crt")]);
    assert_eq!(status, 200);
    let mut out = Vec::new();
    let _ = slow.read_to_end(&mut out);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(4) && waited < Duration::from_secs(15), "closed after {waited:?}");
    assert!(d.stop().success());
}

#[test]
fn findings_paths_hides_directories_or_whole_paths() {
    if !privileged("findings_paths_hides_directories_or_whole_paths") {
        return;
    }
    // sp-workload exact opens a missing path several times: a syscall_errors
    // finding that names it (at once, so --findings-verbose: the busy-node
    // rules wait for an error to recur 400 ms later).
    let missing = sonic_probe_tests::workload::exact::MISSING_PATH;
    let name = missing.rsplit('/').next().unwrap();
    for (how, want) in
        [("full", missing.to_string()), ("name", name.to_string()), ("none", "[model]".to_string())]
    {
        let comm = unique_name("paths");
        let w = Workload::start(Some(&comm), &["exact"]);
        let d =
            Daemon::start(&["--pid", &w.pid().to_string(), "--findings-paths", how, "--findings-verbose"]);
        assert!(w.go().success());
        let f =
            d.findings_when(|f| f.iter().any(|f| f["kind"] == "syscall_errors" && f["errno"] == "ENOENT"));
        let e = f
            .iter()
            .find(|f| f["kind"] == "syscall_errors" && f["errno"] == "ENOENT")
            .expect("ENOENT finding");
        assert_eq!(e["paths"], serde_json::json!([want]), "--findings-paths {how}: {e:#}");
        assert!(d.stop().success());
    }
}
