//! Load with invariants (issue 14): the real `corral serve` binary driven by a seeded random mix
//! of create (keyed, replayed, conflicting, abandoned by the client mid-request and retried,
//! unkeyed), get, exec, file write/read, paginated
//! list, delete, cross-project probes and bad input, from several concurrent clients over
//! several projects, on `local` and on Morph's loopback fake, with faults injected at the fake.
//! Afterwards: every acknowledged sandbox is in its project's registry and in no other, the
//! registry and each provider agree (no lost sandbox, no orphan), every 5xx was caused by an
//! injected fault, and the server's peak memory stayed under a bound.
//!
//! Each client owns the sandboxes it creates (projects are shared), so every answer has one
//! exact expectation: a file reads back what was last written, a deleted sandbox is a
//! tombstone, a fault armed for one sandbox's path is the answer to that sandbox's next call.
//! Create faults can only be aimed by path prefix, which Morph's exec shares, so a create
//! fault is armed and sent while no other client has a POST in flight to the fake (a
//! read-write gate).
//!
//! Size: `CORRAL_LOAD_OPS` operations (default 2 000), `CORRAL_LOAD_CLIENTS` clients
//! (default 8), `CORRAL_LOAD_SEED` (default fixed; the seed is printed). For example
//! `CORRAL_LOAD_OPS=50000 cargo nextest run -p corral -E 'test(load::)' --no-capture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_provider_testkit::fake::{Fault, FaultKind};
use reqwest::header::HeaderMap;
use reqwest::{Client, Method};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use corral_registry::testing::TestDb;

use crate::serve::start;

/// The Morph key every project's stored profile holds.
const MORPH_KEY: &str = "load-morph-key-3c91f0";
const DEFAULT_OPS: usize = 2_000;
const DEFAULT_CLIENTS: usize = 8;
const PROJECTS: usize = 6;
/// A client with more live sandboxes than this deletes rather than creates.
const MAX_LIVE_PER_CLIENT: usize = 12;
/// At most this many live `local` sandboxes per client (each holds a loop-mounted image).
const MAX_LIVE_LOCAL_PER_CLIENT: usize = 2;
/// The server's peak resident memory (VmHWM) must stay under this. Measured 2026-11-24 (debug
/// build): 55-58 MiB at 2 000 operations, 60 MiB at 10 000 and 65 MiB at 20 000 (16 clients).
const RSS_BOUND_MIB: u64 = 256;
/// `[limits] create_wait_seconds`: a create answered later than this is
/// `sandbox_create_outcome_unknown` while its recording goes on.
/// Long enough that a create on an overloaded machine is not cut off by it (a 20 000-operation
/// run on a machine also compiling saw creates pass 5 s).
const CREATE_WAIT_SECONDS: u64 = 15;
/// The lost-answer fault holds the provider's answer this long (past the create wait).
const LOST_ANSWER_DELAY: Duration = Duration::from_secs(18);

/// SplitMix64: a seeded, dependency-free generator (the run must be reproducible by seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` %.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prov {
    Local,
    Morph,
}

impl Prov {
    fn name(self) -> &'static str {
        match self {
            Prov::Local => "local",
            Prov::Morph => "morph",
        }
    }
}

/// A sandbox a client was told exists (a 2xx create or replay).
#[derive(Debug)]
struct Sbx {
    id: String,
    project: usize,
    prov: Prov,
    native: String,
    deleted: bool,
    /// Morph instances are `pending` until first observed; exec needs them ready.
    observed: bool,
    /// Where its files go (`/workspace` on local, the instance's directory on the fake).
    workdir: Option<String>,
    files: BTreeMap<String, String>,
}

/// A fault on the next create, aimed while no other POST reaches the fake.
#[derive(Debug, Clone, Copy)]
enum CreateFault {
    /// The fake answers this status without creating anything.
    Status(u16),
    /// The fake creates the instance, then holds its answer past the create wait.
    LostAnswer,
}

#[derive(Default)]
struct Stats {
    /// Every answer of the server, by status.
    statuses: BTreeMap<u16, usize>,
    /// Operations by kind.
    ops: BTreeMap<&'static str, usize>,
    /// Faults the fake injected, by kind.
    injected: BTreeMap<String, usize>,
    /// 5xx answers the test expected because of an injected fault.
    expected_5xx: usize,
    /// Broken expectations (kept to the first few, with the context to debug them).
    violations: Vec<String>,
    violation_count: usize,
}

struct Shared {
    base: String,
    http: Client,
    /// One API key per project.
    keys: Vec<String>,
    morph: corral_provider_morph::fake::Fake,
    /// Read: a POST to the fake may be in flight. Write: a create fault is being aimed.
    gate: RwLock<()>,
    stats: Mutex<Stats>,
    ops_left: AtomicUsize,
    episodes: Mutex<Vec<CreateFault>>,
    /// Every this many operations, one of `episodes`.
    episode_every: usize,
}

struct Resp {
    status: u16,
    headers: HeaderMap,
    text: String,
    json: Value,
}

impl Resp {
    fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

impl Shared {
    fn violation(&self, what: String) {
        let mut s = self.stats.lock().unwrap();
        s.violation_count += 1;
        if s.violations.len() < 40 {
            s.violations.push(what);
        }
    }

