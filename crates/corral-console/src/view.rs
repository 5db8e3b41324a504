//! View models: what each page shows, as plain data. Handlers fill them from the control-plane
//! use cases; templates (`pages.rs`) only render them. Nothing here may hold a secret except
//! [`KeysPage::new_key`], the key shown once on its creation response.

/// A flash message carried across a redirect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flash {
    /// How it is shown.
    pub(crate) kind: FlashKind,
    /// What it says (plain text, escaped when rendered).
    pub(crate) text: String,
    /// Sandboxes of the page's project it names (a fork's copies), shown as links after the
    /// text; at most [`Flash::MAX_SANDBOXES`].
    pub(crate) sandboxes: Vec<String>,
}

/// The tone of a [`Flash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlashKind {
    /// Something worked.
    Ok,
    /// Something failed.
    Error,
    /// Neutral news.
    Info,
}

impl FlashKind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            FlashKind::Ok => "ok",
            FlashKind::Error => "error",
            FlashKind::Info => "info",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(FlashKind::Ok),
            "error" => Some(FlashKind::Error),
            "info" => Some(FlashKind::Info),
            _ => None,
        }
    }
}

impl Flash {
    /// Sandboxes one flash links at most (a fork makes at most 10 copies).
    pub(crate) const MAX_SANDBOXES: usize = 10;

    pub(crate) fn ok(text: impl Into<String>) -> Self {
        Self {
            kind: FlashKind::Ok,
            text: text.into(),
            sandboxes: Vec::new(),
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Self {
        Self {
            kind: FlashKind::Error,
            text: text.into(),
            sandboxes: Vec::new(),
        }
    }

    pub(crate) fn info(text: impl Into<String>) -> Self {
        Self {
            kind: FlashKind::Info,
            text: text.into(),
            sandboxes: Vec::new(),
        }
    }

    /// The same message, linking `ids` (sandboxes of the project the next page shows).
    pub(crate) fn linking(mut self, ids: Vec<String>) -> Self {
        self.sandboxes = ids;
        self.sandboxes.truncate(Self::MAX_SANDBOXES);
        self
    }
}

/// One account in the switcher.
#[derive(Debug, Clone)]
pub(crate) struct AccountLink {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) personal: bool,
    pub(crate) role: String,
}

/// One project in the sidebar.
#[derive(Debug, Clone)]
pub(crate) struct ProjectLink {
    pub(crate) id: String,
    pub(crate) name: String,
    /// Being deleted.
    pub(crate) deleting: bool,
}

/// Which sidebar entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Members,
    Audit,
    NewOrganization,
    Project,
    Profile,
}

/// Which project tab is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProjectTab {
    Sandboxes,
    Snapshots,
    Keys,
    Providers,
    Settings,
}

/// What the header and sidebar of every signed-in page need.
#[derive(Debug, Clone)]
pub(crate) struct Chrome {
    /// The signed-in user's email.
    pub(crate) email: String,
    /// The session's CSRF token, for every form (not a secret from its own user: it is an HMAC
    /// of the session token, useless without the cookie).
    pub(crate) csrf: String,
    /// Every account the user belongs to.
    pub(crate) accounts: Vec<AccountLink>,
    /// The account being shown.
    pub(crate) account: Option<AccountLink>,
    /// That account's projects.
    pub(crate) projects: Vec<ProjectLink>,
    /// The project being shown.
    pub(crate) project: Option<String>,
    /// The current sidebar entry.
    pub(crate) nav: Nav,
    /// A message from the previous request.
    pub(crate) flash: Option<Flash>,
}

/// The sign-in page.
#[derive(Debug, Clone, Default)]
pub(crate) struct SignInPage {
    pub(crate) flash: Option<Flash>,
    /// The email typed before (kept across a failed attempt).
    pub(crate) email: String,
}

/// What an invitation offers, named for the invited user.
#[derive(Debug, Clone)]
pub(crate) struct InvitationOffer {
    /// The organization's name.
    pub(crate) organization: String,
    /// Who invited (their email), if that user still exists.
    pub(crate) inviter: Option<String>,
    /// The role on acceptance.
    pub(crate) role: String,
}

