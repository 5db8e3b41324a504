//! A sandbox's lifecycle (issue 32): stop and resume (from its page or its row in the list),
//! take a snapshot, fork it into copies; and the project's snapshots page with deletes. Each
//! change is one control-plane use case (admin, audited) behind a CSRF-checked form; snapshot
//! and fork forms carry the idempotency key their page was rendered with, so a resent form
//! takes one snapshot and makes one set of copies.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use corral_control::{ControlError, ProjectId};
use corral_domain::limits::MAX_FORK_COUNT;
use corral_domain::{SandboxStatus, SnapshotStatus};
use corral_web::AppState;

use super::ctx::{
    Page, control, failed, failure_page, get_ctx, parse, post_ctx, project_chrome, sentence,
    snapshot_row, try_page,
};
use crate::form::Form;
use crate::pages::{self, paths};
use crate::respond::{html, redirect};
use crate::view::{self, Flash};

/// `POST …/sandboxes/{sandbox}/stop`: stops it, then back to its page (or to the list, for
/// a row's button: `from=list`).
pub(crate) async fn stop_sandbox(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    stop_or_resume(req, state, path, body, true).await
}

/// `POST …/sandboxes/{sandbox}/resume`: resumes it, then back as for a stop.
pub(crate) async fn resume_sandbox(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    stop_or_resume(req, state, path, body, false).await
}

async fn stop_or_resume(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
    stop: bool,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let (acc, prj, sbx) = (&path.0, &path.1, &path.2);
    let pid: ProjectId = try_page!(parse(&req, prj));
    // Only these two places: the address is never taken from the form (no open redirect).
    let back = if form.get("from") == Some("list") {
        paths::project(acc, prj)
    } else {
        paths::sandbox(acc, prj, sbx)
    };
    let control = control(&state);
    let actor = &ctx.signed.actor;
    let done = if stop {
        control.stop_sandbox(actor, pid, sbx).await
    } else {
        control.resume_sandbox(actor, pid, sbx).await
    };
    match done {
        Ok(s) => redirect(&back, Some(Flash::ok(changed(&s.id.to_string(), s.status)))),
        Err(e) => failed(&back, &e),
    }
}

/// What a stop or a resume left, in words.
fn changed(id: &str, status: SandboxStatus) -> String {
    match status {
        SandboxStatus::Stopped => {
            format!("Stopped {id}. Its files are kept; resume it to work in it again.")
        }
        SandboxStatus::Stopping => {
            format!("{id} is stopping. Reload in a moment to see it stopped.")
        }
        SandboxStatus::Running => format!("Resumed {id}: it is running."),
        SandboxStatus::Starting => {
            format!("{id} is starting. Reload in a moment to see it running.")
        }
        other => format!("{id} is {other} now."),
    }
}

/// `POST …/sandboxes/{sandbox}/snapshots`: takes a snapshot (with the form's name, if any)
/// under the form's key, then back to the sandbox's page.
pub(crate) async fn snapshot_sandbox(
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
    let name = form.get("name").map(str::to_owned);
    match control(&state)
        .snapshot_sandbox(&ctx.signed.actor, pid, sbx, name, form.get("key"))
        .await
    {
        Ok(s) => {
            let id = s.id.to_string();
            let flash = match s.status {
                SnapshotStatus::Ready => Flash::ok(format!("Took snapshot {id}.")),
                SnapshotStatus::Creating => Flash::ok(format!(
                    "Taking snapshot {id}: the provider is still making it; its status below \
                     says when it is ready."
                )),
                SnapshotStatus::Failed | SnapshotStatus::Deleted => Flash::error(format!(
                    "Snapshot {id} failed{}",
                    s.failure
                        .map(|why| format!(": {}", sentence(&why)))
                        .unwrap_or_else(|| ".".to_owned())
                )),
            };
            redirect(&back, Some(flash))
        }
        Err(e) => match resent(&e) {
            Some(flash) => redirect(&back, Some(flash)),
            None => failed(&back, &e),
        },
    }
}

