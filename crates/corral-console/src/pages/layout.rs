//! What every page shares: the console's URLs, the document head, the signed-in shell
//! (navigation, account switcher, flash), page heads and badges, and the error page.

use maud::{DOCTYPE, Markup, html};

use crate::view::*;

/// Where the console lives and its static files.
pub(crate) const BASE: &str = "/console";

pub(super) const CSS: &str = concat!("/console/assets/console.css?v=", env!("CARGO_PKG_VERSION"));

const JS: &str = concat!("/console/assets/console.js?v=", env!("CARGO_PKG_VERSION"));

const LOGO: &str = "/console/assets/logo.svg";

/// Console URLs, in one place so links and routes agree.
pub(crate) mod paths {
    use super::BASE;

    pub(crate) fn account(id: &str) -> String {
        format!("{BASE}/accounts/{id}")
    }
    pub(crate) fn members(id: &str) -> String {
        format!("{BASE}/accounts/{id}/members")
    }
    pub(crate) fn audit(id: &str) -> String {
        format!("{BASE}/accounts/{id}/audit")
    }
    pub(crate) fn project(account: &str, project: &str) -> String {
        format!("{BASE}/accounts/{account}/projects/{project}")
    }
    pub(crate) fn keys(account: &str, project: &str) -> String {
        format!("{}/keys", project_(account, project))
    }
    pub(crate) fn providers(account: &str, project: &str) -> String {
        format!("{}/providers", project_(account, project))
    }
    pub(crate) fn settings(account: &str, project: &str) -> String {
        format!("{}/settings", project_(account, project))
    }
    pub(crate) fn sandbox(account: &str, project: &str, sandbox: &str) -> String {
        format!("{}/sandboxes/{sandbox}", project_(account, project))
    }
    pub(crate) fn commands(account: &str, project: &str, sbx: &str) -> String {
        format!("{}/commands", sandbox(account, project, sbx))
    }
    pub(crate) fn command(account: &str, project: &str, sandbox: &str, cmd: &str) -> String {
        format!("{}/{cmd}", commands(account, project, sandbox))
    }
    pub(crate) fn command_output(account: &str, project: &str, sbx: &str, cmd: &str) -> String {
        format!("{}/output", command(account, project, sbx, cmd))
    }
    pub(crate) fn files(account: &str, project: &str, sbx: &str) -> String {
        format!("{}/files", sandbox(account, project, sbx))
    }
    pub(crate) fn snapshots(account: &str, project: &str) -> String {
        format!("{}/snapshots", project_(account, project))
    }
    fn project_(account: &str, id: &str) -> String {
        project(account, id)
    }
}

pub(super) fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="same-origin";
            title { (title) " · Corral" }
            link rel="icon" href=(LOGO) type="image/svg+xml";
            link rel="stylesheet" href=(CSS);
            script src=(JS) defer {}
        }
    }
}

pub(super) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

pub(super) fn flash(flash: Option<&Flash>) -> Markup {
    html! {
        @if let Some(f) = flash {
            div class={"flash " (f.kind.as_str())} role=(if f.kind == FlashKind::Error { "alert" } else { "status" }) {
                (f.text)
            }
        }
    }
}

/// The flash of a signed-in page: its text, then links to the sandboxes it names (of the
/// project the page shows; without one, their ids as text).
fn chrome_flash(chrome: &Chrome) -> Markup {
    let Some(f) = chrome.flash.as_ref() else {
        return html! {};
    };
    let project = chrome
        .account
        .as_ref()
        .zip(chrome.project.as_deref())
        .map(|(a, p)| (a.id.as_str(), p));
    html! {
        div class={"flash " (f.kind.as_str())} role=(if f.kind == FlashKind::Error { "alert" } else { "status" }) {
            span {
                (f.text)
                @for (i, id) in f.sandboxes.iter().enumerate() {
                    @if i > 0 { "," }
                    " "
                    @match project {
                        Some((acc, prj)) => a.flash-link href=(paths::sandbox(acc, prj, id)) { code { (id) } },
                        None => code { (id) },
                    }
                }
            }
        }
    }
}

