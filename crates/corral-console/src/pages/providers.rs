//! A project's provider profiles (`handlers::providers`).

use maud::{Markup, html};

use super::layout::{csrf_field, paths, project_head, shell};
use crate::view::*;

/// What a bridge URL must be, as the browser says it when the form's pattern refuses one.
pub(crate) const BRIDGE_URL_RULE: &str =
    "The bridge URL must start with https:// (the bridge receives the credential).";

/// A provider card's readiness badge.
fn card_badge(state: CardState) -> Markup {
    let (class, key, text) = match state {
        CardState::NotEnabled => ("badge plain", "not-enabled", "not enabled here"),
        CardState::NotConnected => ("badge plain", "not-connected", "not connected"),
        CardState::BuiltIn => ("badge ok", "built-in", "ready · built in"),
        CardState::Incomplete => ("badge warn", "incomplete", "incomplete"),
        CardState::NotTested => ("badge plain", "not-tested", "connected · not tested"),
        CardState::Failing => ("badge danger", "failing", "not ready: test failed"),
        CardState::Inconclusive => ("badge warn", "inconclusive", "test inconclusive"),
        CardState::Ready => ("badge ok", "ready", "ready"),
    };
    html! { span class=(class) data-state=(key) { (text) } }
}

/// The mark of a test row (hidden from screen readers: the row's words say the same).
fn check_mark(outcome: CheckOutcome) -> &'static str {
    match outcome {
        CheckOutcome::Passed => "✓",
        CheckOutcome::Failed => "✕",
        CheckOutcome::Inconclusive => "?",
        CheckOutcome::NotReached => "–",
    }
}

/// Provider connections: readiness, connect form, test and per-operation results.
pub(crate) fn providers(page: &ProvidersPage) -> Markup {
    let p = &page.project;
    let csrf = &page.chrome.csrf;
    let admin = p.account.is_admin() && !p.account.deleting;
    let content = html! {
        (project_head(p, ProjectTab::Providers))
        p.muted { "Connect the providers this project's sandboxes run on. Credentials are encrypted at rest and never shown again." }
        div.provider-grid {
            @for c in page.cards.iter().filter(|c| c.enabled || c.connected) {
                div.card id={"provider-" (c.provider)} {
                    div.card-head {
                        div { h2 { (c.label) } p { code { (c.provider) } } }
                        (card_badge(c.state))
                    }
                    div.card-body.grow {
                        @if c.provider == "local" {
                            p.small.muted { "Runs sandboxes on this server itself: no account or credential needed." }
                        }
                        @if let Some((ago, at)) = &c.tested {
                            p.small.muted.tested { "Last tested " time title=(at) { (ago) } " (" (at) ")" }
                        } @else if c.state == CardState::NotTested {
                            p.small.muted.tested { "Not tested yet: run “Test connection” to see what the credential can do." }
                        }
                        @if c.connected && !c.missing.is_empty() {
                            ul.readiness { @for m in &c.missing { li { (m) } } }
                        }
                        @if !c.checks.is_empty() {
                            h3 { "Last test" }
                            ul.checks data-provider=(c.provider) {
                                @for ch in &c.checks {
                                    li class=(ch.outcome.as_str()) data-operation=(ch.operation) {
                                        span.mark aria-hidden="true" { (check_mark(ch.outcome)) }
                                        span.op { (ch.operation) }
                                        span {
                                            @match ch.outcome {
                                                CheckOutcome::Passed => { span.why { "passed · " (ch.checked) } }
                                                CheckOutcome::Failed => {
                                                    span.why { "failed: " (ch.reason.as_deref().unwrap_or("no reason given")) }
                                                    @if let Some(fix) = &ch.remediation { br; span.fix { (fix) } }
                                                }
                                                CheckOutcome::Inconclusive | CheckOutcome::NotReached => {
                                                    span.why { (ch.reason.as_deref().unwrap_or("")) }
                                                    @if let Some(fix) = &ch.remediation { br; span.fix { (fix) } }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        @if admin && c.enabled {
                            details.mt open[!c.connected && c.state != CardState::BuiltIn] {
                                summary.small.summary-link {
                                    @if c.connected { "Update connection" }
                                    @else if c.state == CardState::BuiltIn { "Add a profile to test it" }
                                    @else { "Connect" }
                                }
                                form.stack.mt method="post" action={(paths::providers(&p.account.id, &p.id)) "/" (c.provider)} {
                                    (csrf_field(csrf))
                                    @if c.needs_credential {
                                        div.field {
                                            label for={(c.provider) "-credential"} { @if c.bridge { "Bridge key" } @else { "API key or token" } }
                                            input id={(c.provider) "-credential"} type="password" name="credential" autocomplete="off"
                                                required[!c.has_credential]
                                                aria-describedby=[c.bridge.then(|| format!("{}-credential-hint", c.provider))]
                                                placeholder=(if c.has_credential { "•••••••• stored; leave empty to keep it" } else { "" });
                                            @if c.bridge {
                                                span.hint id={(c.provider) "-credential-hint"} { "The key your deployed bridge checks (sent as its bearer token)." }
                                            }
                                        }
                                    }
                                    @for f in &c.fields {
                                        div.field {
                                            label for={(c.provider) "-" (f.name)} { (f.label) }
                                            @if f.name == "bridgeUrl" {
                                                // The browser refuses an http:// URL before the server can say why;
                                                // its refusal shows the title (else only "match the requested format").
                                                input id={(c.provider) "-" (f.name)} type="url" name=(f.name) value=(f.value) pattern="https://.+" placeholder="https://"
                                                    title=(BRIDGE_URL_RULE);
                                            } @else {
                                                input id={(c.provider) "-" (f.name)} type="text" name=(f.name) value=(f.value);
                                            }
                                            @if !f.hint.is_empty() { span.hint { (f.hint) } }
                                        }
                                    }
                                    div { button.btn.secondary type="submit" { @if c.connected { "Save" } @else { "Connect " (c.label) } } }
                                }
                            }
                        }
                    }
                    @if admin && c.connected {
                        div.card-body.card-foot.actions-row {
                            form method="post" action={(paths::providers(&p.account.id, &p.id)) "/" (c.provider) "/test"} {
                                (csrf_field(csrf))
                                button.btn type="submit" id={"test-" (c.provider)} { "Test connection" }
                            }
                            form method="post" action={(paths::providers(&p.account.id, &p.id)) "/" (c.provider) "/disconnect"} {
                                (csrf_field(csrf))
                                details.confirm {
                                    summary.btn.ghost { "Disconnect…" }
                                    span.confirm-panel { button.btn.small.danger type="submit" { "Disconnect" } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    let others: Vec<&ProviderCard> = page
        .cards
        .iter()
        .filter(|c| !c.enabled && !c.connected)
        .collect();
    let content = html! {
        (content)
        @if !others.is_empty() {
            p.others {
                "Not enabled on this server: "
                @for c in &others { span.badge.plain { (c.label) } }
                br;
                "An operator enables providers in the server's configuration (" code { "[providers] enabled" } ")."
            }
        }
    };
    shell(&format!("{} · Providers", p.name), &page.chrome, content)
}
