//! The sandbox page as a place to work (issue 26), over HTTP from the real server with a
//! `local` sandbox: run a command from the form and read its page, its history, its events
//! and its output stream (resumed with `Last-Event-ID`); write a file and read it back
//! escaped; failures said in words. The browser test
//! (`console_command_streams_into_the_page_and_survives_a_reload_in_chromium`) checks the same
//! pages live in Chromium.

use std::time::{Duration, Instant};

use futures::StreamExt as _;

use super::Journey;
use super::console_http::{client, follow, post_form, project, signed_in, start};

/// A signed-in user with a `local` sandbox made with a key over the public API: the session
/// cookie, its CSRF field and the sandbox page's path.
pub(super) struct Workbench {
    pub(super) cookie: String,
    pub(super) csrf: String,
    pub(super) page: String,
}

pub(super) async fn workbench(j: &Journey, http: &reqwest::Client, email: &str) -> Workbench {
    let (cookie, actor) = signed_in(j, http, email).await;
    let (acc, prj) = project(j, &actor, "work").await;
    let pid = prj.parse().unwrap();
    let key = j
        .control
        .create_key(&actor, pid, Default::default())
        .await
        .unwrap()
        .key;
    let created = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "local"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let sandbox = created["id"].as_str().unwrap().to_owned();
    let csrf = j
        .control
        .csrf_token(cookie.trim_start_matches("corral_session="));
    Workbench {
        page: format!("/console/accounts/{acc}/projects/{prj}/sandboxes/{sandbox}"),
        cookie,
        csrf,
    }
}

pub(super) async fn get(
    http: &reqwest::Client,
    j: &Journey,
    path: &str,
    cookie: &str,
) -> reqwest::Response {
    http.get(j.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
}

/// The page at `path`, as text.
pub(super) async fn page_text(
    http: &reqwest::Client,
    j: &Journey,
    path: &str,
    cookie: &str,
) -> String {
    get(http, j, path, cookie).await.text().await.unwrap()
}

/// Starts `command` from the sandbox page's form: the command page's path.
async fn run(http: &reqwest::Client, j: &Journey, w: &Workbench, command: &str) -> String {
    run_with(http, j, w, &[("command", command)]).await
}

/// Submits the sandbox page's run form with `fields` (and its CSRF field): the command
/// page's path.
async fn run_with(
    http: &reqwest::Client,
    j: &Journey,
    w: &Workbench,
    fields: &[(&str, &str)],
) -> String {
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("csrf", &w.csrf)
        .extend_pairs(fields)
        .finish();
    let resp = post_form(
        http,
        j,
        &format!("{}/commands", w.page),
        Some(&w.cookie),
        &body,
    )
    .await;
    assert_eq!(resp.status(), 303, "{:?}", resp.headers());
    let to = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        to.starts_with(&format!("{}/commands/cmd_", w.page)),
        "the command's page: {to}"
    );
    to
}

/// The command page, once the command has ended (its page no longer names a stream).
async fn ended_page(http: &reqwest::Client, j: &Journey, w: &Workbench, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = get(http, j, path, &w.cookie).await;
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.unwrap();
        if !body.contains("data-stream=") {
            return body;
        }
        assert!(Instant::now() < deadline, "the command did not end: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The text of the element with `id` (up to its first tag's end).
fn element<'a>(body: &'a str, id: &str) -> &'a str {
    let at = body
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}: {body}"));
    let rest = &body[at..];
    let open = rest.find('>').unwrap() + 1;
    let close = [rest.find("</pre>"), rest.find("</dd>")]
        .into_iter()
        .flatten()
        .min()
        .unwrap();
    &rest[open..close]
}