/// One legal document awaiting (or having) acceptance.
#[derive(Debug, Clone)]
pub(crate) struct LegalDoc {
    /// `terms`, `privacy`, `acceptable-use`.
    pub(crate) document: String,
    /// Its current release number.
    pub(crate) release: i64,
    /// Its title.
    pub(crate) title: String,
    /// Its text (or a summary).
    pub(crate) body: String,
    /// When the release was published, for display.
    pub(crate) published: String,
    /// Whether the user has accepted this release already.
    pub(crate) accepted: bool,
}

/// The accept-terms page.
#[derive(Debug, Clone)]
pub(crate) struct LegalPage {
    pub(crate) email: String,
    pub(crate) csrf: String,
    pub(crate) flash: Option<Flash>,
    pub(crate) docs: Vec<LegalDoc>,
}

/// An account as its pages show it.
#[derive(Debug, Clone)]
pub(crate) struct AccountView {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) personal: bool,
    /// The viewer's role in it.
    pub(crate) role: String,
    /// Its optimistic-concurrency version (sent back with renames).
    pub(crate) version: i64,
    /// When deletion started, if it did.
    pub(crate) deleting: bool,
}

impl AccountView {
    pub(crate) fn is_admin(&self) -> bool {
        self.role == "owner" || self.role == "admin"
    }

    pub(crate) fn is_owner(&self) -> bool {
        self.role == "owner"
    }
}

/// One project row.
#[derive(Debug, Clone)]
pub(crate) struct ProjectRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) created: String,
    /// Being deleted (the deletion worker is removing its contents).
    pub(crate) deleting: bool,
}

/// The account overview.
#[derive(Debug, Clone)]
pub(crate) struct OverviewPage {
    pub(crate) chrome: Chrome,
    pub(crate) account: AccountView,
    pub(crate) projects: Vec<ProjectRow>,
    pub(crate) members: usize,
}

/// One member row.
#[derive(Debug, Clone)]
pub(crate) struct MemberRow {
    pub(crate) user_id: String,
    pub(crate) email: String,
    pub(crate) role: String,
    pub(crate) is_me: bool,
    pub(crate) since: String,
}

/// One pending invitation.
#[derive(Debug, Clone)]
pub(crate) struct InvitationRow {
    pub(crate) id: String,
    pub(crate) email: String,
    pub(crate) role: String,
    pub(crate) expires: String,
}

/// Members and invitations.
#[derive(Debug, Clone)]
pub(crate) struct MembersPage {
    pub(crate) chrome: Chrome,
    pub(crate) account: AccountView,
    pub(crate) members: Vec<MemberRow>,
    pub(crate) invitations: Vec<InvitationRow>,
}

/// One audit event.
#[derive(Debug, Clone)]
pub(crate) struct AuditRow {
    pub(crate) at: String,
    pub(crate) actor: String,
    pub(crate) action: String,
    /// The target as people know it (a project's name, a member's email), else its id.
    pub(crate) target: String,
    /// Its page, where the console has one.
    pub(crate) target_href: Option<String>,
}

/// The audit log.
#[derive(Debug, Clone)]
pub(crate) struct AuditPage {
    pub(crate) chrome: Chrome,
    pub(crate) account: AccountView,
    pub(crate) events: Vec<AuditRow>,
    /// The filters applied (`None`: any) and every value seen, for their choices.
    pub(crate) actor: Option<String>,
    pub(crate) action: Option<String>,
    pub(crate) actors: Vec<String>,
    pub(crate) actions: Vec<String>,
}

/// The create-organization page.
#[derive(Debug, Clone)]
pub(crate) struct NewOrganizationPage {
    pub(crate) chrome: Chrome,
}

/// A project as its pages show it.
#[derive(Debug, Clone)]
pub(crate) struct ProjectView {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) created: String,
    /// The project itself is being deleted.
    pub(crate) deleting: bool,
    /// The owning account.
    pub(crate) account: AccountView,
}

/// The lifetimes the key creation form offers, in days (besides "never").
pub(crate) const KEY_LIFETIMES: [u32; 3] = [30, 90, 365];

