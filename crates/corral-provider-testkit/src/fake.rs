//! Helpers for provider fakes: an axum server on a loopback port, a log of the requests it
//! received, and fault injection.
//!
//! An adapter's `tests/fake.rs` builds an axum `Router` that speaks its provider's API
//! (rejecting what the provider's published description rejects), then wraps it:
//!
//! ```no_run
//! # async fn demo(router: axum::Router) {
//! use corral_provider_testkit::fake::{Fault, FakeServer};
//! let server = FakeServer::start(router).await;
//! server.faults().arm(Fault::status(429).retry_after(7));
//! // point the adapter at server.base_url() …
//! # }
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::oneshot;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The method.
    pub method: Method,
    /// The path (no query).
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// What a fault does to the next matching request.
#[derive(Debug, Clone)]
pub enum FaultKind {
    /// Answer with this status (and `Retry-After`, body) without calling the handler.
    Status {
        /// HTTP status.
        status: u16,
        /// `Retry-After` seconds, if any.
        retry_after: Option<u64>,
        /// Body.
        body: String,
    },
    /// Call the handler (the request is applied), then wait this long before answering: a
    /// client with a shorter timeout sees a timeout *after* the request was sent.
    DelayAfterHandler(Duration),
    /// Answer 200 with this many bytes of body, without calling the handler.
    Oversized(usize),
    /// Call the handler, then answer 200 with a body that is not valid JSON.
    Malformed,
    /// Call the handler, then send its answer's status and headers at once but the body one
    /// byte per `Duration`.
    SlowBody(Duration),
    /// Call the handler (the request is applied), then send its status and headers with the
    /// full `Content-Length` but only the first half of the body, and break the connection:
    /// the client sees a truncated body.
    Truncated,
    /// Call the handler (the request is applied), send its status and headers, then break the
    /// connection before any of the body.
    ResetAfterHeaders,
    /// Call the handler (the request is applied), then answer 200 with this many bytes of body,
    /// streamed in 64 KiB chunks without `Content-Length` and never held in memory whole (for
    /// bodies of hundreds of MB).
    StreamedOversized(usize),
    /// Call the handler (the request is applied), then answer with its status and a JSON body
    /// in which every string under an id-like key (`id`, `name`, `sandboxID`, `sandboxId`,
    /// `sandbox_id`, at any depth) is replaced by [`HOSTILE_ID`]: a provider (or whoever
    /// answers in its place) naming a path and markup as the sandbox.
    HostileId,
}

/// The sandbox id [`FaultKind::HostileId`] answers: a path that climbs out of a provider URL,
/// with markup.
pub const HOSTILE_ID: &str = "../../x<b>";

const ID_KEYS: [&str; 5] = ["id", "name", "sandboxID", "sandboxId", "sandbox_id"];

fn replace_ids(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if v.is_string() && ID_KEYS.contains(&key.as_str()) {
                    *v = serde_json::Value::String(HOSTILE_ID.to_owned());
                } else {
                    replace_ids(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(replace_ids),
        _ => {}
    }
}

/// A body stream that yields `bytes`, pauses (so that what was sent is flushed), then fails
/// with an I/O error: hyper then aborts the connection instead of ending the message.
fn broken_body(bytes: Bytes) -> Body {
    let first = (!bytes.is_empty()).then(|| Ok::<_, std::io::Error>(bytes));
    let broken = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected fault",
        ))
    });
    Body::from_stream(futures::StreamExt::chain(
        futures::stream::iter(first),
        broken,
    ))
}

/// A fault, optionally limited to requests whose path contains a substring.
#[derive(Debug, Clone)]
pub struct Fault {
    kind: FaultKind,
    path_contains: Option<String>,
    method: Option<Method>,
    credential: Option<String>,
}

impl Fault {
    /// Answer with `status` (a JSON error body) without calling the handler.
    pub fn status(status: u16) -> Self {
        Self::new(FaultKind::Status {
            status,
            retry_after: None,
            body: format!("{{\"message\":\"injected fault {status}\"}}"),
        })
    }

    /// Any fault kind.
    pub fn new(kind: FaultKind) -> Self {
        Self {
            kind,
            path_contains: None,
            method: None,
            credential: None,
        }
    }

