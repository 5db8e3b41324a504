//! Section 3, the reads of issue 33: `GET /v1/sandboxes?limit=100` over a seeded registry and
//! `GET /v1/sandboxes/{id}` on a `local` sandbox, each as a ratio of `GET /healthz` measured
//! the same way (closed loop, same connections, same server, same world) around it.
//!
//! The machine is shared, so its speed drifts during a run: each series is measured between
//! two `/healthz` phases and compared with their mean (`/healthz`, list, `/healthz`, get,
//! `/healthz`), and both `/healthz` figures are reported so the drift can be seen.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::load::{Run, closed_loop, open_loop};

/// `GET /v1/sandboxes?limit=100` against `/healthz` (issue 33).
pub(crate) const LIST_TARGET: f64 = 0.10;
/// `GET /v1/sandboxes/{id}` on `local` against `/healthz` (issue 33).
pub(crate) const GET_TARGET: f64 = 0.5;

type Sent = Pin<Box<dyn Future<Output = bool> + Send>>;

/// The server and key the series run against, and how hard.
pub(crate) struct Target {
    client: reqwest::Client,
    base: String,
    key: String,
    workers: usize,
    phase: Duration,
}

/// A series between two `/healthz` phases.
pub(crate) struct Paired {
    before: Run,
    series: Run,
    after: Run,
}

impl Paired {
    /// Mean `/healthz` throughput around the series.
    fn healthz(&self) -> f64 {
        (self.before.throughput() + self.after.throughput()) / 2.0
    }

    /// Series throughput over that mean.
    pub(crate) fn ratio(&self) -> f64 {
        self.series.throughput() / self.healthz()
    }

    fn json(&self) -> Value {
        json!({
            "healthz_before": self.before.json(),
            "series": self.series.json(),
            "healthz_after": self.after.json(),
            "ratio": self.ratio(),
        })
    }
}

/// One world's figures: the list, its open-loop latency, and the get (or why it was not
/// measured: `local` needs root and loop devices).
pub(crate) struct World {
    engine: &'static str,
    records: usize,
    list: Paired,
    latency: Run,
    rate: u32,
    get: Result<Paired, String>,
}

impl Target {
    pub(crate) fn new(
        client: &reqwest::Client,
        base: &str,
        key: &str,
        workers: usize,
        phase: Duration,
    ) -> Self {
        Self {
            client: client.clone(),
            base: base.to_owned(),
            key: key.to_owned(),
            workers,
            phase,
        }
    }

    /// Measures one world whose registry holds `records` records: list pages at `cursors`
    /// (closed loop, then open loop at `rate`), then a get of a `local` sandbox made here
    /// (and deleted after).
    pub(crate) async fn measure(
        &self,
        postgres: bool,
        records: usize,
        cursors: Vec<Option<String>>,
        rate: u32,
    ) -> Result<World, String> {
        let page = self.list_page(Arc::new(cursors));
        let healthz = self.healthz();
        warm(healthz.clone()).await;
        warm(page.clone()).await;
        let before = closed_loop(self.workers, self.phase, healthz.clone()).await;
        let list = closed_loop(self.workers, self.phase, page.clone()).await;
        let middle = closed_loop(self.workers, self.phase, healthz.clone()).await;
        let latency = open_loop(rate, self.phase, page).await;
        let get = match self.local_sandbox().await {
            Ok(id) => {
                let get = self.get(&id);
                warm(get.clone()).await;
                let series = closed_loop(self.workers, self.phase, get).await;
                let after = closed_loop(self.workers, self.phase, healthz).await;
                self.delete(&id).await;
                Ok(Paired {
                    before: closed_loop_copy(&middle),
                    series,
                    after,
                })
            }
            Err(e) => Err(e),
        };
        Ok(World {
            engine: if postgres { "PostgreSQL" } else { "SQLite" },
            records,
            list: Paired {
                before,
                series: list,
                after: middle,
            },
            latency,
            rate,
            get,
        })
    }

    fn healthz(&self) -> impl Fn(u64) -> Sent + Clone + Send + Sync + 'static {
        let (client, url) = (self.client.clone(), format!("{}/healthz", self.base));
        move |_| Box::pin(finish(client.get(&url)))
    }

    /// Request `i` reads the page at cursor `i mod n` (the first page included).
    fn list_page(
        &self,
        cursors: Arc<Vec<Option<String>>>,
    ) -> impl Fn(u64) -> Sent + Clone + Send + Sync + 'static {
        let (client, base, auth) = (self.client.clone(), self.base.clone(), self.auth());
        let urls: Arc<Vec<String>> = Arc::new(
            cursors
                .iter()
                .map(|c| match c {
                    Some(c) => format!("{base}/v1/sandboxes?limit=100&cursor={c}"),
                    None => format!("{base}/v1/sandboxes?limit=100"),
                })
                .collect(),
        );
        move |i| {
            let url = &urls[(i as usize) % urls.len().max(1)];
            Box::pin(finish(client.get(url).header("authorization", &auth)))
        }
    }

    fn get(&self, id: &str) -> impl Fn(u64) -> Sent + Clone + Send + Sync + 'static {
        let (client, auth) = (self.client.clone(), self.auth());
        let url = format!("{}/v1/sandboxes/{id}", self.base);
        move |_| Box::pin(finish(client.get(&url).header("authorization", &auth)))
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.key)
    }

    /// Creates a `local` sandbox; its id.
    async fn local_sandbox(&self) -> Result<String, String> {
        super::commands::create_local(&self.client, &self.base, &self.key).await
    }

    /// Deleted, so the server (killed at the end of the run, with no chance to clean up)
    /// leaves no sandbox filesystem mounted behind.
    async fn delete(&self, id: &str) {
        let _ = self
            .client
            .delete(format!("{}/v1/sandboxes/{id}", self.base))
            .header("authorization", self.auth())
            .send()
            .await;
    }
}

