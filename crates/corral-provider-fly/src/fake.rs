//! The Machines API on loopback, for tests (feature `fake`).
//!
//! Built from the Machines API's OpenAPI description: it checks the bearer token, the app in
//! the path (`404 {"error": "app not found"}` for another), the fields each body may carry and
//! their types (`400 {"error": …}`; stricter than Fly, whose decoder ignores unknown fields, so
//! that a misspelt field cannot pass unnoticed), a `config.image` on create, unique machine
//! names (`409`, status `name_taken`), and that a started machine is destroyed only with
//! `force=true` (`412`). A new machine is `created` until it is first observed, then
//! `started`; a destroyed one stays visible as `destroyed` (and leaves listings unless
//! `include_deleted`).
//!
//! Exec runs the `command` argv with the host's `sh` (each word quoted) in a per-machine
//! temporary directory, for at most `timeout` seconds (60 when absent or 0); a command past it
//! is killed and answered `{exit_code: -1, exit_signal: 9}` (Fly does not document this case;
//! the adapter does not depend on its exact shape). There is no file endpoint, as on Fly.
// Helpers hand their refusal back as the handler's response itself.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_domain::{CreateSandboxRequest, FlyCreate, ProviderContext};
use corral_provider::shell::shell_quote;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::host_shell::{RunOutcome, run_command};
use corral_provider_testkit::plumbing::{self, locked};
use serde_json::{Value, json};

/// The API token the fake accepts.
pub const API_TOKEN: &str = "fly_fake_token_0123";
/// The app the fake has.
pub const APP: &str = "corral-fake-app";
/// The image [`Fake::config`] runs when a create names none.
pub const IMAGE: &str = "registry.fly.io/corral-sandbox:latest";

struct FakeMachine {
    dir: tempfile::TempDir,
    body: Value,
}

struct Shared {
    token: String,
    next: AtomicU64,
    machines: Mutex<HashMap<String, FakeMachine>>,
}

type St = State<Arc<Shared>>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

fn bad(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, message)
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let token = plumbing::bearer(&headers);
    if token == Some(shared.token.as_str()) {
        next.run(req).await
    } else {
        error(StatusCode::UNAUTHORIZED, "unauthorized")
    }
}

fn only(body: &Value, what: &str, allowed: &[&str]) -> Result<(), String> {
    let o = body
        .as_object()
        .ok_or_else(|| format!("{what}: expected an object"))?;
    plumbing::unknown_field(o, allowed)
        .map_or(Ok(()), |k| Err(format!("{what}: unknown field `{k}`")))
}