    /// Adds `Retry-After` (only meaningful for [`Fault::status`]).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let FaultKind::Status { retry_after, .. } = &mut self.kind {
            *retry_after = Some(seconds);
        }
        self
    }

    /// Applies only to requests whose path contains `s`.
    pub fn on_path(mut self, s: &str) -> Self {
        self.path_contains = Some(s.to_owned());
        self
    }

    /// Applies only to requests with this method.
    pub fn on_method(mut self, m: Method) -> Self {
        self.method = Some(m);
        self
    }

    /// Applies only to requests carrying `credential` in some header (whichever header the
    /// provider reads it from): a fault for one credential, e.g. a key without a permission.
    pub fn for_credential(mut self, credential: &str) -> Self {
        self.credential = Some(credential.to_owned());
        self
    }

    fn matches(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|s| path.contains(s))
            && self.credential.as_deref().is_none_or(|c| {
                headers
                    .values()
                    .any(|v| v.to_str().is_ok_and(|v| v.contains(c)))
            })
    }
}

/// Faults armed for the next matching requests, each used once, in order.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<VecDeque<Fault>>>);

impl Faults {
    /// Arms `fault` for the next matching request.
    pub fn arm(&self, fault: Fault) {
        self.0.lock().expect("faults lock").push_back(fault);
    }

    fn take(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<FaultKind> {
        let mut q = self.0.lock().expect("faults lock");
        let pos = q.iter().position(|f| f.matches(method, path, headers))?;
        q.remove(pos).map(|f| f.kind)
    }
}

/// Every request the fake received, in order.
#[derive(Debug, Clone, Default)]
pub struct RequestLog(Arc<Mutex<Vec<Recorded>>>);

impl RequestLog {
    /// A copy of the log.
    pub fn all(&self) -> Vec<Recorded> {
        self.0.lock().expect("log lock").clone()
    }

    /// Requests with this method whose path contains `s`.
    pub fn matching(&self, method: &Method, s: &str) -> Vec<Recorded> {
        self.all()
            .into_iter()
            .filter(|r| r.method == *method && r.path.contains(s))
            .collect()
    }

    /// Forgets everything recorded so far.
    pub fn clear(&self) {
        self.0.lock().expect("log lock").clear();
    }
}

#[derive(Clone)]
struct Shared {
    faults: Faults,
    log: RequestLog,
}

const MAX_RECORDED_BODY: usize = 16 * 1024 * 1024;

async fn intercept(State(shared): State<Shared>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_RECORDED_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    shared.log.0.lock().expect("log lock").push(Recorded {
        method: parts.method.clone(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers.clone(),
        body: bytes.clone(),
    });
    let fault = shared
        .faults
        .take(&parts.method, parts.uri.path(), &parts.headers);
    let req = Request::from_parts(parts, Body::from(bytes));
    match fault {
        None => next.run(req).await,
        Some(FaultKind::Status {
            status,
            retry_after,
            body,
        }) => {
            let mut resp = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                [("content-type", "application/json")],
                body,
            )
                .into_response();
            if let Some(s) = retry_after {
                resp.headers_mut()
                    .insert("retry-after", HeaderValue::from(s));
            }
            resp
        }
        Some(FaultKind::DelayAfterHandler(d)) => {
            let resp = next.run(req).await;
            tokio::time::sleep(d).await;
            resp
        }
        Some(FaultKind::Oversized(n)) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            vec![b' '; n],
        )
            .into_response(),
        Some(FaultKind::Malformed) => {
            let _ = next.run(req).await;
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                "{\"id\": \"trunc",
            )
                .into_response()
        }
        Some(FaultKind::SlowBody(per_byte)) => {
            let resp = next.run(req).await;
            let (parts, body) = resp.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY)
                .await
                .unwrap_or_default();
            let stream = futures::stream::unfold(0usize, move |i| {
                let bytes = bytes.clone();
                async move {
                    if i >= bytes.len() {
                        return None;
                    }
                    tokio::time::sleep(per_byte).await;
                    Some((Ok::<_, std::io::Error>(bytes.slice(i..=i)), i + 1))
                }
            });
            let mut resp = Response::from_parts(parts, Body::from_stream(stream));
            resp.headers_mut().remove("content-length");
            resp
        }
        Some(FaultKind::Truncated) => {
            let resp = next.run(req).await;
            let (mut parts, body) = resp.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY)
                .await
                .unwrap_or_default();
            parts
                .headers
                .insert("content-length", HeaderValue::from(bytes.len()));
            Response::from_parts(parts, broken_body(bytes.slice(..bytes.len() / 2)))
        }
        Some(FaultKind::ResetAfterHeaders) => {
            let resp = next.run(req).await;
            let (mut parts, _) = resp.into_parts();
            parts.headers.remove("content-length");
            Response::from_parts(parts, broken_body(Bytes::new()))
        }
        Some(FaultKind::HostileId) => {
            let resp = next.run(req).await;
            let (mut parts, body) = resp.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_RECORDED_BODY)
                .await
                .unwrap_or_default();
            let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                return Response::from_parts(parts, Body::from(bytes));
            };
            replace_ids(&mut json);
            let body = json.to_string();
            parts
                .headers
                .insert("content-length", HeaderValue::from(body.len()));
            Response::from_parts(parts, Body::from(body))
        }
        Some(FaultKind::StreamedOversized(n)) => {
            let _ = next.run(req).await;
            const CHUNK: usize = 64 * 1024;
            let chunk = Bytes::from(vec![b' '; CHUNK]);
            let stream = futures::stream::unfold(0usize, move |sent| {
                let chunk = chunk.clone();
                async move {
                    if sent >= n {
                        return None;
                    }
                    let take = CHUNK.min(n - sent);
                    Some((Ok::<_, std::io::Error>(chunk.slice(..take)), sent + take))
                }
            });
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                Body::from_stream(stream),
            )
                .into_response()
        }
    }
}

