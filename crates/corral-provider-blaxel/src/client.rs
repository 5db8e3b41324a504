//! One method per Blaxel endpoint used by the adapter: the control plane
//! (`https://api.blaxel.ai/v0`) and each sandbox's own API, reached through
//! `https://run.blaxel.ai/{workspace}/sandboxes/{name}` with the same credential. Every request
//! carries `X-Blaxel-Workspace`.

use std::time::Duration;

use corral_provider::{CallContext, ProviderError, Result};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{ProviderHttp, Url, join, path_segment as segment, with_query};

use crate::api::{
    ForkRequest, ForkResponse, MultipartCompleteRequest, MultipartInitiateRequest,
    MultipartInitiateResponse, MultipartPartInfo, ProcessRequest, ProcessResponse, Sandbox,
    SandboxCreate, SandboxSnapshot, SnapshotRequest,
};

/// The header that names the workspace on every call.
pub const WORKSPACE_HEADER: &str = "X-Blaxel-Workspace";

/// Blaxel's two APIs.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
    run: Url,
}

/// `path` as URL segments after a route prefix: each segment percent-encoded, so a path can
/// add neither a query nor a dot segment (those are refused).
pub(crate) fn file_route(prefix: &str, path: &str) -> Result<String> {
    let refused = |reason: &str| ProviderError::FileRefused {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| refused("the path is not absolute"))?;
    let mut route = prefix.to_owned();
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return Err(refused("the path has `.` or `..` segments"));
        }
        route.push('/');
        route.push_str(&segment(part));
    }
    Ok(route)
}

impl Client {
    pub(crate) fn new(http: ProviderHttp, run: Url) -> Self {
        Self { http, run }
    }

    fn control(
        &self,
        ctx: &CallContext,
        ws: &str,
        method: Method,
        path: &str,
    ) -> Result<RequestBuilder> {
        Ok(self
            .http
            .authed(ctx, method, path)?
            .header(WORKSPACE_HEADER, ws))
    }

    /// A request to the sandbox API of sandbox `name`.
    fn sandbox(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        method: Method,
        path: &str,
    ) -> Result<RequestBuilder> {
        self.sandbox_query(ctx, ws, name, method, path, &[])
    }

