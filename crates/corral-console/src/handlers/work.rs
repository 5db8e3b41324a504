//! Working in a sandbox: run a command and follow its output (a page with the output so far,
//! and an event stream the script reads to append what follows), type to it, stop it, read and
//! write a file, delete the sandbox.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use corral_control::{ControlError, ProjectId};
use corral_domain::{
    FileEncoding, OutputEvent, OutputStream, ReadFileInput, Signal, StartCommandInput, StdinInput,
    WriteFileInput,
};
use corral_web::AppState;

use super::ctx::{
    Page, command_row, control, failed, failure_page, get_ctx, parse, post_ctx, project_chrome,
    sentence, try_page, when,
};
use crate::form::{Form, MAX_FORM_BYTES};
use crate::pages::{self, paths};
use crate::respond::{html, not_found, redirect};
use crate::view::{self, Flash, OutputChunk};

/// Output pages read for one command page, at most (256 events each); the rest is said to be
/// there, not shown.
const MAX_OUTPUT_PAGES: usize = 16;

/// `POST …/sandboxes/{sandbox}/commands`: starts the form's command, then shows its page.
pub(crate) async fn start_command(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::sandbox(&path.0, &path.1, &path.2);
    let Some(command) = form.get("command") else {
        return redirect(&back, Some(Flash::error("Type a command to run.")));
    };
    let input = StartCommandInput {
        command: command.to_owned(),
        cwd: None,
        env: None,
        stdin: form.get("stdin").is_some(),
        timeout_seconds: None,
        tag: None,
    };
    match control(&state)
        .start_command(&ctx.signed.actor, pid, &path.2, input)
        .await
    {
        Ok(c) => redirect(
            &paths::command(&path.0, &path.1, &path.2, &c.id.to_string()),
            None,
        ),
        Err(e) => not_done(&back, &e, "run a command"),
    }
}

/// A failed form on a sandbox: a stopped one says so and where to resume it (its page's
/// Resume button), rather than the API's `sandbox_stopped` words; the rest as any form.
fn not_done(back: &str, e: &ControlError, what: &str) -> Page {
    if e.code().as_str() == "sandbox_stopped" {
        return redirect(
            back,
            Some(Flash::error(format!(
                "This sandbox is stopped, so it cannot {what}. Resume it first (Resume, on its \
                 page), then try again."
            ))),
        );
    }
    failed(back, e)
}

/// `GET …/sandboxes/{sandbox}/commands/{cmd}`: the command and its output so far; while it
/// runs, the page names the stream the script follows from where the page ends.
pub(crate) async fn command_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (acc, prj, sbx, cmd) = (&path.0, &path.1, &path.2, &path.3);
    let (chrome, project, pid) = try_page!(project_chrome(&req, control, &ctx, acc, prj).await);
    let actor = &ctx.signed.actor;
    let mut output = Vec::new();
    let (mut after, mut pages, mut done) = (0, 0, false);
    // Output first, then the record: a record read last that says "ended" while the output
    // read did not reach the exit means it ended in between, and the rest is read too.
    let command = loop {
        while !done && pages < MAX_OUTPUT_PAGES {
            let page = match control.command_output(actor, pid, sbx, cmd, after).await {
                Ok(p) => p,
                Err(e) => return command_failure(&req, &e),
            };
            pages += 1;
            done = page.done;
            let moved = page.next_after != after;
            after = page.next_after;
            output.extend(page.events.iter().filter_map(chunk));
            if !moved {
                break;
            }
        }
        let c = match control.command(actor, pid, sbx, cmd).await {
            Ok(c) => c,
            Err(e) => return command_failure(&req, &e),
        };
        if done || !c.state.is_final() || pages >= MAX_OUTPUT_PAGES {
            break c;
        }
        pages += 1;
    };
    let truncated = !done && command.state.is_final();
    let follow =
        (!command.state.is_final()).then(|| (paths::command_output(acc, prj, sbx, cmd), after));
    let row = command_row(&command, paths::command(acc, prj, sbx, cmd));
    let can_stop =
        !command.state.is_final() && project.account.is_admin() && !project.account.deleting;
    html(
        &req,
        StatusCode::OK,
        pages::command_page(&view::CommandPageView {
            chrome,
            project,
            sandbox: sbx.clone(),
            row,
            ended: command.ended_at.map(when),
            output,
            follow,
            truncated,
            can_stop,
            stdin_offset: (can_stop && command.stdin_open).then_some(command.stdin_bytes),
        }),
    )
}

