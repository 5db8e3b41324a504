//! `cargo xtask bench`: what Corral adds to the providers it fronts, scenario by scenario, each
//! as a ratio against a baseline measured in the same run. Release build; not part of CI.
//!
//! One command starts, on loopback, a fake provider with a configurable delay (Morph's API:
//! [`fake`]) and `corral serve` processes over SQLite or PostgreSQL ([`server`]), drives them
//! with an open-loop constant-rate load generator or a closed loop of workers ([`load`]), and
//! writes `target/bench/<scenario>.json` and the scenario's section of `docs/benchmarks.md`.
//!
//! Scenarios (`--only a,b` picks some): `auth` (an authenticated no-I/O route vs `/healthz`),
//! `proxy` (exec and get through Corral vs straight to the fake), `create` (creates with
//! `Idempotency-Key`, replays), `list` (100 per page over 10 000 and 100 000 records, SQLite
//! and PostgreSQL, and a get of a `local` sandbox, each against `/healthz`: [`reads`]),
//! `local` (`local` exec of `true` vs a plain spawn, at the provider and over HTTP),
//! `memory` (RSS idle and with 1 000 execs in flight, time to ready), `scale` (two replicas
//! on one PostgreSQL vs one), `streaming` (commands against exec, output
//! throughput, 200 readers on 20 commands), `e2b` (`true` through the E2B Python SDK vs `/v1`
//! exec) and `lifecycle` (`local` stop, resume, snapshot
//! and a fork's copy beside a create). PostgreSQL scenarios need
//! `--postgres postgres://user@host:port` (or `CORRAL_BENCH_POSTGRES_URL`); a database
//! `corral_bench` there is dropped and re-created for each world.

mod commands;
mod dbstat;
mod e2b_door;
mod fake;
mod lean;
mod lifecycle;
mod load;
mod local_exec;
mod reads;
mod server;
mod streaming;

use std::fmt::Write as _;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_domain::{
    CredentialSource, OperationId, Provider, SandboxId, SandboxMetadata, SandboxStatus,
};
use corral_registry::{CreateState, Database, DatabaseConfig, MasterKey, Registry, SandboxRecord};
use serde_json::{Value, json};

use crate::bench::fake::Fake;
use crate::bench::load::{Run, closed_loop, open_loop};
use crate::bench::server::{Corral, World};

const DOC: &str = "docs/benchmarks.md";
const OUT: &str = "target/bench";
/// Creates per second and seconds of the commit-counting series (few enough that SQLite's
/// WAL, 1 000 pages before an automatic checkpoint, does not restart while they are counted).
const COMMIT_RATE: u32 = 10;
const COMMIT_PHASE: Duration = Duration::from_secs(5);
/// PostgreSQL backends flush their statistics at most once a second and, when idle, up to
/// 10 s later: each counting window ends this long after its load.
const PG_STATS_SETTLE: Duration = Duration::from_secs(11);
const ALL: &[&str] = &[
    "auth",
    "proxy",
    "create",
    "list",
    "local",
    "commands",
    "streaming",
    "e2b",
    "memory",
    "scale",
    "lifecycle",
];

/// What the command line asked for.
struct Options {
    only: Vec<String>,
    /// Length of each measured phase.
    phase: Duration,
    /// Open-loop rate of the latency phases.
    rate: u32,
    /// Closed-loop workers of the throughput phases.
    workers: usize,
    /// Delay of the fake provider in the proxy scenario.
    fake_delay: Duration,
    /// Record counts of the list scenario.
    records: Vec<usize>,
    /// Runs of the `local` provider-level series.
    iterations: usize,
    postgres: Option<String>,
    write: bool,
    command: String,
}

type Send = Pin<Box<dyn Future<Output = bool> + std::marker::Send>>;

/// Everything a scenario needs.
struct Bench {
    opts: Options,
    client: reqwest::Client,
    fake: Fake,
    tmp: tempfile::TempDir,
    worlds: usize,
}

/// One scenario's result: its doc section and its JSON.
struct Section {
    id: &'static str,
    markdown: String,
    json: Value,
}

/// Runs the benchmark (in a release build: a debug build re-runs itself with `--release`).
pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    if cfg!(debug_assertions) {
        let mut forwarded = vec!["run", "--release", "--quiet", "-p", "xtask", "--", "bench"];
        forwarded.extend(args.iter().map(String::as_str));
        return crate::run(&crate::cargo(), &forwarded);
    }
    let opts = parse(args)?;
    crate::run(
        &crate::cargo(),
        &["build", "--release", "--quiet", "-p", "corral"],
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    runtime.block_on(run_all(opts))
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        only: ALL.iter().map(|s| (*s).to_owned()).collect(),
        phase: Duration::from_secs(10),
        rate: 500,
        workers: 32,
        fake_delay: Duration::from_millis(1),
        records: vec![10_000, 100_000],
        iterations: 200,
        postgres: std::env::var("CORRAL_BENCH_POSTGRES_URL").ok(),
        write: true,
        command: format!("cargo xtask bench {}", args.join(" "))
            .trim()
            .to_owned(),
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |what: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs {what}"))
        };
        let number = |v: String| v.parse::<u64>().ok().filter(|n| *n > 0);
        match arg.as_str() {
            "--only" => {
                let list = value("a comma-separated list of scenarios")?;
                opts.only = list.split(',').map(str::to_owned).collect();
                if let Some(bad) = opts.only.iter().find(|s| !ALL.contains(&s.as_str())) {
                    return Err(format!(
                        "unknown scenario `{bad}` (known: {})",
                        ALL.join(", ")
                    ));
                }
            }
            "--seconds" => {
                opts.phase = Duration::from_secs(
                    number(value("seconds")?).ok_or("--seconds needs a positive number")?,
                );
            }
            "--rate" => {
                opts.rate = number(value("requests per second")?)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("--rate needs a positive number")?;
            }
            "--workers" => {
                opts.workers = number(value("a count")?)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or("--workers needs a positive number")?;
            }
            "--fake-delay-us" => {
                opts.fake_delay = Duration::from_micros(
                    value("microseconds")?
                        .parse()
                        .map_err(|_| "--fake-delay-us needs a number")?,
                );
            }
            "--records" => {
                opts.records = value("counts")?
                    .split(',')
                    .map(|n| n.parse().ok().filter(|n| *n > 0))
                    .collect::<Option<_>>()
                    .ok_or("--records needs comma-separated positive counts")?;
            }
            "--iterations" => {
                opts.iterations = number(value("a count")?)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or("--iterations needs a positive number")?;
            }
            "--postgres" => opts.postgres = Some(value("a PostgreSQL server URL")?),
            "--no-write" => opts.write = false,
            other => return Err(format!("unknown bench argument `{other}`")),
        }
    }
    Ok(opts)
}