    fn count_op(&self, kind: &'static str) {
        *self.stats.lock().unwrap().ops.entry(kind).or_default() += 1;
    }

    async fn call(
        &self,
        project: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.keys[project]);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                self.violation(format!("{method} {path}: transport error {e}"));
                return Resp {
                    status: 0,
                    headers: HeaderMap::new(),
                    text: String::new(),
                    json: Value::Null,
                };
            }
        };
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        *self
            .stats
            .lock()
            .unwrap()
            .statuses
            .entry(status)
            .or_default() += 1;
        Resp {
            status,
            headers,
            text,
            json,
        }
    }

    /// `POST /v1/sandboxes` with `body` and `headers`.
    async fn create_call(&self, project: usize, body: &Value, headers: &[(&str, &str)]) -> Resp {
        self.call(
            project,
            Method::POST,
            "/v1/sandboxes",
            Some(body.clone()),
            headers,
        )
        .await
    }

    /// Records a violation unless `r` is `status` (and, for an error, `code`).
    fn expect(&self, what: &str, r: &Resp, status: u16, code: Option<&str>) -> bool {
        let ok = r.status == status && code.is_none_or(|c| r.code() == c);
        if !ok {
            self.violation(format!(
                "{what}: expected {status} {}, got {} {}",
                code.unwrap_or(""),
                r.status,
                r.text.chars().take(300).collect::<String>()
            ));
        }
        ok
    }

    /// The next operation's number (counting down), while any are left.
    fn take_op(&self) -> Option<usize> {
        self.ops_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .ok()
    }

    /// The fake's instances, asked directly (not through the server).
    async fn fake_instances(&self, query: &str) -> Vec<Value> {
        let resp = self
            .http
            .get(format!("{}/instance{query}", self.morph.base_url()))
            .bearer_auth(MORPH_KEY)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
        let v: Value = resp.json().await.unwrap();
        v["data"].as_array().unwrap().clone()
    }
}

/// A fault aimed at one Morph sandbox's next call, and what the server must answer.
fn targeted_fault(rng: &mut Rng, native: &str) -> (Fault, u16, &'static str, &'static str) {
    let path = format!("/instance/{native}");
    match rng.below(3) {
        0 => (
            Fault::status(500).on_path(&path),
            502,
            "provider_error",
            "500",
        ),
        1 => (
            Fault::status(503).on_path(&path),
            503,
            "provider_unavailable",
            "503",
        ),
        _ => (
            Fault::status(429).retry_after(1).on_path(&path),
            429,
            "rate_limited",
            "429",
        ),
    }
}

struct Driver {
    n: usize,
    rng: Rng,
    sh: Arc<Shared>,
    mine: Vec<Sbx>,
    /// Registry records of failed creates this client caused, per project.
    failed_records: Vec<usize>,
    seq: usize,
}

impl Driver {
    fn next_token(&mut self) -> String {
        self.seq += 1;
        format!("c{}-{}", self.n, self.seq)
    }

    fn live(&self) -> Vec<usize> {
        (0..self.mine.len())
            .filter(|&i| !self.mine[i].deleted)
            .collect()
    }

    async fn run(&mut self) {
        while let Some(op) = self.sh.take_op() {
            // Create faults are spread evenly over the run.
            if op % self.sh.episode_every == 0 {
                let ep = self.sh.episodes.lock().unwrap().pop();
                if let Some(ep) = ep {
                    self.create_with_fault(ep).await;
                    continue;
                }
            }
            self.step().await;
        }
        if self.n == 0 {
            // Create faults left without a slot (a run of very few operations) run now.
            loop {
                let ep = self.sh.episodes.lock().unwrap().pop();
                let Some(ep) = ep else { break };
                self.create_with_fault(ep).await;
            }
        }
    }

    async fn step(&mut self) {
        let live = self.live();
        let roll = self.rng.below(100);
        if live.is_empty() || (roll < 20 && live.len() < MAX_LIVE_PER_CLIENT) {
            return self.create().await;
        }
        let i = live[self.rng.below(live.len())];
        if live.len() >= MAX_LIVE_PER_CLIENT && roll < 30 {
            return self.delete(i).await;
        }
        if self.mine[i].prov == Prov::Morph && !self.mine[i].observed {
            return self.get(i).await;
        }
        match roll {
            0..=19 => self.get(i).await,
            20..=39 => self.exec(i).await,
            40..=54 => self.write(i).await,
            55..=66 => self.read(i).await,
            67..=76 => self.list().await,
            77..=88 => self.delete(i).await,
            89..=94 => self.probe_other_project(i).await,
            _ => self.bad_input(i).await,
        }
    }

    fn path_of(&self, i: usize) -> String {
        format!("/v1/sandboxes/{}", self.mine[i].id)
    }

    /// Arms a targeted fault on a Morph sandbox now and then; returns what must be answered.
    fn maybe_fault(&mut self, i: usize) -> Option<(u16, &'static str)> {
        if self.mine[i].prov != Prov::Morph || !self.rng.chance(4) {
            return None;
        }
        let native = self.mine[i].native.clone();
        let (fault, status, code, kind) = targeted_fault(&mut self.rng, &native);
        self.sh.morph.server().faults().arm(fault);
        let mut s = self.sh.stats.lock().unwrap();
        *s.injected
            .entry(format!("{kind} on a sandbox call"))
            .or_default() += 1;
        if status >= 500 {
            s.expected_5xx += 1;
        }
        Some((status, code))
    }

