//! Fly Sprites adapter.
//!
//! A sprite is a persistent Linux VM on one **fixed** image (Ubuntu with developer tools; only
//! the filesystem overlay is yours). It sleeps by itself after ~30 s idle — `warm` (memory
//! frozen) then `cold` (VM stopped) — keeps its disk across both, wakes on the next command or
//! file call, and lives until deleted. Corral talks to `https://api.sprites.dev` with
//! `Authorization: Bearer <Sprites token>` (org-scoped; no other context).
//!
//! | Corral | Sprites |
//! |---|---|
//! | create | `POST /v1/sprites {"name": "corral-op-<ulid>"}` (names are unique in the org: the name is the operation tag) |
//! | operation id | the name; found with `GET /v1/sprites/{name}` |
//! | get | `GET /v1/sprites/{name}`, a management read that does not wake the sprite; `running` → running, `warm`/`cold` → paused |
//! | delete | `DELETE /v1/sprites/{name}` (permanent) |
//! | exec | the exec **WebSocket** `GET /v1/sprites/{name}/exec?cmd=…&tty=false&stdin=false` (see below) |
//! | read file | `GET /v1/sprites/{name}/fs/read?path=…&workingDir=/` (raw bytes) |
//! | write file | parent checked with `GET …/fs/list?path=<parent>&workingDir=/`, then `PUT …/fs/write?path=…&workingDir=/&mode=0644&mkdir=false` (raw bytes, ≤ 16 MiB) |
//!
//! **Exec.** Only the WebSocket protocol is documented (the HTTP `POST …/exec` answers with a
//! body whose format is not, so it is not used). The adapter opens the socket with the argv
//! `timeout -k 5 <secs> sh -c <script>` as repeated `cmd` parameters, sends the stdin-EOF frame
//! (`[4]`), and reads binary frames whose first byte names the stream — `1` stdout, `2`
//! stderr, `3` exit (one byte, the code) — and JSON text messages (`{"type": "exit",
//! "exit_code": N}` ends it too; `session_info` gives the session id). A socket that closes
//! without an exit is an error, never exit 0. Sprites' own `env` parameter *replaces* the
//! default environment, so it is never sent: cwd and env travel in the script's prelude
//! (`cd`, `export`), which adds to the sprite's environment as on every other provider. The
//! deadline is enforced inside the sprite by `timeout` (the fixed image has coreutils); should
//! the socket outlive it, the session is killed (`POST …/exec/{session}/kill?signal=SIGKILL`).
//!
//! **Commands as durable jobs** are native on exec sessions: a non-TTY session of a small `sh`
//! wrapper (argv carrying the command id) with `max_run_after_disconnect` = the timeout + 60 s,
//! whose socket is the first attach (offsets from 0); re-attach lists the sessions
//! (`GET …/exec`, the active one whose argv carries the id) and opens `…/exec?id=<session>`,
//! which streams only what comes next (`resume: live_only`); signals are the kill endpoint
//! (TERM and KILL only: Sprites follows any signal with SIGKILL after its `timeout`, so a
//! signal that should not end the command cannot be sent); the wrapper records the exit
//! status for after the session ended, read back with an exec. No stdin: it travels only on
//! the session's own socket, which Corral does not hold between its stdin calls.

pub mod api;
mod capabilities;
mod client;
#[cfg(feature = "fake")]
pub mod fake;
mod map;
mod process;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{CommandId, OperationId, Provider, ProviderCapabilities, Signal};
use corral_provider::files::check_parent_dir;
use corral_provider::shell::{self};
use corral_provider::{
    Adapter, CallContext, CappedOutput, CommandEvent, CommandEvents, CommandSpec, CreateSpec,
    ExecOutput, ExecSpec, ObservedSandbox, OutputOffsets, ProviderError, Result, SandboxProvider,
    Started,
};
use corral_provider_http::{HttpConfig, ProviderHttp, read_file_body};
use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

use crate::api::stream;

/// The Sprites API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.sprites.dev";
/// Prefix of every sprite Corral creates; the rest is the operation id.
pub const NAME_PREFIX: &str = "corral-";
/// Seconds between `timeout`'s polite signal and its `SIGKILL`.
const KILL_GRACE_SECONDS: u64 = 5;
/// How long the socket may stay open past the deadline and the kill grace.
const CLIENT_GRACE: Duration = Duration::from_secs(10);
/// How much longer than Corral's own deadline a command's session may run with no socket
/// attached (`max_run_after_disconnect`): a backstop, Corral kills at the deadline itself.
const COMMAND_BACKSTOP: Duration = Duration::from_secs(60);

