//! The registry: projects, API keys, provider profiles and sandbox records.

use std::sync::Arc;

use corral_domain::{OperationId, Provider, SandboxId, SandboxStatus, Timestamp};

use crate::db::Database;
use crate::error::{RegistryError, Result};
use crate::model::{
    ApiKeyInfo, CreateState, NewApiKey, NewSandbox, ProfileInput, ProfileWithCredential, Project,
    ProjectId, ProviderProfile, SandboxRecord, SandboxRecordPage, Verification,
};
use crate::secret::MasterKey;

/// The registry over one [`Database`], holding the master key that hashes API keys and
/// encrypts provider credentials. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Registry {
    db: Database,
    key: Arc<MasterKey>,
}

fn not_yet<T>(what: &'static str) -> Result<T> {
    Err(RegistryError::NotImplemented { what })
}

impl Registry {
    /// A registry over `db` (already connected and migrated) using `master_key`.
    pub fn new(db: Database, master_key: MasterKey) -> Self {
        Self {
            db,
            key: Arc::new(master_key),
        }
    }

    /// The underlying database (shared with the idempotency store).
    pub fn database(&self) -> &Database {
        &self.db
    }

    // --- projects ----------------------------------------------------------------------------

    /// Creates a project; the name (1–255 characters, no control characters) must be unused
    /// ([`RegistryError::Conflict`] otherwise).
    pub async fn create_project(&self, name: &str) -> Result<Project> {
        let _ = name;
        not_yet("create_project")
    }

    /// The project with this id ([`RegistryError::NotFound`] if none).
    pub async fn project(&self, id: ProjectId) -> Result<Project> {
        let _ = id;
        not_yet("project")
    }

    /// The project with this name ([`RegistryError::NotFound`] if none).
    pub async fn project_by_name(&self, name: &str) -> Result<Project> {
        let _ = name;
        not_yet("project_by_name")
    }

