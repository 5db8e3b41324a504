//! Database rows and their conversion to the public records.

use diesel::prelude::*;

use corral_domain::{
    Provider, ProviderContext, SandboxId, SandboxListItem, SandboxMetadata, SandboxStatus,
    SnapshotId, SnapshotStatus,
};

use crate::db::from_micros;
use crate::error::{RegistryError, Result};
use crate::model::{
    ApiKeyInfo, CreateState, EndReason, Project, ProjectId, SandboxRecord, SnapshotRecord,
    Verification,
};
use crate::schema::{
    api_keys, profile_verifications, projects, provider_profiles, sandboxes, snapshots,
};

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored {what} cannot be read"),
    }
}

pub(crate) fn parse_project_id(s: &str) -> Result<ProjectId> {
    s.parse().map_err(|_| corrupt("project id"))
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = projects)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct ProjectRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) created_at: i64,
}

impl ProjectRow {
    pub(crate) fn into_project(self) -> Result<Project> {
        Ok(Project {
            id: parse_project_id(&self.id)?,
            name: self.name,
            created_at: from_micros(self.created_at)?,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct ApiKeyRow {
    pub(crate) key_id: String,
    pub(crate) project_id: String,
    pub(crate) secret_hash: Vec<u8>,
    pub(crate) created_at: i64,
    pub(crate) revoked_at: Option<i64>,
    pub(crate) last_used_at: Option<i64>,
    pub(crate) name: Option<String>,
    pub(crate) expires_at: Option<i64>,
}

impl ApiKeyRow {
    pub(crate) fn info(&self) -> Result<ApiKeyInfo> {
        Ok(ApiKeyInfo {
            key_id: self.key_id.clone(),
            project_id: parse_project_id(&self.project_id)?,
            created_at: from_micros(self.created_at)?,
            revoked_at: self.revoked_at.map(from_micros).transpose()?,
            last_used_at: self.last_used_at.map(from_micros).transpose()?,
            name: self.name.clone(),
            expires_at: self.expires_at.map(from_micros).transpose()?,
        })
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = provider_profiles)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct ProfileRow {
    pub(crate) id: String,
    pub(crate) project_id: String,
    pub(crate) provider: String,
    pub(crate) context: String,
    pub(crate) settings: String,
    pub(crate) credential: Option<Vec<u8>>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl ProfileRow {
    pub(crate) fn provider(&self) -> Result<Provider> {
        self.provider.parse().map_err(|_| corrupt("provider"))
    }

    pub(crate) fn context(&self) -> Result<ProviderContext> {
        serde_json::from_str(&self.context).map_err(|_| corrupt("provider context"))
    }

    pub(crate) fn settings(&self) -> Result<serde_json::Map<String, serde_json::Value>> {
        serde_json::from_str(&self.settings).map_err(|_| corrupt("profile settings"))
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = profile_verifications)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct VerificationRow {
    pub(crate) profile_id: String,
    pub(crate) operation: String,
    pub(crate) ok: bool,
    pub(crate) reason: Option<String>,
    pub(crate) remediation: Option<String>,
    pub(crate) checked_at: i64,
}

impl VerificationRow {
    pub(crate) fn into_verification(self) -> Result<Verification> {
        Ok(Verification {
            operation: self.operation,
            ok: self.ok,
            reason: self.reason,
            remediation: self.remediation,
            checked_at: from_micros(self.checked_at)?,
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sandboxes, treat_none_as_default_value = false)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct SandboxRow {
    pub(crate) id: String,
    pub(crate) project_id: String,
    pub(crate) provider: String,
    pub(crate) native_id: Option<String>,
    pub(crate) status: String,
    pub(crate) status_observed_at: i64,
    pub(crate) metadata: String,
    pub(crate) operation_id: String,
    pub(crate) create_state: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) deleted_at: Option<i64>,
    pub(crate) expires_at: Option<i64>,
    pub(crate) end_reason: Option<String>,
    pub(crate) auto_resume: bool,
    pub(crate) idle_stop_seconds: Option<i64>,
    pub(crate) snapshot_id: Option<String>,
    pub(crate) last_activity_at: i64,
}

/// The longest idle stop the registry stores, in seconds: its microseconds must fit an `i64`
/// so the idle sweep's arithmetic cannot overflow in SQL (far beyond any limit a caller sets).
const MAX_STORED_IDLE_STOP_SECONDS: u64 = (i64::MAX / 1_000_000) as u64;

/// `seconds` as stored, or [`RegistryError::InvalidInput`] past what the idle sweep can add.
pub(crate) fn idle_stop_column(seconds: Option<u64>) -> Result<Option<i64>> {
    seconds
        .map(|s| {
            if s > MAX_STORED_IDLE_STOP_SECONDS {
                return Err(RegistryError::InvalidInput {
                    message: format!(
                        "idle_stop_seconds must be at most {MAX_STORED_IDLE_STOP_SECONDS}"
                    ),
                });
            }
            // At most i64::MAX / 10^6, checked just above.
            Ok(s as i64)
        })
        .transpose()
}

impl SandboxRow {
    pub(crate) fn from_record(r: &SandboxRecord) -> Result<Self> {
        // The native id lives in its own column; the stored metadata leaves it out so the two
        // can never disagree (it is put back on read).
        let mut metadata = r.metadata.clone();
        metadata.native_provider_id = None;
        let created_at = r.created_at.timestamp_micros();
        Ok(Self {
            id: r.id.to_string(),
            project_id: r.project_id.to_string(),
            provider: r.id.provider().as_str().to_owned(),
            native_id: r
                .native_id
                .clone()
                .or(r.metadata.native_provider_id.clone()),
            status: r.status.as_str().to_owned(),
            status_observed_at: r.status_observed_at.timestamp_micros(),
            metadata: serde_json::to_string(&metadata).map_err(|e| RegistryError::Internal {
                message: format!("metadata cannot be stored: {e}"),
            })?,
            operation_id: r.metadata.operation_id.to_string(),
            create_state: r.create_state.as_str().to_owned(),
            created_at,
            updated_at: r.updated_at.timestamp_micros(),
            deleted_at: r.deleted_at.map(|t| t.timestamp_micros()),
            expires_at: r.expires_at.map(|t| t.timestamp_micros()),
            end_reason: r.end_reason.map(|e| e.as_str().to_owned()),
            auto_resume: r.auto_resume,
            idle_stop_seconds: idle_stop_column(r.idle_stop_seconds)?,
            snapshot_id: r.snapshot_id.map(|s| s.to_string()),
            last_activity_at: r.last_activity_at.timestamp_micros(),
        })
    }

    pub(crate) fn into_record(self) -> Result<SandboxRecord> {
        let mut metadata: SandboxMetadata =
            serde_json::from_str(&self.metadata).map_err(|_| corrupt("sandbox metadata"))?;
        metadata.native_provider_id.clone_from(&self.native_id);
        Ok(SandboxRecord {
            id: self
                .id
                .parse::<SandboxId>()
                .map_err(|_| corrupt("sandbox id"))?,
            project_id: parse_project_id(&self.project_id)?,
            native_id: self.native_id,
            status: SandboxStatus::parse(&self.status).ok_or_else(|| corrupt("sandbox status"))?,
            status_observed_at: from_micros(self.status_observed_at)?,
            metadata,
            create_state: CreateState::parse(&self.create_state)
                .ok_or_else(|| corrupt("create state"))?,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
            deleted_at: self.deleted_at.map(from_micros).transpose()?,
            expires_at: self.expires_at.map(from_micros).transpose()?,
            end_reason: self
                .end_reason
                .map(|e| EndReason::parse(&e).ok_or_else(|| corrupt("end reason")))
                .transpose()?,
            auto_resume: self.auto_resume,
            idle_stop_seconds: self
                .idle_stop_seconds
                .map(|s| u64::try_from(s).map_err(|_| corrupt("idle stop")))
                .transpose()?,
            snapshot_id: self
                .snapshot_id
                .map(|s| s.parse::<SnapshotId>().map_err(|_| corrupt("snapshot id")))
                .transpose()?,
            last_activity_at: from_micros(self.last_activity_at)?,
        })
    }
}

/// The columns of a sandbox that a list page shows ([`SandboxListItem`]), and no others: a
/// page decodes 100 of these, so what it does not show it does not read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = sandboxes)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct SandboxListRow {
    pub(crate) id: String,
    pub(crate) native_id: Option<String>,
    pub(crate) status: String,
    pub(crate) status_observed_at: i64,
    pub(crate) metadata: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) deleted_at: Option<i64>,
    pub(crate) auto_resume: bool,
    pub(crate) idle_stop_seconds: Option<i64>,
    pub(crate) snapshot_id: Option<String>,
}

impl SandboxListRow {
    /// The wire item, as [`SandboxRecord::to_list_item`] makes it from the whole record.
    pub(crate) fn into_item(self) -> Result<SandboxListItem> {
        let id = self
            .id
            .parse::<SandboxId>()
            .map_err(|_| corrupt("sandbox id"))?;
        let mut metadata: SandboxMetadata =
            serde_json::from_str(&self.metadata).map_err(|_| corrupt("sandbox metadata"))?;
        metadata.native_provider_id = self.native_id;
        Ok(SandboxListItem {
            id,
            provider: id.provider(),
            status: SandboxStatus::parse(&self.status).ok_or_else(|| corrupt("sandbox status"))?,
            metadata,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
            status_observed_at: from_micros(self.status_observed_at)?,
            deleted_at: self.deleted_at.map(from_micros).transpose()?,
            auto_resume: self.auto_resume,
            idle_stop_seconds: self
                .idle_stop_seconds
                .map(|s| u64::try_from(s).map_err(|_| corrupt("idle stop")))
                .transpose()?,
            snapshot_id: self
                .snapshot_id
                .map(|s| s.parse::<SnapshotId>().map_err(|_| corrupt("snapshot id")))
                .transpose()?,
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = snapshots, treat_none_as_default_value = false)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
pub(crate) struct SnapshotRow {
    pub(crate) id: String,
    pub(crate) project_id: String,
    pub(crate) sandbox_id: String,
    pub(crate) native_id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) status: String,
    pub(crate) size_bytes: Option<i64>,
    pub(crate) failure: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) deleted_at: Option<i64>,
}

impl SnapshotRow {
    pub(crate) fn into_record(self) -> Result<SnapshotRecord> {
        Ok(SnapshotRecord {
            id: self
                .id
                .parse::<SnapshotId>()
                .map_err(|_| corrupt("snapshot id"))?,
            project_id: parse_project_id(&self.project_id)?,
            sandbox_id: self
                .sandbox_id
                .parse::<SandboxId>()
                .map_err(|_| corrupt("sandbox id"))?,
            native_id: self.native_id,
            name: self.name,
            status: SnapshotStatus::parse(&self.status)
                .ok_or_else(|| corrupt("snapshot status"))?,
            size_bytes: self
                .size_bytes
                .map(|s| u64::try_from(s).map_err(|_| corrupt("snapshot size")))
                .transpose()?,
            failure: self.failure,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
            deleted_at: self.deleted_at.map(from_micros).transpose()?,
        })
    }
}

/// A size as stored: sizes past `i64::MAX` bytes (8 EiB) are kept as that.
pub(crate) fn size_column(bytes: Option<u64>) -> Option<i64> {
    bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))
}
