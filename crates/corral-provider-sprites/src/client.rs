//! One method per Sprites endpoint used by the adapter (`https://api.sprites.dev/v1/sprites`),
//! the exec WebSocket included.

use std::time::Duration;

use corral_provider::{CallContext, ExposeSecret as _, ProviderError, Result};
use corral_provider_http::reqwest::{Method, Response};
use corral_provider_http::{
    ProviderHttp, Url, map_status_redacted, path_segment as segment, with_query,
};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::api::{CreateSpriteRequest, ExecSession, SpriteResponse};

/// The exec WebSocket, once open.
pub(crate) type ExecSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Largest WebSocket message accepted from a sprite.
const MAX_WS_MESSAGE: usize = 16 * 1024 * 1024;

/// The Sprites API at one base URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

fn sprite(name: &str) -> String {
    format!("/v1/sprites/{}", segment(name))
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// `POST /v1/sprites`.
    pub(crate) async fn create_sprite(
        &self,
        ctx: &CallContext,
        body: &CreateSpriteRequest,
    ) -> Result<SpriteResponse> {
        let req = self
            .http
            .authed(ctx, Method::POST, "/v1/sprites")?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /v1/sprites/{name}`: a management read, which does not wake the sprite.
    pub(crate) async fn get_sprite(&self, ctx: &CallContext, name: &str) -> Result<SpriteResponse> {
        let req = self.http.authed(ctx, Method::GET, &sprite(name))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /v1/sprites/{name}`.
    pub(crate) async fn delete_sprite(&self, ctx: &CallContext, name: &str) -> Result<()> {
        let req = self.http.authed(ctx, Method::DELETE, &sprite(name))?;
        self.http.send_empty(ctx, req).await
    }

    /// `GET /v1/sprites/{name}/fs/read?path=…&workingDir=/`: the response, unread.
    pub(crate) async fn read_file(
        &self,
        ctx: &CallContext,
        name: &str,
        path: &str,
    ) -> Result<Response> {
        let req = self.http.authed_query(
            ctx,
            Method::GET,
            &format!("{}/fs/read", sprite(name)),
            &[("path", path), ("workingDir", "/")],
        )?;
        self.http.send(ctx, req).await
    }

    /// `GET /v1/sprites/{name}/fs/list?path=…&workingDir=/`.
    pub(crate) async fn list_dir(
        &self,
        ctx: &CallContext,
        name: &str,
        path: &str,
    ) -> Result<serde_json::Value> {
        let req = self.http.authed_query(
            ctx,
            Method::GET,
            &format!("{}/fs/list", sprite(name)),
            &[("path", path), ("workingDir", "/")],
        )?;
        self.http.send_json(ctx, req).await
    }

    /// `PUT /v1/sprites/{name}/fs/write?path=…&workingDir=/&mode=0644&mkdir=false` (raw body).
    pub(crate) async fn write_file(
        &self,
        ctx: &CallContext,
        name: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let req = self
            .http
            .authed_query(
                ctx,
                Method::PUT,
                &format!("{}/fs/write", sprite(name)),
                &[
                    ("path", path),
                    ("workingDir", "/"),
                    ("mode", "0644"),
                    ("mkdir", "false"),
                ],
            )?
            .header("Content-Type", "application/octet-stream")
            .body(content.to_vec());
        self.http.send_empty(ctx, req).await
    }

    /// `POST /v1/sprites/{name}/exec/{session_id}/kill?signal=<SIGNAME>`: Sprites signals
    /// the session's process group and streams NDJSON progress until it ended (or, after its
    /// `timeout`, sends SIGKILL); the progress is not read.
    pub(crate) async fn kill_session(
        &self,
        ctx: &CallContext,
        name: &str,
        session: u64,
        signal: &str,
    ) -> Result<()> {
        let req = self.http.authed_query(
            ctx,
            Method::POST,
            &format!("{}/exec/{session}/kill", sprite(name)),
            &[("signal", signal)],
        )?;
        self.http.send(ctx, req).await.map(drop)
    }

    /// `GET /v1/sprites/{name}/exec`: the sprite's exec sessions.
    pub(crate) async fn list_sessions(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Result<Vec<ExecSession>> {
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("{}/exec", sprite(name)))?;
        self.http.send_json(ctx, req).await
    }

    /// The WebSocket URL that re-attaches to session `session`: `…/exec?id=<session>`.
    pub(crate) fn attach_url(&self, name: &str, session: u64) -> Url {
        let id = session.to_string();
        self.ws_url(name, &[("id", id.as_str())])
    }

    /// The exec WebSocket URL of a durable command: its argv, no TTY, no stdin, and
    /// `max_run_after_disconnect` (a Go duration) so it outlives the socket.
    pub(crate) fn command_url(&self, name: &str, argv: &[String], run_after: &str) -> Url {
        let mut query: Vec<(&str, &str)> = argv.iter().map(|a| ("cmd", a.as_str())).collect();
        query.extend([
            ("tty", "false"),
            ("stdin", "false"),
            ("max_run_after_disconnect", run_after),
        ]);
        self.ws_url(name, &query)
    }

    fn ws_url(&self, name: &str, query: &[(&str, &str)]) -> Url {
        let mut url = with_query(self.http.url(&format!("{}/exec", sprite(name))), query);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        // Both are special schemes, so the change is always accepted.
        let _ = url.set_scheme(scheme);
        url
    }

    /// The exec WebSocket's URL: `ws(s)://…/v1/sprites/{name}/exec?cmd=…&tty=false&stdin=false`.
    pub(crate) fn exec_url(&self, name: &str, argv: &[String]) -> Url {
        let mut query: Vec<(&str, &str)> = argv.iter().map(|a| ("cmd", a.as_str())).collect();
        query.extend([("tty", "false"), ("stdin", "false")]);
        self.ws_url(name, &query)
    }

    /// Opens the exec WebSocket within `connect_within`.
    pub(crate) async fn open_exec(
        &self,
        ctx: &CallContext,
        url: Url,
        connect_within: Duration,
    ) -> Result<ExecSocket> {
        let p = self.http.provider();
        let secret = ctx.require_credential(p)?;
        let path = url.path().to_owned();
        let mut request =
            url.as_str()
                .into_client_request()
                .map_err(|e| ProviderError::InvalidRequest {
                    provider: p,
                    message: format!("the exec URL is not usable: {e}"),
                })?;
        let mut auth =
            tungstenite::http::HeaderValue::from_str(&format!("Bearer {}", secret.expose_secret()))
                .map_err(|_| ProviderError::InvalidRequest {
                    provider: p,
                    message: "the credential cannot be sent in a header".into(),
                })?;
        auth.set_sensitive(true);
        request.headers_mut().insert("authorization", auth);
        let config = tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_WS_MESSAGE))
            .max_frame_size(Some(MAX_WS_MESSAGE));
        let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        match tokio::time::timeout(ctx.bounded(connect_within), connect).await {
            Err(_) => Err(ProviderError::Unavailable {
                provider: p,
                message: "the exec WebSocket did not open in time".into(),
                retry_after: None,
            }),
            Ok(Ok((socket, _))) => Ok(socket),
            Ok(Err(tungstenite::Error::Http(resp))) => {
                let body = resp.body().clone().unwrap_or_default();
                // Redacted before the excerpt is cut (and after, for the mapped fields).
                let secret = secret.expose_secret();
                Err(
                    map_status_redacted(p, resp.status(), resp.headers(), &body, &path, &[secret])
                        .redact(secret),
                )
            }
            Ok(Err(tungstenite::Error::Io(e))) => Err(ProviderError::Unavailable {
                provider: p,
                message: format!("cannot open the exec WebSocket: {}", e.kind()),
                retry_after: None,
            }),
            Ok(Err(e @ tungstenite::Error::Tls(_))) => Err(ProviderError::Unavailable {
                provider: p,
                message: format!("cannot open the exec WebSocket: {e}"),
                retry_after: None,
            }),
            Ok(Err(e)) => Err(ProviderError::Protocol {
                provider: p,
                message: format!("the exec WebSocket handshake failed: {e}"),
            }),
        }
    }
}

/// A binary frame: `stream` then `payload`.
pub(crate) fn frame(stream: u8, payload: &[u8]) -> tungstenite::Message {
    let mut data = Vec::with_capacity(payload.len() + 1);
    data.push(stream);
    data.extend_from_slice(payload);
    tungstenite::Message::binary(data)
}