    async fn create(&mut self) {
        self.sh.count_op("create");
        let project = self.rng.below(PROJECTS);
        let local_live = self
            .mine
            .iter()
            .filter(|s| !s.deleted && s.prov == Prov::Local)
            .count();
        let prov = if local_live < MAX_LIVE_LOCAL_PER_CLIENT && self.rng.chance(15) {
            Prov::Local
        } else {
            Prov::Morph
        };
        let body = json!({"provider": prov.name()});
        let keyed = self.rng.chance(60);
        let key = format!("load-{}", self.next_token());
        if keyed && self.rng.chance(8) {
            return self.create_abandoned(project, prov, body, &key).await;
        }
        let headers: Vec<(&str, &str)> = if keyed {
            vec![("Idempotency-Key", key.as_str())]
        } else {
            vec![]
        };
        let sent = Instant::now();
        let r = {
            let _g = self.sh.gate.read().await;
            self.sh.create_call(project, &body, &headers).await
        };
        let what = format!("create on {} ({:?})", prov.name(), sent.elapsed());
        if !self.sh.expect(&what, &r, 201, None) {
            return;
        }
        self.acknowledge(project, prov, &r);
        if keyed && self.rng.chance(30) {
            self.sh.count_op("create replay");
            let again = self.sh.create_call(project, &body, &headers).await;
            if self.sh.expect("replay", &again, 200, None)
                && (again.text != r.text
                    || again
                        .headers
                        .get("idempotent-replayed")
                        .is_none_or(|v| v != "true"))
            {
                self.sh.violation(format!(
                    "replay differs: {} vs {} ({:?})",
                    again.text,
                    r.text,
                    again.headers.get("idempotent-replayed")
                ));
            }
        } else if keyed && prov == Prov::Morph && self.rng.chance(10) {
            self.sh.count_op("create conflict");
            let other = json!({"provider": "morph", "image": "snapshot_other"});
            let c = self.sh.create_call(project, &other, &headers).await;
            self.sh
                .expect("conflict", &c, 422, Some("idempotency_conflict"));
        }
    }

