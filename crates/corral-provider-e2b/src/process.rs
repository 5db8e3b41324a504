//! Commands as durable jobs on envd's process service: the wrapper a command runs in, and
//! the reader that turns a `Start` or `Connect` envelope stream into [`CommandEvent`]s.
//!
//! envd forgets a process the moment it ends (`List`, `Connect`, `SendInput` then answer
//! `not_found`), and `Connect` streams only what comes next. So the command runs inside a small
//! bash wrapper that puts it in its own process group (so a signal reaches everything it
//! started), and records its exit status in `~/.corral/commands/<command id>.exit` once it
//! ended: an attach after envd forgot the process reads the status from there.

use std::collections::VecDeque;
use std::time::Duration;

use base64::Engine as _;
use corral_domain::{CommandId, OutputStream};
use corral_provider::{
    CommandEvent, CommandEvents, ExposeSecret as _, ProviderError, Result, SecretString,
};
use corral_provider_http::map_body_error;
use corral_provider_http::reqwest::Response;
use futures::StreamExt as _;

use crate::{P, api, connect, map};

/// The shell every command's wrapper is.
pub(crate) const SHELL: &str = "/bin/bash";

/// The wrapper: `$1` is the command, `$2` its id. It runs the command under a login shell
/// (as exec does) in a process group of its own (`set -m`; the job's pid is the group id,
/// kept in `<id>.pgid`), with the wrapper's own stderr silenced so job-control notices never
/// reach the command's stderr, waits for it and writes its status (`128 + n` after signal
/// `n`) to `<id>.exit` before exiting with it.
const WRAPPER: &str = r#"d="$HOME/.corral/commands"; mkdir -p "$d" || exit 125; exec 3>&2 2>/dev/null; set -m; /bin/bash -l -c "$1" 2>&3 3>&- & c=$!; printf %s "$c" > "$d/$2.pgid"; wait "$c"; s=$?; printf %s "$s" > "$d/$2.exit"; exit "$s""#;

/// The argv (after [`SHELL`]) that runs `command` as the job `id`.
pub(crate) fn wrapper_args(command: &str, id: &CommandId) -> Vec<String> {
    vec![
        "-c".into(),
        WRAPPER.into(),
        "corral".into(),
        command.into(),
        id.to_string(),
    ]
}

/// Where the wrapper records the exit status, relative to the user's home (as envd's
/// `/files` resolves relative paths).
pub(crate) fn exit_file(id: &CommandId) -> String {
    format!(".corral/commands/{id}.exit")
}

/// A command that sends `signal` (a number) to the job's process group; quiet when the job
/// already ended (its group is gone).
pub(crate) fn kill_command(id: &CommandId, signal: i32) -> String {
    format!(
        r#"g=$(cat "$HOME/.corral/commands/{id}.pgid" 2>/dev/null) && [ -n "$g" ] && kill -s {signal} -- "-$g" 2>/dev/null; exit 0"#
    )
}

/// The command id a handle names (the handle is the id itself); `NotFound` for anything else.
pub(crate) fn parse_handle(handle: &str) -> Result<CommandId> {
    handle.parse().map_err(|_| ProviderError::NotFound {
        provider: P,
        resource: "command (malformed handle)".into(),
    })
}

/// One message of an envd process stream.
enum Message {
    Event(api::ProcessEvent),
    End(api::EndOfStream),
}

/// Reads a `Start` or `Connect` stream.
pub(crate) struct EventReader {
    resp: Response,
    decoder: connect::Decoder,
    /// Bytes of stdout and stderr so far, for a stream that starts with the process (`Start`);
    /// `None` for `Connect`, which starts wherever the process is.
    counted: Option<[u64; 2]>,
    /// Longest silence (envd sends keepalives) before the stream is taken as broken.
    idle: Duration,
    /// Secrets scrubbed from envd's error messages.
    secrets: Vec<SecretString>,
    queued: VecDeque<CommandEvent>,
    done: bool,
}

impl EventReader {
    /// A reader of `resp`'s body; `from_start` when the stream began with the process.
    pub(crate) fn new(
        resp: Response,
        max_message: usize,
        from_start: bool,
        idle: Duration,
        secrets: Vec<SecretString>,
    ) -> Self {
        Self {
            resp,
            decoder: connect::Decoder::new(max_message),
            counted: from_start.then_some([0, 0]),
            idle,
            secrets,
            queued: VecDeque::new(),
            done: false,
        }
    }