#[actix_web::test]
async fn console_runs_a_command_and_shows_its_output_history_events_and_cost() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;

    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(
        page.contains(&format!("action=\"{}/commands\"", w.page))
            && page.contains("id=\"run-command\""),
        "the run form: {page}"
    );
    assert!(page.contains("No commands yet"), "{page}");
    assert!(
        page.contains(&format!("curl -X POST {}/v1/sandboxes/", j.base))
            && page.contains("/commands -H"),
        "the empty history shows the API's request with this server's URL: {page}"
    );
    assert!(
        page.contains("id=\"estimated-cost\""),
        "the cost card: {page}"
    );
    assert!(page.contains("sandbox.created"), "its events: {page}");

    // The form is CSRF-protected like every console form.
    let forged = post_form(
        &http,
        &j,
        &format!("{}/commands", w.page),
        Some(&w.cookie),
        "command=touch+%2Ftmp%2Fforged",
    )
    .await;
    assert_eq!(forged.status(), 403);

    let cmd = run(&http, &j, &w, "echo one; echo '<two>' >&2; exit 3").await;
    let body = ended_page(&http, &j, &w, &cmd).await;
    let output = element(&body, "output");
    assert!(output.contains("one\n"), "stdout shown: {output}");
    assert!(
        output.contains("<span class=\"stderr\">&lt;two&gt;\n</span>"),
        "stderr shown apart, escaped: {output}"
    );
    assert_eq!(element(&body, "exit-code"), "3");
    assert!(body.contains("data-state=\"exited\""), "{body}");

    // The history on the sandbox page: command, state, exit code, a link to its page.
    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    let history = &page[page.find("id=\"command-history\"").expect("a history")..];
    assert!(history.contains(&format!("href=\"{cmd}\"")), "{history}");
    assert!(
        history.contains("echo one; echo '&lt;two&gt;' &gt;&amp;2; exit 3"),
        "{history}"
    );
    assert!(
        history.contains("data-state=\"exited\"") && history.contains("<td>3</td>"),
        "{history}"
    );
    assert!(
        page.contains("command.exited"),
        "the exit in the events: {page}"
    );

    // The console's stream of the output (cookie auth): every event to the exit, then its
    // end; with Last-Event-ID, only what follows that event.
    let sse = |last: Option<&str>| {
        let mut req = http
            .get(j.url(&format!("{cmd}/output")))
            .header("cookie", &w.cookie)
            .header("accept", "text/event-stream");
        if let Some(id) = last {
            req = req.header("last-event-id", id);
        }
        req.send()
    };
    let all = sse(None).await.unwrap();
    assert_eq!(all.status(), 200);
    assert_eq!(all.headers()["content-type"], "text/event-stream");
    let all = all.text().await.unwrap();
    assert!(
        all.contains("event: stdout") && all.contains("event: stderr"),
        "{all}"
    );
    assert!(all.contains("\"exitCode\":3"), "{all}");
    let first = all
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_owned();
    let rest = sse(Some(&first)).await.unwrap().text().await.unwrap();
    assert!(
        !rest.contains(&format!("id: {first}\n")),
        "resumed after {first}: {rest}"
    );
    assert!(rest.contains("event: exit"), "{rest}");
    let garbage = sse(Some("not-a-number")).await.unwrap();
    assert_eq!(garbage.status(), 400);

    // Another sandbox's command id, or none: the 404 page, never a 500.
    let missing = get(
        &http,
        &j,
        &format!("{}/commands/cmd_01JZZZZZZZZZZZZZZZZZZZZZZZ", w.page),
        &w.cookie,
    )
    .await;
    assert_eq!(missing.status(), 404);
    let junk = get(&http, &j, &format!("{}/commands/nope", w.page), &w.cookie).await;
    assert_eq!(junk.status(), 404);
}

/// A running command's page names the stream and where to resume; the stream brings the
/// rest as it is made (a line before the exit arrives on its own), and a page loaded again
/// shows the output so far.
#[actix_web::test]
async fn console_follows_a_running_command_and_a_reload_reattaches() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let cmd = run(
        &http,
        &j,
        &w,
        "for i in 1 2 3; do echo line$i; sleep 1; done",
    )
    .await;
    let body = page_text(&http, &j, &cmd, &w.cookie).await;
    assert!(
        body.contains(&format!("data-stream=\"{cmd}/output\"")),
        "a running command names its stream: {body}"
    );
    let after: u64 = body
        .split("data-after=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    let resp = http
        .get(j.url(&format!("{cmd}/output?after={after}")))
        .header("cookie", &w.cookie)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut seen = String::new();
    let mut line_before_exit = false;
    while let Some(chunk) = stream.next().await {
        let chunk = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
        if chunk.contains("line") && !chunk.contains("event: exit") && !seen.contains("line") {
            line_before_exit = true;
        }
        seen.push_str(&chunk);
    }
    assert!(
        seen.contains("line3") && seen.contains("\"exitCode\":0"),
        "{seen}"
    );
    assert!(line_before_exit, "output arrived while it ran: {seen}");
    // Reload: all the output, the final state, no stream.
    let body = ended_page(&http, &j, &w, &cmd).await;
    assert_eq!(element(&body, "output"), "line1\nline2\nline3\n");
    assert_eq!(element(&body, "exit-code"), "0");
}

