//! The Rust client of Corral's HTTP API.
//!
//! Typed over `corral-domain` (the server's own wire types, no second copy), async on
//! reqwest with rustls. Every public operation of the API is a method; failures are one
//! [`Error`] carrying the v3 code, the request id and the retry hint.
//!
//! Retries follow the error taxonomy: only codes marked retryable (and, for requests that
//! are safe to repeat, a connection that failed before an answer) are retried, with
//! exponential backoff and full jitter, waiting at least what `Retry-After` asks. Creates,
//! snapshots, forks and command starts carry an `Idempotency-Key` made once per call and
//! reused by its retries, so a retried create never makes a second sandbox (nor a snapshot a
//! second snapshot, nor a fork extra copies); an outcome the server could not confirm
//! surfaces as [`Error::CreateOutcomeUnknown`] or [`Error::IdempotencyOutcomeUnknown`] with
//! the operation id to reconcile by. A command's output is a stream that reconnects by
//! itself with `Last-Event-ID`, so a dropped connection loses and repeats nothing.
//!
//! ```no_run
//! # async fn demo() -> Result<(), corral_client::Error> {
//! use corral_client::Client;
//! use corral_domain::{CreateSandboxRequest, OutputEvent, Provider, StartCommandInput};
//! use futures::StreamExt as _;
//!
//! let client = Client::new("http://127.0.0.1:8080", "crl_…")?;
//! let sandbox = client
//!     .create_sandbox(&CreateSandboxRequest::standard(Provider::Local, None, None))
//!     .await?;
//! let command = client
//!     .start_command(
//!         &sandbox.id,
//!         &StartCommandInput {
//!             command: "echo hello".into(),
//!             ..Default::default()
//!         },
//!     )
//!     .await?;
//! let mut output = client.follow_output(&sandbox.id, &command.id, 0);
//! while let Some(event) = output.next().await {
//!     match event? {
//!         OutputEvent::Output { data, .. } => print!("{data}"),
//!         OutputEvent::Exit { exit_code, .. } => println!("exit {exit_code:?}"),
//!         OutputEvent::Gap { .. } => println!("[output lost]"),
//!     }
//! }
//! client.delete_sandbox(&sandbox.id).await?;
//! # Ok(()) }
//! ```

mod error;
mod output;
mod retry;

use std::time::Duration;

use corral_domain::{
    Command, CommandId, CommandPage, CommandResult, CommandState, CreateSandboxRequest,
    CreateSnapshotInput, ForkInput, ForkResult, OutputPage, ProviderCatalog, ReadFileInput,
    ReadFileResult, RunCommandInput, Sandbox, SandboxId, SandboxPage, SignalInput, Snapshot,
    SnapshotId, SnapshotPage, StartCommandInput, StdinInput, StdinResult, WriteFileInput,
    WriteFileResult,
};
use reqwest::{Method, RequestBuilder};
use secrecy::{ExposeSecret as _, SecretString};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::Error;
pub use output::OutputStream;
pub use retry::RetryPolicy;

