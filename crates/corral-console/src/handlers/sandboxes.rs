//! A project's sandboxes: the registry's list (tombstones included) and one sandbox's page —
//! its facts, its command history, its lifecycle events and its estimated cost so far (the
//! forms on it post to the routes of the `work` handlers).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use corral_control::ControlError;
use corral_domain::{Provider, SandboxStatus};
use corral_web::AppState;

use super::ctx::{
    Page, ago, command_row, control, failure_page, form_key, get_ctx, lifecycle_support,
    project_chrome, sentence, snapshot_row, span, try_page, when,
};
use crate::pages::{self, paths};
use crate::respond::{html, not_found, redirect};
use crate::view;

// --- sandboxes -----------------------------------------------------------------------------------

#[derive(serde::Deserialize, Default)]
pub(crate) struct ListQuery {
    cursor: Option<String>,
    status: Option<String>,
    provider: Option<String>,
    q: Option<String>,
}

/// Rows of one page of the list.
const PAGE_ROWS: usize = 50;
/// Records one filtered page walks at most before it stops and offers the next.
const MAX_FILTER_WALK: usize = 2000;

/// `GET …/projects/{project}` (the sandboxes tab): the registry newest first, one page at a
/// time; filtered by status (`deleted`: the tombstones), provider and a piece of the id. The
/// registry pages by cursor only, so a filtered page walks its pages (at most
/// [`MAX_FILTER_WALK`] records) and keeps the matches; its next cursor goes on from there.
pub(crate) async fn sandboxes_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let query = web::Query::<ListQuery>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let blank = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let filter = view::SandboxFilter {
        status: blank(query.status).filter(|s| s == "deleted" || SandboxStatus::parse(s).is_some()),
        provider: blank(query.provider).filter(|p| p.parse::<Provider>().is_ok()),
        q: blank(query.q).map(|q| q.chars().take(100).collect::<String>().to_lowercase()),
    };
    let filtered = filter.any();
    let query_cursor_set = query.cursor.is_some();
    let mut cursor = query.cursor;
    let mut items = Vec::new();
    let mut walked = 0;
    let next = loop {
        let page = match control
            .list_sandboxes(
                &ctx.signed.actor,
                pid,
                cursor.as_deref(),
                Some(PAGE_ROWS as u32),
            )
            .await
        {
            Ok(p) => p,
            Err(ControlError::Invalid { .. }) if cursor.is_some() => {
                return redirect(&paths::project(&path.0, &path.1), None);
            }
            Err(e) => return failure_page(&req, &e),
        };
        walked += page.items.len();
        items.extend(page.items.into_iter().filter(|s| filter.matches(s)));
        let done = !filtered || items.len() >= PAGE_ROWS || walked >= MAX_FILTER_WALK;
        match page.next_cursor {
            Some(c) if !done => cursor = Some(c),
            other => break other,
        }
    };
    let overview = if filtered || query_cursor_set {
        None
    } else {
        overview(control, &ctx.signed.actor, pid).await
    };
    let support = lifecycle_support(control);
    let rows = items
        .into_iter()
        .map(|s| view::SandboxRow {
            id: s.id.to_string(),
            provider: s.provider.as_str().to_owned(),
            status: s.status.as_str().to_owned(),
            observed: ago(s.status_observed_at),
            created: ago(s.created_at),
            deleted: s.deleted_at.map(ago),
            lifecycle: view::Lifecycle::offer(
                s.status,
                s.deleted_at.is_some(),
                support.get(&s.provider).copied().unwrap_or_default(),
            ),
        })
        .collect();
    html(
        &req,
        StatusCode::OK,
        pages::sandboxes(&view::SandboxesPage {
            chrome,
            project,
            rows,
            next,
            filter,
            statuses: SandboxStatus::ALL.iter().map(|s| s.as_str()).collect(),
            providers: Provider::ALL.iter().map(|p| p.as_str()).collect(),
            api_base: api_base(control),
            overview,
        }),
    )
}