/// Write a file from the form (CRLF from the browser becomes LF), read it back escaped;
/// a missing file or a bad path is said in words on the page, never a 500.
#[actix_web::test]
async fn console_writes_and_reads_a_file_and_says_why_not() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("csrf", &w.csrf)
        .append_pair("path", "/tmp/note.html")
        .append_pair("content", "<b>bold</b>\r\nline two\r\n")
        .finish();
    let written = post_form(
        &http,
        &j,
        &format!("{}/files", w.page),
        Some(&w.cookie),
        &body,
    )
    .await;
    let page = follow(&http, &j, written, &w.cookie).await;
    assert!(page.contains("Wrote 21 bytes to /tmp/note.html."), "{page}");
    let content = element(&page, "file-content");
    assert_eq!(content, "&lt;b&gt;bold&lt;/b&gt;\nline two\n");
    assert!(!page.contains("<b>bold</b>"), "escaped: {page}");

    let missing = get(
        &http,
        &j,
        &format!("{}/files?path=%2Ftmp%2Fnope.txt", w.page),
        &w.cookie,
    )
    .await;
    assert_eq!(missing.status(), 200);
    let missing = missing.text().await.unwrap();
    assert!(missing.contains("id=\"file-error\""), "{missing}");
    let relative = get(
        &http,
        &j,
        &format!("{}/files?path=relative", w.page),
        &w.cookie,
    )
    .await;
    assert!(relative.status().as_u16() < 500);
    let relative = relative.text().await.unwrap();
    assert!(relative.contains("id=\"file-error\""), "{relative}");

    // Without the CSRF field nothing is written.
    let forged = post_form(
        &http,
        &j,
        &format!("{}/files", w.page),
        Some(&w.cookie),
        "path=%2Ftmp%2Fforged&content=x",
    )
    .await;
    assert_eq!(forged.status(), 403);
    let after = page_text(
        &http,
        &j,
        &format!("{}/files?path=%2Ftmp%2Fforged", w.page),
        &w.cookie,
    )
    .await;
    assert!(after.contains("id=\"file-error\""), "{after}");
}

