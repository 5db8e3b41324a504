//! The Connect streaming envelope (`application/connect+json`): 1 flag byte, a 4-byte
//! big-endian length, then that many bytes of JSON. Flag `0x02` marks the end-of-stream
//! message; flag `0x01` (compression) is never negotiated by Corral and is refused.

use bytes::{Buf, Bytes, BytesMut};
use snafu::Snafu;

/// Flag of the end-of-stream message.
pub const END_STREAM: u8 = 0x02;
/// Flag of a compressed message.
const COMPRESSED: u8 = 0x01;
/// Envelope header size.
const HEADER: usize = 5;

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Flags byte.
    pub flags: u8,
    /// The message.
    pub data: Bytes,
}

impl Envelope {
    /// Whether this is the end-of-stream message.
    pub fn is_end_stream(&self) -> bool {
        self.flags & END_STREAM != 0
    }
}

/// Encodes one envelope.
pub fn encode(flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.push(flags);
    // Messages are far below 4 GiB: Corral's are requests of at most a command's size.
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
pub enum DecodeError {
    /// A message announced more bytes than the cap.
    #[snafu(display("a stream message of {len} bytes exceeds the cap of {cap}"))]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// A compressed message, which Corral never asked for.
    #[snafu(display("a compressed stream message was not asked for"))]
    Compressed,
}

/// Incremental decoder: push chunks as they arrive (an envelope may be split across any
/// number of chunks, or several may share one), pull whole envelopes.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max_message: usize,
}

impl Decoder {
    /// A decoder refusing messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max_message,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole envelope, `Ok(None)` until one is complete.
    pub fn next_envelope(&mut self) -> Result<Option<Envelope>, DecodeError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > self.max_message {
            return Err(DecodeError::TooLarge {
                len,
                cap: self.max_message,
            });
        }
        if flags & COMPRESSED != 0 {
            return Err(DecodeError::Compressed);
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        self.buf.advance(HEADER);
        let data = self.buf.split_to(len).freeze();
        Ok(Some(Envelope { flags, data }))
    }

    /// Bytes received that do not yet form a whole envelope.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_split_across_chunks_and_packed_together_decode() {
        let mut stream = encode(0, br#"{"a":1}"#);
        stream.extend(encode(0, br#"{"b":2}"#));
        stream.extend(encode(END_STREAM, b"{}"));
        for size in 1..=stream.len() {
            let mut d = Decoder::new(1024);
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                d.push(chunk);
                while let Some(e) = d.next_envelope().unwrap() {
                    got.push(e);
                }
            }
            assert_eq!(got.len(), 3, "chunk size {size}");
            assert_eq!(got[0].data.as_ref(), br#"{"a":1}"#);
            assert_eq!(got[1].data.as_ref(), br#"{"b":2}"#);
            assert!(!got[1].is_end_stream());
            assert!(got[2].is_end_stream());
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused_before_buffering() {
        let mut d = Decoder::new(4);
        d.push(&[0, 0, 0, 0, 5]);
        assert_eq!(
            d.next_envelope(),
            Err(DecodeError::TooLarge { len: 5, cap: 4 })
        );
        let mut d = Decoder::new(4);
        d.push(&encode(COMPRESSED, b"x"));
        assert_eq!(d.next_envelope(), Err(DecodeError::Compressed));
    }
}
