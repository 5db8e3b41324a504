//! The provider the benchmark fronts: Morph Cloud's instance API (the endpoints Corral's
//! `morph` adapter calls, answered in Morph's shapes) on a loopback port, answering every
//! request after a configurable delay and doing no other work, so that what a run measures is
//! Corral, not the fake. It counts requests and accepted TCP connections: their difference is
//! how many requests came on a reused connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use axum::{Json, Router};
use serde_json::{Value, json};

/// The bearer key the fake accepts.
pub(crate) const API_KEY: &str = "bench-morph-key";

#[derive(Default)]
struct Counters {
    delay_us: AtomicU64,
    requests: AtomicU64,
    connections: AtomicU64,
    next: AtomicU64,
}

/// A running fake.
#[derive(Clone)]
pub(crate) struct Fake {
    counters: Arc<Counters>,
    /// `http://127.0.0.1:<port>/api`: Morph's base URL.
    pub(crate) base_url: String,
}

/// Requests and accepted connections so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) requests: u64,
    pub(crate) connections: u64,
}

impl Seen {
    /// Share of the requests between `before` and `self` that came on a connection opened
    /// earlier.
    pub(crate) fn reuse_since(self, before: Seen) -> f64 {
        let requests = self.requests - before.requests;
        let fresh = self.connections - before.connections;
        if requests == 0 {
            return 0.0;
        }
        requests.saturating_sub(fresh) as f64 / requests as f64
    }
}

impl Fake {
    /// Starts the fake on a loopback port, on the current runtime.
    pub(crate) async fn start() -> Result<Self, String> {
        let counters = Arc::new(Counters::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot bind the fake provider: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("fake provider address: {e}"))?;
        let counted = counters.clone();
        let listener = listener.tap_io(move |tcp| {
            counted.connections.fetch_add(1, Ordering::Relaxed);
            let _ = tcp.set_nodelay(true);
        });
        let app = Router::new()
            .route("/api/instance", post(start_instance).get(list_instances))
            .route(
                "/api/instance/{id}",
                get(get_instance).delete(delete_instance),
            )
            .route("/api/instance/{id}/exec", post(exec))
            .with_state(counters.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            counters,
            base_url: format!("http://{addr}/api"),
        })
    }

    /// Every later answer waits `delay` first.
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.counters.delay_us.store(
            u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Requests and connections so far.
    pub(crate) fn seen(&self) -> Seen {
        Seen {
            requests: self.counters.requests.load(Ordering::Relaxed),
            connections: self.counters.connections.load(Ordering::Relaxed),
        }
    }
}

async fn admit(counters: &Counters, headers: &HeaderMap) -> Result<(), Response> {
    counters.requests.fetch_add(1, Ordering::Relaxed);
    let delay = counters.delay_us.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_micros(delay)).await;
    }
    let expected = format!("Bearer {API_KEY}");
    if headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v != expected)
    {
        return Err((StatusCode::UNAUTHORIZED, Json(json!({"detail": "bad key"}))).into_response());
    }
    Ok(())
}

fn instance(id: &str, metadata: Value) -> Value {
    json!({
        "id": id,
        "object": "instance",
        "created": 1_750_000_000u64,
        "status": "ready",
        "refs": {"snapshot_id": "snapshot_bench", "image_id": "morphvm-minimal"},
        "metadata": metadata,
    })
}

async fn start_instance(
    State(c): State<Arc<Counters>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Err(r) = admit(&c, &headers).await {
        return r;
    }
    let n = c.next.fetch_add(1, Ordering::Relaxed);
    let metadata = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
    Json(instance(&format!("morphvm_{n:08x}"), metadata)).into_response()
}

async fn list_instances(State(c): State<Arc<Counters>>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&c, &headers).await {
        return r;
    }
    Json(json!({"data": []})).into_response()
}

async fn get_instance(
    State(c): State<Arc<Counters>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = admit(&c, &headers).await {
        return r;
    }
    Json(instance(&id, json!({}))).into_response()
}

async fn delete_instance(State(c): State<Arc<Counters>>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&c, &headers).await {
        return r;
    }
    Json(json!({})).into_response()
}

async fn exec(State(c): State<Arc<Counters>>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&c, &headers).await {
        return r;
    }
    Json(json!({"exit_code": 0, "stdout": "", "stderr": ""})).into_response()
}