/// The registry list filters by status (`deleted`: the tombstones), provider and a piece of
/// the id, newest first; a filter nothing matches says so.
#[actix_web::test]
async fn console_sandbox_list_filters_by_status_provider_and_id() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "list").await;
    let key = j
        .control
        .create_key(&actor, prj.parse().unwrap(), Default::default())
        .await
        .unwrap()
        .key;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let made: serde_json::Value = http
            .post(j.url("/v1/sandboxes"))
            .bearer_auth(&key)
            .json(&serde_json::json!({"provider": "local"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(made["id"].as_str().unwrap().to_owned());
    }
    let gone = http
        .delete(j.url(&format!("/v1/sandboxes/{}", ids[0])))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert!(gone.status().is_success());
    let list = |query: &str| {
        let url = format!("/console/accounts/{acc}/projects/{prj}?{query}");
        let (http, j, cookie) = (&http, &j, &cookie);
        async move {
            let r = get(http, j, &url, cookie).await;
            assert_eq!(r.status(), 200);
            let body = r.text().await.unwrap();
            let rows: Vec<String> = body
                .split("data-sandbox=\"")
                .skip(1)
                .map(|r| r.split('"').next().unwrap().to_owned())
                .collect();
            (rows, body)
        }
    };
    let (all, body) = list("").await;
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(all, newest_first, "{body}");
    assert!(body.contains("id=\"sandbox-filter\""), "{body}");
    // At a glance: two live `local` sandboxes (the tombstone is not counted), none failed.
    let glance = &body[body
        .find("id=\"project-overview\"")
        .unwrap_or_else(|| panic!("{body}"))..];
    let local = &glance[glance
        .find("data-provider=\"local\"")
        .unwrap_or_else(|| panic!("{glance}"))..];
    assert!(
        local.contains("data-live=\"2\"") && local.contains("data-failed=\"0\""),
        "{local}"
    );
    assert_eq!(list("status=deleted").await.0, [ids[0].clone()]);
    assert_eq!(
        list("status=running").await.0,
        [ids[2].clone(), ids[1].clone()]
    );
    assert_eq!(list("provider=local").await.0.len(), 3);
    let (none, body) = list("provider=e2b").await;
    assert!(
        none.is_empty() && body.contains("id=\"no-match\""),
        "{body}"
    );
    assert!(
        !body.contains("id=\"project-overview\""),
        "a filtered page is the list only"
    );
    let piece = &ids[1][ids[1].len() - 8..];
    assert_eq!(list(&format!("q={piece}")).await.0, [ids[1].clone()]);
    // The choice stays selected; an unknown status is ignored, not a 500.
    assert!(
        list("status=deleted")
            .await
            .1
            .contains("<option value=\"deleted\" selected>")
    );
    assert_eq!(list("status=bogus&provider=nope").await.0.len(), 3);
}

/// A `member` reads (history, output, files) but is offered no run or write form, and a
/// forged post from one is refused in words; nothing runs.
#[actix_web::test]
async fn console_members_read_but_only_admins_run_commands_and_write_files() {
    let j = start().await;
    let http = client();
    let (_, ada) = signed_in(&j, &http, "ada@example.test").await;
    let org = j
        .control
        .create_organization(
            &ada,
            corral_control::CreateOrganization {
                name: "Engines".to_owned(),
            },
        )
        .await
        .unwrap();
    let p = j
        .control
        .create_project(
            &ada,
            org.id.parse().unwrap(),
            corral_control::ProjectName {
                name: "shared".to_owned(),
            },
        )
        .await
        .unwrap();
    let key = j
        .control
        .create_key(&ada, p.id.parse().unwrap(), Default::default())
        .await
        .unwrap()
        .key;
    let made: serde_json::Value = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "local"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sandbox = made["id"].as_str().unwrap();
    let (lin_cookie, lin) = signed_in(&j, &http, "lin@example.test").await;
    j.control
        .invite(
            &ada,
            org.id.parse().unwrap(),
            corral_control::CreateInvitation {
                email: "lin@example.test".to_owned(),
                role: corral_control::Role::Member,
            },
        )
        .await
        .unwrap();
    let mail = j
        .smtp
        .wait_for_containing("lin@example.test", "invitations/accept")
        .await;
    let link = super::sign_in_link(&mail);
    let token = link.split("token=").nth(1).unwrap().to_owned();
    j.control
        .accept_invitation(&lin, corral_control::AcceptInvitation { token })
        .await
        .unwrap();
    let page = format!(
        "/console/accounts/{}/projects/{}/sandboxes/{sandbox}",
        org.id, p.id
    );
    let body = get(&http, &j, &page, &lin_cookie)
        .await
        .text()
        .await
        .unwrap();
    assert!(body.contains("id=\"commands\""), "{body}");
    assert!(
        !body.contains("id=\"run-command\""),
        "no run form for a member: {body}"
    );
    assert!(
        !body.contains("id=\"write-content\""),
        "no write form: {body}"
    );
    assert!(
        body.contains("id=\"read-path\""),
        "reading is offered: {body}"
    );
    let csrf = j
        .control
        .csrf_token(lin_cookie.trim_start_matches("corral_session="));
    let refused = post_form(
        &http,
        &j,
        &format!("{page}/commands"),
        Some(&lin_cookie),
        &format!("csrf={csrf}&command=touch+%2Ftmp%2Fby-lin"),
    )
    .await;
    let back = follow(&http, &j, refused, &lin_cookie).await;
    assert!(back.contains("role=\"alert\""), "said why: {back}");
    assert!(back.contains("No commands yet"), "nothing ran: {back}");
    let refused = post_form(
        &http,
        &j,
        &format!("{page}/files"),
        Some(&lin_cookie),
        &format!("csrf={csrf}&path=%2Ftmp%2Fby-lin&content=x"),
    )
    .await;
    let back = follow(&http, &j, refused, &lin_cookie).await;
    assert!(back.contains("role=\"alert\""), "said why: {back}");
    let read = get(
        &http,
        &j,
        &format!("{page}/files?path=%2Ftmp%2Fby-lin"),
        &lin_cookie,
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        read.contains("id=\"file-error\""),
        "nothing was written: {read}"
    );
}

/// A running command's page offers stopping it (a CSRF-checked post of `TERM`); the sandbox
/// page deletes the sandbox behind a confirmation, leaving its tombstone with no forms to
/// change it.
#[actix_web::test]
async fn console_stops_a_running_command_and_deletes_the_sandbox() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let cmd = run(&http, &j, &w, "sleep 300").await;
    let body = page_text(&http, &j, &cmd, &w.cookie).await;
    assert!(body.contains("id=\"command-stop\""), "{body}");
    let signal = format!("{cmd}/signal");
    let forged = post_form(&http, &j, &signal, Some(&w.cookie), "signal=TERM").await;
    assert_eq!(forged.status(), 403);
    let sent = post_form(
        &http,
        &j,
        &signal,
        Some(&w.cookie),
        &format!("csrf={}&signal=TERM", w.csrf),
    )
    .await;
    let back = follow(&http, &j, sent, &w.cookie).await;
    assert!(back.contains("Sent TERM to the command."), "{back}");
    let body = ended_page(&http, &j, &w, &cmd).await;
    assert!(
        body.contains("data-state=\"killed\"") || element(&body, "exit-code") == "143",
        "stopped by TERM: {body}"
    );
    assert!(
        !body.contains("id=\"command-stop\""),
        "nothing left to stop: {body}"
    );

    let delete = format!("{}/delete", w.page);
    let forged = post_form(&http, &j, &delete, Some(&w.cookie), "").await;
    assert_eq!(forged.status(), 403);
    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(page.contains("id=\"confirm-delete\""), "{page}");
    let deleted = post_form(
        &http,
        &j,
        &delete,
        Some(&w.cookie),
        &format!("csrf={}", w.csrf),
    )
    .await;
    let page = follow(&http, &j, deleted, &w.cookie).await;
    assert!(
        page.contains("Its record stays here as a tombstone."),
        "{page}"
    );
    assert!(page.contains("This sandbox was deleted"), "{page}");
    assert!(
        !page.contains("id=\"run-command\"") && !page.contains("id=\"confirm-delete\""),
        "a tombstone offers nothing to change: {page}"
    );
}

