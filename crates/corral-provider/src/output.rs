/// A stream buffer that keeps the first `cap` bytes and remembers whether more arrived.
#[derive(Debug, Clone)]
pub struct CappedOutput {
    buf: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl CappedOutput {
    /// An empty buffer keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            truncated: false,
        }
    }

    /// Appends a chunk, dropping whatever exceeds the cap.
    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.buf.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// Whether anything was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes and the truncation flag.
    pub fn finish(self) -> (Vec<u8>, bool) {
        (self.buf, self.truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_flags_the_rest() {
        let mut out = CappedOutput::new(5);
        out.push(b"abc");
        assert!(!out.truncated());
        out.push(b"defg");
        out.push(b"h");
        assert_eq!(out.finish(), (b"abcde".to_vec(), true));
        let mut exact = CappedOutput::new(3);
        exact.push(b"abc");
        assert_eq!(exact.finish(), (b"abc".to_vec(), false));
    }
}
