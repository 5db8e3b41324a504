//! An account's pages (`handlers::account`): the overview, a new organization, members and
//! the audit log.

use corral_control::{MAX_ACCOUNT_NAME, MAX_PROJECT_NAME};
use maud::{Markup, html};

use super::layout::{BASE, csrf_field, page_head, paths, shell};
use crate::view::*;

fn role_badge(role: &str) -> Markup {
    let class = match role {
        "owner" => "badge plain accent",
        "admin" => "badge plain",
        _ => "badge plain",
    };
    html! { span class=(class) { (role) } }
}

/// An account's overview: its projects and a create-project form.
pub(crate) fn overview(page: &OverviewPage) -> Markup {
    let acc = &page.account;
    let content = html! {
        (page_head(
            html! { span { "Accounts" } span { (acc.name) } },
            &acc.name,
            Some(if acc.personal { "Your personal account." } else { "An organization shared with its members." }),
            html! { (role_badge(&acc.role)) },
        ))
        @if acc.deleting { div.flash.error { "This account is being deleted. Its sandboxes, keys and profiles are being removed." } }
        div.grid.mb {
            div.card.stat { div.label { "Projects" } div.value { (page.projects.len()) } }
            div.card.stat { div.label { "Members" } div.value { (page.members) } }
            div.card.stat { div.label { "Your role" } div.value.cap { (acc.role) } }
        }
        div.card {
            div.card-head { div { h2 { "Projects" } p { "Each project has its own API keys, provider connections and sandboxes." } } }
            @if page.projects.is_empty() {
                div.empty { strong { "No projects yet" } "Create one to get an API key and connect a provider." }
            } @else {
                div.table-wrap { table {
                    thead { tr { th { "Name" } th { "Id" } th { "Created" } } }
                    tbody {
                        @for p in &page.projects {
                            tr {
                                td {
                                    a href=(paths::project(&acc.id, &p.id)) { strong { (p.name) } }
                                    @if p.deleting { " " span.badge.danger.deleting { "deleting" } }
                                }
                                td { code { (p.id) } }
                                td.muted { (p.created) }
                            }
                        }
                    }
                } }
            }
            @if acc.is_admin() && !acc.deleting {
                div.card-body.card-foot {
                    form.inline method="post" action={(paths::account(&acc.id)) "/projects"} {
                        (csrf_field(&page.chrome.csrf))
                        div.field {
                            label for="project-name" { "New project" }
                            input #project-name type="text" name="name" required maxlength=(MAX_PROJECT_NAME) placeholder="e.g. agents-prod";
                        }
                        button.btn type="submit" { "Create project" }
                    }
                }
            }
        }
        @if !acc.personal && acc.is_admin() {
            div.card {
                div.card-head { div { h2 { "Organization name" } } }
                div.card-body {
                    form.inline method="post" action={(paths::account(&acc.id)) "/rename"} {
                        (csrf_field(&page.chrome.csrf))
                        input type="hidden" name="version" value=(acc.version);
                        div.field {
                            label for="account-name" { "Name" }
                            input #account-name type="text" name="name" required maxlength=(MAX_ACCOUNT_NAME) value=(acc.name);
                        }
                        button.btn.secondary type="submit" { "Rename" }
                    }
                }
            }
        }
        @if !acc.personal && acc.is_owner() && !acc.deleting {
            div.card.danger-zone {
                div.card-head { div { h2 { "Delete organization" } p { "Deletes its sandboxes at their providers, revokes its keys and erases its provider credentials. This cannot be undone." } } }
                div.card-body {
                    form method="post" action={(paths::account(&acc.id)) "/delete"} {
                        (csrf_field(&page.chrome.csrf))
                        details.confirm {
                            summary.btn.secondary { "Delete organization…" }
                            span.confirm-panel { span.small.muted { "Sure?" } button.btn.danger type="submit" { "Delete " (acc.name) } }
                        }
                    }
                }
            }
        }
    };
    shell(&acc.name, &page.chrome, content)
}

