//! Commands as durable jobs over HTTP, in process: start (keyed), get with `?wait=`, list,
//! output as JSON pages and as Server-Sent Events resumed with `Last-Event-ID`, stdin,
//! signals, and the refusals made before any provider call.

use std::sync::Arc;

use actix_web::test::{self, TestRequest};
use corral_domain::{CommandCapabilities, CommandResume, Provider, Signal};
use corral_provider::SandboxProvider;
use corral_service::ServiceConfig;
use serde_json::{Value, json};

use crate::support::{Counting, Providers, World, get, post, send};

const CREDENTIAL: (&str, &str) = ("X-Provider-Credential", "inline-cred-commands");

/// `local` plus a double posing as E2B whose commands run through the exec wrapper on the
/// host, advertising `commands`.
async fn world(commands: Option<CommandCapabilities>) -> (World, Arc<Counting>) {
    let mut double = Counting::new(Provider::E2b, false);
    if let Some(c) = commands {
        double = double.with_commands(c);
    }
    let double = Arc::new(double);
    let d2 = double.clone();
    let w = World::with(
        move |_| {
            let mut m = Providers::new();
            m.insert(Provider::E2b, d2 as Arc<dyn SandboxProvider>);
            m
        },
        ServiceConfig::default(),
    )
    .await;
    (w, double)
}

/// An SSE body split into events: (id, event name, data as JSON).
fn sse_events(text: &str) -> Vec<(u64, String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            (
                field("id: ").parse().unwrap(),
                field("event: "),
                serde_json::from_str(&field("data: ")).unwrap(),
            )
        })
        .collect()
}

fn stdout_of(events: &[(u64, String, Value)]) -> String {
    events
        .iter()
        .filter(|(_, name, _)| name == "stdout")
        .map(|(_, _, data)| data["data"].as_str().unwrap().to_owned())
        .collect()
}

#[actix_web::test]
async fn a_started_command_streams_as_sse_resumes_with_last_event_id_and_pages_as_json() {
    let (w, _double) = world(None).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let sbx = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "e2b"})).insert_header(CREDENTIAL),
    )
    .await;
    let id = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let started = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"command": "for i in 1 2 3; do echo line-$i; sleep 0.2; done; echo oops >&2; exit 4", "tag": "build"}),
        )
        .insert_header(CREDENTIAL)
        .insert_header(("Idempotency-Key", "cmd-key-1")),
    )
    .await;
    let cmd = started.expect_ok(201).clone();
    assert_eq!(cmd["state"], "running");
    assert_eq!(cmd["tag"], "build");
    let cmd_id = cmd["id"].as_str().unwrap().to_owned();
    assert!(cmd_id.starts_with("cmd_"));

    // The same key and body replay the answer.
    let replay = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"command": "for i in 1 2 3; do echo line-$i; sleep 0.2; done; echo oops >&2; exit 4", "tag": "build"}),
        )
        .insert_header(CREDENTIAL)
        .insert_header(("Idempotency-Key", "cmd-key-1")),
    )
    .await;
    assert_eq!(replay.expect_ok(200)["id"], cmd_id.as_str());
    assert_eq!(replay.headers.get("idempotent-replayed").unwrap(), "true");

    // Follow it to the end as SSE.
    let out = format!("/v1/sandboxes/{id}/commands/{cmd_id}/output");
    let sse = send(
        &app,
        get(&w, &out).insert_header(("Accept", "text/event-stream")),
    )
    .await;
    assert_eq!(sse.status.as_u16(), 200);
    assert_eq!(
        sse.headers.get("content-type").unwrap(),
        "text/event-stream"
    );
    let events = sse_events(&sse.text);
    assert_eq!(stdout_of(&events), "line-1\nline-2\nline-3\n");
    let (last_id, last_name, last) = events.last().unwrap();
    assert_eq!(last_name, "exit");
    assert_eq!(
        (last["state"].as_str(), last["exitCode"].as_i64()),
        (Some("exited"), Some(4))
    );
    assert!(
        events
            .iter()
            .any(|(_, n, d)| n == "stderr" && d["data"] == "oops\n")
    );

    // Reconnecting after the second event continues exactly there.
    let second = events[1].0;
    let resumed = send(
        &app,
        get(&w, &out)
            .insert_header(("Accept", "text/event-stream"))
            .insert_header(("Last-Event-ID", second.to_string())),
    )
    .await;
    let rest = sse_events(&resumed.text);
    assert_eq!(rest, events[2..]);
    assert_eq!(rest.last().unwrap().0, *last_id);

    // The same as JSON pages.
    let page = send(&app, get(&w, &format!("{out}?after={second}"))).await;
    let page = page.expect_ok(200);
    assert_eq!(page["done"], true);
    assert_eq!(page["events"].as_array().unwrap().len(), rest.len());

    // Get, with ?wait on an ended command, and list (with a state filter).
    let got = send(
        &app,
        get(&w, &format!("/v1/sandboxes/{id}/commands/{cmd_id}?wait=5")),
    )
    .await;
    let got = got.expect_ok(200);
    assert_eq!(
        (got["state"].as_str(), got["exitCode"].as_i64()),
        (Some("exited"), Some(4))
    );
    assert_eq!(got["stdoutBytes"], 21);
    let list = send(
        &app,
        get(&w, &format!("/v1/sandboxes/{id}/commands?state=exited")),
    )
    .await;
    assert_eq!(list.expect_ok(200)["items"][0]["id"], cmd_id.as_str());
    let none = send(
        &app,
        get(&w, &format!("/v1/sandboxes/{id}/commands?state=running")),
    )
    .await;
    assert_eq!(none.expect_ok(200)["items"], json!([]));
}

