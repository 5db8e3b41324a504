//! Commands as durable jobs over Runloop's asynchronous executions.
//!
//! - **start**: without stdin, `POST …/execute` with `optimistic_timeout: 0` and a `command_id`
//!   derived from Corral's command id (a UUIDv7 made of the same ULID), which Runloop keeps
//!   "for idempotency": a retried start names the same execution instead of running the
//!   command twice. With stdin, `POST …/execute_async` with `attach_stdin: true` (`execute`
//!   cannot attach stdin, and `execute_async` takes no command id). Either way the command
//!   runs as `sh -c '<script>'` (cwd and env in the shared prelude) and the handle is the
//!   `execution_id`.
//! - **attach**: the two SSE streams `stream_stdout_updates` / `stream_stderr_updates` opened
//!   at the byte offsets Corral holds (`?offset=`), merged. Offsets are counted by the adapter
//!   from the requested ones, byte for byte of what arrives: each chunk's own `offset` field
//!   is not relied on, since the description does not say whether it is where the chunk
//!   starts or ends. Both streams end when the execution completes; the adapter then asks
//!   `wait_for_status` (briefly) for the exit status. A stream that broke, or ended while the
//!   execution still runs, ends the attach without an exit (the service attaches again from
//!   its offsets, losing and repeating nothing).
//! - **stdin**: `send_std_in {text}`, `send_std_in {signal: EOF}` to close. Runloop takes text
//!   (bytes that are not UTF-8 are refused) and has no offset, so a resend would be written
//!   twice: the adapter remembers, per execution and process, how many bytes it wrote, and
//!   skips what a resend repeats.
//! - **signal**: `…/kill` with `kill_process_group: true` is the only signal Runloop delivers
//!   (`send_std_in`'s `INTERRUPT` goes through stdin, not to the process): `KILL` only.
//! - **find**: Runloop cannot list or look executions up: `Unsupported`.
//!
//! Output travels as JSON text: bytes that are not UTF-8 arrive replaced by U+FFFD.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_domain::{CommandId, OutputStream};
use corral_provider::{CommandEvent, ProviderError, Result};
use corral_provider_http::reqwest::Response;
use corral_provider_http::sse::{SseEvent, SseParser};
use futures::stream::{self, BoxStream, StreamExt as _};

use crate::P;
use crate::api::ExecUpdateChunkView;

/// How long one SSE stream stays open before the adapter lets it end (the service attaches
/// again from its offsets): bounds a connection the provider keeps silent for ever.
pub(crate) const STREAM_LIMIT: Duration = Duration::from_secs(10 * 60);
/// How long the adapter waits for the exit status once both streams ended.
pub(crate) const EXIT_WAIT_SECONDS: u32 = 2;
/// Largest unfinished SSE event held in memory.
const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// The UUIDv7 of a ULID: its 48-bit millisecond timestamp and 80 random bits are the layout
/// of a UUIDv7 once the version and variant bits are set.
pub(crate) fn uuid_v7_of(ulid: ulid::Ulid) -> String {
    let mut b = ulid.to_bytes();
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The `command_id` Runloop's `execute` gets for Corral's command `id`: the same on every
/// retry of its start.
pub fn command_uuid(id: &CommandId) -> String {
    uuid_v7_of(id.ulid())
}

/// Bytes of stdin the adapter wrote, per (devbox, execution): Runloop's `send_std_in` has no
/// offset, so this is what makes a resend harmless (within one process).
#[derive(Debug, Default)]
pub(crate) struct StdinCounts(Mutex<HashMap<(String, String), u64>>);

impl StdinCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), u64>> {
        // A poisoned lock only means another call panicked mid-update: the map is usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What of `data` (which starts at stdin byte `offset`) is new: its position in `data`,
    /// or `None` when all of it was written already. Answers the total written too.
    pub(crate) fn fresh(&self, key: &(String, String), offset: u64, len: u64) -> (u64, u64) {
        let written = self.lock().get(key).copied().unwrap_or(offset);
        let start = written.max(offset);
        (start.min(offset + len) - offset, start.max(offset + len))
    }

