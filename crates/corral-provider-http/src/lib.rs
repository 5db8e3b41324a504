//! Shared reqwest plumbing for the provider adapters, so each adapter is only its provider's
//! endpoints and shapes.
//!
//! [`ProviderHttp`] owns one `reqwest::Client` built the same way for every provider: explicit
//! connect and request timeouts, no redirects (a provider that redirects is answering
//! something Corral did not ask), no environment proxies, and a cap on response bodies. Its
//! `send_*` methods apply the call's deadline and turn every failure into the port's
//! [`ProviderError`] taxonomy in one place ([`map_status`], [`map_send_error`]), keeping the
//! distinction that matters for creates: was the request sent (it may have been applied) or not.
//!
//! An adapter chooses once how its credential is presented ([`Auth`], via
//! [`ProviderHttp::with_auth`]) and then builds every authorised request with
//! [`ProviderHttp::authed`] (or [`ProviderHttp::authed_url`] for the provider's other hosts);
//! listings are followed with [`collect_pages`]. [`sse::SseParser`] decodes
//! `text/event-stream` bodies incrementally.
//!
//! URLs a provider's answers name (a sandbox's toolbox, envd or agent address) are checked
//! against the adapter's [`TrustedHosts`] and requested through a second client whose
//! resolver vets and pins the addresses ([`ProviderHttp::with_trusted_hosts`],
//! [`ProviderHttp::authed_trusted`], [`ProviderHttp::with_token`]). Error messages quote the
//! provider's text only after every secret the request carried is replaced, then cut
//! ([`error_message_redacted`]).

mod auth;
mod pages;
mod trust;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use corral_domain::Provider;
use corral_provider::{
    CallContext, ExposeSecret as _, ProviderError, Result, SecretString, excerpt,
};
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;

pub use auth::Auth;
/// The `text/event-stream` parser lives in `corral-domain` (Corral's own output stream is SSE
/// too); adapters reach it here as before.
pub use corral_domain::sse;
pub use corral_provider::net::is_public;
pub use pages::{Page, collect_pages};
pub use reqwest;
pub use trust::{TrustedHosts, TrustedUrl, is_host_name};
pub use url::Url;

/// How long to wait for a TCP/TLS connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole control-plane request may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest response body read into memory (file reads are 8 MiB, plus encoding overhead).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a provider's error body kept in an error message.
pub const ERROR_EXCERPT_CHARS: usize = 300;

