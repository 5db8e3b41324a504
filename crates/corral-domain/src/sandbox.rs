use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::context::CredentialSource;
use crate::id::{OperationId, SandboxId, SnapshotId};
use crate::provider::Provider;
use crate::status::SandboxStatus;

/// Provenance of a sandbox: the provider-native id, the logical operation that created it and
/// the non-secret context used. Never a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SandboxMetadata {
    /// The provider-native identifier (absent while a create's outcome is unconfirmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_provider_id: Option<String>,
    /// The logical create operation, used for reconciliation.
    pub operation_id: OperationId,
    /// Where the provider credential came from.
    pub credential_source: CredentialSource,
    /// Provider workspace used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Team identifier used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    /// Project identifier used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Bridge URL used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_url: Option<String>,
}

/// A sandbox as returned by create, get and delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Sandbox {
    /// Opaque project-scoped id.
    pub id: SandboxId,
    /// The provider hosting it.
    pub provider: Provider,
    /// Normalized lifecycle status.
    pub status: SandboxStatus,
    /// Provenance.
    pub metadata: SandboxMetadata,
    /// When `status` was observed (present on get and list).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::wire_time::option"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub status_observed_at: Option<Timestamp>,
    /// When the sandbox was deleted (tombstones only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::wire_time::option"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub deleted_at: Option<Timestamp>,
    /// Calls on the stopped sandbox resume it first (`autoResume` at create).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_resume: bool,
    /// Seconds without activity after which Corral stops it (`idleStopSeconds` at create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop_seconds: Option<u64>,
    /// The snapshot it was restored (or forked) from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<SnapshotId>,
}

/// One registry record in a list page: cached status, timestamps and deletion history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SandboxListItem {
    /// Opaque project-scoped id.
    pub id: SandboxId,
    /// The provider hosting it.
    pub provider: Provider,
    /// Last observed status.
    pub status: SandboxStatus,
    /// Provenance.
    pub metadata: SandboxMetadata,
    /// When the record was created.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When the record last changed.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
    /// When `status` was observed.
    #[serde(with = "crate::wire_time")]
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub status_observed_at: Timestamp,
    /// When the sandbox was deleted (tombstones only; `null` otherwise).
    #[serde(default, with = "crate::wire_time::option")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub deleted_at: Option<Timestamp>,
    /// Calls on the stopped sandbox resume it first (`autoResume` at create).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_resume: bool,
    /// Seconds without activity after which Corral stops it (`idleStopSeconds` at create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop_seconds: Option<u64>,
    /// The snapshot it was restored (or forked) from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<SnapshotId>,
}

/// A page of the registry, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SandboxPage {
    /// Records, newest first; tombstones included.
    pub items: Vec<SandboxListItem>,
    /// Cursor of the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}
