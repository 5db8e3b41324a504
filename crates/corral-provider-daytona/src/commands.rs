//! Commands as durable jobs over the toolbox's sessions.
//!
//! - **start**: a session per command, its id `corral-<command id>` (`POST /process/session`;
//!   409 when it exists), then `POST /process/session/{sid}/exec {command, runAsync: true}`,
//!   which answers the `cmdId` at once. A start retried after a lost answer finds the session
//!   taken and, when it already holds a command, answers that command instead of running a
//!   second. The command is `sh -c` over the shared shell prelude (the session API has no cwd
//!   or env), base64-wrapped as exec's, with stdin from `/dev/null`: the daemon holds an
//!   async command's input FIFO open for ever, so a command reading stdin would never see its
//!   end. The handle is `<sessionId>/<cmdId>`.
//! - **attach**: `GET …/command/{cmdId}` (its `exitCode` appears once it ended), then
//!   `GET …/command/{cmdId}/logs`: a snapshot of the whole log *from byte 0* (the daemon opens
//!   the file anew on every request), as plain text with stdout and stderr combined (a
//!   client that does not ask for split output gets this, and it keeps bytes that are not
//!   UTF-8, where the split JSON form could not). Polled, backing off while nothing changes;
//!   chunks carry their offset counted from the log's first byte (`provider_replay`), so the
//!   part Corral already holds is not sent again. The exit code is read *before* the log, so
//!   the log read after it is complete (the daemon writes the exit code once its line
//!   labelers flushed).
//! - **signal**: `POST …/command/{cmdId}/terminate` sends SIGKILL to the command's process
//!   group (there is no choice of signal): `KILL` only; its 410 (already ended) is success.
//! - **stdin**: not offered. `POST …/command/{cmdId}/input` exists, but appends a newline to
//!   every write that lacks one and cannot close stdin (the daemon holds the FIFO open until
//!   the command ends): neither exact bytes nor end of file, which Corral's stdin promises.
//! - **find**: `GET /process/session/corral-<command id>`: its first command.

use std::time::Duration;

use corral_domain::{CommandId, OutputStream};
use corral_provider::{CommandEvent, ProviderError, Result};

use crate::{P, api};

/// First pause between two polls of a quiet command.
pub(crate) const POLL_MIN: Duration = Duration::from_millis(100);
/// Longest pause between two polls of a quiet command.
pub(crate) const POLL_MAX: Duration = Duration::from_secs(1);

/// The session holding Corral's command `id`.
pub fn session_id(id: &CommandId) -> String {
    format!("corral-{id}")
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
            message: format!("`{handle}` is not a Daytona command handle (sessionId/cmdId)"),
        })
}

/// Everything Daytona's combined log carries goes to stdout.
pub(crate) const LOG_STREAM: OutputStream = OutputStream::Stdout;

/// Where an attach's polling stands.
pub(crate) struct Poll {
    /// Log bytes before the next chunk.
    pub(crate) at: u64,
    /// The command's state, when already read for the next log snapshot.
    pub(crate) state: Option<api::Command>,
    /// The pause before the next poll.
    pub(crate) pause: Duration,
    /// The exit was reported, or the command is gone.
    pub(crate) done: bool,
}

impl Poll {
    /// How a poll ends on `error`: a command Daytona no longer knows is reported once (the
    /// service settles it); anything else ends the attach early (the service attaches again
    /// from the bytes it holds).
    pub(crate) fn ended_by(
        mut self,
        error: ProviderError,
    ) -> Option<(Vec<Result<CommandEvent>>, Self)> {
        match error {
            e @ ProviderError::NotFound { .. } => {
                self.done = true;
                Some((vec![Err(e)], self))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_name_the_session_and_the_command() {
        let id = CommandId::new();
        let sid = session_id(&id);
        assert_eq!(sid, format!("corral-{id}"));
        let h = handle(&sid, "c0ffee");
        assert_eq!(parse_handle(&h).unwrap(), (sid.as_str(), "c0ffee"));
        assert!(parse_handle("no-slash").is_err());
        assert!(parse_handle("/x").is_err());
    }
}
