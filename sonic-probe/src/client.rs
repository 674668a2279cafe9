//! `sonic-probe findings`: asks a running daemon for its findings and
//! prints them as a table a person can read (or as the raw JSON). What a
//! finding says in its row (and its stacks under it) is its kind's, written
//! by its detector (`findings::DetailKind`); the table is here.

use std::{path::PathBuf, sync::Arc};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{header::HeaderValue, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName};

use crate::{
    error::{Error, Result},
    findings::Finding,
};

/// The environment variable `--user`'s password is read from.
pub const PASSWORD_ENV: &str = "SONIC_PROBE_PASSWORD";

/// How to reach the daemon: TLS and credentials (`sonic-probe findings`).
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// CA certificates (PEM) the daemon's certificate must chain to
    /// (default: the system's CA bundle).
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), when the daemon asks for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Basic-auth user; the password comes from `password_file` or
    /// $SONIC_PROBE_PASSWORD, never from the command line.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// The daemon's address as `http(s)://HOST:PORT`, checked.
pub fn parse_url(s: &str) -> Result<Uri> {
    let uri: Uri = s.parse().map_err(|_| Error::usage(format!("--url {s}: not a URL")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(Error::usage(format!(
            "--url {s}: use http://HOST:PORT or https://HOST:PORT, e.g. http://127.0.0.1:9580"
        )));
    }
    Ok(uri)
}

/// A daemon to ask: its address, TLS settings and credentials, checked.
pub struct Endpoint {
    base: Uri,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    authorization: Option<HeaderValue>,
}

/// The system's CA bundle, where the common distributions keep it.
const SYSTEM_CA_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

fn read_file(flag: &str, path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::usage(format!("{flag} {}: cannot read it: {e}", path.display())))
}

