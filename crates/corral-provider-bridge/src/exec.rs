//! Decoding an exec's `text/event-stream` answer: base64 `stdout`/`stderr` chunks, then one
//! terminal `exit` or `error` event. Memory stays bounded whatever the bridge sends: output is
//! kept up to the call's cap per stream, and one unfinished event may hold at most
//! [`MAX_EVENT_BYTES`].

use std::time::Duration;

use base64::Engine as _;
use corral_domain::Provider;
use corral_provider::{CappedOutput, ExecOutput, ProviderError, Result, excerpt};
use corral_provider_http::sse::{SseEvent, SseParser};

use crate::api::{ErrorBody, ExitEvent, codes};

/// Largest unfinished event (line or data lines) held in memory.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// How the stream ended.
#[derive(Debug)]
enum End {
    Exit(i32),
    Failed(ProviderError),
}

/// An exec answer being read.
#[derive(Debug)]
pub struct ExecStream {
    provider: Provider,
    timeout: Duration,
    parser: SseParser,
    stdout: CappedOutput,
    stderr: CappedOutput,
    end: Option<End>,
}

impl ExecStream {
    /// A stream for a command with deadline `timeout`, keeping `cap` bytes per stream.
    pub fn new(provider: Provider, timeout: Duration, cap: usize) -> Self {
        Self {
            provider,
            timeout,
            parser: SseParser::new(),
            stdout: CappedOutput::new(cap),
            stderr: CappedOutput::new(cap),
            end: None,
        }
    }

