//! The Sprites API on loopback, for tests (feature `fake`), exec WebSocket included.
//!
//! Built from the Sprites API's OpenAPI description and its exec WebSocket protocol: it checks
//! the bearer token (`401`), the create body (`name` required, unique, lower-case letters,
//! digits and hyphens; `url_settings.auth` one of `sprite`/`public`; nothing else — stricter
//! than Sprites, so a misspelt field cannot pass unnoticed), that file calls carry both `path`
//! and `workingDir` (`400` otherwise, as the description requires both), the 16 MiB write cap
//! (`413`), and the exec socket's parameters. Errors are `{"error": code, "message": …}`.
//!
//! A new sprite is `running`; [`Fake::sleep`] makes one `warm` or `cold`. Management reads
//! (`GET /v1/sprites/{name}`) leave a sleeping sprite asleep; exec and file calls wake it.
//!
//! Exec runs the `cmd` argv with the host's `sh` (each word quoted) in the sprite's temporary
//! directory (or `dir`), in the background (`corral_provider_testkit::background`), `HOME` the
//! sprite's directory. As on Sprites, `env` parameters **replace** the environment (the fake
//! runs the argv under `env -i` with only them). The socket sends `session_info`, then the
//! output as binary frames `[1]`+stdout and `[2]`+stderr as it comes, then the exit as a
//! binary frame `[3, code]` — or, after [`Fake::exit_as_text`], as the JSON message
//! `{"type": "exit", "exit_code": N}` — and closes; [`Fake::drop_exit`] makes it close without
//! an exit. With `stdin=true`, frames `[0]`+bytes and `[4]` feed and close stdin.
//!
//! Sessions outlive their socket: a session nobody follows is killed after
//! `max_run_after_disconnect` (non-TTY default 10 s, `0` forever); `GET …/exec` lists them
//! (`id` the pid, `command` the argv joined with spaces, `is_active`); `…/exec?id=<session>`
//! re-attaches to a running one from what it writes next (no replay; an ended or unknown
//! session is 404 — an assumption: Sprites does not document it); `POST
//! …/exec/{session}/kill?signal=&timeout=` signals the session's process group and, if it has
//! not ended within `timeout` seconds (default 10), sends SIGKILL, answering NDJSON progress.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use corral_domain::OutputStream;
use corral_domain::{CreateSandboxRequest, Provider, ProviderContext};
use corral_provider::shell::shell_quote;
use corral_provider::{CallContext, SecretString};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::background::{Exit, Process, Processes, SpawnSpec};
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::plumbing::{self, locked};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};

/// The token the fake accepts.
pub const TOKEN: &str = "corral-org/fake/0123/sprites-token";
/// Largest file write the API accepts.
pub const MAX_WRITE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of output per binary frame.
const FRAME_BYTES: usize = 32 * 1024;

struct FakeSprite {
    dir: tempfile::TempDir,
    body: Value,
    sessions: Arc<Sessions>,
}

struct Shared {
    token: String,
    next: AtomicU64,
    exit_as_text: AtomicBool,
    drop_exit: AtomicBool,
    /// Kill endpoint calls that reached a session.
    kills: AtomicUsize,
    sprites: Mutex<HashMap<String, FakeSprite>>,
}

type St = State<Arc<Shared>>;

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({ "error": code, "message": message.into() })),
    )
        .into_response()
}

fn bad(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn not_found(message: impl Into<String>) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", message)
}

async fn auth(State(shared): St, headers: HeaderMap, req: Request, next: Next) -> Response {
    let token = plumbing::bearer(&headers);
    if token == Some(shared.token.as_str()) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Missing or invalid authentication",
        )
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

