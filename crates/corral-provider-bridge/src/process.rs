//! Commands as durable jobs on a bridge: the process routes *(extension)* when the bridge
//! serves them, the exec wrapper of `corral_provider::commands_via_exec` when it does not.
//!
//! - **start**: `POST …/process {argv: ["sh", "-c", <script>], process_id: <command id>,
//!   stdin, timeout_ms}`; `409 process_exists` is the same process (a retried start starts
//!   nothing). The handle is `process:<id>`. A bridge without the route (404 without a
//!   contract code, 405, 501) gets the exec wrapper, and so does a command with stdin on a
//!   bridge that answers `stdin_unsupported` (Cloudflare's background processes have none);
//!   their handles are the command id, as the wrapper's always were.
//! - **attach**: `GET …/process/{id}/logs?stdout=&stderr=` from the offsets Corral holds: SSE
//!   events `stdout`/`stderr` (`{"offset", "data": base64}`), then `exit` (`{"exit_code"}`) or
//!   `error`. A stream that ends without either, breaks, or sends nothing for
//!   [`SILENCE_LIMIT`] (bridges send a comment at least every 30 s) ends the attach without an
//!   exit: the service attaches again from its offsets.
//! - **stdin**: `POST …/stdin {offset, data}` → `{accepted}` (a resend of accepted bytes is
//!   skipped by the bridge), `DELETE …/stdin` closes it.
//! - **signal**: `POST …/kill {signal: "SIG<NAME>"}`; `signal_unsupported` → `Unsupported`.
//! - **find**: `GET …/process/{command id}`; not found there, the exec wrapper is asked (the
//!   command may have gone through it).

use std::time::Duration;

use base64::Engine as _;
use corral_domain::{OutputStream, Provider};
use corral_provider::{
    CallContext, CommandEvent, CommandEvents, OutputOffsets, ProviderError, Result, excerpt,
};
use corral_provider_http::map_body_error;
use corral_provider_http::reqwest::Response;
use corral_provider_http::sse::{SseEvent, SseParser};
use futures::stream::{self, StreamExt as _};

use crate::api::{ErrorBody, LogChunk, ProcessExit, codes};
use crate::exec::MAX_EVENT_BYTES;

/// What a native handle starts with (the exec wrapper's handles are bare command ids).
const HANDLE_PREFIX: &str = "process:";
/// How long one log stream may stay open before the client lets it end (the service attaches
/// again from its offsets).
pub(crate) const STREAM_LIMIT: Duration = Duration::from_secs(60 * 60);
/// How long a log stream may send nothing (not even a comment) before it is taken as cut.
pub(crate) const SILENCE_LIMIT: Duration = Duration::from_secs(75);

/// The handle of bridge process `id`.
pub(crate) fn handle(id: &str) -> String {
    format!("{HANDLE_PREFIX}{id}")
}

/// The bridge process a handle names; `None` for a handle of the exec wrapper.
pub(crate) fn process_id(handle: &str) -> Option<&str> {
    handle.strip_prefix(HANDLE_PREFIX)
}

/// A log stream being read.
struct Logs<'a> {
    provider: Provider,
    ctx: &'a CallContext,
    resp: Response,
    parser: SseParser,
    from: OutputOffsets,
    silence: Duration,
    done: bool,
}

impl Logs<'_> {
    fn protocol(&self, message: String) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider,
            message,
        }
    }

    /// One event's meaning; `done` is set on a terminal one.
    fn event(&mut self, event: SseEvent) -> Option<Result<CommandEvent>> {
        let stream = match event.event.as_str() {
            "stdout" => OutputStream::Stdout,
            "stderr" => OutputStream::Stderr,
            "exit" => {
                self.done = true;
                return Some(match serde_json::from_str::<ProcessExit>(&event.data) {
                    Ok(exit) => Ok(CommandEvent::Exit {
                        exit_code: exit.exit_code,
                    }),
                    Err(e) => Err(self.protocol(format!("an exit event is malformed: {e}"))),
                });
            }
            "error" => {
                self.done = true;
                let body: Option<ErrorBody> = serde_json::from_str(&event.data).ok();
                let e = match body {
                    Some(b) if b.code == codes::PROCESS_NOT_FOUND => ProviderError::NotFound {
                        provider: self.provider,
                        resource: "process".into(),
                    },
                    Some(b) => ProviderError::ServerError {
                        provider: self.provider,
                        status: 502,
                        message: format!("{} ({})", excerpt(&b.error, 200), b.code),
                    },
                    None => self.protocol(format!(
                        "an error event is malformed: {}",
                        excerpt(&event.data, 200)
                    )),
                };
                return Some(Err(crate::redacted(self.ctx, e)));
            }
            // Unknown events are skipped, as on exec.
            _ => return None,
        };
        let chunk = match serde_json::from_str::<LogChunk>(&event.data) {
            Ok(c) => c,
            Err(e) => {
                self.done = true;
                return Some(Err(
                    self.protocol(format!("an output event is malformed: {e}"))
                ));
            }
        };
        let mut data = match base64::engine::general_purpose::STANDARD.decode(chunk.data.trim()) {
            Ok(d) => d,
            Err(e) => {
                self.done = true;
                return Some(Err(
                    self.protocol(format!("an output chunk is not base64: {e}"))
                ));
            }
        };
        let Some(at) = chunk.offset else {
            return Some(Ok(CommandEvent::Output {
                stream,
                offset: None,
                data,
            }));
        };
        // What Corral holds is not passed on again.
        let have = self.from.of(stream);
        let len = data.len() as u64;
        if at + len <= have {
            return None;
        }
        let skip = usize::try_from(have.saturating_sub(at)).unwrap_or(usize::MAX);
        data.drain(..skip.min(data.len()));
        Some(Ok(CommandEvent::Output {
            stream,
            offset: Some(at.max(have)),
            data,
        }))
    }
}

/// The events of a process log stream `resp`, asked from `from`.
pub(crate) fn attach<'a>(
    provider: Provider,
    ctx: &'a CallContext,
    resp: Response,
    from: OutputOffsets,
    silence: Duration,
) -> CommandEvents<'a> {
    let logs = Logs {
        provider,
        ctx,
        resp,
        parser: SseParser::new(),
        from,
        silence,
        done: false,
    };
    stream::unfold(logs, |mut st| async move {
        if st.done {
            return None;
        }
        match tokio::time::timeout(st.silence, st.resp.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                let mut out = Vec::new();
                for event in st.parser.push(&bytes) {
                    if st.done {
                        break;
                    }
                    if let Some(e) = st.event(event) {
                        out.push(e);
                    }
                }
                if !st.done && st.parser.buffered() > MAX_EVENT_BYTES {
                    st.done = true;
                    out.push(Err(st.protocol(format!(
                        "a process log event exceeds {MAX_EVENT_BYTES} bytes"
                    ))));
                }
                Some((out, st))
            }
            // Ended without a terminal event: cut; the service attaches again.
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::debug!(error = %map_body_error(st.provider, &e), "a bridge log stream broke");
                None
            }
            Err(_) => {
                tracing::debug!("a bridge log stream went silent; attaching again");
                None
            }
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_handles_are_told_from_the_exec_wrappers() {
        let id = corral_domain::CommandId::new().to_string();
        assert_eq!(process_id(&handle(&id)), Some(id.as_str()));
        assert_eq!(
            process_id(&id),
            None,
            "a wrapper handle is a bare command id"
        );
    }
}
