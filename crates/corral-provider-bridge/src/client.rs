//! One method per bridge route. Each call picks the bridge (the context's URL, pinned to the
//! addresses the server vetted, or the operator's configured one) and presents the call's
//! credential as a bearer key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use corral_domain::Provider;
use corral_provider::{CallContext, ExposeSecret as _, ProviderError, Result};
use corral_provider_http::reqwest::{Method, Response, header};
use corral_provider_http::{
    Auth, Failure, HttpConfig, ProviderHttp, parse_json, path_segment, read_capped,
};

use crate::api::{self, ErrorBody, codes};

/// Clients kept for distinct (URL, pinned addresses) pairs; the cache is emptied when full.
const MAX_CLIENTS: usize = 64;

/// A failed call whose answer may say "this route does not exist here", with the answer's
/// text already scrubbed of the call's credential (empty when no answer came back).
pub(crate) struct Refusal(pub(crate) Failure, pub(crate) String);

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Self {
        Refusal(failure, String::new())
    }
}

impl Refusal {
    /// The error body's `code`, when the bridge sent the contract's error body.
    pub(crate) fn code(&self) -> Option<String> {
        serde_json::from_slice::<ErrorBody>(&self.0.body)
            .ok()
            .map(|b| b.code)
    }

    /// Whether the bridge answered that it does not have the route (an extension it lacks):
    /// 404 without the contract's `sandbox_not_found`, `process_not_found` or
    /// `snapshot_not_found` code, 405 or 501 (`lifecycle_unsupported` among them).
    pub(crate) fn route_absent(&self) -> bool {
        match self.0.status {
            Some(404) => !matches!(
                self.code().as_deref(),
                Some(
                    codes::SANDBOX_NOT_FOUND | codes::PROCESS_NOT_FOUND | codes::SNAPSHOT_NOT_FOUND
                )
            ),
            Some(405 | 501) => true,
            _ => false,
        }
    }

    /// The error, read with the contract's codes: `sandbox_not_found` is the sandbox missing,
    /// and a 403 `invalid_request` (the Worker's answer to a path or cwd outside
    /// `/workspace`) is a rejected request, not a rejected key.
    pub(crate) fn into_error(self, provider: Provider, id: &str) -> ProviderError {
        match (self.0.status, self.code().as_deref()) {
            (_, Some(codes::SANDBOX_NOT_FOUND)) => ProviderError::NotFound {
                provider,
                resource: format!("sandbox {id}"),
            },
            (_, Some(codes::PROCESS_NOT_FOUND)) => ProviderError::NotFound {
                provider,
                resource: format!("process in sandbox {id}"),
            },
            (_, Some(codes::SIGNAL_UNSUPPORTED | codes::STDIN_UNSUPPORTED)) => {
                ProviderError::Unsupported {
                    provider,
                    operation: "commands",
                    reason: format!("the bridge refused: {}", self.1),
                }
            }
            (Some(403), Some(codes::INVALID_REQUEST)) => ProviderError::InvalidRequest {
                provider,
                message: self.1,
            },
            (_, Some(codes::SANDBOX_STOPPED)) => ProviderError::InvalidRequest {
                provider,
                message: format!("sandbox {id} is stopped: resume it first"),
            },
            _ => self.0.error,
        }
    }
}

/// A bridge URL and the addresses it is pinned to (none: resolved normally).
type Target = (String, Option<Vec<SocketAddr>>);

/// The bridge client of one adapter.
#[derive(Debug)]
pub(crate) struct Client {
    provider: Provider,
    configured_url: Option<String>,
    http: HttpConfig,
    clients: Mutex<HashMap<Target, ProviderHttp>>,
}

pub(crate) fn sandbox_path(id: &str, rest: &str) -> String {
    format!("/v1/sandbox/{}{rest}", path_segment(id))
}

pub(crate) fn snapshot_path(sid: &str, rest: &str) -> String {
    format!("/v1/snapshots/{}{rest}", path_segment(sid))
}