async fn run_all(opts: Options) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4096)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let fake = Fake::start().await?;
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let mut bench = Bench {
        opts,
        client,
        fake,
        tmp,
        worlds: 0,
    };
    let load_before = load_average();
    let started = chrono::Utc::now();
    let mut sections = Vec::new();
    for id in ALL {
        if !bench.opts.only.iter().any(|s| s == id) {
            continue;
        }
        println!("== {id}");
        let section = match *id {
            "auth" => bench.auth().await?,
            "proxy" => bench.proxy().await?,
            "create" => bench.create().await?,
            "list" => bench.list().await?,
            "local" => bench.local().await?,
            "commands" => bench.commands().await?,
            "e2b" => {
                let world = bench.world(false)?;
                let corral = bench.serve(&world).await?;
                let (markdown, json) =
                    e2b_door::run(&bench.client, &corral, &world.api_key, bench.tmp.path()).await?;
                Section {
                    id: "e2b-door",
                    markdown,
                    json,
                }
            }
            "streaming" => {
                let world = bench.world(false)?;
                let corral = bench.serve(&world).await?;
                let (markdown, json) =
                    streaming::run(&bench.client, &corral, &world.api_key).await?;
                Section {
                    id: "streaming",
                    markdown,
                    json,
                }
            }
            "memory" => bench.memory().await?,
            "scale" => bench.scale().await?,
            "lifecycle" => {
                let (markdown, json) = lifecycle::section(bench.opts.iterations).await?;
                Section {
                    id: "local-lifecycle",
                    markdown,
                    json,
                }
            }
            _ => continue,
        };
        println!("{}", section.markdown);
        sections.push(section);
    }
    let run = run_section(&bench.opts, started, &load_before);
    println!("{}", run.markdown);
    if bench.opts.write {
        std::fs::create_dir_all(OUT).map_err(|e| format!("cannot create {OUT}: {e}"))?;
        for s in std::iter::once(&run).chain(&sections) {
            let path = Path::new(OUT).join(format!("{}.json", s.id));
            let text = serde_json::to_string_pretty(&s.json).unwrap_or_default();
            std::fs::write(&path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            update_doc(Path::new(DOC), s.id, &s.markdown)?;
        }
        println!("updated {DOC} and {OUT}/");
    }
    Ok(())
}

// --- requests --------------------------------------------------------------------------------

/// A request factory for the load generator: `GET url` (with the bearer key when given).
fn get(
    client: &reqwest::Client,
    url: String,
    key: Option<&str>,
) -> impl Fn(u64) -> Send + Sync + 'static {
    let client = client.clone();
    let auth = key.map(|k| format!("Bearer {k}"));
    move |_| {
        let mut req = client.get(&url);
        if let Some(a) = &auth {
            req = req.header("authorization", a);
        }
        Box::pin(finish(req, 200))
    }
}

/// `POST url` with a JSON body.
fn post(
    client: &reqwest::Client,
    url: String,
    key: &str,
    body: Value,
) -> impl Fn(u64) -> Send + Sync + 'static {
    let client = client.clone();
    let auth = format!("Bearer {key}");
    let body = serde_json::to_vec(&body).unwrap_or_default();
    move |_| {
        let req = client
            .post(&url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .body(body.clone());
        Box::pin(finish(req, 200))
    }
}