    /// As [`Client::sandbox`], with `query` pairs.
    fn sandbox_query(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<RequestBuilder> {
        let url = with_query(
            join(
                &self.run,
                &format!("/{}/sandboxes/{}{path}", segment(ws), segment(name)),
            ),
            query,
        );
        Ok(self
            .http
            .authed_url(ctx, method, url)?
            .header(WORKSPACE_HEADER, ws))
    }

    /// `POST /v0/sandboxes`.
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        ws: &str,
        body: &SandboxCreate,
    ) -> Result<Sandbox> {
        let req = self
            .control(ctx, ws, Method::POST, "/sandboxes")?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v0/sandboxes/{name}`: the control plane, which does not wake the sandbox.
    pub(crate) async fn get_sandbox(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
    ) -> Result<Sandbox> {
        let req = self.control(
            ctx,
            ws,
            Method::GET,
            &format!("/sandboxes/{}", segment(name)),
        )?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /v0/sandboxes/{name}`.
    pub(crate) async fn delete_sandbox(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
    ) -> Result<()> {
        let req = self.control(
            ctx,
            ws,
            Method::DELETE,
            &format!("/sandboxes/{}", segment(name)),
        )?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v0/sandboxes/{name}/snapshots`.
    pub(crate) async fn create_snapshot(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        body: &SnapshotRequest,
    ) -> Result<SandboxSnapshot> {
        let req = self
            .control(
                ctx,
                ws,
                Method::POST,
                &format!("/sandboxes/{}/snapshots", segment(name)),
            )?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v0/sandboxes/{name}/snapshots` (there is no read of one snapshot).
    pub(crate) async fn list_snapshots(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
    ) -> Result<Vec<SandboxSnapshot>> {
        let req = self.control(
            ctx,
            ws,
            Method::GET,
            &format!("/sandboxes/{}/snapshots", segment(name)),
        )?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /v0/sandboxes/{name}/snapshots/{snapshotId}` (204).
    pub(crate) async fn delete_snapshot(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        snapshot_id: &str,
    ) -> Result<()> {
        let req = self.control(
            ctx,
            ws,
            Method::DELETE,
            &format!(
                "/sandboxes/{}/snapshots/{}",
                segment(name),
                segment(snapshot_id)
            ),
        )?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v0/sandboxes/{name}/fork`: a new sandbox from one of `name`'s snapshots.
    pub(crate) async fn fork(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        body: &ForkRequest,
    ) -> Result<ForkResponse> {
        let req = self
            .control(
                ctx,
                ws,
                Method::POST,
                &format!("/sandboxes/{}/fork", segment(name)),
            )?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `POST /process` (waiting for completion or not, as `body` says), allowed to take
    /// `limit`.
    pub(crate) async fn run_process(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        body: &ProcessRequest,
        limit: Duration,
    ) -> Result<ProcessResponse> {
        let req = self
            .sandbox(ctx, ws, name, Method::POST, "/process")?
            .json(body);
        self.http.send_json_within(ctx, req, limit).await
    }

    /// `GET /process/{identifier}`.
    pub(crate) async fn get_process(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        process: &str,
    ) -> Result<ProcessResponse> {
        let req = self.sandbox(
            ctx,
            ws,
            name,
            Method::GET,
            &format!("/process/{}", segment(process)),
        )?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /process/{identifier}`: SIGTERM to the process group ("stop").
    pub(crate) async fn stop_process(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        process: &str,
    ) -> Result<()> {
        let req = self.sandbox(
            ctx,
            ws,
            name,
            Method::DELETE,
            &format!("/process/{}", segment(process)),
        )?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /process/{identifier}/logs/stream`: the response, unread; its body may take
    /// `limit` in all.
    pub(crate) async fn stream_process_logs(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        process: &str,
        limit: Duration,
    ) -> Result<Response> {
        let req = self.sandbox(
            ctx,
            ws,
            name,
            Method::GET,
            &format!("/process/{}/logs/stream", segment(process)),
        )?;
        self.http.send_with_timeout(ctx, req, limit).await
    }

    /// `DELETE /process/{identifier}/kill`: SIGKILL to the process group.
    pub(crate) async fn kill_process(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        process: &str,
    ) -> Result<()> {
        let req = self.sandbox(
            ctx,
            ws,
            name,
            Method::DELETE,
            &format!("/process/{}/kill", segment(process)),
        )?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /filesystem/{path}` asking for the raw bytes: the response, unread.
    pub(crate) async fn download(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        path: &str,
    ) -> Result<Response> {
        let req = self
            .sandbox(
                ctx,
                ws,
                name,
                Method::GET,
                &file_route("/filesystem", path)?,
            )?
            .header("Accept", "application/octet-stream");
        self.http.send(ctx, req).await
    }

    /// `GET /filesystem/{path}` as JSON: a `Directory` (with `subdirectories`) or a file.
    pub(crate) async fn stat(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        path: &str,
    ) -> Result<serde_json::Value> {
        let req = self
            .sandbox(
                ctx,
                ws,
                name,
                Method::GET,
                &file_route("/filesystem", path)?,
            )?
            .header("Accept", "application/json");
        self.http.send_json(ctx, req).await
    }

    /// `POST /filesystem-multipart/initiate/{path}`.
    pub(crate) async fn initiate_upload(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        path: &str,
    ) -> Result<MultipartInitiateResponse> {
        let route = file_route("/filesystem-multipart/initiate", path)?;
        let body = MultipartInitiateRequest {
            permissions: "0644".into(),
        };
        let req = self
            .sandbox(ctx, ws, name, Method::POST, &route)?
            .json(&body);
        self.http.send_json(ctx, req).await
    }

    /// `PUT /filesystem-multipart/{uploadId}/part?partNumber=…` (multipart/form-data `file`).
    pub(crate) async fn upload_part(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        upload_id: &str,
        part_number: u32,
        content: &[u8],
    ) -> Result<MultipartPartInfo> {
        let (content_type, body) = corral_provider_http::multipart_file("file", "part", content);
        let route = format!("/filesystem-multipart/{}/part", segment(upload_id));
        let number = part_number.to_string();
        let req = self
            .sandbox_query(
                ctx,
                ws,
                name,
                Method::PUT,
                &route,
                &[("partNumber", &number)],
            )?
            .header("Content-Type", content_type)
            .body(body);
        self.http.send_json(ctx, req).await
    }

    /// `POST /filesystem-multipart/{uploadId}/complete`.
    pub(crate) async fn complete_upload(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        upload_id: &str,
        parts: Vec<MultipartPartInfo>,
    ) -> Result<()> {
        let route = format!("/filesystem-multipart/{}/complete", segment(upload_id));
        let req = self
            .sandbox(ctx, ws, name, Method::POST, &route)?
            .json(&MultipartCompleteRequest { parts });
        self.http.send_empty(ctx, req).await
    }

    /// `DELETE /filesystem-multipart/{uploadId}/abort`.
    pub(crate) async fn abort_upload(
        &self,
        ctx: &CallContext,
        ws: &str,
        name: &str,
        upload_id: &str,
    ) -> Result<()> {
        let route = format!("/filesystem-multipart/{}/abort", segment(upload_id));
        let req = self.sandbox(ctx, ws, name, Method::DELETE, &route)?;
        self.http.send_empty(ctx, req).await
    }
}
