//! Request heads over the limits, or malformed, through the real binary over raw TCP: the JSON
//! envelope with a request id, never a bare status (issue 14); requests before them on the
//! connection answered first; bodies framed so that nothing after them is misread.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::serve::{Server, start};

fn server(tmp: &tempfile::TempDir) -> Server {
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(&config, "[local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n").unwrap();
    start(&data, &config, 1)
}

/// Writes `bytes` in one write and reads until the server closes the connection.
fn exchange(server: &Server, bytes: &[u8]) -> Vec<u8> {
    let addr = server.base.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.write_all(bytes).unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("{e}; read so far: {}", String::from_utf8_lossy(&got)));
    got
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The envelope of `status`, `invalid_request`, with the request id of the header.
    fn expect_envelope(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.header("content-type")
                .is_some_and(|v| v.starts_with("application/json")),
            "{self:?}"
        );
        let v = self.json();
        assert_eq!(v["error"]["code"], "invalid_request", "{v}");
        let id = self.header("x-request-id").expect("a request id header");
        assert!(id.starts_with("req_"), "{id}");
        assert_eq!(v["error"]["requestId"], id, "{v}");
        v
    }
}

/// Splits what a connection received into responses (bodies by Content-Length).
fn responses(mut raw: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head end in {}", String::from_utf8_lossy(raw)));
        let head = std::str::from_utf8(&raw[..end]).unwrap();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.trim().to_owned(), v.trim().to_owned())
            })
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let body_start = end + 4;
        out.push(Response {
            status,
            headers,
            body: raw[body_start..body_start + len].to_vec(),
        });
        raw = &raw[body_start + len..];
    }
    out
}

fn many_fields(n: usize) -> String {
    (0..n).map(|i| format!("x-field-{i}: {i}\r\n")).collect()
}

fn only(raw: &[u8]) -> Response {
    let mut all = responses(raw);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

#[test]
fn a_head_with_100_header_fields_is_431_with_the_envelope() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: corral\r\n{}\r\n",
        many_fields(100)
    );
    let resp = only(&exchange(&server, head.as_bytes()));
    let v = resp.expect_envelope(431);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("96 header fields"), "{message}");
    assert_eq!(resp.header("connection"), Some("close"), "{resp:?}");
}

#[test]
fn a_100_kib_header_field_is_431_with_the_envelope() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: corral\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let resp = only(&exchange(&server, head.as_bytes()));
    let v = resp.expect_envelope(431);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("65536 bytes"), "{message}");
}

#[test]
fn a_malformed_head_is_400_with_the_envelope() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    // A space inside a field name: `httparse` rejects the head.
    let head = "GET /healthz HTTP/1.1\r\nhost: corral\r\nbad name: x\r\n\r\n";
    let resp = only(&exchange(&server, head.as_bytes()));
    let v = resp.expect_envelope(400);
    assert_eq!(v["error"]["message"], "malformed request head", "{v}");
}

#[test]
fn requests_pipelined_before_an_oversized_head_are_answered_first() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let bytes = format!(
        "GET /healthz HTTP/1.1\r\nhost: corral\r\n\r\n\
         GET /healthz HTTP/1.1\r\nhost: corral\r\n{}\r\n\
         GET /healthz HTTP/1.1\r\nhost: corral\r\n\r\n",
        many_fields(100)
    );
    let all = responses(&exchange(&server, bytes.as_bytes()));
    assert_eq!(
        all.len(),
        2,
        "nothing after the refused head is answered: {all:?}"
    );
    assert_eq!(all[0].status, 200, "{all:?}");
    assert_eq!(all[0].json()["status"], "ok");
    all[1].expect_envelope(431);
}

