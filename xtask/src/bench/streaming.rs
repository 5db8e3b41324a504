//! The `streaming` scenario: commands as durable jobs against the same server's exec, on a
//! `local` sandbox.
//!
//! - **Start + wait**: `POST …/commands` of `true`, then `GET …/commands/{cmd}?wait=10`,
//!   one after the other, against `POST …/exec` of `true` (the baseline), and an exec right
//!   after each start + wait (what a finished command leaves behind shows there).
//! - **Throughput**: a command writes numbered lines as fast as a shell can (one `write` per
//!   line); the lines per second from its start to its exit event at one SSE follower,
//!   against the same loop read from a pipe on the host; the events the journal holds for it
//!   and the server's peak memory.
//! - **Fan-out**: 20 commands print the wall clock every 20 ms, each followed by 10 SSE
//!   clients (200 readers); each line's delay at each reader, and the server's memory.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt as _;

use super::commands;
use super::server::Corral;

/// Timed rounds of each start + wait and exec series.
const ROUNDS: usize = 300;
/// Lines the throughput command writes.
const LINES: usize = 200_000;
/// Commands and readers of each in the fan-out.
const FANOUT_COMMANDS: usize = 20;
const READERS_PER_COMMAND: usize = 10;
/// Lines each fan-out command prints (one per 20 ms).
const FANOUT_LINES: usize = 250;

fn loop_script(lines: usize) -> String {
    format!("i=0; while [ $i -lt {lines} ]; do echo $i; i=$((i+1)); done")
}

/// A histogram of microseconds.
fn hist() -> Result<Histogram<u64>, String> {
    Histogram::<u64>::new(3).map_err(|e| e.to_string())
}