/// Timeouts and caps of one provider's HTTP client. In a configuration file it is the
/// `[providers.<id>.http]` table: `connect_timeout_seconds`, `request_timeout_seconds`,
/// `max_response_bytes`, each optional.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "HttpSettings", into = "HttpSettings")]
pub struct HttpConfig {
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout (shortened further by the call's deadline).
    pub request_timeout: Duration,
    /// Largest response body accepted.
    pub max_response_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// `[providers.<id>.http]` as written.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
struct HttpSettings {
    connect_timeout_seconds: Option<u64>,
    request_timeout_seconds: Option<u64>,
    max_response_bytes: Option<usize>,
}

impl From<HttpConfig> for HttpSettings {
    fn from(c: HttpConfig) -> Self {
        HttpSettings {
            connect_timeout_seconds: Some(c.connect_timeout.as_secs().max(1)),
            request_timeout_seconds: Some(c.request_timeout.as_secs().max(1)),
            max_response_bytes: Some(c.max_response_bytes),
        }
    }
}

impl TryFrom<HttpSettings> for HttpConfig {
    type Error = String;

    fn try_from(s: HttpSettings) -> std::result::Result<Self, String> {
        let d = HttpConfig::default();
        let positive = |name: &str, v: Option<u64>, default: Duration| match v {
            Some(0) => Err(format!("`{name}` must be at least 1")),
            Some(n) => Ok(Duration::from_secs(n)),
            None => Ok(default),
        };
        Ok(HttpConfig {
            connect_timeout: positive(
                "connect_timeout_seconds",
                s.connect_timeout_seconds,
                d.connect_timeout,
            )?,
            request_timeout: positive(
                "request_timeout_seconds",
                s.request_timeout_seconds,
                d.request_timeout,
            )?,
            max_response_bytes: s.max_response_bytes.unwrap_or(d.max_response_bytes),
        })
    }
}

/// One provider's HTTP client and base URL.
#[derive(Debug, Clone)]
pub struct ProviderHttp {
    provider: Provider,
    client: reqwest::Client,
    base: Url,
    config: HttpConfig,
    auth: Auth,
    /// The hosts provider answers may name, and the client (with the guarded resolver) that
    /// requests them; `None` until [`ProviderHttp::with_trusted_hosts`].
    trusted: Option<(TrustedHosts, reqwest::Client)>,
}

/// A client builder with the settings every provider client shares: timeouts, no redirects
/// (a provider that redirects is answering something Corral did not ask, and a redirect is a
/// new, unchecked URL), no environment proxies.
fn client_builder(config: &HttpConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .timeout(config.request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
}

impl ProviderHttp {
    /// A client for `provider` rooted at `base_url` (e.g. `https://api.e2b.app`).
    pub fn new(provider: Provider, base_url: &str, config: HttpConfig) -> Result<Self> {
        Self::build(provider, base_url, config, None)
    }

    /// As [`ProviderHttp::new`], but the base URL's host is reached at `pinned` and nowhere
    /// else: the client never resolves it (for a URL a caller chose, whose addresses were
    /// vetted once, so that a second DNS answer cannot point it elsewhere). `pinned` empty is
    /// an `InvalidRequest`: there would be nothing to connect to.
    pub fn pinned(
        provider: Provider,
        base_url: &str,
        config: HttpConfig,
        pinned: &[std::net::SocketAddr],
    ) -> Result<Self> {
        if pinned.is_empty() {
            return Err(ProviderError::InvalidRequest {
                provider,
                message: "the bridge URL has no vetted address to connect to".into(),
            });
        }
        Self::build(provider, base_url, config, Some(pinned))
    }

    fn build(
        provider: Provider,
        base_url: &str,
        config: HttpConfig,
        pinned: Option<&[std::net::SocketAddr]>,
    ) -> Result<Self> {
        let base = parse_base(provider, base_url)?;
        let mut builder = client_builder(&config);
        if let Some(addrs) = pinned {
            match base.host() {
                Some(url::Host::Domain(domain)) => {
                    builder = builder.resolve_to_addrs(domain, addrs);
                }
                // A literal address is not resolved; it must be one of the vetted ones.
                Some(url::Host::Ipv4(ip)) if addrs.iter().any(|a| a.ip() == ip) => {}
                Some(url::Host::Ipv6(ip)) if addrs.iter().any(|a| a.ip() == ip) => {}
                _ => {
                    return Err(ProviderError::InvalidRequest {
                        provider,
                        message: "the bridge URL's address is not among the vetted ones".into(),
                    });
                }
            }
        }
        let client = builder
            .build()
            .map_err(|e| client_build_error(provider, e))?;
        Ok(Self {
            provider,
            client,
            base,
            config,
            auth: Auth::Bearer,
            trusted: None,
        })
    }

    /// Lets this client reach the data-plane URLs the provider names, when they pass
    /// `trusted` (see [`TrustedHosts`]): builds a second client whose resolver resolves only
    /// trusted names, once, and refuses non-public answers for suffix-trusted ones.
    pub fn with_trusted_hosts(mut self, trusted: TrustedHosts) -> Result<Self> {
        let client = client_builder(&self.config)
            .dns_resolver(trusted.resolver())
            .build()
            .map_err(|e| client_build_error(self.provider, e))?;
        self.trusted = Some((trusted, client));
        Ok(self)
    }

    /// Checks a URL the provider named (`what`: the field, e.g. `toolboxProxyUrl`) against
    /// the trusted hosts; everything is refused when none were given.
    pub fn check_trusted(&self, what: &str, url: Url) -> Result<TrustedUrl> {
        match &self.trusted {
            Some((trusted, _)) => trusted.check(what, url),
            None => TrustedHosts::parse(self.provider, &[])?.check(what, url),
        }
    }

    /// The client that requests trusted URLs (`Protocol` when none was built: no URL can have
    /// been checked against this client's hosts).
    fn trusted_client(&self) -> Result<&reqwest::Client> {
        self.trusted
            .as_ref()
            .map(|(_, client)| client)
            .ok_or_else(|| ProviderError::Protocol {
                provider: self.provider,
                message: "no trusted hosts are configured for the provider's data plane".into(),
            })
    }

    /// A request to a provider-named `url` carrying the call's credential, presented as this
    /// client's [`Auth`] (Daytona's toolbox takes the account key).
    pub fn authed_trusted(
        &self,
        ctx: &CallContext,
        method: Method,
        url: &TrustedUrl,
    ) -> Result<RequestBuilder> {
        let secret = ctx.require_credential(self.provider)?;
        Ok(self
            .auth
            .request(self.trusted_client()?, method, url.as_url().clone(), secret))
    }

    /// A request to a provider-named `url` without a credential.
    pub fn trusted_request(&self, method: Method, url: &TrustedUrl) -> Result<RequestBuilder> {
        Ok(self.trusted_client()?.request(method, url.as_url().clone()))
    }

    /// Presents the call's credential as `auth` on every [`ProviderHttp::authed`] request
    /// (default: bearer).
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// A request to `base` + `path` carrying the call's credential (`MissingCredential` when
    /// the call has none).
    pub fn authed(&self, ctx: &CallContext, method: Method, path: &str) -> Result<RequestBuilder> {
        self.authed_url(ctx, method, self.url(path))
    }

    /// As [`ProviderHttp::authed`], with `query` pairs appended (form-encoded).
    pub fn authed_query(
        &self,
        ctx: &CallContext,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<RequestBuilder> {
        self.authed_url(ctx, method, with_query(self.url(path), query))
    }

    /// A request to `url` carrying the call's credential, for a provider's other hosts that
    /// take the same credential and that the operator configured. Never for a host a caller
    /// or a provider answer chose (use [`ProviderHttp::authed_trusted`]).
    pub fn authed_url(
        &self,
        ctx: &CallContext,
        method: Method,
        url: Url,
    ) -> Result<RequestBuilder> {
        let secret = ctx.require_credential(self.provider)?;
        Ok(self.auth.request(&self.client, method, url, secret))
    }

    /// A request to a provider-named `url` carrying a token that is not the call's credential
    /// (E2B's envd access token, Together's in-VM agent token), presented as `auth`. The token
    /// joins the redaction set of this request's error messages.
    pub fn with_token(
        &self,
        method: Method,
        url: &TrustedUrl,
        auth: Auth,
        token: &SecretString,
    ) -> Result<RequestBuilder> {
        Ok(auth.request(self.trusted_client()?, method, url.as_url().clone(), token))
    }

    /// The provider this client talks to.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The timeouts and caps this client was built with.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// The underlying client, for requests to other hosts of the same provider (e.g. E2B's
    /// in-sandbox envd).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// `base` + `path` (`path` starts with `/`; the base's own path is kept as a prefix).
    pub fn url(&self, path: &str) -> Url {
        join(&self.base, path)
    }

    /// A request to `base` + `path`.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    /// Sends `req` within the call's deadline; a non-2xx answer becomes a [`ProviderError`].
    pub async fn send(&self, ctx: &CallContext, req: RequestBuilder) -> Result<Response> {
        self.send_with_timeout(ctx, req, self.config.request_timeout)
            .await
    }

    /// As [`ProviderHttp::send`], but the whole request (body included) may take `limit`
    /// instead of the configured request timeout, still bounded by the call's deadline: for
    /// long-running calls such as a streamed command whose own deadline exceeds it.
    pub async fn send_with_timeout(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
        limit: Duration,
    ) -> Result<Response> {
        let left = ctx.bounded(limit);
        if left.is_zero() {
            return Err(ProviderError::Unavailable {
                provider: self.provider,
                message: "the call's deadline passed before the request was sent".into(),
                retry_after: None,
            });
        }
        let (client, request) = req.timeout(left).build_split();
        let request = request.map_err(|e| map_send_error(self.provider, &e))?;
        let sent = sent_secrets(&request);
        let resp = client
            .execute(request)
            .await
            .map_err(|e| map_send_error(self.provider, &e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let failure = self.failure(ctx, resp, &sent).await;
        Err(failure.error)
    }

    /// As [`ProviderHttp::send_with_timeout`], but a non-2xx answer is returned as a
    /// [`Failure`] carrying its status and body besides the mapped error, for providers whose
    /// error *codes* change what the adapter does (Vercel's `sandbox_stopped`, …).
    pub async fn send_for_failure(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
        limit: Duration,
    ) -> std::result::Result<Response, Failure> {
        let left = ctx.bounded(limit);
        if left.is_zero() {
            return Err(Failure::transport(ProviderError::Unavailable {
                provider: self.provider,
                message: "the call's deadline passed before the request was sent".into(),
                retry_after: None,
            }));
        }
        let (client, request) = req.timeout(left).build_split();
        let request = request.map_err(|e| Failure::transport(map_send_error(self.provider, &e)))?;
        let sent = sent_secrets(&request);
        let resp = client
            .execute(request)
            .await
            .map_err(|e| Failure::transport(map_send_error(self.provider, &e)))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.failure(ctx, resp, &sent).await)
    }

    /// Maps a non-2xx answer. Every secret in play (the call's credential and the tokens the
    /// request carried, `sent`) is scrubbed from the provider's text *before* it is cut to
    /// an excerpt, so no part of a secret straddling the cut survives (the raw body stays in
    /// `Failure::body` for the adapter only).
    async fn failure(&self, ctx: &CallContext, resp: Response, sent: &[String]) -> Failure {
        let status = resp.status();
        let headers = resp.headers().clone();
        let path = resp.url().path().to_owned();
        // Error bodies are read only up to a small cap: they are for the message.
        let body = read_capped(self.provider, resp, 64 * 1024)
            .await
            .unwrap_or_default();
        let mut secrets: Vec<&str> = sent.iter().map(String::as_str).collect();
        if let Some(credential) = ctx.credential() {
            secrets.push(credential.expose_secret());
        }
        let mut error =
            map_status_redacted(self.provider, status, &headers, &body, &path, &secrets);
        for secret in &secrets {
            error = error.redact(secret);
        }
        Failure {
            error,
            status: Some(status.as_u16()),
            body,
        }
    }
}

/// A failed request: the mapped error, and the HTTP status and (capped) body when the provider
/// answered.
#[derive(Debug)]
pub struct Failure {
    /// The error in the port's taxonomy.
    pub error: ProviderError,
    /// The HTTP status, when an answer came back.
    pub status: Option<u16>,
    /// The error body (at most 64 KiB), empty when no answer came back.
    pub body: Bytes,
}

impl Failure {
    fn transport(error: ProviderError) -> Self {
        Self {
            error,
            status: None,
            body: Bytes::new(),
        }
    }
}

impl ProviderHttp {
    /// Sends `req` and reads the whole body (capped).
    pub async fn send_bytes(&self, ctx: &CallContext, req: RequestBuilder) -> Result<Bytes> {
        let resp = self.send(ctx, req).await?;
        read_capped(self.provider, resp, self.config.max_response_bytes).await
    }

    /// Sends `req` and parses the body as JSON; a malformed body is a `Protocol` error.
    pub async fn send_json<T: DeserializeOwned>(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
    ) -> Result<T> {
        let body = self.send_bytes(ctx, req).await?;
        parse_json(self.provider, &body)
    }

    /// As [`ProviderHttp::send_json`], but the whole exchange may take `limit` (see
    /// [`ProviderHttp::send_with_timeout`]): for calls that wait on a command.
    pub async fn send_json_within<T: DeserializeOwned>(
        &self,
        ctx: &CallContext,
        req: RequestBuilder,
        limit: Duration,
    ) -> Result<T> {
        let resp = self.send_with_timeout(ctx, req, limit).await?;
        self.read_json(resp).await
    }

    /// Reads a successful answer's body (capped) and parses it as JSON, for callers that
    /// looked at the status or headers first ([`ProviderHttp::send_for_failure`], a paging
    /// header).
    pub async fn read_json<T: DeserializeOwned>(&self, resp: Response) -> Result<T> {
        let body = read_capped(self.provider, resp, self.config.max_response_bytes).await?;
        parse_json(self.provider, &body)
    }

    /// Sends `req` and ignores the body.
    pub async fn send_empty(&self, ctx: &CallContext, req: RequestBuilder) -> Result<()> {
        self.send_bytes(ctx, req).await.map(drop)
    }
}

/// A `multipart/form-data` body holding one file field, as file-upload endpoints (E2B envd,
/// Daytona toolbox) take it: returns the `Content-Type` header value and the body.
pub fn multipart_file(field: &str, filename: &str, content: &[u8]) -> (String, Vec<u8>) {
    multipart_form(&[], field, filename, content)
}

/// A `multipart/form-data` body holding text fields, then one file field (Runloop's
/// `upload_file` takes `path` and `file`): returns the `Content-Type` header value and the body.
pub fn multipart_form(
    texts: &[(&str, &str)],
    field: &str,
    filename: &str,
    content: &[u8],
) -> (String, Vec<u8>) {
    // A fresh ULID makes a collision with the content practically impossible.
    let boundary = format!("corral-boundary-{}", corral_domain::OperationId::new());
    let quote = |s: &str| s.replace(['"', '\r', '\n'], "_");
    let mut body = Vec::with_capacity(content.len() + 256);
    for (name, value) in texts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\n{value}\r\n",
                quote(name)
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"; filename=\"{}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n",
            quote(field),
            quote(filename)
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Percent-encodes `s` for use as one URL path segment (as JavaScript's
/// `encodeURIComponent`), so an id can never add path segments or a query. URL parsing still
/// treats a whole segment `.` or `..` as a dot segment: callers refuse those ids.
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses a provider's JSON body; failure is a `Protocol` error quoting the parser.
pub fn parse_json<T: DeserializeOwned>(provider: Provider, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| ProviderError::Protocol {
        provider,
        message: format!("malformed JSON body: {e}"),
    })
}

fn parse_base(provider: Provider, base_url: &str) -> Result<Url> {
    let url = Url::parse(base_url).map_err(|e| ProviderError::InvalidRequest {
        provider,
        message: format!("base URL is invalid: {e}"),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(ProviderError::InvalidRequest {
            provider,
            message: "base URL must be an http(s) URL with a host".into(),
        });
    }
    Ok(url)
}

/// `url` with `pairs` appended to its query (form-encoded), for requests to a provider's other
/// hosts (E2B envd, Daytona toolbox).
pub fn with_query(mut url: Url, pairs: &[(&str, &str)]) -> Url {
    if !pairs.is_empty() {
        url.query_pairs_mut().extend_pairs(pairs);
    }
    url
}

/// `base` + `path`, keeping any path prefix of `base`.
pub fn join(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    let prefix = base.path().trim_end_matches('/');
    url.set_path(&format!("{prefix}/{}", path.trim_start_matches('/')));
    url
}

/// Reads a response body of at most `cap` bytes; more is a `Protocol` error, a broken or
/// timed-out body a failure after send.
pub async fn read_capped(provider: Provider, mut resp: Response, cap: usize) -> Result<Bytes> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(ProviderError::Protocol {
            provider,
            message: format!("response body exceeds {cap} bytes"),
        });
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| map_body_error(provider, &e))?
    {
        if buf.len() + chunk.len() > cap {
            return Err(ProviderError::Protocol {
                provider,
                message: format!("response body exceeds {cap} bytes"),
            });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Maps a failure to get a response.
pub fn map_send_error(provider: Provider, e: &reqwest::Error) -> ProviderError {
    if let Some(refusal) = trust::guard_refusal(e) {
        // The provider named a host that resolves where Corral will not connect: its answer
        // is what is wrong, and nothing was sent.
        return ProviderError::Protocol {
            provider,
            message: format!("refused to connect to a provider-named host: {refusal}"),
        };
    }
    if e.is_connect() {
        // Nothing was sent: no connection was made.
        return ProviderError::Unavailable {
            provider,
            message: "cannot connect to the provider".into(),
            retry_after: None,
        };
    }
    if e.is_redirect() {
        return ProviderError::Protocol {
            provider,
            message: "the provider answered with a redirect, which is not followed".into(),
        };
    }
    if e.is_builder() {
        return ProviderError::InvalidRequest {
            provider,
            message: "the request could not be built".into(),
        };
    }
    // Timeouts and resets after the connection was made: the request may have been received.
    if e.is_timeout() {
        return ProviderError::TimedOutAfterSend { provider };
    }
    ProviderError::Protocol {
        provider,
        message: format!(
            "the connection failed after the request was sent: {}",
            source_chain(e)
        ),
    }
}

/// Reads a response body of at most `cap` bytes: `Ok(None)` when it is longer (the rest is
/// not read), for callers to whom "too large" means something (a file read over its limit).
pub async fn read_at_most(
    provider: Provider,
    mut resp: Response,
    cap: usize,
) -> Result<Option<Bytes>> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Ok(None);
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| map_body_error(provider, &e))?
    {
        if buf.len() + chunk.len() > cap {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Some(buf.freeze()))
}

/// Reads a downloaded file's body of at most `max_bytes`: `FileTooLarge` for `path` when it is
/// longer (for adapters whose download endpoint streams the raw file).
pub async fn read_file_body(
    provider: Provider,
    resp: Response,
    path: &str,
    max_bytes: usize,
) -> Result<Vec<u8>> {
    match read_at_most(provider, resp, max_bytes).await? {
        Some(bytes) => Ok(bytes.to_vec()),
        None => Err(ProviderError::FileTooLarge {
            path: path.to_owned(),
            limit: max_bytes,
        }),
    }
}

/// Maps a failure while reading a response body (the request was sent): a timeout is
/// `TimedOutAfterSend`, anything else a `Protocol` error.
pub fn map_body_error(provider: Provider, e: &reqwest::Error) -> ProviderError {
    if e.is_timeout() {
        ProviderError::TimedOutAfterSend { provider }
    } else {
        ProviderError::Protocol {
            provider,
            message: format!("the response body broke off: {}", source_chain(e)),
        }
    }
}

/// The error's causes, without the URL (which could carry identifiers worth keeping out of logs).
fn source_chain(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(c) = cur {
        parts.push(c.to_string());
        cur = c.source();
    }
    if parts.is_empty() {
        "unknown cause".into()
    } else {
        excerpt(&parts.join(": "), ERROR_EXCERPT_CHARS)
    }
}

/// Maps a non-2xx answer. `path` names the resource for `NotFound`.
pub fn map_status(
    provider: Provider,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    path: &str,
) -> ProviderError {
    map_status_redacted(provider, status, headers, body, path, &[])
}

/// As [`map_status`], with `secrets` scrubbed from the provider's text before it is cut (see
/// [`error_message_redacted`]).
pub fn map_status_redacted(
    provider: Provider,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    path: &str,
    secrets: &[&str],
) -> ProviderError {
    let message = error_message_redacted(body, secrets);
    match status.as_u16() {
        401 | 403 => ProviderError::Unauthorized { provider, message },
        404 | 410 => ProviderError::NotFound {
            provider,
            resource: path.to_owned(),
        },
        400 | 409 | 413 | 422 => ProviderError::InvalidRequest { provider, message },
        429 => ProviderError::RateLimited {
            provider,
            retry_after: retry_after(headers),
        },
        503 => ProviderError::Unavailable {
            provider,
            message,
            retry_after: retry_after(headers),
        },
        s @ 500..=599 => ProviderError::ServerError {
            provider,
            status: s,
            message,
        },
        s => ProviderError::Unexpected {
            provider,
            status: s,
            message,
        },
    }
}

/// The message of a provider error body: a JSON `message`/`error`/`detail` field if there is
/// one, else the text; trimmed.
pub fn error_message(body: &[u8]) -> String {
    error_message_redacted(body, &[])
}

/// As [`error_message`], with every one of `secrets` (4 characters or more) replaced by
/// `[redacted]` before the text is cut to [`ERROR_EXCERPT_CHARS`]: redacting after the cut
/// would leave the first part of a secret that straddles it.
pub fn error_message_redacted(body: &[u8], secrets: &[&str]) -> String {
    message_within(body, secrets, ERROR_EXCERPT_CHARS)
}

/// `text` with every one of `secrets` (4 characters or more) replaced by `[redacted]`, then cut
/// to [`ERROR_EXCERPT_CHARS`]: for provider text that does not arrive as an error body (an
/// error event inside a stream).
pub fn redacted_excerpt(text: &str, secrets: &[&str]) -> String {
    excerpt(&redact_all(text, secrets), ERROR_EXCERPT_CHARS)
}

/// [`error_message_redacted`] cut to `max` characters.
fn message_within(body: &[u8], secrets: &[&str], max: usize) -> String {
    let cut = |s: &str| excerpt(&redact_all(s, secrets), max);
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        for key in ["message", "error", "detail", "msg"] {
            match &v[key] {
                serde_json::Value::String(s) => return cut(s),
                serde_json::Value::Object(o) => {
                    if let Some(serde_json::Value::String(s)) = o.get("message") {
                        return cut(s);
                    }
                }
                _ => {}
            }
        }
    }
    let msg = cut(&text);
    if msg.is_empty() {
        "no details".into()
    } else {
        msg
    }
}

/// Shortest secret scrubbed (as [`ProviderError::redact`]): shorter strings would scrub
/// ordinary words.
const MIN_REDACTED_CHARS: usize = 4;

/// `text` with every occurrence of each of `secrets` replaced by `[redacted]`.
fn redact_all(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if secret.len() >= MIN_REDACTED_CHARS && out.contains(secret) {
            out = out.replace(secret, "[redacted]");
        }
    }
    out
}

/// The secrets a request carries: its sensitive header values (a bearer token without its
/// scheme, a named credential header as [`Auth`] sets it). HTTP Basic values are left out:
/// the only one sent (E2B's user selection) has no password.
fn sent_secrets(request: &reqwest::Request) -> Vec<String> {
    request
        .headers()
        .values()
        .filter(|v| v.is_sensitive())
        .filter_map(|v| v.to_str().ok())
        .filter(|v| !v.starts_with("Basic "))
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_owned())
        .collect()
}

fn client_build_error(provider: Provider, e: reqwest::Error) -> ProviderError {
    ProviderError::Unavailable {
        provider,
        message: format!("cannot build the HTTP client: {}", e.without_url()),
        retry_after: None,
    }
}

/// `Retry-After` in seconds (HTTP-date forms are treated as absent: providers send seconds).
/// Without it, the longest of per-bucket `Retry-After-<bucket>` headers (Daytona sends
/// `Retry-After-sandbox-create` and the like) is used.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds = |v: &reqwest::header::HeaderValue| v.to_str().ok()?.trim().parse::<u64>().ok();
    if let Some(v) = headers.get(reqwest::header::RETRY_AFTER) {
        return seconds(v).map(Duration::from_secs);
    }
    headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("retry-after-"))
        .filter_map(|(_, v)| seconds(v))
        .max()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(body: &'static str) -> Response {
        Response::from(axum::http::Response::new(body))
    }

    #[tokio::test]
    async fn a_file_body_is_read_up_to_the_limit_and_refused_past_it() {
        let p = Provider::E2b;
        let read = read_file_body(p, response("hello"), "/f", 5).await.unwrap();
        assert_eq!(read, b"hello");
        let err = read_file_body(p, response("hello!"), "/f", 5)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ProviderError::FileTooLarge { path, limit: 5 } if path == "/f"),
            "{err:?}"
        );
    }

