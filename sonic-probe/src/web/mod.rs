//! The HTTP endpoint Prometheus scrapes: GET /metrics, GET /findings (the
//! detectors' findings as JSON), GET /healthz.
//!
//! Small on purpose: only GET (and HEAD) on known paths (404 / 405
//! otherwise), a cap on concurrent connections, on header size and on the
//! time a client may take, so that a slow or hostile client can't tie up
//! the daemon. When every connection slot is taken, the connection idle the
//! longest (no request in progress) is closed to make room, so idle or
//! half-sent connections can't keep a scrape waiting for the header
//! timeout. Encoding a scrape reads BPF maps, so it runs on the blocking
//! pool, not on the event loop. TLS and basic auth come from the web-config
//! ([`crate::web::web_config`]); every path but /healthz (what orchestrators
//! probe) needs the credentials when users are configured.

pub mod web_config;

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{Encoder, TextEncoder};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{Notify, Semaphore},
};

use crate::{
    findings::{PathDisplay, Source},
    web::web_config::WebConfig,
};

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
    findings: std::sync::OnceLock<Arc<dyn Source>>,
    /// TLS and users; replaced whole on SIGHUP (new connections get it).
    web: std::sync::RwLock<Arc<WebConfig>>,
    /// How much of a path /findings shows.
    paths: std::sync::RwLock<PathDisplay>,
}

impl HttpState {
    pub fn new(registry: prometheus::Registry) -> Self {
        HttpState {
            registry,
            ready: AtomicBool::new(false),
            findings: std::sync::OnceLock::new(),
            web: std::sync::RwLock::new(Arc::new(WebConfig::none())),
            paths: std::sync::RwLock::new(PathDisplay::Full),
        }
    }

    /// The web-config for connections accepted from now on.
    pub fn set_web_config(&self, web: Arc<WebConfig>) {
        *self.web.write().unwrap_or_else(|e| e.into_inner()) = web;
    }

    fn web_config(&self) -> Arc<WebConfig> {
        self.web.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How /findings shows paths from now on.
    pub fn set_path_display(&self, paths: PathDisplay) {
        *self.paths.write().unwrap_or_else(|e| e.into_inner()) = paths;
    }

    fn path_display(&self) -> PathDisplay {
        *self.paths.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Where GET /findings gets its answer (set once, before ready).
    pub fn set_findings(&self, findings: Arc<dyn Source>) {
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

/// The open connections, so that the one idle the longest can be closed
/// when a new one needs its slot.
#[derive(Default)]
struct Connections {
    next_id: u64,
    open: HashMap<u64, Connection>,
}

struct Connection {
    /// When it last had no request in progress (None: one is).
    idle_since: Option<Instant>,
    /// Closes it.
    shed: Arc<Notify>,
}

impl Connections {
    fn add(&mut self) -> (u64, Arc<Notify>) {
        self.next_id += 1;
        let shed = Arc::new(Notify::new());
        self.open.insert(self.next_id, Connection { idle_since: Some(Instant::now()), shed: shed.clone() });
        (self.next_id, shed)
    }

    /// Marks a connection busy (a request in progress) or idle.
    fn set_busy(&mut self, id: u64, busy: bool) {
        if let Some(c) = self.open.get_mut(&id) {
            c.idle_since = if busy { None } else { Some(Instant::now()) };
        }
    }

    /// Closes the connection idle the longest; false if none is idle.
    fn shed_longest_idle(&mut self) -> bool {
        let oldest = self.open.iter().filter_map(|(id, c)| c.idle_since.map(|t| (t, *id))).min();
        match oldest.and_then(|(_, id)| self.open.remove(&id)) {
            Some(c) => {
                c.shed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Serves connections until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<HttpState>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = Arc::new(Mutex::new(Connections::default()));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Every slot is taken: make room by closing the connection
                // idle the longest; if every one is busy, wait for one.
                connections.lock().expect("connections lock").shed_longest_idle();
                slots.clone().acquire_owned().await.expect("semaphore is never closed")
            }
        };
        let (id, shed) = connections.lock().expect("connections lock").add();
        let state = state.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            let tracker = Tracker { id, connections: connections.clone() };
            tokio::select! {
                _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection(stream, state, tracker)) => {}
                _ = shed.notified() => {}
            }
            connections.lock().expect("connections lock").open.remove(&id);
            drop(permit);
        });
    }
}

/// The answer to plain HTTP on the TLS port (as Go's servers give it).
const PLAIN_HTTP_TO_TLS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Marks its connection busy while a request is answered, idle otherwise.
#[derive(Clone)]
struct Tracker {
    id: u64,
    connections: Arc<Mutex<Connections>>,
}

impl Tracker {
    fn set_busy(&self, busy: bool) {
        self.connections.lock().expect("connections lock").set_busy(self.id, busy);
    }
}

/// One connection, TLS or not as the web-config in force says.
async fn connection(stream: TcpStream, state: Arc<HttpState>, tracker: Tracker) {
    let web = state.web_config();
    let Some(acceptor) = web.tls() else {
        return serve_http(stream, state, web, tracker).await;
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => return refuse_plain_http(stream).await,
        _ => return,
    }
    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_http(tls, state, web, tracker).await,
        Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

/// Answers plain HTTP on the TLS port with a 400 the client can read: the
/// request head is read first (bounded in size and time), and the
/// connection is closed only after the client has had the answer, since
/// closing with unread data resets it and the answer is lost.
async fn refuse_plain_http(mut stream: TcpStream) {
    let mut buf = [0u8; 4096];
    let mut head = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            head.extend_from_slice(&buf[..n]);
            if head.len() > MAX_HEAD_BYTES || head.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let _ = stream.write_all(PLAIN_HTTP_TO_TLS).await;
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Ok(1..) = stream.read(&mut buf).await {}
    })
    .await;
}