/// The project at a glance: live and failed sandboxes per provider (counted over at most
/// [`MAX_FILTER_WALK`] records, newest first) and the last seven days' usage.
async fn overview(
    control: &corral_control::Control,
    actor: &corral_control::Actor,
    pid: corral_control::ProjectId,
) -> Option<view::ProjectOverview> {
    use std::collections::BTreeMap;
    let mut by: BTreeMap<String, view::ProviderGlance> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    let mut walked = 0;
    let partial = loop {
        let page = control
            .list_sandboxes(actor, pid, cursor.as_deref(), Some(100))
            .await
            .ok()?;
        walked += page.items.len();
        for s in page.items.iter().filter(|s| s.deleted_at.is_none()) {
            let g = by.entry(s.provider.as_str().to_owned()).or_default();
            match s.status {
                SandboxStatus::Running | SandboxStatus::Creating | SandboxStatus::Paused => {
                    g.live += 1;
                }
                SandboxStatus::Failed => g.failed += 1,
                _ => {}
            }
        }
        match page.next_cursor {
            Some(c) if walked < MAX_FILTER_WALK => cursor = Some(c),
            Some(_) => break true,
            None => break false,
        }
    };
    let mut usage_note = None;
    match control.project_usage(actor, pid).await {
        Ok(report) => {
            let mut secs: BTreeMap<String, u64> = BTreeMap::new();
            let mut cost: BTreeMap<(String, String), f64> = BTreeMap::new();
            for r in &report.rows {
                let p = r.provider.as_str().to_owned();
                *secs.entry(p.clone()).or_default() += r.running_seconds;
                for c in &r.estimated_cost {
                    let amount = c.amount.parse::<f64>().unwrap_or(0.0);
                    *cost.entry((p.clone(), c.currency.clone())).or_default() += amount;
                }
            }
            for (p, s) in secs {
                let g = by.entry(p.clone()).or_default();
                g.running = span(s.saturating_mul(1000));
                g.cost = cost
                    .iter()
                    .filter(|((q, _), _)| *q == p)
                    .map(|((_, cur), a)| format!("{a:.4} {cur}"))
                    .collect::<Vec<_>>()
                    .join(", ");
            }
        }
        Err(e) => usage_note = Some(not_read("usage", &e)),
    }
    let rows = by
        .into_iter()
        .map(|(provider, mut g)| {
            g.provider = provider;
            if g.running.is_empty() {
                g.running = "—".to_owned();
            }
            if g.cost.is_empty() {
                g.cost = "—".to_owned();
            }
            g
        })
        .collect::<Vec<_>>();
    (!rows.is_empty()).then_some(view::ProjectOverview {
        rows,
        partial,
        usage_note,
    })
}