/// The result of a client call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A client of one Corral server, authenticated by a project API key. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: url::Url,
    key: SecretString,
    retry: RetryPolicy,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Whether a request may be sent again after a connection failed without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads, deletes and keyed or offset-carrying writes: the same effect however often.
    Safe,
    /// Anything else: a lost answer may hide an effect.
    Unsafe,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:8080`) with `api_key`,
    /// the default retry policy and timeouts (connect 10 s; no overall timeout, because
    /// `?wait=` and output streams are long by design).
    pub fn new(base_url: &str, api_key: &str) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("corral-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::transport(&e))?;
        Self::with_http(http, base_url, api_key)
    }

    /// A client over a reqwest client of the caller's making (proxies, TLS roots, timeouts).
    pub fn with_http(http: reqwest::Client, base_url: &str, api_key: &str) -> Result<Self> {
        let mut base = url::Url::parse(base_url).map_err(|e| Error::InvalidUrl {
            message: e.to_string(),
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(Error::InvalidUrl {
                message: format!("`{}` is not an http or https URL", base.scheme()),
            });
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(Self {
            http,
            base,
            key: SecretString::from(api_key.to_owned()),
            retry: RetryPolicy::default(),
        })
    }

    /// The same client with another retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    fn url(&self, path: &str) -> url::Url {
        // Paths are built from ids whose alphabet needs no escaping.
        self.base
            .join(path.trim_start_matches('/'))
            .unwrap_or_else(|_| self.base.clone())
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(self.key.expose_secret())
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        idempotency_key: Option<&str>,
        repeat: Repeat,
    ) -> Result<T> {
        let make = || {
            let mut req = self.request(method.clone(), path);
            if let Some(body) = body {
                req = req.json(body);
            }
            if let Some(key) = idempotency_key {
                req = req.header("idempotency-key", key);
            }
            req
        };
        let resp = retry::send(&self.retry, repeat, make).await?;
        let bytes = resp.bytes().await.map_err(|e| Error::transport(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
            message: format!("the answer to {method} {path} is not what the API documents: {e}"),
        })
    }

    /// `GET /v1/providers`: the configured providers and their capabilities.
    pub async fn providers(&self) -> Result<ProviderCatalog> {
        self.call(
            Method::GET,
            "/v1/providers",
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes`, with a fresh `Idempotency-Key` reused by every retry of this
    /// call: at most one sandbox, however often it is retried.
    pub async fn create_sandbox(&self, request: &CreateSandboxRequest) -> Result<Sandbox> {
        let key = idempotency_key();
        self.create_sandbox_with_key(request, &key).await
    }

    /// [`Client::create_sandbox`] with a key of the caller's choosing (to retry a create
    /// across processes).
    pub async fn create_sandbox_with_key(
        &self,
        request: &CreateSandboxRequest,
        key: &str,
    ) -> Result<Sandbox> {
        self.call(
            Method::POST,
            "/v1/sandboxes",
            Some(request),
            Some(key),
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/webhook-endpoints`: the new endpoint with its signing secret (shown only
    /// in this answer). Not retried after a lost answer: a second endpoint could be made.
    pub async fn create_webhook(
        &self,
        endpoint: &corral_domain::NewWebhook,
    ) -> Result<corral_domain::WebhookWithSecret> {
        self.call(
            Method::POST,
            "/v1/webhook-endpoints",
            Some(endpoint),
            None,
            Repeat::Unsafe,
        )
        .await
    }

    /// `GET /v1/webhook-endpoints`: the project's endpoints (no secrets).
    pub async fn list_webhooks(&self) -> Result<corral_domain::WebhookList> {
        self.call(
            Method::GET,
            "/v1/webhook-endpoints",
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `DELETE /v1/webhook-endpoints/{id}`: answers the removed endpoint.
    pub async fn delete_webhook(&self, id: &str) -> Result<corral_domain::Webhook> {
        self.call(
            Method::DELETE,
            &format!("/v1/webhook-endpoints/{}", path_segment(id)),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/webhook-endpoints/{id}/rotate`: a new secret (the previous one still signs
    /// for the overlap). Not retried after a lost answer: the secret shown would be lost.
    pub async fn rotate_webhook(&self, id: &str) -> Result<corral_domain::WebhookWithSecret> {
        self.call(
            Method::POST,
            &format!("/v1/webhook-endpoints/{}/rotate", path_segment(id)),
            None::<&()>,
            None,
            Repeat::Unsafe,
        )
        .await
    }

    /// `GET /v1/webhook-endpoints/{id}/deliveries`: the most recent deliveries, newest first.
    pub async fn webhook_deliveries(
        &self,
        id: &str,
        limit: Option<u32>,
    ) -> Result<corral_domain::WebhookDeliveryList> {
        let path = with_query(
            &format!("/v1/webhook-endpoints/{}/deliveries", path_segment(id)),
            &[("limit", limit.map(|l| l.to_string()).as_deref())],
        );
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// `GET /v1/sandboxes/{id}`.
    pub async fn get_sandbox(&self, id: &SandboxId) -> Result<Sandbox> {
        self.call(
            Method::GET,
            &format!("/v1/sandboxes/{id}"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `GET /v1/sandboxes`: one page, newest first.
    pub async fn list_sandboxes(
        &self,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SandboxPage> {
        let path = with_query(
            "/v1/sandboxes",
            &[
                ("cursor", cursor),
                ("limit", limit.map(|l| l.to_string()).as_deref()),
            ],
        );
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// `DELETE /v1/sandboxes/{id}`: answers the tombstone.
    pub async fn delete_sandbox(&self, id: &SandboxId) -> Result<Sandbox> {
        self.call(
            Method::DELETE,
            &format!("/v1/sandboxes/{id}"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/stop`: answers the sandbox, `stopping` or `stopped`. Its
    /// files are kept; calls on it are `sandbox_stopped` until it is resumed (unless it was
    /// created with `autoResume`). Stopping a stopped sandbox answers it as it is, so a lost
    /// answer is retried.
    pub async fn stop_sandbox(&self, id: &SandboxId) -> Result<Sandbox> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/stop"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/resume`: answers the sandbox, `starting` or `running`.
    /// Resuming a running sandbox answers it as it is, so a lost answer is retried.
    pub async fn resume_sandbox(&self, id: &SandboxId) -> Result<Sandbox> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/resume"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/snapshots`: answers the snapshot (`creating` while the
    /// provider works, then `ready`: read it with [`Client::get_snapshot`]). A fresh
    /// `Idempotency-Key` is reused by every retry of this call: at most one snapshot, however
    /// often it is retried.
    pub async fn create_snapshot(
        &self,
        id: &SandboxId,
        input: &CreateSnapshotInput,
    ) -> Result<Snapshot> {
        let key = idempotency_key();
        self.create_snapshot_with_key(id, input, &key).await
    }

    /// [`Client::create_snapshot`] with a key of the caller's choosing (to retry across
    /// processes).
    pub async fn create_snapshot_with_key(
        &self,
        id: &SandboxId,
        input: &CreateSnapshotInput,
        key: &str,
    ) -> Result<Snapshot> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(input),
            Some(key),
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/fork`: snapshots the sandbox and restores that snapshot into
    /// `input.count` new sandboxes (default 1). A fresh `Idempotency-Key` is reused by every
    /// retry of this call, so a retry never makes extra copies.
    pub async fn fork_sandbox(&self, id: &SandboxId, input: &ForkInput) -> Result<ForkResult> {
        let key = idempotency_key();
        self.fork_sandbox_with_key(id, input, &key).await
    }

    /// [`Client::fork_sandbox`] with a key of the caller's choosing.
    pub async fn fork_sandbox_with_key(
        &self,
        id: &SandboxId,
        input: &ForkInput,
        key: &str,
    ) -> Result<ForkResult> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/fork"),
            Some(input),
            Some(key),
            Repeat::Safe,
        )
        .await
    }

    /// `GET /v1/snapshots`: one page of the project's snapshots, newest first, tombstones
    /// included.
    pub async fn list_snapshots(
        &self,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SnapshotPage> {
        let path = with_query(
            "/v1/snapshots",
            &[
                ("cursor", cursor),
                ("limit", limit.map(|l| l.to_string()).as_deref()),
            ],
        );
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// `GET /v1/snapshots/{id}`.
    pub async fn get_snapshot(&self, id: &SnapshotId) -> Result<Snapshot> {
        self.call(
            Method::GET,
            &format!("/v1/snapshots/{id}"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `DELETE /v1/snapshots/{id}`: answers the tombstone (status `deleted`); deleting a
    /// tombstone answers it again.
    pub async fn delete_snapshot(&self, id: &SnapshotId) -> Result<Snapshot> {
        self.call(
            Method::DELETE,
            &format!("/v1/snapshots/{id}"),
            None::<&()>,
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/exec`: runs a command to its end (bounded by the server's
    /// exec deadline). Not retried after a lost answer: the command may have run.
    pub async fn exec(&self, id: &SandboxId, input: &RunCommandInput) -> Result<CommandResult> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(input),
            None,
            Repeat::Unsafe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/files/read`.
    pub async fn read_file(&self, id: &SandboxId, input: &ReadFileInput) -> Result<ReadFileResult> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/files/read"),
            Some(input),
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/files/write` (a whole file: the same effect when repeated).
    pub async fn write_file(
        &self,
        id: &SandboxId,
        input: &WriteFileInput,
    ) -> Result<WriteFileResult> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/files/write"),
            Some(input),
            None,
            Repeat::Safe,
        )
        .await
    }

    /// `POST /v1/sandboxes/{id}/commands`: starts a command as a durable job, with a fresh
    /// `Idempotency-Key` reused by every retry of this call (it never runs twice).
    pub async fn start_command(
        &self,
        id: &SandboxId,
        input: &StartCommandInput,
    ) -> Result<Command> {
        let key = idempotency_key();
        self.start_command_with_key(id, input, &key).await
    }

    /// [`Client::start_command`] with a key of the caller's choosing.
    pub async fn start_command_with_key(
        &self,
        id: &SandboxId,
        input: &StartCommandInput,
        key: &str,
    ) -> Result<Command> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/commands"),
            Some(input),
            Some(key),
            Repeat::Safe,
        )
        .await
    }

    /// `GET /v1/sandboxes/{id}/commands/{cmd}`; with `wait`, answers when the command ends or
    /// after `wait` (the server caps it).
    pub async fn command(
        &self,
        id: &SandboxId,
        cmd: &CommandId,
        wait: Option<Duration>,
    ) -> Result<Command> {
        let wait = wait.map(|w| w.as_secs().max(1).to_string());
        let path = with_query(
            &format!("/v1/sandboxes/{id}/commands/{cmd}"),
            &[("wait", wait.as_deref())],
        );
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// Waits until the command ends (long-polling), and answers it.
    pub async fn wait_command(&self, id: &SandboxId, cmd: &CommandId) -> Result<Command> {
        loop {
            let c = self.command(id, cmd, Some(Duration::from_secs(30))).await?;
            if c.state.is_final() {
                return Ok(c);
            }
        }
    }

    /// `GET /v1/sandboxes/{id}/commands`: newest first, optionally one state.
    pub async fn list_commands(
        &self,
        id: &SandboxId,
        state: Option<CommandState>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<CommandPage> {
        let path = with_query(
            &format!("/v1/sandboxes/{id}/commands"),
            &[
                ("state", state.map(CommandState::as_str)),
                ("cursor", cursor),
                ("limit", limit.map(|l| l.to_string()).as_deref()),
            ],
        );
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// `GET …/commands/{cmd}/output` as JSON: one page of events after `after`.
    pub async fn output_page(
        &self,
        id: &SandboxId,
        cmd: &CommandId,
        after: u64,
    ) -> Result<OutputPage> {
        let path = format!("/v1/sandboxes/{id}/commands/{cmd}/output?after={after}");
        self.call(Method::GET, &path, None::<&()>, None, Repeat::Safe)
            .await
    }

    /// `GET …/commands/{cmd}/output` as Server-Sent Events, from after `after` (0: the
    /// start) to the exit event. It reconnects by itself with `Last-Event-ID` when the
    /// connection drops, so every event arrives once, in order.
    pub fn follow_output(&self, id: &SandboxId, cmd: &CommandId, after: u64) -> OutputStream {
        OutputStream::new(
            self.clone(),
            format!("/v1/sandboxes/{id}/commands/{cmd}/output"),
            after,
        )
    }

    /// `POST …/commands/{cmd}/stdin`: writes `data` at `offset` (what the command had
    /// accepted when the data was made: a resend after a lost answer writes nothing twice).
    pub async fn write_stdin(
        &self,
        id: &SandboxId,
        cmd: &CommandId,
        input: &StdinInput,
    ) -> Result<StdinResult> {
        let repeat = if input.offset.is_some() {
            Repeat::Safe
        } else {
            Repeat::Unsafe
        };
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/commands/{cmd}/stdin"),
            Some(input),
            None,
            repeat,
        )
        .await
    }

    /// `POST …/commands/{cmd}/signal`.
    pub async fn signal_command(
        &self,
        id: &SandboxId,
        cmd: &CommandId,
        input: &SignalInput,
    ) -> Result<Command> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/commands/{cmd}/signal"),
            Some(input),
            None,
            Repeat::Unsafe,
        )
        .await
    }
}

/// `path?k=v&…` with the present values, form-encoded.
fn with_query(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let present: Vec<(&str, &str)> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| (*k, v)))
        .collect();
    if present.is_empty() {
        return path.to_owned();
    }
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in present {
        q.append_pair(k, v);
    }
    format!("{path}?{}", q.finish())
}

/// A fresh `Idempotency-Key`: 128 random bits, hex.
pub fn idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    // No entropy is a broken machine; a time-derived key is still unique per call here.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("corral-client-{hex}")
}

/// An id given by a user as one path segment: anything outside an id's alphabet is
/// percent-escaped, so it cannot reach another route.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_leave_out_absent_values_and_encode_the_rest() {
        assert_eq!(with_query("/x", &[("a", None)]), "/x");
        assert_eq!(
            with_query("/x", &[("a", Some("1 2")), ("b", None), ("c", Some("&"))]),
            "/x?a=1+2&c=%26"
        );
    }

    #[test]
    fn keys_are_fresh_and_valid_idempotency_keys() {
        let (a, b) = (idempotency_key(), idempotency_key());
        assert_ne!(a, b);
        assert!(a.len() <= corral_domain::limits::MAX_IDEMPOTENCY_KEY_LEN);
        assert!(a.bytes().all(|c| c.is_ascii_graphic()));
    }

    #[test]
    fn a_base_url_keeps_its_path_prefix_and_refuses_other_schemes() {
        let c = Client::new("http://example.com/corral", "k").unwrap();
        assert_eq!(
            c.url("/v1/providers").as_str(),
            "http://example.com/corral/v1/providers"
        );
        assert!(Client::new("ftp://example.com", "k").is_err());
        assert!(Client::new("not a url", "k").is_err());
    }
}
