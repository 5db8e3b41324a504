//! The registry's records.

use std::fmt;
use std::str::FromStr;

use corral_domain::{
    OperationId, ParseIdError, Provider, ProviderContext, Sandbox, SandboxId, SandboxListItem,
    SandboxMetadata, SandboxStatus, Snapshot, SnapshotId, SnapshotPage, SnapshotStatus, Timestamp,
};
use secrecy::SecretString;
use ulid::Ulid;

/// A project's id: `prj_<ulid>` (lowercase Crockford base32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectId(Ulid);

impl ProjectId {
    /// A fresh id.
    pub fn new() -> Self {
        Self(Ulid::generate())
    }

    /// The random payload.
    pub const fn ulid(&self) -> Ulid {
        self.0
    }
}

impl Default for ProjectId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for ProjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prj_{}", self.0.to_string().to_ascii_lowercase())
    }
}

impl FromStr for ProjectId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let payload = s.strip_prefix("prj_").ok_or(ParseIdError::Prefix)?;
        let canonical = payload.len() == 26
            && payload
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
        if !canonical {
            return Err(ParseIdError::Payload);
        }
        let ulid = Ulid::from_string(payload).map_err(|_| ParseIdError::Payload)?;
        // Only the canonical spelling parses (no aliases such as `i` for `1`).
        if ulid.to_string().to_ascii_lowercase() != payload {
            return Err(ParseIdError::Payload);
        }
        Ok(Self(ulid))
    }
}

/// A project: the unit that owns API keys, provider profiles and sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// Its id.
    pub id: ProjectId,
    /// Its unique name.
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A stored API key, as far as the registry knows it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// The key's public id (the part between `crl_` and the next `_`).
    pub key_id: String,
    /// The project it authenticates.
    pub project_id: ProjectId,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// When it last authenticated a request, to within a minute
    /// ([`LAST_USE_PRECISION`](crate::LAST_USE_PRECISION)); `None` if never.
    pub last_used_at: Option<Timestamp>,
    /// Its name, if it was given one (the registry stores it as given; callers validate).
    pub name: Option<String>,
    /// When it stops authenticating, if ever.
    pub expires_at: Option<Timestamp>,
}

impl ApiKeyInfo {
    /// Whether the key no longer authenticates because its expiry is at or before `now`.
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// What a new API key is issued with besides its project.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiKeyOptions {
    /// A name to show in lists (validated by the caller).
    pub name: Option<String>,
    /// When the key stops authenticating; `None` for never.
    pub expires_at: Option<Timestamp>,
}

/// A freshly issued API key: the only time the full key exists outside the caller's hands.
#[derive(Debug)]
pub struct NewApiKey {
    /// What is stored.
    pub info: ApiKeyInfo,
    /// The full key, `crl_<keyid>_<secret><checksum>`; show it once, it cannot be recovered.
    pub key: SecretString,
}

/// The last deep verification of one provider operation with a profile's credential.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// The operation checked, e.g. `"create"` or `"exec"`.
    pub operation: String,
    /// Whether the credential can perform it.
    pub ok: bool,
    /// Why not (when `ok` is false), in the provider's terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the customer can do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// When the check ran.
    pub checked_at: Timestamp,
}

/// What to store for a project's provider profile.
#[derive(Debug, Clone, Default)]
pub struct ProfileInput {
    /// Non-secret routing context.
    pub context: ProviderContext,
    /// Free-form non-secret settings (e.g. Fly's `app`). Never put a secret here.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// The provider credential (encrypted at rest); `None` for providers that need none.
    pub credential: Option<SecretString>,
}

/// A stored provider profile (non-secret view).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderProfile {
    /// The owning project.
    pub project_id: ProjectId,
    /// The provider.
    pub provider: Provider,
    /// Non-secret routing context.
    pub context: ProviderContext,
    /// Free-form non-secret settings.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Whether a credential is stored.
    pub has_credential: bool,
    /// The last verification per operation, sorted by operation.
    pub verifications: Vec<Verification>,
    /// When the profile was first stored.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A provider profile with its decrypted credential.
