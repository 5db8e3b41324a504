//! One method per Daytona endpoint: the control API and the toolbox (both with
//! `Authorization: Bearer <API key>`), the toolbox at `{toolboxProxyUrl}/{sandboxId}`.

use std::time::Duration;

use corral_domain::Provider;
use corral_provider::{CallContext, ExposeSecret, ProviderError, Result};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{
    ProviderHttp, Url, join, multipart_file, parse_json, read_capped, with_query,
};

use crate::api;

const P: Provider = Provider::Daytona;
/// Label carrying Corral's operation id.
pub(crate) const OPERATION_LABEL: &str = "corral-operation-id";

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

/// The toolbox base of one sandbox: `{toolboxProxyUrl}/{sandboxId}`, checked to be http(s).
pub(crate) fn toolbox_base(proxy_url: &str, id: &str) -> Result<Url> {
    check_id(id)?;
    let proxy = Url::parse(proxy_url).map_err(|e| ProviderError::Protocol {
        provider: P,
        message: format!("the sandbox's toolboxProxyUrl is invalid: {e}"),
    })?;
    if !matches!(proxy.scheme(), "http" | "https") || proxy.host().is_none() {
        return Err(ProviderError::Protocol {
            provider: P,
            message: "the sandbox's toolboxProxyUrl is not an http(s) URL".into(),
        });
    }
    Ok(join(&proxy, id))
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    fn authed(&self, ctx: &CallContext, method: Method, url: Url) -> Result<RequestBuilder> {
        let key = ctx.require_credential(P)?;
        Ok(self
            .http
            .client()
            .request(method, url)
            .bearer_auth(key.expose_secret()))
    }

    fn control(&self, ctx: &CallContext, method: Method, path: &str) -> Result<RequestBuilder> {
        self.authed(ctx, method, self.http.url(path))
    }

    /// `POST /sandbox`; `Ok(None)` when the name is taken (409).
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        body: &api::CreateSandbox,
    ) -> Result<Option<api::Sandbox>> {
        let req = self.control(ctx, Method::POST, "/sandbox")?.json(body);
        let limit = self.http.config().request_timeout;
        match self.http.send_for_failure(ctx, req, limit).await {
            Ok(resp) => {
                let body = read_capped(P, resp, self.http.config().max_response_bytes).await?;
                parse_json(P, &body).map(Some)
            }
            Err(failure) if failure.status == Some(409) => Ok(None),
            Err(failure) => Err(failure.error),
        }
    }

    /// `GET /sandbox/{sandboxIdOrName}`.
    pub(crate) async fn get_sandbox(&self, ctx: &CallContext, id: &str) -> Result<api::Sandbox> {
        check_id(id)?;
        let req = self.control(ctx, Method::GET, &format!("/sandbox/{id}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /sandbox/{sandboxIdOrName}`.
    pub(crate) async fn delete_sandbox(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self.control(ctx, Method::DELETE, &format!("/sandbox/{id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /sandbox?labels={"k":"v"}&includeErroredDeleted=false`.
    pub(crate) async fn list_sandboxes_by_label(
        &self,
        ctx: &CallContext,
        key: &str,
        value: &str,
    ) -> Result<Vec<api::Sandbox>> {
        let labels = serde_json::json!({ key: value }).to_string();
        let url = with_query(
            self.http.url("/sandbox"),
            &[("labels", labels.as_str()), ("limit", "100")],
        );
        let req = self.authed(ctx, Method::GET, url)?;
        let list: api::ListSandboxes = self.http.send_json(ctx, req).await?;
        Ok(list.into_items())
    }

    /// Toolbox `POST /process/execute`; the HTTP exchange may take `limit`.
    pub(crate) async fn execute(
        &self,
        ctx: &CallContext,
        toolbox: &Url,
        body: &api::ExecuteRequest,
        limit: Duration,
    ) -> Result<Response> {
        let req = self
            .authed(ctx, Method::POST, join(toolbox, "/process/execute"))?
            .json(body);
        self.http.send_with_timeout(ctx, req, limit).await
    }

    /// Toolbox `GET /files/info?path=`; `None` when the daemon answers 404.
    pub(crate) async fn file_info(
        &self,
        ctx: &CallContext,
        toolbox: &Url,
        path: &str,
    ) -> Result<Option<api::FileInfo>> {
        let url = with_query(join(toolbox, "/files/info"), &[("path", path)]);
        let req = self.authed(ctx, Method::GET, url)?;
        match self.http.send_json(ctx, req).await {
            Ok(info) => Ok(Some(info)),
            Err(ProviderError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Toolbox `GET /files/download?path=` (raw bytes).
    pub(crate) async fn download(
        &self,
        ctx: &CallContext,
        toolbox: &Url,
        path: &str,
    ) -> Result<Response> {
        let url = with_query(join(toolbox, "/files/download"), &[("path", path)]);
        let req = self.authed(ctx, Method::GET, url)?;
        self.http.send(ctx, req).await
    }

    /// Toolbox `POST /files/upload?path=` with a multipart `file` field.
    pub(crate) async fn upload(
        &self,
        ctx: &CallContext,
        toolbox: &Url,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let url = with_query(join(toolbox, "/files/upload"), &[("path", path)]);
        let name = path.rsplit('/').next().unwrap_or(path);
        let (content_type, body) = multipart_file("file", name, content);
        let req = self
            .authed(ctx, Method::POST, url)?
            .header("Content-Type", content_type)
            .body(body);
        self.http.send_empty(ctx, req).await
    }
}