    #[test]
    fn path_segments_cannot_add_segments_or_queries() {
        assert_eq!(path_segment("dbx_1-a.b~"), "dbx_1-a.b~");
        assert_eq!(path_segment("../x?y=1#z /"), "..%2Fx%3Fy%3D1%23z%20%2F");
    }

    #[test]
    fn join_keeps_the_base_path_prefix() {
        let base = Url::parse("http://127.0.0.1:9/api/").unwrap();
        assert_eq!(
            join(&base, "/sandboxes/x").as_str(),
            "http://127.0.0.1:9/api/sandboxes/x"
        );
        let bare = Url::parse("https://api.example.com").unwrap();
        assert_eq!(
            join(&bare, "/v1/a").as_str(),
            "https://api.example.com/v1/a"
        );
    }

    #[test]
    fn statuses_map_to_meanings() {
        let p = Provider::E2b;
        let h = HeaderMap::new();
        let m = |s: u16| {
            map_status(
                p,
                StatusCode::from_u16(s).unwrap(),
                &h,
                b"{\"message\":\"nope\"}",
                "/x",
            )
        };
        assert!(
            matches!(m(401), ProviderError::Unauthorized { ref message, .. } if message == "nope")
        );
        assert!(matches!(m(403), ProviderError::Unauthorized { .. }));
        assert!(matches!(m(404), ProviderError::NotFound { ref resource, .. } if resource == "/x"));
        assert!(matches!(m(422), ProviderError::InvalidRequest { .. }));
        assert!(matches!(m(409), ProviderError::InvalidRequest { .. }));
        assert!(matches!(
            m(429),
            ProviderError::RateLimited {
                retry_after: None,
                ..
            }
        ));
        assert!(matches!(m(503), ProviderError::Unavailable { .. }));
        assert!(matches!(
            m(500),
            ProviderError::ServerError { status: 500, .. }
        ));
        assert!(matches!(
            m(418),
            ProviderError::Unexpected { status: 418, .. }
        ));
    }

