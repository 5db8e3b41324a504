//! A project's snapshots (`handlers::lifecycle`).

use maud::{Markup, html};

use super::layout::{csrf_field, paths, project_head, shell, snapshot_badge};
use crate::view::*;

/// The project's snapshots, newest first, tombstones included; admins delete them.
pub(crate) fn snapshots(page: &SnapshotsPage) -> Markup {
    let p = &page.project;
    let admin = p.account.is_admin() && !p.account.deleting;
    let csrf = &page.chrome.csrf;
    let content = html! {
        (project_head(p, ProjectTab::Snapshots))
        div.card {
            div.card-head { div { h2 { "Snapshots" } p {
                "Snapshots of this project's sandboxes, newest first: taken from a sandbox's page or the API, and by every fork. "
                "A new sandbox starts from one with " code { "\"snapshot\"" } " in its create request; deleted ones stay listed as tombstones."
            } } }
            @if page.rows.is_empty() {
                div.empty #no-snapshots {
                    strong { "No snapshots yet" }
                    p { "Take one from a sandbox's page, on a provider that supports snapshots." }
                }
            } @else {
                // On a phone each snapshot stacks into a block (`stack-sm`); the explicit roles
                // keep it a table for assistive technology when CSS changes its display.
                div.table-wrap { table.stack-sm #snapshot-list role="table" {
                    thead role="rowgroup" { tr role="row" {
                        th role="columnheader" { "Snapshot" } th role="columnheader" { "Sandbox" } th role="columnheader" { "Status" }
                        th role="columnheader" { "Size" } th role="columnheader" { "Taken" }
                        @if admin { th role="columnheader" { span.visually-hidden { "Actions" } } }
                    } }
                    tbody role="rowgroup" {
                        @for s in &page.rows {
                            tr.is-tombstone[s.deleted.is_some()] role="row" data-snapshot=(s.id) {
                                td role="cell" data-label="Snapshot" {
                                    code { (s.id) }
                                    @if !s.name.is_empty() { br; span.small.muted { (s.name) } }
                                }
                                td role="cell" data-label="Sandbox" { a href=(paths::sandbox(&p.account.id, &p.id, &s.sandbox)) { code { (s.sandbox) } } }
                                td role="cell" data-label="Status" {
                                    (snapshot_badge(&s.status))
                                    @if let Some(why) = &s.failure { br; span.small.muted { (why) } }
                                    @if let Some(at) = &s.deleted { br; span.small.muted { "deleted " (at) } }
                                }
                                td.muted role="cell" data-label="Size" { (s.size) }
                                td.muted role="cell" data-label="Taken" { (s.created) }
                                @if admin {
                                    td.actions role="cell" {
                                        @if s.deleted.is_none() {
                                            form method="post" action={(paths::snapshots(&p.account.id, &p.id)) "/" (s.id) "/delete"} {
                                                (csrf_field(csrf))
                                                details.confirm {
                                                    summary.btn.small.ghost aria-label={"Delete " (s.id) "…"} { "Delete…" }
                                                    span.confirm-panel { button.btn.small.danger type="submit" data-delete=(s.id) { "Delete snapshot" } }
                                                }
                                            }
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
                    a.btn.secondary #older-snapshots href={(paths::snapshots(&p.account.id, &p.id)) "?" (cursor_query(next))} { "Older snapshots" }
                }
            }
        }
    };
    shell(&format!("{} · Snapshots", p.name), &page.chrome, content)
}

/// `cursor=…`, encoded.
fn cursor_query(cursor: &str) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("cursor", cursor)
        .finish()
}
