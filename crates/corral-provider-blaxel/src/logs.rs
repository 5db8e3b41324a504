//! Blaxel's process log stream, `GET /process/{identifier}/logs/stream`, read back into the
//! process's stdout and stderr bytes.
//!
//! The description says "one line per log, prefixed with `stdout:` or `stderr:`"; the sandbox
//! API (`sandbox-api/src/handler/process/process.go`) writes, on one `text/plain` body:
//!
//! - first the backlog, replayed from the combined log file a line at a time: each line as
//!   `stdout:<line>\n` (a last line still without its newline gets one), and when the file
//!   outgrew its cap, first `stdout:[... truncated, see the process log file for the full
//!   output ...]\n`;
//! - then every chunk the process writes (up to 4 KiB, read every 50 ms) as `stdout:` or
//!   `stderr:` followed by the chunk as it is: several lines, or part of one, under one prefix;
//! - `[keepalive]\n` every 30 s while the process runs, and `\n[Process is being gracefully
//!   terminated]\n` or `\n[Process is being forcefully killed]\n` when it is stopped or killed,
//!   written between chunks without a prefix.
//!
//! So a prefix starts a chunk wherever it appears (after a chunk that ended mid-line it is in
//! the middle of a line), and bytes up to the next prefix belong to that chunk's stream. The
//! parser reads it that way: it drops prefixes, keep-alives and notices wherever they appear
//! (except as the first byte of a chunk, which is always the chunk's own), and keeps every
//! other byte, bytes that are not UTF-8 included. What it cannot tell apart: output that
//! itself contains `stdout:`, `stderr:` or `[keepalive]\n` (read as Blaxel's markers, as
//! Blaxel's own SDK reads them at a line start), and the leading newline of a notice that
//! follows a chunk ending mid-line (kept as output). Both read the same way on every replay,
//! so positions counted from the start stay consistent between attaches.

use corral_domain::OutputStream;

const STDOUT: &[u8] = b"stdout:";
const STDERR: &[u8] = b"stderr:";
const KEEPALIVE: &[u8] = b"[keepalive]\n";
const STOPPING: &[u8] = b"\n[Process is being gracefully terminated]\n";
const KILLING: &[u8] = b"\n[Process is being forcefully killed]\n";
/// What a replay starts with when Blaxel released the head of the log (the positions of
/// what follows are then unknown).
pub(crate) const TRUNCATED: &[u8] =
    b"[... truncated, see the process log file for the full output ...]\n";

/// One marker of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Prefix(OutputStream),
    Ignored,
}

/// Feed it the body as it arrives; it returns the output bytes per stream.
#[derive(Debug)]
pub(crate) struct LogParser {
    /// Bytes that may still turn out to be a marker.
    held: Vec<u8>,
    /// The stream of the current chunk.
    stream: OutputStream,
    /// The next byte is the first of a chunk (always output).
    chunk_start: bool,
    /// The last byte taken ended a line (a notice may follow).
    line_start: bool,
    /// No output byte has been taken yet (the truncation marker may follow).
    at_start: bool,
    /// The replay began with Blaxel's truncation marker.
    truncated: bool,
}

impl Default for LogParser {
    fn default() -> Self {
        Self {
            held: Vec::new(),
            stream: OutputStream::Stdout,
            chunk_start: false,
            line_start: true,
            at_start: true,
            truncated: false,
        }
    }
}

/// What `bytes` is against `token`: all of it (`Some(true)`), a proper prefix of it
/// (`Some(false)`), or neither.
fn against(bytes: &[u8], token: &[u8]) -> Option<bool> {
    if bytes.starts_with(token) {
        Some(true)
    } else if token.starts_with(bytes) {
        Some(false)
    } else {
        None
    }
}