#[derive(Debug, Clone)]
pub struct ProfileWithCredential {
    /// The non-secret part.
    pub profile: ProviderProfile,
    /// The decrypted credential, if one is stored.
    pub credential: Option<SecretString>,
}

/// Where a sandbox's create stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateState {
    /// Recorded before the provider call; no answer yet.
    Pending,
    /// The provider confirmed it (native id known).
    Created,
    /// The provider definitively refused it (nothing exists there).
    Failed,
    /// The provider call may have been applied but no answer was confirmed: reconcile by
    /// operation id.
    Unknown,
}

impl CreateState {
    /// The stored value.
    pub const fn as_str(self) -> &'static str {
        match self {
            CreateState::Pending => "pending",
            CreateState::Created => "created",
            CreateState::Failed => "failed",
            CreateState::Unknown => "unknown",
        }
    }

    /// Parses a stored value.
    pub fn parse(s: &str) -> Option<Self> {
        [
            CreateState::Pending,
            CreateState::Created,
            CreateState::Failed,
            CreateState::Unknown,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// A new sandbox record, inserted before the provider is called.
#[derive(Debug, Clone)]
pub struct NewSandbox {
    /// The id given to the client (its provider is the record's provider).
    pub id: SandboxId,
    /// The owning project.
    pub project_id: ProjectId,
    /// Provenance (its `operation_id` must be unique; `native_provider_id` usually `None`).
    pub metadata: SandboxMetadata,
}

/// What a sandbox is created with for its lifecycle (stop, resume, restore); the default is
/// none of it: no auto-resume, no idle stop, not restored from a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxLifecycle {
    /// Whether a request to the sandbox while it is stopped resumes it.
    pub auto_resume: bool,
    /// Stop it after this many seconds without activity (`None`: never).
    pub idle_stop_seconds: Option<u64>,
    /// The snapshot it was restored from, if any.
    pub snapshot_id: Option<SnapshotId>,
}

/// One sandbox record (tombstones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRecord {
    /// The public id.
    pub id: SandboxId,
    /// The owning project.
    pub project_id: ProjectId,
    /// The provider-native id, once known.
    pub native_id: Option<String>,
    /// Last observed status.
    pub status: SandboxStatus,
    /// When `status` was observed.
    pub status_observed_at: Timestamp,
    /// Provenance (kept in step with `native_id`).
    pub metadata: SandboxMetadata,
    /// Where the create stands.
    pub create_state: CreateState,
    /// When the record was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When it was deleted (tombstones only).
    pub deleted_at: Option<Timestamp>,
    /// When the lifetime asked for at create ends (`None`: none was asked, or unknown).
    pub expires_at: Option<Timestamp>,
    /// Why a tombstone ended (`None` on live records and on tombstones made before this was
    /// recorded).
    pub end_reason: Option<EndReason>,
    /// Whether a request to the sandbox while it is stopped resumes it.
    pub auto_resume: bool,
    /// Stop it after this many seconds without activity (`None`: never).
    pub idle_stop_seconds: Option<u64>,
    /// The snapshot it was restored from, if any.
    pub snapshot_id: Option<SnapshotId>,
    /// Its last known activity ([`Registry::touch_activity`](crate::Registry::touch_activity),
    /// a resume); starts at `created_at` and never moves back.
    pub last_activity_at: Timestamp,
}

/// Why a sandbox's record became a tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// Deleted through Corral.
    Deleted,
    /// The orphan reaper found it gone at the provider before its lifetime ended, with no
    /// delete here to explain it.
    Vanished,
}

