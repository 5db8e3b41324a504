//! A project's own pages (`handlers::project`): API keys and settings.

use corral_control::MAX_PROJECT_NAME;
use maud::{Markup, html};

use super::layout::{csrf_field, paths, project_head, shell};
use crate::view::*;

/// API keys: the new key (once), the list, create and revoke.
pub(crate) fn keys(page: &KeysPage) -> Markup {
    let p = &page.project;
    let csrf = &page.chrome.csrf;
    let content = html! {
        (project_head(p, ProjectTab::Keys))
        @if let Some(key) = &page.new_key {
            div.card.highlight {
                div.card-head { div { h2 { "Your new API key" } p { "Copy it now: this is the only time it is shown. Store it in your secret manager." } } }
                div.card-body {
                    div.secret-box {
                        code #new-key data-select-all { (key) }
                        button.btn.small type="button" data-copy="new-key" hidden { "Copy" }
                    }
                    p.small.muted.mt {
                        "Use it as " code { "Authorization: Bearer <key>" } " on the sandbox API."
                    }
                }
            }
        }
        div.card {
            div.card-head {
                div { h2 { "API keys" } p { "Keys authenticate the sandbox API for this project only." } }
                @if !p.account.deleting {
                    form.inline method="post" action={(paths::keys(&p.account.id, &p.id))} {
                        (csrf_field(csrf))
                        input type="hidden" name="latest" value=(page.latest);
                        div.field {
                            label for="key-name" { "Name" }
                            input #key-name type="text" name="name" maxlength="64" placeholder="ci, laptop…";
                        }
                        div.field.narrow-field {
                            label for="key-expires" { "Expires" }
                            select #key-expires name="expires" {
                                @for days in crate::view::KEY_LIFETIMES {
                                    option value=(days) { "in " (days) " days" }
                                }
                                option value="never" selected { "never" }
                            }
                        }
                        button.btn type="submit" id="create-key" { "Create key" }
                    }
                }
            }
            @if page.keys.is_empty() {
                div.empty { strong { "No keys yet" } "Create a key to call the sandbox API." }
            } @else {
                div.table-wrap { table {
                    thead { tr { th { "Name" } th { "Key" } th.hide-sm { "Created" } th.hide-sm { "Expires" } th.hide-sm { "Last used" } th { "Status" } th { span.visually-hidden { "Actions" } } } }
                    tbody {
                        @for k in &page.keys {
                            tr.is-tombstone[k.revoked.is_some() || k.expired] {
                                td.key-name { (k.name) }
                                td { code { (k.prefix) } }
                                td.muted.hide-sm { (k.created) }
                                td.muted.hide-sm.key-expires { (k.expires) }
                                td.muted.hide-sm { (k.last_used) }
                                td {
                                    @match (&k.revoked, k.expired) {
                                        (Some(at), _) => span.badge.plain title={"Revoked " (at)} { "revoked" },
                                        (None, true) => span.badge.plain title={"Expired " (k.expires)} { "expired" },
                                        (None, false) => span.badge.ok { "active" },
                                    }
                                }
                                td.actions {
                                    @if k.revoked.is_none() && !p.account.deleting {
                                        form method="post" action={(paths::keys(&p.account.id, &p.id)) "/" (k.key_id) "/revoke"} {
                                            (csrf_field(csrf))
                                            details.confirm {
                                                summary.btn.small.ghost { "Revoke…" }
                                                span.confirm-panel { button.btn.small.danger type="submit" { "Revoke key" } }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                } }
            }
        }
    };
    shell(&format!("{} · API keys", p.name), &page.chrome, content)
}

/// Rename or delete a project.
pub(crate) fn project_settings(page: &ProjectSettingsPage) -> Markup {
    let p = &page.project;
    let csrf = &page.chrome.csrf;
    let admin = p.account.is_admin() && !p.account.deleting;
    let content = html! {
        (project_head(p, ProjectTab::Settings))
        div.card {
            div.card-head { div { h2 { "Project" } } }
            div.card-body {
                dl.facts.mb {
                    dt { "Id" } dd { code { (p.id) } }
                    dt { "Created" } dd { (p.created) }
                    dt { "Account" } dd { (p.account.name) }
                }
                @if admin {
                    form.inline method="post" action={(paths::project(&p.account.id, &p.id)) "/rename"} {
                        (csrf_field(csrf))
                        div.field {
                            label for="rename" { "Name" }
                            input #rename type="text" name="name" required maxlength=(MAX_PROJECT_NAME) value=(p.name);
                        }
                        button.btn.secondary type="submit" { "Rename" }
                    }
                }
            }
        }
        @if admin {
            div.card.danger-zone {
                div.card-head { div { h2 { "Delete project" } p { "Deletes its sandboxes at their providers, revokes its keys and erases its provider credentials." } } }
                div.card-body {
                    form method="post" action={(paths::project(&p.account.id, &p.id)) "/delete"} {
                        (csrf_field(csrf))
                        details.confirm {
                            summary.btn.secondary { "Delete project…" }
                            span.confirm-panel { span.small.muted { "Sure?" } button.btn.danger type="submit" { "Delete " (p.name) } }
                        }
                    }
                }
            }
        }
    };
    shell(&format!("{} · Settings", p.name), &page.chrome, content)
}