/// Input typed on a command's page reaches its stdin, as typed, once: the form carries the
/// offset it was made at, so a resent form writes nothing twice; closing its input ends a
/// `cat`. A command started without stdin offers no such form; the audit log says input was
/// sent, never what.
#[actix_web::test]
async fn console_types_to_a_running_command_once_and_closes_its_input() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(
        page.contains("id=\"run-stdin\""),
        "the stdin choice: {page}"
    );

    let plain = run(&http, &j, &w, "sleep 30").await;
    let body = page_text(&http, &j, &plain, &w.cookie).await;
    assert!(
        body.contains("id=\"command-stop\"") && !body.contains("id=\"command-stdin\""),
        "no input form without stdin: {body}"
    );

    let cmd = run_with(&http, &j, &w, &[("command", "cat"), ("stdin", "1")]).await;
    let body = page_text(&http, &j, &cmd, &w.cookie).await;
    assert!(body.contains("id=\"command-stdin\""), "{body}");
    assert!(
        body.contains("name=\"offset\" value=\"0\""),
        "the form starts at offset 0: {body}"
    );
    let stdin = format!("{cmd}/stdin");
    let forged = post_form(&http, &j, &stdin, Some(&w.cookie), "data=forged&offset=0").await;
    assert_eq!(forged.status(), 403);

    let form = format!("csrf={}&offset=0&data=secret+words&newline=1", w.csrf);
    for _ in 0..2 {
        // The second is a resent form (a browser's "send again"): the same offset.
        let sent = post_form(&http, &j, &stdin, Some(&w.cookie), &form).await;
        let back = follow(&http, &j, sent, &w.cookie).await;
        assert!(back.contains("Sent 13 bytes."), "{back}");
        assert!(
            back.contains("name=\"offset\" value=\"13\""),
            "the next form starts after what was accepted: {back}"
        );
    }
    let closed = post_form(
        &http,
        &j,
        &stdin,
        Some(&w.cookie),
        &format!("csrf={}&offset=13&data=&close=1", w.csrf),
    )
    .await;
    let back = follow(&http, &j, closed, &w.cookie).await;
    assert!(back.contains("Closed its input."), "{back}");
    let body = ended_page(&http, &j, &w, &cmd).await;
    assert_eq!(element(&body, "output"), "secret words\n", "{body}");
    assert_eq!(element(&body, "exit-code"), "0", "cat ended at end of file");
    assert!(!body.contains("id=\"command-stdin\""), "{body}");

    // An ended command's input is refused in words.
    let late = post_form(
        &http,
        &j,
        &stdin,
        Some(&w.cookie),
        &format!("csrf={}&offset=13&data=more", w.csrf),
    )
    .await;
    let back = follow(&http, &j, late, &w.cookie).await;
    assert!(back.contains("stdin is not open"), "{back}");

    let acc = w.page.split('/').nth(3).unwrap();
    let audit = page_text(
        &http,
        &j,
        &format!("/console/accounts/{acc}/audit"),
        &w.cookie,
    )
    .await;
    assert!(audit.contains("command.stdin"), "{audit}");
    assert!(!audit.contains("secret words"), "never the input: {audit}");
}