async fn create_sprite(State(shared): St, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid JSON body");
    };
    let Some(fields) = body.as_object() else {
        return bad("expected a JSON object");
    };
    if let Some(k) = fields
        .keys()
        .find(|k| !["name", "url_settings"].contains(&k.as_str()))
    {
        return bad(format!("unknown field `{k}`"));
    }
    let Some(name) = body["name"].as_str().filter(|n| valid_name(n)) else {
        return bad("name is required: lower-case letters, digits and hyphens");
    };
    match &body["url_settings"] {
        Value::Null => {}
        Value::Object(u)
            if u.keys().all(|k| k == "auth")
                && matches!(
                    u.get("auth").and_then(Value::as_str),
                    None | Some("sprite" | "public")
                ) => {}
        _ => return bad("url_settings.auth must be `sprite` or `public`"),
    }
    let mut sprites = locked(&shared.sprites);
    if sprites.contains_key(name) {
        return bad(format!("a sprite named {name} already exists"));
    }
    let Ok(dir) = tempfile::tempdir() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "no temp dir");
    };
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    let sprite = json!({
        "id": format!("sprite-{n:08x}-0000-0000-0000-000000000000"),
        "name": name,
        "organization": "corral-org",
        "url": format!("https://{name}-{n:x}.sprites.app"),
        "url_settings": { "auth": body["url_settings"]["auth"].as_str().unwrap_or("sprite") },
        "status": "running",
        "created_at": "2026-11-23T20:00:00Z",
        "updated_at": "2026-11-23T20:00:00Z",
        "last_running_at": "2026-11-23T20:00:00Z",
        "last_warming_at": null,
        "version": "v0.0.1-rc48",
        "environment_version": "v0.0.1-rc48",
    });
    sprites.insert(
        name.to_owned(),
        FakeSprite {
            dir,
            body: sprite.clone(),
            sessions: Arc::default(),
        },
    );
    (StatusCode::CREATED, axum::Json(sprite)).into_response()
}

async fn get_sprite(State(shared): St, Path(name): Path<String>) -> Response {
    // A management read: a sleeping sprite stays asleep.
    match locked(&shared.sprites).get(&name) {
        Some(s) => axum::Json(s.body.clone()).into_response(),
        None => not_found("Sprite not found"),
    }
}

async fn delete_sprite(State(shared): St, Path(name): Path<String>) -> Response {
    match locked(&shared.sprites).remove(&name) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => not_found("Sprite not found"),
    }
}

/// Sprite `name`'s directory, waking it (commands and file calls do).
fn wake(shared: &Shared, name: &str) -> Option<PathBuf> {
    let mut sprites = locked(&shared.sprites);
    let sprite = sprites.get_mut(name)?;
    sprite.body["status"] = json!("running");
    Some(sprite.dir.path().to_owned())
}

/// The file a call names: `path` (resolved against `workingDir`), which must lie below the
/// sprite's directory.
fn file_path(root: &FsPath, query: &HashMap<String, String>) -> Result<PathBuf, Box<Response>> {
    let (Some(path), Some(working_dir)) = (query.get("path"), query.get("workingDir")) else {
        return Err(Box::new(bad("`path` and `workingDir` are required")));
    };
    let path = FsPath::new(working_dir).join(path);
    let escapes = path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes || !path.starts_with(root) {
        return Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "permission denied",
        )));
    }
    Ok(path)
}

async fn read_file(
    State(shared): St,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(root) = wake(&shared, &name) else {
        return not_found("Sprite not found");
    };
    let path = match file_path(&root, &query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if path.is_dir() {
        return bad(format!("{} is a directory", path.display()));
    }
    match std::fs::read(&path) {
        Ok(content) => ([("content-type", "application/octet-stream")], content).into_response(),
        Err(_) => not_found(format!("{} does not exist", path.display())),
    }
}

async fn list_dir(
    State(shared): St,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(root) = wake(&shared, &name) else {
        return not_found("Sprite not found");
    };
    let path = match file_path(&root, &query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if path.is_file() {
        return bad(format!("{} is not a directory", path.display()));
    }
    let Ok(entries) = std::fs::read_dir(&path) else {
        return not_found(format!("{} does not exist", path.display()));
    };
    let entries: Vec<Value> = entries
        .flatten()
        .map(|e| {
            let is_dir = e.path().is_dir();
            json!({
                "name": e.file_name().to_string_lossy(),
                "path": e.path(),
                "type": if is_dir { "directory" } else { "file" },
                "size": e.metadata().map_or(0, |m| m.len()),
                "mode": "0644",
                "modTime": "2026-11-23T20:00:00Z",
                "isDir": is_dir,
            })
        })
        .collect();
    axum::Json(json!({ "path": path, "count": entries.len(), "entries": entries })).into_response()
}

async fn write_file(
    State(shared): St,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(root) = wake(&shared, &name) else {
        return not_found("Sprite not found");
    };
    let path = match file_path(&root, &query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if body.len() > MAX_WRITE_BYTES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "file contents exceed 16 MiB",
        );
    }
    let mode = query.get("mode").map_or("0644", String::as_str);
    if u32::from_str_radix(mode, 8).is_err() {
        return bad("mode must be octal, e.g. 0644");
    }
    let mkdir = match query.get("mkdir").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return bad("mkdir must be a boolean"),
    };
    if let Some(parent) = path.parent()
        && !parent.is_dir()
    {
        if !mkdir {
            return not_found(format!("{} does not exist", parent.display()));
        }
        if std::fs::create_dir_all(parent).is_err() {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "mkdir failed",
            );
        }
    }
    match std::fs::write(&path, &body) {
        Ok(()) => {
            axum::Json(json!({ "path": path, "size": body.len(), "mode": mode })).into_response()
        }
        Err(e) => bad(e.to_string()),
    }
}

