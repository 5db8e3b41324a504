//! One method per E2B endpoint: the control API (`X-API-Key`) and envd (`X-Access-Token`,
//! on the sandbox's own host). The control key is never sent to envd.

use std::time::Duration;

use corral_domain::Provider;
use corral_provider::{CallContext, ExposeSecret, ProviderError, Result, SecretString};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{ProviderHttp, Url, join, multipart_file, with_query};

use crate::api;

const P: Provider = Provider::E2b;
/// The port envd listens on inside every sandbox.
pub(crate) const ENVD_PORT: u16 = 49983;
/// Metadata key carrying Corral's operation id.
pub(crate) const OPERATION_KEY: &str = "corral_operation_id";

/// Where one sandbox's envd answers, and with which token.
#[derive(Clone)]
pub(crate) struct Envd {
    pub(crate) base: Url,
    pub(crate) token: Option<SecretString>,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// The E2B HTTP client.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
    envd_url_template: String,
    default_domain: String,
}

/// Sandbox ids are path segments and host labels: letters, digits, `-`, `_` only.
pub(crate) fn check_id(native_id: &str) -> Result<()> {
    let ok = !native_id.is_empty()
        && native_id.len() <= 128
        && native_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ProviderError::NotFound {
            provider: P,
            resource: "sandbox (malformed id)".into(),
        })
    }
}

impl Client {
    pub(crate) fn new(
        http: ProviderHttp,
        envd_url_template: String,
        default_domain: String,
    ) -> Self {
        Self {
            http,
            envd_url_template,
            default_domain,
        }
    }

    fn control(&self, ctx: &CallContext, method: Method, path: &str) -> Result<RequestBuilder> {
        let key = ctx.require_credential(P)?;
        Ok(self
            .http
            .request(method, path)
            .header("X-API-Key", key.expose_secret()))
    }

    /// `POST /sandboxes`.
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        body: &api::NewSandbox,
    ) -> Result<api::Sandbox> {
        let req = self.control(ctx, Method::POST, "/sandboxes")?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes/{sandboxID}`.
    pub(crate) async fn get_sandbox(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> Result<api::SandboxDetail> {
        check_id(id)?;
        let req = self.control(ctx, Method::GET, &format!("/sandboxes/{id}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /sandboxes/{sandboxID}`.
    pub(crate) async fn kill_sandbox(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self.control(ctx, Method::DELETE, &format!("/sandboxes/{id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /v2/sandboxes?metadata=<k>%3D<v>&state=running,paused&limit=100`.
    pub(crate) async fn list_sandboxes_by_metadata(
        &self,
        ctx: &CallContext,
        key: &str,
        value: &str,
    ) -> Result<Vec<api::SandboxDetail>> {
        let key_value = ctx.require_credential(P)?;
        let url = with_query(
            self.http.url("/v2/sandboxes"),
            &[
                ("metadata", format!("{key}={value}").as_str()),
                ("state", "running,paused"),
                ("limit", "100"),
            ],
        );
        let req = self
            .http
            .client()
            .get(url)
            .header("X-API-Key", key_value.expose_secret());
        self.http.send_json(ctx, req).await
    }

    /// The envd base URL of a sandbox, from the configured template.
    pub(crate) fn envd_base(&self, id: &str, domain: Option<&str>) -> Result<Url> {
        check_id(id)?;
        let domain = domain
            .filter(|d| !d.is_empty())
            .unwrap_or(&self.default_domain);
        let url = self
            .envd_url_template
            .replace("{port}", &ENVD_PORT.to_string())
            .replace("{sandboxID}", id)
            .replace("{domain}", domain);
        let parsed = Url::parse(&url).map_err(|e| ProviderError::Protocol {
            provider: P,
            message: format!("the envd URL for the sandbox is invalid: {e}"),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(ProviderError::Protocol {
                provider: P,
                message: "the envd URL for the sandbox is not an http(s) URL".into(),
            });
        }
        Ok(parsed)
    }

    fn envd(&self, envd: &Envd, method: Method, path: &str) -> RequestBuilder {
        self.envd_at(envd, method, join(&envd.base, path))
    }

    fn envd_at(&self, envd: &Envd, method: Method, url: Url) -> RequestBuilder {
        let req = self.http.client().request(method, url);
        match &envd.token {
            Some(t) => req.header("X-Access-Token", t.expose_secret()),
            None => req,
        }
    }

    /// `POST /process.Process/Start` (Connect server stream); the body is one enveloped
    /// `StartRequest`. The answer's body is the envelope stream.
    pub(crate) async fn process_start(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        envelope: Vec<u8>,
        timeout: Duration,
        grace: Duration,
    ) -> Result<Response> {
        let req = self
            .envd(envd, Method::POST, "/process.Process/Start")
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header("Connect-Timeout-Ms", timeout.as_millis().max(1).to_string())
            .header("Keepalive-Ping-Interval", "50")
            .body(envelope);
        self.http.send_with_timeout(ctx, req, timeout + grace).await
    }

    /// `POST /filesystem.Filesystem/Stat` (Connect unary, JSON). `None` when envd answers
    /// `not_found`.
    pub(crate) async fn stat(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        path: &str,
    ) -> Result<Option<api::StatResponse>> {
        let req = self
            .envd(envd, Method::POST, "/filesystem.Filesystem/Stat")
            .header("Connect-Protocol-Version", "1")
            .json(&api::StatRequest {
                path: path.to_owned(),
            });
        match self.http.send_json(ctx, req).await {
            Ok(r) => Ok(Some(r)),
            Err(ProviderError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /files?path=` (raw bytes).
    pub(crate) async fn download(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        path: &str,
    ) -> Result<Response> {
        let req = self
            .envd_at(
                envd,
                Method::GET,
                with_query(join(&envd.base, "/files"), &[("path", path)]),
            )
            .header("Accept-Encoding", "identity");
        self.http.send(ctx, req).await
    }

    /// `POST /files?path=` with a multipart `file` field (accepted by every envd version).
    pub(crate) async fn upload(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        path: &str,
        content: &[u8],
    ) -> Result<Vec<api::EntryInfo>> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let (content_type, body) = multipart_file("file", name, content);
        let req = self
            .envd_at(
                envd,
                Method::POST,
                with_query(join(&envd.base, "/files"), &[("path", path)]),
            )
            .header("Content-Type", content_type)
            .body(body);
        self.http.send_json(ctx, req).await
    }
}
