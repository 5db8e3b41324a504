//! The `commands` scenario: how long a chunk a command writes in a `local` sandbox takes to
//! reach a client as a Server-Sent Event, against the same lines read straight from a
//! process's pipe on the host; and the server's memory while 200 clients follow one command.
//!
//! The command prints the wall-clock time (`date +%s%N`) every 20 ms; the sandbox shares the
//! host's clock, so each event's delay is the reader's time of arrival minus the time in the
//! line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

/// Lines each series reads.
pub(crate) const LINES: usize = 300;
/// Clients following one command in the memory series.
pub(crate) const STREAMS: usize = 200;

pub(crate) fn script(lines: usize) -> String {
    format!("i=0; while [ $i -lt {lines} ]; do date +%s%N; i=$((i+1)); sleep 0.02; done")
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Records the delay of every line of `text` that is a timestamp.
pub(crate) fn record(hist: &mut Histogram<u64>, text: &str) {
    let arrived = now_ns();
    for line in text.lines() {
        if let Ok(ts) = line.trim().parse::<u128>() {
            let us = arrived.saturating_sub(ts) / 1000;
            let _ = hist.record(u64::try_from(us).unwrap_or(u64::MAX).max(1));
        }
    }
}

/// The baseline: the lines read from a plain process's stdout pipe on the host.
pub(crate) async fn pipe_baseline() -> Result<Histogram<u64>, String> {
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script(LINES))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot spawn sh: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout pipe")?;
    let mut lines = tokio::io::BufReader::new(out).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        record(&mut hist, &line);
    }
    let _ = child.wait().await;
    Ok(hist)
}

/// Creates a `local` sandbox through `/v1` and answers its id.
pub(crate) async fn create_local(
    client: &reqwest::Client,
    base: &str,
    key: &str,
) -> Result<String, String> {
    let body: Value = client
        .post(format!("{base}/v1/sandboxes"))
        .bearer_auth(key)
        .json(&json!({"provider": "local"}))
        .send()
        .await
        .map_err(|e| format!("local create failed: {e}"))?
        .json()
        .await
        .map_err(|e| format!("local create answer: {e}"))?;
    body["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("local create answered {body}"))
}

/// Starts `command` in sandbox `sbx` and answers its id.
pub(crate) async fn start(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    sbx: &str,
    command: &str,
) -> Result<String, String> {
    let body: Value = client
        .post(format!("{base}/v1/sandboxes/{sbx}/commands"))
        .bearer_auth(key)
        .json(&json!({ "command": command }))
        .send()
        .await
        .map_err(|e| format!("start failed: {e}"))?
        .json()
        .await
        .map_err(|e| format!("start answer: {e}"))?;
    body["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("start answered {body}"))
}

/// Follows a command's output as SSE to its exit event, calling `each` with every chunk of
/// stdout text as it arrives; answers the number of events.
pub(crate) async fn follow(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    sbx: &str,
    cmd: &str,
    mut each: impl FnMut(&str),
) -> Result<usize, String> {
    let mut resp = client
        .get(format!("{base}/v1/sandboxes/{sbx}/commands/{cmd}/output"))
        .bearer_auth(key)
        .header("accept", "text/event-stream")
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .map_err(|e| format!("output failed: {e}"))?;
    let mut pending = String::new();
    let mut events = 0;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("output stream broke: {e}"))?
    {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let frame: String = pending.drain(..end + 2).collect();
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "));
            let Some(data) = data else { continue };
            let event: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
            events += 1;
            match event["type"].as_str() {
                Some("output") if event["stream"] == "stdout" => {
                    each(event["data"].as_str().unwrap_or_default());
                }
                Some("exit") => return Ok(events),
                _ => {}
            }
        }
    }
    Err("the output stream ended before the exit event".into())
}

/// The delay of each line through Corral: start the command, follow it.
pub(crate) async fn through_corral(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    sbx: &str,
) -> Result<Histogram<u64>, String> {
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let cmd = start(client, base, key, sbx, &script(LINES)).await?;
    follow(client, base, key, sbx, &cmd, |text| record(&mut hist, text)).await?;
    Ok(hist)
}

/// Milliseconds at `q` of a histogram of microseconds.
pub(crate) fn ms(hist: &Histogram<u64>, q: f64) -> f64 {
    hist.value_at_quantile(q) as f64 / 1000.0
}
