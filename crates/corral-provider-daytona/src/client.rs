//! One method per Daytona endpoint: the control API and the toolbox (both with
//! `Authorization: Bearer <API key>`), the toolbox at `{toolboxProxyUrl}/{sandboxId}`.

use std::time::Duration;

use corral_provider::{CallContext, ProviderError, Result};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{
    Failure, Page, ProviderHttp, TrustedUrl, Url, collect_pages, multipart_file,
};

use crate::api;

use crate::P;
/// Page size of label listings, and how many pages a lookup reads at most.
const PAGE_LIMIT: &str = "100";
const MAX_PAGES: usize = 10;

/// The Daytona HTTP client.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

/// Sandbox ids (UUIDs) and names are path segments: letters, digits, `-`, `_`, `.` only.
pub(crate) fn check_id(native_id: &str) -> Result<()> {
    let ok = !native_id.is_empty()
        && native_id.len() <= 128
        && native_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && native_id != "."
        && native_id != "..";
    if ok {
        Ok(())
    } else {
        Err(ProviderError::NotFound {
            provider: P,
            resource: "sandbox (malformed id)".into(),
        })
    }
}

/// `/process/session/{sessionId}/command/{commandId}{rest}`, both ids checked to be plain
/// path segments.
fn command_path(session_id: &str, command_id: &str, rest: &str) -> Result<String> {
    check_id(session_id)?;
    check_id(command_id)?;
    Ok(format!(
        "/process/session/{session_id}/command/{command_id}{rest}"
    ))
}

/// The toolbox base of one sandbox: `{toolboxProxyUrl}/{sandboxId}`, checked to be on the
/// trusted hosts (the API key is sent there).
pub(crate) fn toolbox_base(http: &ProviderHttp, proxy_url: &str, id: &str) -> Result<TrustedUrl> {
    check_id(id)?;
    let proxy = Url::parse(proxy_url).map_err(|e| ProviderError::Protocol {
        provider: P,
        message: format!("the sandbox's toolboxProxyUrl is invalid: {e}"),
    })?;
    Ok(http.check_trusted("toolboxProxyUrl", proxy)?.join(id))
}