/// `GET …/projects/{project}/sandboxes/{sandbox}`.
pub(crate) async fn sandbox_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    // Set when the provider could not be asked: the page then shows the registry's record.
    let mut notice = None;
    let s = match control.get_sandbox(&ctx.signed.actor, pid, &path.2).await {
        Ok(s) => s,
        Err(ControlError::Invalid { .. }) => return not_found(&req),
        Err(e)
            if e.code().as_str() == "sandbox_not_found"
                || e.code().as_str() == "invalid_sandbox_id" =>
        {
            return not_found(&req);
        }
        Err(e) => match provider_not_asked(&e) {
            Some(why) => match registry_record(control, &ctx.signed.actor, pid, &path.2).await {
                Some(s) => {
                    notice = Some(why(s.provider.as_str(), &e));
                    s
                }
                None => return failure_page(&req, &e),
            },
            None => return failure_page(&req, &e),
        },
    };
    let mut failed_create = None;
    let m = &s.metadata;
    let mut facts = vec![
        ("Operation".to_owned(), m.operation_id.to_string()),
        (
            "Credential".to_owned(),
            serde_json::to_value(m.credential_source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        ),
    ];
    let optional = [
        ("Native id", &m.native_provider_id),
        ("Workspace", &m.workspace),
        ("Team id", &m.team_id),
        ("Provider project", &m.project_id),
        ("Bridge", &m.bridge_url),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            facts.push((k.to_owned(), v.clone()));
        }
    }
    // The registry's record: when it was created and how its create ended (the get answers
    // neither).
    let record = control.registry().sandbox(pid, s.id).await.ok().flatten();
    if let Some(r) = &record {
        facts.insert(0, ("Updated".to_owned(), when(r.updated_at)));
        if r.create_state.as_str() == "failed" {
            let kept = control
                .registry()
                .create_failure(pid, s.id)
                .await
                .ok()
                .flatten();
            failed_create = Some(match kept {
                Some(f) => format!(
                    "The create failed, so nothing exists at the provider. The answer was {}: {}",
                    f.code, f.reason
                ),
                None => "The create failed, so nothing exists at the provider. Its reason was \
                         given in the answer to the request that asked for it."
                    .to_owned(),
            });
        }
    }
    let can = lifecycle_support(control)
        .get(&s.provider)
        .copied()
        .unwrap_or_default();
    let row = view::SandboxRow {
        id: s.id.to_string(),
        provider: s.provider.as_str().to_owned(),
        status: s.status.as_str().to_owned(),
        observed: s.status_observed_at.map_or_else(|| "—".to_owned(), ago),
        created: record
            .as_ref()
            .map(|r| format!("{} ({})", when(r.created_at), ago(r.created_at)))
            .unwrap_or_default(),
        deleted: s.deleted_at.map(when),
        lifecycle: view::Lifecycle::offer(s.status, s.deleted_at.is_some(), can),
    };
    let (acc, prj, sbx) = (&path.0, &path.1, &path.2);
    let actor = &ctx.signed.actor;
    let commands = control
        .list_commands(actor, pid, sbx, None, Some(COMMANDS_SHOWN))
        .await
        .map(|page| {
            page.items
                .iter()
                .map(|c| command_row(c, paths::command(acc, prj, sbx, &c.id.to_string())))
                .collect()
        })
        .map_err(|e| not_read("commands", &e));
    let events = control.sandbox_events(actor, pid, sbx, EVENTS_SHOWN).await;
    // Newest first: the first is where the live status follows on from.
    let live = match (&events, s.deleted_at) {
        (Ok(events), None) => Some((
            format!("{}/events", paths::sandbox(acc, prj, sbx)),
            events.first().map_or(0, |e| e.id),
        )),
        _ => None,
    };
    let events = events
        .map(|events| {
            events
                .iter()
                .map(|e| event_row(e, |cmd| paths::command(acc, prj, sbx, cmd)))
                .collect()
        })
        .map_err(|e| not_read("events", &e));
    let usage = control
        .sandbox_usage(actor, pid, sbx)
        .await
        .map(|u| view::UsageView {
            running: span(u.running_seconds.saturating_mul(1000)),
            cost: u
                .estimated_cost
                .iter()
                .map(|c| format!("{} {}", c.amount, c.currency))
                .collect(),
            basis: u.basis,
        })
        .map_err(|e| not_read("usage", &e));
    let snapshots = if can.snapshots {
        sandbox_snapshots(control, actor, pid, s.id)
            .await
            .map(Some)
            .map_err(|e| not_read("snapshots", &e))
    } else {
        Ok(None)
    };
    let can_work = project.account.is_admin() && !project.account.deleting && row.deleted.is_none();
    html(
        &req,
        StatusCode::OK,
        pages::sandbox(&view::SandboxPage {
            chrome,
            project,
            row,
            facts,
            notice,
            failed_create,
            can_work,
            snapshot_key: form_key("snapshot"),
            fork_key: form_key("fork"),
            snapshots,
            commands,
            events,
            usage,
            live,
            api_base: api_base(control),
        }),
    )
}

/// Snapshots shown on a sandbox's page, at most, and the project's snapshot records walked
/// to find them (newest first; the snapshots tab has the rest).
const SNAPSHOTS_SHOWN: usize = 10;
const MAX_SNAPSHOTS_WALKED: usize = 500;

/// The sandbox's own snapshots, newest first: the project's list filtered by sandbox, walked
/// page by page up to [`MAX_SNAPSHOTS_WALKED`] records (the registry lists by project only).
async fn sandbox_snapshots(
    control: &corral_control::Control,
    actor: &corral_control::Actor,
    project: corral_control::ProjectId,
    sandbox: corral_domain::SandboxId,
) -> Result<Vec<view::SnapshotRow>, ControlError> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    let mut walked = 0;
    loop {
        let page = control
            .list_snapshots(actor, project, cursor.as_deref(), Some(100))
            .await?;
        walked += page.items.len();
        rows.extend(
            page.items
                .iter()
                .filter(|s| s.sandbox_id == sandbox)
                .map(snapshot_row),
        );
        match page.next_cursor {
            Some(c) if rows.len() < SNAPSHOTS_SHOWN && walked < MAX_SNAPSHOTS_WALKED => {
                cursor = Some(c);
            }
            _ => break,
        }
    }
    rows.truncate(SNAPSHOTS_SHOWN);
    Ok(rows)
}