#[test]
fn a_chunked_body_is_framed_so_the_requests_after_it_are_read_as_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    // Chunk data that would be an oversized head if it were read as one, chunk extensions
    // and a trailer field.
    let data = format!("GET / HTTP/1.1\r\n{}\r\n", many_fields(100));
    let body = format!(
        "{:x};ext=1\r\n{data}\r\n3\r\nabc\r\n0\r\nx-trailer: t\r\n\r\n",
        data.len()
    );
    let bytes = format!(
        "POST /healthz HTTP/1.1\r\nhost: corral\r\ntransfer-encoding: chunked\r\n\r\n{body}\
         GET /healthz HTTP/1.1\r\nhost: corral\r\n\r\n\
         GET /healthz HTTP/1.1\r\nhost: corral\r\nx-big: {}\r\n\r\n",
        "b".repeat(70 * 1024)
    );
    let all = responses(&exchange(&server, bytes.as_bytes()));
    assert_eq!(all.len(), 3, "{all:?}");
    all[0].expect_envelope(405);
    assert_eq!(all[1].status, 200, "{all:?}");
    assert_eq!(all[1].json()["status"], "ok");
    all[2].expect_envelope(431);
}

#[test]
fn a_forged_refusal_header_is_an_ordinary_header() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    for forged in ["wrong", "head-too-large wrong", "malformed-head "] {
        let head = format!(
            "GET /healthz HTTP/1.1\r\nhost: corral\r\nx-corral-refused: {forged}\r\n\
             connection: close\r\n\r\n"
        );
        let resp = only(&exchange(&server, head.as_bytes()));
        assert_eq!(resp.status, 200, "{forged}: {resp:?}");
        assert_eq!(resp.json()["status"], "ok");
    }
}

/// Issue 22: a lower-case `connect` is an ordinary (unknown) method, not a tunnel, so the
/// guard stays on: the oversized head after it still gets the guard's 431.
#[test]
fn a_lower_case_connect_does_not_switch_the_guard_off() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let bytes = format!(
        "connect /healthz HTTP/1.1\r\nhost: corral\r\n\r\n\
         GET /healthz HTTP/1.1\r\nhost: corral\r\n{}\r\n",
        many_fields(100)
    );
    let all = responses(&exchange(&server, bytes.as_bytes()));
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[0].status == 404 || all[0].status == 405, "{all:?}");
    let v = all[1].expect_envelope(431);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("96 header fields"),
        "{v}"
    );
}

/// Issue 22: only a WebSocket upgrade passes the guard through; `Upgrade: h2c` is answered
/// as a plain request and the oversized head after it still gets the guard's 431.
#[test]
fn a_non_websocket_upgrade_does_not_switch_the_guard_off() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let bytes = format!(
        "GET /healthz HTTP/1.1\r\nhost: corral\r\nupgrade: h2c\r\n\r\n\
         GET /healthz HTTP/1.1\r\nhost: corral\r\nx-big: {}\r\n\r\n",
        "b".repeat(70 * 1024)
    );
    let all = responses(&exchange(&server, bytes.as_bytes()));
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0].status, 200, "{all:?}");
    let v = all[1].expect_envelope(431);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("65536 bytes"),
        "{v}"
    );
}

/// Issue 22 (RFC 9112 §9.6): nothing pipelined after `Connection: close`, or after an
/// HTTP/1.0 request without keep-alive, is executed: one answer, and the request after it
/// never reaches the app (`/metrics` counts no `openapi` operation).
#[test]
fn requests_pipelined_after_connection_close_are_not_executed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    for first in [
        "GET /healthz HTTP/1.1\r\nhost: corral\r\nconnection: close\r\n\r\n",
        "GET /healthz HTTP/1.0\r\nhost: corral\r\n\r\n",
    ] {
        let bytes = format!("{first}GET /v1/openapi.json HTTP/1.1\r\nhost: corral\r\n\r\n");
        let all = responses(&exchange(&server, bytes.as_bytes()));
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].status, 200, "{all:?}");
        assert_eq!(all[0].json()["status"], "ok");
    }
    let metrics = exchange(
        &server,
        b"GET /metrics HTTP/1.1\r\nhost: corral\r\nconnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&metrics);
    assert!(text.contains("operation=\"healthz\""), "{text}");
    assert!(!text.contains("operation=\"openapi\""), "{text}");
}
