//! The HTTP endpoint Prometheus scrapes: GET /metrics, GET /healthz.
//!
//! Small on purpose: only GET (and HEAD) on known paths (404 / 405
//! otherwise), a cap on concurrent connections, on header size and on the
//! time a client may take, so that a slow or hostile client can't tie up
//! the daemon. Encoding a scrape reads BPF maps, so it runs on the blocking
//! pool, not on the event loop.

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{Encoder, TextEncoder};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::findings::FindingsService;

/// Connections served at once; more wait in the kernel's accept queue.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a connection may live.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request head accepted (hyper's minimum is 8 KiB).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What the handlers need.
pub struct HttpState {
    pub registry: prometheus::Registry,
    ready: AtomicBool,
    findings: std::sync::OnceLock<FindingsService>,
}

impl HttpState {
    pub fn new(registry: prometheus::Registry) -> Self {
        HttpState { registry, ready: AtomicBool::new(false), findings: std::sync::OnceLock::new() }
    }

    /// Where GET /findings gets its answer (set once, before ready).
    pub fn set_findings(&self, findings: FindingsService) {
        let _ = self.findings.set(findings);
    }

    /// Called once every program is attached: /healthz turns 200.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// Serves connections until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<HttpState>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.expect("semaphore is never closed");
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, state.clone()));
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
            drop(permit);
        });
    }
}

fn response(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

const TEXT: &str = "text/plain; charset=utf-8";
const INDEX: &str =
    "sonic-probe\n\n/metrics  Prometheus metrics\n/healthz  200 once the probes are attached\n";

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Index,
    Healthz,
    Metrics,
    Findings,
    NotFound,
    MethodNotAllowed,
}

fn route(method: &Method, path: &str) -> Route {
    let route = match path {
        "/" => Route::Index,
        "/healthz" => Route::Healthz,
        "/metrics" => Route::Metrics,
        "/findings" => Route::Findings,
        _ => return Route::NotFound,
    };
    if method != Method::GET && method != Method::HEAD {
        return Route::MethodNotAllowed;
    }
    route
}

fn healthz(ready: bool) -> Response<Full<Bytes>> {
    if ready {
        response(StatusCode::OK, TEXT, "ok\n")
    } else {
        response(StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting\n")
    }
}

async fn handle(req: Request<Incoming>, state: Arc<HttpState>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match route(req.method(), req.uri().path()) {
        Route::Index => response(StatusCode::OK, TEXT, INDEX),
        Route::Healthz => healthz(state.is_ready()),
        Route::Metrics => metrics(state).await,
        Route::Findings => findings(state).await,
        Route::NotFound => response(StatusCode::NOT_FOUND, TEXT, "not found\n"),
        Route::MethodNotAllowed => {
            let mut r = response(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n");
            r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            r
        }
    })
}

async fn metrics(state: Arc<HttpState>) -> Response<Full<Bytes>> {
    let encoded = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&state.registry.gather(), &mut buf).map(|_| buf)
    })
    .await;
    match encoded {
        Ok(Ok(buf)) => response(StatusCode::OK, TextEncoder::new().format_type(), buf),
        Ok(Err(e)) => response(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
        Err(e) => response(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
    }
}

async fn findings(state: Arc<HttpState>) -> Response<Full<Bytes>> {
    let Some(service) = state.findings.get().cloned() else {
        return response(StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting\n");
    };
    let json = tokio::task::spawn_blocking(move || serde_json::to_vec_pretty(&service.current().0)).await;
    match json {
        Ok(Ok(body)) => response(StatusCode::OK, "application/json", body),
        Ok(Err(e)) => response(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
        Err(e) => response(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(&Method::GET, "/metrics"), Route::Metrics);
        assert_eq!(route(&Method::HEAD, "/healthz"), Route::Healthz);
        assert_eq!(route(&Method::GET, "/"), Route::Index);
        assert_eq!(route(&Method::GET, "/findings"), Route::Findings);
        assert_eq!(route(&Method::POST, "/metrics"), Route::MethodNotAllowed);
        assert_eq!(route(&Method::DELETE, "/healthz"), Route::MethodNotAllowed);
        assert_eq!(route(&Method::GET, "/metrics/x"), Route::NotFound);
        assert_eq!(route(&Method::POST, "/admin"), Route::NotFound);
    }

    #[test]
    fn healthz_is_503_until_ready() {
        assert_eq!(healthz(false).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(healthz(true).status(), StatusCode::OK);
        let state = HttpState::new(prometheus::Registry::new());
        assert!(!state.is_ready());
        state.set_ready();
        assert!(state.is_ready());
    }
}