impl Client {
    pub(crate) fn new(
        provider: Provider,
        configured_url: Option<String>,
        http: HttpConfig,
    ) -> Result<Self> {
        if let Some(url) = &configured_url {
            // Fail at start-up on an unusable URL rather than on the first call.
            ProviderHttp::new(provider, url, http.clone())?;
        }
        Ok(Self {
            provider,
            configured_url,
            http,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// The HTTP client for this call's bridge: the context's URL (at its pinned addresses
    /// when the server vetted it), else the configured one.
    pub(crate) fn http(&self, ctx: &CallContext) -> Result<ProviderHttp> {
        let (url, pinned) = match (&ctx.context().bridge_url, &self.configured_url) {
            (Some(url), _) => (url.clone(), ctx.pinned_addrs().map(<[SocketAddr]>::to_vec)),
            (None, Some(url)) => (url.clone(), None),
            (None, None) => {
                return Err(ProviderError::MissingContext {
                    provider: self.provider,
                    field: "bridgeUrl",
                });
            }
        };
        let key = (url, pinned);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(http) = clients.get(&key) {
            return Ok(http.clone());
        }
        let http = match &key.1 {
            Some(addrs) => ProviderHttp::pinned(self.provider, &key.0, self.http.clone(), addrs)?,
            None => ProviderHttp::new(self.provider, &key.0, self.http.clone())?,
        }
        .with_auth(Auth::Bearer);
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, http.clone());
        Ok(http)
    }

    async fn send(
        &self,
        http: &ProviderHttp,
        ctx: &CallContext,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
        limit: Duration,
    ) -> std::result::Result<Response, Refusal> {
        self.send_query(http, ctx, method, path, &[], body, limit)
            .await
    }

    #[allow(clippy::too_many_arguments)] // One private helper under the route methods.
    async fn send_query(
        &self,
        http: &ProviderHttp,
        ctx: &CallContext,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<(&'static str, Vec<u8>)>,
        limit: Duration,
    ) -> std::result::Result<Response, Refusal> {
        let mut req = http
            .authed_query(ctx, method, path, query)
            .map_err(|e| Refusal::from(transport(e)))?;
        if let Some((content_type, bytes)) = body {
            req = req.header(header::CONTENT_TYPE, content_type).body(bytes);
        }
        http.send_for_failure(ctx, req, limit).await.map_err(|f| {
            // Redacted before it is cut, so no part of a key straddling the cut survives.
            let secrets: Vec<&str> = ctx
                .credential()
                .map(|c| c.expose_secret())
                .into_iter()
                .collect();
            let excerpt = corral_provider_http::error_message_redacted(&f.body, &secrets);
            Refusal(f, excerpt)
        })
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        http: &ProviderHttp,
        resp: Response,
    ) -> Result<T> {
        let body = read_capped(self.provider, resp, http.config().max_response_bytes).await?;
        parse_json(self.provider, &body)
    }

    /// `POST /v1/sandbox` with the tag extension.
    pub(crate) async fn create(&self, ctx: &CallContext, tag: &str) -> Result<api::Created> {
        let http = self.http(ctx)?;
        let body = serde_json::to_vec(&api::CreateRequest {
            tag: tag.to_owned(),
        })
        .map_err(|e| self.invalid(e))?;
        let limit = http.config().request_timeout;
        let resp = self
            .send(
                &http,
                ctx,
                Method::POST,
                "/v1/sandbox",
                Some(("application/json", body)),
                limit,
            )
            .await
            .map_err(|r| r.0.error)?;
        self.json(&http, resp).await
    }

    /// `GET /v1/sandbox?tag=` *(extension)*; `Ok(None)` when the bridge lacks the route.
    pub(crate) async fn find(
        &self,
        ctx: &CallContext,
        tag: &str,
    ) -> Result<Option<api::SandboxList>> {
        let http = self.http(ctx)?;
        let limit = http.config().request_timeout;
        let query = [("tag", tag)];
        match self
            .send_query(&http, ctx, Method::GET, "/v1/sandbox", &query, None, limit)
            .await
        {
            Ok(resp) => self.json(&http, resp).await.map(Some),
            Err(r) if r.route_absent() => Ok(None),
            Err(r) => Err(r.0.error),
        }
    }

    /// `GET /v1/sandbox/{id}` *(extension)*; `Ok(None)` when the bridge lacks the route.
    pub(crate) async fn observe(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> Result<Option<api::SandboxInfo>> {
        let http = self.http(ctx)?;
        let limit = http.config().request_timeout;
        match self
            .send(&http, ctx, Method::GET, &sandbox_path(id, ""), None, limit)
            .await
        {
            Ok(resp) => self.json(&http, resp).await.map(Some),
            Err(r) if r.route_absent() => Ok(None),
            Err(r) => Err(r.into_error(self.provider, id)),
        }
    }

    /// `GET /v1/sandbox/{id}/running`.
    pub(crate) async fn running(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> Result<api::RunningResponse> {
        let http = self.http(ctx)?;
        let limit = http.config().request_timeout;
        let resp = self
            .send(
                &http,
                ctx,
                Method::GET,
                &sandbox_path(id, "/running"),
                None,
                limit,
            )
            .await
            .map_err(|r| r.into_error(self.provider, id))?;
        self.json(&http, resp).await
    }

    /// `DELETE /v1/sandbox/{id}`.
    pub(crate) async fn delete(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let http = self.http(ctx)?;
        let limit = http.config().request_timeout;
        self.send(
            &http,
            ctx,
            Method::DELETE,
            &sandbox_path(id, ""),
            None,
            limit,
        )
        .await
        .map(drop)
        .map_err(|r| r.into_error(self.provider, id))
    }

    /// `POST /v1/sandbox/{id}/exec`: the open event stream, which may take `limit` in all.
    pub(crate) async fn exec(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::ExecRequest,
        limit: Duration,
    ) -> std::result::Result<Response, Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let body =
            serde_json::to_vec(body).map_err(|e| Refusal::from(transport(self.invalid(e))))?;
        self.send(
            &http,
            ctx,
            Method::POST,
            &sandbox_path(id, "/exec"),
            Some(("application/json", body)),
            limit,
        )
        .await
    }

    /// `GET /v1/sandbox/{id}/file/{path}`.
    pub(crate) async fn read_file(
        &self,
        ctx: &CallContext,
        id: &str,
        file_path: &str,
    ) -> std::result::Result<Response, Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let limit = http.config().request_timeout;
        self.send(
            &http,
            ctx,
            Method::GET,
            &sandbox_path(id, file_path),
            None,
            limit,
        )
        .await
    }

    /// `PUT /v1/sandbox/{id}/file/{path}` with the raw bytes.
    pub(crate) async fn write_file(
        &self,
        ctx: &CallContext,
        id: &str,
        file_path: &str,
        content: &[u8],
    ) -> std::result::Result<(), Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let limit = http.config().request_timeout;
        self.send(
            &http,
            ctx,
            Method::PUT,
            &sandbox_path(id, file_path),
            Some(("application/octet-stream", content.to_vec())),
            limit,
        )
        .await
        .map(drop)
    }

    /// A JSON request to a process route *(extension)* of sandbox `id`, parsed as `T`.
    async fn process_call<T: serde::de::DeserializeOwned>(
        &self,
        ctx: &CallContext,
        method: Method,
        id: &str,
        rest: &str,
        body: Option<Vec<u8>>,
    ) -> std::result::Result<T, Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let limit = http.config().request_timeout;
        let resp = self
            .send(
                &http,
                ctx,
                method,
                &sandbox_path(id, rest),
                body.map(|b| ("application/json", b)),
                limit,
            )
            .await?;
        self.json(&http, resp)
            .await
            .map_err(|e| Refusal::from(transport(e)))
    }

    fn encode(&self, body: &impl serde::Serialize) -> std::result::Result<Vec<u8>, Refusal> {
        serde_json::to_vec(body).map_err(|e| Refusal::from(transport(self.invalid(e))))
    }

    /// `POST /v1/sandbox/{id}/process` *(extension)*.
    pub(crate) async fn start_process(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::StartProcessRequest,
    ) -> std::result::Result<api::ProcessInfo, Refusal> {
        let body = self.encode(body)?;
        self.process_call(ctx, Method::POST, id, "/process", Some(body))
            .await
    }

    /// `GET /v1/sandbox/{id}/process/{process_id}` *(extension)*.
    pub(crate) async fn get_process(
        &self,
        ctx: &CallContext,
        id: &str,
        process_id: &str,
    ) -> std::result::Result<api::ProcessInfo, Refusal> {
        let rest = format!("/process/{}", path_segment(process_id));
        self.process_call(ctx, Method::GET, id, &rest, None).await
    }

    /// `GET /v1/sandbox/{id}/process/{process_id}/logs?stdout=&stderr=` *(extension)*: the
    /// open event stream, which may take `limit` in all.
    pub(crate) async fn process_logs(
        &self,
        ctx: &CallContext,
        id: &str,
        process_id: &str,
        from: (u64, u64),
        limit: Duration,
    ) -> std::result::Result<Response, Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let (stdout, stderr) = (from.0.to_string(), from.1.to_string());
        let path = sandbox_path(id, &format!("/process/{}/logs", path_segment(process_id)));
        self.send_query(
            &http,
            ctx,
            Method::GET,
            &path,
            &[("stdout", &stdout), ("stderr", &stderr)],
            None,
            limit,
        )
        .await
    }

