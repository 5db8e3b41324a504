//! An incremental `text/event-stream` parser (the subset providers use: `event`, `data`, `id`,
//! comments; multi-line data joined with `\n`).
//!
//! Lines end as the WHATWG grammar says: CRLF, LF or a lone CR (a CR at the end of one chunk
//! and an LF at the start of the next are one line end), and a byte-order mark before the
//! first line is dropped, so any split of a stream into chunks yields the same events. Each
//! byte is scanned once, whatever the chunking.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// Feed it bytes as they arrive; it returns the events completed so far.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The unfinished line.
    buf: Vec<u8>,
    current: SseEvent,
    has_data: bool,
    /// The last byte seen was a CR ending a line: an LF right after it ends the same line.
    after_cr: bool,
    /// A line was completed (the byte-order mark is only dropped before the first).
    seen_line: bool,
}

const BOM: &[u8] = b"\xef\xbb\xbf";

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes buffered but not yet forming a complete line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Bytes held for the event in progress: the unfinished line plus the fields read so far
    /// (data lines, event type, id). A caller bounds memory by refusing a stream once this
    /// passes its limit.
    pub fn buffered(&self) -> usize {
        self.buf.len()
            + self.current.data.len()
            + self.current.event.len()
            + self.current.id.as_ref().map_or(0, String::len)
    }

    /// Consumes `chunk`, returning every event it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.buf.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.buf);
            self.line(&line, &mut events);
            // Keep the allocation for the next line.
            self.buf = line;
            self.buf.clear();
            let cr = rest[pos] == b'\r';
            rest = &rest[pos + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.buf.extend_from_slice(rest);
        events
    }

    /// Handles one complete line (without its line end).
    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) {
        let line = if self.seen_line {
            line
        } else {
            self.seen_line = true;
            line.strip_prefix(BOM).unwrap_or(line)
        };
        if line.is_empty() {
            if self.has_data {
                let mut ev = std::mem::take(&mut self.current);
                if ev.event.is_empty() {
                    ev.event = "message".into();
                }
                events.push(ev);
            }
            self.current = SseEvent::default();
            self.has_data = false;
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.current.event = value.into_owned(),
            b"data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&value);
                self.has_data = true;
            }
            b"id" => self.current.id = Some(value.into_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let mut p = SseParser::new();
        assert!(p.push(b"event: stdout\ndata: hel").is_empty());
        let evs = p.push(b"lo\ndata: world\n\n: comment\ndata: x\r\n\r\n");
        assert_eq!(
            evs,
            [
                SseEvent {
                    event: "stdout".into(),
                    data: "hello\nworld".into(),
                    id: None
                },
                SseEvent {
                    event: "message".into(),
                    data: "x".into(),
                    id: None
                },
            ]
        );
        assert_eq!(p.pending(), 0);
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn buffered_counts_data_lines_of_an_unfinished_event() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: aaaa\ndata: bbbb\nda").is_empty());
        assert_eq!(p.pending(), 2);
        assert_eq!(p.buffered(), 2 + "aaaa\nbbbb".len());
    }
}