impl Endpoint {
    pub fn new(url: &str, options: &ClientOptions) -> Result<Self> {
        let base = parse_url(url)?;
        let authorization = match &options.user {
            None => {
                if options.password_file.is_some() {
                    return Err(Error::usage("--password-file: give --user too"));
                }
                None
            }
            Some(user) => {
                if user.contains(':') {
                    return Err(Error::usage(format!("--user {user}: a user name cannot contain ':'")));
                }
                let password = match &options.password_file {
                    Some(f) => String::from_utf8(read_file("--password-file", f)?)
                        .map_err(|_| Error::usage(format!("--password-file {}: not UTF-8", f.display())))?
                        .trim_end_matches(['\r', '\n'])
                        .to_string(),
                    None => std::env::var(PASSWORD_ENV).map_err(|_| {
                        Error::usage(format!(
                            "--user {user}: give the password in ${PASSWORD_ENV} or --password-file FILE \
                             (never on the command line)"
                        ))
                    })?,
                };
                use base64::Engine;
                let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                let mut value =
                    HeaderValue::from_str(&format!("Basic {token}")).expect("base64 is a valid header");
                value.set_sensitive(true);
                Some(value)
            }
        };
        if base.scheme_str() == Some("http") {
            if let Some(flag) = [
                ("--ca-file", options.ca_file.is_some()),
                ("--cert-file", options.cert_file.is_some()),
                ("--key-file", options.key_file.is_some()),
            ]
            .iter()
            .find_map(|(f, given)| given.then_some(f))
            {
                return Err(Error::usage(format!("{flag}: only for an https:// --url")));
            }
            return Ok(Endpoint { base, tls: None, authorization });
        }
        let mut roots = rustls::RootCertStore::empty();
        let (flag, ca) = match &options.ca_file {
            Some(f) => ("--ca-file", f.clone()),
            None => {
                let Some(bundle) = SYSTEM_CA_BUNDLES.iter().map(PathBuf::from).find(|p| p.exists()) else {
                    return Err(Error::usage("https: no system CA bundle found; give --ca-file FILE"));
                };
                ("the system CA bundle", bundle)
            }
        };
        let pem = read_file(flag, &ca)?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| Error::usage(format!("{flag} {}: not PEM ({e})", ca.display())))?;
            // System bundles hold a few certificates rustls refuses; skip them.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(Error::usage(format!("{flag} {}: no CA certificate in it", ca.display())));
        }
        let builder = rustls::ClientConfig::builder_with_provider(crate::web::web_config::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::usage(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let mut config = match (&options.cert_file, &options.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(c), Some(k)) => {
                let certs: Vec<_> = CertificateDer::pem_slice_iter(&read_file("--cert-file", c)?)
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| Error::usage(format!("--cert-file {}: not PEM ({e})", c.display())))?;
                let key = PrivateKeyDer::from_pem_slice(&read_file("--key-file", k)?).map_err(|e| {
                    Error::usage(format!("--key-file {}: no private key in it ({e})", k.display()))
                })?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| Error::usage(format!("--cert-file/--key-file: {e}")))?
            }
            _ => return Err(Error::usage("--cert-file and --key-file go together")),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let host = base.host().expect("checked by parse_url").trim_matches(['[', ']']);
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| Error::usage(format!("--url {url}: {host} is not a host name or IP address")))?;
        Ok(Endpoint {
            base,
            tls: Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name)),
            authorization,
        })
    }

    /// GET `path`; the body on 200.
    pub async fn get(&self, path: &str) -> anyhow::Result<Bytes> {
        let authority = self.base.authority().expect("checked by parse_url").clone();
        let default_port = if self.tls.is_some() { 443 } else { 80 };
        let addr = if authority.port().is_some() {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        };
        let timeout = std::time::Duration::from_secs(10);
        let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr))
            .await
            .map_err(|_| anyhow!("timed out"))?
            .with_context(|| format!("cannot connect to {addr}"))?;
        let req = {
            let mut req = hyper::Request::get(path).header(hyper::header::HOST, authority.as_str());
            if let Some(a) = &self.authorization {
                req = req.header(hyper::header::AUTHORIZATION, a.clone());
            }
            req.body(Empty::<Bytes>::new())?
        };
        let resp = match &self.tls {
            None => send(TokioIo::new(stream), req).await?,
            Some((connector, name)) => {
                let tls = tokio::time::timeout(timeout, connector.connect(name.clone(), stream))
                    .await
                    .map_err(|_| anyhow!("TLS handshake timed out"))?
                    .context("TLS handshake failed")?;
                send(TokioIo::new(tls), req).await?
            }
        };
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        if status == hyper::StatusCode::UNAUTHORIZED {
            bail!(
                "{path}: HTTP {status}: {}",
                if self.authorization.is_some() { "wrong user or password" } else { "give --user" }
            );
        }
        if !status.is_success() {
            bail!("{path}: HTTP {status}: {}", String::from_utf8_lossy(&body).trim());
        }
        Ok(body)
    }
}

async fn send<I>(
    io: I,
    req: hyper::Request<Empty<Bytes>>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    tokio::time::timeout(std::time::Duration::from_secs(30), sender.send_request(req))
        .await
        .map_err(|_| anyhow!("no answer within 30 s"))?
        .map_err(Into::into)
}

pub fn run(url: &str, options: &ClientOptions, json: bool, stacks: bool) -> Result<()> {
    let endpoint = Endpoint::new(url, options)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("async runtime")?;
    let body = rt.block_on(endpoint.get("/findings")).with_context(|| {
        format!("cannot get findings from sonic-probe at {url} (is `sonic-probe run` running?)")
    })?;
    if json {
        println!("{}", String::from_utf8_lossy(&body).trim_end());
        return Ok(());
    }
    let findings: Vec<Finding> =
        serde_json::from_slice(&body).context("the daemon's answer is not findings JSON")?;
    print!("{}", if stacks { render_with_stacks(&findings) } else { render_table(&findings) });
    Ok(())
}

