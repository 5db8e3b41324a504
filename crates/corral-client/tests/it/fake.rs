//! A scripted API server on a loopback port: it answers each request with the next answer of
//! its script and records what it received (method, path with query, headers, body), so a
//! test checks both the request the client made and how it read the answer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use corral_errors::{ErrorCode, ErrorEnvelope};
use serde_json::Value;

/// One request the server received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    /// The path with its query, e.g. `/v1/snapshots?limit=2`.
    pub(crate) target: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Seen {
    /// A header's value, if present and text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
}

impl Answer {
    /// `status` with a JSON body.
    pub(crate) fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// The v3 envelope of `code`, with the code's own HTTP status and retryable flag.
    pub(crate) fn error(code: ErrorCode) -> Self {
        let envelope = ErrorEnvelope::new(code, format!("scripted {}", code.as_str()), "req_fake");
        Self::json(
            code.http_status(),
            serde_json::to_value(envelope).expect("an envelope is JSON"),
        )
    }

    /// The same answer with a header.
    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Answer>,
    seen: Vec<Seen>,
}

/// The server; it stops when the test's runtime ends.
pub(crate) struct Fake {
    base: String,
    inner: Arc<Mutex<Inner>>,
}

impl Fake {
    /// Starts a server answering `script` in order; a request past its end is answered 400
    /// `invalid_request` (not retryable), which fails the test that made it.
    pub(crate) async fn start(script: Vec<Answer>) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            script: script.into(),
            seen: Vec::new(),
        }));
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base: format!("http://{addr}"),
            inner,
        }
    }

    /// A client of this server with key `crl_test`, retrying fast (5 attempts, 1 ms apart).
    pub(crate) fn client(&self) -> corral_client::Client {
        corral_client::Client::new(&self.base, "crl_test")
            .unwrap()
            .with_retry(corral_client::RetryPolicy {
                attempts: 5,
                base: std::time::Duration::from_millis(1),
                max: std::time::Duration::from_millis(5),
            })
    }

    /// What the server received, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }
}

async fn answer(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let next = {
        let mut inner = inner.lock().unwrap();
        inner.seen.push(Seen {
            method,
            target: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            headers,
            body,
        });
        inner.script.pop_front()
    };
    let a = next.unwrap_or_else(|| Answer::error(ErrorCode::InvalidRequest));
    let mut resp = (StatusCode::from_u16(a.status).unwrap(), axum::Json(a.body)).into_response();
    for (name, value) in a.headers {
        resp.headers_mut().insert(name, value.parse().unwrap());
    }
    resp
}
