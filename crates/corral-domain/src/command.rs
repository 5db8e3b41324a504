//! Commands as durable jobs: `POST /v1/sandboxes/{id}/commands` and its sub-resources.
//!
//! A command is started, answers at once with its id, keeps running whatever happens to the
//! request, and is observed (state, `?wait=`), followed (output events with resumable ids),
//! fed (stdin with offsets) and signalled. Output is journaled by Corral, so every event has
//! a sequence number that resumes exactly, on every provider.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::capabilities::{ProviderCapabilities, Signal};
use crate::exec::RunCommandInput;
use crate::files::FileEncoding;
use crate::id::{CommandId, SandboxId};
use crate::input::InputError;

/// Longest accepted `tag`, in bytes.
pub const MAX_TAG_BYTES: usize = 64;

/// The lifecycle state of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum CommandState {
    /// Recorded; the provider has not confirmed the start yet (its answer was lost, or it is
    /// being looked up again). Settles to `running` or `lost`.
    Starting,
    /// Running.
    Running,
    /// Ended by itself (`exitCode` says how; `128 + n` for death by a signal it was not sent
    /// through Corral).
    Exited,
    /// Ended by a signal sent through Corral, or by the deletion of its sandbox.
    Killed,
    /// Killed by Corral at `timeoutSeconds`.
    TimedOut,
    /// The provider no longer knows it and Corral cannot tell how it ended.
    Lost,
}

impl CommandState {
    /// Every state.
    pub const ALL: [CommandState; 6] = [
        CommandState::Starting,
        CommandState::Running,
        CommandState::Exited,
        CommandState::Killed,
        CommandState::TimedOut,
        CommandState::Lost,
    ];

    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            CommandState::Starting => "starting",
            CommandState::Running => "running",
            CommandState::Exited => "exited",
            CommandState::Killed => "killed",
            CommandState::TimedOut => "timed_out",
            CommandState::Lost => "lost",
        }
    }

    /// Whether the command has ended (no more output will come).
    pub const fn is_final(self) -> bool {
        !matches!(self, CommandState::Starting | CommandState::Running)
    }
}

impl fmt::Display for CommandState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CommandState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CommandState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown command state {s:?}"))
    }
}

/// `POST /v1/sandboxes/{id}/commands` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartCommandInput {
    /// The command, run with `sh -c` semantics.
    pub command: String,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables for the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Whether to open a stdin channel (otherwise stdin is empty).
    #[serde(
        default,
        deserialize_with = "null_as_false",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub stdin: bool,
    /// How long the command may run before Corral kills it (`timed_out`); defaults to the
    /// server's maximum.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::create::whole_number"
    )]
    pub timeout_seconds: Option<u64>,
    /// A label of the caller's choosing (1–64 printable ASCII characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

impl StartCommandInput {
    /// Checks the body against the limits, the provider's capabilities and the server's
    /// maximum timeout.
    pub fn validate(
        &self,
        caps: &ProviderCapabilities,
        max_timeout_seconds: u64,
    ) -> Result<(), InputError> {
        RunCommandInput {
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
        }
        .validate(caps)?;
        if self.stdin && !caps.commands.stdin {
            return Err(InputError::invalid(
                "stdin",
                format!(
                    "provider `{}` cannot give a command a stdin channel (capability commands.stdin)",
                    caps.provider
                ),
            ));
        }
        if let Some(t) = self.timeout_seconds
            && !(1..=max_timeout_seconds).contains(&t)
        {
            return Err(InputError::invalid(
                "timeoutSeconds",
                format!("`timeoutSeconds` must be from 1 to {max_timeout_seconds}"),
            ));
        }
        if let Some(tag) = &self.tag {
            let ok = !tag.is_empty()
                && tag.len() <= MAX_TAG_BYTES
                && tag.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
            if !ok {
                return Err(InputError::invalid(
                    "tag",
                    format!("`tag` must be 1 to {MAX_TAG_BYTES} printable ASCII characters"),
                ));
            }
        }
        Ok(())
    }
}