/// What an exec socket runs, checked before the upgrade.
struct ExecRequest {
    line: String,
    cwd: PathBuf,
    home: PathBuf,
    stdin: bool,
    /// How long the session may run with no socket attached (`None`: forever).
    run_after: Option<Duration>,
}

/// A Go duration as Sprites takes it (`10s`, `1m30s`, `2h`, `500ms`; `0` is 0).
fn go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        total += match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            _ => return None,
        };
        rest = &rest[unit_len..];
    }
    Some(total)
}

fn exec_request(
    shared: &Shared,
    name: &str,
    query: &[(String, String)],
) -> Result<ExecRequest, Box<Response>> {
    let mut argv = Vec::new();
    let mut env = Vec::new();
    let mut dir = None;
    let mut stdin = false;
    // Non-TTY default.
    let mut run_after = Some(Duration::from_secs(10));
    for (k, v) in query {
        match k.as_str() {
            "cmd" => argv.push(v.clone()),
            "env" if v.contains('=') => env.push(v.clone()),
            "env" => return Err(Box::new(bad("env must be KEY=VALUE"))),
            "dir" => dir = Some(PathBuf::from(v)),
            "tty" if v == "false" => {}
            "tty" => return Err(Box::new(bad("this fake serves non-TTY sessions only"))),
            "stdin" if v == "true" || v == "false" => stdin = v == "true",
            "max_run_after_disconnect" => match go_duration(v) {
                Some(Duration::ZERO) => run_after = None,
                Some(d) => run_after = Some(d),
                None => return Err(Box::new(bad("max_run_after_disconnect must be a duration"))),
            },
            "path" | "cols" | "rows" => {}
            other => return Err(Box::new(bad(format!("unknown parameter `{other}`")))),
        }
    }
    if argv.is_empty() {
        return Err(Box::new(bad("cmd is required")));
    }
    let Some(root) = wake(shared, name) else {
        return Err(Box::new(not_found("Sprite not found")));
    };
    let cwd = dir.unwrap_or(root.clone());
    if !cwd.is_dir() {
        return Err(Box::new(bad(format!(
            "{} is not a directory",
            cwd.display()
        ))));
    }
    let mut words: Vec<String> = Vec::new();
    // Sprites: `env` replaces the default environment.
    if !env.is_empty() {
        words.push("env".into());
        words.push("-i".into());
        words.extend(env);
    }
    words.extend(argv);
    Ok(ExecRequest {
        line: words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" "),
        cwd,
        home: root,
        stdin,
        run_after,
    })
}

/// One exec session: its process, its argv line, and how many sockets follow it.
struct Session {
    process: Process,
    command: String,
    workdir: PathBuf,
    attached: AtomicUsize,
    run_after: Option<Duration>,
}

/// A sprite's exec sessions (their processes are killed when the sprite goes).
#[derive(Default)]
struct Sessions {
    table: Processes,
    by_id: Mutex<HashMap<u64, Arc<Session>>>,
}

/// How a session's socket ends its stream.
#[derive(Clone, Copy)]
struct ExitStyle {
    as_text: bool,
    drop_exit: bool,
}