    /// `POST /v1/sandbox/{id}/process/{process_id}/stdin` *(extension)*.
    pub(crate) async fn write_stdin(
        &self,
        ctx: &CallContext,
        id: &str,
        process_id: &str,
        body: &api::StdinRequest,
    ) -> std::result::Result<api::StdinAccepted, Refusal> {
        let body = self.encode(body)?;
        let rest = format!("/process/{}/stdin", path_segment(process_id));
        self.process_call(ctx, Method::POST, id, &rest, Some(body))
            .await
    }

    /// `DELETE /v1/sandbox/{id}/process/{process_id}/stdin` *(extension)*.
    pub(crate) async fn close_stdin(
        &self,
        ctx: &CallContext,
        id: &str,
        process_id: &str,
    ) -> std::result::Result<(), Refusal> {
        let rest = format!("/process/{}/stdin", path_segment(process_id));
        self.process_call::<api::OkResponse>(ctx, Method::DELETE, id, &rest, None)
            .await
            .map(drop)
    }

    /// `POST /v1/sandbox/{id}/process/{process_id}/kill` *(extension)*.
    pub(crate) async fn kill_process(
        &self,
        ctx: &CallContext,
        id: &str,
        process_id: &str,
        body: &api::KillRequest,
    ) -> std::result::Result<(), Refusal> {
        let body = self.encode(body)?;
        let rest = format!("/process/{}/kill", path_segment(process_id));
        self.process_call::<api::OkResponse>(ctx, Method::POST, id, &rest, Some(body))
            .await
            .map(drop)
    }