/// The middle `/healthz` phase ends the list's pair and opens the get's: the same figures.
fn closed_loop_copy(run: &Run) -> Run {
    Run {
        hist: run.hist.clone(),
        errors: run.errors,
        elapsed: run.elapsed,
    }
}

/// A short closed-loop warm-up.
async fn warm(send: impl Fn(u64) -> Sent + Send + Sync + 'static) {
    let _ = closed_loop(8, Duration::from_secs(1), send).await;
}

/// Sends and reads the whole body; true on `200`.
async fn finish(req: reqwest::RequestBuilder) -> bool {
    match req.send().await {
        Ok(resp) => {
            let ok = resp.status().as_u16() == 200;
            resp.bytes().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

/// The section's Markdown and JSON.
pub(crate) fn section(worlds: &[World], workers: usize, phase: Duration) -> (String, Value) {
    let mut md = format!(
        "## 3. Reads: registry list, 100 per page, and a `local` get, against `/healthz`\n\n\
         Closed loop, {workers} connections, {s} s per phase, in each world (a fresh database \
         seeded with the records shown, a quarter of them tombstones): `GET /healthz`, the \
         list, `GET /healthz`, the get, `GET /healthz`; each series is divided by the mean of \
         the two `/healthz` phases around it (the machine is shared: the two show its drift). \
         Each list request reads one page at a cursor taken every 200 records along the whole \
         list (the first page included). The get reads one `local` sandbox created in that \
         world (running, its status unchanged between gets). Latency of the list: open loop \
         at the rate shown, {s} s.\n\n\
         | database | records | series | `/healthz` before, after (req/s) | series (req/s) | **/ `/healthz`** | target | p50 (ms) | p99 (ms) | errors |\n\
         | --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n",
        s = phase.as_secs()
    );
    let mut out = serde_json::Map::new();
    for w in worlds {
        let l = &w.list;
        let _ = writeln!(
            md,
            "| {} | {} | `GET /v1/sandboxes?limit=100` | {:.0}, {:.0} | {:.0} | **{:.3}** | ≥ {LIST_TARGET:.2}: {} | {:.2} | {:.2} | {} |",
            w.engine,
            w.records,
            l.before.throughput(),
            l.after.throughput(),
            l.series.throughput(),
            l.ratio(),
            verdict(l.ratio() >= LIST_TARGET),
            l.series.ms(0.5),
            l.series.ms(0.99),
            l.series.errors + l.before.errors + l.after.errors,
        );
        let _ = writeln!(
            md,
            "| {} | {} | the same, open loop at {} req/s | | | | | {:.2} | {:.2} | {} |",
            w.engine,
            w.records,
            w.rate,
            w.latency.ms(0.5),
            w.latency.ms(0.99),
            w.latency.errors,
        );
        match &w.get {
            Ok(g) => {
                let _ = writeln!(
                    md,
                    "| {} | {} | `GET /v1/sandboxes/{{id}}` on `local` | {:.0}, {:.0} | {:.0} | **{:.3}** | ≥ {GET_TARGET:.2}: {} | {:.2} | {:.2} | {} |",
                    w.engine,
                    w.records,
                    g.before.throughput(),
                    g.after.throughput(),
                    g.series.throughput(),
                    g.ratio(),
                    verdict(g.ratio() >= GET_TARGET),
                    g.series.ms(0.5),
                    g.series.ms(0.99),
                    g.series.errors + g.after.errors,
                );
            }
            Err(e) => {
                let _ = writeln!(
                    md,
                    "| {} | {} | `GET /v1/sandboxes/{{id}}` on `local` | not measured: {e} | | | | | | |",
                    w.engine, w.records,
                );
            }
        }
        out.insert(
            format!("{}_{}", w.engine, w.records),
            json!({
                "list": l.json(),
                "list_open_loop": w.latency.json(),
                "list_open_loop_rate": w.rate,
                "get_local": match &w.get {
                    Ok(g) => g.json(),
                    Err(e) => json!({"error": e}),
                },
            }),
        );
    }
    out.insert("workers".into(), json!(workers));
    out.insert("phase_seconds".into(), json!(phase.as_secs()));
    (md, Value::Object(out))
}