    /// Every project, oldest first.
    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        not_yet("list_projects")
    }

    // --- API keys ----------------------------------------------------------------------------

    /// Issues a new API key for `project`. Only the key id and an HMAC-SHA256 of the secret
    /// (under a subkey of the master key) are stored; the full key is returned once.
    pub async fn issue_api_key(&self, project: ProjectId) -> Result<NewApiKey> {
        let _ = project;
        not_yet("issue_api_key")
    }

    /// The project a presented key authenticates, or `None` when the key is malformed (shape or
    /// checksum: no database access), unknown, revoked or wrong. Digests are compared in
    /// constant time.
    pub async fn authenticate(&self, presented: &str) -> Result<Option<ProjectId>> {
        let _ = presented;
        not_yet("authenticate")
    }

    /// Revokes a key by its key id. Idempotent (the first revocation time is kept);
    /// [`RegistryError::NotFound`] when no such key exists.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<ApiKeyInfo> {
        let _ = key_id;
        not_yet("revoke_api_key")
    }

    /// A project's keys (revoked ones included), oldest first.
    pub async fn list_api_keys(&self, project: ProjectId) -> Result<Vec<ApiKeyInfo>> {
        let _ = project;
        not_yet("list_api_keys")
    }

    // --- provider profiles -------------------------------------------------------------------

    /// Stores or replaces the project's profile for `provider`. The credential is encrypted
    /// with XChaCha20-Poly1305 under a subkey of the master key, its associated data binding
    /// project id, provider and profile id. Replacing clears stored verifications (they were
    /// about the old credential).
    pub async fn put_profile(
        &self,
        project: ProjectId,
        provider: Provider,
        input: ProfileInput,
    ) -> Result<ProviderProfile> {
        let _ = (project, provider, input);
        not_yet("put_profile")
    }

    /// The project's profile for `provider` with its credential decrypted, or `None`.
    /// [`RegistryError::CredentialUndecryptable`] if the ciphertext does not authenticate.
    pub async fn profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Option<ProfileWithCredential>> {
        let _ = (project, provider);
        not_yet("profile")
    }

    /// The project's profiles (non-secret view), by provider.
    pub async fn list_profiles(&self, project: ProjectId) -> Result<Vec<ProviderProfile>> {
        let _ = project;
        not_yet("list_profiles")
    }

    /// Records the result of a deep verification, replacing the previous one for the same
    /// operation. [`RegistryError::NotFound`] when the profile does not exist.
    pub async fn record_verification(
        &self,
        project: ProjectId,
        provider: Provider,
        verification: Verification,
    ) -> Result<()> {
        let _ = (project, provider, verification);
        not_yet("record_verification")
    }

    /// Deletes the project's profile for `provider`; `false` when there was none.
    pub async fn delete_profile(&self, project: ProjectId, provider: Provider) -> Result<bool> {
        let _ = (project, provider);
        not_yet("delete_profile")
    }

    // --- sandboxes ---------------------------------------------------------------------------

    /// Records a sandbox before the provider is called: create state `pending`, status
    /// `creating`. [`RegistryError::Conflict`] when the id or operation id is taken.
    pub async fn insert_sandbox(&self, new: NewSandbox) -> Result<SandboxRecord> {
        let _ = new;
        not_yet("insert_sandbox")
    }

    /// Stores records exactly as given, in one transaction (restores, bulk loads, tests).
    pub async fn import_sandboxes(&self, records: &[SandboxRecord]) -> Result<()> {
        let _ = records;
        not_yet("import_sandboxes")
    }

    /// The sandbox `id` if it belongs to `project` (tombstones included).
    pub async fn sandbox(&self, project: ProjectId, id: SandboxId) -> Result<Option<SandboxRecord>> {
        let _ = (project, id);
        not_yet("sandbox")
    }

    /// The sandbox created by `operation` (in any project; operation ids are unique).
    pub async fn sandbox_by_operation(&self, operation: OperationId) -> Result<Option<SandboxRecord>> {
        let _ = operation;
        not_yet("sandbox_by_operation")
    }

    /// The provider confirmed the create: stores the native id (column and metadata), the
    /// status, and create state `created`. [`RegistryError::NotFound`] if absent.
    pub async fn complete_create(
        &self,
        project: ProjectId,
        id: SandboxId,
        native_id: &str,
        status: SandboxStatus,
    ) -> Result<SandboxRecord> {
        let _ = (project, id, native_id, status);
        not_yet("complete_create")
    }

    /// Moves the create state (e.g. to `failed` or `unknown`); a `failed` create also gets
    /// status `failed`. [`RegistryError::NotFound`] if absent.
    pub async fn set_create_state(
        &self,
        project: ProjectId,
        id: SandboxId,
        state: CreateState,
    ) -> Result<SandboxRecord> {
        let _ = (project, id, state);
        not_yet("set_create_state")
    }

    /// Caches a status observed at `observed_at`. Ignored for tombstones and when a newer
    /// observation is already stored. [`RegistryError::NotFound`] if absent.
    pub async fn record_status(
        &self,
        project: ProjectId,
        id: SandboxId,
        status: SandboxStatus,
        observed_at: Timestamp,
    ) -> Result<SandboxRecord> {
        let _ = (project, id, status, observed_at);
        not_yet("record_status")
    }

    /// Marks the sandbox deleted (status `deleted`, `deletedAt` now). Idempotent: a second call
    /// returns the tombstone unchanged. [`RegistryError::NotFound`] if absent.
    pub async fn tombstone(&self, project: ProjectId, id: SandboxId) -> Result<SandboxRecord> {
        let _ = (project, id);
        not_yet("tombstone")
    }

    /// One page of the project's records, newest first by (createdAt, id), tombstones included.
    /// `limit` must be 1–200 (the caller validates; out of range is
    /// [`RegistryError::InvalidInput`]); a cursor not issued here is
    /// [`RegistryError::InvalidCursor`]. Never touches a provider.
    pub async fn list_sandboxes(
        &self,
        project: ProjectId,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SandboxRecordPage> {
        let _ = (project, limit, cursor);
        not_yet("list_sandboxes")
    }

    /// Creates still `pending` or `unknown` that were recorded before `older_than`, oldest
    /// first, across projects (for the reconciler).
    pub async fn stale_creates(&self, older_than: Timestamp, limit: u32) -> Result<Vec<SandboxRecord>> {
        let _ = (older_than, limit);
        not_yet("stale_creates")
    }
}