/// One API key row (never the secret).
#[derive(Debug, Clone)]
pub(crate) struct KeyRow {
    pub(crate) key_id: String,
    /// The visible prefix, `crl_<keyid>_…`.
    pub(crate) prefix: String,
    /// Its name ("" without one).
    pub(crate) name: String,
    pub(crate) created: String,
    /// When it stops working ("never", or a date).
    pub(crate) expires: String,
    /// Whether it has expired (refused like an unknown key).
    pub(crate) expired: bool,
    /// When it last authenticated a request ("never", or how long ago, to within a minute).
    pub(crate) last_used: String,
    pub(crate) revoked: Option<String>,
}

/// The keys tab.
#[derive(Debug, Clone)]
pub(crate) struct KeysPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) keys: Vec<KeyRow>,
    /// The key just created: shown once, on its creation response only (`no-store`).
    pub(crate) new_key: Option<String>,
    /// The newest key's id when the page was rendered (`none` without keys): the create
    /// form sends it back, so a reload that re-posts the form creates no second key.
    pub(crate) latest: String,
}

/// One field of a provider's connect form.
#[derive(Debug, Clone)]
pub(crate) struct ContextField {
    /// The form field name.
    pub(crate) name: &'static str,
    pub(crate) label: &'static str,
    pub(crate) hint: &'static str,
    /// The stored (non-secret) value.
    pub(crate) value: String,
}

/// One verification result.
#[derive(Debug, Clone)]
pub(crate) struct CheckRow {
    pub(crate) operation: String,
    pub(crate) outcome: CheckOutcome,
    pub(crate) reason: Option<String>,
    pub(crate) remediation: Option<String>,
    pub(crate) checked: String,
}

/// What one operation's last test says about the credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// The credential can do it.
    Passed,
    /// The credential cannot do it.
    Failed,
    /// It failed for a passing reason (rate limit, outage, timeout): proves nothing.
    Inconclusive,
    /// It did not run because an earlier operation failed: proves nothing.
    NotReached,
}

impl CheckOutcome {
    /// The CSS class (and `data-outcome`) of its row.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Passed => "pass",
            CheckOutcome::Failed => "fail",
            CheckOutcome::Inconclusive => "inconclusive",
            CheckOutcome::NotReached => "not-reached",
        }
    }
}

/// A connected provider's readiness, from the last test where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CardState {
    /// The server does not run it.
    NotEnabled,
    /// No profile.
    NotConnected,
    /// `local` on a server that runs it, without a profile: it needs none to make sandboxes
    /// (a profile only adds a test of it).
    BuiltIn,
    /// The profile lacks a credential or a context field.
    Incomplete,
    /// Complete, never tested.
    NotTested,
    /// The last test: some operation failed.
    Failing,
    /// The last test: nothing failed for certain, but not everything passed.
    Inconclusive,
    /// The last test: every operation passed.
    Ready,
}

/// One provider card on the providers tab.
#[derive(Debug, Clone)]
pub(crate) struct ProviderCard {
    /// The provider id (`e2b`).
    pub(crate) provider: String,
    /// Its display name (`E2B`).
    pub(crate) label: String,
    /// Whether this server runs it (enabled in its configuration).
    pub(crate) enabled: bool,
    /// Whether the project has a profile for it.
    pub(crate) connected: bool,
    /// Whether a credential is stored (never the credential).
    pub(crate) has_credential: bool,
    /// Whether the provider needs a credential at all.
    pub(crate) needs_credential: bool,
    /// Whether it is a bridge kind (its credential is the deployed bridge's key).
    pub(crate) bridge: bool,
    /// The context fields of its form.
    pub(crate) fields: Vec<ContextField>,
    /// What is missing before it can serve; empty when ready.
    pub(crate) missing: Vec<String>,
    /// The last deep verification, one row per operation.
    pub(crate) checks: Vec<CheckRow>,
    /// Its readiness (from the last test, when there is one).
    pub(crate) state: CardState,
    /// When the last test ran: ("3 min ago", "2026-11-27 04:50 UTC").
    pub(crate) tested: Option<(String, String)>,
}

/// The providers tab.
#[derive(Debug, Clone)]
pub(crate) struct ProvidersPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) cards: Vec<ProviderCard>,
}