/// Sends and reads the whole body; true when the status is `expected`.
async fn finish(req: reqwest::RequestBuilder, expected: u16) -> bool {
    match req.send().await {
        Ok(resp) => {
            let ok = resp.status().as_u16() == expected;
            resp.bytes().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

impl Bench {
    /// A fresh world: SQLite in a new directory, or a re-created PostgreSQL database.
    fn world(&mut self, postgres: bool) -> Result<World, String> {
        self.worlds += 1;
        let dir = self.tmp.path().join(format!("world{}", self.worlds));
        let url = if postgres {
            let base = self
                .opts
                .postgres
                .clone()
                .ok_or("this scenario needs --postgres (or CORRAL_BENCH_POSTGRES_URL)")?;
            recreate_pg_database(&base)?
        } else {
            format!("sqlite://{}", dir.join("corral.db").display())
        };
        World::new(&dir, &url, &self.fake.base_url)
    }

    async fn serve(&self, world: &World) -> Result<Corral, String> {
        world.serve(&self.client).await
    }

    /// Creates `n` morph sandboxes through Corral; their (Corral id, native id).
    async fn sandboxes(
        &self,
        corral: &Corral,
        world: &World,
        n: usize,
    ) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let resp = self
                .client
                .post(format!("{}/v1/sandboxes", corral.base))
                .bearer_auth(&world.api_key)
                .json(&json!({"provider": "morph"}))
                .send()
                .await
                .map_err(|e| format!("create failed: {e}"))?;
            let body: Value = resp
                .json()
                .await
                .map_err(|e| format!("create answer: {e}"))?;
            let id = body["id"]
                .as_str()
                .ok_or_else(|| format!("create answered {body}"))?;
            let native = body["metadata"]["nativeProviderId"]
                .as_str()
                .ok_or_else(|| format!("create answered {body}"))?;
            out.push((id.to_owned(), native.to_owned()));
        }
        Ok(out)
    }

    /// A short closed-loop warm-up of `send`.
    async fn warm<F, Fut>(&self, send: F)
    where
        F: Fn(u64) -> Fut + std::marker::Send + Sync + 'static,
        Fut: Future<Output = bool> + std::marker::Send + 'static,
    {
        let _ = closed_loop(8, Duration::from_secs(1), send).await;
    }

    // --- scenario 2 ------------------------------------------------------------------------

    async fn auth(&mut self) -> Result<Section, String> {
        let world = self.world(false)?;
        let corral = self.serve(&world).await?;
        let healthz = format!("{}/healthz", corral.base);
        let providers = format!("{}/v1/providers", corral.base);
        self.warm(get(&self.client, healthz.clone(), None)).await;
        self.warm(get(&self.client, providers.clone(), Some(&world.api_key)))
            .await;
        let (w, d) = (self.opts.workers, self.opts.phase);
        let h = closed_loop(w, d, get(&self.client, healthz.clone(), None)).await;
        let p = closed_loop(
            w,
            d,
            get(&self.client, providers.clone(), Some(&world.api_key)),
        )
        .await;
        let ratio = p.throughput() / h.throughput();
        let mut md = String::new();
        let _ = writeln!(
            md,
            "## 2. Authentication: `GET /v1/providers` (API key, no other I/O) vs `GET /healthz`\n\n\
             Closed loop, {w} connections, {} s each, SQLite.\n\n{}",
            d.as_secs(),
            throughput_table(&[
                ("`GET /healthz` (baseline)", &h),
                ("`GET /v1/providers`", &p)
            ])
        );
        let _ = writeln!(
            md,
            "Authenticated / baseline throughput: **{:.0} %** (target ≥ 50 %: {}).",
            ratio * 100.0,
            verdict(ratio >= 0.5)
        );
        Ok(Section {
            id: "auth",
            markdown: md,
            json: json!({"healthz": h.json(), "providers": p.json(), "ratio": ratio, "workers": w}),
        })
    }

    // --- scenario 1 ------------------------------------------------------------------------

    async fn proxy(&mut self) -> Result<Section, String> {
        let world = self.world(false)?;
        let corral = self.serve(&world).await?;
        self.fake.set_delay(Duration::ZERO);
        let boxes = Arc::new(self.sandboxes(&corral, &world, 20).await?);
        self.fake.set_delay(self.opts.fake_delay);
        let (rate, d) = (self.opts.rate, self.opts.phase);
        let fake = self.fake.base_url.clone();
        let key = world.api_key.clone();
        let pick = |i: u64, b: &Arc<Vec<(String, String)>>| b[(i as usize) % b.len()].clone();
        let direct_get = {
            let (c, b, f) = (self.client.clone(), boxes.clone(), fake.clone());
            move |i: u64| -> Send {
                let (_, native) = pick(i, &b);
                Box::pin(finish(
                    c.get(format!("{f}/instance/{native}"))
                        .bearer_auth(fake::API_KEY),
                    200,
                ))
            }
        };
        let corral_get = {
            let (c, b, base, key) = (
                self.client.clone(),
                boxes.clone(),
                corral.base.clone(),
                key.clone(),
            );
            move |i: u64| -> Send {
                let (id, _) = pick(i, &b);
                Box::pin(finish(
                    c.get(format!("{base}/v1/sandboxes/{id}")).bearer_auth(&key),
                    200,
                ))
            }
        };
        let direct_exec = {
            let (c, b, f) = (self.client.clone(), boxes.clone(), fake.clone());
            move |i: u64| -> Send {
                let (_, native) = pick(i, &b);
                Box::pin(finish(
                    c.post(format!("{f}/instance/{native}/exec"))
                        .bearer_auth(fake::API_KEY)
                        .json(&json!({"command": ["true"]})),
                    200,
                ))
            }
        };
        let corral_exec = {
            let (c, b, base, key) = (
                self.client.clone(),
                boxes.clone(),
                corral.base.clone(),
                key.clone(),
            );
            move |i: u64| -> Send {
                let (id, _) = pick(i, &b);
                Box::pin(finish(
                    c.post(format!("{base}/v1/sandboxes/{id}/exec"))
                        .bearer_auth(&key)
                        .json(&json!({"command": "true"})),
                    200,
                ))
            }
        };
        self.warm(corral_get.clone()).await;
        self.warm(corral_exec.clone()).await;
        let dg = open_loop(rate, d, direct_get).await;
        let seen = self.fake.seen();
        let cg = open_loop(rate, d, corral_get).await;
        let get_reuse = self.fake.seen().reuse_since(seen);
        let de = open_loop(rate, d, direct_exec).await;
        let seen = self.fake.seen();
        let ce = open_loop(rate, d, corral_exec).await;
        let exec_reuse = self.fake.seen().reuse_since(seen);
        self.fake.set_delay(Duration::ZERO);
        let added = |a: &Run, b: &Run, q: f64| a.ms(q) - b.ms(q);
        let mut md = String::new();
        let _ = writeln!(
            md,
            "## 1. Proxied exec and get vs the provider called directly\n\n\
             Open loop, {rate} requests/s for {} s per series, spread over 20 sandboxes; the \
             fake provider answers after {} µs. SQLite.\n\n{}",
            d.as_secs(),
            self.opts.fake_delay.as_micros(),
            latency_table(&[
                ("get: fake directly (baseline)", &dg),
                ("get: through Corral", &cg),
                ("exec: fake directly (baseline)", &de),
                ("exec: through Corral", &ce),
            ])
        );
        let _ = writeln!(
            md,
            "| added by Corral | p50 (ms) | p99 (ms) | upstream requests on a reused connection |\n\
             | --- | ---: | ---: | ---: |\n\
             | get | {:.3} | {:.3} | {:.1} % |\n\
             | exec | {:.3} | {:.3} | {:.1} % |\n\n\
             Targets: added p50 ≤ 0.3 ms ({}), p99 ≤ 1 ms ({}), reuse ≥ 99 % ({}).",
            added(&cg, &dg, 0.5),
            added(&cg, &dg, 0.99),
            get_reuse * 100.0,
            added(&ce, &de, 0.5),
            added(&ce, &de, 0.99),
            exec_reuse * 100.0,
            verdict(added(&cg, &dg, 0.5) <= 0.3 && added(&ce, &de, 0.5) <= 0.3),
            verdict(added(&cg, &dg, 0.99) <= 1.0 && added(&ce, &de, 0.99) <= 1.0),
            verdict(get_reuse >= 0.99 && exec_reuse >= 0.99),
        );
        Ok(Section {
            id: "proxy",
            markdown: md,
            json: json!({
                "rate": rate, "fake_delay_us": self.opts.fake_delay.as_micros() as u64,
                "get_direct": dg.json(), "get_corral": cg.json(), "get_reuse": get_reuse,
                "exec_direct": de.json(), "exec_corral": ce.json(), "exec_reuse": exec_reuse,
            }),
        })
    }

    // --- scenario 4 ------------------------------------------------------------------------

    async fn create(&mut self) -> Result<Section, String> {
        let world = self.world(false)?;
        let corral = self.serve(&world).await?;
        self.fake.set_delay(Duration::ZERO);
        let rate = (self.opts.rate / 5).max(1);
        let d = self.opts.phase;
        let url = format!("{}/v1/sandboxes", corral.base);
        let creator = |prefix: &'static str, expected: u16| {
            let (c, url, key) = (self.client.clone(), url.clone(), world.api_key.clone());
            move |i: u64| -> Send {
                Box::pin(finish(
                    c.post(&url)
                        .bearer_auth(&key)
                        .header("idempotency-key", format!("{prefix}-{i}"))
                        .json(&json!({"provider": "morph"})),
                    expected,
                ))
            }
        };
        let direct = {
            let (c, f) = (self.client.clone(), self.fake.base_url.clone());
            move |_: u64| -> Send {
                Box::pin(finish(
                    c.post(format!("{f}/instance?snapshot_id=snapshot_bench"))
                        .bearer_auth(fake::API_KEY)
                        .json(&json!({"metadata": {"corral_operation_id": OperationId::new().to_string()}})),
                    200,
                ))
            }
        };
        self.warm(creator("warm", 201)).await;
        let base = open_loop(rate, d, direct).await;
        let created = open_loop(rate, d, creator("open", 201)).await;
        let replay = open_loop(rate, d, creator("open", 200)).await;
        let most = closed_loop(self.opts.workers / 2, d, creator("closed", 201)).await;
        let overhead = |q: f64| created.ms(q) - base.ms(q);
        drop(corral);
        let mut commits = vec![self.commits_per_create(false).await];
        if self.opts.postgres.is_some() {
            commits.push(self.commits_per_create(true).await);
        }
        let mut md = String::new();
        let _ = writeln!(
            md,
            "## 4. Create with `Idempotency-Key` against a zero-delay fake\n\n\
             Open loop, {rate} creates/s for {} s per series (each with a new key; the replay \
             series re-sends the first series' keys and bodies); then a closed loop of {} \
             workers for the highest rate. SQLite.\n\n{}",
            d.as_secs(),
            self.opts.workers / 2,
            latency_table(&[
                ("create at the fake directly (baseline)", &base),
                ("create through Corral (201)", &created),
                ("replay through Corral (200)", &replay),
            ])
        );
        let _ = writeln!(
            md,
            "Overhead per create: p50 **{:.2} ms** (target ≤ 3: {}), p99 **{:.2} ms** (target ≤ 10: {}). \
             Replay p50 **{:.2} ms** (target ≤ 1: {}). Highest rate: **{:.0} creates/s** with {} errors \
             (target ≥ 300: {}).",
            overhead(0.5),
            verdict(overhead(0.5) <= 3.0),
            overhead(0.99),
            verdict(overhead(0.99) <= 10.0),
            replay.ms(0.5),
            verdict(replay.ms(0.5) <= 1.0),
            most.throughput(),
            most.errors,
            verdict(most.throughput() >= 300.0),
        );
        let _ = writeln!(md, "\n{}", commits_table(&commits));
        Ok(Section {
            id: "create",
            markdown: md,
            json: json!({"rate": rate, "direct": base.json(), "create": created.json(),
                         "replay": replay.json(), "closed_loop": most.json(),
                         "commits": commits.iter().map(|c| match c {
                             Ok(c) => c.json(),
                             Err(e) => json!({"error": e}),
                         }).collect::<Vec<_>>()}),
        })
    }

    /// Durable commits per create with `Idempotency-Key`, in a fresh world: the commits an
    /// idle server makes in one window, then those of a window holding `COMMIT_RATE` creates/s
    /// for `COMMIT_PHASE` (both windows equally long), the difference divided by the creates.
    async fn commits_per_create(&mut self, postgres: bool) -> Result<Commits, String> {
        let world = self.world(postgres)?;
        let corral = self.serve(&world).await?;
        self.fake.set_delay(Duration::ZERO);
        let creator = {
            let (c, key) = (self.client.clone(), world.api_key.clone());
            let url = format!("{}/v1/sandboxes", corral.base);
            move |i: u64| -> Send {
                Box::pin(finish(
                    c.post(&url)
                        .bearer_auth(&key)
                        .header("idempotency-key", format!("commits-{i}"))
                        .json(&json!({"provider": "morph"})),
                    201,
                ))
            }
        };
        // A few creates first, so the pool's connections and the key cache are warm.
        for i in 0..5 {
            if !creator(u64::MAX - i).await {
                return Err("a warm-up create failed".into());
            }
        }
        let settle = if postgres {
            PG_STATS_SETTLE
        } else {
            Duration::from_secs(1)
        };
        let window = COMMIT_PHASE + settle;
        tokio::time::sleep(settle).await;
        let a = self.tally(&world, postgres).await?;
        tokio::time::sleep(window).await;
        let b = self.tally(&world, postgres).await?;
        let started = Instant::now();
        let run = open_loop(COMMIT_RATE, COMMIT_PHASE, creator).await;
        tokio::time::sleep(window.saturating_sub(started.elapsed())).await;
        let c = self.tally(&world, postgres).await?;
        let elapsed = started.elapsed();
        if a.salts != c.salts {
            return Err("the WAL restarted after a checkpoint while commits were counted".into());
        }
        Ok(Commits {
            postgres,
            creates: run.hist.len(),
            errors: run.errors,
            window,
            elapsed,
            idle: (
                b.commits.saturating_sub(a.commits),
                b.other.saturating_sub(a.other),
            ),
            during: (
                c.commits.saturating_sub(b.commits),
                c.other.saturating_sub(b.other),
            ),
        })
    }

    /// The commit counter of the world's database now.
    async fn tally(&self, world: &World, postgres: bool) -> Result<Tally, String> {
        if postgres {
            let base = self
                .opts
                .postgres
                .as_deref()
                .ok_or("counting PostgreSQL commits needs --postgres")?
                .trim_end_matches('/');
            let c = dbstat::pg_counters(&format!("{base}/postgres"), "corral_bench").await?;
            Ok(Tally {
                commits: c.xact_commit,
                other: c.wal_sync,
                salts: None,
            })
        } else {
            let w = dbstat::wal_commits(&dbstat::wal_path(&world.dir.join("corral.db")))?;
            Ok(Tally {
                commits: w.commits,
                other: w.frames,
                salts: Some(w.salts),
            })
        }
    }

    // --- scenario 3 ------------------------------------------------------------------------

    async fn list(&mut self) -> Result<Section, String> {
        let backends: &[bool] = if self.opts.postgres.is_some() {
            &[false, true]
        } else {
            &[false]
        };
        let mut worlds = Vec::new();
        for &pg in backends {
            for &n in &self.opts.records.clone() {
                let world = self.world(pg)?;
                seed(&world, n).await?;
                let corral = self.serve(&world).await?;
                // Every 200th record's cursor, so the load reads pages all along the list.
                let cursors = self.cursors(&corral, &world).await?;
                let target = reads::Target::new(
                    &self.client,
                    &corral.base,
                    &world.api_key,
                    self.opts.workers,
                    self.opts.phase,
                );
                let rate = (self.opts.rate / 2).max(1);
                worlds.push(target.measure(pg, n, cursors, rate).await?);
            }
        }
        let (markdown, json) = reads::section(&worlds, self.opts.workers, self.opts.phase);
        Ok(Section {
            id: "list",
            markdown,
            json,
        })
    }

    /// The cursors of every page of 200 (and `None` for the first page).
    async fn cursors(&self, corral: &Corral, world: &World) -> Result<Vec<Option<String>>, String> {
        let mut cursors = vec![None];
        loop {
            let mut url = format!("{}/v1/sandboxes?limit=200", corral.base);
            if let Some(Some(c)) = cursors.last() {
                let _ = write!(url, "&cursor={c}");
            }
            let body: Value = self
                .client
                .get(url)
                .bearer_auth(&world.api_key)
                .send()
                .await
                .map_err(|e| format!("list failed: {e}"))?
                .json()
                .await
                .map_err(|e| format!("list answer: {e}"))?;
            match body["nextCursor"].as_str() {
                Some(c) => cursors.push(Some(c.to_owned())),
                None => return Ok(cursors),
            }
        }
    }

    // --- scenario 5 ------------------------------------------------------------------------

    async fn local(&mut self) -> Result<Section, String> {
        let measured = local_exec::measure(self.opts.iterations).await?;
        let (local, plain) = (&measured.exec, &measured.plain);
        let world = self.world(false)?;
        let corral = self.serve(&world).await?;
        let id = commands::create_local(&self.client, &corral.base, &world.api_key).await?;
        let exec = post(
            &self.client,
            format!("{}/v1/sandboxes/{id}/exec", corral.base),
            &world.api_key,
            json!({"command": "true"}),
        );
        self.warm(post(
            &self.client,
            format!("{}/v1/sandboxes/{id}/exec", corral.base),
            &world.api_key,
            json!({"command": "true"}),
        ))
        .await;
        let http = closed_loop(1, self.opts.phase, exec).await;
        // Deleted, so the server (killed at the end of the run, with no chance to clean up)
        // leaves no sandbox filesystem mounted behind.
        let _ = self
            .client
            .delete(format!("{}/v1/sandboxes/{id}", corral.base))
            .bearer_auth(&world.api_key)
            .send()
            .await;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let md = format!(
            "## 5. `local` exec of `true` vs a plain spawn, and create\n\n\
             One at a time: {} timed runs (after {} warm-up runs) of each provider-level exec \
             series, {} s of back-to-back requests over HTTP, and {} creates (after 5 warm-up \
             creates), each with its own 1 GiB disk image and deleted before the next; the \
             first exec in each of those sandboxes starts its init.\n\n\
             | series | runs | p50 (ms) | p99 (ms) | target p50 |\n| --- | ---: | ---: | ---: | --- |\n\
             | plain `sh -c true` spawn (`tokio::process`, baseline) | {} | {:.2} | {:.2} | |\n\
             | `LocalProvider::exec` | {} | {:.2} | {:.2} | ≤ 3 ms: {} |\n\
             | `POST /v1/sandboxes/{{id}}/exec` on `local` | {} | {:.2} | {:.2} | ≤ 4 ms: {} |\n\
             | `LocalProvider::create` (1 GiB disk image) | {} | {:.2} | {:.2} | ≤ 20 ms: {} |\n\
             | first `LocalProvider::exec` in a new sandbox (its init starts) | {} | {:.2} | {:.2} | |\n\n\
             Ratios of medians: provider exec / plain **{:.2}×**, HTTP exec / provider exec \
             **{:.2}×**.\n",
            self.opts.iterations,
            local_exec::WARM_UP,
            self.opts.phase.as_secs(),
            measured.creates,
            self.opts.iterations,
            ms(plain.p50),
            ms(plain.p99),
            self.opts.iterations,
            ms(local.p50),
            ms(local.p99),
            verdict(ms(local.p50) <= 3.0),
            http.hist.len(),
            http.ms(0.5),
            http.ms(0.99),
            verdict(http.ms(0.5) <= 4.0),
            measured.creates,
            ms(measured.create.p50),
            ms(measured.create.p99),
            verdict(ms(measured.create.p50) <= 20.0),
            measured.creates,
            ms(measured.first_exec.p50),
            ms(measured.first_exec.p99),
            ms(local.p50) / ms(plain.p50),
            http.ms(0.5) / ms(local.p50),
        );
        Ok(Section {
            id: "local-exec",
            markdown: md,
            json: json!({
                "plain_p50_ms": ms(plain.p50), "plain_p90_ms": ms(plain.p90),
                "plain_p99_ms": ms(plain.p99), "plain_mean_ms": ms(plain.mean),
                "provider_p50_ms": ms(local.p50), "provider_p90_ms": ms(local.p90),
                "provider_p99_ms": ms(local.p99), "provider_mean_ms": ms(local.mean),
                "create_p50_ms": ms(measured.create.p50), "create_p90_ms": ms(measured.create.p90),
                "create_p99_ms": ms(measured.create.p99), "create_mean_ms": ms(measured.create.mean),
                "first_exec_p50_ms": ms(measured.first_exec.p50),
                "first_exec_p99_ms": ms(measured.first_exec.p99),
                "http": http.json(),
            }),
        })
    }

    // --- scenario 5b -----------------------------------------------------------------------

    async fn commands(&mut self) -> Result<Section, String> {
        let pipe = commands::pipe_baseline().await?;
        let world = self.world(false)?;
        let corral = self.serve(&world).await?;
        let (base, key) = (corral.base.clone(), world.api_key.clone());
        let sbx = commands::create_local(&self.client, &base, &key).await?;
        // Warm: the sandbox's init starts at its first command.
        commands::through_corral(&self.client, &base, &key, &sbx).await?;
        let sse = commands::through_corral(&self.client, &base, &key, &sbx).await?;

        // Memory while many clients follow one command (every line to every client).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = corral.rss_mib().unwrap_or(f64::NAN);
        let slow = "i=0; while [ $i -lt 100 ]; do echo line-$i; i=$((i+1)); sleep 0.1; done";
        let cmd = commands::start(&self.client, &base, &key, &sbx, slow).await?;
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..commands::STREAMS {
            let (client, base, key, sbx, cmd) = (
                self.client.clone(),
                base.clone(),
                key.clone(),
                sbx.clone(),
                cmd.clone(),
            );
            tasks.spawn(
                async move { commands::follow(&client, &base, &key, &sbx, &cmd, |_| {}).await },
            );
        }
        let mut peak = idle;
        let mut complete = 0;
        loop {
            peak = peak.max(corral.rss_mib().unwrap_or(0.0));
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(Ok(Ok(_))) => complete += 1,
                    Some(_) => {}
                    None => break,
                },
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        let _ = self
            .client
            .delete(format!("{base}/v1/sandboxes/{sbx}"))
            .bearer_auth(&key)
            .send()
            .await;
        let ms = commands::ms;
        let md = format!(
            "## 5b. Commands: a chunk written in a `local` sandbox to its SSE event, and 200 followers\n\n\
             A command prints the wall clock (`date +%s%N`) every 20 ms, {lines} times; each \
             line's delay is its arrival at the reader minus the time it carries (the sandbox \
             shares the host's clock). Baseline: the same script as a plain process on the host, \
             read from its stdout pipe. Through Corral: started with `POST …/commands`, followed \
             with `GET …/output` as Server-Sent Events (the capture journals each chunk in \
             SQLite before any reader sees it).\n\n\
             | series | lines | p50 (ms) | p99 (ms) | max (ms) |\n| --- | ---: | ---: | ---: | ---: |\n\
             | pipe on the host (baseline) | {} | {:.2} | {:.2} | {:.2} |\n\
             | `local` command → journal → SSE | {} | {:.2} | {:.2} | {:.2} |\n\n\
             {streams} clients following one command (100 lines over 10 s) through SSE: \
             resident memory {idle:.1} MiB before, peak {peak:.1} MiB (+{:.1} MiB, {:.0} KiB \
             per stream); {complete} of {streams} streams read to the exit event.\n",
            pipe.len(),
            ms(&pipe, 0.5),
            ms(&pipe, 0.99),
            pipe.max() as f64 / 1000.0,
            sse.len(),
            ms(&sse, 0.5),
            ms(&sse, 0.99),
            sse.max() as f64 / 1000.0,
            peak - idle,
            (peak - idle) * 1024.0 / commands::STREAMS as f64,
            lines = commands::LINES,
            streams = commands::STREAMS,
        );
        Ok(Section {
            id: "commands",
            markdown: md,
            json: json!({
                "pipe_p50_ms": ms(&pipe, 0.5), "pipe_p99_ms": ms(&pipe, 0.99),
                "sse_p50_ms": ms(&sse, 0.5), "sse_p99_ms": ms(&sse, 0.99),
                "sse_max_ms": sse.max() as f64 / 1000.0, "lines": sse.len(),
                "streams": commands::STREAMS, "streams_complete": complete,
                "idle_rss_mib": idle, "peak_rss_mib": peak,
            }),
        })
    }

    // --- scenario 6 ------------------------------------------------------------------------

    async fn memory(&mut self) -> Result<Section, String> {
        let world = self.world(false)?;
        // The first start migrates; the timed ones find the database as it is.
        drop(self.serve(&world).await?);
        let mut ready = Vec::new();
        for _ in 0..5 {
            ready.push(self.serve(&world).await?.ready_after);
        }
        ready.sort();
        let ready_ms = ready[ready.len() / 2].as_secs_f64() * 1000.0;
        let corral = self.serve(&world).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = corral.rss_mib().unwrap_or(f64::NAN);
        let (size, breakdown) = (
            lean::binary_bytes(&server::binary()),
            lean::breakdown(corral.pid()),
        );
        self.fake.set_delay(Duration::ZERO);
        let boxes = self.sandboxes(&corral, &world, 10).await?;
        let slow = Duration::from_secs(2);
        self.fake.set_delay(slow);
        let in_flight = 1000;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..in_flight {
            let req = self
                .client
                .post(format!(
                    "{}/v1/sandboxes/{}/exec",
                    corral.base,
                    boxes[i % boxes.len()].0
                ))
                .bearer_auth(&world.api_key)
                .json(&json!({"command": "true"}));
            tasks.spawn(finish(req, 200));
        }
        let mut peak = 0.0f64;
        let mut ok = 0;
        loop {
            peak = peak.max(corral.rss_mib().unwrap_or(0.0));
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(Ok(true)) => ok += 1,
                    Some(_) => {}
                    None => break,
                },
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        self.fake.set_delay(Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = corral.rss_mib().unwrap_or(f64::NAN);
        let md = format!(
            "## 6. Memory and start-up\n\n\
             | figure | measured | target |\n| --- | ---: | --- |\n\
             | RSS idle, just after start (SQLite) | {idle:.1} MiB | ≤ 20 MiB: {} |\n\
             {}\
             | peak RSS with {in_flight} execs in flight (fake answers after {} s; {ok} succeeded) | {peak:.1} MiB | ≤ 100 MiB: {} |\n\
             | RSS idle again after those | {after:.1} MiB | |\n\
             | process start to first `200` from `/readyz`, existing database (median of {}) | {ready_ms:.1} ms | ≤ 150 ms: {} |\n",
            verdict(idle <= 20.0),
            lean::rows(size, breakdown),
            slow.as_secs(),
            verdict(peak <= 100.0 && ok == in_flight),
            ready.len(),
            verdict(ready_ms <= 150.0),
        );
        Ok(Section {
            id: "memory",
            markdown: md,
            json: json!({"idle_rss_mib": idle, "peak_rss_mib": peak, "in_flight": in_flight,
                         "succeeded": ok, "rss_after_mib": after, "ready_ms": ready_ms,
                         "lean": lean::to_json(size, breakdown),
                         "ready_all_ms": ready.iter().map(|d| d.as_secs_f64() * 1000.0).collect::<Vec<_>>()}),
        })
    }

    // --- scenario 7 ------------------------------------------------------------------------

    async fn scale(&mut self) -> Result<Section, String> {
        let world = self.world(true)?;
        let one = self.serve(&world).await?;
        self.fake.set_delay(Duration::ZERO);
        let boxes = Arc::new(self.sandboxes(&one, &world, 50).await?);
        let load = |bases: Vec<String>| {
            let (c, b, key) = (self.client.clone(), boxes.clone(), world.api_key.clone());
            move |i: u64| -> Send {
                let base = &bases[(i as usize) % bases.len()];
                let (id, _) = &b[(i as usize / bases.len()) % b.len()];
                Box::pin(finish(
                    c.get(format!("{base}/v1/sandboxes/{id}")).bearer_auth(&key),
                    200,
                ))
            }
        };
        self.warm(load(vec![one.base.clone()])).await;
        let (w, d) = (self.opts.workers, self.opts.phase);
        let every = Duration::from_millis(50);
        let rounds = u32::try_from(d.as_millis() / every.as_millis()).unwrap_or(u32::MAX);
        let servers = [&one];
        let ((single, cpu1), act1) = tokio::join!(
            measure_cpu(&servers, closed_loop(w, d, load(vec![one.base.clone()]))),
            dbstat::sample_activity(&world.database_url, every, rounds),
        );
        let two = self.serve(&world).await?;
        self.warm(load(vec![two.base.clone()])).await;
        let servers = [&one, &two];
        let ((pair, cpu2), act2) = tokio::join!(
            measure_cpu(
                &servers,
                closed_loop(w, d, load(vec![one.base.clone(), two.base.clone()])),
            ),
            dbstat::sample_activity(&world.database_url, every, rounds),
        );
        let row = |name: &str, r: &Run, cpu: &Cpu| {
            format!(
                "| {name} | {:.0} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} |",
                r.throughput(),
                r.ms(0.5),
                r.ms(0.99),
                r.errors,
                cpu.corral / r.elapsed.as_secs_f64(),
                cpu.postgres / r.elapsed.as_secs_f64(),
                cpu.load / r.elapsed.as_secs_f64(),
            )
        };
        let md = format!(
            "## 7. Scale-out: two replicas on one PostgreSQL vs one\n\n\
             `GET /v1/sandboxes/{{id}}` (registry read, provider get, status write) over 50 \
             sandboxes, closed loop, {w} connections, {} s; with two replicas the connections \
             alternate between them. CPU in cores busy (CPU seconds / wall seconds) of the \
             `corral` processes, every `postgres` process, and the load generator with the fake \
             provider (this process).\n\n\
             | configuration | req/s | p50 (ms) | p99 (ms) | errors | corral CPU | postgres CPU | load generator + fake CPU |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n{}\n{}\n\n\
             Two replicas / one: **{:.2}×** the throughput.\n\n{}",
            d.as_secs(),
            row("one replica", &single, &cpu1),
            row("two replicas", &pair, &cpu2),
            pair.throughput() / single.throughput(),
            activity_tables(every, &[("one replica", &act1), ("two replicas", &act2)]),
        );
        let act_json = |a: &Result<dbstat::Activity, String>| match a {
            Ok(a) => a.json(),
            Err(e) => json!({"error": e}),
        };
        Ok(Section {
            id: "scale",
            markdown: md,
            json: json!({"one": single.json(), "two": pair.json(),
                         "cpu_one": cpu1.json(), "cpu_two": cpu2.json(),
                         "activity_one": act_json(&act1), "activity_two": act_json(&act2)}),
        })
    }
}

/// One reading of a database's commit counter: PostgreSQL's `xact_commit` and `wal_sync`, or
/// a SQLite WAL's commit records and frames (with the salts that tell a restarted WAL).
#[derive(Clone, Copy)]
struct Tally {
    commits: u64,
    other: u64,
    salts: Option<(u32, u32)>,
}

/// The commits counted around a series of creates (see `Bench::commits_per_create`).
struct Commits {
    postgres: bool,
    creates: u64,
    errors: u64,
    /// Length of the idle window; the create window is as long or (if answers came late) longer.
    window: Duration,
    elapsed: Duration,
    /// (commits, WAL flushes or frames) in the idle window.
    idle: (u64, u64),
    /// The same in the create window.
    during: (u64, u64),
}

impl Commits {
    /// Per create, net of the idle rate over the create window: (commits, flushes or frames).
    fn per_create(&self) -> (f64, f64) {
        let scale = self.elapsed.as_secs_f64() / self.window.as_secs_f64();
        let net = |during: u64, idle: u64| {
            (during as f64 - idle as f64 * scale) / (self.creates.max(1) as f64)
        };
        (
            net(self.during.0, self.idle.0),
            net(self.during.1, self.idle.1),
        )
    }

    fn json(&self) -> Value {
        let (commits, other) = self.per_create();
        json!({"database": if self.postgres { "postgresql" } else { "sqlite" },
               "creates": self.creates, "errors": self.errors,
               "idle_window_s": self.window.as_secs_f64(), "create_window_s": self.elapsed.as_secs_f64(),
               "idle_commits": self.idle.0, "create_window_commits": self.during.0,
               "commits_per_create": commits,
               if self.postgres { "idle_wal_syncs" } else { "idle_wal_frames" }: self.idle.1,
               if self.postgres { "create_window_wal_syncs" } else { "create_window_wal_frames" }: self.during.1,
               if self.postgres { "wal_syncs_per_create" } else { "wal_frames_per_create" }: other})
    }
}

fn commits_table(rows: &[Result<Commits, String>]) -> String {
    let mut out = format!(
        "Durable commits per create: in a fresh world, {COMMIT_RATE} creates/s for {} s \
         (sequential keys, zero-delay fake). First the idle server's commits are counted over \
         a window as long as the create window (the load plus {} s on PostgreSQL, whose \
         backends report statistics up to 10 s late; plus 1 s on SQLite), then the create \
         window's; the idle count, scaled to the create window's length, is subtracted before \
         dividing by the creates. PostgreSQL: `pg_stat_database.xact_commit` of the server's \
         database (every committed transaction, read-only ones included) and \
         `pg_stat_wal.wal_sync` (WAL flushes to disk, whole server). SQLite: commit records \
         (frames that end a transaction) in the `-wal` file, read from the file; the WAL must \
         not restart during the count (else no figure), and with `synchronous = NORMAL` a WAL \
         commit is written at once but reaches the disk at the next checkpoint.\n\n\
         | database | creates (errors) | commits, idle window | commits, create window | **commits per create** | WAL flushes (PostgreSQL) or pages written (SQLite) per create |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
        COMMIT_PHASE.as_secs(),
        PG_STATS_SETTLE.as_secs(),
    );
    for (i, row) in rows.iter().enumerate() {
        let _ = match row {
            Ok(c) => {
                let (commits, other) = c.per_create();
                writeln!(
                    out,
                    "| {} | {} ({}) | {} in {:.1} s | {} in {:.1} s | **{commits:.2}** | {other:.2} |",
                    if c.postgres { "PostgreSQL" } else { "SQLite" },
                    c.creates,
                    c.errors,
                    c.idle.0,
                    c.window.as_secs_f64(),
                    c.during.0,
                    c.elapsed.as_secs_f64(),
                )
            }
            Err(e) => writeln!(
                out,
                "| {} | not measured: {e} | | | | |",
                if i == 0 { "SQLite" } else { "PostgreSQL" }
            ),
        };
    }
    out
}

/// The `pg_stat_activity` samples of the scale-out runs: by wait event type, then in detail.
fn activity_tables(every: Duration, runs: &[(&str, &Result<dbstat::Activity, String>)]) -> String {
    let mut out = format!(
        "What the servers' PostgreSQL connections were doing: `pg_stat_activity` sampled every \
         {} ms during each run (from one `psql` session looping in the database, so a round \
         takes a little longer than that), each connection of the `corral` processes counted \
         once per round. `Lock` is a wait for a row or transaction another transaction holds \
         (where contention across replicas would show); `LWLock` `WALWrite` and `IO` \
         `WALSync` are commits waiting for the WAL to reach the disk; `Client` `ClientRead` \
         is an idle connection (or one waiting for its server's next statement); `none` \
         while `active` is a connection executing. Reported, not judged.\n\n",
        every.as_millis()
    );
    for (name, act) in runs {
        match act {
            Ok(a) => {
                let total = a.total().max(1) as f64;
                let _ = writeln!(
                    out,
                    "{name}: {} rounds, {} connection-samples.\n\n\
                     | state | wait event type | wait event | samples | share |\n\
                     | --- | --- | --- | ---: | ---: |",
                    a.rounds,
                    a.total()
                );
                for (state, kind, event, n) in &a.counts {
                    let _ = writeln!(
                        out,
                        "| {state} | {kind} | {event} | {n} | {:.1} % |",
                        *n as f64 * 100.0 / total
                    );
                }
                let by_type = a
                    .by_type()
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(out, "\nBy wait event type: {by_type}.\n");
            }
            Err(e) => {
                let _ = writeln!(out, "{name}: not sampled: {e}\n");
            }
        }
    }
    out
}

/// CPU seconds spent during a run, by party.
struct Cpu {
    corral: f64,
    postgres: f64,
    load: f64,
}

impl Cpu {
    fn json(&self) -> Value {
        json!({"corral_s": self.corral, "postgres_s": self.postgres, "load_generator_s": self.load})
    }
}

async fn measure_cpu(servers: &[&Corral], run: impl Future<Output = Run>) -> (Run, Cpu) {
    let sample = || Cpu {
        corral: servers.iter().map(|s| server::cpu_seconds(s.pid())).sum(),
        postgres: server::cpu_seconds_of("postgres"),
        load: server::cpu_seconds(std::process::id()),
    };
    let before = sample();
    let r = run.await;
    let after = sample();
    (
        r,
        Cpu {
            corral: after.corral - before.corral,
            postgres: after.postgres - before.postgres,
            load: after.load - before.load,
        },
    )
}

/// Fills the world's project with `n` records (a quarter of them tombstones), created a
/// microsecond apart in groups of four that share a timestamp (so the id tiebreak counts).
async fn seed(world: &World, n: usize) -> Result<(), String> {
    let db = Database::connect(DatabaseConfig::new(world.database_url.clone()))
        .await
        .map_err(|e| format!("cannot open the database to seed it: {e}"))?;
    let key = MasterKey::generate().map_err(|e| format!("master key: {e}"))?;
    let registry = Registry::new(db, key);
    let project = world
        .project_id
        .parse()
        .map_err(|_| format!("unexpected project id {}", world.project_id))?;
    let base = chrono::Utc::now() - chrono::TimeDelta::days(1);
    let records: Vec<SandboxRecord> = (0..n)
        .map(|i| {
            let at = base + chrono::TimeDelta::microseconds((i / 4) as i64);
            let deleted = i % 4 == 0;
            SandboxRecord {
                id: SandboxId::new(Provider::Morph),
                project_id: project,
                native_id: Some(format!("morphvm_seed{i:08}")),
                status: if deleted {
                    SandboxStatus::Deleted
                } else {
                    SandboxStatus::Running
                },
                status_observed_at: at,
                metadata: SandboxMetadata {
                    native_provider_id: Some(format!("morphvm_seed{i:08}")),
                    operation_id: OperationId::new(),
                    credential_source: CredentialSource::Profile,
                    workspace: None,
                    team_id: None,
                    project_id: None,
                    bridge_url: None,
                },
                create_state: CreateState::Created,
                created_at: at,
                updated_at: at,
                deleted_at: deleted.then_some(at),
                expires_at: None,
                end_reason: None,
                auto_resume: false,
                idle_stop_seconds: None,
                snapshot_id: None,
                last_activity_at: at,
            }
        })
        .collect();
    for chunk in records.chunks(20_000) {
        registry
            .import_sandboxes(chunk)
            .await
            .map_err(|e| format!("seeding failed: {e}"))?;
    }
    Ok(())
}

/// Drops and re-creates database `corral_bench` on the server at `base` (with `psql`);
/// returns its URL.
fn recreate_pg_database(base: &str) -> Result<String, String> {
    let base = base.trim_end_matches('/');
    let admin = format!("{base}/postgres");
    for sql in [
        "DROP DATABASE IF EXISTS corral_bench WITH (FORCE)",
        "CREATE DATABASE corral_bench",
    ] {
        let out = std::process::Command::new("psql")
            .args([admin.as_str(), "-q", "-c", sql])
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "psql `{sql}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(format!("{base}/corral_bench"))
}

// --- reporting -------------------------------------------------------------------------------

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

fn latency_table(rows: &[(&str, &Run)]) -> String {
    let mut out = String::from(
        "| series | requests | errors | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (name, r) in rows {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            r.hist.len(),
            r.errors,
            r.ms(0.5),
            r.ms(0.9),
            r.ms(0.99),
            r.hist.max() as f64 / 1000.0
        );
    }
    out
}

fn throughput_table(rows: &[(&str, &Run)]) -> String {
    let mut out = String::from(
        "| route | requests | errors | req/s | p50 (ms) | p99 (ms) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (name, r) in rows {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {:.0} | {:.3} | {:.3} |",
            r.hist.len(),
            r.errors,
            r.throughput(),
            r.ms(0.5),
            r.ms(0.99)
        );
    }
    out
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

fn run_section(
    opts: &Options,
    started: chrono::DateTime<chrono::Utc>,
    load_before: &str,
) -> Section {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "?".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    let machine = machine();
    let load_after = load_average();
    let md = format!(
        "## The run\n\n\
         Measured {} with `{}` (release build), commit `{commit}`{}, scenarios: {}.\n\n\
         Machine: {machine}. Load average (1, 5, 15 min) before the run: {load_before}; after: \
         {load_after}. The load generator, the fake provider, Corral and the database share \
         the machine's cores, so absolute figures are lower than on separate machines; the \
         ratios compare series measured the same way in the same run.\n",
        started.format("%Y-%m-%d %H:%M UTC"),
        opts.command,
        if dirty {
            " plus uncommitted changes"
        } else {
            ""
        },
        opts.only.join(", "),
    );
    Section {
        id: "run",
        markdown: md,
        json: json!({"started": started.to_rfc3339(), "command": opts.command, "commit": commit,
                     "dirty": dirty, "machine": machine, "load_before": load_before,
                     "load_after": load_after}),
    }
}

/// CPU model, core count, memory and kernel, from `/proc`.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kb| format!("{:.0}", kb as f64 / 1024.0 / 1024.0),
        );
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    format!("{model}, {cores} cores, {mem_gib} GiB RAM, Linux {kernel}")
}