    /// A JSON request to any route *(lifecycle extension)*, parsed as `T` (`None`: a `204`).
    async fn lifecycle_call<T: serde::de::DeserializeOwned>(
        &self,
        ctx: &CallContext,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> std::result::Result<Option<T>, Refusal> {
        let http = self.http(ctx).map_err(|e| Refusal::from(transport(e)))?;
        let limit = http.config().request_timeout;
        let resp = self
            .send(
                &http,
                ctx,
                method,
                path,
                body.map(|b| ("application/json", b)),
                limit,
            )
            .await?;
        if resp.status().as_u16() == 204 {
            return Ok(None);
        }
        self.json(&http, resp)
            .await
            .map(Some)
            .map_err(|e| Refusal::from(transport(e)))
    }

    /// `lifecycle_call` of a route that answers a body.
    async fn lifecycle_json<T: serde::de::DeserializeOwned>(
        &self,
        ctx: &CallContext,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> std::result::Result<T, Refusal> {
        self.lifecycle_call(ctx, method, path, body)
            .await?
            .ok_or_else(|| {
                Refusal::from(transport(ProviderError::Protocol {
                    provider: self.provider,
                    message: format!("the bridge answered {path} with no body"),
                }))
            })
    }

    /// `POST /v1/sandbox/{id}/stop` *(lifecycle extension)*.
    pub(crate) async fn stop(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> std::result::Result<api::SandboxInfo, Refusal> {
        self.lifecycle_json(ctx, Method::POST, &sandbox_path(id, "/stop"), None)
            .await
    }

    /// `POST /v1/sandbox/{id}/resume` *(lifecycle extension)*.
    pub(crate) async fn resume(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> std::result::Result<api::SandboxInfo, Refusal> {
        self.lifecycle_json(ctx, Method::POST, &sandbox_path(id, "/resume"), None)
            .await
    }

    /// `POST /v1/sandbox/{id}/snapshots` *(lifecycle extension)*.
    pub(crate) async fn snapshot(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::SnapshotRequest,
    ) -> std::result::Result<api::SnapshotInfo, Refusal> {
        let body = self.encode(body)?;
        self.lifecycle_json(
            ctx,
            Method::POST,
            &sandbox_path(id, "/snapshots"),
            Some(body),
        )
        .await
    }

    /// `GET /v1/snapshots/{sid}` *(lifecycle extension)*.
    pub(crate) async fn get_snapshot(
        &self,
        ctx: &CallContext,
        sid: &str,
    ) -> std::result::Result<api::SnapshotInfo, Refusal> {
        self.lifecycle_json(ctx, Method::GET, &snapshot_path(sid, ""), None)
            .await
    }

    /// `DELETE /v1/snapshots/{sid}` *(lifecycle extension)*.
    pub(crate) async fn delete_snapshot(
        &self,
        ctx: &CallContext,
        sid: &str,
    ) -> std::result::Result<(), Refusal> {
        self.lifecycle_call::<serde_json::Value>(ctx, Method::DELETE, &snapshot_path(sid, ""), None)
            .await
            .map(drop)
    }

    /// `POST /v1/snapshots/{sid}/restore` *(lifecycle extension)*: a new sandbox.
    pub(crate) async fn restore(
        &self,
        ctx: &CallContext,
        sid: &str,
        tag: &str,
    ) -> std::result::Result<api::Created, Refusal> {
        let body = self.encode(&api::RestoreRequest {
            tag: tag.to_owned(),
        })?;
        self.lifecycle_json(
            ctx,
            Method::POST,
            &snapshot_path(sid, "/restore"),
            Some(body),
        )
        .await
    }

    fn invalid(&self, e: serde_json::Error) -> ProviderError {
        ProviderError::InvalidRequest {
            provider: self.provider,
            message: format!("the request cannot be encoded: {e}"),
        }
    }
}

/// A failure that happened before any answer (no status, no body).
fn transport(error: ProviderError) -> Failure {
    Failure {
        error,
        status: None,
        body: Default::default(),
    }
}
