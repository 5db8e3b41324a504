//! Connection exhaustion without a key (issue 22, finding 3), through the real binary: a
//! seeded burst of connections from one address, each trickling a body to password sign-in.
//! Connections past the per-address cap are closed at once; the ones admitted are cut at the
//! unauthenticated body deadline with a `request_timeout` envelope; `/healthz` from another
//! address answers meanwhile; afterwards the server's open-connection count is back down.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

use crate::serve::{Server, start};

/// The per-address cap the server runs with.
const PER_ADDRESS: usize = 6;
/// The unauthenticated body deadline the server runs with.
const BODY_SECONDS: u64 = 2;

/// A small seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn server(tmp: &tempfile::TempDir) -> Server {
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"local\"]\n[http]\nmax_connections_per_address = \
             {PER_ADDRESS}\nunauthenticated_body_seconds = {BODY_SECONDS}\n"
        ),
    )
    .unwrap();
    start(&data, &config, 1)
}

fn addr(server: &Server) -> SocketAddr {
    server.base.trim_start_matches("http://").parse().unwrap()
}

/// A connection from `127.0.0.<n>`.
async fn connect_from(n: u8, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(IpAddr::from([127, 0, 0, n]), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads until the server closes the connection (a reset counts as closed), at most `limit`;
/// what arrived, and whether it closed.
async fn read_until_closed(conn: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return (got, false),
            Ok(Ok(0) | Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// One raw `GET` from `127.0.0.<n>`: the status and the body.
async fn get_from(n: u8, to: SocketAddr, path: &str) -> (u16, String) {
    let mut conn = connect_from(n, to).await;
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: corral\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let (raw, closed) = read_until_closed(&mut conn, Duration::from_secs(5)).await;
    assert!(closed, "{}", String::from_utf8_lossy(&raw));
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A `corral_http_connections_*` value of `/metrics`, asked from `127.0.0.<n>`.
async fn gauge(n: u8, to: SocketAddr, name: &str) -> u64 {
    let (status, body) = get_from(n, to, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_trickled_bodies_from_one_address_is_capped_and_cut_and_healthz_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server(&tmp);
    let to = addr(&server);
    let mut rng = Rng(0x5eed_2203);
    // The attacker: PER_ADDRESS admitted connections, then 4 to 11 more from the same address.
    let extra = 4 + (rng.next() % 8) as usize;
    let head = "POST /v1/control/sign-in/password HTTP/1.1\r\nhost: corral\r\n\
                content-type: application/json\r\ncontent-length: 4096\r\n\r\n{\"email\":\"";
    let mut admitted = Vec::new();
    for _ in 0..PER_ADDRESS {
        let mut conn = connect_from(2, to).await;
        conn.write_all(head.as_bytes()).await.unwrap();
        admitted.push(conn);
    }
    // Each admitted connection trickles a byte every 300 to 600 ms: never idle long enough
    // for the idle deadline, never finishing.
    let started = Instant::now();
    let trickles: Vec<_> = admitted
        .into_iter()
        .map(|mut conn| {
            let pause = Duration::from_millis(300 + rng.next() % 300);
            tokio::spawn(async move {
                let mut raw = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    tokio::select! {
                        r = conn.read(&mut buf) => match r {
                            Ok(0) | Err(_) => break,
                            Ok(n) => raw.extend_from_slice(&buf[..n]),
                        },
                        () = tokio::time::sleep(pause) => {
                            if conn.write_all(b"a").await.is_err() { break; }
                        }
                    }
                    if started.elapsed() > Duration::from_secs(15) {
                        break;
                    }
                }
                (raw, started.elapsed())
            })
        })
        .collect();
    // Let the server count them, then every further connection from that address is closed
    // at once, before a byte is read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..extra {
        let mut conn = connect_from(2, to).await;
        let at = Instant::now();
        let _ = conn.write_all(head.as_bytes()).await;
        let (raw, closed) = read_until_closed(&mut conn, Duration::from_secs(1)).await;
        assert!(closed && raw.is_empty(), "refused at accept: {raw:?}");
        assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
    }
    // Another address (the health checker) is answered at once during the burst.
    for _ in 0..3 {
        let at = Instant::now();
        let (status, body) = get_from(1, to, "/healthz").await;
        assert_eq!(status, 200, "{body}");
        assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
    }
    let refused = gauge(1, to, "corral_http_connections_refused_total").await;
    assert!(refused >= extra as u64, "{refused} < {extra}");
    // The admitted ones are cut at the body deadline with the envelope, not held for the
    // request deadline (60 s).
    for t in trickles {
        let (raw, elapsed) = t.await.unwrap();
        let text = String::from_utf8_lossy(&raw);
        // `request_timeout` is v3's 504.
        assert!(text.starts_with("HTTP/1.1 504"), "{text}");
        assert!(text.contains("\"request_timeout\""), "{text}");
        assert!(
            elapsed >= Duration::from_millis(BODY_SECONDS * 1000 - 300)
                && elapsed < Duration::from_secs(BODY_SECONDS + 3),
            "{elapsed:?}"
        );
    }
    // Afterwards the count is back down (only the asking connection open), and the address
    // is admitted again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let open = gauge(1, to, "corral_http_connections_open").await;
        if open <= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} connections still open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = get_from(2, to, "/healthz").await;
    assert_eq!(status, 200);
}
