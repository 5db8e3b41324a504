//! Panic isolation through the real binary: a handler that panics, in each front door (the
//! API, the E2B door, the console, `/mcp`), answers a 500 in that door's error form with the
//! request's id and a log line, and the connection it came on keeps serving. The handlers
//! panic at panic points (`CORRAL_PANICPOINT`, the `failpoints` feature the test binary is
//! built with; see `corral_service::failpoint`).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::serve::start_with_env;

/// One HTTP/1.1 answer read off a kept-alive connection.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` (head and body, `Connection` left to HTTP/1.1's keep-alive) on `conn` and
/// reads its answer (the server answers these with a `Content-Length`).
fn exchange(conn: &mut BufReader<TcpStream>, request: &str) -> Answer {
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut line = String::new();
    conn.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no status line: {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        conn.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    conn.read_exact(&mut body).unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n")
}

#[test]
fn a_panicking_handler_in_each_front_door_answers_500_and_the_connection_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(&config, "[providers]\nenabled = [\"local\"]\n").unwrap();
    let server = start_with_env(
        &data,
        &config,
        1,
        &[(
            "CORRAL_PANICPOINT",
            "api.get_sandbox,e2b.get_sandbox,console.sign_in,mcp.call",
        )],
    );
    let key = server.first_key();
    let addr = server.base.trim_start_matches("http://").to_owned();
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut conn = BufReader::new(stream);

    let auth = format!("Authorization: Bearer {key}\r\n");
    let mut ids = Vec::new();
    // The API and the E2B door: the JSON envelope, `internal_error`, the request's id.
    for path in ["/v1/sandboxes/sbx_local_missing", "/e2b/sandboxes/anything"] {
        let answer = exchange(&mut conn, &get(path, &auth));
        assert_eq!(answer.status, 500, "{path}: {}", answer.body);
        let body: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(body["error"]["code"], "internal_error", "{path}: {body}");
        let id = answer.header("x-request-id").unwrap().to_owned();
        assert_eq!(body["error"]["requestId"], id.as_str(), "{path}: {body}");
        ids.push(id);
        // The same connection still serves.
        let health = exchange(&mut conn, &get("/healthz", ""));
        assert_eq!(health.status, 200, "{path}: then /healthz: {}", health.body);
    }
    // `/mcp`: the envelope too.
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    );
    let answer = exchange(&mut conn, &request);
    assert_eq!(answer.status, 500, "/mcp: {}", answer.body);
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["error"]["code"], "internal_error", "/mcp: {body}");
    ids.push(answer.header("x-request-id").unwrap().to_owned());
    let health = exchange(&mut conn, &get("/healthz", ""));
    assert_eq!(health.status, 200, "/mcp: then /healthz: {}", health.body);

    // The console: its own error page, with its security headers.
    let answer = exchange(&mut conn, &get("/console/sign-in", "Accept: text/html\r\n"));
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(
        answer
            .header("content-type")
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        answer.headers
    );
    assert!(
        answer.body.contains("Something went wrong"),
        "{}",
        answer.body
    );
    assert!(answer.header("content-security-policy").is_some());
    ids.push(answer.header("x-request-id").unwrap().to_owned());
    let health = exchange(&mut conn, &get("/healthz", ""));
    assert_eq!(
        health.status, 200,
        "console: then /healthz: {}",
        health.body
    );

    // A handler that does not panic is untouched, on the same connection.
    let answer = exchange(&mut conn, &get("/v1/sandboxes?limit=1", &auth));
    assert_eq!(answer.status, 200, "{}", answer.body);

    drop(conn);
    let logs = server.stop();
    for id in &ids {
        assert!(
            logs.lines()
                .any(|l| l.contains("request handler panicked") && l.contains(id.as_str())),
            "no panic line for {id} in the logs"
        );
    }
}
