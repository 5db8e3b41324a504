//! One method per E2B endpoint: the control API (`X-API-Key`) and envd (`X-Access-Token`,
//! on the sandbox's own host). The control key is never sent to envd.

use std::time::Duration;

use corral_provider::{CallContext, ProviderError, Result, SecretString};
use corral_provider_http::reqwest::{Method, RequestBuilder, Response};
use corral_provider_http::{
    Auth, Page, ProviderHttp, TrustedUrl, Url, is_host_name, multipart_file,
};

use crate::api;

use crate::P;
/// The port envd listens on inside every sandbox.
pub(crate) const ENVD_PORT: u16 = 49983;
/// The control API's credential header.
pub(crate) const API_KEY_AUTH: Auth = Auth::Header("X-API-Key");
/// envd's per-sandbox token header.
const ACCESS_TOKEN_AUTH: Auth = Auth::Header("X-Access-Token");
/// The list endpoint's page size (its maximum).
const PAGE_LIMIT: &str = "100";
/// The response header naming the next page's token (`nextToken` on the next request).
pub(crate) const NEXT_TOKEN_HEADER: &str = "X-Next-Token";

/// The first envd version that runs requests as the template's default user when none is
/// named, and the user the SDKs name below it. The official SDKs (`e2b-dev/E2B`,
/// `packages/js-sdk/src/envd/versions.ts`: `ENVD_DEFAULT_USER = '0.4.0'`;
/// `packages/js-sdk/src/envd/rpc.ts` `authenticationHeader` and
/// `packages/js-sdk/src/sandbox/filesystem/index.ts`; the Python SDK's
/// `e2b/envd/versions.py` and `e2b/envd/rpc.py` alike) send `defaultUsername = "user"` for
/// older envd: as `Authorization: Basic base64("user:")` on Connect calls (process start,
/// stat) and as the `username` query parameter on `/files`.
const ENVD_DEFAULT_USER: (u64, u64, u64) = (0, 4, 0);
/// The SDKs' `defaultUsername`.
const LEGACY_USER: &str = "user";

/// The user to name explicitly on envd requests for a sandbox whose envd is `envd_version`:
/// `Some("user")` below 0.4.0, `None` from 0.4.0 on. A version that does not parse (E2B's
/// description requires it, so only a provider change would cause that) is read as current:
/// naming a user a current envd does not need would change who runs the command.
pub(crate) fn envd_user(envd_version: &str) -> Option<&'static str> {
    let version = envd_version.trim().trim_start_matches('v');
    let version = version.split('+').next().unwrap_or_default();
    let (core, pre_release) = match version.split_once('-') {
        Some((core, _)) => (core, true),
        None => (version, false),
    };
    let mut parts = core.split('.').map(str::parse::<u64>);
    let (Some(Ok(major)), minor, patch) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let minor = minor.unwrap_or(Ok(0)).ok()?;
    let patch = patch.unwrap_or(Ok(0)).ok()?;
    let version = (major, minor, patch);
    // As semver (and the SDKs' `compareVersions`) order them, `0.4.0-rc.1` is below `0.4.0`.
    let below = version < ENVD_DEFAULT_USER || version == ENVD_DEFAULT_USER && pre_release;
    below.then_some(LEGACY_USER)
}

/// Where one sandbox's envd answers, with which token, and as whom to ask.
#[derive(Clone)]
pub(crate) struct Envd {
    pub(crate) base: TrustedUrl,
    pub(crate) token: Option<SecretString>,
    /// The user named on every request (old envd only, see [`envd_user`]).
    pub(crate) user: Option<&'static str>,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd")
            .field("base", &self.base.as_url().as_str())
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("user", &self.user)
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

/// Snapshot ids of unnamed snapshots are `<templateID>:<tag>`: a sandbox id's characters
/// plus one `:`. Anything else (a named snapshot's `team/name:tag` among them) is not one
/// Corral made.
pub(crate) fn check_snapshot_id(snapshot_id: &str) -> Result<()> {
    let (template, tag) = snapshot_id
        .split_once(':')
        .unwrap_or((snapshot_id, "default"));
    if check_id(template).is_ok() && check_id(tag).is_ok() {
        Ok(())
    } else {
        Err(ProviderError::NotFound {
            provider: P,
            resource: "snapshot (malformed id)".into(),
        })
    }
}

impl Client {
    /// `http` must present the call's credential as [`API_KEY_AUTH`].
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

