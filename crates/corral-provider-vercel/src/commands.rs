//! Commands as durable jobs over Vercel Sandbox's detached commands.
//!
//! - **start**: `POST …/sessions/{sid}/cmd` *without* `wait` answers the command (`cmdId`) as
//!   soon as it started; `{command: "sh", args: ["-c", "# corral-<command id>\n<command>"],
//!   cwd, env, attachStdin, timeout}`. The first line of the script is a comment naming
//!   Corral's command id: the command list (`GET …/cmd`) shows each command's `args`, so a
//!   start looks the tag up first (a retried start answers the command the first attempt
//!   made) and `find_command` finds it again. `timeout` is the command's deadline plus a
//!   margin, a backstop behind Corral's own kill. The handle is `<sessionId>/<cmdId>`: a
//!   command lives in one session and ends with it.
//! - **attach**: `GET …/cmd/{cmdId}/logs`, an NDJSON stream of `{"stream", "data"}` lines
//!   that replays the command's output from its start and ends when the command does
//!   (`provider_replay`: chunks carry offsets counted per stream from 0, and the part Corral
//!   holds is not sent again). Then `GET …/cmd/{cmdId}?wait=true` (briefly) gives the exit
//!   code; an `error` line, a broken stream, or no exit code in time end the attach without
//!   an exit (the service attaches again).
//! - **stdin**: `POST …/cmd/{cmdId}/stdin {data, offset}` → `{bytesWritten}`: Vercel skips
//!   the bytes it already received, so a resend is harmless; `{close: true}` closes it.
//! - **signal**: `POST …/cmd/{cmdId}/kill {signal: <number>}`: any POSIX signal.
//!
//! Output and stdin travel as JSON text: output bytes that are not UTF-8 arrive replaced, and
//! stdin bytes that are not UTF-8 are refused.

use std::collections::VecDeque;
use std::time::Duration;

use corral_domain::{CommandId, OutputStream};
use corral_provider::{CommandEvent, OutputOffsets, ProviderError, Result};
use corral_provider_http::map_body_error;
use corral_provider_http::reqwest::Response;

use crate::P;
use crate::api::{Command, LogLine};

/// How long one log stream stays open before the adapter lets it end (the service attaches
/// again): bounds a connection kept silent for ever.
pub(crate) const LOGS_LIMIT: Duration = Duration::from_secs(10 * 60);
/// How long the adapter waits for the exit code once the log stream ended.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(5);
/// Added to a command's deadline for Vercel's own `timeout`, a backstop behind Corral's kill.
pub(crate) const BACKSTOP: Duration = Duration::from_secs(60);
/// Longest NDJSON line accepted.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The comment line that opens a command's script: Corral's tag, visible in the command list.
pub fn tag_line(id: &CommandId) -> String {
    format!("# corral-{id}\n")
}

/// The command of `commands` started for Corral's command `id`.
pub(crate) fn tagged<'c>(commands: &'c [Command], id: &CommandId) -> Option<&'c Command> {
    let tag = tag_line(id);
    commands
        .iter()
        .find(|c| c.args.get(1).is_some_and(|script| script.starts_with(&tag)))
}

/// The handle of command `cmd_id` in session `session_id`.
pub(crate) fn handle(session_id: &str, cmd_id: &str) -> String {
    format!("{session_id}/{cmd_id}")
}

/// `(sessionId, cmdId)` of a handle.
pub(crate) fn parse_handle(handle: &str) -> Result<(&str, &str)> {
    handle
        .split_once('/')
        .filter(|(s, c)| !s.is_empty() && !c.is_empty())
        .ok_or_else(|| ProviderError::Protocol {
            provider: P,
            message: format!("`{handle}` is not a Vercel command handle (sessionId/cmdId)"),
        })
}

fn protocol(message: impl Into<String>) -> ProviderError {
    ProviderError::Protocol {
        provider: P,
        message: message.into(),
    }
}

/// How reading a log stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogsEnd {
    /// The stream ended: the command finished, as far as the logs tell.
    Finished,
    /// It broke, or Vercel sent an `error` line: attach again.
    Broken,
}

