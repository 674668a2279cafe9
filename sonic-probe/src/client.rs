//! `sonic-probe findings`: asks a running daemon for its findings and
//! prints them as a table a person can read (or as the raw JSON).

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use hyper_util::rt::TokioIo;

use crate::{
    error::{Error, Result},
    findings::{Detail, Finding},
};

/// The daemon's address as `http://HOST:PORT`, checked.
pub fn parse_url(s: &str) -> Result<Uri> {
    let uri: Uri = s.parse().map_err(|_| Error::usage(format!("--url {s}: not a URL")))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(Error::usage(format!("--url {s}: use http://HOST:PORT, e.g. http://127.0.0.1:9580")));
    }
    Ok(uri)
}

/// GET `path` from the daemon at `base`; the body on 200.
pub async fn get(base: &Uri, path: &str) -> anyhow::Result<Bytes> {
    let authority = base.authority().expect("checked by parse_url").clone();
    let addr = if authority.port().is_some() { authority.to_string() } else { format!("{authority}:80") };
    let stream =
        tokio::time::timeout(std::time::Duration::from_secs(10), tokio::net::TcpStream::connect(&addr))
            .await
            .map_err(|_| anyhow!("timed out"))?
            .with_context(|| format!("cannot connect to {addr}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, authority.as_str())
        .body(Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(30), sender.send_request(req))
        .await
        .map_err(|_| anyhow!("no answer within 30 s"))??;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{path}: HTTP {status}: {}", String::from_utf8_lossy(&body).trim());
    }
    Ok(body)
}

pub fn run(url: &str, json: bool) -> Result<()> {
    let base = parse_url(url)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("async runtime")?;
    let body = rt.block_on(get(&base, "/findings")).with_context(|| {
        format!("cannot get findings from sonic-probe at {url} (is `sonic-probe run` running?)")
    })?;
    if json {
        println!("{}", String::from_utf8_lossy(&body).trim_end());
        return Ok(());
    }
    let findings: Vec<Finding> =
        serde_json::from_slice(&body).context("the daemon's answer is not findings JSON")?;
    print!("{}", render_table(&findings));
    Ok(())
}

/// `1.5 GiB`, `64 KiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// What a finding says, in one line of prose.
pub fn describe(d: &Detail) -> String {
    match d {
        Detail::FutexStall { tid, thread, wait_seconds, op, uaddr, waker_tid, waker_thread, count } => {
            let woken = match (waker_thread, waker_tid) {
                (Some(name), Some(t)) => format!(", woken by {name} (tid {t})"),
                (None, Some(t)) => format!(", woken by tid {t}"),
                _ => String::new(),
            };
            let plural = if *count == 1 { "" } else { "s" };
            format!("thread {thread} (tid {tid}) waited {wait_seconds:.2} s in {op} on {uaddr}{woken}; {count} stall{plural}")
        }
        Detail::RepeatedOpen { path, file_class, count, bytes_read } => {
            format!(
                "{path} ({file_class}) opened {count} times, {} read through those opens",
                human_bytes(*bytes_read)
            )
        }
        Detail::SmallReads { path, file_class, count, bytes, typical_size } => format!(
            "{path} ({file_class}) read in small pieces: {count} reads of about {typical_size} B, {} in all",
            human_bytes(*bytes)
        ),
        Detail::MmapChurn { size_bytes, count, path } => format!(
            "{} {} mapped and unmapped {count} times",
            human_bytes(*size_bytes),
            path.as_ref().map_or_else(|| "anonymous".to_string(), |p| format!("of {p}"))
        ),
        Detail::SyscallErrors { syscall, errno, count, paths, length } => {
            let mut s = format!("{syscall} failed {count} times with {errno}");
            if !paths.is_empty() {
                s.push_str(&format!(": {}", paths.join(", ")));
            }
            if let Some(l) = length {
                s.push_str(&format!(" (length {})", human_bytes(*l)));
            }
            s
        }
    }
}

/// The findings as an aligned table.
pub fn render_table(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no findings\n".to_string();
    }
    let rows: Vec<[String; 5]> = findings
        .iter()
        .map(|f| {
            // 2026-11-29T21:59:02.466Z -> 21:59:02
            let time = f.last_seen.get(11..19).unwrap_or(&f.last_seen).to_string();
            [f.detail.kind().to_string(), f.pid.to_string(), f.comm.clone(), time, describe(&f.detail)]
        })
        .collect();
    let head = ["KIND", "PID", "COMM", "LAST SEEN", "WHAT"];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r.iter()).take(4) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |cols: [&str; 5]| {
        format!(
            "{:<w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {}\n",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3]
        )
    };
    out.push_str(&line(head));
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(detail: Detail) -> Finding {
        Finding {
            detail,
            pid: 4083,
            comm: "python3".into(),
            first_seen: "2026-11-29T21:59:01.820Z".into(),
            last_seen: "2026-11-29T21:59:02.466Z".into(),
        }
    }

    #[test]
    fn urls() {
        assert!(parse_url("http://127.0.0.1:9580").is_ok());
        assert!(parse_url("http://node7:9580/").is_ok());
        for bad in ["127.0.0.1:9580", "https://x:1", "ftp://x", "not a url"] {
            assert!(matches!(parse_url(bad), Err(Error::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(1_500_000_000), "1.4 GiB");
    }

    #[test]
    fn table_reads_like_prose() {
        let t = render_table(&[
            finding(Detail::FutexStall {
                tid: 4083,
                thread: "python3".into(),
                wait_seconds: 3.214567,
                op: "FUTEX_WAIT_PRIVATE".into(),
                uaddr: "0x7f8a2c001234".into(),
                waker_tid: Some(4124),
                waker_thread: Some("loader".into()),
                count: 4,
            }),
            finding(Detail::RepeatedOpen {
                path: "/models/sonic/lip_decoder.pth".into(),
                file_class: "model".into(),
                count: 12,
                bytes_read: 12 << 30,
            }),
            finding(Detail::MmapChurn { size_bytes: 1 << 30, count: 5, path: None }),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("KIND"), "{t}");
        assert!(lines[1].contains(
            "thread python3 (tid 4083) waited 3.21 s in FUTEX_WAIT_PRIVATE on 0x7f8a2c001234, woken by loader (tid 4124); 4 stalls"
        ), "{t}");
        assert!(
            lines[2].contains("/models/sonic/lip_decoder.pth (model) opened 12 times, 12 GiB read"),
            "{t}"
        );
        assert!(lines[3].contains("1 GiB anonymous mapped and unmapped 5 times"), "{t}");
        assert!(lines[1].contains(" 21:59:02 "), "{t}");
        assert_eq!(render_table(&[]), "no findings\n");
    }
}
