//! One method per Together endpoint: the Bartender control API (project API key) and the in-VM
//! Pint API (the sandbox's own agent URL and token; the API key is never sent there).

use corral_provider::{CallContext, ProviderError, Result, SecretString};
use corral_provider_http::reqwest::{Method, RequestBuilder};
use corral_provider_http::{
    Auth, Page, ProviderHttp, TrustedUrl, Url, collect_pages, path_segment,
};

use crate::api::{
    CreateExecRequest, CreateSandboxRequest, ExecItem, ExecStdout, FileInfo, FileReadResponse,
    Sandbox, SandboxPage, TerminateRequest,
};

/// Page size used when listing (the API's maximum).
const PAGE_LIMIT: &str = "100";
/// The longest listing walked by a tag lookup.
const MAX_PAGES: usize = 20;

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

    /// `POST /sandboxes` (createSandbox).
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        body: &CreateSandboxRequest,
    ) -> Result<Sandbox> {
        let req = self
            .http
            .authed(ctx, Method::POST, "/sandboxes")?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes/{id}` (getSandbox).
    pub(crate) async fn get_sandbox(&self, ctx: &CallContext, id: &str) -> Result<Sandbox> {
        let path = format!("/sandboxes/{}", path_segment(id));
        let req = self.http.authed(ctx, Method::GET, &path)?;
        self.http.send_json(ctx, req).await
    }

    /// `POST /sandboxes/{id}/terminate` (terminateSandbox).
    pub(crate) async fn terminate_sandbox(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &TerminateRequest,
    ) -> Result<Sandbox> {
        let path = format!("/sandboxes/{}/terminate", path_segment(id));
        let req = self.http.authed(ctx, Method::POST, &path)?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes?tags[k]=v&limit=100[&cursor=…]` (listSandboxes), every page.
    pub(crate) async fn list_sandboxes(
        &self,
        ctx: &CallContext,
        tag: (&str, &str),
    ) -> Result<Vec<Sandbox>> {
        collect_pages(MAX_PAGES, |cursor: Option<String>| async move {
            self.list_sandboxes_page(ctx, tag, cursor.as_deref()).await
        })
        .await
    }

    /// One page of `GET /sandboxes?tags[k]=v`, from `cursor`.
    pub(crate) async fn list_sandboxes_page(
        &self,
        ctx: &CallContext,
        tag: (&str, &str),
        cursor: Option<&str>,
    ) -> Result<Page<Sandbox>> {
        let tag_name = format!("tags[{}]", tag.0);
        let mut query = vec![(tag_name.as_str(), tag.1), ("limit", PAGE_LIMIT)];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/sandboxes", &query)?;
        let page: SandboxPage = self.http.send_json(ctx, req).await?;
        Ok(Page {
            items: page.data,
            next: page.next_cursor,
        })
    }
}

/// The in-VM Pint API of one running sandbox.
pub(crate) struct Agent<'a> {
    http: &'a ProviderHttp,
    base: TrustedUrl,
    token: SecretString,
}

impl<'a> Agent<'a> {
    /// The agent at `url` with `token`, as the sandbox's `agent` field gives them; `url` must
    /// be on the trusted hosts (the token is sent there).
    pub(crate) fn new(http: &'a ProviderHttp, url: &str, token: String) -> Result<Self> {
        let url = Url::parse(url).map_err(|_| ProviderError::Protocol {
            provider: http.provider(),
            message: "the sandbox's agent URL is not a URL".into(),
        })?;
        let base = http.check_trusted("agent.url", url)?;
        Ok(Self {
            http,
            base,
            token: SecretString::from(token),
        })
    }

    /// A request to the agent carrying the sandbox's own token (never the project key).
    fn req(&self, method: Method, path: &str) -> Result<RequestBuilder> {
        self.http
            .with_token(method, &self.base.join(path), Auth::Bearer, &self.token)
    }

    /// `POST /api/v1/execs` (createExec).
    pub(crate) async fn create_exec(
        &self,
        ctx: &CallContext,
        body: &CreateExecRequest,
    ) -> Result<ExecItem> {
        let req = self.req(Method::POST, "/api/v1/execs")?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /api/v1/execs/{id}` (getExec).
    pub(crate) async fn get_exec(&self, ctx: &CallContext, id: &str) -> Result<ExecItem> {
        let path = format!("/api/v1/execs/{}", path_segment(id));
        self.http
            .send_json(ctx, self.req(Method::GET, &path)?)
            .await
    }

    /// `GET /api/v1/execs/{id}/io` (getExecOutput): the whole buffered output.
    pub(crate) async fn exec_output(&self, ctx: &CallContext, id: &str) -> Result<Vec<ExecStdout>> {
        let path = format!("/api/v1/execs/{}/io", path_segment(id));
        self.http
            .send_json(ctx, self.req(Method::GET, &path)?)
            .await
    }

    /// `DELETE /api/v1/execs/{id}` (deleteExec): kills the process if it still runs.
    pub(crate) async fn delete_exec(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let path = format!("/api/v1/execs/{}", path_segment(id));
        self.http
            .send_empty(ctx, self.req(Method::DELETE, &path)?)
            .await
    }

    /// `GET /api/v1/file_stat/{path}` (getFileStat).
    pub(crate) async fn file_stat(&self, ctx: &CallContext, path: &str) -> Result<FileInfo> {
        let p = format!("/api/v1/file_stat/{}", path_segment(path));
        self.http.send_json(ctx, self.req(Method::GET, &p)?).await
    }

    /// `GET /api/v1/files/{path}` (readFile).
    pub(crate) async fn read_file(
        &self,
        ctx: &CallContext,
        path: &str,
    ) -> Result<FileReadResponse> {
        let p = format!("/api/v1/files/{}", path_segment(path));
        self.http.send_json(ctx, self.req(Method::GET, &p)?).await
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
            .req(Method::POST, &p)?
            .header("content-type", "application/octet-stream")
            .body(content.to_vec());
        self.http.send_json(ctx, req).await
    }
}
