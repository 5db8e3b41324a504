//! Commands as durable jobs on Sprites' exec sessions: the wrapper a command runs in, and the
//! reader that turns an exec WebSocket into [`CommandEvent`]s.
//!
//! A non-TTY exec session outlives its socket for `max_run_after_disconnect`, is listed by
//! `GET …/exec` (its `command` is the argv, the command id included) and re-attached with
//! `?id=<session>`, which streams only what comes next. Nothing says how an ended session
//! ended, so the command runs inside a small `sh` wrapper that records its exit status in
//! `$HOME/.corral/commands/<command id>.exit`, read back with an exec once the session is gone.

use corral_domain::{CommandId, OutputStream};
use corral_provider::{CommandEvent, CommandEvents, ProviderError, Result};
use futures::StreamExt as _;
use tokio_tungstenite::tungstenite::Message;

use crate::P;
use crate::api::{self, stream};
use crate::client::ExecSocket;

/// The wrapper: `$1` is the script, `$2` the command id. A TERM to the session's process
/// group reaches the script (its handler is the default again, as a caught signal's is in a
/// child), while the wrapper's own handler only lets it outlive the signal long enough to
/// record the script's status.
const WRAPPER: &str = r#"d="$HOME/.corral/commands"; mkdir -p "$d" || exit 125; trap : TERM INT HUP; sh -c "$1"; s=$?; printf %s "$s" > "$d/$2.exit"; exit "$s""#;

/// The argv of a command's exec session.
pub(crate) fn argv(script: &str, id: &CommandId) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        WRAPPER.into(),
        "corral".into(),
        script.into(),
        id.to_string(),
    ]
}

/// The script that prints the recorded exit status, or nothing.
pub(crate) fn read_exit_script(id: &CommandId) -> String {
    format!(r#"cat "$HOME/.corral/commands/{id}.exit" 2>/dev/null; exit 0"#)
}

/// The command id a handle names (the handle is the id itself); `NotFound` otherwise.
pub(crate) fn parse_handle(handle: &str) -> Result<CommandId> {
    handle.parse().map_err(|_| ProviderError::NotFound {
        provider: P,
        resource: "command (malformed handle)".into(),
    })
}

/// The session of `id` among the listed ones: the active one whose argv carries the id.
pub(crate) fn session_of(sessions: &[api::ExecSession], id: &CommandId) -> Option<u64> {
    let id = id.to_string();
    sessions
        .iter()
        .find(|s| s.is_active && s.command.split_whitespace().any(|w| w == id))
        .map(|s| s.id)
}

/// Reads an exec socket as command events.
pub(crate) struct SessionReader {
    socket: ExecSocket,
    /// Bytes per stream so far, for a socket that started the session (`None` when attached).
    counted: Option<[u64; 2]>,
    pub(crate) session: Option<u64>,
    done: bool,
}

impl SessionReader {
    pub(crate) fn new(socket: ExecSocket, from_start: bool) -> Self {
        Self {
            socket,
            counted: from_start.then_some([0, 0]),
            session: None,
            done: false,
        }
    }

    fn protocol(message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: P,
            message: message.into(),
        }
    }

    fn output(&mut self, stream: OutputStream, data: &[u8]) -> CommandEvent {
        let offset = self.counted.as_mut().map(|c| {
            let slot = &mut c[usize::from(stream == OutputStream::Stderr)];
            let at = *slot;
            *slot += data.len() as u64;
            at
        });
        CommandEvent::Output {
            stream,
            offset,
            data: data.to_vec(),
        }
    }

    /// Reads up to `session_info` and answers the session id (output before it is an error:
    /// Sprites sends it first).
    pub(crate) async fn session_info(&mut self) -> Result<u64> {
        while let Some(message) = self.socket.next().await {
            match message
                .map_err(|e| Self::protocol(format!("the exec WebSocket broke off: {e}")))?
            {
                Message::Text(text) => {
                    if let Ok(m) = serde_json::from_str::<api::TextMessage>(&text)
                        && m.kind == "session_info"
                        && let Some(id) = m.session_id
                    {
                        self.session = Some(id);
                        return Ok(id);
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        Err(Self::protocol(
            "the exec WebSocket closed before its session_info",
        ))
    }

    /// The next event; `None` after the exit or when the socket closed or broke (attach
    /// again).
    async fn next_event(&mut self) -> Option<Result<CommandEvent>> {
        while !self.done {
            let Some(Ok(message)) = self.socket.next().await else {
                self.done = true;
                return None;
            };
            match message {
                Message::Binary(data) => match data.split_first() {
                    Some((&stream::STDOUT, payload)) if !payload.is_empty() => {
                        return Some(Ok(self.output(OutputStream::Stdout, payload)));
                    }
                    Some((&stream::STDERR, payload)) if !payload.is_empty() => {
                        return Some(Ok(self.output(OutputStream::Stderr, payload)));
                    }
                    Some((&stream::EXIT, payload)) => {
                        self.done = true;
                        return Some(match payload.first() {
                            Some(code) => Ok(CommandEvent::Exit {
                                exit_code: Some(i32::from(*code)),
                            }),
                            None => Err(Self::protocol("an exit frame carried no code")),
                        });
                    }
                    _ => {}
                },
                Message::Text(text) => {
                    if let Ok(m) = serde_json::from_str::<api::TextMessage>(&text)
                        && m.kind == "exit"
                    {
                        self.done = true;
                        return Some(Ok(CommandEvent::Exit {
                            exit_code: m.exit_code,
                        }));
                    }
                }
                Message::Close(_) => self.done = true,
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
        None
    }

    /// The remaining events as a stream (the socket is closed when it is dropped).
    pub(crate) fn into_events(self) -> CommandEvents<'static> {
        futures::stream::unfold(self, |mut reader| async move {
            let event = reader.next_event().await?;
            Some((event, reader))
        })
        .boxed()
    }
}

/// An exit status as the wrapper recorded it; `None` when there is no record.
pub(crate) fn parse_exit(stdout: &[u8]) -> Result<Option<i32>> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| ProviderError::Protocol {
        provider: P,
        message: "the command's exit record is not a number".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_the_active_one_whose_argv_carries_the_id() {
        let id = CommandId::new();
        let other = CommandId::new();
        let session = |n: u64, cmd: String, active: bool| api::ExecSession {
            id: n,
            command: cmd,
            is_active: active,
        };
        let listed = [
            session(1, format!("sh -c x corral y {other}"), true),
            session(2, format!("sh -c x corral y {id}"), false),
            session(3, format!("sh -c x corral y {id}"), true),
        ];
        assert_eq!(session_of(&listed, &id), Some(3));
        assert_eq!(session_of(&listed[..2], &id), None);
    }

    #[test]
    fn exit_records_parse_and_an_empty_one_is_none() {
        assert_eq!(parse_exit(b"143").unwrap(), Some(143));
        assert_eq!(parse_exit(b"").unwrap(), None);
        assert!(parse_exit(b"oops").is_err());
        assert!(parse_handle("12").is_err());
    }
}