/// Follows `session` on `socket` from byte `sent` of each stream: output frames, then the
/// exit; stdin frames from the client go to the process when `stdin`. A client that goes
/// away detaches: the session runs on for its `max_run_after_disconnect`.
async fn serve_session(
    socket: WebSocket,
    session: Arc<Session>,
    owner: bool,
    stdin: bool,
    style: ExitStyle,
) {
    let process = session.process.clone();
    let mut sent = [
        process.len(OutputStream::Stdout),
        process.len(OutputStream::Stderr),
    ];
    if owner {
        sent = [0, 0];
    }
    session.attached.fetch_add(1, Ordering::SeqCst);
    let (mut tx, mut rx) = socket.split();
    let info = json!({
        "type": "session_info",
        "session_id": process.pid(),
        "command": session.command,
        "created": 1_767_609_000,
        "is_owner": owner,
        "tty": false,
    });
    let gone = Arc::new(AtomicBool::new(false));
    let reader = {
        let gone = gone.clone();
        let process = process.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) = rx.next().await {
                match message {
                    Message::Binary(data) if stdin => match data.split_first() {
                        Some((&crate::api::stream::STDIN, payload)) => {
                            let _ = process.write_stdin(payload).await;
                        }
                        Some((&crate::api::stream::STDIN_EOF, _)) => process.close_stdin().await,
                        _ => {}
                    },
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            gone.store(true, Ordering::SeqCst);
        })
    };
    let mut ok = tx
        .send(Message::Text(info.to_string().into()))
        .await
        .is_ok();
    while ok && !gone.load(Ordering::SeqCst) {
        process
            .wait_output(sent[0], sent[1], Duration::from_millis(200))
            .await;
        let exit = process.exit();
        for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let bytes = process.read(stream, sent[i]);
            sent[i] += bytes.len() as u64;
            let tag = [crate::api::stream::STDOUT, crate::api::stream::STDERR][i];
            for chunk in bytes.chunks(FRAME_BYTES) {
                let mut data = vec![tag];
                data.extend_from_slice(chunk);
                ok = ok && tx.send(Message::Binary(data.into())).await.is_ok();
            }
        }
        if let Some(exit) = exit {
            let code = exit.code();
            if ok && !style.drop_exit {
                let message = if style.as_text {
                    Message::Text(
                        json!({ "type": "exit", "exit_code": code })
                            .to_string()
                            .into(),
                    )
                } else {
                    Message::Binary(
                        vec![
                            crate::api::stream::EXIT,
                            u8::try_from(code & 0xff).unwrap_or(255),
                        ]
                        .into(),
                    )
                };
                let _ = tx.send(message).await;
            }
            let _ = tx.send(Message::Close(None)).await;
            // Let the client finish the closing handshake.
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
            session.attached.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    }
    reader.abort();
    // Detached: the session runs on for `max_run_after_disconnect` with nobody attached.
    if session.attached.fetch_sub(1, Ordering::SeqCst) == 1
        && let Some(after) = session.run_after
    {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if session.attached.load(Ordering::SeqCst) == 0 {
                let _ = session.process.signal(9).await;
            }
        });
    }
}

fn session_json(id: u64, s: &Session) -> Value {
    json!({
        "id": id,
        "command": s.command,
        "created": "2026-11-23T20:00:00Z",
        "last_activity": "2026-11-23T20:00:00Z",
        "bytes_per_second": 0,
        "is_active": s.process.exit().is_none(),
        "tty": false,
        "workdir": s.workdir,
    })
}

