//! Commands as durable jobs, as the port sees them: start one detached, attach to its output
//! (from byte offsets where the provider can), feed its stdin, signal it, find it again.
//!
//! Corral journals what an attach yields, so the provider's stream is read once and clients
//! resume from the journal. An adapter therefore only has to say, for each chunk, where it
//! starts in its stream when it knows ([`CommandEvent::Output::offset`]); the service skips
//! what it already has, and records a gap where bytes are provably missing.
//!
//! Every method has a default that emulates the job over the provider's synchronous exec
//! ([`crate::commands_via_exec`]); adapters with a native asynchronous API override them all.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_domain::{CommandId, OutputStream};
use futures::stream::BoxStream;

use crate::Result;

/// A command to start detached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Corral's id of the command; adapters tag the provider's process with it where they can
    /// (a lost start is then found again by [`crate::SandboxProvider::find_command`]).
    pub command_id: CommandId,
    /// The command, with `sh -c` semantics.
    pub command: String,
    /// Working directory, if the provider supports it.
    pub cwd: Option<String>,
    /// Extra environment, if the provider supports it.
    pub env: BTreeMap<String, String>,
    /// Whether to open a stdin channel (otherwise stdin is empty).
    pub stdin: bool,
    /// How long it may run. Corral enforces it (a `KILL` at the deadline); adapters may also
    /// pass it to the provider as a backstop, never shorter.
    pub timeout: Duration,
}

/// A started command: the provider's handle on it, and the start's own output stream where
/// the provider's start call is itself a stream (then it is the first attach, from offset 0).
pub struct Started<'a> {
    /// Opaque to Corral (a pid, the provider's command id, a session name): what the other
    /// command methods take.
    pub handle: String,
    /// The start's output, if the start call streams it.
    pub events: Option<CommandEvents<'a>>,
}

impl std::fmt::Debug for Started<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("handle", &self.handle)
            .field("events", &self.events.is_some())
            .finish()
    }
}

/// What an attached command yields, in order; the stream ends after [`CommandEvent::Exit`],
/// or earlier when the connection to the provider broke (attach again).
pub type CommandEvents<'a> = BoxStream<'a, Result<CommandEvent>>;

/// One thing a running command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandEvent {
    /// Bytes of one stream.
    Output {
        /// The stream.
        stream: OutputStream,
        /// Where `data` starts in its stream, when the provider says (a byte offset it
        /// resumed from, or a count since a replay from the start); `None` when the provider
        /// only streams what comes next and the position is unknown.
        offset: Option<u64>,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The command ended.
    Exit {
        /// Its exit code (`128 + n` for death by signal `n`), when the provider reports one.
        exit_code: Option<i32>,
    },
}

/// Bytes of each stream Corral already has: where an attach should resume.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputOffsets {
    /// Bytes of stdout.
    pub stdout: u64,
    /// Bytes of stderr.
    pub stderr: u64,
}

impl OutputOffsets {
    /// The offset of `stream`.
    pub fn of(&self, stream: OutputStream) -> u64 {
        match stream {
            OutputStream::Stdout => self.stdout,
            OutputStream::Stderr => self.stderr,
        }
    }
}