async fn serve_http<S>(stream: S, state: Arc<HttpState>, web: Arc<WebConfig>, tracker: Tracker)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let (state, web, tracker) = (state.clone(), web.clone(), tracker.clone());
        async move {
            tracker.set_busy(true);
            let response = handle(req, state, web).await;
            tracker.set_busy(false);
            response
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let _ = conn.await;
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
    "sonic-probe\n\n/metrics   Prometheus metrics\n/findings  what it found, JSON\n/healthz   200 once the probes are attached\n";

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

async fn handle(
    req: Request<Incoming>,
    state: Arc<HttpState>,
    web: Arc<WebConfig>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let route = route(req.method(), req.uri().path());
    if route != Route::Healthz && web.needs_auth() {
        let authorization = req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes().to_vec());
        let check = web.clone();
        // bcrypt is slow on purpose: off the event loop.
        let ok = tokio::task::spawn_blocking(move || check.authorized(authorization.as_deref()))
            .await
            .unwrap_or(false);
        if !ok {
            let mut r = response(StatusCode::UNAUTHORIZED, TEXT, "Unauthorized\n");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"sonic-probe\""),
            );
            return Ok(with_headers(r, &web));
        }
    }
    let r = match route {
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
    };
    Ok(with_headers(r, &web))
}

/// The web-config's response headers.
fn with_headers(mut r: Response<Full<Bytes>>, web: &WebConfig) -> Response<Full<Bytes>> {
    for (name, value) in web.headers() {
        r.headers_mut().insert(name.clone(), value.clone());
    }
    r
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
    let paths = state.path_display();
    let json = tokio::task::spawn_blocking(move || {
        let mut findings = service.current().0;
        crate::findings::show_paths(&mut findings, paths);
        serde_json::to_vec_pretty(&findings)
    })
    .await;
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
    fn the_connection_idle_the_longest_is_shed_never_a_busy_one() {
        let mut c = Connections::default();
        let (first, _) = c.add();
        let (second, _) = c.add();
        let (third, _) = c.add();
        c.set_busy(first, true);
        c.set_busy(third, true);
        c.set_busy(third, false); // idle again, since after the second
        assert!(c.shed_longest_idle());
        assert!(c.open.contains_key(&first) && !c.open.contains_key(&second));
        assert!(c.shed_longest_idle());
        assert!(!c.shed_longest_idle(), "the busy one stays");
        assert!(c.open.contains_key(&first));
    }

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