/// Create an organization.
pub(crate) fn new_organization(page: &NewOrganizationPage) -> Markup {
    let content = html! {
        (page_head(html! { span { "Accounts" } span { "New organization" } }, "New organization",
            Some("Organizations share projects, keys and provider connections among their members."), html! {}))
        div.card { div.card-body {
            form.stack.narrow method="post" action={(BASE) "/accounts"} {
                (csrf_field(&page.chrome.csrf))
                div.field {
                    label for="org-name" { "Organization name" }
                    input #org-name type="text" name="name" required maxlength=(MAX_ACCOUNT_NAME) placeholder="Acme Robotics";
                    span.hint { "You can rename it later." }
                }
                div { button.btn type="submit" { "Create organization" } }
            }
        } }
    };
    shell("New organization", &page.chrome, content)
}

/// Members, invitations, roles and ownership transfer.
pub(crate) fn members(page: &MembersPage) -> Markup {
    let acc = &page.account;
    let csrf = &page.chrome.csrf;
    let content = html! {
        (page_head(html! { span { (acc.name) } span { "Members" } }, "Members",
            Some(if acc.personal { "A personal account has exactly one member: you. Create an organization to work with others." }
                 else { "Owners manage everything; admins manage members, projects, keys and providers; members can look." }),
            html! {}))
        div.card {
            div.card-head { div { h2 { "People" } } }
            div.table-wrap { table {
                thead { tr { th { "Email" } th { "Role" } th { "Since" } th { span.visually-hidden { "Actions" } } } }
                tbody {
                    @for m in &page.members {
                        tr {
                            td { (m.email) @if m.is_me { " " span.badge.plain { "you" } } }
                            td { (role_badge(&m.role)) }
                            td.muted { (m.since) }
                            td.actions {
                                @if !acc.personal && !acc.deleting {
                                    // Only an owner may change an owner's role, grant ownership or
                                    // remove an owner: an admin is not offered what would fail.
                                    @if acc.is_admin() && !m.is_me && (acc.is_owner() || m.role != "owner") {
                                        form method="post" action={(paths::members(&acc.id)) "/" (m.user_id) "/role"} {
                                            (csrf_field(csrf))
                                            label.visually-hidden for={"role-" (m.user_id)} { "Role of " (m.email) }
                                            select id={"role-" (m.user_id)} name="role" class="compact" {
                                                @for r in ["owner", "admin", "member"].into_iter().filter(|r| acc.is_owner() || *r != "owner") {
                                                    option value=(r) selected[m.role == r] { (r) }
                                                }
                                            }
                                            button.btn.small.secondary type="submit" { "Change" }
                                        }
                                    }
                                    @if acc.is_owner() && !m.is_me {
                                        form method="post" action={(paths::account(&acc.id)) "/transfer"} {
                                            (csrf_field(csrf))
                                            input type="hidden" name="user" value=(m.user_id);
                                            details.confirm {
                                                summary.btn.small.ghost { "Transfer ownership…" }
                                                span.confirm-panel { button.btn.small type="submit" { "Make owner, I become admin" } }
                                            }
                                        }
                                    }
                                    @if m.is_me || (acc.is_admin() && (acc.is_owner() || m.role != "owner")) {
                                        form method="post" action={(paths::members(&acc.id)) "/" (m.user_id) "/remove"} {
                                            (csrf_field(csrf))
                                            details.confirm {
                                                summary.btn.small.ghost { @if m.is_me { "Leave…" } @else { "Remove…" } }
                                                span.confirm-panel { button.btn.small.danger type="submit" { @if m.is_me { "Leave" } @else { "Remove" } } }
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
        @if !acc.personal && acc.is_admin() {
            div.card {
                div.card-head { div { h2 { "Invitations" } p { "An invitation link is emailed and works once, for 7 days." } } }
                @if !page.invitations.is_empty() {
                    div.table-wrap { table {
                        thead { tr { th { "Email" } th { "Role" } th { "Expires" } th { span.visually-hidden { "Actions" } } } }
                        tbody {
                            @for i in &page.invitations {
                                tr {
                                    td { (i.email) }
                                    td { (role_badge(&i.role)) }
                                    td.muted { (i.expires) }
                                    td.actions {
                                        form method="post" action={(paths::account(&acc.id)) "/invitations/" (i.id) "/revoke"} {
                                            (csrf_field(csrf))
                                            button.btn.small.ghost type="submit" { "Revoke" }
                                        }
                                    }
                                }
                            }
                        }
                    } }
                }
                @if !acc.deleting {
                    div.card-body.card-foot {
                        form.inline method="post" action={(paths::account(&acc.id)) "/invitations"} {
                            (csrf_field(csrf))
                            div.field {
                                label for="invite-email" { "Email" }
                                input #invite-email type="email" name="email" required placeholder="teammate@company.com";
                            }
                            div.field.narrow-field {
                                label for="invite-role" { "Role" }
                                select #invite-role name="role" {
                                    option value="member" { "member" }
                                    option value="admin" { "admin" }
                                    @if acc.is_owner() { option value="owner" { "owner" } }
                                }
                            }
                            button.btn type="submit" { "Send invitation" }
                        }
                    }
                }
            }
        }
    };
    shell("Members", &page.chrome, content)
}

/// The audit log (owners).
pub(crate) fn audit(page: &AuditPage) -> Markup {
    let acc = &page.account;
    let content = html! {
        (page_head(html! { span { (acc.name) } span { "Audit log" } }, "Audit log",
            Some("Every change to this account, who made it and when. Newest first."), html! {}))
        div.card {
            div.card-body {
                form.inline #audit-filter method="get" action=(paths::audit(&acc.id)) {
                    div.field {
                        label for="audit-actor" { "Who" }
                        select #audit-actor name="actor" {
                            option value="" { "Anyone" }
                            @for a in &page.actors { option value=(a) selected[page.actor.as_ref() == Some(a)] { (a) } }
                        }
                    }
                    div.field {
                        label for="audit-action" { "What" }
                        select #audit-action name="action" {
                            option value="" { "Anything" }
                            @for a in &page.actions { option value=(a) selected[page.action.as_ref() == Some(a)] { (a) } }
                        }
                    }
                    button.btn.secondary type="submit" { "Filter" }
                    @if page.actor.is_some() || page.action.is_some() {
                        a.btn.ghost href=(paths::audit(&acc.id)) { "Clear" }
                    }
                }
            }
            @if page.events.is_empty() && (page.actor.is_some() || page.action.is_some()) {
                div.empty #audit-no-match { strong { "Nothing matches" } "Clear the filters to see every change." }
            } @else if page.events.is_empty() {
                div.empty { strong { "Nothing recorded yet" } }
            } @else {
                // On a phone each event stacks into a block (`stack-sm`); the explicit roles
                // keep it a table for assistive technology when CSS changes its display.
                div.table-wrap { table.stack-sm role="table" {
                    thead role="rowgroup" { tr role="row" { th role="columnheader" { "When" } th role="columnheader" { "Who" } th role="columnheader" { "What" } th role="columnheader" { "Target" } } }
                    tbody role="rowgroup" {
                        @for e in &page.events {
                            tr role="row" {
                                td.muted.nowrap role="cell" data-label="When" { (e.at) }
                                td role="cell" data-label="Who" { (e.actor) }
                                td role="cell" data-label="What" { code { (e.action) } }
                                td role="cell" data-label="Target" {
                                    @match &e.target_href {
                                        Some(href) => a href=(href) { code { (e.target) } },
                                        None => code { (e.target) },
                                    }
                                }
                            }
                        }
                    }
                } }
            }
        }
    };
    shell("Audit log", &page.chrome, content)
}
