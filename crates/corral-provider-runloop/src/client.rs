//! One method per Runloop endpoint: path, query, body; the bearer credential comes from the
//! shared HTTP layer. Returns api types.

use std::time::Duration;

use corral_provider::{CallContext, ProviderError, Result};
use corral_provider_http::reqwest::{Method, Response};
use corral_provider_http::{ProviderHttp, multipart_form, path_segment, read_at_most};

use crate::api::{
    DevboxAsyncExecutionDetailView, DevboxCreateExecutionParameters, DevboxCreateParameters,
    DevboxDiskSnapshotView, DevboxDownloadFileParameters, DevboxKillExecutionRequest,
    DevboxListView, DevboxSendStdInRequest, DevboxSendStdInResult, DevboxSnapshotAsyncStatusView,
    DevboxSnapshotRequest, DevboxStartExecutionParameters, DevboxView, DevboxWaitForCommandRequest,
};

/// The Runloop REST API at one base URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

/// `/v1/devboxes/{id}`, with the id as one encoded segment.
fn devbox(id: &str) -> String {
    format!("/v1/devboxes/{}", path_segment(id))
}

/// `/v1/devboxes/disk_snapshots/{id}`, with the id as one encoded segment.
fn disk_snapshot(id: &str) -> String {
    format!("/v1/devboxes/disk_snapshots/{}", path_segment(id))
}