/// One sandbox in the list.
#[derive(Debug, Clone)]
pub(crate) struct SandboxRow {
    pub(crate) id: String,
    pub(crate) provider: String,
    pub(crate) status: String,
    /// How old the status is, for humans ("12 s ago").
    pub(crate) observed: String,
    pub(crate) created: String,
    /// When it was deleted (tombstones).
    pub(crate) deleted: Option<String>,
    /// The lifecycle actions its provider and status allow (none for a tombstone); offered
    /// only to those who may change it.
    pub(crate) lifecycle: Lifecycle,
}

/// What a provider can do to its sandboxes (its capabilities' lifecycle flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LifecycleSupport {
    /// `supportsExplicitStop`: stop and resume.
    pub(crate) stop: bool,
    /// `supportsSnapshots`.
    pub(crate) snapshots: bool,
    /// `supportsSnapshots` and `supportsRestore`.
    pub(crate) fork: bool,
}

/// The lifecycle actions a sandbox's page (or its row) offers: only what its provider
/// supports and its status allows, so no button leads to a refusal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    pub(crate) stop: bool,
    pub(crate) resume: bool,
    pub(crate) snapshot: bool,
    pub(crate) fork: bool,
}

impl Lifecycle {
    /// What applies to a sandbox with `status` on a provider that supports `can`. A stop is
    /// offered while it runs (or is starting, or asleep), a resume once it is stopped; a
    /// snapshot or a fork of a sandbox that exists and is settled. Nothing while it is being
    /// created or stopped, nor once it failed, expired or was deleted (tombstones).
    pub(crate) fn offer(
        status: corral_domain::SandboxStatus,
        deleted: bool,
        can: LifecycleSupport,
    ) -> Self {
        use corral_domain::SandboxStatus as S;
        if deleted {
            return Self::default();
        }
        let settled = matches!(status, S::Running | S::Paused | S::Stopped);
        Self {
            stop: can.stop && matches!(status, S::Running | S::Starting | S::Paused),
            resume: can.stop && status == S::Stopped,
            snapshot: can.snapshots && settled,
            fork: can.fork && settled,
        }
    }

    /// Whether anything is offered.
    pub(crate) fn any(self) -> bool {
        self.stop || self.resume || self.snapshot || self.fork
    }
}

/// One snapshot, as the snapshots page and a sandbox's page list it.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotRow {
    pub(crate) id: String,
    /// The sandbox it was taken of (its id names the provider, as the snapshot's does).
    pub(crate) sandbox: String,
    /// Its name ("" without one).
    pub(crate) name: String,
    /// `creating`, `ready`, `failed` or `deleted`.
    pub(crate) status: String,
    /// Its size for people ("12.5 MiB"), "—" where the provider does not say.
    pub(crate) size: String,
    /// Why it failed (`failed` only).
    pub(crate) failure: Option<String>,
    pub(crate) created: String,
    /// When it was deleted (tombstones).
    pub(crate) deleted: Option<String>,
}

/// A size in bytes for people: "512 B", "12.5 MiB".
pub(crate) fn size(bytes: Option<u64>) -> String {
    let Some(b) = bytes else {
        return "—".to_owned();
    };
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = b as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The snapshots tab.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotsPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) rows: Vec<SnapshotRow>,
    /// The cursor of the next page, if any.
    pub(crate) next: Option<String>,
}

/// The sandboxes tab.
#[derive(Debug, Clone)]
pub(crate) struct SandboxesPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) rows: Vec<SandboxRow>,
    /// The cursor of the next page, if any.
    pub(crate) next: Option<String>,
    /// The filters applied.
    pub(crate) filter: SandboxFilter,
    /// Every status and provider, for the filter's choices.
    pub(crate) statuses: Vec<&'static str>,
    pub(crate) providers: Vec<&'static str>,
    /// This server's public URL, for the example requests.
    pub(crate) api_base: String,
    /// The project at a glance (first unfiltered page only).
    pub(crate) overview: Option<ProjectOverview>,
}

/// A project at a glance: per provider, its live and failed sandboxes and its last seven
/// days' running time and estimated cost.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProjectOverview {
    pub(crate) rows: Vec<ProviderGlance>,
    /// Set when the registry had more records than were counted.
    pub(crate) partial: bool,
    /// Why the usage is missing, if it is.
    pub(crate) usage_note: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ProviderGlance {
    pub(crate) provider: String,
    pub(crate) live: u64,
    pub(crate) failed: u64,
    pub(crate) running: String,
    pub(crate) cost: String,
}

