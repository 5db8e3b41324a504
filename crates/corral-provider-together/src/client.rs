//! One method per Together endpoint: the Bartender control API (project API key) and the in-VM
//! Pint API (the sandbox's own agent URL and token; the API key is never sent there).

use corral_provider::{CallContext, ExposeSecret, ProviderError, Result, SecretString};
use corral_provider_http::reqwest::{Method, RequestBuilder};
use corral_provider_http::{ProviderHttp, Url, join, path_segment};

use crate::api::{
    CreateExecRequest, CreateSandboxRequest, ExecItem, ExecStdout, FileInfo, FileReadResponse,
    Sandbox, SandboxPage, TerminateRequest,
};

/// Page size used when listing (the API's maximum).
const PAGE_LIMIT: &str = "100";

/// The Bartender control API at one base URL (`https://api.bartender.codesandbox.io/v1`).
#[derive(Debug, Clone)]
pub(crate) struct Control {
    http: ProviderHttp,
}

impl Control {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    pub(crate) fn http(&self) -> &ProviderHttp {
        &self.http
    }

    fn req(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        key: &SecretString,
    ) -> RequestBuilder {
        let mut url = self.http.url(path);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.http
            .client()
            .request(method, url)
            .bearer_auth(key.expose_secret())
    }

    /// `POST /sandboxes` (createSandbox).
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        body: &CreateSandboxRequest,
    ) -> Result<Sandbox> {
        let req = self.req(Method::POST, "/sandboxes", &[], key).json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes/{id}` (getSandbox).
    pub(crate) async fn get_sandbox(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        id: &str,
    ) -> Result<Sandbox> {
        let path = format!("/sandboxes/{}", path_segment(id));
        self.http
            .send_json(ctx, self.req(Method::GET, &path, &[], key))
            .await
    }

    /// `POST /sandboxes/{id}/terminate` (terminateSandbox).
    pub(crate) async fn terminate_sandbox(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        id: &str,
        body: &TerminateRequest,
    ) -> Result<Sandbox> {
        let path = format!("/sandboxes/{}/terminate", path_segment(id));
        let req = self.req(Method::POST, &path, &[], key).json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes?tags[k]=v&limit=100[&cursor=…]` (listSandboxes), one page.
    pub(crate) async fn list_sandboxes(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        tag: (&str, &str),
        cursor: Option<&str>,
    ) -> Result<SandboxPage> {
        let tag_name = format!("tags[{}]", tag.0);
        let mut query = vec![(tag_name.as_str(), tag.1), ("limit", PAGE_LIMIT)];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        self.http
            .send_json(ctx, self.req(Method::GET, "/sandboxes", &query, key))
            .await
    }
}

/// The in-VM Pint API of one running sandbox.
pub(crate) struct Agent<'a> {
    http: &'a ProviderHttp,
    base: Url,
    token: SecretString,
}

impl<'a> Agent<'a> {
    /// The agent at `url` with `token`, as the sandbox's `agent` field gives them.
    pub(crate) fn new(http: &'a ProviderHttp, url: &str, token: String) -> Result<Self> {
        let base = Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| ProviderError::Protocol {
                provider: http.provider(),
                message: "the sandbox's agent URL is not an http(s) URL".into(),
            })?;
        Ok(Self {
            http,
            base,
            token: SecretString::from(token),
        })
    }

    fn req(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .client()
            .request(method, join(&self.base, path))
            .bearer_auth(self.token.expose_secret())
    }

    /// `POST /api/v1/execs` (createExec).
    pub(crate) async fn create_exec(
        &self,
        ctx: &CallContext,
        body: &CreateExecRequest,
    ) -> Result<ExecItem> {
        let req = self.req(Method::POST, "/api/v1/execs").json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /api/v1/execs/{id}` (getExec).
    pub(crate) async fn get_exec(&self, ctx: &CallContext, id: &str) -> Result<ExecItem> {
        let path = format!("/api/v1/execs/{}", path_segment(id));
        self.http.send_json(ctx, self.req(Method::GET, &path)).await
    }

    /// `GET /api/v1/execs/{id}/io` (getExecOutput): the whole buffered output.
    pub(crate) async fn exec_output(&self, ctx: &CallContext, id: &str) -> Result<Vec<ExecStdout>> {
        let path = format!("/api/v1/execs/{}/io", path_segment(id));
        self.http.send_json(ctx, self.req(Method::GET, &path)).await
    }

    /// `DELETE /api/v1/execs/{id}` (deleteExec): kills the process if it still runs.
    pub(crate) async fn delete_exec(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let path = format!("/api/v1/execs/{}", path_segment(id));
        self.http
            .send_empty(ctx, self.req(Method::DELETE, &path))
            .await
    }

    /// `GET /api/v1/file_stat/{path}` (getFileStat).
    pub(crate) async fn file_stat(&self, ctx: &CallContext, path: &str) -> Result<FileInfo> {
        let p = format!("/api/v1/file_stat/{}", path_segment(path));
        self.http.send_json(ctx, self.req(Method::GET, &p)).await
    }

    /// `GET /api/v1/files/{path}` (readFile).
    pub(crate) async fn read_file(
        &self,
        ctx: &CallContext,
        path: &str,
    ) -> Result<FileReadResponse> {
        let p = format!("/api/v1/files/{}", path_segment(path));
        self.http.send_json(ctx, self.req(Method::GET, &p)).await
    }

    /// `POST /api/v1/files/{path}` (createFile) with the raw bytes as the body.
    pub(crate) async fn create_file(
        &self,
        ctx: &CallContext,
        path: &str,
        content: &[u8],
    ) -> Result<FileReadResponse> {
        let p = format!("/api/v1/files/{}", path_segment(path));
        let req = self
            .req(Method::POST, &p)
            .header("content-type", "application/octet-stream")
            .body(content.to_vec());
        self.http.send_json(ctx, req).await
    }
}