/// How to reach Fly Sprites: `[providers.sprites]` in the server's configuration.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpritesConfig {
    /// API base URL (`https://api.sprites.dev`).
    pub base_url: String,
    /// Timeouts and caps (the WebSocket's connect timeout too).
    pub http: HttpConfig,
}

impl Default for SpritesConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            http: HttpConfig::default(),
        }
    }
}

/// The Fly Sprites [`SandboxProvider`].
#[derive(Debug)]
pub struct SpritesProvider {
    client: client::Client,
    caps: ProviderCapabilities,
    connect_timeout: Duration,
}

const P: Provider = Provider::Sprites;

impl Adapter for SpritesProvider {
    const PROVIDER: Provider = P;
    type Config = SpritesConfig;

    /// Fails only on an unusable base URL.
    fn from_config(config: SpritesConfig) -> Result<Self> {
        let connect_timeout = config.http.connect_timeout;
        let http = ProviderHttp::new(P, &config.base_url, config.http)?;
        Ok(Self {
            client: client::Client::new(http),
            caps: capabilities::capabilities(),
            connect_timeout,
        })
    }
}

/// The sprite name for an operation: `corral-op-<ulid>` (lower case, digits, hyphens).
pub fn sprite_name(operation_id: &OperationId) -> String {
    format!(
        "{NAME_PREFIX}{}",
        operation_id.to_string().replace('_', "-")
    )
}

/// The operation id a sprite name carries, if it is one of Corral's.
fn operation_of(name: &str) -> Option<OperationId> {
    let rest = name.strip_prefix(NAME_PREFIX)?.strip_prefix("op-")?;
    format!("op_{rest}").parse().ok()
}

fn observed(sprite: api::SpriteResponse) -> ObservedSandbox {
    ObservedSandbox {
        status: map::status(&sprite.status),
        operation_id: operation_of(&sprite.name),
        native_id: sprite.name,
    }
}

/// The argv the exec socket runs: the script under an in-sprite deadline.
fn exec_argv(spec: &ExecSpec) -> Result<Vec<String>> {
    let secs = (spec.timeout.as_secs() + u64::from(spec.timeout.subsec_nanos() > 0)).max(1);
    Ok(vec![
        "timeout".into(),
        "-k".into(),
        KILL_GRACE_SECONDS.to_string(),
        secs.to_string(),
        "sh".into(),
        "-c".into(),
        shell::script(P, spec)?,
    ])
}

/// What the exec socket delivered.
struct Streams {
    stdout: CappedOutput,
    stderr: CappedOutput,
    exit: Option<i32>,
    session: Option<u64>,
}