/// The sandbox list's filters (each `None`: any).
#[derive(Debug, Clone, Default)]
pub(crate) struct SandboxFilter {
    /// A status, or `deleted` for the tombstones.
    pub(crate) status: Option<String>,
    pub(crate) provider: Option<String>,
    /// A piece of the id, lower case.
    pub(crate) q: Option<String>,
}

impl SandboxFilter {
    /// Whether a registry record passes every filter.
    pub(crate) fn matches(&self, s: &corral_domain::SandboxListItem) -> bool {
        let status = match self.status.as_deref() {
            None => true,
            Some("deleted") => s.deleted_at.is_some(),
            Some(st) => s.deleted_at.is_none() && s.status.as_str() == st,
        };
        status
            && self
                .provider
                .as_deref()
                .is_none_or(|p| s.provider.as_str() == p)
            && self
                .q
                .as_deref()
                .is_none_or(|q| s.id.to_string().contains(q))
    }

    /// Whether any filter is set.
    pub(crate) fn any(&self) -> bool {
        self.status.is_some() || self.provider.is_some() || self.q.is_some()
    }

    /// The query string of the page after `cursor` with the same filters.
    pub(crate) fn next_query(&self, cursor: &str) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("status", &self.status),
            ("provider", &self.provider),
            ("q", &self.q),
        ] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        q.append_pair("cursor", cursor);
        q.finish()
    }
}

/// One sandbox's page.
#[derive(Debug, Clone)]
pub(crate) struct SandboxPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) row: SandboxRow,
    /// Every other fact, as label and value (provenance, native id, create state …).
    pub(crate) facts: Vec<(String, String)>,
    /// Why the status is the registry's and not the provider's (it could not be asked).
    pub(crate) notice: Option<String>,
    /// Set when the provider refused the create: what that means.
    pub(crate) failed_create: Option<String>,
    /// Whether the user may change the sandbox here (admin, not deleted, project not
    /// deleting): the run-a-command and write-a-file forms.
    pub(crate) can_work: bool,
    /// The lifecycle card's idempotency keys, made when the page was rendered: a resent
    /// form carries the same key, so it takes one snapshot and makes one fork.
    pub(crate) snapshot_key: String,
    pub(crate) fork_key: String,
    /// The sandbox's own snapshots, newest first (at most a few), or why they could not be
    /// read; `Ok(None)` when its provider takes none.
    pub(crate) snapshots: Result<Option<Vec<SnapshotRow>>, String>,
    /// The newest commands, or why they could not be read.
    pub(crate) commands: Result<Vec<CommandRow>, String>,
    /// The newest lifecycle events, newest first, or why they could not be read.
    pub(crate) events: Result<Vec<EventRow>, String>,
    /// The estimated usage so far, or why it is not known.
    pub(crate) usage: Result<UsageView, String>,
    /// This server's public URL, for the example requests.
    pub(crate) api_base: String,
    /// Set unless it is a tombstone: the console route streaming its lifecycle events and
    /// the id to follow them after (the script keeps the status live with them).
    pub(crate) live: Option<(String, u64)>,
}

/// One command in a sandbox's history.
#[derive(Debug, Clone)]
pub(crate) struct CommandRow {
    pub(crate) id: String,
    pub(crate) command: String,
    pub(crate) state: String,
    /// Exit code, once known.
    pub(crate) exit_code: Option<i32>,
    pub(crate) started: String,
    /// "2.4 s", or "running" while it runs.
    pub(crate) duration: String,
    pub(crate) href: String,
}

/// One lifecycle event.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    pub(crate) when: String,
    pub(crate) kind: String,
    /// The event's facts in words ("running → stopped (observed)").
    pub(crate) detail: String,
    /// The command page, for `command.*` events.
    pub(crate) command_href: Option<String>,
}

/// A sandbox's estimated usage so far.
#[derive(Debug, Clone)]
pub(crate) struct UsageView {
    /// "1 h 2 min".
    pub(crate) running: String,
    /// "0.0504 USD" per currency; empty when no rate is known.
    pub(crate) cost: Vec<String>,
    /// How the figures were made.
    pub(crate) basis: String,
}