/// A page with only a centred card: sign-in, check your email, terms.
pub(super) fn single(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                main.auth {
                    div.panel {
                        a.brand href=(BASE) aria-label="Corral" { img src=(LOGO) alt=""; span { "Corral" } }
                        (body)
                    }
                }
            }
        }
    }
}

/// The signed-in shell: top bar with the account switcher, sidebar, content.
pub(super) fn shell(title: &str, chrome: &Chrome, content: Markup) -> Markup {
    let current = chrome.account.as_ref();
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.topbar {
                    a.brand href=(BASE) aria-label="Corral" { img src=(LOGO) alt=""; span { "Corral" } }
                    (account_switcher(chrome))
                    div.spacer {}
                    span.who { (chrome.email) }
                    details.menu.right {
                        summary aria-label="Your profile" { (initial(&chrome.email)) }
                        div.menu-panel {
                            div.menu-label { "Signed in as" }
                            div.small.muted.menu-who { (chrome.email) }
                            a href={(BASE) "/profile"} { "Password and sessions" }
                            hr;
                            form method="post" action={(BASE) "/sign-out"} {
                                (csrf_field(&chrome.csrf))
                                button.linkish type="submit" { "Sign out" }
                            }
                            form method="post" action={(BASE) "/sign-out-everywhere"} {
                                (csrf_field(&chrome.csrf))
                                button.linkish type="submit" { "Sign out everywhere" }
                            }
                        }
                    }
                }
                div.shell {
                    aside.sidebar {
                        @if let Some(acc) = current {
                            div.section {
                                div.section-title { "Account" }
                                nav aria-label="Account" {
                                    a href=(paths::account(&acc.id)) aria-current=[current_page(chrome.nav == Nav::Overview)] { "Overview" }
                                    a href=(paths::members(&acc.id)) aria-current=[current_page(chrome.nav == Nav::Members)] { "Members" }
                                    @if acc.role == "owner" {
                                        a href=(paths::audit(&acc.id)) aria-current=[current_page(chrome.nav == Nav::Audit)] { "Audit log" }
                                    }
                                }
                            }
                            div.section {
                                div.section-title { "Projects" }
                                nav aria-label="Projects" {
                                    @for p in &chrome.projects {
                                        a href=(paths::project(&acc.id, &p.id)) aria-current=[current_page(chrome.project.as_deref() == Some(p.id.as_str()))] {
                                            (p.name)
                                            @if p.deleting { " " span.badge.danger.deleting { "deleting" } }
                                        }
                                    }
                                    @if chrome.projects.is_empty() {
                                        a href=(paths::account(&acc.id)) { "No projects yet" }
                                    }
                                }
                            }
                        } @else {
                            div.section {
                                div.section-title { "Your accounts" }
                                nav aria-label="Accounts" {
                                    @for a in &chrome.accounts { a href=(paths::account(&a.id)) { (a.name) } }
                                    a href={(BASE) "/accounts/new"} aria-current=[current_page(chrome.nav == Nav::NewOrganization)] { "New organization" }
                                }
                            }
                        }
                    }
                    main.content id="main" {
                        (chrome_flash(chrome))
                        (content)
                    }
                }
            }
        }
    }
}

fn current_page(yes: bool) -> Option<&'static str> {
    yes.then_some("page")
}

fn initial(email: &str) -> String {
    email
        .chars()
        .next()
        .map_or_else(|| "?".to_owned(), |c| c.to_uppercase().collect())
}

fn account_switcher(chrome: &Chrome) -> Markup {
    let current = chrome.account.as_ref();
    html! {
        details.menu.switcher {
            summary {
                @match current {
                    Some(a) => { span.name { (a.name) } " " span.badge.plain { (kind_label(a.personal)) } }
                    None => "Choose an account",
                }
            }
            div.menu-panel {
                div.menu-label { "Switch account" }
                @for a in &chrome.accounts {
                    a href=(paths::account(&a.id)) aria-current=[current.filter(|c| c.id == a.id).map(|_| "true")] {
                        span { (a.name) }
                        span.small.muted { (kind_label(a.personal)) " · " (a.role) }
                    }
                }
                hr;
                a href={(BASE) "/accounts/new"} { "New organization…" }
            }
        }
    }
}

fn kind_label(personal: bool) -> &'static str {
    if personal { "Personal" } else { "Organization" }
}