/// A command, as start, get, list and signal return it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Command {
    /// Opaque project-scoped id.
    pub id: CommandId,
    /// The sandbox it runs in.
    pub sandbox_id: SandboxId,
    /// The command line.
    pub command: String,
    /// The caller's label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Lifecycle state.
    pub state: CommandState,
    /// Exit code, once known; `128 + n` for death by signal `n`.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Whether the stdin channel is open.
    pub stdin_open: bool,
    /// Bytes of stdin accepted so far (the offset of the next write).
    pub stdin_bytes: u64,
    /// The deadline Corral enforces, in seconds from `startedAt`.
    pub timeout_seconds: u64,
    /// When the command was started.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub started_at: Timestamp,
    /// When it ended (`null` while it runs).
    #[serde(default, with = "crate::wire_time::option")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub ended_at: Option<Timestamp>,
    /// Bytes of standard output so far (journaled or lost).
    pub stdout_bytes: u64,
    /// Bytes of standard error so far (journaled or lost).
    pub stderr_bytes: u64,
}

/// A page of a sandbox's commands, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CommandPage {
    /// Commands, newest first.
    pub items: Vec<Command>,
    /// Cursor of the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// Which output stream bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum OutputStream {
    /// Standard output (all output where the provider combines the streams).
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// One event of a command's output. `seq` orders a command's events and is the SSE event id:
/// resuming after `seq` continues exactly there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum OutputEvent {
    /// Bytes of one stream.
    Output {
        /// Sequence number.
        seq: u64,
        /// The stream.
        stream: OutputStream,
        /// Byte offset of `data`'s first byte in its stream.
        offset: u64,
        /// The bytes, in `encoding` (`utf8` when they are valid UTF-8, else `base64`).
        data: String,
        /// The encoding of `data`.
        encoding: FileEncoding,
    },
    /// Bytes that are provably lost: dropped by retention, or made while Corral could not
    /// read a provider that does not replay.
    Gap {
        /// Sequence number.
        seq: u64,
        /// The stream.
        stream: OutputStream,
        /// Byte offset where the loss starts.
        offset: u64,
        /// How many bytes were lost (`null`: unknown).
        #[serde(default)]
        length: Option<u64>,
    },
    /// The command ended; no event follows.
    Exit {
        /// Sequence number.
        seq: u64,
        /// The final state.
        state: CommandState,
        /// Exit code, when known.
        #[serde(default)]
        #[serde(rename = "exitCode")]
        exit_code: Option<i32>,
    },
}

impl OutputEvent {
    /// The event's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            OutputEvent::Output { seq, .. }
            | OutputEvent::Gap { seq, .. }
            | OutputEvent::Exit { seq, .. } => *seq,
        }
    }

    /// The SSE event name: `stdout`, `stderr`, `gap` or `exit`.
    pub fn name(&self) -> &'static str {
        match self {
            OutputEvent::Output { stream, .. } => stream.as_str(),
            OutputEvent::Gap { .. } => "gap",
            OutputEvent::Exit { .. } => "exit",
        }
    }

    /// Output bytes as an event: UTF-8 text where they are valid UTF-8, base64 otherwise.
    pub fn output(seq: u64, stream: OutputStream, offset: u64, bytes: &[u8]) -> Self {
        use base64::Engine as _;
        let (data, encoding) = match std::str::from_utf8(bytes) {
            Ok(text) => (text.to_owned(), FileEncoding::Utf8),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(bytes),
                FileEncoding::Base64,
            ),
        };
        OutputEvent::Output {
            seq,
            stream,
            offset,
            data,
            encoding,
        }
    }
}

/// A page of output events (`GET …/output` without `text/event-stream`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct OutputPage {
    /// Events in order.
    pub events: Vec<OutputEvent>,
    /// Pass as `after` for the next page: the last event's `seq` (or the `after` given).
    pub next_after: u64,
    /// Whether the last event is the `exit` event (nothing more will come).
    pub done: bool,
}

/// `POST …/commands/{cmd}/stdin` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StdinInput {
    /// Bytes to write, in `encoding` (may be empty, e.g. with `close`).
    #[serde(default)]
    pub data: String,
    /// The encoding of `data`; default `utf8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<FileEncoding>,
    /// The stdin offset `data` starts at (the command's `stdinBytes` when it was sent): a
    /// resend after a lost answer is recognised and not written twice. Absent: append.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::create::whole_number"
    )]
    pub offset: Option<u64>,
    /// Close stdin after writing (the command then reads end-of-file).
    #[serde(
        default,
        deserialize_with = "null_as_false",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub close: bool,
}

