//! A project's sandboxes (`handlers::sandboxes`): the list and one sandbox's page with its
//! cards (lifecycle, snapshots, run a command, files, events, usage).

use maud::{Markup, html};

use super::layout::{
    command_badge, csrf_field, files_card, paths, project_head, shell, snapshot_badge,
};
use crate::view::*;

fn status_badge(status: &str, deleted: bool) -> Markup {
    let class = match (deleted, status) {
        (true, _) => "badge plain",
        (_, "running") => "badge ok",
        (_, "starting" | "stopping" | "pending" | "creating") => "badge warn",
        (_, "error" | "failed") => "badge danger",
        _ => "badge",
    };
    html! { span class=(class) { @if deleted { "deleted" } @else { (status) } } }
}

/// The Stop or Resume button of a sandbox (whichever `offer` holds), a CSRF-checked post.
/// `place` names where it is (`list`, `lifecycle`, `commands`): in the list it is small,
/// names its sandbox for screen readers and comes back to the list; elsewhere its id is
/// `<place>-<stop|resume>`.
fn stop_or_resume(
    account: &str,
    project: &str,
    sandbox: &str,
    offer: Lifecycle,
    csrf: &str,
    place: &str,
) -> Markup {
    let in_list = place == "list";
    let (action, label, class) = if offer.resume {
        (
            "resume",
            "Resume",
            if in_list {
                "btn small secondary"
            } else {
                "btn"
            },
        )
    } else {
        (
            "stop",
            "Stop",
            if in_list {
                "btn small secondary"
            } else {
                "btn secondary"
            },
        )
    };
    html! {
        form method="post" action={(paths::sandbox(account, project, sandbox)) "/" (action)} {
            (csrf_field(csrf))
            @if in_list {
                input type="hidden" name="from" value="list";
                button class=(class) type="submit" data-action=(action) aria-label={(label) " " (sandbox)} { (label) }
            } @else {
                button class=(class) type="submit" id={(place) "-" (action)} { (label) }
            }
        }
    }
}

