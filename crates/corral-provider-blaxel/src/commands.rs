//! Commands as durable jobs over Blaxel's process API (the sandbox API's `/process` routes).
//!
//! - **start**: `POST /process {command, name: <command id>, workingDir, env,
//!   waitForCompletion: false}` answers as soon as the process runs. Blaxel refuses a name
//!   only while a process of that name *runs* (`400 … already exists and is running`) and
//!   would start a second one under the name of an ended one, so the adapter looks the name up
//!   first (`GET /process/{name}`): a retried start finds its process and starts nothing. The
//!   handle is the name. No `timeout` is sent: without `keepAlive` it only bounds a wait, it
//!   kills nothing (Corral kills at the deadline).
//! - **attach**: `GET /process/{name}` (404 → the command is unknown; the stream itself would
//!   answer an unknown name with `200` and an error body), then `GET
//!   /process/{name}/logs/stream`, which replays the output from the start and then follows it
//!   until the process ends ([`crate::logs`] reads it back into bytes). Offsets are counted
//!   from 0 and bytes Corral holds are not sent again. When the body ends, `GET
//!   /process/{name}` says whether the process ended (exit event) or the stream was cut (the
//!   attach just ends; the service attaches again). A body silent for longer than
//!   [`SILENCE_LIMIT`] is taken as cut: Blaxel writes a keep-alive every 30 s while a process
//!   runs. A replay of a log whose head Blaxel released (it keeps at most 32 MiB per stream,
//!   less when many processes share the sandbox's log budget) gives no positions: its chunks
//!   carry none.
//! - **signal**: `DELETE /process/{name}` sends SIGTERM to the process group, `DELETE
//!   /process/{name}/kill` SIGKILL: `TERM` and `KILL` only. Both answer 404 for a process that
//!   is not running; the adapter then checks that it exists (an ended command is `Ok`).
//! - **stdin**: Blaxel starts every process with no standard input: not offered.
//! - **find**: `GET /process/{command id}`.
//!
//! An open log stream is traffic, so a followed sandbox does not go to standby; a sandbox
//! nobody follows does, and its processes are frozen with it and go on when it resumes.

use std::time::Duration;

use corral_domain::OutputStream;
use corral_provider::{CommandEvent, CommandEvents, OutputOffsets, ProviderError, Result};
use corral_provider_http::map_body_error;
use corral_provider_http::reqwest::Response;
use futures::stream::{self, StreamExt as _};

use crate::P;
use crate::logs::LogParser;

/// How long one log stream may stay open before the adapter lets it end (the service attaches
/// again): bounds a connection whatever the edge does.
pub(crate) const STREAM_LIMIT: Duration = Duration::from_secs(60 * 60);
/// How long a log stream may send nothing before it is taken as cut (Blaxel writes a
/// keep-alive every 30 s while the process runs).
pub(crate) const SILENCE_LIMIT: Duration = Duration::from_secs(75);

/// The error for a command Blaxel does not know.
pub(crate) fn unknown(handle: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: P,
        resource: format!("command {handle}"),
    }
}

/// Asks, once a log stream's body ended cleanly, whether the process ended: its exit code
/// (`Some(code)`), or `None` while it runs.
pub(crate) type Ended<'a> =
    Box<dyn FnOnce() -> futures::future::BoxFuture<'a, Result<Option<Option<i32>>>> + Send + 'a>;

/// Where an attach is in a log stream.
struct Follow<'a> {
    resp: Response,
    parser: LogParser,
    /// Bytes of each stream read so far (positions counted from the replay's start).
    read: OutputOffsets,
    /// What Corral already holds: bytes below it are not sent again.
    from: OutputOffsets,
    silence: Duration,
    ended: Option<Ended<'a>>,
}

impl Follow<'_> {
    /// The output events for `chunks`, skipping what Corral holds.
    fn events(&mut self, chunks: Vec<(OutputStream, Vec<u8>)>) -> Vec<Result<CommandEvent>> {
        let truncated = self.parser.truncated();
        let mut out = Vec::new();
        for (stream, mut data) in chunks {
            let at = self.read.of(stream);
            let len = data.len() as u64;
            match stream {
                OutputStream::Stdout => self.read.stdout += len,
                OutputStream::Stderr => self.read.stderr += len,
            }
            if truncated {
                out.push(Ok(CommandEvent::Output {
                    stream,
                    offset: None,
                    data,
                }));
                continue;
            }
            let have = self.from.of(stream);
            if at + len <= have {
                continue;
            }
            let skip = usize::try_from(have.saturating_sub(at)).unwrap_or(usize::MAX);
            data.drain(..skip.min(data.len()));
            out.push(Ok(CommandEvent::Output {
                stream,
                offset: Some(at.max(have)),
                data,
            }));
        }
        out
    }
}

/// The attach's events: the log stream's output from `from` on, then — once its body ended
/// cleanly — the exit event if `ended` says the process ended. A body that broke or went
/// silent for `silence` ends the events without an exit (the service attaches again).
pub(crate) fn attach<'a>(
    resp: Response,
    from: OutputOffsets,
    silence: Duration,
    ended: Ended<'a>,
) -> CommandEvents<'a> {
    let state = Follow {
        resp,
        parser: LogParser::default(),
        read: OutputOffsets::default(),
        from,
        silence,
        ended: Some(ended),
    };
    stream::unfold(state, |mut st| async move {
        let ended = st.ended.take()?;
        match tokio::time::timeout(st.silence, st.resp.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                st.ended = Some(ended);
                let chunks = st.parser.push(&bytes);
                let events = st.events(chunks);
                Some((events, st))
            }
            Ok(Ok(None)) => {
                let chunks = st.parser.finish();
                let mut events = st.events(chunks);
                match ended().await {
                    Ok(Some(exit_code)) => events.push(Ok(CommandEvent::Exit { exit_code })),
                    Ok(None) => {}
                    Err(e) => events.push(Err(e)),
                }
                Some((events, st))
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %map_body_error(P, &e), "a Blaxel log stream broke");
                Some((Vec::new(), st))
            }
            Err(_) => {
                tracing::debug!("a Blaxel log stream went silent; attaching again");
                Some((Vec::new(), st))
            }
        }
    })
    .flat_map(stream::iter)
    .boxed()
}