pub(super) fn page_head(
    crumbs: Markup,
    title: &str,
    lede: Option<&str>,
    actions: Markup,
) -> Markup {
    html! {
        div.page-head {
            div {
                div.crumbs { (crumbs) }
                h1 { (title) }
                @if let Some(l) = lede { p { (l) } }
            }
            div { (actions) }
        }
    }
}

/// A page for an error a person can act on (not found, no access, a failed request).
pub(crate) fn error_page(status: u16, title: &str, message: &str) -> Markup {
    single(
        title,
        html! {
            div.card { div.card-body {
                p.small.muted.center-note { "Error " (status) }
                h1 { (title) }
                p.lede { (message) }
                a.btn.secondary.block href=(BASE) { "Go to the console" }
            } }
        },
    )
}

pub(super) fn project_head(project: &ProjectView, tab: ProjectTab) -> Markup {
    let (acc, id) = (&project.account.id, &project.id);
    let tabs = [
        (ProjectTab::Sandboxes, paths::project(acc, id), "Sandboxes"),
        (
            ProjectTab::Snapshots,
            paths::snapshots(acc, id),
            "Snapshots",
        ),
        (ProjectTab::Keys, paths::keys(acc, id), "API keys"),
        (
            ProjectTab::Providers,
            paths::providers(acc, id),
            "Providers",
        ),
        (ProjectTab::Settings, paths::settings(acc, id), "Settings"),
    ];
    html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::account(&project.account.id)) { (project.account.name) } }
                    span { "Projects" }
                }
                h1 { (project.name) }
                p { code { (project.id) } }
            }
            @if project.deleting { div { span.badge.danger.deleting { "deleting" } } }
        }
        @if project.deleting {
            div.flash.error role="status" { "This project is being deleted: its sandboxes, keys and provider connections are being removed." }
        }
        nav.tabs aria-label="Project" {
            @for (t, href, label) in tabs {
                @if t != ProjectTab::Keys || project.account.is_admin() {
                    a href=(href) aria-current=[current_page(t == tab)] { (label) }
                }
            }
        }
    }
}

/// A snapshot's status: `ready` is good news, `creating` is on its way.
pub(super) fn snapshot_badge(status: &str) -> Markup {
    let class = match status {
        "ready" => "badge ok",
        "creating" => "badge warn",
        "failed" => "badge danger",
        _ => "badge plain",
    };
    html! { span class=(class) data-status=(status) { (status) } }
}

pub(super) fn command_badge(state: &str) -> Markup {
    let class = match state {
        "running" => "badge ok",
        "starting" => "badge warn",
        "exited" => "badge plain",
        _ => "badge danger",
    };
    html! { span class=(class) data-state=(state) { (state) } }
}

/// Read and write a file: the read form (a GET: reading changes nothing) and, for those who
/// may, the write form, filled with what was read.
pub(super) fn files_card(
    account: &str,
    project: &str,
    sandbox: &str,
    path: &str,
    content: Option<&str>,
    can_work: bool,
    csrf: &str,
) -> Markup {
    let action = paths::files(account, project, sandbox);
    html! {
        div.card #files {
            div.card-head { div { h2 { "Files" } p { "Read a text file of the sandbox, or write one (its directory must exist; up to 64 KiB here, 1 MiB through the API)." } } }
            div.card-body {
                form.inline method="get" action=(action) {
                    div.field {
                        label for="read-path" { "Path to read" }
                        input #read-path.mono type="text" name="path" required value=(path) autocomplete="off" spellcheck="false" placeholder="/tmp/notes.txt";
                    }
                    button.btn.secondary type="submit" #read-file { "Read" }
                }
                @if can_work {
                    form.stack.mt method="post" action=(action) {
                        (csrf_field(csrf))
                        div.field {
                            label for="write-path" { "Path to write" }
                            input #write-path.mono type="text" name="path" required value=(path) autocomplete="off" spellcheck="false";
                        }
                        div.field {
                            label for="write-content" { "Content" }
                            textarea #write-content.mono name="content" rows="8" spellcheck="false" { (content.unwrap_or_default()) }
                        }
                        div { button.btn type="submit" #write-file { "Write file" } }
                    }
                }
            }
        }
    }
}