/// The registry's list of sandboxes, tombstones included.
pub(crate) fn sandboxes(page: &SandboxesPage) -> Markup {
    let p = &page.project;
    let admin = p.account.is_admin() && !p.account.deleting;
    let content = html! {
        (project_head(p, ProjectTab::Sandboxes))
        @if let Some(o) = &page.overview {
            div.card #project-overview {
                div.card-head { div { h2 { "At a glance" } p { "Live and failed sandboxes per provider now, and the last seven days' running time and estimated cost." } } }
                div.table-wrap { table {
                    thead { tr { th { "Provider" } th { "Live" } th { "Failed" } th.hide-sm { "Running (7 days)" } th.hide-sm { "Estimated cost (7 days)" } } }
                    tbody {
                        @for g in &o.rows {
                            tr data-provider=(g.provider) {
                                td { (g.provider) }
                                td data-live=(g.live) { (g.live) }
                                td data-failed=(g.failed) { @if g.failed > 0 { span.badge.danger { (g.failed) } } @else { "0" } }
                                td.muted.hide-sm { (g.running) }
                                td.muted.hide-sm { (g.cost) }
                            }
                        }
                    }
                } }
                @if o.partial || o.usage_note.is_some() {
                    div.card-body {
                        @if o.partial { p.small.muted { "Counted over the newest 2,000 sandboxes." } }
                        @if let Some(n) = &o.usage_note { p.small.muted { (n) } }
                    }
                }
            }
        }
        div.card {
            div.card-head { div { h2 { "Sandboxes" } p { "As Corral last saw them, newest first. Statuses are refreshed when the API reads a sandbox; deleted sandboxes stay listed as tombstones." } } }
            div.card-body {
                form.inline #sandbox-filter method="get" action=(paths::project(&p.account.id, &p.id)) {
                    div.field {
                        label for="filter-status" { "Status" }
                        select #filter-status name="status" {
                            option value="" { "Any" }
                            @for st in &page.statuses {
                                option value=(st) selected[page.filter.status.as_deref() == Some(*st)] { (st) }
                            }
                        }
                    }
                    div.field {
                        label for="filter-provider" { "Provider" }
                        select #filter-provider name="provider" {
                            option value="" { "Any" }
                            @for pr in &page.providers {
                                option value=(pr) selected[page.filter.provider.as_deref() == Some(*pr)] { (pr) }
                            }
                        }
                    }
                    div.field {
                        label for="filter-q" { "Id contains" }
                        input #filter-q.mono type="text" name="q" value=[page.filter.q.as_deref()] autocomplete="off" spellcheck="false" placeholder="sbx_…";
                    }
                    button.btn.secondary type="submit" { "Filter" }
                    @if page.filter.any() {
                        a.btn.ghost href=(paths::project(&p.account.id, &p.id)) { "Clear" }
                    }
                }
            }
            @if page.rows.is_empty() && page.filter.any() {
                div.empty #no-match {
                    strong { "No sandbox matches" }
                    @if page.next.is_some() { "None among the sandboxes searched so far; look further with the older ones." } @else { "Clear the filters to see every sandbox." }
                }
            } @else if page.rows.is_empty() {
                div.empty #first-sandbox {
                    strong { "No sandboxes yet" }
                    p { "Create one over the API with a key of this project ("
                        @if p.account.is_admin() { a href=(paths::keys(&p.account.id, &p.id)) { "API keys" } } @else { "ask an admin for one" }
                        "). The " code { "local" } " provider runs sandboxes on this server and needs no provider account:" }
                    div.secret-box {
                        code #create-curl.mono { (format!("curl -X POST {}/v1/sandboxes -H 'Authorization: Bearer $CORRAL_API_KEY' -H 'Content-Type: application/json' -d '{{\"provider\":\"local\"}}'", page.api_base)) }
                        button.btn.small type="button" data-copy="create-curl" hidden { "Copy" }
                    }
                }
            } @else {
                div.table-wrap { table {
                    thead { tr {
                        th { "Sandbox" } th.hide-sm { "Provider" } th { "Status" } th.hide-sm { "Status seen" } th.hide-sm { "Created" }
                        @if admin { th { span.visually-hidden { "Actions" } } }
                    } }
                    tbody {
                        @for r in &page.rows {
                            tr.is-tombstone[r.deleted.is_some()] data-sandbox=(r.id) {
                                td { a href=(paths::sandbox(&p.account.id, &p.id, &r.id)) { code { (r.id) } } }
                                td.hide-sm { (r.provider) }
                                td { (status_badge(&r.status, r.deleted.is_some())) }
                                td.muted.hide-sm { (r.observed) }
                                td.muted.hide-sm { (r.created) }
                                @if admin {
                                    td.actions {
                                        @if r.lifecycle.stop || r.lifecycle.resume {
                                            (stop_or_resume(&p.account.id, &p.id, &r.id, r.lifecycle, &page.chrome.csrf, "list"))
                                        }
                                    }
                                }
                            }
                        }
                    }
                } }
            }
            @if let Some(next) = &page.next {
                div.card-body.card-foot {
                    a.btn.secondary #older href={(paths::project(&p.account.id, &p.id)) "?" (page.filter.next_query(next))} { "Older sandboxes" }
                }
            }
        }
    };
    shell(&format!("{} · Sandboxes", p.name), &page.chrome, content)
}

/// One sandbox.
pub(crate) fn sandbox(page: &SandboxPage) -> Markup {
    let p = &page.project;
    let r = &page.row;
    let content = html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::account(&p.account.id)) { (p.account.name) } }
                    span { a href=(paths::project(&p.account.id, &p.id)) { (p.name) } }
                    span { "Sandboxes" }
                }
                h1 { code.h1-code { (r.id) } }
            }
            div #sandbox-status data-events=[page.live.as_ref().map(|l| &l.0)] data-after=[page.live.as_ref().map(|l| l.1)] {
                (status_badge(&r.status, r.deleted.is_some()))
            }
        }
        div #status-news.flash.info role="status" hidden {}
        @if let Some(at) = &r.deleted {
            div.flash.info { "This sandbox was deleted " (at) ". Its record is kept as a tombstone." }
        }
        @if let Some(notice) = &page.notice {
            div #provider-not-asked.flash.info role="status" { (notice) }
        }
        @if let Some(why) = &page.failed_create {
            div #create-failed.flash.error role="status" { (why) }
        }
        div.card { div.card-body {
            dl.facts {
                dt { "Provider" } dd { (r.provider) }
                dt { "Status" } dd { (r.status) " " span.muted.small { "(seen " (r.observed) ")" } }
                @if !r.created.is_empty() { dt { "Created" } dd { (r.created) } }
                @if let Some(at) = &r.deleted { dt { "Deleted" } dd { (at) } }
                @for (k, v) in &page.facts { dt { (k) } dd { code { (v) } } }
            }
        } }
        (lifecycle_card(page))
        (run_command_card(page))
        (files_card(&p.account.id, &p.id, &r.id, "", None, page.can_work, &page.chrome.csrf))
        (sandbox_snapshots_card(page))
        (events_card(&page.events))
        (usage_card(&page.usage))
        @if page.can_work {
            div.card.danger-zone #delete-sandbox {
                div.card-head {
                    div { h2 { "Delete this sandbox" } p { "It is deleted at " (r.provider) " with everything in it; its record stays listed as a tombstone." } }
                    form method="post" action={(paths::sandbox(&p.account.id, &p.id, &r.id)) "/delete"} {
                        (csrf_field(&page.chrome.csrf))
                        details.confirm {
                            summary.btn.small.ghost { "Delete…" }
                            span.confirm-panel { button.btn.small.danger type="submit" #confirm-delete { "Delete sandbox" } }
                        }
                    }
                }
            }
        }
        a href=(paths::project(&p.account.id, &p.id)) { "← All sandboxes" }
    };
    shell(&r.id, &page.chrome, content)
}