fn strings(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

fn check_create(body: &Value) -> Result<(), String> {
    only(
        body,
        "CreateMachineRequest",
        &[
            "config",
            "lease_ttl",
            "min_secrets_version",
            "name",
            "region",
            "skip_launch",
            "skip_secrets",
            "skip_service_registration",
        ],
    )?;
    for key in ["name", "region"] {
        if !(body[key].is_null() || body[key].is_string()) {
            return Err(format!("{key} must be a string"));
        }
    }
    let config = &body["config"];
    only(
        config,
        "config",
        &[
            "auto_destroy",
            "cache_drive",
            "checks",
            "containers",
            "disable_machine_autostart",
            "dns",
            "env",
            "files",
            "guest",
            "image",
            "init",
            "metadata",
            "metrics",
            "mounts",
            "processes",
            "restart",
            "rootfs",
            "schedule",
            "services",
            "size",
            "spot",
            "standbys",
            "statics",
            "stop_config",
        ],
    )?;
    if config["image"].as_str().is_none_or(str::is_empty) {
        return Err("config.image is required".into());
    }
    match &config["metadata"] {
        Value::Null => {}
        Value::Object(m) if m.values().all(Value::is_string) => {}
        _ => return Err("config.metadata must map strings to strings".into()),
    }
    if !(config["auto_destroy"].is_null() || config["auto_destroy"].is_boolean()) {
        return Err("config.auto_destroy must be a boolean".into());
    }
    let init = &config["init"];
    if !init.is_null() {
        only(
            init,
            "config.init",
            &[
                "cmd",
                "entrypoint",
                "exec",
                "kernel_args",
                "swap_size_mb",
                "tty",
            ],
        )?;
        for key in ["cmd", "entrypoint", "exec"] {
            if !(init[key].is_null() || strings(&init[key])) {
                return Err(format!("config.init.{key} must be a list of strings"));
            }
        }
    }
    Ok(())
}

fn check_app(app: &str) -> Result<(), Response> {
    if app == APP {
        Ok(())
    } else {
        Err(error(StatusCode::NOT_FOUND, "app not found"))
    }
}

async fn create_machine(State(shared): St, Path(app): Path<String>, body: Bytes) -> Response {
    if let Err(r) = check_app(&app) {
        return r;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = check_create(&body) {
        return bad(e);
    }
    let id = format!("{:014x}", shared.next.fetch_add(1, Ordering::Relaxed));
    let name = body["name"]
        .as_str()
        .map_or_else(|| format!("m-{id}"), str::to_owned);
    let mut machines = locked(&shared.machines);
    if machines
        .values()
        .any(|m| m.body["name"] == name.as_str() && m.body["state"] != "destroyed")
    {
        return (
            StatusCode::CONFLICT,
            axum::Json(
                json!({ "error": format!("machine name {name} is taken"), "status": "name_taken" }),
            ),
        )
            .into_response();
    }
    let Ok(dir) = tempfile::tempdir() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no temp dir");
    };
    let machine = json!({
        "id": id,
        "name": name,
        "state": "created",
        "region": body["region"].as_str().unwrap_or("iad"),
        "instance_id": "01JFAKEVERSION0000000000000",
        "private_ip": "fdaa:0:1::2",
        "config": body["config"],
        "image_ref": { "registry": "registry.fly.io", "repository": "corral-sandbox", "tag": "latest" },
        "created_at": "2026-11-23T20:00:00Z",
        "updated_at": "2026-11-23T20:00:00Z",
        "events": [],
    });
    machines.insert(
        id,
        FakeMachine {
            dir,
            body: machine.clone(),
        },
    );
    axum::Json(machine).into_response()
}

async fn get_machine(State(shared): St, Path((app, id)): Path<(String, String)>) -> Response {
    if let Err(r) = check_app(&app) {
        return r;
    }
    let mut machines = locked(&shared.machines);
    let Some(m) = machines.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "machine not found");
    };
    let seen = m.body.clone();
    // Starting takes one observation.
    if m.body["state"] == "created" {
        m.body["state"] = json!("started");
    }
    axum::Json(seen).into_response()
}

async fn list_machines(
    State(shared): St,
    Path(app): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    if let Err(r) = check_app(&app) {
        return r;
    }
    let mut filters = Vec::new();
    let mut include_deleted = false;
    for (k, v) in &query {
        match k.as_str() {
            "include_deleted" => include_deleted = v == "true",
            "include_leases" | "region" | "state" | "summary" | "cursor" | "limit" => {}
            other => match other.strip_prefix("metadata.") {
                Some(key) => filters.push((key.to_owned(), v.clone())),
                None => return bad(format!("unknown query parameter `{other}`")),
            },
        }
    }
    let list: Vec<Value> = locked(&shared.machines)
        .values()
        .filter(|m| include_deleted || m.body["state"] != "destroyed")
        .filter(|m| {
            filters
                .iter()
                .all(|(k, v)| m.body["config"]["metadata"][k].as_str() == Some(v))
        })
        .map(|m| m.body.clone())
        .collect();
    axum::Json(list).into_response()
}

async fn destroy_machine(
    State(shared): St,
    Path((app, id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = check_app(&app) {
        return r;
    }
    let mut machines = locked(&shared.machines);
    let Some(m) = machines.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "machine not found");
    };
    match m.body["state"].as_str() {
        Some("destroyed") => error(StatusCode::NOT_FOUND, "machine not found"),
        Some("started") if query.get("force").map(String::as_str) != Some("true") => error(
            StatusCode::PRECONDITION_FAILED,
            "failed_precondition: unable to destroy machine, not currently stopped",
        ),
        _ => {
            m.body["state"] = json!("destroyed");
            axum::Json(json!({ "ok": true })).into_response()
        }
    }
}

