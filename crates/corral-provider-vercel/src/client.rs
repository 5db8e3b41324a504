//! One method per Vercel Sandbox endpoint: path, `teamId` on every request, body; the bearer
//! credential comes from the shared HTTP layer. Returns api types.

use std::time::Duration;

use bytes::Bytes;
use corral_provider::{CallContext, ProviderError, Result};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{Failure, ProviderHttp, path_segment, read_at_most};
use serde::de::DeserializeOwned;

use crate::api::{
    CommandResponse, CommandsResponse, CreateSandboxRequest, CreateSnapshotRequest,
    KillCommandRequest, ReadFileRequest, RunCommandRequest, SandboxAndSessionResponse,
    SandboxResponse, SandboxesPaginationResponse, SnapshotResponse, StopSessionResponse,
    UpdateSandboxRequest, WriteStdinRequest, WriteStdinResponse,
};

/// Who the call is for: the team and the project (the credential travels in the context).
#[derive(Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) team_id: &'a str,
    pub(crate) project_id: &'a str,
}

/// A failure that did not come from an HTTP answer.
pub(crate) fn failure(error: ProviderError) -> Failure {
    Failure {
        error,
        status: None,
        body: Bytes::new(),
    }
}

/// The Vercel REST API at one base URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

fn session_path(session_id: &str, rest: &str) -> String {
    format!("/v2/sandboxes/sessions/{}{rest}", path_segment(session_id))
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// The configured request timeout.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.http.config().request_timeout
    }

    /// An authorised request with `teamId` first in the query, as the SDK appends it to every
    /// call.
    fn scoped(
        &self,
        ctx: &CallContext,
        method: Method,
        path: &str,
        scope: Scope<'_>,
        query: &[(&str, &str)],
    ) -> Result<RequestBuilder> {
        let mut all = vec![("teamId", scope.team_id)];
        all.extend_from_slice(query);
        self.http.authed_query(ctx, method, path, &all)
    }

    /// Sends `req` and parses the JSON answer, keeping a non-2xx answer's status and body for
    /// the session codes (`sandbox_stopped`, …) that change what the adapter does.
    async fn json_or_failure<T: DeserializeOwned>(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
    ) -> Result<T, Failure> {
        let limit = self.http.config().request_timeout;
        let resp = self.http.send_for_failure(ctx, req, limit).await?;
        self.http.read_json(resp).await.map_err(failure)
    }

    /// `POST /v3/sandboxes`, or `POST /v2/sandboxes` when a `runtime` is chosen (as the SDK).
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        body: &CreateSandboxRequest,
    ) -> Result<SandboxAndSessionResponse> {
        let path = if body.runtime.is_some() {
            "/v2/sandboxes"
        } else {
            "/v3/sandboxes"
        };
        let req = self.scoped(ctx, Method::POST, path, scope, &[])?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v2/sandboxes/{name}?projectId=[&resume=true]`; `resume` starts a new session from
    /// the latest snapshot when the current one is stopped.
    pub(crate) async fn get_sandbox(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        name: &str,
        resume: bool,
    ) -> Result<SandboxAndSessionResponse, Failure> {
        let path = format!("/v2/sandboxes/{}", path_segment(name));
        let mut query = vec![("projectId", scope.project_id)];
        if resume {
            query.push(("resume", "true"));
        }
        let req = self
            .scoped(ctx, Method::GET, &path, scope, &query)
            .map_err(failure)?;
        self.json_or_failure(ctx, req).await
    }

    /// `GET /v2/sandboxes?project=&tags=k:v[&cursor=]` (list endpoints name it `project`).
    pub(crate) async fn list_sandboxes(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        tag: &str,
        cursor: Option<&str>,
    ) -> Result<SandboxesPaginationResponse> {
        let mut query = vec![
            ("project", scope.project_id),
            ("tags", tag),
            ("limit", "100"),
        ];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        let req = self.scoped(ctx, Method::GET, "/v2/sandboxes", scope, &query)?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /v2/sandboxes/{name}?projectId=`: the sandbox and all its snapshots.
    pub(crate) async fn delete_sandbox(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        name: &str,
    ) -> Result<()> {
        let path = format!("/v2/sandboxes/{}", path_segment(name));
        let req = self.scoped(
            ctx,
            Method::DELETE,
            &path,
            scope,
            &[("projectId", scope.project_id)],
        )?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/cmd` with `wait` and `logs`: the NDJSON stream,
    /// still unread; the whole exchange may take `limit`.
    pub(crate) async fn run_command(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        body: &RunCommandRequest,
        limit: Duration,
    ) -> Result<Response, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/cmd"),
                scope,
                &[],
            )
            .map_err(failure)?
            .json(body);
        self.http.send_for_failure(ctx, req, limit).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/cmd` without `wait`: the command, answered
    /// as soon as it started.
    pub(crate) async fn start_command(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        body: &RunCommandRequest,
    ) -> Result<CommandResponse, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/cmd"),
                scope,
                &[],
            )
            .map_err(failure)?
            .json(body);
        self.json_or_failure(ctx, req).await
    }

    /// `GET /v2/sandboxes/sessions/{sessionId}/cmd`: the session's commands.
    pub(crate) async fn list_commands(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
    ) -> Result<CommandsResponse, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::GET,
                &session_path(session_id, "/cmd"),
                scope,
                &[],
            )
            .map_err(failure)?;
        self.json_or_failure(ctx, req).await
    }

    /// `GET /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}[?wait=true]`; with `wait`, the
    /// answer comes once the command finished, or the exchange gives up after `limit`.
    pub(crate) async fn get_command(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        command_id: &str,
        wait: bool,
        limit: Duration,
    ) -> Result<CommandResponse, Failure> {
        let path = session_path(session_id, &format!("/cmd/{}", path_segment(command_id)));
        let query: &[(&str, &str)] = if wait { &[("wait", "true")] } else { &[] };
        let req = self
            .scoped(ctx, Method::GET, &path, scope, query)
            .map_err(failure)?;
        let resp = self.http.send_for_failure(ctx, req, limit).await?;
        self.http.read_json(resp).await.map_err(failure)
    }

    /// `GET /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/logs`: the NDJSON log stream, still
    /// unread, open for at most `limit`.
    pub(crate) async fn command_logs(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        command_id: &str,
        limit: Duration,
    ) -> Result<Response, Failure> {
        let path = session_path(
            session_id,
            &format!("/cmd/{}/logs", path_segment(command_id)),
        );
        let req = self
            .scoped(ctx, Method::GET, &path, scope, &[])
            .map_err(failure)?;
        self.http.send_for_failure(ctx, req, limit).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/stdin`.
    pub(crate) async fn write_stdin(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        command_id: &str,
        body: &WriteStdinRequest,
    ) -> Result<WriteStdinResponse, Failure> {
        let path = session_path(
            session_id,
            &format!("/cmd/{}/stdin", path_segment(command_id)),
        );
        let req = self
            .scoped(ctx, Method::POST, &path, scope, &[])
            .map_err(failure)?
            .json(body);
        self.json_or_failure(ctx, req).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/kill` with a POSIX signal number.
    pub(crate) async fn kill_command(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        command_id: &str,
        signal: u8,
    ) -> Result<(), Failure> {
        let path = session_path(
            session_id,
            &format!("/cmd/{}/kill", path_segment(command_id)),
        );
        let req = self
            .scoped(ctx, Method::POST, &path, scope, &[])
            .map_err(failure)?
            .json(&KillCommandRequest { signal });
        let _: serde_json::Value = self.json_or_failure(ctx, req).await?;
        Ok(())
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/fs/read`: the bytes (`application/octet-stream`),
    /// or `None` when longer than `max`.
    pub(crate) async fn read_file(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        path: &str,
        max: usize,
    ) -> Result<Option<Bytes>, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/fs/read"),
                scope,
                &[],
            )
            .map_err(failure)?
            .json(&ReadFileRequest {
                path: path.to_owned(),
                cwd: None,
            });
        let limit = self.http.config().request_timeout;
        let resp = self.http.send_for_failure(ctx, req, limit).await?;
        let octets = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/octet-stream"));
        if !octets {
            // The SDK treats any other content type as an error answer.
            return Err(failure(ProviderError::Protocol {
                provider: self.http.provider(),
                message: "a file read answered without application/octet-stream".into(),
            }));
        }
        read_at_most(self.http.provider(), resp, max)
            .await
            .map_err(failure)
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/fs/write`: a gzipped tarball extracted in
    /// `x-cwd`.
    pub(crate) async fn write_files(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        extract_dir: &str,
        tarball: Vec<u8>,
    ) -> Result<(), Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/fs/write"),
                scope,
                &[],
            )
            .map_err(failure)?
            .header("content-type", "application/gzip")
            .header("x-cwd", extract_dir)
            .body(tarball);
        let _: serde_json::Value = self.json_or_failure(ctx, req).await?;
        Ok(())
    }

    /// `PATCH /v2/sandboxes/{name}?projectId=` with the whole tag map.
    pub(crate) async fn update_tags(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        name: &str,
        body: &UpdateSandboxRequest,
    ) -> Result<SandboxResponse> {
        let path = format!("/v2/sandboxes/{}", path_segment(name));
        let req = self
            .scoped(
                ctx,
                Method::PATCH,
                &path,
                scope,
                &[("projectId", scope.project_id)],
            )?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/stop`: answers once the session stopped (a
    /// persistent sandbox's filesystem snapshotted).
    pub(crate) async fn stop_session(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
    ) -> Result<StopSessionResponse, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/stop"),
                scope,
                &[],
            )
            .map_err(failure)?;
        self.json_or_failure(ctx, req).await
    }

    /// `POST /v2/sandboxes/sessions/{sessionId}/snapshot`: the snapshot; the session is
    /// terminated by it.
    pub(crate) async fn snapshot_session(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        session_id: &str,
        body: &CreateSnapshotRequest,
    ) -> Result<SnapshotResponse, Failure> {
        let req = self
            .scoped(
                ctx,
                Method::POST,
                &session_path(session_id, "/snapshot"),
                scope,
                &[],
            )
            .map_err(failure)?
            .json(body);
        self.json_or_failure(ctx, req).await
    }

    /// `GET /v2/sandboxes/snapshots/{snapshotId}`.
    pub(crate) async fn get_snapshot(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        snapshot_id: &str,
    ) -> Result<SnapshotResponse> {
        let path = format!("/v2/sandboxes/snapshots/{}", path_segment(snapshot_id));
        let req = self.scoped(ctx, Method::GET, &path, scope, &[])?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /v2/sandboxes/snapshots/{snapshotId}`.
    pub(crate) async fn delete_snapshot(
        &self,
        ctx: &CallContext,
        scope: Scope<'_>,
        snapshot_id: &str,
    ) -> Result<SnapshotResponse> {
        let path = format!("/v2/sandboxes/snapshots/{}", path_segment(snapshot_id));
        let req = self.scoped(ctx, Method::DELETE, &path, scope, &[])?;
        self.http.send_json(ctx, req).await
    }
}