impl EndReason {
    /// The stored value.
    pub const fn as_str(self) -> &'static str {
        match self {
            EndReason::Deleted => "deleted",
            EndReason::Vanished => "vanished",
        }
    }

    /// Parses a stored value.
    pub fn parse(s: &str) -> Option<Self> {
        [EndReason::Deleted, EndReason::Vanished]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl SandboxRecord {
    /// The provider hosting it.
    pub fn provider(&self) -> Provider {
        self.id.provider()
    }

    /// What it was created with for its lifecycle.
    pub fn lifecycle(&self) -> SandboxLifecycle {
        SandboxLifecycle {
            auto_resume: self.auto_resume,
            idle_stop_seconds: self.idle_stop_seconds,
            snapshot_id: self.snapshot_id,
        }
    }

    /// The logical create operation.
    pub fn operation_id(&self) -> OperationId {
        self.metadata.operation_id
    }

    /// The list-page view.
    pub fn to_list_item(&self) -> SandboxListItem {
        SandboxListItem {
            id: self.id,
            provider: self.provider(),
            status: self.status,
            metadata: self.metadata.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            status_observed_at: self.status_observed_at,
            deleted_at: self.deleted_at,
            auto_resume: self.auto_resume,
            idle_stop_seconds: self.idle_stop_seconds,
            snapshot_id: self.snapshot_id,
        }
    }

    /// The create/get/delete view.
    pub fn to_sandbox(&self) -> Sandbox {
        Sandbox {
            id: self.id,
            provider: self.provider(),
            status: self.status,
            metadata: self.metadata.clone(),
            status_observed_at: Some(self.status_observed_at),
            deleted_at: self.deleted_at,
            auto_resume: self.auto_resume,
            idle_stop_seconds: self.idle_stop_seconds,
            snapshot_id: self.snapshot_id,
        }
    }
}

impl From<SandboxRecord> for SandboxListItem {
    fn from(r: SandboxRecord) -> Self {
        r.to_list_item()
    }
}

/// One page of sandbox records, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRecordPage {
    /// The records (tombstones included).
    pub items: Vec<SandboxRecord>,
    /// The cursor of the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

impl SandboxRecordPage {
    /// The wire page.
    pub fn into_page(self) -> corral_domain::SandboxPage {
        corral_domain::SandboxPage {
            items: self.items.into_iter().map(SandboxListItem::from).collect(),
            next_cursor: self.next_cursor,
        }
    }
}

/// A new snapshot record, inserted (status `creating`) before the provider is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSnapshot {
    /// The id given to the client (its provider is the sandbox's).
    pub id: SnapshotId,
    /// The owning project.
    pub project_id: ProjectId,
    /// The sandbox it is taken of (a record of the same project).
    pub sandbox_id: SandboxId,
    /// The name given by the client, if any (the caller validates it).
    pub name: Option<String>,
}

/// One snapshot record (tombstones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The public id.
    pub id: SnapshotId,
    /// The owning project.
    pub project_id: ProjectId,
    /// The sandbox it was taken of.
    pub sandbox_id: SandboxId,
    /// The provider's own id, once the provider answered.
    pub native_id: Option<String>,
    /// The name given at creation, if any.
    pub name: Option<String>,
    /// Where it is in its life.
    pub status: SnapshotStatus,
    /// Its size in bytes, where the provider reports it.
    pub size_bytes: Option<u64>,
    /// Why it failed (`failed` only).
    pub failure: Option<String>,
    /// When it was asked for.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When it was deleted (tombstones only).
    pub deleted_at: Option<Timestamp>,
}

impl SnapshotRecord {
    /// The provider holding it.
    pub fn provider(&self) -> Provider {
        self.id.provider()
    }

    /// The wire view.
    pub fn to_snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.id,
            sandbox_id: self.sandbox_id,
            provider: self.provider(),
            name: self.name.clone(),
            status: self.status,
            size_bytes: self.size_bytes,
            failure: self.failure.clone(),
            created_at: self.created_at,
            deleted_at: self.deleted_at,
        }
    }
}

/// One page of snapshot records, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecordPage {
    /// The records (tombstones included).
    pub items: Vec<SnapshotRecord>,
    /// The cursor of the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

impl SnapshotRecordPage {
    /// The wire page.
    pub fn into_page(self) -> SnapshotPage {
        SnapshotPage {
            items: self.items.iter().map(SnapshotRecord::to_snapshot).collect(),
            next_cursor: self.next_cursor,
        }
    }
}