fn since_us(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The three start + wait and exec series.
pub(crate) struct Waits {
    pub(crate) exec: Histogram<u64>,
    pub(crate) start_wait: Histogram<u64>,
    pub(crate) exec_after: Histogram<u64>,
    pub(crate) errors: usize,
}

async fn exec(client: &reqwest::Client, base: &str, key: &str, sbx: &str) -> bool {
    match client
        .post(format!("{base}/v1/sandboxes/{sbx}/exec"))
        .bearer_auth(key)
        .json(&json!({"command": "true"}))
        .send()
        .await
    {
        Ok(r) => {
            let ok = r.status().is_success();
            r.bytes().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

async fn start_and_wait(client: &reqwest::Client, base: &str, key: &str, sbx: &str) -> bool {
    let Ok(cmd) = commands::start(client, base, key, sbx, "true").await else {
        return false;
    };
    let answer: Result<Value, _> = match client
        .get(format!("{base}/v1/sandboxes/{sbx}/commands/{cmd}?wait=10"))
        .bearer_auth(key)
        .send()
        .await
    {
        Ok(r) => r.json().await,
        Err(e) => Err(e),
    };
    answer.is_ok_and(|v| v["state"] == "exited")
}

pub(crate) async fn waits(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    sbx: &str,
) -> Result<Waits, String> {
    let mut w = Waits {
        exec: hist()?,
        start_wait: hist()?,
        exec_after: hist()?,
        errors: 0,
    };
    for _ in 0..20 {
        exec(client, base, key, sbx).await;
        start_and_wait(client, base, key, sbx).await;
    }
    for _ in 0..ROUNDS {
        let t = Instant::now();
        if exec(client, base, key, sbx).await {
            let _ = w.exec.record(since_us(t));
        } else {
            w.errors += 1;
        }
    }
    for _ in 0..ROUNDS {
        let t = Instant::now();
        if start_and_wait(client, base, key, sbx).await {
            let _ = w.start_wait.record(since_us(t));
        } else {
            w.errors += 1;
        }
        let t = Instant::now();
        if exec(client, base, key, sbx).await {
            let _ = w.exec_after.record(since_us(t));
        } else {
            w.errors += 1;
        }
    }
    Ok(w)
}

/// Lines per second of the loop read from a pipe on the host.
pub(crate) async fn pipe_rate() -> Result<f64, String> {
    let t = Instant::now();
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(loop_script(LINES))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot spawn sh: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout pipe")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = 0usize;
    loop {
        let n = out.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count();
    }
    let _ = child.wait().await;
    Ok(lines as f64 / t.elapsed().as_secs_f64())
}

/// The throughput run through Corral.
pub(crate) struct Throughput {
    pub(crate) lines: usize,
    pub(crate) rate: f64,
    pub(crate) journal_events: usize,
    pub(crate) idle_rss: f64,
    pub(crate) peak_rss: f64,
}

pub(crate) async fn throughput(
    client: &reqwest::Client,
    corral: &Corral,
    key: &str,
    sbx: &str,
) -> Result<Throughput, String> {
    let base = &corral.base;
    let idle_rss = corral.rss_mib().unwrap_or(f64::NAN);
    let t = Instant::now();
    let cmd = commands::start(client, base, key, sbx, &loop_script(LINES)).await?;
    let mut lines = 0usize;
    let mut peak_rss = idle_rss;
    {
        let follow = commands::follow(client, base, key, sbx, &cmd, |text| {
            lines += text.bytes().filter(|b| *b == b'\n').count();
        });
        tokio::pin!(follow);
        loop {
            tokio::select! {
                done = &mut follow => { done?; break; }
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    peak_rss = peak_rss.max(corral.rss_mib().unwrap_or(0.0));
                }
            }
        }
    }
    let rate = lines as f64 / t.elapsed().as_secs_f64();
    // The events stored for it: JSON pages from the start.
    let mut after = 0u64;
    let mut journal_events = 0usize;
    loop {
        let page: Value = client
            .get(format!(
                "{base}/v1/sandboxes/{sbx}/commands/{cmd}/output?after={after}"
            ))
            .bearer_auth(key)
            .send()
            .await
            .map_err(|e| format!("output page: {e}"))?
            .json()
            .await
            .map_err(|e| format!("output page answer: {e}"))?;
        let events = page["events"].as_array().map_or(0, Vec::len);
        journal_events += events;
        if page["done"] == true || events == 0 {
            break;
        }
        after = page["nextAfter"].as_u64().unwrap_or(after);
    }
    Ok(Throughput {
        lines,
        rate,
        journal_events: journal_events.saturating_sub(1), // the exit event
        idle_rss,
        peak_rss,
    })
}

/// The fan-out: delays at every reader, the server's memory, the readers that saw the end.
pub(crate) struct Fanout {
    pub(crate) delays: Histogram<u64>,
    pub(crate) idle_rss: f64,
    pub(crate) peak_rss: f64,
    pub(crate) complete: usize,
}

pub(crate) async fn fanout(
    client: &reqwest::Client,
    corral: &Corral,
    key: &str,
    sbx: &str,
) -> Result<Fanout, String> {
    let base = corral.base.clone();
    let idle_rss = corral.rss_mib().unwrap_or(f64::NAN);
    let script = commands::script(FANOUT_LINES);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..FANOUT_COMMANDS {
        let cmd = commands::start(client, &base, key, sbx, &script).await?;
        for _ in 0..READERS_PER_COMMAND {
            let (client, base, key, sbx, cmd) = (
                client.clone(),
                base.clone(),
                key.to_owned(),
                sbx.to_owned(),
                cmd.clone(),
            );
            tasks.spawn(async move {
                let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
                commands::follow(&client, &base, &key, &sbx, &cmd, |text| {
                    commands::record(&mut h, text);
                })
                .await?;
                Ok::<_, String>(h)
            });
        }
    }
    let mut delays = hist()?;
    let mut peak_rss = idle_rss;
    let mut complete = 0;
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                Some(Ok(Ok(h))) => {
                    complete += 1;
                    delays.add(&h).map_err(|e| e.to_string())?;
                }
                Some(_) => {}
                None => break,
            },
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                peak_rss = peak_rss.max(corral.rss_mib().unwrap_or(0.0));
            }
        }
    }
    Ok(Fanout {
        delays,
        idle_rss,
        peak_rss,
        complete,
    })
}

/// Runs the scenario on a fresh `local` sandbox of `corral`, deleted afterwards.
pub(crate) async fn run(
    client: &reqwest::Client,
    corral: &Corral,
    key: &str,
) -> Result<(String, Value), String> {
    let base = &corral.base;
    let sbx = commands::create_local(client, base, key).await?;
    let measured = async {
        let w = waits(client, base, key, &sbx).await?;
        let pipe = pipe_rate().await?;
        let t = throughput(client, corral, key, &sbx).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let f = fanout(client, corral, key, &sbx).await?;
        Ok::<_, String>(section(&w, pipe, &t, &f))
    }
    .await;
    let _ = client
        .delete(format!("{base}/v1/sandboxes/{sbx}"))
        .bearer_auth(key)
        .send()
        .await;
    measured
}