    /// `POST /sandboxes`.
    pub(crate) async fn create_sandbox(
        &self,
        ctx: &CallContext,
        body: &api::NewSandbox,
    ) -> Result<api::Sandbox> {
        let req = self
            .http
            .authed(ctx, Method::POST, "/sandboxes")?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /sandboxes/{sandboxID}`.
    pub(crate) async fn get_sandbox(
        &self,
        ctx: &CallContext,
        id: &str,
    ) -> Result<api::SandboxDetail> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("/sandboxes/{id}"))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /sandboxes/{sandboxID}`.
    pub(crate) async fn kill_sandbox(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/sandboxes/{id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /sandboxes/{sandboxID}/pause` (no body: memory is kept, E2B's default). `204`
    /// once paused; `409` when it already is (or is in another transition).
    pub(crate) async fn pause_sandbox(&self, ctx: &CallContext, id: &str) -> Result<()> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("/sandboxes/{id}/pause"))?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /sandboxes/{sandboxID}/connect`: resumes a paused sandbox (`201`) or answers a
    /// running one (`200`, its lifetime only extended).
    pub(crate) async fn connect_sandbox(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::ConnectSandbox,
    ) -> Result<api::Sandbox> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("/sandboxes/{id}/connect"))?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `POST /sandboxes/{sandboxID}/snapshots` (`201 SnapshotInfo`, synchronous).
    pub(crate) async fn create_snapshot(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &api::SandboxSnapshotRequest,
    ) -> Result<api::SnapshotInfo> {
        check_id(id)?;
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("/sandboxes/{id}/snapshots"))?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /snapshots?name=<snapshotID>&limit=100`: the snapshots of that name or id.
    pub(crate) async fn find_snapshots(
        &self,
        ctx: &CallContext,
        snapshot_id: &str,
    ) -> Result<Vec<api::SnapshotInfo>> {
        check_snapshot_id(snapshot_id)?;
        let query = [("name", snapshot_id), ("limit", PAGE_LIMIT)];
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/snapshots", &query)?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /templates/{templateID}` with the snapshot's id (E2B parses the tag off): a
    /// snapshot is a template. `204`; `404` for one E2B does not know.
    pub(crate) async fn delete_template(&self, ctx: &CallContext, snapshot_id: &str) -> Result<()> {
        check_snapshot_id(snapshot_id)?;
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/templates/{snapshot_id}"))?;
        self.http.send_empty(ctx, req).await
    }

    /// One page of `GET /v2/sandboxes?metadata=<k>%3D<v>&state=running,paused&limit=100`
    /// (`&nextToken=<token>` after the first); the next page's token is the `X-Next-Token`
    /// response header.
    pub(crate) async fn list_sandboxes_page(
        &self,
        ctx: &CallContext,
        metadata: &str,
        next_token: Option<String>,
    ) -> Result<Page<api::SandboxDetail>> {
        let mut query = vec![
            ("metadata", metadata),
            ("state", "running,paused"),
            ("limit", PAGE_LIMIT),
        ];
        if let Some(token) = next_token.as_deref() {
            query.push(("nextToken", token));
        }
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/v2/sandboxes", &query)?;
        // The next page's token is a header, so read them before the body.
        let resp = self.http.send(ctx, req).await?;
        let next = resp
            .headers()
            .get(NEXT_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(Page {
            items: self.http.read_json(resp).await?,
            next,
        })
    }

    /// The envd base URL of a sandbox, from the configured template: `domain` (a provider
    /// answer) must be a plain host name, and the URL must be on the trusted hosts, since the
    /// sandbox's token is sent there.
    pub(crate) fn envd_base(&self, id: &str, domain: Option<&str>) -> Result<TrustedUrl> {
        check_id(id)?;
        let domain = match domain.filter(|d| !d.is_empty()) {
            Some(d) if is_host_name(d) => d,
            Some(_) => {
                tracing::warn!(
                    provider = %P,
                    "refused a sandbox domain that is not a plain host name"
                );
                return Err(ProviderError::Protocol {
                    provider: P,
                    message: "the sandbox's `domain` is not a plain host name".into(),
                });
            }
            None => &self.default_domain,
        };
        let url = self
            .envd_url_template
            .replace("{port}", &ENVD_PORT.to_string())
            .replace("{sandboxID}", id)
            .replace("{domain}", domain);
        let parsed = Url::parse(&url).map_err(|e| ProviderError::Protocol {
            provider: P,
            message: format!("the envd URL for the sandbox is invalid: {e}"),
        })?;
        self.http.check_trusted("envd URL (`domain`)", parsed)
    }

    /// A request to envd carrying the sandbox's token (if it has one).
    fn envd_request(
        &self,
        envd: &Envd,
        method: Method,
        url: &TrustedUrl,
    ) -> Result<RequestBuilder> {
        match &envd.token {
            Some(token) => self.http.with_token(method, url, ACCESS_TOKEN_AUTH, token),
            None => self.http.trusted_request(method, url),
        }
    }

    /// A Connect call to envd: the user, if named, as the SDKs send it there (HTTP Basic,
    /// empty password).
    fn envd_rpc(&self, envd: &Envd, path: &str) -> Result<RequestBuilder> {
        let req = self.envd_request(envd, Method::POST, &envd.base.join(path))?;
        Ok(match envd.user {
            Some(user) => req.basic_auth(user, Some("")),
            None => req,
        })
    }

    /// `GET`/`POST /files?path=` (and `&username=` when the user is named).
    fn envd_files(&self, envd: &Envd, method: Method, path: &str) -> Result<RequestBuilder> {
        let mut query = vec![("path", path)];
        if let Some(user) = envd.user {
            query.push(("username", user));
        }
        let url = envd.base.join("/files").with_query(&query);
        self.envd_request(envd, method, &url)
    }

    /// `POST /process.Process/Start` (Connect server stream); the body is one enveloped
    /// `StartRequest`. envd kills the process at `timeout` (`Connect-Timeout-Ms`) and sends
    /// keepalives every `keepalive` when nothing else is sent. The answer's body is the
    /// envelope stream.
    pub(crate) async fn process_start(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        envelope: Vec<u8>,
        timeout: Duration,
        grace: Duration,
        keepalive: Duration,
    ) -> Result<Response> {
        let req = self
            .envd_rpc(envd, "/process.Process/Start")?
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header("Connect-Timeout-Ms", timeout.as_millis().max(1).to_string())
            .header(
                "Keepalive-Ping-Interval",
                keepalive.as_secs().max(1).to_string(),
            )
            .body(envelope);
        self.http.send_with_timeout(ctx, req, timeout + grace).await
    }

    /// `POST /process.Process/Connect` (Connect server stream); the body is one enveloped
    /// `ConnectRequest`. envd sends keepalives every `keepalive` when nothing else is sent; the
    /// whole stream may last `limit`.
    pub(crate) async fn process_connect(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        envelope: Vec<u8>,
        keepalive: Duration,
        limit: Duration,
    ) -> Result<Response> {
        let req = self
            .envd_rpc(envd, "/process.Process/Connect")?
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header(
                "Keepalive-Ping-Interval",
                keepalive.as_secs().max(1).to_string(),
            )
            .body(envelope);
        self.http.send_with_timeout(ctx, req, limit).await
    }

    /// A unary Connect call with the JSON codec: `POST /process.Process/<method>`; a Connect
    /// error is a non-2xx answer (`not_found` is 404).
    async fn process_unary<Req: serde::Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        method: &str,
        body: &Req,
    ) -> Result<Resp> {
        let req = self
            .envd_rpc(envd, &format!("/process.Process/{method}"))?
            .header("Connect-Protocol-Version", "1")
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `POST /process.Process/List`: the processes envd runs.
    pub(crate) async fn process_list(
        &self,
        ctx: &CallContext,
        envd: &Envd,
    ) -> Result<api::ListResponse> {
        self.process_unary(ctx, envd, "List", &api::ListRequest {})
            .await
    }

    /// `POST /process.Process/SendInput`.
    pub(crate) async fn process_send_input(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        body: &api::SendInputRequest,
    ) -> Result<api::Empty> {
        self.process_unary(ctx, envd, "SendInput", body).await
    }

    /// `POST /process.Process/CloseStdin`.
    pub(crate) async fn process_close_stdin(
        &self,
        ctx: &CallContext,
        envd: &Envd,
        body: &api::CloseStdinRequest,
    ) -> Result<api::Empty> {
        self.process_unary(ctx, envd, "CloseStdin", body).await
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
            .envd_rpc(envd, "/filesystem.Filesystem/Stat")?
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
            .envd_files(envd, Method::GET, path)?
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
            .envd_files(envd, Method::POST, path)?
            .header("Content-Type", content_type)
            .body(body);
        self.http.send_json(ctx, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_named_below_envd_0_4_0_only() {
        assert_eq!(envd_user("0.3.9"), Some("user"));
        assert_eq!(envd_user("0.1.5"), Some("user"));
        assert_eq!(envd_user("0.3"), Some("user"));
        assert_eq!(envd_user("0.4.0"), None);
        assert_eq!(envd_user("0.4.0-rc.1"), Some("user"));
        assert_eq!(envd_user("0.4.0+build.7"), None);
        assert_eq!(envd_user("0.5.7"), None);
        assert_eq!(envd_user("1.0.0"), None);
        assert_eq!(envd_user("v0.2.0"), Some("user"));
        // Unknown versions are read as current.
        assert_eq!(envd_user(""), None);
        assert_eq!(envd_user("latest"), None);
    }
}
