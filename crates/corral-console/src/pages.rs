//! The page templates: one function per page, from a view model to HTML. `maud` escapes every
//! interpolated value, so user data (names, emails, provider reasons) cannot become markup.
//! Every state-changing form posts to a console route with the hidden `csrf` field.

use corral_control::{MAX_ACCOUNT_NAME, MAX_PROJECT_NAME};
use maud::{DOCTYPE, Markup, html};

use crate::view::*;

/// Where the console lives and its static files.
pub(crate) const BASE: &str = "/console";
const CSS: &str = concat!("/console/assets/console.css?v=", env!("CARGO_PKG_VERSION"));
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

fn head(title: &str) -> Markup {
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

fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

fn flash(flash: Option<&Flash>) -> Markup {
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
fn single(title: &str, body: Markup) -> Markup {
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
fn shell(title: &str, chrome: &Chrome, content: Markup) -> Markup {
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

fn page_head(crumbs: Markup, title: &str, lede: Option<&str>, actions: Markup) -> Markup {
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

fn role_badge(role: &str) -> Markup {
    let class = match role {
        "owner" => "badge plain accent",
        "admin" => "badge plain",
        _ => "badge plain",
    };
    html! { span class=(class) { (role) } }
}

// --- signed-out pages ---------------------------------------------------------------------------

/// Sign in: an email link (primary) or a password.
pub(crate) fn sign_in(page: &SignInPage) -> Markup {
    single(
        "Sign in",
        html! {
            div.card { div.card-body {
                h1 { "Sign in to Corral" }
                p.lede { "We'll email you a link that signs you in. No password needed." }
                (flash(page.flash.as_ref()))
                form.stack method="post" action={(BASE) "/sign-in/email"} {
                    div.field {
                        label for="email" { "Work email" }
                        input #email type="email" name="email" autocomplete="email" required value=(page.email) placeholder="you@company.com";
                    }
                    button.btn.block type="submit" { "Email me a sign-in link" }
                }
                div.divider { "or use a password" }
                form.stack method="post" action={(BASE) "/sign-in/password"} {
                    div.field {
                        label for="pw-email" { "Email" }
                        input #pw-email type="email" name="email" autocomplete="username" required value=(page.email);
                    }
                    div.field {
                        label for="password" { "Password" }
                        input #password type="password" name="password" autocomplete="current-password" required;
                    }
                    button.btn.secondary.block type="submit" { "Sign in with password" }
                }
            } }
            p.foot { "Corral is invitation-only. Ask an owner of your organization for an invitation." }
        },
    )
}

/// After requesting a link.
pub(crate) fn check_email(email: &str) -> Markup {
    single(
        "Check your email",
        html! {
            div.card { div.card-body {
                h1 { "Check your email" }
                p.lede {
                    "If " strong { (email) } " has a Corral account, a sign-in link is on its way. "
                    "It works once and expires in 15 minutes."
                }
                a.btn.secondary.block href={(BASE) "/sign-in"} { "Back to sign in" }
            } }
            p.foot { "No email after a minute? Check your spam folder, or request a new link." }
        },
    )
}

/// The emailed link's landing page: one button that POSTs the token back. Following the link
/// signs nobody in (a mail scanner's prefetch or a foreign page's redirect only renders this);
/// the same-origin POST does, so a foreign site cannot sign a visitor into its own account.
pub(crate) fn confirm_sign_in(token: &str) -> Markup {
    single(
        "Confirm sign-in",
        html! {
            div.card { div.card-body {
                h1 { "Sign in to Corral" }
                p.lede { "Confirm that you want to sign in on this device." }
                form.stack method="post" action={(BASE) "/sign-in/verify"} {
                    input type="hidden" name="token" value=(token);
                    button #confirm-sign-in.btn.block type="submit" { "Sign in" }
                }
            } }
            p.foot { "Did not ask for this link? Close this page; nothing happens without the button." }
        },
    )
}

/// The current legal releases and the accept button.
pub(crate) fn legal(page: &LegalPage) -> Markup {
    let pending = page.docs.iter().filter(|d| !d.accepted).count();
    single(
        "Review the terms",
        html! {
            div.card { div.card-body {
                h1 { "Before you continue" }
                p.lede {
                    @if pending == 0 { "You have accepted every current release." }
                    @else { "Please review and accept the current terms to use Corral." }
                }
                (flash(page.flash.as_ref()))
                form.stack method="post" action={(BASE) "/legal/accept"} {
                    (csrf_field(&page.csrf))
                    @for d in &page.docs {
                        div.legal-doc {
                            div.row-between {
                                strong { (d.title) }
                                @if d.accepted { span.badge.ok { "Accepted" } }
                                @else { span.badge.plain { "Release " (d.release) } }
                            }
                            div.small.muted { "Published " (d.published) }
                            @if !d.body.is_empty() { div.body.prose { (maud::PreEscaped(crate::markdown::to_html(&d.body))) } }
                            input type="hidden" name="release" value={(d.document) ":" (d.release)};
                        }
                    }
                    @if pending > 0 {
                        button.btn.block type="submit" id="accept-terms" { "Accept and continue" }
                    } @else {
                        a.btn.block href=(BASE) { "Continue" }
                    }
                }
                p.small.muted.center-note { "Signed in as " (page.email) }
            } }
        },
    )
}

/// An invitation waiting for the signed-in user's answer (its token stays in an `HttpOnly`
/// cookie, never in the page).
pub(crate) fn invitation(email: &str, csrf: &str, offer: Option<&InvitationOffer>) -> Markup {
    single(
        "Invitation",
        html! {
            div.card { div.card-body {
                h1 { "You're invited" }
                @match offer {
                    Some(o) => p.lede #invitation-offer {
                        @match &o.inviter { Some(who) => strong { (who) }, None => "Someone" }
                        " invited you to join " strong { (o.organization) } " on Corral as "
                        (article(&o.role)) " " strong { (o.role) } ". Accept to see its projects."
                    },
                    None => p.lede {
                        "This invitation was not found for " (email) ": it may have expired, been revoked, "
                        "been used already or been sent to another address. Accepting says which."
                    },
                }
                form.stack method="post" action={(BASE) "/invitations/accept"} {
                    (csrf_field(csrf))
                    button.btn.block type="submit" id="accept-invitation" { "Accept invitation" }
                }
                p.small.muted.center-note { "Signed in as " (email) ". " a href=(BASE) { "Not now" } }
            } }
        },
    )
}

/// "an" before a role that starts with a vowel sound ("an owner", "an admin"), else "a".
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
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

// --- accounts ------------------------------------------------------------------------------------

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

/// The signed-in user's password and sessions.
pub(crate) fn profile(chrome: &Chrome, has_password: bool) -> Markup {
    let content = html! {
        (page_head(html! { span { "You" } }, "Password and sessions",
            Some("Sign in with an emailed link, or with a password you set here."), html! {}))
        div.card {
            div.card-head { div {
                h2 { @if has_password { "Change your password" } @else { "Set a password" } }
                p { "At least 12 characters. Changing it signs you out on your other devices." }
            } }
            div.card-body {
                form.stack.narrow method="post" action={(BASE) "/profile/password"} {
                    (csrf_field(&chrome.csrf))
                    input type="email" name="username" autocomplete="username" value=(chrome.email) hidden;
                    @if has_password {
                        div.field {
                            label for="current-password" { "Current password" }
                            input #current-password type="password" name="current_password" autocomplete="current-password";
                            span.hint { "Forgotten? Sign in with an emailed link, then set a new one within 10 minutes." }
                        }
                    }
                    div.field {
                        label for="new-password" { "New password" }
                        input #new-password type="password" name="password" autocomplete="new-password" required minlength="12";
                    }
                    div { button.btn type="submit" { "Save password" } }
                }
            }
        }
        div.card {
            div.card-head { div { h2 { "Sessions" } p { "Lost a device? Sign out everywhere, this browser included." } } }
            div.card-body {
                form method="post" action={(BASE) "/sign-out-everywhere"} {
                    (csrf_field(&chrome.csrf))
                    button.btn.secondary type="submit" { "Sign out everywhere" }
                }
            }
        }
    };
    shell("Password and sessions", chrome, content)
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

// --- projects ------------------------------------------------------------------------------------

fn project_head(project: &ProjectView, tab: ProjectTab) -> Markup {
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

/// A snapshot's status: `ready` is good news, `creating` is on its way.
fn snapshot_badge(status: &str) -> Markup {
    let class = match status {
        "ready" => "badge ok",
        "creating" => "badge warn",
        "failed" => "badge danger",
        _ => "badge plain",
    };
    html! { span class=(class) data-status=(status) { (status) } }
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

fn command_badge(state: &str) -> Markup {
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
fn files_card(
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

/// One command: its facts and its output, followed live by the script while it runs.
pub(crate) fn command_page(page: &CommandPageView) -> Markup {
    let p = &page.project;
    let c = &page.row;
    let sandbox_href = paths::sandbox(&p.account.id, &p.id, &page.sandbox);
    let content = html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::project(&p.account.id, &p.id)) { (p.name) } }
                    span { a href=(sandbox_href) { (page.sandbox) } }
                    span { "Commands" }
                }
                h1 { code.h1-code { (c.command) } }
            }
            div #command-state { (command_badge(&c.state)) }
        }
        @if page.can_stop {
            form.inline #command-stop method="post" action={(paths::command(&p.account.id, &p.id, &page.sandbox, &c.id)) "/signal"} {
                (csrf_field(&page.chrome.csrf))
                button.btn.secondary type="submit" name="signal" value="TERM" #stop { "Stop (TERM)" }
                button.btn.danger type="submit" name="signal" value="KILL" #kill { "Kill" }
            }
        }
        @if let Some(offset) = page.stdin_offset {
            div.card { div.card-body {
                form.stack #command-stdin method="post" action={(paths::command(&p.account.id, &p.id, &page.sandbox, &c.id)) "/stdin"} {
                    (csrf_field(&page.chrome.csrf))
                    // Where this form's text goes in the stream: sent twice (a resent form),
                    // it is written once.
                    input type="hidden" name="offset" value=(offset);
                    div.field {
                        label for="stdin-data" { "Input" }
                        textarea #stdin-data.mono name="data" rows="3" autocomplete="off" spellcheck="false" {}
                    }
                    label.check for="stdin-newline" {
                        input #stdin-newline type="checkbox" name="newline" value="1" checked;
                        span { "End with a newline" }
                    }
                    label.check for="stdin-close" {
                        input #stdin-close type="checkbox" name="close" value="1";
                        span { "Close its input after this (end of file)" }
                    }
                    div { button.btn.secondary type="submit" #send-stdin { "Send" } }
                }
            } }
        }
        div.card { div.card-body {
            dl.facts {
                dt { "Command" } dd { code { (c.id) } }
                dt { "Started" } dd { (c.started) }
                dt { "Ended" } dd #command-ended { (page.ended.as_deref().unwrap_or("—")) }
                dt { "Duration" } dd #command-duration { (c.duration) }
                dt { "Exit code" } dd #exit-code { @match c.exit_code { Some(code) => (code), None => "—" } }
            }
        } }
        div.card {
            div.card-head { div { h2 { "Output" } @if page.follow.is_some() { p #follow-hint { "Still running: reload the page to see more output." } } } }
            @if page.truncated {
                div.card-body { p.muted { "Only the beginning of the output is shown here; read the rest through the API." } }
            }
            pre #output.output tabindex="0" aria-label="Output" aria-live="polite"
                data-stream=[page.follow.as_ref().map(|f| &f.0)]
                data-after=[page.follow.as_ref().map(|f| f.1)] {
                @for chunk in &page.output {
                    @match chunk {
                        OutputChunk::Stdout(t) => (t),
                        OutputChunk::Stderr(t) => span.stderr { (t) },
                        OutputChunk::Gap(n) => span.gap {
                            "["
                            @if let Some(n) = n { (n) " bytes" } @else { "some output" }
                            " lost]\n"
                        },
                    }
                }
            }
        }
        a href=(sandbox_href) { "← The sandbox" }
    };
    shell(
        &format!("{} · {}", c.id, page.sandbox),
        &page.chrome,
        content,
    )
}

/// A file of a sandbox: what was read, and the forms to read another or write it.
pub(crate) fn file_page(page: &FilePage) -> Markup {
    let p = &page.project;
    let content = html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::project(&p.account.id, &p.id)) { (p.name) } }
                    span { a href=(paths::sandbox(&p.account.id, &p.id, &page.sandbox)) { (page.sandbox) } }
                    span { "Files" }
                }
                h1 { code.h1-code { (page.path) } }
            }
        }
        @match &page.content {
            Ok(text) => div.card {
                div.card-head { div { h2 { "Content" } } }
                pre #file-content.output tabindex="0" aria-label="File content" { (text) }
            },
            Err(why) => div #file-error.flash.error role="alert" { (why) },
        }
        (files_card(&p.account.id, &p.id, &page.sandbox, &page.path, page.content.as_ref().ok().map(String::as_str), page.can_work, &page.chrome.csrf))
        a href=(paths::sandbox(&p.account.id, &p.id, &page.sandbox)) { "← The sandbox" }
    };
    shell(
        &format!("{} · {}", page.path, page.sandbox),
        &page.chrome,
        content,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn chrome() -> Chrome {
        Chrome {
            email: "ada@example.test".to_owned(),
            csrf: "csrf-value".to_owned(),
            accounts: Vec::new(),
            account: None,
            projects: Vec::new(),
            project: None,
            nav: Nav::Overview,
            flash: Some(Flash::error("<b>bold</b>")),
        }
    }

    fn project(name: &str) -> ProjectView {
        ProjectView {
            id: "prj_1".to_owned(),
            name: name.to_owned(),
            created: "today".to_owned(),
            deleting: false,
            account: AccountView {
                id: "acc_1".to_owned(),
                name: "Acme".to_owned(),
                personal: false,
                role: "admin".to_owned(),
                version: 1,
                deleting: false,
            },
        }
    }

    #[test]
    fn user_data_is_escaped_and_every_form_carries_the_csrf_field() {
        let evil = "<img src=x onerror=alert(1)>";
        let page = project_settings(&ProjectSettingsPage {
            chrome: chrome(),
            project: project(evil),
        })
        .into_string();
        assert!(!page.contains(evil), "raw markup from user data");
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(
            page.contains("&lt;b&gt;bold&lt;/b&gt;"),
            "flash text is escaped"
        );
        let forms = page.matches("method=\"post\"").count();
        let csrf = page.matches("name=\"csrf\" value=\"csrf-value\"").count();
        // Sign out, sign out everywhere, rename, delete.
        assert_eq!((forms, csrf), (4, 4), "every POST form has the CSRF field");
        assert!(!page.contains("<script>"), "no inline script");
        assert!(
            !page.contains("style=\""),
            "no inline style (the CSP forbids it)"
        );
    }

    #[test]
    fn a_bridge_url_field_says_why_the_browser_refuses_http() {
        let page = providers(&ProvidersPage {
            chrome: chrome(),
            project: project("p"),
            cards: vec![ProviderCard {
                provider: "cloudflare".to_owned(),
                label: "Cloudflare".to_owned(),
                enabled: true,
                connected: false,
                has_credential: false,
                needs_credential: true,
                bridge: true,
                fields: vec![ContextField {
                    name: "bridgeUrl",
                    label: "Bridge URL",
                    hint: "",
                    value: String::new(),
                }],
                missing: Vec::new(),
                checks: Vec::new(),
                state: CardState::NotConnected,
                tested: None,
            }],
        })
        .into_string();
        let at = page
            .find("id=\"cloudflare-bridgeUrl\"")
            .unwrap_or_else(|| panic!("{page}"));
        let input = &page[at..at + page[at..].find('>').unwrap()];
        assert!(input.contains("pattern=\"https://.+\""), "{input}");
        assert!(
            input.contains("title=\"The bridge URL must start with https://"),
            "the words the browser shows when it refuses http://: {input}"
        );
    }

    #[test]
    fn the_new_key_appears_only_when_just_created() {
        let keys_page = |new_key: Option<&str>| {
            keys(&KeysPage {
                chrome: chrome(),
                project: project("p"),
                keys: vec![KeyRow {
                    key_id: "abc".to_owned(),
                    prefix: "crl_abc_…".to_owned(),
                    name: "ci <bot>".to_owned(),
                    created: "now".to_owned(),
                    expires: "never".to_owned(),
                    expired: false,
                    last_used: "never".to_owned(),
                    revoked: None,
                }],
                new_key: new_key.map(str::to_owned),
                latest: "abc".to_owned(),
            })
            .into_string()
        };
        let with = keys_page(Some("crl_abc_SECRETSECRET"));
        assert!(with.contains("crl_abc_SECRETSECRET") && with.contains("id=\"new-key\""));
        let without = keys_page(None);
        assert!(!without.contains("SECRETSECRET") && !without.contains("id=\"new-key\""));
        assert!(without.contains("crl_abc_…"));
        // The name is escaped; the create form has a name and an expiry choice.
        assert!(without.contains("ci &lt;bot&gt;") && !without.contains("ci <bot>"));
        assert!(without.contains("name=\"name\"") && without.contains("name=\"expires\""));
    }

    fn members_page(my_role: &str) -> String {
        let mut account = project("p").account;
        account.role = my_role.to_owned();
        let member = |id: &str, role: &str, is_me: bool| MemberRow {
            user_id: id.to_owned(),
            email: format!("{id}@example.test"),
            role: role.to_owned(),
            is_me,
            since: "today".to_owned(),
        };
        members(&MembersPage {
            chrome: chrome(),
            account,
            members: vec![
                member("usr_owner", "owner", false),
                member("usr_me", my_role, true),
                member("usr_member", "member", false),
            ],
            invitations: Vec::new(),
        })
        .into_string()
    }

    /// Issue 26, bug 7: an admin is not offered what only an owner may do to an owner.
    #[test]
    fn an_admin_is_not_offered_role_changes_or_removal_of_an_owner() {
        let page = members_page("admin");
        assert!(!page.contains("/members/usr_owner/role"), "{page}");
        assert!(!page.contains("/members/usr_owner/remove"), "{page}");
        assert!(
            !page.contains("<option value=\"owner\""),
            "an admin cannot grant ownership"
        );
        // The admin still manages members.
        assert!(page.contains("/members/usr_member/role"));
        assert!(page.contains("/members/usr_member/remove"));
        // An owner is offered both, ownership included.
        let page = members_page("owner");
        assert!(
            page.contains("/members/usr_owner/role") && page.contains("/members/usr_owner/remove")
        );
        assert!(page.contains("<option value=\"owner\""));
    }

    /// Issue 26, bug 7: a project being deleted says so in its header, the sidebar and the
    /// account's project list.
    #[test]
    fn a_project_being_deleted_is_marked_deleting() {
        let mut p = project("doomed");
        p.deleting = true;
        let mut chrome = chrome();
        chrome.account = Some(AccountLink {
            id: "acc_1".to_owned(),
            name: "Acme".to_owned(),
            personal: false,
            role: "admin".to_owned(),
        });
        chrome.projects = vec![ProjectLink {
            id: "prj_1".to_owned(),
            name: "doomed".to_owned(),
            deleting: true,
        }];
        let page = project_settings(&ProjectSettingsPage {
            chrome: chrome.clone(),
            project: p,
        })
        .into_string();
        assert_eq!(page.matches("badge danger deleting").count(), 2, "{page}");
        assert!(page.contains("This project is being deleted"), "{page}");
        let live = project_settings(&ProjectSettingsPage {
            chrome: super::super::view::Chrome {
                projects: Vec::new(),
                ..chrome
            },
            project: project("alive"),
        })
        .into_string();
        assert!(!live.contains("deleting"), "{live}");
    }

    /// Issue 26, bug 7: the invitation page names the organization, the inviter and the role.
    #[test]
    fn the_invitation_page_names_the_organization_inviter_and_role() {
        let offer = InvitationOffer {
            organization: "Acme <Robotics>".to_owned(),
            inviter: Some("grace@example.test".to_owned()),
            role: "admin".to_owned(),
        };
        let page = invitation("ada@example.test", "csrf-value", Some(&offer)).into_string();
        assert!(page.contains("grace@example.test"), "{page}");
        assert!(page.contains("Acme &lt;Robotics&gt;"), "escaped: {page}");
        assert!(page.contains("as an <strong>admin</strong>"), "{page}");
        assert!(!page.contains("Someone invited you to join their organization"));
    }

    /// Issue 26, bug 7: the terms are rendered from Markdown, and raw HTML in them is text.
    #[test]
    fn legal_terms_are_rendered_from_markdown_safely() {
        let page = legal(&LegalPage {
            email: "ada@example.test".to_owned(),
            csrf: "csrf-value".to_owned(),
            flash: None,
            docs: vec![LegalDoc {
                document: "terms".to_owned(),
                release: 1,
                title: "Terms".to_owned(),
                body: "## Use\n\nBe **kind**.\n\n<script>alert(1)</script>".to_owned(),
                published: "today".to_owned(),
                accepted: false,
            }],
        })
        .into_string();
        assert!(
            page.contains("<h2>Use</h2>") && page.contains("<strong>kind</strong>"),
            "{page}"
        );
        assert!(
            !page.contains("## Use") && !page.contains("**kind**"),
            "not raw Markdown"
        );
        assert!(!page.contains("<script>alert"), "{page}");
    }

    fn sandbox_page(status: &str, lifecycle: Lifecycle, can_work: bool) -> String {
        sandbox(&SandboxPage {
            chrome: chrome(),
            project: project("p"),
            row: SandboxRow {
                id: "sbx_local_1".to_owned(),
                provider: "local".to_owned(),
                status: status.to_owned(),
                observed: "now".to_owned(),
                created: "today".to_owned(),
                deleted: None,
                lifecycle,
            },
            facts: Vec::new(),
            notice: None,
            failed_create: None,
            can_work,
            snapshot_key: "console-snapshot-K1".to_owned(),
            fork_key: "console-fork-K2".to_owned(),
            snapshots: Ok(Some(vec![SnapshotRow {
                id: "snp_local_1".to_owned(),
                sandbox: "sbx_local_1".to_owned(),
                name: "<before upgrade>".to_owned(),
                status: "ready".to_owned(),
                size: "1.0 MiB".to_owned(),
                failure: None,
                created: "now".to_owned(),
                deleted: None,
            }])),
            commands: Ok(Vec::new()),
            events: Ok(Vec::new()),
            usage: Err("unknown".to_owned()),
            api_base: "http://x".to_owned(),
            live: None,
        })
        .into_string()
    }

    /// Issue 32: the lifecycle card offers what applies, each form with its CSRF field and
    /// the snapshot and fork forms with the key made with the page; a stopped sandbox's run
    /// form is replaced by the words and a Resume; members get no forms.
    #[test]
    fn the_lifecycle_card_offers_what_applies_with_keys_and_a_stopped_sandbox_offers_resume() {
        let all = Lifecycle {
            stop: true,
            resume: false,
            snapshot: true,
            fork: true,
        };
        let running = sandbox_page("running", all, true);
        assert!(running.contains("id=\"lifecycle\""), "{running}");
        assert!(running.contains("id=\"lifecycle-stop\"") && !running.contains("-resume\""));
        assert!(running.contains(
            "action=\"/console/accounts/acc_1/projects/prj_1/sandboxes/sbx_local_1/stop\""
        ));
        assert!(running.contains("name=\"key\" value=\"console-snapshot-K1\""));
        assert!(running.contains("name=\"key\" value=\"console-fork-K2\""));
        assert!(running.contains("id=\"fork-count\"") && running.contains("max=\"10\""));
        assert!(running.contains("id=\"run-command\""));
        // Every POST form carries the CSRF field.
        let forms = running.matches("method=\"post\"").count();
        let csrf = running
            .matches("name=\"csrf\" value=\"csrf-value\"")
            .count();
        assert_eq!(forms, csrf, "{running}");
        // The sandbox's snapshots, the name escaped.
        assert!(running.contains("data-snapshot=\"snp_local_1\""));
        assert!(running.contains("&lt;before upgrade&gt;"));

        let stopped = Lifecycle {
            stop: false,
            resume: true,
            snapshot: true,
            fork: true,
        };
        let page = sandbox_page("stopped", stopped, true);
        assert!(page.contains("id=\"lifecycle-resume\"") && !page.contains("-stop\""));
        assert!(page.contains("id=\"sandbox-stopped\"") && page.contains("id=\"commands-resume\""));
        assert!(
            !page.contains("id=\"run-command\""),
            "no run form while stopped"
        );

        let member = sandbox_page("running", all, false);
        assert!(!member.contains("id=\"lifecycle\"") && !member.contains("/stop\""));
        assert!(
            member.contains("data-snapshot=\"snp_local_1\""),
            "members read them"
        );
        // A provider that supports nothing: no card at all.
        let none = sandbox_page("running", Lifecycle::default(), true);
        assert!(!none.contains("id=\"lifecycle\""));
    }

    /// Issue 32: a fork's flash links its copies within the page's project.
    #[test]
    fn a_flash_links_the_sandboxes_it_names() {
        let mut c = chrome();
        c.account = Some(AccountLink {
            id: "acc_1".to_owned(),
            name: "Acme".to_owned(),
            personal: false,
            role: "admin".to_owned(),
        });
        c.project = Some("prj_1".to_owned());
        c.flash = Some(
            Flash::ok("Forked into 2 copies:")
                .linking(vec!["sbx_a".to_owned(), "sbx_b".to_owned()]),
        );
        let page = project_settings(&ProjectSettingsPage {
            chrome: c,
            project: project("p"),
        })
        .into_string();
        assert!(
            page.contains("href=\"/console/accounts/acc_1/projects/prj_1/sandboxes/sbx_a\""),
            "{page}"
        );
        assert!(page.contains("/sandboxes/sbx_b\""), "{page}");
    }

    /// Issue 32: the snapshots tab lists tombstones as such and offers admins a confirmed
    /// delete of the others only.
    #[test]
    fn the_snapshots_page_marks_tombstones_and_deletes_only_live_ones() {
        let row = |id: &str, deleted: Option<&str>| SnapshotRow {
            id: id.to_owned(),
            sandbox: "sbx_local_1".to_owned(),
            name: String::new(),
            status: if deleted.is_some() {
                "deleted"
            } else {
                "ready"
            }
            .to_owned(),
            size: "—".to_owned(),
            failure: None,
            created: "now".to_owned(),
            deleted: deleted.map(str::to_owned),
        };
        let render = |role: &str| {
            let mut p = project("p");
            p.account.role = role.to_owned();
            snapshots(&SnapshotsPage {
                chrome: chrome(),
                project: p,
                rows: vec![row("snp_live", None), row("snp_gone", Some("yesterday"))],
                next: Some("c/1".to_owned()),
            })
            .into_string()
        };
        let page = render("admin");
        assert!(
            page.contains("/snapshots/snp_live/delete")
                && !page.contains("/snapshots/snp_gone/delete"),
            "{page}"
        );
        assert!(page.contains("class=\"is-tombstone\"") && page.contains("deleted yesterday"));
        assert!(
            page.contains("aria-current=\"page\">Snapshots"),
            "the tab is current"
        );
        assert!(page.contains("?cursor=c%2F1"), "{page}");
        let member = render("member");
        assert!(!member.contains("/delete\""), "{member}");
    }
}