/// A provider fake on `127.0.0.1:<free port>`; shut down when dropped.
pub struct FakeServer {
    addr: SocketAddr,
    faults: Faults,
    log: RequestLog,
    _shutdown: oneshot::Sender<()>,
}

impl FakeServer {
    /// Serves `router` (wrapped with the request log and fault injection).
    pub async fn start(router: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let shared = Shared {
            faults: Faults::default(),
            log: RequestLog::default(),
        };
        let app = router.layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            intercept,
        ));
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Self {
            addr,
            faults: shared.faults,
            log: shared.log,
            _shutdown: tx,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Fault injection for this server.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The requests received so far.
    pub fn log(&self) -> &RequestLog {
        &self.log
    }
}

/// A loopback address on which nothing listens (for connection-refused tests).
pub async fn refused_base_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{addr}")
}

/// One part of a `multipart/form-data` body.
#[derive(Debug, Clone)]
pub struct FormPart {
    /// The field name.
    pub name: String,
    /// The file name, if the part is a file.
    pub filename: Option<String>,
    /// The content.
    pub data: Bytes,
}

/// Parses a `multipart/form-data` body (for fakes of file-upload endpoints); `None` when the
/// content type has no boundary or the body does not follow it.
pub fn parse_multipart(content_type: &str, body: &[u8]) -> Option<Vec<FormPart>> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()?
        .trim_matches('"');
    let delimiter = format!("--{boundary}").into_bytes();
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay.get(from..)?
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| i + from)
    };
    let mut parts = Vec::new();
    let mut pos = find(body, &delimiter, 0)? + delimiter.len();
    loop {
        if body.get(pos..pos + 2)? == b"--" {
            return Some(parts);
        }
        pos += 2; // CRLF after the delimiter
        let headers_end = find(body, b"\r\n\r\n", pos)?;
        let headers = std::str::from_utf8(&body[pos..headers_end]).ok()?;
        let data_start = headers_end + 4;
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(&delimiter);
        let data_end = find(body, &closing, data_start)?;
        let mut name = None;
        let mut filename = None;
        for line in headers.split("\r\n") {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            if !key.trim().eq_ignore_ascii_case("content-disposition") {
                continue;
            }
            for attr in value.split(';') {
                let attr = attr.trim();
                if let Some(v) = attr.strip_prefix("name=") {
                    name = Some(v.trim_matches('"').to_owned());
                } else if let Some(v) = attr.strip_prefix("filename=") {
                    filename = Some(v.trim_matches('"').to_owned());
                }
            }
        }
        parts.push(FormPart {
            name: name?,
            filename,
            data: Bytes::copy_from_slice(&body[data_start..data_end]),
        });
        pos = data_end + closing.len();
    }
}