/// The sandbox page names its lifecycle-event stream and the id it follows on from; the
/// stream (cookie auth) brings what happens next, here the delete made over the API.
#[actix_web::test]
async fn console_sandbox_page_follows_its_lifecycle_events() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let body = page_text(&http, &j, &w.page, &w.cookie).await;
    let stream = format!("{}/events", w.page);
    assert!(
        body.contains(&format!("data-events=\"{stream}\"")),
        "{body}"
    );
    let after: u64 = body
        .split("data-after=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        after > 0,
        "the page's events (the create) come before it: {body}"
    );
    let resp = http
        .get(j.url(&format!("{stream}?after={after}")))
        .header("cookie", &w.cookie)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let csrf = format!("csrf={}", w.csrf);
    let deleted = post_form(
        &http,
        &j,
        &format!("{}/delete", w.page),
        Some(&w.cookie),
        &csrf,
    )
    .await;
    assert_eq!(deleted.status(), 303);
    let mut frames = resp.bytes_stream();
    let mut seen = String::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = frames.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if seen.contains("event: sandbox.deleted") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the delete came through the stream: {seen}");
    assert!(
        !seen.contains("event: sandbox.created"),
        "only what followed {after}: {seen}"
    );
    // A tombstone's page follows nothing.
    let body = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(!body.contains("data-events="), "{body}");
}

/// An empty project's list shows the real request that makes a sandbox: this server's URL,
/// `local`, which needs no provider account.
#[actix_web::test]
async fn console_empty_sandbox_list_shows_the_request_that_makes_one() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "empty").await;
    let body = get(
        &http,
        &j,
        &format!("/console/accounts/{acc}/projects/{prj}"),
        &cookie,
    )
    .await
    .text()
    .await
    .unwrap();
    let empty = &body[body
        .find("id=\"first-sandbox\"")
        .unwrap_or_else(|| panic!("{body}"))..];
    assert!(
        empty.contains(&format!("curl -X POST {}/v1/sandboxes -H", j.base))
            && empty.contains("&quot;provider&quot;:&quot;local&quot;")
            && empty.contains("needs no provider account"),
        "{empty}"
    );
    assert!(
        empty.contains(&format!(
            "href=\"/console/accounts/{acc}/projects/{prj}/keys\""
        )),
        "{empty}"
    );
}