/// `POST …/commands/{cmd}/signal`: sends the form's signal (`TERM` to stop, `KILL`), then
/// back to the command's page.
pub(crate) async fn signal_command(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let (acc, prj, sbx, cmd) = (&path.0, &path.1, &path.2, &path.3);
    let pid: ProjectId = try_page!(parse(&req, prj));
    let back = paths::command(acc, prj, sbx, cmd);
    let Some(signal) = form.get("signal").and_then(|s| s.parse::<Signal>().ok()) else {
        return redirect(&back, Some(Flash::error("Choose a signal to send.")));
    };
    match control(&state)
        .signal_command(&ctx.signed.actor, pid, sbx, cmd, signal)
        .await
    {
        Ok(_) => redirect(
            &back,
            Some(Flash::ok(format!(
                "Sent {} to the command.",
                signal.as_str()
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/commands/{cmd}/stdin`: writes the form's text (and a newline, when asked) at the
/// offset the page was made with, closes stdin when asked, then back to the command's page.
pub(crate) async fn write_stdin(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let (acc, prj, sbx, cmd) = (&path.0, &path.1, &path.2, &path.3);
    let pid: ProjectId = try_page!(parse(&req, prj));
    let back = paths::command(acc, prj, sbx, cmd);
    // Typed text is sent as typed: no trimming (browsers send a textarea's lines as CRLF).
    let mut data = form.raw("data").unwrap_or_default().replace("\r\n", "\n");
    if form.get("newline").is_some() {
        data.push('\n');
    }
    let close = form.get("close").is_some();
    if data.is_empty() && !close {
        return redirect(&back, Some(Flash::error("Type something to send.")));
    }
    let offset = match form.get("offset").map(str::parse::<u64>) {
        Some(Ok(n)) => Some(n),
        None => None,
        Some(Err(_)) => {
            return redirect(&back, Some(Flash::error("Reload the page and send again.")));
        }
    };
    let sent = data.len();
    let input = StdinInput {
        data,
        encoding: None,
        offset,
        close,
    };
    match control(&state)
        .write_command_stdin(&ctx.signed.actor, pid, sbx, cmd, input)
        .await
    {
        Ok(_) => {
            let what = match (sent, close) {
                (0, _) => "Closed its input.".to_owned(),
                (n, false) => format!("Sent {n} bytes."),
                (n, true) => format!("Sent {n} bytes and closed its input."),
            };
            redirect(&back, Some(Flash::ok(what)))
        }
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/sandboxes/{sandbox}/delete` (behind a confirmation): deletes it at its provider;
/// its record stays as a tombstone.
pub(crate) async fn delete_sandbox(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let (acc, prj, sbx) = (&path.0, &path.1, &path.2);
    let pid: ProjectId = try_page!(parse(&req, prj));
    let back = paths::sandbox(acc, prj, sbx);
    match control(&state)
        .delete_sandbox(&ctx.signed.actor, pid, sbx)
        .await
    {
        Ok(s) => redirect(
            &back,
            Some(Flash::ok(format!(
                "Deleted {} at {}. Its record stays here as a tombstone.",
                s.id,
                s.provider.as_str()
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

/// A command that cannot be shown: an unknown sandbox or command is the 404 page, and so is
/// a malformed id (the only input these pages take, `invalid_request` from the service).
fn command_failure(req: &HttpRequest, e: &ControlError) -> Page {
    match (e, e.code().as_str()) {
        (_, "sandbox_not_found" | "invalid_sandbox_id")
        | (ControlError::Service { .. }, "invalid_request") => not_found(req),
        _ => failure_page(req, e),
    }
}

/// An output event as page text (`None` for the exit, which the page shows as facts).
fn chunk(e: &OutputEvent) -> Option<OutputChunk> {
    match e {
        OutputEvent::Output {
            stream,
            data,
            encoding,
            ..
        } => {
            let text = match encoding {
                FileEncoding::Utf8 => data.clone(),
                // Not UTF-8 as a whole (a chunk can end inside a character): shown lossily.
                FileEncoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default(),
            };
            Some(match stream {
                OutputStream::Stdout => OutputChunk::Stdout(text),
                OutputStream::Stderr => OutputChunk::Stderr(text),
            })
        }
        OutputEvent::Gap { length, .. } => Some(OutputChunk::Gap(*length)),
        OutputEvent::Exit { .. } => None,
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct AfterQuery {
    after: Option<u64>,
}

/// `GET …/commands/{cmd}/output`: the command's output events as Server-Sent Events, the
/// same frames as the API's (`id` is the sequence number), from `Last-Event-ID` (a browser
/// reconnecting) or `?after=`, ending with the exit event.
pub(crate) async fn command_output(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let Some(after) = resume_point(&req) else {
        return HttpResponse::BadRequest()
            .content_type("text/plain; charset=utf-8")
            .body("Last-Event-ID and after must be event ids (non-negative integers).");
    };
    let events = match control(&state)
        .follow_output(&ctx.signed.actor, pid, &path.2, &path.3, after)
        .await
    {
        Ok(s) => s,
        Err(e) => return command_failure(&req, &e),
    };
    sse(corral_web::commands::sse_body(events))
}

/// `GET …/sandboxes/{sandbox}/events`: the sandbox's lifecycle events as Server-Sent Events
/// (the API's frames, named by type), from `Last-Event-ID` or `?after=`, without end: the
/// sandbox page's script keeps its status live with them.
pub(crate) async fn sandbox_events(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let Some(after) = resume_point(&req) else {
        return HttpResponse::BadRequest()
            .content_type("text/plain; charset=utf-8")
            .body("Last-Event-ID and after must be event ids (non-negative integers).");
    };
    match control(&state)
        .follow_sandbox_events(&ctx.signed.actor, pid, &path.2, after)
        .await
    {
        Ok(events) => sse(corral_web::commands::sse_body(events)),
        Err(e) => command_failure(&req, &e),
    }
}

/// An event stream's answer (the API's framing, keep-alives included): no caching, no
/// buffering by reverse proxies.
fn sse(
    body: impl futures::Stream<Item = Result<web::Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// Where a stream resumes: `Last-Event-ID` wins over `?after=`; `None` for garbage.
fn resume_point(req: &HttpRequest) -> Option<u64> {
    // Stored ids are signed 64-bit: a larger one resumes after the end.
    let cap = i64::MAX.unsigned_abs();
    if let Some(v) = req.headers().get("last-event-id") {
        let s = v.to_str().ok()?.trim();
        return if s.is_empty() {
            Some(0)
        } else {
            s.parse::<u64>().ok().map(|n| n.min(cap))
        };
    }
    match web::Query::<AfterQuery>::from_query(req.query_string()) {
        Ok(q) => Some(q.after.unwrap_or(0).min(cap)),
        Err(_) => None,
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct PathQuery {
    path: Option<String>,
}

/// `GET …/sandboxes/{sandbox}/files?path=`: reads the file (text; shown escaped), with the
/// forms to read another or write this one. A failure is said on the page in words.
pub(crate) async fn file_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (acc, prj, sbx) = (&path.0, &path.1, &path.2);
    let (chrome, project, pid) = try_page!(project_chrome(&req, control, &ctx, acc, prj).await);
    let file = web::Query::<PathQuery>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.into_inner().path)
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty());
    let Some(file) = file else {
        return redirect(
            &paths::sandbox(acc, prj, sbx),
            Some(Flash::error("Type the path of a file to read.")),
        );
    };
    let input = ReadFileInput {
        path: file.clone(),
        encoding: None,
    };
    let content = match control.read_file(&ctx.signed.actor, pid, sbx, input).await {
        Ok(r) => Ok(r.content),
        Err(e) => match e.code().as_str() {
            "sandbox_not_found" | "invalid_sandbox_id" => return not_found(&req),
            "file_not_utf8" => Err(
                "This file is not UTF-8 text, so it cannot be shown here; read it through the API \
                 with encoding base64."
                    .to_owned(),
            ),
            _ => match e {
                ControlError::Service { .. } | ControlError::Invalid { .. } => {
                    Err(sentence(&e.to_string()))
                }
                other => return failure_page(&req, &other),
            },
        },
    };
    let can_work = project.account.is_admin() && !project.account.deleting;
    html(
        &req,
        StatusCode::OK,
        pages::file_page(&view::FilePage {
            chrome,
            project,
            sandbox: sbx.clone(),
            path: file,
            content,
            can_work,
        }),
    )
}

/// `POST …/sandboxes/{sandbox}/files`: writes the form's content (line ends as the browser
/// sends them, CRLF, become LF), then shows the file as read back.
pub(crate) async fn write_file(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let (acc, prj, sbx) = (&path.0, &path.1, &path.2);
    let back = paths::sandbox(acc, prj, sbx);
    if body.len() > MAX_FORM_BYTES {
        return redirect(
            &back,
            Some(Flash::error(format!(
                "That is more than the console sends at once ({} KiB); write larger files through \
                 the API (up to 1 MiB).",
                MAX_FORM_BYTES / 1024
            ))),
        );
    }
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, prj));
    let Some(file) = form.get("path") else {
        return redirect(
            &back,
            Some(Flash::error("Type the path of the file to write.")),
        );
    };
    let content = form
        .raw("content")
        .unwrap_or_default()
        .replace("\r\n", "\n");
    let input = WriteFileInput {
        path: file.to_owned(),
        content,
        encoding: None,
    };
    let here: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("path", file)
        .finish();
    let page = format!("{}?{here}", paths::files(acc, prj, sbx));
    match control(&state)
        .write_file(&ctx.signed.actor, pid, sbx, input)
        .await
    {
        Ok(w) => redirect(
            &page,
            Some(Flash::ok(format!(
                "Wrote {} bytes to {}.",
                w.bytes_written, w.path
            ))),
        ),
        Err(e) => not_done(&back, &e, "write a file"),
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;
    use corral_domain::{CommandState, OutputEvent, OutputStream};

    use super::{chunk, resume_point};
    use crate::view::OutputChunk;

    #[test]
    fn a_stream_resumes_from_last_event_id_before_after_and_refuses_garbage() {
        let at = |uri: &str, last: Option<&str>| {
            let mut r = TestRequest::get().uri(uri);
            if let Some(l) = last {
                r = r.insert_header(("last-event-id", l));
            }
            resume_point(&r.to_http_request())
        };
        assert_eq!(at("/x", None), Some(0));
        assert_eq!(at("/x?after=7", None), Some(7));
        assert_eq!(at("/x?after=7", Some("12")), Some(12));
        assert_eq!(at("/x?after=7", Some("")), Some(0));
        assert_eq!(at("/x", Some("nope")), None);
        assert_eq!(at("/x?after=-1", None), None);
        assert_eq!(
            at("/x", Some("18446744073709551615")),
            Some(i64::MAX.unsigned_abs())
        );
    }

    #[test]
    fn output_events_become_page_text_and_the_exit_is_not_text() {
        let out = OutputEvent::output(1, OutputStream::Stdout, 0, b"hi\n");
        assert_eq!(chunk(&out), Some(OutputChunk::Stdout("hi\n".to_owned())));
        // Not UTF-8: sent as base64, shown lossily.
        let bin = OutputEvent::output(2, OutputStream::Stderr, 0, &[0x66, 0xff, 0x0a]);
        assert_eq!(
            chunk(&bin),
            Some(OutputChunk::Stderr("f\u{fffd}\n".to_owned()))
        );
        let exit = OutputEvent::Exit {
            seq: 3,
            state: CommandState::Exited,
            exit_code: Some(0),
        };
        assert_eq!(chunk(&exit), None);
    }
}