async fn exec(
    State(shared): St,
    Path(name): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(sessions) = locked(&shared.sprites)
        .get(&name)
        .map(|s| s.sessions.clone())
    else {
        return not_found("Sprite not found");
    };
    let Ok(upgrade) = upgrade else {
        // Without an upgrade, `GET …/exec` lists the exec sessions.
        let listed: Vec<Value> = locked(&sessions.by_id)
            .iter()
            .map(|(id, s)| session_json(*id, s))
            .collect();
        return axum::Json(listed).into_response();
    };
    let style = ExitStyle {
        as_text: shared.exit_as_text.load(Ordering::Relaxed),
        drop_exit: shared.drop_exit.load(Ordering::Relaxed),
    };
    // `id`: attach to a running session, from what it writes next.
    if let Some((_, id)) = query.iter().find(|(k, _)| k == "id") {
        if query.iter().any(|(k, _)| k != "id" && k != "stdin") {
            return bad("attach takes only `id` (and `stdin`)");
        }
        let session = id
            .parse::<u64>()
            .ok()
            .and_then(|id| locked(&sessions.by_id).get(&id).cloned())
            .filter(|s| s.process.exit().is_none());
        let Some(session) = session else {
            return not_found("session not found");
        };
        wake(&shared, &name);
        return upgrade
            .on_upgrade(move |socket| serve_session(socket, session, false, false, style));
    }
    let req = match exec_request(&shared, &name, &query) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let mut spawn = SpawnSpec::new(req.line.clone(), req.cwd.clone()).with_env(BTreeMap::from([(
        "HOME".to_owned(),
        req.home.to_string_lossy().into_owned(),
    )]));
    if req.stdin {
        spawn = spawn.with_stdin();
    }
    let process = match sessions.table.spawn(spawn) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    };
    let session = Arc::new(Session {
        process: process.clone(),
        command: query
            .iter()
            .filter(|(k, _)| k == "cmd")
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        workdir: req.cwd,
        attached: AtomicUsize::new(0),
        run_after: req.run_after,
    });
    locked(&sessions.by_id).insert(u64::from(process.pid()), session.clone());
    let stdin = req.stdin;
    upgrade.on_upgrade(move |socket| serve_session(socket, session, true, stdin, style))
}

/// Signal names the kill endpoint takes.
fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "SIGHUP" => 1,
        "SIGINT" => 2,
        "SIGQUIT" => 3,
        "SIGKILL" => 9,
        "SIGUSR1" => 10,
        "SIGUSR2" => 12,
        "SIGTERM" => 15,
        _ => return None,
    })
}

/// `POST …/exec/{session}/kill`: signals the session's process group, waits up to `timeout`
/// seconds (default 10) for it to end, then sends SIGKILL; NDJSON progress.
async fn kill_session(
    State(shared): St,
    Path((name, session)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(sessions) = locked(&shared.sprites)
        .get(&name)
        .map(|s| s.sessions.clone())
    else {
        return not_found("Sprite not found");
    };
    let Some(session) = session
        .parse::<u64>()
        .ok()
        .and_then(|id| locked(&sessions.by_id).get(&id).cloned())
    else {
        return not_found("session not found");
    };
    let signal = query.get("signal").map_or("SIGTERM", String::as_str);
    let Some(number) = signal_number(signal) else {
        return bad(format!("unknown signal {signal}"));
    };
    let timeout = match query.get("timeout").map(|t| t.parse::<u64>()) {
        None => Duration::from_secs(10),
        Some(Ok(t)) => Duration::from_secs(t),
        Some(Err(_)) => return bad("timeout must be an integer"),
    };
    shared.kills.fetch_add(1, Ordering::SeqCst);
    let process = session.process.clone();
    let pid = process.pid();
    let mut lines = vec![json!({
        "type": "signal",
        "message": format!("Signaling {signal} to process group {pid}"),
        "signal": signal,
        "pid": pid,
    })];
    let _ = process.signal(number).await;
    let exit = match process.wait_exit(timeout).await {
        Some(exit) => {
            lines.push(json!({"type": "exited", "message": "Process exited"}));
            exit
        }
        None => {
            lines.push(json!({"type": "timeout", "message": format!("Timeout after {}s, sending SIGKILL", timeout.as_secs())}));
            let _ = process.signal(9).await;
            let exit = process.wait_exit(Duration::from_secs(10)).await;
            lines.push(json!({"type": "killed", "message": "Process killed"}));
            exit.unwrap_or(Exit {
                status: None,
                signal: Some(9),
            })
        }
    };
    lines.push(json!({"type": "complete", "exit_code": exit.code()}));
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    ([("content-type", "application/x-ndjson")], body).into_response()
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/sprites", post(create_sprite))
        .route("/v1/sprites/{name}", get(get_sprite).delete(delete_sprite))
        .route("/v1/sprites/{name}/exec", get(exec))
        .route("/v1/sprites/{name}/exec/{session}/kill", post(kill_session))
        .route("/v1/sprites/{name}/fs/read", get(read_file))
        .route("/v1/sprites/{name}/fs/list", get(list_dir))
        .route("/v1/sprites/{name}/fs/write", put(write_file))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), auth))
        // Writes up to the API's own cap, and past it to answer 413 (axum's default is 2 MiB).
        .layer(axum::extract::DefaultBodyLimit::max(MAX_WRITE_BYTES + 1024))
        .with_state(shared)
}