/// Reads the exec socket until an exit arrives or it closes.
async fn read_exec(socket: &mut client::ExecSocket, got: &mut Streams) -> Result<()> {
    let protocol = |message: String| ProviderError::Protocol {
        provider: P,
        message,
    };
    while let Some(message) = socket.next().await {
        match message.map_err(|e| protocol(format!("the exec WebSocket broke off: {e}")))? {
            Message::Binary(data) => match data.split_first() {
                Some((&stream::STDOUT, payload)) => got.stdout.push(payload),
                Some((&stream::STDERR, payload)) => got.stderr.push(payload),
                Some((&stream::EXIT, payload)) => {
                    let code = payload
                        .first()
                        .ok_or_else(|| protocol("an exit frame carried no code".into()))?;
                    got.exit = Some(i32::from(*code));
                    return Ok(());
                }
                // Empty frames and streams Corral does not use (SSH agent, …).
                _ => {}
            },
            Message::Text(text) => match serde_json::from_str::<api::TextMessage>(&text) {
                Ok(m) if m.kind == "exit" => {
                    got.exit = Some(
                        m.exit_code
                            .ok_or_else(|| protocol("an exit message carried no code".into()))?,
                    );
                    return Ok(());
                }
                Ok(m) if m.kind == "session_info" => got.session = m.session_id.or(got.session),
                // Port notices and other control messages.
                _ => {}
            },
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
    Err(protocol(
        "the exec WebSocket closed without an exit code".into(),
    ))
}

impl SpritesProvider {
    /// The active session running command `id`, if any (`GET …/exec`).
    async fn session_of(
        &self,
        ctx: &CallContext,
        name: &str,
        id: &CommandId,
    ) -> Result<Option<u64>> {
        let sessions = self.client.list_sessions(ctx, name).await?;
        Ok(process::session_of(&sessions, id))
    }

    /// The exit status the command's wrapper recorded, once it ended (read with an exec).
    async fn recorded_exit(
        &self,
        ctx: &CallContext,
        name: &str,
        id: &CommandId,
    ) -> Result<Option<i32>> {
        let mut spec = ExecSpec::new(process::read_exit_script(id));
        spec.timeout = Duration::from_secs(60);
        spec.max_output_bytes = 64;
        let out = self.exec(ctx, name, &spec).await?;
        process::parse_exit(&out.stdout)
    }

    fn command_gone(id: &CommandId) -> ProviderError {
        ProviderError::NotFound {
            provider: P,
            resource: format!("command {id}"),
        }
    }

    fn no_stdin() -> ProviderError {
        ProviderError::Unsupported {
            provider: P,
            operation: "write_stdin",
            reason: "a command's stdin travels only on its session's own WebSocket".into(),
        }
    }
}

#[async_trait]
impl SandboxProvider for SpritesProvider {
    fn provider(&self) -> Provider {
        P
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let body = api::CreateSpriteRequest {
            name: sprite_name(&spec.operation_id),
        };
        Ok(observed(self.client.create_sprite(ctx, &body).await?))
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        Ok(observed(self.client.get_sprite(ctx, native_id).await?))
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.client.delete_sprite(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let url = self.client.exec_url(native_id, &exec_argv(spec)?);
        let started = Instant::now();
        let mut socket = self
            .client
            .open_exec(ctx, url, self.connect_timeout)
            .await?;
        let protocol = |e: tokio_tungstenite::tungstenite::Error| ProviderError::Protocol {
            provider: P,
            message: format!("the exec WebSocket broke off: {e}"),
        };
        // No stdin: say so at once, as Sprites' own clients do.
        socket
            .send(client::frame(stream::STDIN_EOF, &[]))
            .await
            .map_err(protocol)?;
        let mut got = Streams {
            stdout: CappedOutput::new(spec.max_output_bytes),
            stderr: CappedOutput::new(spec.max_output_bytes),
            exit: None,
            session: None,
        };
        let limit =
            ctx.bounded(spec.timeout + Duration::from_secs(KILL_GRACE_SECONDS) + CLIENT_GRACE);
        let read = tokio::time::timeout(limit, read_exec(&mut socket, &mut got)).await;
        let _ = socket.close(None).await;
        let past_deadline = started.elapsed() >= spec.timeout;
        match read {
            Err(_) => {
                // The socket outlived the in-sprite deadline: kill the session (best effort).
                if let Some(session) = got.session
                    && let Err(e) = self
                        .client
                        .kill_session(ctx, native_id, session, "SIGKILL")
                        .await
                {
                    tracing::debug!(error = %e, "killing a sprite exec session failed");
                }
                Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                })
            }
            Ok(Err(e)) => Err(e),
            // `timeout` exits 124 after its signal, 137 after the follow-up SIGKILL.
            Ok(Ok(())) if past_deadline && matches!(got.exit, Some(124 | 137)) => {
                Err(ProviderError::CommandTimedOut {
                    after: spec.timeout,
                })
            }
            Ok(Ok(())) => {
                let (stdout, t1) = got.stdout.finish();
                let (stderr, t2) = got.stderr.finish();
                Ok(ExecOutput {
                    stdout,
                    stderr,
                    exit_code: got.exit.unwrap_or(-1),
                    truncated: t1 || t2,
                })
            }
        }
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let resp = self
            .client
            .read_file(ctx, native_id, path)
            .await
            .map_err(|e| e.for_file(path))?;
        read_file_body(P, resp, path, max_bytes).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        check_parent_dir(path, |parent| async move {
            match self.client.list_dir(ctx, native_id, &parent).await {
                Ok(_) => Ok(true),
                // Missing, or not a directory.
                Err(ProviderError::NotFound { .. } | ProviderError::InvalidRequest { .. }) => {
                    Ok(false)
                }
                Err(e) => Err(e.for_file(&parent)),
            }
        })
        .await?;
        self.client
            .write_file(ctx, native_id, path, content)
            .await
            .map_err(|e| e.for_file(path))
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        match self
            .client
            .get_sprite(ctx, &sprite_name(operation_id))
            .await
        {
            Ok(sprite) => Ok(vec![observed(sprite)]),
            Err(ProviderError::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// A non-TTY exec session of the command's wrapper with `max_run_after_disconnect`; its
    /// socket is the first attach (offsets from 0). A command id with an active session or
    /// an exit record is not started again.
    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let id = spec.command_id;
        let handle = id.to_string();
        if self.session_of(ctx, native_id, &id).await?.is_some()
            || self.recorded_exit(ctx, native_id, &id).await?.is_some()
        {
            return Ok(Started {
                handle,
                events: None,
            });
        }
        let mut exec = ExecSpec::new(spec.command.clone());
        exec.cwd = spec.cwd.clone();
        exec.env = spec.env.clone();
        let script = shell::script(P, &exec)?;
        let run_after = format!("{}s", (spec.timeout + COMMAND_BACKSTOP).as_secs());
        let url = self
            .client
            .command_url(native_id, &process::argv(&script, &id), &run_after);
        let socket = self
            .client
            .open_exec(ctx, url, self.connect_timeout)
            .await?;
        let mut reader = process::SessionReader::new(socket, true);
        reader.session_info().await?;
        Ok(Started {
            handle,
            events: Some(reader.into_events()),
        })
    }

    /// Re-attaches to the command's session (`?id=`): only what comes next, no offsets. Once
    /// the session ended, the exit its wrapper recorded.
    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        _from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let id = process::parse_handle(handle)?;
        if let Some(session) = self.session_of(ctx, native_id, &id).await? {
            let url = self.client.attach_url(native_id, session);
            match self.client.open_exec(ctx, url, self.connect_timeout).await {
                Ok(socket) => {
                    let mut reader = process::SessionReader::new(socket, false);
                    reader.session_info().await?;
                    return Ok(reader.into_events());
                }
                // It ended between the listing and the attach.
                Err(ProviderError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match self.recorded_exit(ctx, native_id, &id).await? {
            Some(code) => Ok(futures::stream::iter([Ok(CommandEvent::Exit {
                exit_code: Some(code),
            })])
            .boxed()),
            None => Err(Self::command_gone(&id)),
        }
    }

    /// Not offered: see [`SpritesProvider::no_stdin`].
    async fn write_stdin(
        &self,
        _ctx: &CallContext,
        _native_id: &str,
        _handle: &str,
        _offset: u64,
        _data: &[u8],
    ) -> Result<u64> {
        Err(Self::no_stdin())
    }

    /// Not offered: see [`SpritesProvider::no_stdin`].
    async fn close_stdin(&self, _ctx: &CallContext, _native_id: &str, _handle: &str) -> Result<()> {
        Err(Self::no_stdin())
    }

    /// `POST …/exec/{session}/kill?signal=SIGTERM|SIGKILL` (the session's process group); an
    /// ended command is `Ok`.
    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let id = process::parse_handle(handle)?;
        let name = match signal {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
            other => {
                return Err(ProviderError::Unsupported {
                    provider: P,
                    operation: "signal_command",
                    reason: format!("signal {other}: Sprites follows it with SIGKILL"),
                });
            }
        };
        let Some(session) = self.session_of(ctx, native_id, &id).await? else {
            return Ok(());
        };
        match self
            .client
            .kill_session(ctx, native_id, session, name)
            .await
        {
            Ok(()) | Err(ProviderError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The active session carrying the command id, or its exit record.
    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let known = self.session_of(ctx, native_id, command_id).await?.is_some()
            || self
                .recorded_exit(ctx, native_id, command_id)
                .await?
                .is_some();
        Ok(known.then(|| command_id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_table_is_read_strictly() {
        let empty: SpritesConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
        let set: SpritesConfig = serde_json::from_value(serde_json::json!({
            "base_url": "http://127.0.0.1:9",
            "http": { "connect_timeout_seconds": 3 },
        }))
        .unwrap();
        assert_eq!(set.http.connect_timeout, Duration::from_secs(3));
        // The image is fixed: a default image (meant for another provider) is refused.
        let foreign = serde_json::json!({ "default_image": "ubuntu" });
        assert!(serde_json::from_value::<SpritesConfig>(foreign).is_err());
    }

    #[test]
    fn names_round_trip_the_operation_id() {
        let op = OperationId::new();
        let name = sprite_name(&op);
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_eq!(operation_of(&name), Some(op));
        assert_eq!(operation_of("my-sprite"), None);
        assert_eq!(operation_of("corral-op-notaulid"), None);
    }

    #[test]
    fn the_argv_puts_the_script_under_a_whole_second_deadline() {
        let mut spec = ExecSpec::new("pwd");
        spec.cwd = Some("/tmp".into());
        spec.env.insert("A".into(), "b c".into());
        spec.timeout = Duration::from_millis(2500);
        assert_eq!(
            exec_argv(&spec).unwrap(),
            [
                "timeout",
                "-k",
                "5",
                "3",
                "sh",
                "-c",
                "cd -- '/tmp' || exit 1\nexport A='b c'\npwd"
            ]
        );
    }
}