/// The audit log records work done from the console (the command's id, never its text),
/// names a project by its name and links targets to their pages; it filters by who and
/// what.
#[actix_web::test]
async fn console_audit_log_links_targets_and_filters_by_actor_and_action() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let cmd = run(&http, &j, &w, "echo secret-looking-text").await;
    let account = w.page.split('/').nth(3).unwrap().to_owned();
    let audit = format!("/console/accounts/{account}/audit");
    let body = page_text(&http, &j, &audit, &w.cookie).await;
    assert!(body.contains("<code>command.start</code>"), "{body}");
    assert!(body.contains("<code>key.create</code>"), "{body}");
    assert!(
        body.contains(&format!("href=\"{cmd}\"")),
        "the command's page is linked: {body}"
    );
    assert!(
        !body.contains("secret-looking-text"),
        "never the command's text: {body}"
    );
    let project = w.page.split("/sandboxes/").next().unwrap();
    assert!(
        body.contains(&format!("<a href=\"{project}\"><code>work</code></a>")),
        "the project by name, linked: {body}"
    );
    assert!(body.contains("id=\"audit-filter\""), "{body}");
    let only = page_text(
        &http,
        &j,
        &format!("{audit}?action=command.start"),
        &w.cookie,
    )
    .await;
    assert!(only.contains("<code>command.start</code>"), "{only}");
    assert!(!only.contains("<code>key.create</code>"), "{only}");
    assert!(
        only.contains("<option value=\"command.start\" selected>"),
        "{only}"
    );
    let nobody = page_text(
        &http,
        &j,
        &format!("{audit}?actor=someone%40else.test"),
        &w.cookie,
    )
    .await;
    assert!(nobody.contains("id=\"audit-no-match\""), "{nobody}");
}

/// A failed create's page says why, in the words its caller was answered (issue 26, bug 6):
/// here the provider refuses the project's stored credential.
#[actix_web::test]
async fn console_says_why_a_sandbox_create_failed() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "failing").await;
    let pid = prj.parse().unwrap();
    j.control
        .put_profile(
            &actor,
            pid,
            corral_domain::Provider::E2b,
            corral_control::PutProfile {
                credential: Some("e2b_not_the_fakes_key".to_owned().into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let key = j
        .control
        .create_key(&actor, pid, Default::default())
        .await
        .unwrap()
        .key;
    let refused = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "e2b"}))
        .send()
        .await
        .unwrap();
    assert!(refused.status().is_client_error() || refused.status().is_server_error());
    let answer: serde_json::Value = refused.json().await.unwrap();
    let code = answer["error"]["code"].as_str().unwrap().to_owned();
    let message = answer["error"]["message"].as_str().unwrap().to_owned();
    // The failed create is in the registry; find its page from the list.
    let list = get(
        &http,
        &j,
        &format!("/console/accounts/{acc}/projects/{prj}?status=failed"),
        &cookie,
    )
    .await
    .text()
    .await
    .unwrap();
    let sandbox = list
        .split(&format!(
            "/console/accounts/{acc}/projects/{prj}/sandboxes/"
        ))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no failed sandbox listed: {list}"))
        .to_owned();
    let page = get(
        &http,
        &j,
        &format!("/console/accounts/{acc}/projects/{prj}/sandboxes/{sandbox}"),
        &cookie,
    )
    .await
    .text()
    .await
    .unwrap();
    let at = page
        .find("id=\"create-failed\"")
        .unwrap_or_else(|| panic!("no #create-failed: {page}"));
    let why = &page[at..at + page[at..].find("</div>").unwrap()];
    assert!(why.contains(&code), "{why} / {code}");
    // maud escapes the message as it escapes any text.
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    assert!(why.contains(&escaped), "{why} / {message}");
    assert!(
        !why.contains("e2b_not_the_fakes_key"),
        "never the credential: {why}"
    );
}
