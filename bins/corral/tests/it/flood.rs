//! A connection flood from many addresses through the real binary (issue 34, finding 3): 40
//! loopback addresses each hold 110 connections, under their per-address cap, trickling
//! bodies to an unauthenticated route and reconnecting when closed, so together they fill the
//! total cap of 4 000. The server keeps serving: a probe from a priority address answers every time, a new
//! client from another address gets in by shedding a trickler, and after the wave the
//! server's memory returns near where it was.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpSocket;

use crate::serve::start;

const ADDRESSES: u8 = 40;
const PER_ADDRESS: usize = 110;
const MAX_CONNECTIONS: usize = 4000;
const WAVE: Duration = Duration::from_secs(12);

async fn connect_from(
    source: Ipv4Addr,
    server: SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
    socket.connect(server).await
}

/// One attacker connection, again and again until `stop`: a head announcing a large body to
/// the unauthenticated email webhook, then a byte every 400 ms.
async fn trickle(
    source: Ipv4Addr,
    server: SocketAddr,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut conn) = connect_from(source, server).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        let head = "POST /v1/webhooks/email HTTP/1.1\r\nHost: corral\r\n\
                    Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n{";
        if conn.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            tokio::select! {
                read = conn.read(&mut buf) => {
                    // Answered (408) or closed (shed): reconnect.
                    if matches!(read, Ok(0) | Err(_)) { break; }
                }
                () = tokio::time::sleep(Duration::from_millis(400)) => {
                    if conn.write_all(b" ").await.is_err() { break; }
                }
            }
        }
    }
}

/// `GET /healthz` on a new connection from `source`: whether it answered 200 within 5 s.
async fn probe(source: Ipv4Addr, server: SocketAddr) -> bool {
    let attempt = async {
        let mut conn = connect_from(source, server).await.ok()?;
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), attempt).await,
        Ok(Some(true))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_many_addresses_leaves_the_server_serving_and_its_memory_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(
        &config,
        format!(
            "[providers]\nenabled = [\"local\"]\n[http]\nmax_connections = {MAX_CONNECTIONS}\n\
             max_connections_per_address = 120\npriority_addresses = [\"127.0.0.1\"]\n"
        ),
    )
    .unwrap();
    let server = start(&data, &config, 1);
    let addr: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let (health, client) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 200));
    // Warm: a few requests, then the baseline.
    for _ in 0..5 {
        assert!(probe(health, addr).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = crate::serve::status_kib(server.pid(), "VmRSS");

    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    for a in 2..2 + ADDRESSES {
        for _ in 0..PER_ADDRESS {
            attackers.push(tokio::spawn(trickle(
                Ipv4Addr::new(127, 0, 0, a),
                addr,
                stop.clone(),
                opened.clone(),
            )));
        }
    }
    // Let the wave fill the cap, then probe throughout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut health_ok, mut client_ok, mut probes) = (0, 0, 0);
    let mut peak = baseline;
    let end = Instant::now() + WAVE;
    while Instant::now() < end {
        probes += 1;
        health_ok += usize::from(probe(health, addr).await);
        client_ok += usize::from(probe(client, addr).await);
        peak = peak.max(crate::serve::status_kib(server.pid(), "VmRSS"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        let _ = a.await;
    }
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let shed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("corral_http_connections_shed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // The wave was real: more connections than the cap, and some were shed.
    let opened = opened.load(Ordering::Relaxed);
    assert!(
        opened > MAX_CONNECTIONS as u64,
        "the wave opened {opened} connections"
    );
    assert!(shed > 0, "no connection was shed:\n{metrics}");
    assert_eq!(
        health_ok, probes,
        "the priority probe answered {health_ok} of {probes}"
    );
    assert!(
        client_ok * 3 >= probes * 2,
        "a new client got in {client_ok} times of {probes}"
    );

    // Memory: back near the baseline once the connections are gone.
    let settle = Instant::now() + Duration::from_secs(10);
    let mut after = crate::serve::status_kib(server.pid(), "VmRSS");
    let near = |after: u64| after <= baseline + (peak - baseline) / 2 + 4 * 1024;
    while !near(after) && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = crate::serve::status_kib(server.pid(), "VmRSS");
    }
    eprintln!(
        "flood: {opened} connections opened, {shed} shed; {probes} probes; RSS baseline {baseline} KiB, peak {peak} KiB, after {after} KiB"
    );
    assert!(
        near(after),
        "RSS {after} KiB after the wave: baseline {baseline} KiB, peak {peak} KiB"
    );
}

/// One key holds at most its limit of live streams (64 by default): the next follow is
/// refused `rate_limited`, another key of the project is not held back, and a stream whose
/// client goes gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_holds_at_most_its_limit_of_live_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config = tmp.path().join("corral.toml");
    std::fs::write(&config, "[providers]\nenabled = [\"local\"]\n").unwrap();
    let server = start(&data, &config, 1);
    let key = server.first_key();
    let client = reqwest::Client::new();
    let follow = |key: &str| {
        client
            .get(format!("{}/v1/events", server.base))
            .bearer_auth(key)
            .header("Accept", "text/event-stream")
            .send()
    };
    let mut held = Vec::new();
    for i in 0..corral_service::streams::DEFAULT_STREAMS_PER_KEY {
        let resp = follow(&key).await.unwrap();
        assert_eq!(resp.status(), 200, "stream {i}");
        held.push(resp);
    }
    let refused = follow(&key).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");

    let out = crate::serve::cli(&data, &["key", "create", "--project", "default"], &[]);
    let other: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let other = follow(other["apiKey"].as_str().unwrap()).await.unwrap();
    assert_eq!(other.status(), 200);

    // A client that goes gives its place back, once the server notices the closed stream (at
    // the latest on the next keep-alive comment, 15 s).
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let resp = follow(&key).await.unwrap();
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 429);
        assert!(
            Instant::now() < deadline,
            "the closed stream's place was never given back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
