//! `sonic-probe top`: the node at a glance in a terminal, for the minute
//! before Grafana is open. It reads only the daemon's HTTP endpoints (the
//! same connection options as `findings`: TLS, client certificates, basic
//! auth), so it needs no privileges and the daemon pays nothing for it but
//! serving the scrapes. Every rate is the difference of two scrapes of
//! /metrics over the interval between them ([`view::View`]); the screen is
//! text ([`text`]); `--once` prints one and exits, else [`live`] redraws it
//! every interval until `q`.

pub mod live;
pub mod scrape;
pub mod text;
pub mod view;

use std::time::Instant;

use anyhow::Context;
pub use view::SortKey;

use crate::{
    client::{render_table, Endpoint},
    config::cli::TopArgs,
    error::Result,
    findings::Finding,
};

/// One scrape of /metrics and when it was read.
pub struct Scraped {
    pub at: Instant,
    pub samples: Vec<scrape::Sample>,
}

/// Reads /metrics.
pub async fn scrape(endpoint: &Endpoint) -> anyhow::Result<Scraped> {
    let body = endpoint.get("/metrics").await?;
    let at = Instant::now();
    let text = std::str::from_utf8(&body).context("/metrics is not UTF-8")?;
    Ok(Scraped { at, samples: scrape::parse(text)? })
}

/// Reads /findings.
pub async fn findings(endpoint: &Endpoint) -> anyhow::Result<Vec<Finding>> {
    let body = endpoint.get("/findings").await?;
    serde_json::from_slice(&body).context("the daemon's answer is not findings JSON")
}

/// The view of the interval between two scrapes, with the findings.
pub fn view_of(before: &Scraped, after: &Scraped, findings: &[Finding]) -> view::View {
    let seconds = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
    view::View::new(&before.samples, &after.samples, seconds, findings)
}

/// The terminal's width, when stdout is one.
pub fn terminal_width() -> Option<usize> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills the winsize it is given.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// The findings of the rows a filter keeps: of the processes of `view`
/// (arranged with that filter, which keeps a process for its workload's,
/// its own or a thread's name), and those whose process or workload name
/// has the filter in it.
pub fn matching<'a>(findings: &'a [Finding], filter: &str, view: &view::View) -> Vec<&'a Finding> {
    let shown = |f: &Finding| {
        view.workloads
            .iter()
            .any(|w| w.name == f.workload.name && w.processes.iter().any(|p| p.comm == f.comm))
    };
    findings
        .iter()
        .filter(|f| {
            filter.is_empty() || f.comm.contains(filter) || f.workload.name.contains(filter) || shown(f)
        })
        .collect()
}

pub fn run(args: &TopArgs) -> Result<()> {
    let url = &args.connection.url;
    let endpoint = Endpoint::new(url, &args.connection.client_options())?;
    if !args.once {
        return live::run(args, endpoint);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("async runtime")?;
    let unreachable = || format!("cannot read sonic-probe at {url} (is `sonic-probe run` running?)");
    let (before, after, found) = rt
        .block_on(async {
            let before = scrape(&endpoint).await?;
            tokio::time::sleep(args.interval).await;
            let after = scrape(&endpoint).await?;
            anyhow::Ok((before, after, findings(&endpoint).await?))
        })
        .with_context(unreachable)?;
    let view = view_of(&before, &after, &found).arranged(args.sort, &args.filter);
    let title = format!("sonic-probe top {url}");
    print!("{}", text::screen(&view, &title, args.sort, args.threads, terminal_width()));
    let shown: Vec<Finding> = matching(&found, &args.filter, &view).into_iter().cloned().collect();
    print!("\nFindings:\n{}", render_table(&shown));
    Ok(())
}