/// One command's page: its facts and its output so far.
#[derive(Debug, Clone)]
pub(crate) struct CommandPageView {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) sandbox: String,
    pub(crate) row: CommandRow,
    pub(crate) ended: Option<String>,
    /// The output so far, chunk by chunk.
    pub(crate) output: Vec<OutputChunk>,
    /// Set while the command runs: the console route streaming its output and the sequence
    /// number to resume after (the script follows it; without the script, reload).
    pub(crate) follow: Option<(String, u64)>,
    /// Set when more output was kept than one page shows.
    pub(crate) truncated: bool,
    /// Whether to offer stopping it (running, and the user is an admin).
    pub(crate) can_stop: bool,
    /// Set when input can be sent (it can be stopped and its stdin is open): the stdin offset
    /// the form's text starts at.
    pub(crate) stdin_offset: Option<u64>,
}

/// A piece of a command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutputChunk {
    Stdout(String),
    Stderr(String),
    /// Bytes that are lost (`None`: how many is unknown).
    Gap(Option<u64>),
}

/// The file page: a read file's content (or why not), and the write form.
#[derive(Debug, Clone)]
pub(crate) struct FilePage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
    pub(crate) sandbox: String,
    pub(crate) path: String,
    /// The content read, or why it could not be.
    pub(crate) content: Result<String, String>,
    pub(crate) can_work: bool,
}

/// The project settings tab.
#[derive(Debug, Clone)]
pub(crate) struct ProjectSettingsPage {
    pub(crate) chrome: Chrome,
    pub(crate) project: ProjectView,
}

#[cfg(test)]
mod tests {
    use corral_domain::SandboxStatus as S;

    use super::{Lifecycle, LifecycleSupport, SandboxFilter, size};

    const ALL: LifecycleSupport = LifecycleSupport {
        stop: true,
        snapshots: true,
        fork: true,
    };

    #[test]
    fn stop_or_resume_is_offered_by_status_and_only_what_the_provider_supports() {
        let running = Lifecycle::offer(S::Running, false, ALL);
        assert_eq!(
            running,
            Lifecycle {
                stop: true,
                resume: false,
                snapshot: true,
                fork: true
            }
        );
        let stopped = Lifecycle::offer(S::Stopped, false, ALL);
        assert!(stopped.resume && !stopped.stop && stopped.snapshot && stopped.fork);
        // On their way: nothing to start twice.
        for busy in [S::Creating, S::Stopping] {
            assert!(!Lifecycle::offer(busy, false, ALL).any(), "{busy}");
        }
        assert!(Lifecycle::offer(S::Starting, false, ALL).stop);
        // Gone or broken: nothing at all.
        for gone in [S::Failed, S::Expired, S::Deleted] {
            assert!(!Lifecycle::offer(gone, false, ALL).any(), "{gone}");
        }
        assert!(
            !Lifecycle::offer(S::Running, true, ALL).any(),
            "a tombstone"
        );
        // A provider without stop offers no stop or resume; one without restore, no fork.
        let snap_only = LifecycleSupport {
            stop: false,
            snapshots: true,
            fork: false,
        };
        let r = Lifecycle::offer(S::Running, false, snap_only);
        assert!(!r.stop && !r.resume && r.snapshot && !r.fork);
        assert!(!Lifecycle::offer(S::Stopped, false, snap_only).resume);
        assert!(!Lifecycle::offer(S::Running, false, LifecycleSupport::default()).any());
    }

    #[test]
    fn sizes_are_said_in_binary_units() {
        assert_eq!(size(None), "—");
        assert_eq!(size(Some(512)), "512 B");
        assert_eq!(size(Some(1536)), "1.5 KiB");
        assert_eq!(size(Some(32 << 20)), "32.0 MiB");
        assert_eq!(size(Some(3 << 40)), "3.0 TiB");
    }

    #[test]
    fn the_next_page_keeps_the_filters_encoded() {
        let f = SandboxFilter {
            status: Some("deleted".to_owned()),
            provider: None,
            q: Some("a b&c".to_owned()),
        };
        assert!(f.any());
        assert_eq!(
            f.next_query("c/1=="),
            "status=deleted&q=a+b%26c&cursor=c%2F1%3D%3D"
        );
        assert!(!SandboxFilter::default().any());
        assert_eq!(SandboxFilter::default().next_query("x"), "cursor=x");
    }
}