    fn protocol(message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: P,
            message: message.into(),
        }
    }

    /// The next message; `Ok(None)` when the connection ended, broke or fell silent.
    async fn message(&mut self) -> Result<Option<Message>> {
        loop {
            if let Some(envelope) = self
                .decoder
                .next_envelope()
                .map_err(|e| Self::protocol(e.to_string()))?
            {
                return if envelope.is_end_stream() {
                    let eos: api::EndOfStream =
                        corral_provider_http::parse_json(P, &envelope.data)?;
                    Ok(Some(Message::End(eos)))
                } else {
                    let msg: api::StartResponse =
                        corral_provider_http::parse_json(P, &envelope.data)?;
                    Ok(Some(Message::Event(msg.event)))
                };
            }
            match tokio::time::timeout(self.idle, self.resp.chunk()).await {
                Ok(Ok(Some(chunk))) => self.decoder.push(&chunk),
                Ok(Ok(None)) => return Ok(None),
                Ok(Err(e)) => {
                    tracing::debug!(provider = %P, error = %map_body_error(P, &e), "envd process stream broke");
                    return Ok(None);
                }
                Err(_) => {
                    tracing::debug!(provider = %P, "envd process stream fell silent");
                    return Ok(None);
                }
            }
        }
    }

    fn connect_error(&self, err: &api::ConnectError) -> ProviderError {
        let secrets: Vec<&str> = self.secrets.iter().map(|s| s.expose_secret()).collect();
        // A process stream has no deadline of its own here: Corral enforces the command's.
        map::connect_error(err, Duration::ZERO, &secrets)
    }

    /// Reads up to the start event and answers its pid. envd's error (e.g. `not_found` for a
    /// process it no longer runs) is the error.
    pub(crate) async fn started(&mut self) -> Result<u32> {
        loop {
            match self.message().await? {
                Some(Message::Event(event)) => {
                    if let Some(start) = event.start {
                        return Ok(start.pid);
                    }
                    // Nothing but keepalives comes before the start event.
                }
                Some(Message::End(eos)) => {
                    return Err(match eos.error {
                        Some(err) => self.connect_error(&err),
                        None => Self::protocol("the process stream ended before its start event"),
                    });
                }
                None => {
                    return Err(Self::protocol(
                        "the process stream ended before its start event",
                    ));
                }
            }
        }
    }

    fn output(&mut self, stream: OutputStream, b64: &str) -> Result<Option<CommandEvent>> {
        let data = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| Self::protocol(format!("malformed output bytes: {e}")))?;
        if data.is_empty() {
            return Ok(None);
        }
        let offset = self.counted.as_mut().map(|counted| {
            let slot = &mut counted[usize::from(stream == OutputStream::Stderr)];
            let at = *slot;
            *slot += data.len() as u64;
            at
        });
        Ok(Some(CommandEvent::Output {
            stream,
            offset,
            data,
        }))
    }

    /// The next event: output, then the exit; `None` after the exit or when the stream
    /// ended early (attach again).
    async fn next_event(&mut self) -> Option<Result<CommandEvent>> {
        if let Some(event) = self.queued.pop_front() {
            return Some(Ok(event));
        }
        while !self.done {
            let message = match self.message().await {
                Ok(m) => m,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            match message {
                None => self.done = true,
                Some(Message::End(eos)) => {
                    self.done = true;
                    if let Some(err) = eos.error {
                        return Some(Err(self.connect_error(&err)));
                    }
                }
                Some(Message::Event(event)) => {
                    if let Some(end) = event.end {
                        self.done = true;
                        return Some(Ok(CommandEvent::Exit {
                            exit_code: Some(map::exit_code(&end)),
                        }));
                    }
                    let Some(data) = event.data else { continue };
                    let pieces = [
                        (OutputStream::Stdout, data.stdout),
                        (OutputStream::Stderr, data.stderr),
                    ];
                    for (stream, b64) in pieces {
                        let Some(b64) = b64 else { continue };
                        match self.output(stream, &b64) {
                            Ok(Some(event)) => self.queued.push_back(event),
                            Ok(None) => {}
                            Err(e) => {
                                self.done = true;
                                return Some(Err(e));
                            }
                        }
                    }
                    if let Some(event) = self.queued.pop_front() {
                        return Some(Ok(event));
                    }
                }
            }
        }
        None
    }

    /// The remaining events as a stream.
    pub(crate) fn into_events(self) -> CommandEvents<'static> {
        futures::stream::unfold(self, |mut reader| async move {
            let event = reader.next_event().await?;
            Some((event, reader))
        })
        .boxed()
    }
}

/// An exit status as the wrapper wrote it.
pub(crate) fn parse_exit(body: &[u8]) -> Result<i32> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| ProviderError::Protocol {
            provider: P,
            message: "the command's exit record is not a number".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_command_ids_and_nothing_else() {
        let id = CommandId::new();
        assert_eq!(parse_handle(&id.to_string()).unwrap(), id);
        assert!(matches!(
            parse_handle("4242"),
            Err(ProviderError::NotFound { .. })
        ));
        assert!(matches!(
            parse_handle("cmd_../../etc"),
            Err(ProviderError::NotFound { .. })
        ));
    }

    #[test]
    fn exit_records_parse() {
        assert_eq!(parse_exit(b"143").unwrap(), 143);
        assert_eq!(parse_exit(b"0\n").unwrap(), 0);
        assert!(parse_exit(b"").is_err());
        assert!(parse_exit(b"x").is_err());
    }

    #[test]
    fn the_command_is_an_argument_not_part_of_the_script() {
        let id = CommandId::new();
        let args = wrapper_args("echo '$2'; exit 3", &id);
        assert_eq!(args[0], "-c");
        assert_eq!(args[1], WRAPPER);
        assert_eq!(args[3], "echo '$2'; exit 3");
        assert_eq!(args[4], id.to_string());
        assert!(kill_command(&id, 15).contains(&format!("{id}.pgid")));
    }
}