/// `/v1/devboxes/{id}/executions/{eid}`, both as encoded segments.
fn execution(id: &str, execution_id: &str) -> String {
    format!("{}/executions/{}", devbox(id), path_segment(execution_id))
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// `POST /v1/devboxes`, with `x-request-id: <request_id>`: the idempotency header the
    /// official SDKs send on non-GET requests (reused across retries of the same create).
    pub(crate) async fn create_devbox(
        &self,
        ctx: &CallContext,
        body: &DevboxCreateParameters,
        request_id: &str,
    ) -> Result<DevboxView> {
        let req = self
            .http
            .authed(ctx, Method::POST, "/v1/devboxes")?
            .header("x-request-id", request_id)
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/devboxes/{id}`.
    pub(crate) async fn get_devbox(&self, ctx: &CallContext, id: &str) -> Result<DevboxView> {
        let req = self.http.authed(ctx, Method::GET, &devbox(id))?;
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/devboxes?limit=&starting_after=&include_total_count=false`.
    pub(crate) async fn list_devboxes(
        &self,
        ctx: &CallContext,
        limit: u32,
        starting_after: Option<&str>,
    ) -> Result<DevboxListView> {
        let limit = limit.to_string();
        let mut query = vec![("limit", limit.as_str()), ("include_total_count", "false")];
        if let Some(after) = starting_after {
            query.push(("starting_after", after));
        }
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/v1/devboxes", &query)?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/shutdown`: permanent, the disk is deleted.
    pub(crate) async fn shutdown_devbox(&self, ctx: &CallContext, id: &str) -> Result<DevboxView> {
        // `force`: a delete must not be refused because a snapshot is in progress.
        let path = format!("{}/shutdown", devbox(id));
        let req = self
            .http
            .authed_query(ctx, Method::POST, &path, &[("force", "true")])?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/suspend`: the disk is snapshotted and kept, processes end
    /// (`400` when the devbox is not running).
    pub(crate) async fn suspend_devbox(&self, ctx: &CallContext, id: &str) -> Result<DevboxView> {
        let path = format!("{}/suspend", devbox(id));
        let req = self.http.authed(ctx, Method::POST, &path)?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/resume` (`400` when the devbox is not suspended).
    pub(crate) async fn resume_devbox(&self, ctx: &CallContext, id: &str) -> Result<DevboxView> {
        let path = format!("{}/resume", devbox(id));
        let req = self.http.authed(ctx, Method::POST, &path)?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/snapshot_disk_async`: starts a disk snapshot and answers at
    /// once; [`Client::snapshot_status`] follows it.
    pub(crate) async fn snapshot_disk_async(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &DevboxSnapshotRequest,
    ) -> Result<DevboxDiskSnapshotView> {
        let path = format!("{}/snapshot_disk_async", devbox(id));
        let req = self.http.authed(ctx, Method::POST, &path)?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/devboxes/disk_snapshots/{id}/status`.
    pub(crate) async fn snapshot_status(
        &self,
        ctx: &CallContext,
        snapshot_id: &str,
    ) -> Result<DevboxSnapshotAsyncStatusView> {
        let path = format!("{}/status", disk_snapshot(snapshot_id));
        let req = self.http.authed(ctx, Method::GET, &path)?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/disk_snapshots/{id}/delete` (`404` unknown, `409` not complete).
    pub(crate) async fn delete_snapshot(&self, ctx: &CallContext, snapshot_id: &str) -> Result<()> {
        let path = format!("{}/delete", disk_snapshot(snapshot_id));
        let req = self.http.authed(ctx, Method::POST, &path)?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/execute?last_n=`; the whole exchange may take `limit`.
    pub(crate) async fn execute(
        &self,
        ctx: &CallContext,
        id: &str,
        last_n: usize,
        body: &DevboxStartExecutionParameters,
        limit: Duration,
    ) -> Result<DevboxAsyncExecutionDetailView> {
        let path = format!("{}/execute", devbox(id));
        let last_n = last_n.to_string();
        let req = self
            .http
            .authed_query(ctx, Method::POST, &path, &[("last_n", &last_n)])?
            .json(body);
        self.http.send_json_within(ctx, req, limit).await
    }

    /// `POST /v1/devboxes/{id}/execute_async`: starts `body.command` and answers at once.
    pub(crate) async fn execute_async(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &DevboxCreateExecutionParameters,
    ) -> Result<DevboxAsyncExecutionDetailView> {
        let path = format!("{}/execute_async", devbox(id));
        let req = self.http.authed(ctx, Method::POST, &path)?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/devboxes/{id}/executions/{eid}?last_n=`.
    pub(crate) async fn get_execution(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
        last_n: usize,
    ) -> Result<DevboxAsyncExecutionDetailView> {
        let last_n = last_n.to_string();
        let req = self.http.authed_query(
            ctx,
            Method::GET,
            &execution(id, execution_id),
            &[("last_n", &last_n)],
        )?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/executions/{eid}/send_std_in`.
    pub(crate) async fn send_std_in(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
        body: &DevboxSendStdInRequest,
    ) -> Result<DevboxSendStdInResult> {
        let path = format!("{}/send_std_in", execution(id, execution_id));
        let req = self.http.authed(ctx, Method::POST, &path)?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/devboxes/{id}/executions/{eid}/stream_stdout_updates?offset=`: an SSE stream
    /// of stdout from byte `offset`, open for at most `limit`.
    pub(crate) async fn stream_stdout_updates(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
        offset: u64,
        limit: Duration,
    ) -> Result<Response> {
        let path = format!("{}/stream_stdout_updates", execution(id, execution_id));
        self.event_stream(ctx, &path, offset, limit).await
    }

    /// `GET /v1/devboxes/{id}/executions/{eid}/stream_stderr_updates?offset=`: as
    /// [`Client::stream_stdout_updates`], for stderr.
    pub(crate) async fn stream_stderr_updates(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
        offset: u64,
        limit: Duration,
    ) -> Result<Response> {
        let path = format!("{}/stream_stderr_updates", execution(id, execution_id));
        self.event_stream(ctx, &path, offset, limit).await
    }

    async fn event_stream(
        &self,
        ctx: &CallContext,
        path: &str,
        offset: u64,
        limit: Duration,
    ) -> Result<Response> {
        let offset = offset.to_string();
        let req = self
            .http
            .authed_query(ctx, Method::GET, path, &[("offset", &offset)])?
            .header("accept", "text/event-stream");
        self.http.send_with_timeout(ctx, req, limit).await
    }

    /// `POST /v1/devboxes/{id}/executions/{eid}/wait_for_status?last_n=`; `None` on its `408`
    /// (still running when `timeout_seconds` passed).
    pub(crate) async fn wait_for_execution(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
        last_n: usize,
        body: &DevboxWaitForCommandRequest,
        limit: Duration,
    ) -> Result<Option<DevboxAsyncExecutionDetailView>> {
        let path = format!("{}/wait_for_status", execution(id, execution_id));
        let last_n = last_n.to_string();
        let req = self
            .http
            .authed_query(ctx, Method::POST, &path, &[("last_n", &last_n)])?
            .json(body);
        match self.http.send_json_within(ctx, req, limit).await {
            Ok(view) => Ok(Some(view)),
            Err(ProviderError::Unexpected { status: 408, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /v1/devboxes/{id}/executions/{eid}/kill` (the whole process group).
    pub(crate) async fn kill_execution(
        &self,
        ctx: &CallContext,
        id: &str,
        execution_id: &str,
    ) -> Result<()> {
        let path = format!("{}/kill", execution(id, execution_id));
        let req = self
            .http
            .authed(ctx, Method::POST, &path)?
            .json(&DevboxKillExecutionRequest {
                kill_process_group: Some(true),
            });
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v1/devboxes/{id}/download_file` (binary-safe): `None` when longer than `max`.
    pub(crate) async fn download_file(
        &self,
        ctx: &CallContext,
        id: &str,
        path: &str,
        max: usize,
    ) -> Result<Option<Vec<u8>>> {
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("{}/download_file", devbox(id)))?
            .json(&DevboxDownloadFileParameters {
                path: path.to_owned(),
            });
        let resp = self.http.send(ctx, req).await?;
        Ok(read_at_most(self.http.provider(), resp, max)
            .await?
            .map(|b| b.to_vec()))
    }

    /// `POST /v1/devboxes/{id}/upload_file`, multipart `path` + `file` (binary-safe).
    pub(crate) async fn upload_file(
        &self,
        ctx: &CallContext,
        id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let (content_type, body) = multipart_form(&[("path", path)], "file", "file", content);
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("{}/upload_file", devbox(id)))?
            .header("content-type", content_type)
            .body(body);
        self.http.send_empty(ctx, req).await
    }
}