/// The table, then each finding's stacks under its line (`--stacks`; a
/// kind without stacks prints none).
pub fn render_with_stacks(findings: &[Finding]) -> String {
    let table = render_table(findings);
    let mut lines = table.lines();
    let mut out = String::new();
    if let Some(head) = lines.next() {
        out.push_str(head);
        out.push('\n');
    }
    for (f, line) in findings.iter().zip(lines) {
        out.push_str(line);
        out.push('\n');
        out.push_str(&f.detail.stacks());
    }
    out
}

/// The findings as an aligned table.
pub fn render_table(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no findings\n".to_string();
    }
    let rows: Vec<[String; 6]> = findings
        .iter()
        .map(|f| {
            // 2026-11-29T21:59:02.466Z -> 21:59:02
            let time = f.last_seen.get(11..19).unwrap_or(&f.last_seen).to_string();
            let mut what = f.detail.describe();
            if f.processes > 1 {
                let pids: Vec<String> = f.pids.iter().map(u32::to_string).collect();
                let more = if (f.pids.len() as u64) < f.processes { ", ..." } else { "" };
                what.push_str(&format!(" (in {} processes, pids {}{more})", f.processes, pids.join(", ")));
            }
            // The host's processes have no workload: "-".
            let workload = if f.workload.name.is_empty() { "-".to_string() } else { f.workload.name.clone() };
            [f.detail.kind().to_string(), f.pid.to_string(), f.comm.clone(), workload, time, what]
        })
        .collect();
    let head = ["KIND", "PID", "COMM", "WORKLOAD", "LAST SEEN", "WHAT"];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r.iter()).take(5) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |cols: [&str; 6]| {
        format!(
            "{:<w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {}\n",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4]
        )
    };
    out.push_str(&line(head));
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        findings::{futex_stall, mmap_churn, repeated_open, syscall_errors, Detail, WorkloadNames},
        stacks::{Frame, FrameKind},
    };

    fn finding(detail: Detail) -> Finding {
        Finding {
            workload: WorkloadNames {
                name: "inference.service".into(),
                kind: "systemd".into(),
                unit: "inference.service".into(),
                ..Default::default()
            },
            cgroup: 0,
            detail,
            pid: 4083,
            comm: "python3".into(),
            processes: 1,
            pids: vec![4083],
            first_seen: "2026-11-29T21:59:01.820Z".into(),
            last_seen: "2026-11-29T21:59:02.466Z".into(),
        }
    }

    #[test]
    fn urls() {
        assert!(parse_url("http://127.0.0.1:9580").is_ok());
        assert!(parse_url("http://node7:9580/").is_ok());
        assert!(parse_url("https://node7:9580").is_ok());
        for bad in ["127.0.0.1:9580", "ftp://x", "not a url"] {
            assert!(matches!(parse_url(bad), Err(Error::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn table_reads_like_prose() {
        let t = render_table(&[
            finding(Detail::FutexStall(futex_stall::Detail {
                tid: 4083,
                thread: "python3".into(),
                wait_seconds: 3.214567,
                op: "FUTEX_WAIT_PRIVATE".into(),
                uaddr: "0x7f8a2c001234".into(),
                waker_tid: Some(4124),
                waker_thread: Some("loader".into()),
                count: 4,
                stack: Vec::new(),
                waker_stack: Vec::new(),
                stack_note: None,
                stack_wait_seconds: None,
            })),
            finding(Detail::RepeatedOpen(repeated_open::Detail {
                path: "/models/sonic/lip_decoder.pth".into(),
                file_class: "model".into(),
                count: 12,
                bytes_read: 12 << 30,
            })),
            finding(Detail::MmapChurn(mmap_churn::Detail { size_bytes: 1 << 30, count: 5, path: None })),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("KIND"), "{t}");
        assert!(lines[0].contains("  WORKLOAD  "), "{t}");
        assert!(lines[1].contains("  inference.service  "), "{t}");
        assert!(lines[1].contains(
            "thread python3 (tid 4083) waited 3.21 s in FUTEX_WAIT_PRIVATE on 0x7f8a2c001234, woken by loader (tid 4124); 4 stalls"
        ), "{t}");
        assert!(
            lines[2].contains("/models/sonic/lip_decoder.pth (model) opened 12 times, 12 GiB read"),
            "{t}"
        );
        assert!(lines[3].contains("1 GiB anonymous mapped and unmapped 5 times"), "{t}");
        let mut many = finding(Detail::SyscallErrors(syscall_errors::Detail {
            syscall: "openat".into(),
            errno: "ENOENT".into(),
            count: 14,
            paths: vec!["/etc/tool.conf".into()],
            length: None,
            wait_seconds: None,
        }));
        (many.processes, many.pids) = (7, vec![900, 899, 850, 812, 800]);
        assert!(
            render_table(&[many]).contains(
                "openat failed 14 times with ENOENT: /etc/tool.conf (in 7 processes, pids 900, 899, 850, 812, 800, ...)"
            ),
            "{t}"
        );
        assert!(lines[1].contains(" 21:59:02 "), "{t}");
        assert_eq!(render_table(&[]), "no findings\n");
    }

    fn frame(
        function: &str,
        file: Option<&str>,
        line: Option<u32>,
        module: Option<&str>,
        kind: FrameKind,
    ) -> Frame {
        Frame {
            function: function.into(),
            file: file.map(Into::into),
            line,
            module: module.map(Into::into),
            kind,
        }
    }

    #[test]
    fn stalls_show_the_innermost_meaningful_frames() {
        let (py, native) = (|| FrameKind::Python, || FrameKind::Native);
        let stall = finding(Detail::FutexStall(futex_stall::Detail {
            tid: 4083,
            thread: "python3".into(),
            wait_seconds: 1.5,
            op: "FUTEX_WAIT_BITSET_PRIVATE".into(),
            uaddr: "0x1".into(),
            waker_tid: Some(4124),
            waker_thread: Some("loader".into()),
            count: 1,
            stack: vec![
                frame("infer", Some("/srv/app/server.py"), Some(88), None, py()),
                frame("main", Some("/srv/app/server.py"), Some(120), None, py()),
                frame(
                    "__futex_abstimed_wait_common",
                    None,
                    None,
                    Some("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                    native(),
                ),
            ],
            waker_stack: vec![
                frame("wait", Some("/usr/lib/python3.11/threading.py"), Some(320), None, py()),
                frame("load_weights", Some("/srv/app/loader.py"), Some(41), None, py()),
            ],
            stack_note: Some("captured 0.3 s into the wait".into()),
            stack_wait_seconds: Some(1.5),
        }));
        let t = render_table(std::slice::from_ref(&stall));
        assert!(t.contains("; infer() at server.py:88 waits; load_weights() at loader.py:41 holds"), "{t}");
        let s = render_with_stacks(&[stall]);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[2], "    waiting thread (tid 4083):", "{s}");
        assert!(lines[3].contains("py     infer  /srv/app/server.py:88"), "{s}");
        assert!(lines[5].contains("__futex_abstimed_wait_common") && lines[5].contains("libc.so.6"), "{s}");
        assert_eq!(lines[6], "    waker (tid 4124):", "{s}");
        assert_eq!(lines.last().unwrap(), &"    stacks: captured 0.3 s into the wait", "{s}");
        let mut limited = finding(Detail::FutexStall(futex_stall::Detail {
            tid: 1,
            thread: "python3".into(),
            wait_seconds: 1.5,
            op: "FUTEX_WAIT".into(),
            uaddr: "0x1".into(),
            waker_tid: None,
            waker_thread: None,
            count: 1,
            stack: Vec::new(),
            waker_stack: Vec::new(),
            stack_note: Some("rate_limited: at most one stack capture per process every 10s".into()),
            stack_wait_seconds: None,
        }));
        limited.pid = 1;
        assert!(render_table(&[limited]).contains("; no stack: rate_limited: at most one"));
    }
}