    /// Notes that stdin now holds `total` bytes.
    pub(crate) fn wrote(&self, key: (String, String), total: u64) {
        let mut counts = self.lock();
        let entry = counts.entry(key).or_insert(total);
        *entry = (*entry).max(total);
    }

    /// Forgets an execution (its stdin closed).
    pub(crate) fn forget(&self, key: &(String, String)) {
        self.lock().remove(key);
    }
}

fn protocol(message: impl Into<String>) -> ProviderError {
    ProviderError::Protocol {
        provider: P,
        message: message.into(),
    }
}

/// One SSE update stream being read.
struct Updates {
    resp: Option<Response>,
    parser: SseParser,
    stream: OutputStream,
    /// Bytes of the stream before the next chunk.
    at: u64,
    queue: VecDeque<Result<CommandEvent>>,
    /// Set when the connection broke (rather than ended) on either stream.
    broken: Arc<AtomicBool>,
}

impl Updates {
    fn event(&mut self, ev: SseEvent) {
        if ev.event == "error" {
            self.queue.push_back(Err(protocol(format!(
                "the {} stream failed: {}",
                self.stream.as_str(),
                corral_provider::excerpt(&ev.data, 300)
            ))));
            return;
        }
        match serde_json::from_str::<ExecUpdateChunkView>(&ev.data) {
            Ok(chunk) if chunk.output.is_empty() => {}
            Ok(chunk) => {
                let data = chunk.output.into_bytes();
                let offset = self.at;
                self.at += data.len() as u64;
                self.queue.push_back(Ok(CommandEvent::Output {
                    stream: self.stream,
                    offset: Some(offset),
                    data,
                }));
            }
            Err(e) => self.queue.push_back(Err(protocol(format!(
                "malformed {} update: {e}",
                self.stream.as_str()
            )))),
        }
    }
}

/// The output events of one update stream whose first byte is byte `from` of `stream`. The
/// stream ends when the connection ends; `broken` is set when it broke.
pub(crate) fn updates(
    resp: Response,
    stream: OutputStream,
    from: u64,
    broken: Arc<AtomicBool>,
) -> BoxStream<'static, Result<CommandEvent>> {
    let state = Updates {
        resp: Some(resp),
        parser: SseParser::new(),
        stream,
        at: from,
        queue: VecDeque::new(),
        broken,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((ev, st));
            }
            let resp = st.resp.as_mut()?;
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    for ev in st.parser.push(&bytes) {
                        st.event(ev);
                    }
                    if st.parser.buffered() > MAX_EVENT_BYTES {
                        st.resp = None;
                        st.broken.store(true, Ordering::SeqCst);
                        st.queue.push_back(Err(protocol(format!(
                            "an event of the {} stream is larger than {MAX_EVENT_BYTES} bytes",
                            st.stream.as_str()
                        ))));
                    }
                }
                Ok(None) => st.resp = None,
                Err(_) => {
                    // A broken connection ends this attach early; the next resumes at the
                    // offsets Corral holds.
                    st.resp = None;
                    st.broken.store(true, Ordering::SeqCst);
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_uuids_are_v7_and_stable_per_command() {
        let id = CommandId::new();
        let u = command_uuid(&id);
        assert_eq!(u, command_uuid(&id));
        assert_ne!(u, command_uuid(&CommandId::new()));
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "7", "{u}");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
    }

    #[test]
    fn stdin_counts_skip_what_a_resend_repeats() {
        let counts = StdinCounts::default();
        let key = ("dbx".to_owned(), "exe".to_owned());
        // Nothing known: all of it is new.
        assert_eq!(counts.fresh(&key, 0, 6), (0, 6));
        counts.wrote(key.clone(), 6);
        // A resend of the same bytes: nothing new, 6 in all.
        assert_eq!(counts.fresh(&key, 0, 6), (6, 6));
        // Overlapping: the last 4 of 8 are new.
        assert_eq!(counts.fresh(&key, 2, 8), (4, 10));
        // Past what was written (another replica wrote): trusted.
        assert_eq!(counts.fresh(&key, 9, 1), (0, 10));
        counts.forget(&key);
        assert_eq!(counts.fresh(&key, 0, 6), (0, 6));
    }
}