#[actix_web::test]
async fn stdin_and_signals_reach_a_running_command() {
    let (w, _double) = world(None).await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let sbx = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "e2b"})).insert_header(CREDENTIAL),
    )
    .await;
    let id = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let start = |body: Value| {
        post(&w, &format!("/v1/sandboxes/{id}/commands"), body).insert_header(CREDENTIAL)
    };
    let cat = send(&app, start(json!({"command": "cat", "stdin": true}))).await;
    let cat = cat.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let stdin = format!("/v1/sandboxes/{id}/commands/{cat}/stdin");
    let r = send(
        &app,
        post(
            &w,
            &stdin,
            json!({"data": "aGk=", "encoding": "base64", "offset": 0}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    assert_eq!(r.expect_ok(200)["stdinBytes"], 2);
    let r = send(
        &app,
        post(
            &w,
            &stdin,
            json!({"data": "hi!", "offset": 0, "close": true}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    assert_eq!(
        r.expect_ok(200),
        &json!({"stdinBytes": 3, "stdinOpen": false})
    );
    let out = send(
        &app,
        get(&w, &format!("/v1/sandboxes/{id}/commands/{cat}/output"))
            .insert_header(("Accept", "text/event-stream")),
    )
    .await;
    assert_eq!(stdout_of(&sse_events(&out.text)), "hi!");

    let sleeper = send(&app, start(json!({"command": "sleep 30"}))).await;
    let sleeper = sleeper.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let signalled = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands/{sleeper}/signal"),
            json!({"signal": "TERM"}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    signalled.expect_ok(200);
    let ended = send(
        &app,
        get(
            &w,
            &format!("/v1/sandboxes/{id}/commands/{sleeper}?wait=30"),
        ),
    )
    .await;
    let ended = ended.expect_ok(200);
    assert_eq!(
        (ended["state"].as_str(), ended["exitCode"].as_i64()),
        (Some("killed"), Some(143))
    );
}

#[actix_web::test]
async fn what_a_provider_lacks_and_malformed_requests_are_refused_before_any_provider_call() {
    let (w, double) = world(Some(CommandCapabilities {
        stdin: false,
        signals: vec![Signal::Kill],
        resume: CommandResume::LiveOnly,
        binary_output: true,
        emulated: false,
    }))
    .await;
    let app = test::init_service(corral::server::app(w.state.clone())).await;
    let sbx = send(
        &app,
        post(&w, "/v1/sandboxes", json!({"provider": "e2b"})).insert_header(CREDENTIAL),
    )
    .await;
    let id = sbx.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let cmd = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"command": "sleep 5"}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    let cmd = cmd.expect_ok(201)["id"].as_str().unwrap().to_owned();
    let before = double.total();

    let no_stdin = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"command": "cat", "stdin": true}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    no_stdin.expect_error(400, "invalid_request");
    assert!(
        no_stdin.text.contains("commands.stdin"),
        "{}",
        no_stdin.text
    );
    let no_term = send(
        &app,
        post(
            &w,
            &format!("/v1/sandboxes/{id}/commands/{cmd}/signal"),
            json!({"signal": "TERM"}),
        )
        .insert_header(CREDENTIAL),
    )
    .await;
    no_term.expect_error(400, "invalid_request");
    assert!(
        no_term.text.contains("commands.signals"),
        "{}",
        no_term.text
    );
    assert_eq!(double.total(), before, "no provider call for what it lacks");

    let cases: Vec<(TestRequest, u16, &str)> = vec![
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands/cmd_nope")),
            400,
            "invalid_request",
        ),
        (
            get(
                &w,
                &format!(
                    "/v1/sandboxes/{id}/commands/{}",
                    corral_domain::CommandId::new()
                ),
            ),
            404,
            "sandbox_not_found",
        ),
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands/{cmd}?wait=61")),
            400,
            "invalid_request",
        ),
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands/{cmd}?nope=1")),
            400,
            "invalid_request",
        ),
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands/{cmd}/output"))
                .insert_header(("Last-Event-ID", "x")),
            400,
            "invalid_request",
        ),
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands?state=asleep")),
            400,
            "invalid_request",
        ),
        (
            get(&w, &format!("/v1/sandboxes/{id}/commands?cursor=nope")),
            400,
            "invalid_request",
        ),
        (
            post(
                &w,
                &format!("/v1/sandboxes/{id}/commands"),
                json!({"command": "x", "timeoutSeconds": 0}),
            )
            .insert_header(CREDENTIAL),
            400,
            "invalid_request",
        ),
        (
            post(
                &w,
                &format!("/v1/sandboxes/{id}/commands/{cmd}/signal"),
                json!({"signal": "STOP"}),
            )
            .insert_header(CREDENTIAL),
            400,
            "invalid_request",
        ),
        (
            post(
                &w,
                &format!("/v1/sandboxes/{id}/commands/{cmd}/stdin"),
                json!({"data": "!!", "encoding": "base64"}),
            )
            .insert_header(CREDENTIAL),
            400,
            "invalid_file_content",
        ),
    ];
    for (req, status, code) in cases {
        send(&app, req).await.expect_error(status, code);
    }
    // Another project's command is not found.
    let other = w.other_project_key("other").await;
    let foreign = send(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/sandboxes/{id}/commands/{cmd}"))
            .insert_header(("Authorization", format!("Bearer {other}"))),
    )
    .await;
    foreign.expect_error(404, "sandbox_not_found");
}