/// A toolbox file endpoint's failure as a file error about `path`. The daemon answers 403 when
/// the sandbox user may not read or write the file (`os.IsPermission`): that is the file's
/// permissions, not a rejected key (which the proxy answers with 401).
fn file_failure(failure: Failure, path: &str) -> ProviderError {
    match (failure.status, failure.error) {
        (Some(403), ProviderError::Unauthorized { message, .. }) => ProviderError::FileOperation {
            path: path.to_owned(),
            message: format!("permission denied: {message}"),
        },
        (_, error) => error.for_file(path),
    }
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// The shared HTTP layer (for checking toolbox URLs).
    pub(crate) fn http(&self) -> &ProviderHttp {
        &self.http
    }

    /// Sends a request whose non-2xx answer says something its status alone tells (a 409 on
    /// create, a 403 on a file), within the configured request timeout.
    async fn send_for_failure(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
    ) -> std::result::Result<Response, Failure> {
        let limit = self.http.config().request_timeout;
        self.http.send_for_failure(ctx, req, limit).await
    }

    /// `POST /sandbox`; `Ok(None)` when the name is taken (409).
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        body: &api::CreateSandbox,
    ) -> Result<Option<api::Sandbox>> {
        let req = self.http.authed(ctx, Method::POST, "/sandbox")?.json(body);
        match self.send_for_failure(ctx, req).await {
            Ok(resp) => self.http.read_json(resp).await.map(Some),
            Err(failure) if failure.status == Some(409) => Ok(None),
            Err(failure) => Err(failure.error),
        }
    }

    /// `GET /sandbox/{sandboxIdOrName}`.
    pub(crate) async fn get_sandbox(&self, ctx: &CallContext, id: &str) -> Result<api::Sandbox> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("/sandbox/{id}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /sandbox/{sandboxIdOrName}`.
    pub(crate) async fn delete_sandbox(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/sandbox/{id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /sandbox/{id}/{action}` (`stop`, `start`): `200 Sandbox` once the transition is
    /// under way (`stopping`, `starting`), not once it is done.
    pub(crate) async fn sandbox_action(
        &self,
        ctx: &CallContext,
        id: &str,
        action: &str,
    ) -> Result<api::Sandbox> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("/sandbox/{id}/{action}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /sandbox/{id}/snapshot {name, includeMemory}`: `200 Sandbox` once the snapshot is
    /// initiated (the sandbox `snapshotting`); `Ok(false)` when the name is taken (409).
    pub(crate) async fn create_sandbox_snapshot(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::CreateSandboxSnapshot,
    ) -> Result<bool> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("/sandbox/{id}/snapshot"))?
            .json(body);
        match self.send_for_failure(ctx, req).await {
            Ok(resp) => self
                .http
                .read_json::<api::Sandbox>(resp)
                .await
                .map(|_| true),
            Err(failure) if failure.status == Some(409) => Ok(false),
            Err(failure) => Err(failure.error),
        }
    }

    /// `GET /snapshots/{idOrName}`.
    pub(crate) async fn get_snapshot(
        &self,
        ctx: &CallContext,
        id_or_name: &str,
    ) -> Result<api::SnapshotDto> {
        check_id(id_or_name)?;
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("/snapshots/{id_or_name}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /snapshots/{id}` (the id, not the name).
    pub(crate) async fn delete_snapshot(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/snapshots/{id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /sandbox?labels={"k":"v"}&includeErroredDeleted=true&limit=100[&cursor=…]`, every
    /// page. Without `includeErroredDeleted` Daytona leaves out sandboxes in `error` or
    /// `build_failed` whose desired state is `destroyed`, and a lookup must see those too.
    pub(crate) async fn list_sandboxes_by_label(
        &self,
        ctx: &CallContext,
        key: &str,
        value: &str,
    ) -> Result<Vec<api::Sandbox>> {
        collect_pages(MAX_PAGES, |cursor: Option<String>| async move {
            self.list_page_by_label(ctx, key, value, cursor.as_deref())
                .await
        })
        .await
    }

    /// One page of `GET /sandbox?labels=…` (errored and deleted ones included), from
    /// `cursor`.
    pub(crate) async fn list_page_by_label(
        &self,
        ctx: &CallContext,
        key: &str,
        value: &str,
        cursor: Option<&str>,
    ) -> Result<Page<api::Sandbox>> {
        let labels = serde_json::json!({ key: value }).to_string();
        let mut query = vec![
            ("labels", labels.as_str()),
            ("includeErroredDeleted", "true"),
            ("limit", PAGE_LIMIT),
        ];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/sandbox", &query)?;
        let list: api::ListSandboxes = self.http.send_json(ctx, req).await?;
        Ok(list.into_page())
    }

    /// Toolbox `POST /process/execute`; the HTTP exchange may take `limit`.
    pub(crate) async fn execute(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        body: &api::ExecuteRequest,
        limit: Duration,
    ) -> Result<api::ExecuteResponse> {
        let req = self
            .http
            .authed_trusted(ctx, Method::POST, &toolbox.join("/process/execute"))?
            .json(body);
        self.http.send_json_within(ctx, req, limit).await
    }

    /// Toolbox `POST /process/session {sessionId}`; `false` when the session exists (409).
    pub(crate) async fn create_session(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
    ) -> Result<bool> {
        let req = self
            .http
            .authed_trusted(ctx, Method::POST, &toolbox.join("/process/session"))?
            .json(&api::CreateSessionRequest {
                session_id: session_id.to_owned(),
            });
        match self.send_for_failure(ctx, req).await {
            Ok(_) => Ok(true),
            Err(failure) if failure.status == Some(409) => Ok(false),
            Err(failure) => Err(failure.error),
        }
    }

    /// Toolbox `GET /process/session/{sessionId}`; `None` when the daemon answers 404.
    pub(crate) async fn get_session(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
    ) -> Result<Option<api::Session>> {
        check_id(session_id)?;
        let url = toolbox.join(&format!("/process/session/{session_id}"));
        let req = self.http.authed_trusted(ctx, Method::GET, &url)?;
        match self.send_for_failure(ctx, req).await {
            Ok(resp) => self.http.read_json(resp).await.map(Some),
            Err(failure) if failure.status == Some(404) => Ok(None),
            Err(failure) => Err(failure.error),
        }
    }

    /// Toolbox `POST /process/session/{sessionId}/exec`.
    pub(crate) async fn session_execute(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
        body: &api::SessionExecuteRequest,
    ) -> Result<api::SessionExecuteResponse> {
        check_id(session_id)?;
        let url = toolbox.join(&format!("/process/session/{session_id}/exec"));
        let req = self
            .http
            .authed_trusted(ctx, Method::POST, &url)?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// Toolbox `GET /process/session/{sessionId}/command/{commandId}`.
    pub(crate) async fn get_session_command(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
        command_id: &str,
    ) -> Result<api::Command> {
        let url = toolbox.join(&command_path(session_id, command_id, "")?);
        let req = self.http.authed_trusted(ctx, Method::GET, &url)?;
        self.http.send_json(ctx, req).await
    }

    /// Toolbox `GET /process/session/{sessionId}/command/{commandId}/logs`: the whole log so
    /// far, as plain text with stdout and stderr combined (what the daemon answers a client
    /// that asks for no split output), capped at the configured response size.
    pub(crate) async fn get_session_command_logs(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
        command_id: &str,
    ) -> Result<Vec<u8>> {
        let url = toolbox.join(&command_path(session_id, command_id, "/logs")?);
        let req = self.http.authed_trusted(ctx, Method::GET, &url)?;
        Ok(self.http.send_bytes(ctx, req).await?.to_vec())
    }

    /// Toolbox `POST /process/session/{sessionId}/command/{commandId}/terminate` (SIGKILL to
    /// the command's process group); `false` when the command had already ended (410).
    pub(crate) async fn terminate_session_command(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        session_id: &str,
        command_id: &str,
    ) -> Result<bool> {
        let url = toolbox.join(&command_path(session_id, command_id, "/terminate")?);
        let req = self.http.authed_trusted(ctx, Method::POST, &url)?;
        match self.send_for_failure(ctx, req).await {
            Ok(_) => Ok(true),
            Err(failure) if failure.status == Some(410) => Ok(false),
            Err(failure) => Err(failure.error),
        }
    }

    /// Toolbox `GET /files/info?path=`; `None` when the daemon answers 404.
    pub(crate) async fn file_info(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        path: &str,
    ) -> Result<Option<api::FileInfo>> {
        let url = toolbox.join("/files/info").with_query(&[("path", path)]);
        let req = self.http.authed_trusted(ctx, Method::GET, &url)?;
        match self.send_for_failure(ctx, req).await {
            Ok(resp) => self.http.read_json(resp).await.map(Some),
            Err(failure) => match file_failure(failure, path) {
                ProviderError::FileNotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Toolbox `GET /files/download?path=` (raw bytes); errors are about `path`.
    pub(crate) async fn download(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        path: &str,
    ) -> Result<Response> {
        let url = toolbox
            .join("/files/download")
            .with_query(&[("path", path)]);
        let req = self.http.authed_trusted(ctx, Method::GET, &url)?;
        self.send_for_failure(ctx, req)
            .await
            .map_err(|f| file_failure(f, path))
    }

    /// Toolbox `POST /files/upload?path=` with a multipart `file` field; errors are about
    /// `path`.
    pub(crate) async fn upload(
        &self,
        ctx: &CallContext,
        toolbox: &TrustedUrl,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let url = toolbox.join("/files/upload").with_query(&[("path", path)]);
        let name = path.rsplit('/').next().unwrap_or(path);
        let (content_type, body) = multipart_file("file", name, content);
        let req = self
            .http
            .authed_trusted(ctx, Method::POST, &url)?
            .header("Content-Type", content_type)
            .body(body);
        self.send_for_failure(ctx, req)
            .await
            .map(drop)
            .map_err(|f| file_failure(f, path))
    }
}

#[cfg(test)]
mod tests {
    use corral_provider_http::reqwest::StatusCode;

    use super::*;

    /// A failure as `send_for_failure` returns it for `status`.
    fn failure(status: u16) -> Failure {
        let error = corral_provider_http::map_status(
            P,
            StatusCode::from_u16(status).unwrap(),
            &Default::default(),
            br#"{"statusCode":403,"message":"open /root/x: permission denied"}"#,
            "/toolbox/x/files/download",
        );
        Failure {
            error,
            status: Some(status),
            body: Default::default(),
        }
    }

    #[test]
    fn a_toolbox_403_on_a_file_is_a_file_failure_and_401_stays_unauthorized() {
        assert!(matches!(
            file_failure(failure(403), "/f"),
            ProviderError::FileOperation { ref path, .. } if path == "/f"
        ));
        assert!(matches!(
            file_failure(failure(401), "/f"),
            ProviderError::Unauthorized { .. }
        ));
        assert!(matches!(
            file_failure(failure(404), "/f"),
            ProviderError::FileNotFound { .. }
        ));
    }
}