/// The Sprites API on a loopback port, accepting [`TOKEN`].
pub struct Fake {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl Fake {
    /// Starts the fake.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            token: TOKEN.to_owned(),
            next: AtomicU64::new(1),
            exit_as_text: AtomicBool::new(false),
            drop_exit: AtomicBool::new(false),
            kills: AtomicUsize::new(0),
            sprites: Mutex::new(HashMap::new()),
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

    /// The API's base URL (paths start with `/v1`).
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The adapter's configuration pointed at the fake.
    pub fn config(&self) -> crate::SpritesConfig {
        crate::SpritesConfig {
            base_url: self.base_url(),
            ..Default::default()
        }
    }

    /// A call context carrying the token the fake accepts.
    pub fn context(&self) -> CallContext {
        CallContext::new(Some(SecretString::from(TOKEN)), ProviderContext::default())
    }

    /// Puts sprite `name` to sleep: `warm` or `cold`.
    pub fn sleep(&self, name: &str, status: &str) {
        if let Some(s) = locked(&self.shared.sprites).get_mut(name) {
            s.body["status"] = json!(status);
        }
    }

    /// The status of sprite `name`, as the fake holds it.
    pub fn status(&self, name: &str) -> Option<String> {
        locked(&self.shared.sprites)
            .get(name)
            .and_then(|s| s.body["status"].as_str().map(str::to_owned))
    }

    /// Sends the exit as the JSON text message instead of the binary exit frame.
    pub fn exit_as_text(&self, on: bool) {
        self.shared.exit_as_text.store(on, Ordering::Relaxed);
    }

    /// How many kill calls reached a session.
    pub fn kills(&self) -> usize {
        self.shared.kills.load(Ordering::SeqCst)
    }

    /// The running exec sessions of sprite `name`: (session id, command line).
    pub fn sessions_of(&self, name: &str) -> Vec<(u64, String)> {
        let Some(sessions) = locked(&self.shared.sprites)
            .get(name)
            .map(|s| s.sessions.clone())
        else {
            return Vec::new();
        };
        let mut all: Vec<(u64, String)> = locked(&sessions.by_id)
            .iter()
            .filter(|(_, s)| s.process.exit().is_none())
            .map(|(id, s)| (*id, s.command.clone()))
            .collect();
        all.sort();
        all
    }

    /// Closes exec sockets without sending an exit.
    pub fn drop_exit(&self, on: bool) {
        self.shared.drop_exit.store(on, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Harness for Fake {
    type Adapter = crate::SpritesProvider;

    async fn start() -> Self {
        Fake::start().await
    }

    fn server(&self) -> &FakeServer {
        &self.server
    }

    fn config_at(&self, base_url: &str, http: HttpConfig) -> crate::SpritesConfig {
        crate::SpritesConfig {
            base_url: base_url.to_owned(),
            http,
        }
    }

    fn context(&self) -> CallContext {
        Fake::context(self)
    }

    fn create_call() -> (Method, &'static str) {
        (Method::POST, "/v1/sprites")
    }

    fn get_call() -> (Method, &'static str) {
        (Method::GET, "/v1/sprites/")
    }

    fn unknown_id() -> &'static str {
        "corral-op-nope"
    }

    /// `CORRAL_LIVE_SPRITES_TOKEN`.
    fn live() -> Result<(crate::SpritesConfig, CallContext, CreateSandboxRequest), String> {
        let Ok(token) = std::env::var("CORRAL_LIVE_SPRITES_TOKEN") else {
            return Err("CORRAL_LIVE_SPRITES_TOKEN".into());
        };
        Ok((
            crate::SpritesConfig::default(),
            CallContext::new(Some(SecretString::from(token)), ProviderContext::default()),
            CreateSandboxRequest::standard(Provider::Sprites, None, None),
        ))
    }
}