/// `POST …/sandboxes/{sandbox}/fork`: forks it into the form's count of copies (1 to 10)
/// under the form's key, then back to its page with the copies linked.
pub(crate) async fn fork_sandbox(
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
    let Some(count) = fork_count(form.get("count")) else {
        return redirect(
            &back,
            Some(Flash::error(format!(
                "Choose from 1 to {MAX_FORK_COUNT} copies."
            ))),
        );
    };
    match control(&state)
        .fork_sandbox(&ctx.signed.actor, pid, sbx, count, form.get("key"))
        .await
    {
        Ok(f) => {
            let ids: Vec<String> = f.sandboxes.iter().map(|s| s.id.to_string()).collect();
            let copies = if ids.len() == 1 { "copy" } else { "copies" };
            let text = format!(
                "Forked {} into {} {copies} from snapshot {}:",
                f.sandbox_id,
                ids.len(),
                f.snapshot_id
            );
            redirect(&back, Some(Flash::ok(text).linking(ids)))
        }
        Err(e) => match resent(&e) {
            Some(flash) => redirect(&back, Some(flash)),
            None => failed(&back, &e),
        },
    }
}

/// The form's count of copies: a whole number from 1 to [`MAX_FORK_COUNT`] (absent: 1).
fn fork_count(field: Option<&str>) -> Option<u64> {
    match field {
        None => Some(1),
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=u64::from(MAX_FORK_COUNT)).contains(n)),
    }
}

/// A resent form refused by its key, in words (`None`: any other failure, answered as every
/// form's is): its first send still at work, or its key used with other values.
fn resent(e: &ControlError) -> Option<Flash> {
    match e.code().as_str() {
        "idempotency_in_progress" => Some(Flash::info(
            "That form was already sent and is still at work. Reload in a moment to see it done.",
        )),
        "idempotency_conflict" => Some(Flash::error(
            "That form was already sent with other values. Reload the page to send it again.",
        )),
        _ => None,
    }
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct CursorQuery {
    cursor: Option<String>,
}

/// Snapshots on one page of the snapshots tab.
const SNAPSHOT_ROWS: u32 = 50;

/// `GET …/projects/{project}/snapshots`: the project's snapshots newest first, a page at a
/// time, tombstones included.
pub(crate) async fn snapshots_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let cursor = web::Query::<CursorQuery>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.into_inner().cursor);
    let page = match control
        .list_snapshots(
            &ctx.signed.actor,
            pid,
            cursor.as_deref(),
            Some(SNAPSHOT_ROWS),
        )
        .await
    {
        Ok(p) => p,
        // A stale or mangled cursor starts again from the newest.
        Err(e) if cursor.is_some() && e.code().as_str() == "invalid_request" => {
            return redirect(&paths::snapshots(&path.0, &path.1), None);
        }
        Err(e) => return failure_page(&req, &e),
    };
    html(
        &req,
        StatusCode::OK,
        pages::snapshots(&view::SnapshotsPage {
            chrome,
            project,
            rows: page.items.iter().map(snapshot_row).collect(),
            next: page.next_cursor,
        }),
    )
}

/// `POST …/projects/{project}/snapshots/{snapshot}/delete` (behind a confirmation): deletes
/// it at its provider; its record stays as a tombstone.
pub(crate) async fn delete_snapshot(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let (acc, prj, snp) = (&path.0, &path.1, &path.2);
    let pid: ProjectId = try_page!(parse(&req, prj));
    let back = paths::snapshots(acc, prj);
    match control(&state)
        .delete_snapshot(&ctx.signed.actor, pid, snp)
        .await
    {
        Ok(s) => redirect(
            &back,
            Some(Flash::ok(format!(
                "Deleted snapshot {} at {}. Its record stays here as a tombstone.",
                s.id,
                s.provider.as_str()
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

#[cfg(test)]
mod tests {
    use corral_domain::SandboxStatus;

    use super::{changed, fork_count};

    #[test]
    fn a_fork_takes_one_to_ten_copies_and_nothing_else() {
        assert_eq!(fork_count(None), Some(1));
        assert_eq!(fork_count(Some("1")), Some(1));
        assert_eq!(fork_count(Some("10")), Some(10));
        for bad in ["0", "11", "-1", "2.5", "two", "99999999999999999999999"] {
            assert_eq!(fork_count(Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_stop_or_resume_says_where_the_sandbox_is_now() {
        assert!(changed("sbx_1", SandboxStatus::Stopped).starts_with("Stopped sbx_1."));
        assert!(changed("sbx_1", SandboxStatus::Stopping).contains("is stopping"));
        assert_eq!(
            changed("sbx_1", SandboxStatus::Running),
            "Resumed sbx_1: it is running."
        );
        assert!(changed("sbx_1", SandboxStatus::Starting).contains("is starting"));
    }
}
