//! Connect's streaming envelope (`application/connect+json`), the server's side: 1 flag
//! byte, a 4-byte big-endian length, the JSON message. The request of a server-streaming
//! call is one envelope; the answer is envelopes ending with an end-of-stream one (flag
//! `0x02`) that carries `{}` or `{"error": {"code", "message"}}`.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::E2bError;

/// Flag of the end-of-stream message.
pub const END_STREAM: u8 = 0x02;
/// Flag of a compressed message (never negotiated by Corral).
const COMPRESSED: u8 = 0x01;

/// One envelope.
pub fn envelope(flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + data.len());
    out.push(flags);
    // Messages are events of at most one output chunk (far below 4 GiB); saturating keeps
    // the frame well-formed even if that ever changed.
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A message envelope of `value`.
pub fn message(value: &Value) -> Vec<u8> {
    envelope(0, value.to_string().as_bytes())
}

/// The end of a stream: success, or `error` in Connect's form.
pub fn end(error: Option<&E2bError>) -> Vec<u8> {
    let trailer = match error {
        None => json!({}),
        Some(e) => json!({"error": {"code": e.connect_code(), "message": e.to_string()}}),
    };
    envelope(END_STREAM, trailer.to_string().as_bytes())
}

/// The one request message of a server-streaming call.
pub fn request<T: DeserializeOwned>(body: &[u8]) -> Result<T, E2bError> {
    let malformed = |why: &str| E2bError::invalid(format!("malformed streaming request: {why}"));
    let (head, rest) = body
        .split_first_chunk::<5>()
        .ok_or_else(|| malformed("shorter than an envelope header"))?;
    let [flags, l0, l1, l2, l3] = *head;
    if flags & COMPRESSED != 0 {
        return Err(malformed("compressed messages are not accepted"));
    }
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    if flags & END_STREAM != 0 || rest.len() != len {
        return Err(malformed("expected exactly one message"));
    }
    serde_json::from_slice(rest).map_err(|e| malformed(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_exactly_one_uncompressed_envelope() {
        let one = message(&json!({"process": {"cmd": "ls"}}));
        let v: Value = request(&one).unwrap();
        assert_eq!(v["process"]["cmd"], "ls");
        let mut two = one.clone();
        two.extend_from_slice(&one);
        assert!(request::<Value>(&two).is_err());
        assert!(request::<Value>(&one[..one.len() - 1]).is_err());
        assert!(request::<Value>(&[1, 0, 0, 0, 2, b'{', b'}']).is_err());
        assert!(request::<Value>(&end(None)).is_err());
        assert!(request::<Value>(&[]).is_err());
    }

    #[test]
    fn the_end_carries_the_error_in_connects_form() {
        let e = E2bError::not_found("process with pid 7 not found");
        let bytes = end(Some(&e));
        assert_eq!(bytes[0], END_STREAM);
        let v: Value = serde_json::from_slice(&bytes[5..]).unwrap();
        assert_eq!(v["error"]["code"], "not_found");
        assert_eq!(
            &bytes[1..5],
            &u32::try_from(bytes.len() - 5).unwrap().to_be_bytes()
        );
    }

    proptest::proptest! {
        #[test]
        fn no_body_makes_the_parser_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = request::<Value>(&body);
        }
    }
}