/// Milliseconds at `q`.
fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    commands::ms(h, q)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The section: tables and the verdicts against the targets.
pub(crate) fn section(waits: &Waits, pipe: f64, t: &Throughput, f: &Fanout) -> (String, Value) {
    let ratio = ms(&waits.start_wait, 0.5) / ms(&waits.exec, 0.5);
    let interleaved = ms(&waits.exec_after, 0.5) / ms(&waits.exec, 0.5);
    let sw99 = ms(&waits.start_wait, 0.99);
    let readers = FANOUT_COMMANDS * READERS_PER_COMMAND;
    let f99 = ms(&f.delays, 0.99);
    let md = format!(
        "## 5c. Streaming core: commands against exec, output throughput, 200 readers\n\n\
         One `local` sandbox, SQLite. {ROUNDS} timed rounds of each series after 20 warm-up \
         rounds, one request at a time.\n\n\
         | series | runs | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n\
         | `POST …/exec` of `true` alone (baseline) | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n\
         | `POST …/commands` of `true` + `GET …?wait=10` | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n\
         | `POST …/exec` right after each of those | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n\n\
         Start + wait p50 / exec p50: **{ratio:.2}×** (target ≤ 2: {}); start + wait p99 \
         **{sw99:.2} ms** (target ≤ 10: {}); interleaved exec p50 / exec alone p50: \
         **{interleaved:.2}×** (target ≤ 1.2: {}). Errors: {}.\n\n\
         Throughput: a command writing {LINES} lines, one `write` each, followed by one SSE \
         client from its start to its exit event.\n\n\
         | series | lines | lines/s | journal events | RSS before → peak (MiB) |\n\
         | --- | ---: | ---: | ---: | ---: |\n\
         | the loop read from a pipe on the host (baseline) | {LINES} | {pipe:.0} | | |\n\
         | through Corral (`local` → journal → SSE) | {} | {:.0} | {} | {:.1} → {:.1} |\n\n\
         Lines per second through Corral: **{:.0}** (target ≥ 20 000: {}), {:.2} of the \
         pipe's.\n\n\
         Fan-out: {FANOUT_COMMANDS} commands each print the wall clock every 20 ms \
         ({FANOUT_LINES} lines), each followed by {READERS_PER_COMMAND} SSE clients \
         ({readers} readers); a line's delay is its arrival at a reader minus the time it \
         carries.\n\n\
         | lines delivered | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | readers to the exit | RSS before → peak (MiB) |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n\
         | {} | {:.2} | {:.2} | {f99:.2} | {:.2} | {}/{readers} | {:.1} → {:.1} |\n\n\
         Delivery p99 **{f99:.2} ms** (target ≤ 50: {}).\n",
        waits.exec.len(),
        ms(&waits.exec, 0.5),
        ms(&waits.exec, 0.9),
        ms(&waits.exec, 0.99),
        waits.exec.max() as f64 / 1000.0,
        waits.start_wait.len(),
        ms(&waits.start_wait, 0.5),
        ms(&waits.start_wait, 0.9),
        sw99,
        waits.start_wait.max() as f64 / 1000.0,
        waits.exec_after.len(),
        ms(&waits.exec_after, 0.5),
        ms(&waits.exec_after, 0.9),
        ms(&waits.exec_after, 0.99),
        waits.exec_after.max() as f64 / 1000.0,
        verdict(ratio <= 2.0),
        verdict(sw99 <= 10.0),
        verdict(interleaved <= 1.2),
        waits.errors,
        t.lines,
        t.rate,
        t.journal_events,
        t.idle_rss,
        t.peak_rss,
        t.rate,
        verdict(t.rate >= 20_000.0 && t.lines == LINES),
        t.rate / pipe,
        f.delays.len(),
        ms(&f.delays, 0.5),
        ms(&f.delays, 0.9),
        f.delays.max() as f64 / 1000.0,
        f.complete,
        f.idle_rss,
        f.peak_rss,
        verdict(f99 <= 50.0 && f.complete == readers),
    );
    (
        md,
        json!({
            "exec_p50_ms": ms(&waits.exec, 0.5), "exec_p99_ms": ms(&waits.exec, 0.99),
            "start_wait_p50_ms": ms(&waits.start_wait, 0.5), "start_wait_p99_ms": sw99,
            "exec_after_p50_ms": ms(&waits.exec_after, 0.5),
            "exec_after_p99_ms": ms(&waits.exec_after, 0.99),
            "errors": waits.errors,
            "pipe_lines_per_s": pipe, "lines": t.lines, "lines_per_s": t.rate,
            "journal_events": t.journal_events,
            "throughput_rss_mib": [t.idle_rss, t.peak_rss],
            "fanout_delivered": f.delays.len(), "fanout_p50_ms": ms(&f.delays, 0.5),
            "fanout_p99_ms": f99, "fanout_complete": f.complete,
            "fanout_rss_mib": [f.idle_rss, f.peak_rss],
        }),
    )
}