/// The sandbox page's lifecycle actions (admins, live sandboxes, what its provider
/// supports): stop or resume, take a snapshot, fork. Snapshot and fork forms carry the key
/// made with the page, so a resent form acts once.
fn lifecycle_card(page: &SandboxPage) -> Markup {
    let p = &page.project;
    let r = &page.row;
    let offer = r.lifecycle;
    let action = |what: &str| format!("{}/{what}", paths::sandbox(&p.account.id, &p.id, &r.id));
    let csrf = &page.chrome.csrf;
    html! {
        @if page.can_work && offer.any() {
            div.card #lifecycle {
                div.card-head { div { h2 { "Lifecycle" } p {
                    "Stop it to pay for nothing while it is not used (its files are kept; running commands end), resume it to work again, "
                    "keep a snapshot of it, or fork it into independent copies."
                } } }
                div.card-body {
                    div.lifecycle-actions {
                        @if offer.stop || offer.resume {
                            (stop_or_resume(&p.account.id, &p.id, &r.id, offer, csrf, "lifecycle"))
                        }
                        @if offer.snapshot {
                            form.inline method="post" action=(action("snapshots")) {
                                (csrf_field(csrf))
                                input type="hidden" name="key" value=(page.snapshot_key);
                                div.field {
                                    label for="snapshot-name" { "Snapshot name " span.muted.small { "(optional)" } }
                                    input #snapshot-name type="text" name="name" maxlength=(corral_domain::limits::MAX_SNAPSHOT_NAME_CHARS) autocomplete="off";
                                }
                                button.btn.secondary type="submit" #take-snapshot { "Take snapshot" }
                            }
                        }
                        @if offer.fork {
                            form.inline method="post" action=(action("fork")) {
                                (csrf_field(csrf))
                                input type="hidden" name="key" value=(page.fork_key);
                                div.field.narrow-field {
                                    label for="fork-count" { "Copies" }
                                    input #fork-count type="number" name="count" min="1" max=(corral_domain::limits::MAX_FORK_COUNT) value="1" required;
                                }
                                button.btn.secondary type="submit" #fork { "Fork" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The sandbox's own snapshots (when its provider takes them), newest first.
fn sandbox_snapshots_card(page: &SandboxPage) -> Markup {
    let p = &page.project;
    html! {
        @match &page.snapshots {
            Ok(None) => {},
            Err(why) => div.card #sandbox-snapshots {
                div.card-head { div { h2 { "Snapshots" } } }
                div.card-body { p.muted { (why) } }
            },
            Ok(Some(rows)) => div.card #sandbox-snapshots {
                div.card-head { div { h2 { "Snapshots" } p {
                    "Snapshots of this sandbox, newest first. "
                    a href=(paths::snapshots(&p.account.id, &p.id)) { "Every snapshot of the project" }
                } } }
                @if rows.is_empty() {
                    div.empty { strong { "No snapshots yet" } }
                } @else {
                    div.table-wrap { table {
                        thead { tr { th { "Snapshot" } th { "Status" } th.hide-sm { "Size" } th.hide-sm { "Taken" } } }
                        tbody {
                            @for s in rows {
                                tr.is-tombstone[s.deleted.is_some()] data-snapshot=(s.id) {
                                    td { code { (s.id) } @if !s.name.is_empty() { br; span.small.muted { (s.name) } } }
                                    td { (snapshot_badge(&s.status)) }
                                    td.muted.hide-sm { (s.size) }
                                    td.muted.hide-sm { (s.created) }
                                }
                            }
                        }
                    } }
                }
            },
        }
    }
}

/// The sandbox page's commands: the run form and the history.
fn run_command_card(page: &SandboxPage) -> Markup {
    let p = &page.project;
    let r = &page.row;
    let stopped = matches!(r.status.as_str(), "stopped" | "stopping") && r.deleted.is_none();
    html! {
        div.card #commands {
            div.card-head { div { h2 { "Commands" } p { "Run a shell command in this sandbox (" code { "sh -c" } ") and watch its output. Commands keep running when you leave the page." } } }
            @if stopped && page.can_work {
                div.card-body #sandbox-stopped {
                    p { "This sandbox is " (r.status) ": nothing runs in it until it is resumed. Its files are kept." }
                    @if r.lifecycle.resume {
                        (stop_or_resume(&p.account.id, &p.id, &r.id, r.lifecycle, &page.chrome.csrf, "commands"))
                    }
                }
            } @else if page.can_work {
                div.card-body {
                    form.inline method="post" action=(paths::commands(&p.account.id, &p.id, &r.id)) {
                        (csrf_field(&page.chrome.csrf))
                        div.field {
                            label for="run-command" { "Command" }
                            input #run-command.mono type="text" name="command" required autocomplete="off" spellcheck="false" placeholder="echo hello";
                        }
                        label.check for="run-stdin" {
                            input #run-stdin type="checkbox" name="stdin" value="1";
                            span { "Keep its input open (type to it from its page)" }
                        }
                        button.btn type="submit" #run { "Run" }
                    }
                }
            }
            @match &page.commands {
                Err(why) => div.card-body { p.muted { (why) } },
                Ok(rows) if rows.is_empty() => div.empty {
                    strong { "No commands yet" }
                    p { "Commands run here or through the API are listed with their exit codes. Over the API:" }
                    div.secret-box {
                        code #command-curl.mono { (format!("curl -X POST {}/v1/sandboxes/{}/commands -H 'Authorization: Bearer $CORRAL_API_KEY' -H 'Content-Type: application/json' -d '{{\"command\":\"echo hello\"}}'", page.api_base, r.id)) }
                        button.btn.small type="button" data-copy="command-curl" hidden { "Copy" }
                    }
                },
                Ok(rows) => div.table-wrap { table #command-history {
                    thead { tr { th { "Command" } th { "State" } th { "Exit" } th.hide-sm { "Started" } th.hide-sm { "Duration" } } }
                    tbody {
                        @for c in rows {
                            tr data-command=(c.id) {
                                td { a href=(c.href) { code { (c.command) } } }
                                td { (command_badge(&c.state)) }
                                td { @match c.exit_code { Some(code) => (code), None => "—" } }
                                td.muted.hide-sm { (c.started) }
                                td.muted.hide-sm { (c.duration) }
                            }
                        }
                    }
                } },
            }
        }
    }
}

fn events_card(events: &Result<Vec<EventRow>, String>) -> Markup {
    html! {
        div.card #events {
            div.card-head { div { h2 { "Events" } p { "What happened to this sandbox, newest first." } } }
            @match events {
                Err(why) => div.card-body { p.muted { (why) } },
                Ok(rows) if rows.is_empty() => div.empty { strong { "No events yet" } },
                Ok(rows) => div.table-wrap { table {
                    thead { tr { th { "When" } th { "Event" } th.hide-sm { "Details" } } }
                    tbody {
                        @for e in rows {
                            tr {
                                td.muted { (e.when) }
                                td { code { (e.kind) } }
                                td.hide-sm {
                                    (e.detail)
                                    @if let Some(href) = &e.command_href { " " a href=(href) { "output" } }
                                }
                            }
                        }
                    }
                } },
            }
        }
    }
}

fn usage_card(usage: &Result<UsageView, String>) -> Markup {
    html! {
        div.card #usage {
            div.card-head { div { h2 { "Cost so far" } } }
            div.card-body {
                @match usage {
                    Err(why) => p.muted { (why) },
                    Ok(u) => {
                        dl.facts {
                            dt { "Running" } dd { (u.running) }
                            dt { "Estimated cost" }
                            dd #estimated-cost {
                                @if u.cost.is_empty() { "not known (no published rate for this provider)" }
                                @else { @for (i, c) in u.cost.iter().enumerate() { @if i > 0 { ", " } (c) } }
                            }
                        }
                        p.small.muted.mt { (u.basis) }
                    }
                }
            }
        }
    }
}