    fn protocol(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider,
            message: message.into(),
        }
    }

    /// Consumes one network read (events may be split anywhere); `Ok(true)` once the terminal
    /// event arrived (anything after it is ignored).
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool> {
        for event in self.parser.push(chunk) {
            if self.end.is_some() {
                break;
            }
            self.event(event)?;
        }
        if self.end.is_none() && self.parser.buffered() > MAX_EVENT_BYTES {
            return Err(self.protocol(format!(
                "an exec stream event exceeds {MAX_EVENT_BYTES} bytes"
            )));
        }
        Ok(self.end.is_some())
    }

    fn event(&mut self, event: SseEvent) -> Result<()> {
        let decode = |data: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| self.protocol(format!("an output chunk is not base64: {e}")))
        };
        match event.event.as_str() {
            "stdout" => {
                let bytes = decode(&event.data)?;
                self.stdout.push(&bytes);
            }
            "stderr" => {
                let bytes = decode(&event.data)?;
                self.stderr.push(&bytes);
            }
            "exit" => {
                let exit: ExitEvent = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("malformed exit event: {e}")))?;
                self.end = Some(End::Exit(exit.exit_code));
            }
            "error" => {
                let error = match serde_json::from_str::<ErrorBody>(&event.data) {
                    Ok(body) if body.code == codes::EXEC_TIMEOUT => {
                        ProviderError::CommandTimedOut {
                            after: self.timeout,
                        }
                    }
                    Ok(body) => ProviderError::ServerError {
                        provider: self.provider,
                        // The same failure before the stream opened is a 502.
                        status: 502,
                        message: format!(
                            "the bridge reported `{}` during the command: {}",
                            excerpt(&body.code, 64),
                            excerpt(&body.error, 300)
                        ),
                    },
                    Err(e) => self.protocol(format!("malformed error event: {e}")),
                };
                self.end = Some(End::Failed(error));
            }
            // Comments are skipped by the parser; unknown event types are ignored.
            _ => {}
        }
        Ok(())
    }

    /// The result once the body ended: the exit event's code with the output, the error
    /// event's failure, or — a stream that ended without either — a protocol error (never
    /// exit code 0).
    pub fn finish(self) -> Result<ExecOutput> {
        match self.end {
            Some(End::Exit(exit_code)) => {
                let (stdout, t1) = self.stdout.finish();
                let (stderr, t2) = self.stderr.finish();
                Ok(ExecOutput {
                    stdout,
                    stderr,
                    exit_code,
                    truncated: t1 || t2,
                })
            }
            Some(End::Failed(e)) => Err(e),
            None => Err(ProviderError::Protocol {
                provider: self.provider,
                message: "the exec stream ended without an exit event".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> ExecStream {
        ExecStream::new(Provider::Cloudflare, Duration::from_secs(5), 1024)
    }

    fn feed(s: &mut ExecStream, body: &[u8], step: usize) -> Result<bool> {
        let mut done = false;
        for chunk in body.chunks(step) {
            done = s.push(chunk)?;
        }
        Ok(done)
    }

    const BODY: &[u8] = b"event: stdout\ndata: aGVs\n\n: keep-alive\n\nevent: stderr\r\ndata: ZXJy\r\n\r\nevent: stdout\ndata: bG8K\n\nevent: exit\ndata: {\"exit_code\":3}\n\nevent: stdout\ndata: bm9wZQ==\n\n";

    #[test]
    fn events_split_at_every_byte_decode_to_the_same_output() {
        for step in [1, 2, 3, 7, BODY.len()] {
            let mut s = stream();
            assert!(feed(&mut s, BODY, step).unwrap(), "step {step}");
            let out = s.finish().unwrap();
            assert_eq!(out.stdout, b"hello\n", "step {step}");
            assert_eq!(out.stderr, b"err");
            assert_eq!(out.exit_code, 3);
            assert!(!out.truncated);
        }
    }

    #[test]
    fn a_stream_without_an_exit_event_is_an_error_never_exit_zero() {
        let mut s = stream();
        assert!(!feed(&mut s, b"event: stdout\ndata: aGk=\n\n", 4).unwrap());
        let err = s.finish().unwrap_err();
        assert!(
            matches!(&err, ProviderError::Protocol { message, .. } if message.contains("without an exit event")),
            "{err:?}"
        );
        // A half-written exit event is not an exit either.
        let mut s = stream();
        assert!(!feed(&mut s, b"event: exit\ndata: {\"exit_code\":0}\n", 5).unwrap());
        assert!(s.finish().is_err());
    }

    #[test]
    fn an_error_event_after_output_is_a_failure_and_exec_timeout_is_a_timeout() {
        let mut s = stream();
        let body = b"event: stdout\ndata: aGk=\n\nevent: error\ndata: {\"error\":\"exec failed: reset\",\"code\":\"exec_transport_error\"}\n\n";
        assert!(feed(&mut s, body, 9).unwrap());
        let err = s.finish().unwrap_err();
        assert!(
            matches!(&err, ProviderError::ServerError { message, .. } if message.contains("exec_transport_error") && message.contains("reset")),
            "{err:?}"
        );
        let mut s = stream();
        let body = b"event: error\ndata: {\"error\":\"killed\",\"code\":\"exec_timeout\"}\n\n";
        assert!(feed(&mut s, body, 4).unwrap());
        assert!(matches!(
            s.finish(),
            Err(ProviderError::CommandTimedOut { after }) if after == Duration::from_secs(5)
        ));
    }

    #[test]
    fn output_past_the_cap_is_cut_and_flagged() {
        let mut s = ExecStream::new(Provider::Deno, Duration::from_secs(1), 4);
        let body =
            b"event: stdout\ndata: MDEyMzQ1Njc4OQ==\n\nevent: exit\ndata: {\"exit_code\":0}\n\n";
        assert!(feed(&mut s, body, 64).unwrap());
        let out = s.finish().unwrap();
        assert_eq!(out.stdout, b"0123");
        assert!(out.truncated);
    }

    #[test]
    fn an_endless_event_is_refused_once_it_passes_the_bound() {
        let mut s = stream();
        assert!(!s.push(b"event: stdout\n").unwrap());
        let line = format!("data: {}\n", "A".repeat(64 * 1024));
        let mut refused = None;
        for i in 0..(MAX_EVENT_BYTES / line.len() + 2) {
            if let Err(e) = s.push(line.as_bytes()) {
                refused = Some((i, e));
                break;
            }
        }
        let (_, err) = refused.expect("the bound is enforced");
        assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
        // Also without any newline at all.
        let mut s = stream();
        let blob = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(s.push(&blob).is_err());
    }

    #[test]
    fn bad_base64_and_malformed_terminal_events_are_protocol_errors() {
        for body in [
            &b"event: stdout\ndata: !!!\n\n"[..],
            b"event: exit\ndata: {\"code\":0}\n\n",
            b"event: error\ndata: nope\n\n",
        ] {
            let mut s = stream();
            let result = s.push(body).and_then(|_| stream_finish(s));
            assert!(
                matches!(result, Err(ProviderError::Protocol { .. })),
                "{result:?}"
            );
        }
    }

    fn stream_finish(s: ExecStream) -> Result<bool> {
        s.finish().map(|_| true)
    }
}