    #[test]
    fn retry_after_reads_the_plain_header_else_the_longest_bucket_header() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after-sandbox-create", "12".parse().unwrap());
        h.insert("retry-after-authenticated", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(12)));
        h.insert("retry-after", "5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(5)));
    }

    #[test]
    fn error_messages_prefer_json_fields_and_are_trimmed() {
        assert_eq!(error_message(br#"{"error":{"message":"deep"}}"#), "deep");
        assert_eq!(error_message(br#"{"detail":"why"}"#), "why");
        assert_eq!(error_message(b"plain\ntext"), "plain text");
        assert_eq!(error_message(b""), "no details");
        assert!(error_message("x".repeat(5000).as_bytes()).chars().count() <= 301);
    }

    #[tokio::test]
    async fn a_pinned_client_connects_to_the_vetted_address_and_never_resolves_the_name() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
        });
        // `.invalid` never resolves (RFC 6761): only the pin can make this request succeed.
        let url = format!("http://bridge.corral.invalid:{}/", addr.port());
        let http = ProviderHttp::pinned(Provider::Cloudflare, &url, HttpConfig::default(), &[addr])
            .unwrap();
        let ctx = CallContext::anonymous();
        let body = http
            .send_bytes(&ctx, http.request(Method::GET, "/health"))
            .await
            .unwrap();
        assert_eq!(&body[..], b"ok");
        let unpinned =
            ProviderHttp::new(Provider::Cloudflare, &url, HttpConfig::default()).unwrap();
        assert!(
            unpinned
                .send_bytes(&ctx, unpinned.request(Method::GET, "/health"))
                .await
                .is_err()
        );
    }

    #[test]
    fn a_pinned_client_refuses_a_literal_address_it_was_not_given_and_an_empty_pin() {
        let vetted: std::net::SocketAddr = "203.0.113.7:443".parse().unwrap();
        let p = Provider::Cloudflare;
        let c = HttpConfig::default();
        assert!(ProviderHttp::pinned(p, "https://203.0.113.7/", c.clone(), &[vetted]).is_ok());
        assert!(ProviderHttp::pinned(p, "https://127.0.0.1/", c.clone(), &[vetted]).is_err());
        assert!(ProviderHttp::pinned(p, "https://bridge.example.com/", c, &[]).is_err());
    }

    /// A loopback server answering every request with `status` and `body(request head)`,
    /// counting the connections it accepted.
    async fn answering(
        status: u16,
        body: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> (
        std::net::SocketAddr,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            while let Ok((mut sock, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0u8; 16 * 1024];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let text = body(&head);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = sock.write_all(answer.as_bytes()).await;
            }
        });
        (addr, accepted)
    }

    /// The value of header `name` in a raw request head.
    fn header_in(head: &str, name: &str) -> String {
        head.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    }

    /// Every 8-character window of `secret` absent from `shown`.
    fn assert_no_part_of(secret: &str, shown: &str) {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(8) {
            let part: String = w.iter().collect();
            assert!(
                !shown.contains(&part),
                "`{part}` of the secret leaked: {shown}"
            );
        }
    }

    #[tokio::test]
    async fn a_credential_straddling_the_excerpt_cut_is_redacted_whole() {
        // The provider echoes the key so that it starts 10 characters before the cut.
        let key = "sk-live-CANARYKEY0123456789ABCDEF";
        let (addr, _) = answering(400, |head| {
            let echoed = header_in(head, "authorization");
            let echoed = echoed.trim_start_matches("Bearer ");
            format!(
                "{}{echoed} is not allowed",
                "x".repeat(ERROR_EXCERPT_CHARS - 10)
            )
        })
        .await;
        let http = ProviderHttp::new(
            Provider::Daytona,
            &format!("http://{addr}"),
            HttpConfig::default(),
        )
        .unwrap();
        let ctx = CallContext::new(Some(SecretString::from(key)), Default::default());
        let req = http.authed(&ctx, Method::GET, "/x").unwrap();
        let err = http.send_bytes(&ctx, req).await.unwrap_err();
        assert_no_part_of(key, &format!("{err} {err:?}"));
    }

    #[tokio::test]
    async fn an_in_sandbox_token_is_redacted_from_its_requests_errors() {
        let token = SecretString::from("envd-token-CANARY0123456789ABCDEF");
        let (addr, _) = answering(500, |head| {
            let echoed = header_in(head, "x-access-token");
            format!(
                r#"{{"message":"{}token {echoed} expired"}}"#,
                "y".repeat(290)
            )
        })
        .await;
        let origin = format!("http://{addr}");
        let trusted = TrustedHosts::parse(Provider::E2b, std::slice::from_ref(&origin)).unwrap();
        let http = ProviderHttp::new(Provider::E2b, "https://api.e2b.app", HttpConfig::default())
            .unwrap()
            .with_trusted_hosts(trusted)
            .unwrap();
        let url = http
            .check_trusted("envd URL", Url::parse(&origin).unwrap())
            .unwrap();
        let req = http
            .with_token(Method::GET, &url, Auth::Header("X-Access-Token"), &token)
            .unwrap();
        let ctx = CallContext::new(
            Some(SecretString::from("e2b_other_key")),
            Default::default(),
        );
        let err = http.send_bytes(&ctx, req).await.unwrap_err();
        assert!(matches!(err, ProviderError::ServerError { .. }), "{err:?}");
        assert_no_part_of(token.expose_secret(), &format!("{err} {err:?}"));
    }

    #[tokio::test]
    async fn a_trusted_name_resolving_to_a_non_public_address_is_refused_before_connecting() {
        let (addr, accepted) = answering(200, |_| "ok".into()).await;
        // `localhost` as a trusted *suffix*: https, public addresses only.
        let trusted = TrustedHosts::parse(Provider::Daytona, &["localhost".to_owned()]).unwrap();
        let http = ProviderHttp::new(
            Provider::Daytona,
            "https://app.daytona.io/api",
            HttpConfig::default(),
        )
        .unwrap()
        .with_trusted_hosts(trusted)
        .unwrap();
        let url = http
            .check_trusted(
                "toolboxProxyUrl",
                Url::parse(&format!("https://localhost:{}/t", addr.port())).unwrap(),
            )
            .unwrap();
        let ctx = CallContext::new(Some(SecretString::from("dtn_key_0123")), Default::default());
        let req = http.authed_trusted(&ctx, Method::GET, &url).unwrap();
        let err = http.send_bytes(&ctx, req).await.unwrap_err();
        assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
        assert!(err.to_string().contains("non-public"), "{err}");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_operator_origin_is_reached_at_any_address_and_nothing_else_is() {
        let (addr, accepted) = answering(200, |_| "ok".into()).await;
        let by_name = format!("http://localhost:{}", addr.port());
        let trusted = TrustedHosts::parse(
            Provider::Together,
            &[format!("http://{addr}"), by_name.clone()],
        )
        .unwrap();
        let http = ProviderHttp::new(
            Provider::Together,
            "https://api.example",
            HttpConfig::default(),
        )
        .unwrap()
        .with_trusted_hosts(trusted)
        .unwrap();
        let ctx = CallContext::anonymous();
        for origin in [format!("http://{addr}"), by_name] {
            let url = http
                .check_trusted("agent.url", Url::parse(&origin).unwrap())
                .unwrap();
            let body = http
                .send_bytes(&ctx, http.trusted_request(Method::GET, &url).unwrap())
                .await
                .unwrap();
            assert_eq!(&body[..], b"ok");
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A client without trusted hosts refuses every provider-named URL.
        let bare = ProviderHttp::new(
            Provider::Together,
            "https://api.example",
            HttpConfig::default(),
        )
        .unwrap();
        assert!(
            bare.check_trusted("agent.url", Url::parse(&format!("http://{addr}")).unwrap())
                .is_err()
        );
    }

    #[test]
    fn a_canary_at_every_position_of_a_body_survives_no_cut() {
        // Exhaustive where the property test samples: every position of the canary in a short
        // body, every cut from 1 to past the body's end, plain and JSON.
        let canary = "CANARY0123456789SECRET";
        let filler = "abcdefghij klmnopqrs, tuvwxyz; ".repeat(3);
        let windows: Vec<String> = canary
            .chars()
            .collect::<Vec<_>>()
            .windows(8)
            .map(|w| w.iter().collect())
            .collect();
        for at in 0..=filler.len() {
            let text = format!("{}{canary}{}", &filler[..at], &filler[at..]);
            let json = serde_json::json!({ "message": text }).to_string();
            for body in [&text, &json] {
                for max in 1..=text.len() + 1 {
                    let shown = message_within(body.as_bytes(), &[canary], max);
                    for part in &windows {
                        assert!(
                            !shown.contains(part.as_str()),
                            "at {at}, cut {max}: {shown}"
                        );
                    }
                }
            }
        }
    }

    /// How an error body wraps the text that holds the canary.
    #[derive(Debug, Clone, Copy)]
    enum BodyShape {
        Plain,
        Message,
        NestedError,
        Detail,
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The canary (upper-case letters and digits, which the filler never contains) placed
        /// at every position of every body shape, cut at any length: no 8 characters of it
        /// survive in the message.
        #[test]
        fn a_canary_credential_never_survives_any_cut_of_any_error_body(
            canary in "[A-Z0-9]{8,48}",
            filler in "[a-z .,:;/_\\-\n\t\"{}]{0,700}",
            at in 0usize..=1000,
            max in 1usize..=800,
            shape in proptest::prop_oneof![
                proptest::strategy::Just(BodyShape::Plain),
                proptest::strategy::Just(BodyShape::Message),
                proptest::strategy::Just(BodyShape::NestedError),
                proptest::strategy::Just(BodyShape::Detail),
            ],
        ) {
            let chars: Vec<char> = filler.chars().collect();
            let at = at.min(chars.len());
            let text: String = chars[..at]
                .iter()
                .chain(canary.chars().collect::<Vec<_>>().iter())
                .chain(chars[at..].iter())
                .collect();
            let body = match shape {
                BodyShape::Plain => text,
                BodyShape::Message => serde_json::json!({ "message": text }).to_string(),
                BodyShape::NestedError => {
                    serde_json::json!({ "error": { "message": text } }).to_string()
                }
                BodyShape::Detail => serde_json::json!({ "detail": text }).to_string(),
            };
            let shown = message_within(body.as_bytes(), &[canary.as_str(), "unrelated-secret"], max);
            let canary_chars: Vec<char> = canary.chars().collect();
            for w in canary_chars.windows(8) {
                let part: String = w.iter().collect();
                proptest::prop_assert!(!shown.contains(&part), "`{}` leaked: {}", part, shown);
            }
        }
    }

    #[test]
    fn base_url_must_be_http_with_a_host() {
        assert!(ProviderHttp::new(Provider::E2b, "ftp://x", HttpConfig::default()).is_err());
        assert!(ProviderHttp::new(Provider::E2b, "not a url", HttpConfig::default()).is_err());
        assert!(
            ProviderHttp::new(Provider::E2b, "http://127.0.0.1:1", HttpConfig::default()).is_ok()
        );
    }
}
