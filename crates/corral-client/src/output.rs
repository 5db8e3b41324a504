//! A command's output as a stream of events that reconnects by itself.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use corral_domain::OutputEvent;
use corral_domain::sse::SseParser;
use futures::stream::{BoxStream, Stream, StreamExt as _};
use reqwest::{Method, Response};

use crate::{Client, Error, Repeat, Result, RetryPolicy};

/// The events of a command's output after a starting point, to the exit event. When the
/// connection drops it reconnects from the last event seen (`Last-Event-ID`), so no event is
/// lost or repeated; it gives up after the retry policy's attempts fail in a row without an
/// event in between.
pub struct OutputStream {
    inner: BoxStream<'static, Result<OutputEvent>>,
}

impl std::fmt::Debug for OutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStream").finish_non_exhaustive()
    }
}

struct State {
    client: Client,
    path: String,
    /// The last event handed out (0: none).
    after: u64,
    /// The open connection, if any.
    resp: Option<Response>,
    parser: SseParser,
    ready: VecDeque<OutputEvent>,
    /// Connection failures since the last event.
    failures: u32,
    done: bool,
}

impl OutputStream {
    pub(crate) fn new(client: Client, path: String, after: u64) -> Self {
        let state = State {
            client,
            path,
            after,
            resp: None,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            failures: 0,
            done: false,
        };
        Self {
            inner: futures::stream::unfold(state, next).boxed(),
        }
    }
}

impl Stream for OutputStream {
    type Item = Result<OutputEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

async fn next(mut st: State) -> Option<(Result<OutputEvent>, State)> {
    loop {
        if let Some(e) = st.ready.pop_front() {
            st.after = e.seq();
            st.failures = 0;
            if matches!(e, OutputEvent::Exit { .. }) {
                st.done = true;
                st.resp = None;
            }
            return Some((Ok(e), st));
        }
        if st.done {
            return None;
        }
        if let Err(e) = read_some(&mut st).await {
            st.resp = None;
            st.failures += 1;
            let policy = st.client.retry;
            if !e.is_retryable() || st.failures >= policy.attempts.max(1) {
                st.done = true;
                return Some((Err(e), st));
            }
            tokio::time::sleep(policy.backoff(st.failures, None)).await;
        }
    }
}

/// Connects when needed (from the last event seen) and reads until at least one event is
/// ready or the server ends the connection.
async fn read_some(st: &mut State) -> Result<()> {
    let resp = match &mut st.resp {
        Some(resp) => resp,
        None => {
            let make = || {
                st.client
                    .request(Method::GET, &st.path)
                    .header("accept", "text/event-stream")
                    .header("last-event-id", st.after.to_string())
            };
            let resp = crate::retry::send(&RetryPolicy::none(), Repeat::Safe, make).await?;
            st.parser = SseParser::new();
            st.resp.insert(resp)
        }
    };
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => {
                // The server ended the stream (a restart, its own time limit): reconnect.
                st.resp = None;
                return Ok(());
            }
            Err(e) => return Err(Error::transport(&e)),
        };
        for ev in st.parser.push(&chunk) {
            if ev.data.is_empty() {
                continue;
            }
            let event: OutputEvent = serde_json::from_str(&ev.data).map_err(|e| Error::Decode {
                message: format!("an output event is not what the API documents: {e}"),
            })?;
            // A server that honours Last-Event-ID never sends these; skipping costs nothing.
            if event.seq() > st.after {
                st.ready.push_back(event);
            }
        }
        if !st.ready.is_empty() {
            return Ok(());
        }
    }
}