async fn exec(State(shared): St, Path((app, id)): Path<(String, String)>, body: Bytes) -> Response {
    if let Err(r) = check_app(&app) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    if let Err(e) = only(
        &req,
        "MachineExecRequest",
        &["cmd", "command", "container", "machine", "stdin", "timeout"],
    ) {
        return bad(e);
    }
    let argv: Vec<String> = match &req["command"] {
        v if strings(v) && v.as_array().is_some_and(|a| !a.is_empty()) => v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => return bad("command must be a non-empty list of strings"),
    };
    let timeout = match &req["timeout"] {
        Value::Null => 60,
        v => match v.as_u64() {
            Some(0) => 60,
            Some(s) => s,
            None => return bad("timeout must be an integer"),
        },
    };
    let dir = {
        let machines = locked(&shared.machines);
        let Some(m) = machines.get(&id) else {
            return error(StatusCode::NOT_FOUND, "machine not found");
        };
        if m.body["state"] != "started" {
            return error(StatusCode::PRECONDITION_FAILED, "machine is not started");
        }
        m.dir.path().to_owned()
    };
    let line = argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let env = BTreeMap::new();
    match run_command(&line, &dir, &env, Duration::from_secs(timeout), 64 << 20).await {
        Ok(RunOutcome::Finished(out)) => axum::Json(json!({
            "exit_code": out.exit_code,
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        }))
        .into_response(),
        Ok(RunOutcome::TimedOut) => axum::Json(json!({
            "exit_code": -1,
            "exit_signal": 9,
            "stdout": "",
            "stderr": "",
        }))
        .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/apps/{app}/machines",
            post(create_machine).get(list_machines),
        )
        .route(
            "/v1/apps/{app}/machines/{id}",
            get(get_machine).delete(destroy_machine),
        )
        .route("/v1/apps/{app}/machines/{id}/exec", post(exec))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), auth))
        .with_state(shared)
}

/// The Machines API on a loopback port, accepting [`API_TOKEN`], with one app, [`APP`].
pub struct Fake {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            token: API_TOKEN.to_owned(),
            next: AtomicU64::new(0x3d8d_9000),
            machines: Mutex::new(HashMap::new()),
        });
        Self {
            server: FakeServer::start(router(shared.clone())).await,
            shared,
        }
    }

    /// The HTTP server: request log and fault injection.
    pub fn server(&self) -> &FakeServer {
        &self.server
    }

    /// The API's base URL (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.base_url())
    }

    /// The adapter's configuration pointed at the fake: app [`APP`], image [`IMAGE`].
    pub fn config(&self) -> crate::FlyConfig {
        crate::FlyConfig {
            base_url: self.base_url(),
            app: Some(APP.into()),
            default_image: Some(IMAGE.into()),
            ..Default::default()
        }
    }

    /// A call context carrying the token the fake accepts (the app comes from the config).
    pub fn context(&self) -> CallContext {
        CallContext::new(
            Some(SecretString::from(API_TOKEN)),
            ProviderContext::default(),
        )
    }

    /// The state of machine `id`, as the fake holds it.
    pub fn state(&self, id: &str) -> Option<String> {
        locked(&self.shared.machines)
            .get(id)
            .and_then(|m| m.body["state"].as_str().map(str::to_owned))
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    fn lists_by_tag() -> bool {
        true
    }

    type Adapter = crate::FlyProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn base_url(&self) -> String {
        Fake::base_url(self)
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::FlyConfig {
        crate::FlyConfig {
            base_url: base_url.to_owned(),
            http,
            ..self.config()
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/machines")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/machines/")
    }

    fn unknown_id() -> &'static str {
        "corral-fake-app:0000000000dead"
    }

    /// `CORRAL_LIVE_FLY_API_TOKEN`, `CORRAL_LIVE_FLY_APP` and `CORRAL_LIVE_FLY_IMAGE` (an
    /// image with `sh`, `sleep`, `mktemp`, `base64`, `wc`, `dirname` and `mv`).
    fn live() -> Result<(crate::FlyConfig, CallContext, CreateSandboxRequest), String> {
        let (Ok(token), Ok(app), Ok(image)) = (
            std::env::var("CORRAL_LIVE_FLY_API_TOKEN"),
            std::env::var("CORRAL_LIVE_FLY_APP"),
            std::env::var("CORRAL_LIVE_FLY_IMAGE"),
        ) else {
            return Err(
                "CORRAL_LIVE_FLY_API_TOKEN, CORRAL_LIVE_FLY_APP and CORRAL_LIVE_FLY_IMAGE".into(),
            );
        };
        let ctx = CallContext::new(Some(SecretString::from(token)), ProviderContext::default());
        let request = CreateSandboxRequest::Fly(FlyCreate {
            image: Some(image),
            app: Some(app.clone()),
            ..FlyCreate::default()
        });
        let config = crate::FlyConfig {
            app: Some(app),
            ..crate::FlyConfig::default()
        };
        Ok((config, ctx, request))
    }
}