/// Largest decoded stdin write, in bytes.
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;

impl StdinInput {
    /// Decodes `data`, enforcing [`MAX_STDIN_BYTES`].
    pub fn decode(&self) -> Result<Vec<u8>, InputError> {
        crate::files::decode_content("data", &self.data, self.encoding, MAX_STDIN_BYTES)
    }
}

/// `POST …/commands/{cmd}/stdin` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct StdinResult {
    /// Bytes of stdin accepted so far, this write included (the next write's offset).
    pub stdin_bytes: u64,
    /// Whether stdin is still open.
    pub stdin_open: bool,
}

/// `POST …/commands/{cmd}/signal` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalInput {
    /// The signal, e.g. `TERM`.
    pub signal: Signal,
}

/// An optional flag that may also be sent as `null` (the document says nullable, as for every
/// optional field): absent and `null` both mean false.
fn null_as_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_flags_sent_as_null_mean_false() {
        let start: StartCommandInput =
            serde_json::from_str(r#"{"command":"true","stdin":null}"#).unwrap();
        assert!(!start.stdin);
        let start: StartCommandInput =
            serde_json::from_str(r#"{"command":"true","stdin":true}"#).unwrap();
        assert!(start.stdin);
        let stdin: StdinInput = serde_json::from_str(r#"{"data":"","close":null}"#).unwrap();
        assert!(!stdin.close);
        assert!(serde_json::from_str::<StdinInput>(r#"{"close":"yes"}"#).is_err());
        // JSON Schema's `integer` includes numbers with a zero fractional part.
        let start: StartCommandInput =
            serde_json::from_str(r#"{"command":"true","timeoutSeconds":60.0}"#).unwrap();
        assert_eq!(start.timeout_seconds, Some(60));
        let stdin: StdinInput = serde_json::from_str(r#"{"offset":12.0}"#).unwrap();
        assert_eq!(stdin.offset, Some(12));
        assert!(serde_json::from_str::<StdinInput>(r#"{"offset":1.5}"#).is_err());
    }

    #[test]
    fn signals_parse_with_or_without_sig_in_any_case() {
        assert_eq!("TERM".parse::<Signal>(), Ok(Signal::Term));
        assert_eq!("sigkill".parse::<Signal>(), Ok(Signal::Kill));
        assert_eq!("Int".parse::<Signal>(), Ok(Signal::Int));
        assert!("STOP".parse::<Signal>().is_err());
        for s in Signal::ALL {
            assert_eq!(s.as_str().parse::<Signal>(), Ok(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
    }

    #[test]
    fn output_events_carry_utf8_as_text_and_other_bytes_as_base64() {
        let text = OutputEvent::output(1, OutputStream::Stdout, 0, "héllo\n".as_bytes());
        let json = serde_json::to_value(&text).unwrap();
        assert_eq!(json["type"], "output");
        assert_eq!(json["data"], "héllo\n");
        assert_eq!(json["encoding"], "utf8");
        let bin = OutputEvent::output(2, OutputStream::Stderr, 6, &[0xff, 0x00, 0x41]);
        let json = serde_json::to_value(&bin).unwrap();
        assert_eq!(json["encoding"], "base64");
        assert_eq!(json["data"], "/wBB");
        assert_eq!(json["offset"], 6);
        assert_eq!(bin.name(), "stderr");
        let exit = OutputEvent::Exit {
            seq: 3,
            state: CommandState::Exited,
            exit_code: Some(0),
        };
        assert_eq!(
            serde_json::to_string(&exit).unwrap(),
            r#"{"type":"exit","seq":3,"state":"exited","exitCode":0}"#
        );
    }

    #[test]
    fn only_running_and_starting_are_not_final() {
        for s in CommandState::ALL {
            let live = matches!(s, CommandState::Running | CommandState::Starting);
            assert_eq!(s.is_final(), !live, "{s}");
            assert_eq!(s.as_str().parse::<CommandState>(), Ok(s));
        }
    }
}