impl LogParser {
    /// Whether the replay began with Blaxel's truncation marker: what follows does not start
    /// at byte 0 of its stream.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// Consumes `chunk`; returns the output it completes, in order, each run of one stream
    /// as one piece.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<(OutputStream, Vec<u8>)> {
        self.held.extend_from_slice(chunk);
        self.drain(false)
    }

    /// The end of the body: bytes held as a possible marker were output after all.
    pub(crate) fn finish(&mut self) -> Vec<(OutputStream, Vec<u8>)> {
        self.drain(true)
    }

    /// The marker `rest` starts with: `Some(Some((token, len)))`, `Some(None)` when `rest`
    /// may still become one (wait for more), `None` when it is output.
    fn marker(&self, rest: &[u8]) -> Option<Option<(Token, usize)>> {
        let mut candidates: Vec<(&[u8], Token)> = vec![
            (STDOUT, Token::Prefix(OutputStream::Stdout)),
            (STDERR, Token::Prefix(OutputStream::Stderr)),
            (KEEPALIVE, Token::Ignored),
        ];
        if self.line_start {
            candidates.push((STOPPING, Token::Ignored));
            candidates.push((KILLING, Token::Ignored));
        }
        let mut waiting = false;
        for (bytes, token) in candidates {
            match against(rest, bytes) {
                Some(true) => return Some(Some((token, bytes.len()))),
                Some(false) => waiting = true,
                None => {}
            }
        }
        waiting.then_some(None)
    }

    fn drain(&mut self, end: bool) -> Vec<(OutputStream, Vec<u8>)> {
        let mut out: Vec<(OutputStream, Vec<u8>)> = Vec::new();
        let held = std::mem::take(&mut self.held);
        let mut i = 0;
        while i < held.len() {
            let rest = &held[i..];
            if self.at_start && self.stream == OutputStream::Stdout {
                match against(rest, TRUNCATED) {
                    Some(true) => {
                        self.truncated = true;
                        self.at_start = false;
                        self.chunk_start = false;
                        self.line_start = true;
                        i += TRUNCATED.len();
                        continue;
                    }
                    Some(false) if !end && self.chunk_start => {
                        self.held = rest.to_vec();
                        return out;
                    }
                    _ => {}
                }
            }
            if !self.chunk_start {
                match self.marker(rest) {
                    Some(Some((token, len))) => {
                        match token {
                            Token::Prefix(stream) => {
                                self.stream = stream;
                                self.chunk_start = true;
                            }
                            Token::Ignored => self.line_start = true,
                        }
                        i += len;
                        continue;
                    }
                    Some(None) if !end => {
                        self.held = rest.to_vec();
                        return out;
                    }
                    _ => {}
                }
            }
            let byte = held[i];
            match out.last_mut() {
                Some((s, data)) if *s == self.stream => data.push(byte),
                _ => out.push((self.stream, vec![byte])),
            }
            self.chunk_start = false;
            self.at_start = false;
            self.line_start = byte == b'\n';
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pieces: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        let mut p = LogParser::default();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut take = |chunks: Vec<(OutputStream, Vec<u8>)>| {
            for (s, d) in chunks {
                match s {
                    OutputStream::Stdout => stdout.extend(d),
                    OutputStream::Stderr => stderr.extend(d),
                }
            }
        };
        for piece in pieces {
            take(p.push(piece));
        }
        take(p.finish());
        (stdout, stderr)
    }

    /// Every split of `wire` into two reads parses as the whole does.
    fn every_split(wire: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let whole = parse(&[wire]);
        for at in 0..=wire.len() {
            assert_eq!(parse(&[&wire[..at], &wire[at..]]), whole, "split at {at}");
        }
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(parse(&bytewise), whole, "byte by byte");
        whole
    }

    #[test]
    fn a_backlog_of_prefixed_lines_and_multi_line_chunks_read_back_the_same_bytes() {
        let backlog = every_split(b"stdout:a\nstdout:b\nstderr:oops\nstdout:c\n");
        let live = every_split(b"stdout:a\nb\nstderr:oops\nstdout:c\n");
        assert_eq!(backlog, (b"a\nb\nc\n".to_vec(), b"oops\n".to_vec()));
        assert_eq!(live, backlog);
    }

    #[test]
    fn a_chunk_that_ends_mid_line_is_followed_by_a_prefix_inside_the_line() {
        let (out, err) = every_split(b"stdout:10%\rstdout:20%\rstderr:warn\nstdout:done\n");
        assert_eq!(out, b"10%\r20%\rdone\n");
        assert_eq!(err, b"warn\n");
    }

    #[test]
    fn keepalives_and_stop_notices_are_not_output() {
        let (out, err) = every_split(
            b"stdout:ready\n[keepalive]\n\n[Process is being gracefully terminated]\n\
              stdout:bye\n\n[Process is being forcefully killed]\n",
        );
        assert_eq!(out, b"ready\nbye\n");
        assert!(err.is_empty());
        // After a chunk that ended mid-line, a keep-alive is still dropped.
        assert_eq!(
            every_split(b"stdout:50%[keepalive]\nstdout:!\n").0,
            b"50%!\n"
        );
    }

    #[test]
    fn blank_lines_and_bytes_that_are_not_utf8_are_output() {
        let (out, _) = every_split(b"stdout:\xff\x00A\n\n\nstdout:\n");
        assert_eq!(out, b"\xff\x00A\n\n\n\n");
        // The first byte of a chunk is its own, even when it looks like a marker.
        assert_eq!(every_split(b"stdout:stdout:x\n").0, b"stdout:x\n");
        assert_eq!(every_split(b"stdout:[keepalive]\n").0, b"[keepalive]\n");
    }

    #[test]
    fn a_marker_cut_short_by_the_end_of_the_body_is_output() {
        assert_eq!(parse(&[b"stdout:yes", b""]).0, b"yes");
        assert_eq!(parse(&[b"stdout:ab\nstd"]).0, b"ab\nstd");
        assert_eq!(parse(&[b"stdout:ab\n\n[Proc"]).0, b"ab\n\n[Proc");
    }

    #[test]
    fn a_replay_of_a_truncated_log_says_so_and_drops_the_marker() {
        let mut wire = b"stdout:".to_vec();
        wire.extend_from_slice(TRUNCATED);
        wire.extend_from_slice(b"stdout:tail\n");
        for at in 0..=wire.len() {
            let mut p = LogParser::default();
            let mut got = p.push(&wire[..at]);
            got.extend(p.push(&wire[at..]));
            got.extend(p.finish());
            assert!(p.truncated(), "split at {at}");
            let out: Vec<u8> = got.into_iter().flat_map(|(_, d)| d).collect();
            assert_eq!(out, b"tail\n", "split at {at}");
        }
        let mut p = LogParser::default();
        p.push(b"stdout:[... not the marker\n");
        assert!(!p.truncated());
    }
}
