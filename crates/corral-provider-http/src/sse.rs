//! An incremental `text/event-stream` parser (the subset providers use: `event`, `data`, `id`,
//! comments; multi-line data joined with `\n`).

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
    buf: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes buffered but not yet forming a complete line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Bytes held for the event in progress: the unfinished line plus the data lines read so
    /// far. A caller bounds memory by refusing a stream once this passes its limit.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.current.data.len()
    }

    /// Consumes `chunk`, returning every event it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line).into_owned();
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
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f.to_owned(), v.strip_prefix(' ').unwrap_or(v).to_owned()),
                None => (line, String::new()),
            };
            match field.as_str() {
                "event" => self.current.event = value,
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(&value);
                    self.has_data = true;
                }
                "id" => self.current.id = Some(value),
                _ => {}
            }
        }
        events
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