/// A log stream being read, with what Corral already holds skipped.
pub(crate) struct Logs {
    resp: Option<Response>,
    pending: Vec<u8>,
    /// Bytes of each stream seen so far (counted from the command's first byte).
    seen: OutputOffsets,
    /// Bytes of each stream Corral holds.
    from: OutputOffsets,
    queue: VecDeque<Result<CommandEvent>>,
    end: Option<LogsEnd>,
}

impl Logs {
    pub(crate) fn new(resp: Response, from: OutputOffsets) -> Self {
        Self {
            resp: Some(resp),
            pending: Vec::new(),
            seen: OutputOffsets::default(),
            from,
            queue: VecDeque::new(),
            end: None,
        }
    }

    /// How the stream ended, once it did.
    pub(crate) fn end(&self) -> Option<LogsEnd> {
        self.end
    }

    fn output(&mut self, stream: OutputStream, data: String) {
        let data = data.into_bytes();
        let (seen, from) = match stream {
            OutputStream::Stdout => (&mut self.seen.stdout, self.from.stdout),
            OutputStream::Stderr => (&mut self.seen.stderr, self.from.stderr),
        };
        let start = *seen;
        *seen += data.len() as u64;
        // Replayed from the start: only what lies past the bytes Corral holds is new.
        let skip = from.saturating_sub(start);
        if skip >= data.len() as u64 {
            return;
        }
        let at = start + skip;
        let rest = data[usize::try_from(skip).unwrap_or(0)..].to_vec();
        self.queue.push_back(Ok(CommandEvent::Output {
            stream,
            offset: Some(at),
            data: rest,
        }));
    }

    fn line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        match serde_json::from_str::<LogLine>(text) {
            Ok(LogLine::Stdout { data }) => self.output(OutputStream::Stdout, data),
            Ok(LogLine::Stderr { data }) => self.output(OutputStream::Stderr, data),
            Ok(LogLine::Error { data }) => {
                tracing::debug!(provider = %P, code = %data.code, "the command's log stream failed");
                self.resp = None;
                self.end = Some(LogsEnd::Broken);
            }
            Err(e) => {
                self.resp = None;
                self.end = Some(LogsEnd::Broken);
                self.queue
                    .push_back(Err(protocol(format!("malformed log line: {e}"))));
            }
        }
    }

    /// The next event, or `None` once the stream ended (then [`Logs::end`] says how).
    pub(crate) async fn next(&mut self) -> Option<Result<CommandEvent>> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Some(ev);
            }
            let resp = self.resp.as_mut()?;
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    self.pending.extend_from_slice(&bytes);
                    while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = self.pending.drain(..=pos).collect();
                        self.line(&line);
                        if self.resp.is_none() {
                            break;
                        }
                    }
                    if self.pending.len() > MAX_LINE_BYTES {
                        self.resp = None;
                        self.end = Some(LogsEnd::Broken);
                        self.queue
                            .push_back(Err(protocol("a log line is too long".to_owned())));
                    }
                }
                Ok(None) => {
                    // The last line may lack its newline.
                    let last = std::mem::take(&mut self.pending);
                    self.resp = None;
                    self.end = Some(LogsEnd::Finished);
                    self.line(&last);
                }
                Err(e) => {
                    tracing::debug!(provider = %P, error = %map_body_error(P, &e), "the command's log stream broke");
                    self.resp = None;
                    self.end = Some(LogsEnd::Broken);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_a_comment_line_found_in_the_args() {
        let id = CommandId::new();
        let other = CommandId::new();
        let cmd = |id: &str, script: String| Command {
            id: id.into(),
            args: vec!["-c".into(), script],
            exit_code: None,
        };
        let list = [
            cmd("cmd_1", format!("{}echo a", tag_line(&other))),
            cmd("cmd_2", format!("{}echo b", tag_line(&id))),
            cmd("cmd_3", "echo c".into()),
        ];
        assert_eq!(tagged(&list, &id).map(|c| c.id.as_str()), Some("cmd_2"));
        assert!(tagged(&list[2..], &id).is_none());
        assert!(tag_line(&id).starts_with("# corral-cmd_") && tag_line(&id).ends_with('\n'));
    }

    #[test]
    fn handles_name_the_session_and_the_command() {
        let h = handle("sbx_1", "cmd_2");
        assert_eq!(parse_handle(&h).unwrap(), ("sbx_1", "cmd_2"));
        assert!(parse_handle("cmd_2").is_err());
    }
}