/// Replaces the section `id` of the doc (between its markers), or appends it.
fn update_doc(path: &Path, id: &str, body: &str) -> Result<(), String> {
    let (start, end) = (
        format!("<!-- bench:{id}:start -->"),
        format!("<!-- bench:{id}:end -->"),
    );
    let section = format!("{start}\n{}\n{end}\n", body.trim_end());
    let old = std::fs::read_to_string(path).unwrap_or_else(|_| {
        "# Benchmarks\n\nNumbers measured on the project's machines by `cargo xtask bench`; \
         each section is rewritten by the run that measured it.\n\n"
            .to_owned()
    });
    let new = match (old.find(&start), old.find(&end)) {
        (Some(s), Some(e)) if e > s => {
            format!(
                "{}{}{}",
                &old[..s],
                section.trim_end(),
                &old[e + end.len()..]
            )
        }
        _ => format!(
            "{}\n{section}",
            old.trim_end_matches('\n').to_owned() + "\n"
        ),
    };
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_not_repeated_and_others_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("b.md");
        update_doc(&doc, "x", "first").unwrap();
        update_doc(&doc, "y", "other").unwrap();
        update_doc(&doc, "x", "second").unwrap();
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(text.contains("second") && !text.contains("first"), "{text}");
        assert!(text.contains("other"));
        assert_eq!(text.matches("<!-- bench:x:start -->").count(), 1);
    }

    #[test]
    fn unknown_scenarios_and_arguments_are_refused() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(parse(&args(&["--only", "auth,nope"])).is_err());
        assert!(parse(&args(&["--frobnicate"])).is_err());
        let opts = parse(&args(&[
            "--only",
            "auth,list",
            "--records",
            "10,20",
            "--seconds",
            "2",
        ]))
        .unwrap();
        assert_eq!(opts.only, ["auth", "list"]);
        assert_eq!(opts.records, [10, 20]);
        assert_eq!(opts.phase, Duration::from_secs(2));
    }
}