    /// A keyed create whose client gives up after a few milliseconds (its connection is
    /// dropped mid-request), then retries with the same key until it is answered: the key
    /// must answer one sandbox, made at most once, whatever point the first attempt reached
    /// (checked with everything else at the end). The gate is held throughout: the abandoned
    /// attempt may still be talking to the fake until the retry is answered.
    async fn create_abandoned(&mut self, project: usize, prov: Prov, body: Value, key: &str) {
        let headers = [("Idempotency-Key", key)];
        let patience = Duration::from_millis(1 + self.rng.below(40) as u64);
        let sh = self.sh.clone();
        let _g = sh.gate.read().await;
        let first = sh.create_call(project, &body, &headers);
        if let Ok(r) = tokio::time::timeout(patience, first).await {
            // Answered before the client gave up: an ordinary create.
            sh.count_op("create answered within a short patience");
            if sh.expect("create answered within its patience", &r, 201, None) {
                self.acknowledge(project, prov, &r);
            }
            return;
        }
        sh.count_op("create abandoned, then retried");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = sh.create_call(project, &body, &headers).await;
            match (r.status, r.code()) {
                (200 | 201, _) => {
                    self.acknowledge(project, prov, &r);
                    return;
                }
                (409, "idempotency_in_progress") if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {
                    sh.expect("retry of an abandoned create", &r, 201, None);
                    return;
                }
            }
        }
    }

    fn acknowledge(&mut self, project: usize, prov: Prov, r: &Resp) {
        let id = r.json["id"].as_str().unwrap_or_default().to_owned();
        let native = r.json["metadata"]["nativeProviderId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if id.is_empty() || native.is_empty() || r.json["provider"] != prov.name() {
            self.sh
                .violation(format!("create answered without an id: {}", r.text));
            return;
        }
        self.mine.push(Sbx {
            id,
            project,
            prov,
            native,
            deleted: false,
            observed: prov == Prov::Local,
            workdir: (prov == Prov::Local).then(|| "/workspace".to_owned()),
            files: BTreeMap::new(),
        });
    }

    /// A create the fake fails (or answers too late), then retries with the same key until
    /// the server answers the sandbox.
    async fn create_with_fault(&mut self, ep: CreateFault) {
        self.sh.count_op("create with a fault");
        let project = self.rng.below(PROJECTS);
        let key = format!("load-fault-{}", self.next_token());
        let body = json!({"provider": "morph"});
        let faults = self.sh.morph.server().faults();
        let on_create = |f: Fault| f.on_method(Method::POST).on_path("/api/instance");
        let sh = self.sh.clone();
        let first = match ep {
            CreateFault::Status(s) => {
                let _g = sh.gate.write().await;
                faults.arm(on_create(Fault::status(s).retry_after(1)));
                sh.call(
                    project,
                    Method::POST,
                    "/v1/sandboxes",
                    Some(body.clone()),
                    &[("Idempotency-Key", &key)],
                )
                .await
            }
            CreateFault::LostAnswer => {
                let g = sh.gate.write().await;
                let seen = sh.morph.server().log().all().len();
                faults.arm(on_create(Fault::new(FaultKind::DelayAfterHandler(
                    LOST_ANSWER_DELAY,
                ))));
                let (sh2, body2, key2) = (sh.clone(), body.clone(), key.clone());
                let pending = tokio::spawn(async move {
                    sh2.call(
                        project,
                        Method::POST,
                        "/v1/sandboxes",
                        Some(body2),
                        &[("Idempotency-Key", &key2)],
                    )
                    .await
                });
                // The gate opens once the fake has created the instance: the fault was taken
                // before its handler ran, so no other POST can take it.
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let log = sh.morph.server().log().all();
                    let op = log[seen.min(log.len())..]
                        .iter()
                        .find(|r| r.method == Method::POST && r.path == "/api/instance")
                        .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
                        .and_then(|b| {
                            b["metadata"][corral_provider_morph::OPERATION_ID_METADATA_KEY]
                                .as_str()
                                .map(str::to_owned)
                        });
                    if let Some(op) = op {
                        let q = format!(
                            "?metadata[{}]={op}",
                            corral_provider_morph::OPERATION_ID_METADATA_KEY
                        );
                        if !sh.fake_instances(&q).await.is_empty() {
                            break;
                        }
                    }
                    assert!(
                        Instant::now() < deadline,
                        "the lost-answer create never arrived"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                drop(g);
                pending.await.unwrap()
            }
        };
        let (kind, status, code) = match ep {
            CreateFault::Status(500) => ("500 on a create", 502, "sandbox_create_outcome_unknown"),
            CreateFault::Status(503) => ("503 on a create", 503, "provider_unavailable"),
            CreateFault::Status(429) => ("429 on a create", 429, "rate_limited"),
            CreateFault::Status(s) => panic!("no expectation for {s}"),
            CreateFault::LostAnswer => (
                "lost answer of a create",
                502,
                "sandbox_create_outcome_unknown",
            ),
        };
        {
            let mut s = sh.stats.lock().unwrap();
            *s.injected.entry(kind.to_owned()).or_default() += 1;
            if status >= 500 {
                s.expected_5xx += 1;
            }
        }
        sh.expect(kind, &first, status, Some(code));
        if matches!(ep, CreateFault::Status(_)) {
            // The record of the refused (or unconfirmed, then failed) create stays listed.
            self.failed_records[project] += 1;
        }
        // Retry with the same key until the server answers the sandbox: a replay of the late
        // answer, or (the create failed) a fresh create. Meanwhile only "wait" answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.sh.count_op("create retry");
            let r = {
                let _g = sh.gate.read().await;
                sh.call(
                    project,
                    Method::POST,
                    "/v1/sandboxes",
                    Some(body.clone()),
                    &[("Idempotency-Key", &key)],
                )
                .await
            };
            match (r.status, r.code()) {
                (200 | 201, _) => {
                    if matches!(ep, CreateFault::LostAnswer)
                        && (r.status != 200
                            || r.headers
                                .get("idempotent-replayed")
                                .is_none_or(|v| v != "true"))
                    {
                        sh.violation(format!(
                            "a lost answer is replayed, not re-created: {} {}",
                            r.status, r.text
                        ));
                    }
                    self.acknowledge(project, Prov::Morph, &r);
                    return;
                }
                (409, "idempotency_in_progress" | "idempotency_outcome_unknown") => {}
                _ => {
                    sh.violation(format!(
                        "retry after {kind}: unexpected {} {}",
                        r.status, r.text
                    ));
                    return;
                }
            }
            if Instant::now() > deadline {
                sh.violation(format!("retry after {kind}: never settled"));
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn get(&mut self, i: usize) {
        self.sh.count_op("get");
        let fault = self.maybe_fault(i);
        let path = self.path_of(i);
        let r = self
            .sh
            .call(self.mine[i].project, Method::GET, &path, None, &[])
            .await;
        if let Some((status, code)) = fault {
            self.sh.expect("get under a fault", &r, status, Some(code));
            return;
        }
        if !self.sh.expect("get", &r, 200, None) {
            return;
        }
        let s = &mut self.mine[i];
        if r.json["id"] != s.id.as_str() {
            self.sh
                .violation(format!("get {} answered {}", s.id, r.text));
        }
        let status = r.json["status"].as_str().unwrap_or_default();
        let ok = if s.deleted {
            status == "deleted"
        } else if s.observed {
            status == "running"
        } else {
            status != "deleted" && status != "failed" && status != "expired"
        };
        if !ok {
            self.sh.violation(format!(
                "get {} (deleted: {}, observed: {}): status {status}",
                s.id, s.deleted, s.observed
            ));
        }
        s.observed = true;
    }

    async fn exec(&mut self, i: usize) {
        self.sh.count_op("exec");
        let fault = self.maybe_fault(i);
        let path = format!("{}/exec", self.path_of(i));
        let token = self.next_token();
        let (command, want_out, want_exit) = if self.mine[i].workdir.is_none() {
            ("pwd".to_owned(), None, 0)
        } else if self.rng.chance(15) {
            ("echo oops >&2; exit 3".to_owned(), Some(String::new()), 3)
        } else {
            (
                format!("printf '%s' \"$T\"-{token}"),
                Some(format!("v-{token}")),
                0,
            )
        };
        let r = {
            let _g = self.sh.gate.read().await;
            self.sh
                .call(
                    self.mine[i].project,
                    Method::POST,
                    &path,
                    Some(json!({"command": command, "env": {"T": "v"}})),
                    &[],
                )
                .await
        };
        if let Some((status, code)) = fault {
            self.sh.expect("exec under a fault", &r, status, Some(code));
            return;
        }
        if !self.sh.expect("exec", &r, 200, None) {
            return;
        }
        let stdout = r.json["stdout"].as_str().unwrap_or_default().to_owned();
        if r.json["exitCode"] != want_exit
            || want_out.as_ref().is_some_and(|w| *w != stdout)
            || (want_exit == 3 && r.json["stderr"] != "oops\n")
        {
            self.sh
                .violation(format!("exec `{command}` answered {}", r.text));
        }
        if want_out.is_none() {
            let dir = stdout.trim().to_owned();
            if dir.starts_with('/') {
                self.mine[i].workdir = Some(dir);
            } else {
                self.sh.violation(format!("pwd answered {}", r.text));
            }
        }
    }

    fn file_path(&mut self, i: usize) -> Option<String> {
        let dir = self.mine[i].workdir.clone()?;
        Some(format!("{dir}/f{}.txt", self.rng.below(3)))
    }

    async fn write(&mut self, i: usize) {
        let Some(file) = self.file_path(i) else {
            return self.exec(i).await;
        };
        self.sh.count_op("write");
        let fault = self.maybe_fault(i);
        let content = format!(
            "content {} {}",
            self.next_token(),
            "x".repeat(self.rng.below(2_000))
        );
        let path = format!("{}/files/write", self.path_of(i));
        let r = {
            let _g = self.sh.gate.read().await;
            self.sh
                .call(
                    self.mine[i].project,
                    Method::POST,
                    &path,
                    Some(json!({"path": file, "content": content})),
                    &[],
                )
                .await
        };
        if let Some((status, code)) = fault {
            // Refused before anything was written: the file keeps its content.
            self.sh
                .expect("write under a fault", &r, status, Some(code));
            return;
        }
        if self.sh.expect("write", &r, 200, None) {
            if r.json["bytesWritten"] != content.len() {
                self.sh.violation(format!("write answered {}", r.text));
            }
            self.mine[i].files.insert(file, content);
        }
    }

    async fn read(&mut self, i: usize) {
        let Some(file) = self.file_path(i) else {
            return self.exec(i).await;
        };
        self.sh.count_op("read");
        let fault = self.maybe_fault(i);
        let path = format!("{}/files/read", self.path_of(i));
        let r = {
            let _g = self.sh.gate.read().await;
            self.sh
                .call(
                    self.mine[i].project,
                    Method::POST,
                    &path,
                    Some(json!({"path": file})),
                    &[],
                )
                .await
        };
        if let Some((status, code)) = fault {
            self.sh.expect("read under a fault", &r, status, Some(code));
            return;
        }
        match self.mine[i].files.get(&file) {
            Some(want) => {
                if self.sh.expect("read", &r, 200, None) && r.json["content"] != want.as_str() {
                    self.sh.violation(format!(
                        "read {file} of {}: {} bytes, not the {} written",
                        self.mine[i].id,
                        r.json["content"].as_str().map_or(0, str::len),
                        want.len()
                    ));
                }
            }
            None => {
                self.sh.expect(
                    "read of a file never written",
                    &r,
                    422,
                    Some("file_operation_failed"),
                );
            }
        }
    }

    async fn delete(&mut self, i: usize) {
        self.sh.count_op("delete");
        let fault = self.maybe_fault(i);
        let path = self.path_of(i);
        let project = self.mine[i].project;
        let r = self
            .sh
            .call(project, Method::DELETE, &path, None, &[])
            .await;
        if let Some((status, code)) = fault {
            // The provider refused: the sandbox is still live (later calls prove it).
            self.sh
                .expect("delete under a fault", &r, status, Some(code));
            return;
        }
        if !self.sh.expect("delete", &r, 200, None) {
            return;
        }
        if r.json["status"] != "deleted" || !r.json["deletedAt"].is_string() {
            self.sh.violation(format!("delete answered {}", r.text));
        }
        self.mine[i].deleted = true;
        // A tombstone: deleting again returns it, exec finds nothing.
        if self.rng.chance(20) {
            self.sh.count_op("delete again");
            let again = self
                .sh
                .call(project, Method::DELETE, &path, None, &[])
                .await;
            if self.sh.expect("delete again", &again, 200, None) && again.json != r.json {
                self.sh
                    .violation(format!("second delete: {} vs {}", again.text, r.text));
            }
        } else if self.rng.chance(20) {
            self.sh.count_op("exec on a tombstone");
            let e = self
                .sh
                .call(
                    project,
                    Method::POST,
                    &format!("{path}/exec"),
                    Some(json!({"command": "true"})),
                    &[],
                )
                .await;
            self.sh
                .expect("exec on a tombstone", &e, 404, Some("sandbox_not_found"));
        }
    }

    /// Walks the pages of a project's registry: newest first, no record twice, and (when the
    /// walk reaches the end) each of this client's sandboxes there listed in its state.
    async fn list(&mut self) {
        let project = self.rng.below(PROJECTS);
        let limit = [3, 20, 100][self.rng.below(3)];
        let mut seen: BTreeMap<String, Value> = BTreeMap::new();
        let mut cursor: Option<String> = None;
        let mut last_created: Option<String> = None;
        // Bounded, so that a long run's walks do not grow with the registry; an unfinished
        // walk checks order and repeats only.
        let mut pages_left = 20;
        let complete = loop {
            if pages_left == 0 {
                break false;
            }
            pages_left -= 1;
            self.sh.count_op("list page");
            let mut path = format!("/v1/sandboxes?limit={limit}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let r = self.sh.call(project, Method::GET, &path, None, &[]).await;
            if !self.sh.expect("list", &r, 200, None) {
                return;
            }
            let items = r.json["items"].as_array().cloned().unwrap_or_default();
            if items.len() > limit {
                self.sh
                    .violation(format!("a page of {} items for limit {limit}", items.len()));
            }
            for it in items {
                let id = it["id"].as_str().unwrap_or_default().to_owned();
                let created = it["createdAt"].as_str().unwrap_or_default().to_owned();
                // RFC 3339 with a fixed format compares as text.
                if last_created.as_ref().is_some_and(|l| created > *l) {
                    self.sh
                        .violation(format!("list not newest first at {id} ({created})"));
                }
                last_created = Some(created);
                if seen.insert(id.clone(), it).is_some() {
                    self.sh.violation(format!("list repeats {id}"));
                }
            }
            match r.json["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break true,
            }
        };
        if !complete {
            return;
        }
        for s in self.mine.iter().filter(|s| s.project == project) {
            match seen.get(&s.id) {
                None => self
                    .sh
                    .violation(format!("{} missing from its project's list", s.id)),
                Some(it) if it["deletedAt"].is_string() != s.deleted => {
                    self.sh.violation(format!(
                        "{} listed with deletedAt {} (deleted: {})",
                        s.id, it["deletedAt"], s.deleted
                    ));
                }
                Some(_) => {}
            }
        }
    }

    /// Another project's key sees nothing of this sandbox and cannot touch it.
    async fn probe_other_project(&mut self, i: usize) {
        self.sh.count_op("probe from another project");
        let other = (self.mine[i].project + 1 + self.rng.below(PROJECTS - 1)) % PROJECTS;
        let path = self.path_of(i);
        let (method, path, body) = match self.rng.below(3) {
            0 => (Method::GET, path, None),
            1 => (
                Method::POST,
                format!("{path}/exec"),
                Some(json!({"command": "true"})),
            ),
            _ => (Method::DELETE, path, None),
        };
        let r = self.sh.call(other, method, &path, body, &[]).await;
        self.sh.expect(
            "a call with another project's key",
            &r,
            404,
            Some("sandbox_not_found"),
        );
    }

    /// Malformed requests are 4xx with their code, never 5xx.
    async fn bad_input(&mut self, i: usize) {
        self.sh.count_op("bad input");
        let project = self.mine[i].project;
        let path = self.path_of(i);
        let (method, path, body, status, code) = match self.rng.below(5) {
            0 => (
                Method::POST,
                "/v1/sandboxes".to_owned(),
                json!({"provider": "local", "bogus": 1}),
                400,
                "invalid_request",
            ),
            1 => (
                Method::POST,
                format!("{path}/exec"),
                json!({"command": ""}),
                400,
                "invalid_request",
            ),
            2 => (
                Method::GET,
                "/v1/sandboxes/sbx_nope".to_owned(),
                Value::Null,
                400,
                "invalid_sandbox_id",
            ),
            3 => (
                Method::GET,
                "/v1/sandboxes?limit=0".to_owned(),
                Value::Null,
                400,
                "invalid_request",
            ),
            _ => (
                Method::POST,
                format!("{path}/files/write"),
                json!({"path": "", "content": "x"}),
                400,
                "invalid_request",
            ),
        };
        let body = (!body.is_null()).then_some(body);
        let r = self.sh.call(project, method, &path, body, &[]).await;
        self.sh.expect("bad input", &r, status, Some(code));
    }
}

/// The admin CLI's JSON answer (`Null` for one that prints none).
fn cli(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    serde_json::from_slice(&crate::serve::cli(data, args, env).stdout).unwrap_or(Value::Null)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

/// Every record of a project's registry, through the API.
async fn list_all(sh: &Shared, project: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/v1/sandboxes?limit=100".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let r = sh.call(project, Method::GET, &path, None, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        out.extend(r.json["items"].as_array().unwrap().iter().cloned());
        match r.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_load_keeps_registry_providers_and_projects_consistent_with_no_unexplained_5xx() {
    mixed_load(None, DEFAULT_OPS).await;
}

/// The same on PostgreSQL (a fresh schema), half as many operations by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_mixed_load_keeps_registry_providers_and_projects_consistent() {
    if let Some(db) = TestDb::postgres("load_on_postgres").await {
        mixed_load(Some(db), DEFAULT_OPS / 2).await;
    }
}

/// The run and its checks, on SQLite in the data directory or on `postgres`.
async fn mixed_load(postgres: Option<TestDb>, default_ops: usize) {
    let ops = env_usize("CORRAL_LOAD_OPS", default_ops);
    let clients = env_usize("CORRAL_LOAD_CLIENTS", DEFAULT_CLIENTS).max(1);
    let seed = env_usize("CORRAL_LOAD_SEED", 0x10ad) as u64;
    let test_started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let morph = corral_provider_morph::fake::Fake::start_with_key(MORPH_KEY).await;
    let config = tmp.path().join("corral.toml");
    let database: Vec<(&str, &str)> = postgres
        .as_ref()
        .map(|db| ("CORRAL_DATABASE_URL", db.url()))
        .into_iter()
        .collect();
    let database_line = postgres
        .as_ref()
        .map(|db| format!("database_url = \"{}\"\n", db.url()))
        .unwrap_or_default();
    std::fs::write(
        &config,
        format!(
            "{database_line}[providers]\nenabled = [\"local\", \"morph\"]\n\
             [providers.morph]\nbase_url = \"{}\"\ndefault_image = \"snapshot_load\"\n\
             [local]\ndisk_mib = 32\ndisk_reserve_mib = 256\n\
             [rate_limits]\nenabled = false\n\
             [limits]\ncreate_wait_seconds = {CREATE_WAIT_SECONDS}\n\
             [reconciler]\ninterval_seconds = 1\ngrace_seconds = 2\n",
            morph.base_url()
        ),
    )
    .unwrap();
    // Projects, their keys and their stored Morph credential, made by the admin CLI before
    // the server starts (so no cache holds a stale "no profile").
    let mut keys = Vec::new();
    for p in 0..PROJECTS {
        let name = format!("load-{p}");
        let made = cli(&data, &["project", "create", "--name", &name], &database);
        keys.push(made["apiKey"].as_str().unwrap().to_owned());
        cli(
            &data,
            &[
                "profile",
                "set",
                "--project",
                &name,
                "--provider",
                "morph",
                "--credential-env",
                "LOAD_MORPH_KEY",
            ],
            &[&[("LOAD_MORPH_KEY", MORPH_KEY)], &database[..]].concat(),
        );
    }
    let server = start(&data, &config, 1);
    let setup_time = test_started.elapsed();
    let pid = server.pid();
    let mut episodes = Vec::new();
    for _ in 0..(ops / 1_000).max(1) {
        episodes.extend([
            CreateFault::Status(503),
            CreateFault::Status(500),
            CreateFault::Status(429),
            CreateFault::LostAnswer,
        ]);
    }
    let sh = Arc::new(Shared {
        base: server.base.clone(),
        http: Client::builder()
            .timeout(Duration::from_secs(120))
            // Below actix's 5 s keep-alive: a connection the server is closing is not reused.
            .pool_idle_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
        keys,
        morph,
        gate: RwLock::new(()),
        stats: Mutex::new(Stats::default()),
        ops_left: AtomicUsize::new(ops),
        episode_every: (ops / (episodes.len() + 1)).max(1),
        episodes: Mutex::new(episodes),
    });

    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..clients {
        let sh = sh.clone();
        tasks.push(tokio::spawn(async move {
            let mut d = Driver {
                n,
                rng: Rng(seed ^ (n as u64).wrapping_mul(0x2545_f491_4f6c_dd1d)),
                sh,
                mine: Vec::new(),
                failed_records: vec![0; PROJECTS],
                seq: 0,
            };
            d.run().await;
            (d.mine, d.failed_records)
        }));
    }
    let mut model: Vec<Sbx> = Vec::new();
    let mut failed_records = [0usize; PROJECTS];
    for t in tasks {
        let (mine, failed) = t.await.unwrap();
        model.extend(mine);
        for (p, n) in failed.into_iter().enumerate() {
            failed_records[p] += n;
        }
    }
    let load_time = started.elapsed();

    // Invariants, once the reconciler has had time to settle anything left open.
    let settle = Instant::now() + Duration::from_secs(20);
    let registry = loop {
        let mut all = Vec::new();
        for p in 0..PROJECTS {
            all.push(list_all(&sh, p).await);
        }
        // A create still open has neither a native id nor a final state.
        let open = all
            .iter()
            .flatten()
            .filter(|it| {
                it["deletedAt"].is_null()
                    && it["status"] != "failed"
                    && it["metadata"]["nativeProviderId"].is_null()
            })
            .count();
        if open == 0 || Instant::now() > settle {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut problems: Vec<String> = Vec::new();
    let by_id: BTreeMap<&str, &Sbx> = model.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut live_morph: BTreeSet<String> = BTreeSet::new();
    let mut live_local: BTreeSet<String> = BTreeSet::new();
    for (p, items) in registry.iter().enumerate() {
        let mut unacknowledged_failed = 0;
        for it in items {
            let id = it["id"].as_str().unwrap();
            let native = it["metadata"]["nativeProviderId"].as_str();
            match by_id.get(id) {
                // Acknowledged: in its own project, in the state the client left it.
                Some(s) if s.project != p => problems.push(format!(
                    "{id} of project {} is listed in project {p}",
                    s.project
                )),
                Some(s) if it["deletedAt"].is_string() != s.deleted => problems.push(format!(
                    "{id}: deletedAt {} but the client deleted it: {}",
                    it["deletedAt"], s.deleted
                )),
                Some(s) if native != Some(s.native.as_str()) => {
                    problems.push(format!(
                        "{id}: native id {native:?}, acknowledged {}",
                        s.native
                    ));
                }
                Some(_) => {}
                // Not acknowledged: only the records of creates that failed.
                None if it["status"] == "failed" && native.is_none() => {
                    unacknowledged_failed += 1;
                }
                None => problems.push(format!("{id} was never acknowledged: {it}")),
            }
            if it["deletedAt"].is_null() && it["status"] != "failed" {
                let set = if it["provider"] == "morph" {
                    &mut live_morph
                } else {
                    &mut live_local
                };
                if let Some(n) = native {
                    set.insert(n.to_owned());
                }
            }
        }
        if unacknowledged_failed != failed_records[p] {
            problems.push(format!(
                "project {p}: {unacknowledged_failed} failed records, {} failed creates",
                failed_records[p]
            ));
        }
    }
    let listed: usize = registry.iter().map(Vec::len).sum();
    for s in &model {
        if !registry[s.project]
            .iter()
            .any(|it| it["id"] == s.id.as_str())
        {
            problems.push(format!(
                "{} (project {}) is not in its registry",
                s.id, s.project
            ));
        }
    }
    // The registry and each provider agree: every live record exists there, and nothing else
    // does (no orphan). The check must catch one planted case of each kind.
    let planted_orphan = {
        let resp = sh
            .http
            .post(format!(
                "{}/instance?snapshot_id=planted",
                sh.morph.base_url()
            ))
            .bearer_auth(MORPH_KEY)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let v: Value = resp.json().await.unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    let planted_vanished = live_morph.iter().next().cloned();
    if let Some(n) = &planted_vanished {
        let resp = sh
            .http
            .delete(format!("{}/instance/{n}", sh.morph.base_url()))
            .bearer_auth(MORPH_KEY)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
    }
    let at_fake: BTreeSet<String> = sh
        .fake_instances("")
        .await
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    for n in live_morph.difference(&at_fake) {
        problems.push(format!(
            "{n} is live in the registry but gone from the fake"
        ));
    }
    for n in at_fake.difference(&live_morph) {
        problems.push(format!(
            "{n} is an orphan at the fake (not live in the registry)"
        ));
    }
    let planted = [
        Some(format!(
            "{planted_orphan} is an orphan at the fake (not live in the registry)"
        )),
        planted_vanished.map(|n| format!("{n} is live in the registry but gone from the fake")),
    ];
    for p in planted.into_iter().flatten() {
        match problems.iter().position(|q| *q == p) {
            Some(at) => {
                problems.remove(at);
            }
            None => problems.push(format!("the check missed a planted case: {p}")),
        }
    }
    let at_local: BTreeSet<String> = std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("meta.json").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for n in live_local.symmetric_difference(&at_local) {
        problems.push(format!(
            "local sandbox {n}: registry live {}, on disk {}",
            live_local.contains(n),
            at_local.contains(n)
        ));
    }
    let check_time = started.elapsed() - load_time;
    let hwm_mib = crate::serve::status_kib(pid, "VmHWM") / 1024;
    let logs = server.stop();
    if logs.contains("panicked") {
        problems.push("the server's log shows a panic".into());
    }

    let stats = std::mem::take(&mut *sh.stats.lock().unwrap());
    // Kept for whoever debugs a failure (the temporary directory goes with the test).
    let kept = std::env::temp_dir().join(format!("corral-load-{seed}.log"));
    if !stats.violations.is_empty() || !problems.is_empty() {
        std::fs::write(&kept, &logs).unwrap();
    }
    let total: usize = stats.statuses.values().sum();
    let five_xx: usize = stats
        .statuses
        .iter()
        .filter(|(s, _)| **s >= 500)
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "load: seed {seed}, {clients} clients, {PROJECTS} projects, {ops} operations \
         ({total} requests) in {:.1} s (setup {:.1} s, checks {:.1} s); server VmHWM {hwm_mib} MiB; {} sandboxes acknowledged \
         ({} local, {} morph), {listed} registry records, {} live at the fake, {} live local\n\
         statuses: {:?}\noperations: {:?}\ninjected: {:?}",
        load_time.as_secs_f64(),
        setup_time.as_secs_f64(),
        check_time.as_secs_f64(),
        model.len(),
        model.iter().filter(|s| s.prov == Prov::Local).count(),
        model.iter().filter(|s| s.prov == Prov::Morph).count(),
        at_fake.len(),
        at_local.len(),
        stats.statuses,
        stats.ops,
        stats.injected,
    );
    assert!(
        stats.violations.is_empty(),
        "{} broken expectations (server log in {}), the first: {:#?}",
        stats.violation_count,
        kept.display(),
        stats.violations
    );
    assert!(
        problems.is_empty(),
        "invariants broken (server log in {}): {problems:#?}",
        kept.display()
    );
    assert_eq!(
        five_xx, stats.expected_5xx,
        "every 5xx is one an injected fault caused"
    );
    assert!(
        stats.injected.values().sum::<usize>() >= 8,
        "faults were injected: {:?}",
        stats.injected
    );
    assert!(
        hwm_mib < RSS_BOUND_MIB,
        "server peak RSS {hwm_mib} MiB (bound {RSS_BOUND_MIB} MiB)"
    );
}