/// This server's public URL without a trailing slash, for the example requests.
fn api_base(control: &corral_control::Control) -> String {
    control.config().public_url.trim_end_matches('/').to_owned()
}

/// Commands and events shown on a sandbox's page, at most (newest first).
const COMMANDS_SHOWN: u32 = 20;
const EVENTS_SHOWN: usize = 20;

/// Why a part of the sandbox page is missing, in words (the rest of the page still shows).
fn not_read(what: &str, e: &ControlError) -> String {
    tracing::warn!(error = %e, part = what, "a part of a sandbox page could not be read");
    format!(
        "Its {what} could not be read just now ({}). Reload to try again.",
        sentence(&e.to_string()).trim_end_matches('.')
    )
}

/// A lifecycle event as a row: its type, and its facts in words.
fn event_row(
    e: &corral_domain::LifecycleEvent,
    command_href: impl Fn(&str) -> String,
) -> view::EventRow {
    let mut detail = Vec::new();
    match (e.previous_status, e.status) {
        (Some(before), Some(after)) => {
            detail.push(format!("{} → {}", before.as_str(), after.as_str()));
        }
        (None, Some(after)) => detail.push(after.as_str().to_owned()),
        _ => {}
    }
    if let Some(reason) = &e.reason {
        detail.push(format!("({})", reason.replace('_', " ")));
    }
    if let Some(state) = e.command_state {
        detail.push(state.as_str().to_owned());
    }
    if let Some(code) = e.exit_code {
        detail.push(format!("exit code {code}"));
    }
    if let Some(ms) = e.duration_ms {
        detail.push(format!("after {}", span(ms)));
    }
    view::EventRow {
        when: format!("{} ({})", when(e.occurred_at), ago(e.occurred_at)),
        kind: e.kind.as_str().to_owned(),
        detail: detail.join(" "),
        command_href: e.command_id.map(|c| command_href(&c.to_string())),
    }
}

/// How to say that a get failed at the provider (or before asking it) rather than in Corral;
/// `None` for every other failure, which keeps its own page.
type NotAsked = fn(&str, &ControlError) -> String;

fn provider_not_asked(e: &ControlError) -> Option<NotAsked> {
    match e.code().as_str() {
        // A sandbox created with an inline credential, in a project with no stored profile for
        // its provider: Corral holds no credential to ask with.
        "missing_api_key" | "provider_profile_not_found" => Some(|provider, _| {
            format!(
                "No {provider} credential is stored in this project (this sandbox was created with \
                 one sent inline), so {provider} could not be asked for its current status. \
                 This is Corral's own record of it."
            )
        }),
        "authentication_error"
        | "provider_unavailable"
        | "provider_error"
        | "provider_operation_unavailable"
        | "provider_profiles_unavailable"
        | "rate_limited"
        | "request_timeout" => Some(|provider, e| {
            format!(
                "{provider} could not be asked for this sandbox's current status ({}). \
                 This is Corral's own record of it.",
                sentence(&e.to_string()).trim_end_matches('.')
            )
        }),
        _ => None,
    }
}

/// The registry's record of `id` (what the sandboxes tab lists, tombstones included), found
/// without asking the provider. The list is walked page by page, at most this many records.
const MAX_RECORDS_WALKED: usize = 2000;

async fn registry_record(
    control: &corral_control::Control,
    actor: &corral_control::Actor,
    project: corral_control::ProjectId,
    id: &str,
) -> Option<corral_domain::Sandbox> {
    let mut cursor: Option<String> = None;
    let mut walked = 0;
    while walked < MAX_RECORDS_WALKED {
        let page = control
            .list_sandboxes(actor, project, cursor.as_deref(), Some(100))
            .await
            .ok()?;
        walked += page.items.len().max(1);
        if let Some(s) = page.items.into_iter().find(|s| s.id.to_string() == id) {
            return Some(corral_domain::Sandbox {
                id: s.id,
                provider: s.provider,
                status: s.status,
                metadata: s.metadata,
                status_observed_at: Some(s.status_observed_at),
                deleted_at: s.deleted_at,
                auto_resume: s.auto_resume,
                idle_stop_seconds: s.idle_stop_seconds,
                snapshot_id: s.snapshot_id,
            });
        }
        cursor = Some(page.next_cursor?);
    }
    None
}
