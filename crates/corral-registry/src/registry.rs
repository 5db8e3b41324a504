//! The registry: projects, API keys, provider profiles and sandbox records.

use std::sync::Arc;
use std::time::Duration;

use corral_domain::limits::MAX_PAGE_LIMIT;
use corral_domain::{
    EventType, OperationId, Provider, SandboxId, SandboxPage, SandboxStatus, Timestamp,
    event_reason,
};
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;
use secrecy::ExposeSecret as _;
use subtle::ConstantTimeEq as _;
use ulid::Ulid;

use crate::cache::{DEFAULT_CACHE_TTL, TtlCache, VerifiedKey};
use crate::db::{Database, PooledConnection, run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::events::{NewEventRow, append_event};
use crate::model::{
    ApiKeyInfo, ApiKeyOptions, CreateState, EndReason, NewApiKey, NewSandbox, ProfileInput,
    ProfileWithCredential, Project, ProjectId, ProviderProfile, SandboxLifecycle, SandboxRecord,
    SandboxRecordPage, Verification,
};
use crate::rows::{ApiKeyRow, ProfileRow, ProjectRow, SandboxListRow, SandboxRow, VerificationRow};
use crate::schema::{api_keys, profile_verifications, projects, provider_profiles, sandboxes};
use crate::secret::{MasterKey, generate_api_key, parse_api_key};

/// The registry over one [`Database`], holding the master key that hashes API keys and
/// encrypts provider credentials, and a short-lived cache of verified API keys (see
/// [`Registry::authenticate`]). Cheap to clone; clones share the cache.
#[derive(Debug, Clone)]
pub struct Registry {
    pub(crate) db: Database,
    pub(crate) key: Arc<MasterKey>,
    keys: Arc<TtlCache<String, VerifiedKey>>,
    profiles: Arc<TtlCache<(ProjectId, Provider), Option<ProfileWithCredential>>>,
    /// The last use this process knows of per key id (read from the row on a cache miss, or
    /// written by it), so that uses served from the key cache are recorded too.
    last_use: Arc<std::sync::Mutex<std::collections::HashMap<String, i64>>>,
}

/// The associated data that binds a stored credential to its row.
fn credential_aad(project: ProjectId, provider: Provider, profile_id: &str) -> Vec<u8> {
    format!("corral/profile-credential/v1\0{project}\0{provider}\0{profile_id}").into_bytes()
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(RegistryError::InvalidInput {
            message: "a project name is 1–255 characters without control characters".to_owned(),
        });
    }
    Ok(())
}

fn json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| RegistryError::Internal {
        message: format!("cannot serialize: {e}"),
    })
}

/// Cursor format: `<createdAt micros>_<id>`, the keyset position of the last record of the
/// page (sandboxes here, snapshots in `snapshots.rs`). Opaque to clients, but of a documented
/// form ([`cursor_pattern`]) so that every string of that form is accepted and every other
/// refused.
pub(crate) fn encode_cursor(created_at: i64, id: &str) -> String {
    format!("{created_at}_{id}")
}

/// Splits a cursor into its `createdAt` microseconds and its id text (not yet parsed);
/// [`RegistryError::InvalidCursor`] unless the first part is 1–18 digits.
pub(crate) fn split_cursor(cursor: &str) -> Result<(i64, &str)> {
    let (created, id) = cursor.split_once('_').ok_or(RegistryError::InvalidCursor)?;
    if created.is_empty() || created.len() > 18 || !created.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RegistryError::InvalidCursor);
    }
    let created_at_micros: i64 = created.parse().map_err(|_| RegistryError::InvalidCursor)?;
    Ok((created_at_micros, id))
}

/// The position a sandbox listing's `nextCursor` names: the keyset of the last record of the
/// page. [`ListCursor::parse`] accepts exactly the strings [`cursor_pattern`] matches; its
/// `Display` is the cursor text (for `created_at_micros` in `0..10^18`, all a clock gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    /// The record's `createdAt`, in microseconds since the Unix epoch.
    pub created_at_micros: i64,
    /// The record's id.
    pub id: SandboxId,
}

impl ListCursor {
    /// Parses a client's cursor; any other form is [`RegistryError::InvalidCursor`].
    pub fn parse(cursor: &str) -> Result<Self> {
        let (created_at_micros, id) = split_cursor(cursor)?;
        let id: SandboxId = id.parse().map_err(|_| RegistryError::InvalidCursor)?;
        Ok(Self {
            created_at_micros,
            id,
        })
    }
}

impl std::fmt::Display for ListCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&encode_cursor(self.created_at_micros, &self.id.to_string()))
    }
}

/// A regular expression matching exactly the cursors [`Registry::list_sandboxes`] accepts.
pub fn cursor_pattern() -> String {
    let id = corral_domain::sandbox_id_pattern();
    format!("^[0-9]{{1,18}}_{}", id.trim_start_matches('^'))
}

const SANDBOX: &str = "sandbox";

/// How stale an API key's recorded last use may get before an authentication updates it.
pub const LAST_USE_PRECISION: Duration = Duration::from_secs(60);

impl Registry {
    /// A registry over `db` (already connected and migrated) using `master_key`, trusting a
    /// verified API key or a loaded provider profile for
    /// [`DEFAULT_CACHE_TTL`](crate::DEFAULT_CACHE_TTL).
    pub fn new(db: Database, master_key: MasterKey) -> Self {
        Self::with_cache_ttl(db, master_key, DEFAULT_CACHE_TTL)
    }

    /// [`Registry::new`] trusting a verified API key or a loaded provider profile for `ttl`
    /// before asking the database again: the longest a key revoked, or a profile changed, by
    /// another process keeps its old meaning here. Zero disables the caches (every request
    /// reads the rows).
    pub fn with_cache_ttl(db: Database, master_key: MasterKey, ttl: Duration) -> Self {
        Self {
            db,
            key: Arc::new(master_key),
            keys: Arc::new(TtlCache::new(ttl)),
            profiles: Arc::new(TtlCache::new(ttl)),
            last_use: Arc::default(),
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
        validate_name(name)?;
        let row = ProjectRow {
            id: ProjectId::new().to_string(),
            name: name.to_owned(),
            created_at: to_micros(self.db.now()),
        };
        let project = ProjectRow {
            id: row.id.clone(),
            name: row.name.clone(),
            created_at: row.created_at,
        }
        .into_project()?;
        run!(self, |c| {
            diesel::insert_into(projects::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "project name",
                    },
                    other => other,
                })
        })?;
        Ok(project)
    }

    /// Renames a project; the new name follows [`Registry::create_project`]'s rules and must
    /// be unused ([`RegistryError::Conflict`]); [`RegistryError::NotFound`] when there is no
    /// such project. Keys, profiles and sandboxes refer to the id, so nothing else changes.
    pub async fn rename_project(&self, id: ProjectId, name: &str) -> Result<Project> {
        validate_name(name)?;
        let (key, new_name) = (id.to_string(), name.to_owned());
        let renamed = run!(self, |c| {
            diesel::update(projects::table.filter(projects::id.eq(&key)))
                .set(projects::name.eq(&new_name))
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "project name",
                    },
                    other => other,
                })
        })?;
        if renamed == 0 {
            return Err(RegistryError::NotFound { what: "project" });
        }
        self.project(id).await
    }

    /// The project with this id ([`RegistryError::NotFound`] if none).
    pub async fn project(&self, id: ProjectId) -> Result<Project> {
        let id = id.to_string();
        let row: Option<ProjectRow> = run!(self, |c| {
            projects::table
                .filter(projects::id.eq(&id))
                .select(ProjectRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.ok_or(RegistryError::NotFound { what: "project" })?
            .into_project()
    }

    /// The project with this name ([`RegistryError::NotFound`] if none).
    pub async fn project_by_name(&self, name: &str) -> Result<Project> {
        let name = name.to_owned();
        let row: Option<ProjectRow> = run!(self, |c| {
            projects::table
                .filter(projects::name.eq(&name))
                .select(ProjectRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.ok_or(RegistryError::NotFound { what: "project" })?
            .into_project()
    }

    /// Every project, oldest first.
    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        let rows: Vec<ProjectRow> = run!(self, |c| {
            projects::table
                .order((projects::created_at.asc(), projects::id.asc()))
                .select(ProjectRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(ProjectRow::into_project).collect()
    }

    // --- API keys ----------------------------------------------------------------------------

    /// Issues a new API key for `project`. Only the key id and an HMAC-SHA256 of the secret
    /// (under a subkey of the master key) are stored; the full key is returned once.
    pub async fn issue_api_key(&self, project: ProjectId) -> Result<NewApiKey> {
        self.issue_api_key_with(project, ApiKeyOptions::default())
            .await
    }

    /// [`Registry::issue_api_key`] with a name and an expiry. The name is stored as given (the
    /// caller validates it); an expired key is refused by [`Registry::authenticate`] exactly
    /// like an unknown one.
    pub async fn issue_api_key_with(
        &self,
        project: ProjectId,
        options: ApiKeyOptions,
    ) -> Result<NewApiKey> {
        let (key_id, key) = generate_api_key()?;
        let parsed = parse_api_key(key.expose_secret()).ok_or_else(|| RegistryError::Internal {
            message: "a generated API key does not parse".to_owned(),
        })?;
        let row = ApiKeyRow {
            key_id: key_id.clone(),
            project_id: project.to_string(),
            secret_hash: self.key.api_key_hash(parsed.key_id, parsed.secret),
            created_at: to_micros(self.db.now()),
            revoked_at: None,
            last_used_at: None,
            name: options.name,
            expires_at: options.expires_at.map(to_micros),
        };
        let info = row.info()?;
        run!(self, |c| {
            diesel::insert_into(api_keys::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok(NewApiKey { info, key })
    }

    /// The project a presented key authenticates, or `None` when the key is malformed (shape or
    /// checksum: no database access), unknown, revoked, expired or wrong. Digests are compared in
    /// constant time.
    ///
    /// A key id the database vouched for less than the cache TTL ago is checked against the
    /// cached hash without a database round trip. Revoking through this registry (or a clone)
    /// takes effect at once; revoking through another process (the CLI, another replica) takes
    /// effect here within the TTL.
    pub async fn authenticate(&self, presented: &str) -> Result<Option<ProjectId>> {
        let Some(parsed) = parse_api_key(presented) else {
            return Ok(None);
        };
        let now = self.db.now();
        // The stored last use, when this call read the row (a cache miss).
        let mut stored_use: Option<i64> = None;
        let verified = match self.keys.get(parsed.key_id, now) {
            Ok(cached) => cached,
            Err(generation) => {
                let key_id = parsed.key_id.to_owned();
                let row: Option<ApiKeyRow> = run!(self, |c| {
                    api_keys::table
                        .filter(api_keys::key_id.eq(&key_id))
                        .select(ApiKeyRow::as_select())
                        .first(c)
                        .await
                        .optional()
                        .map_err(db_error)
                })?;
                // Unknown or revoked: nothing to cache. (An expired entry left for this id is
                // never served again; no generation bump either, so a flood of unknown key ids
                // cannot keep valid keys from being cached.)
                let Some(row) = row.filter(|r| r.revoked_at.is_none()) else {
                    return Ok(None);
                };
                stored_use = row.last_used_at;
                let verified = VerifiedKey {
                    project: crate::rows::parse_project_id(&row.project_id)?,
                    secret_hash: row.secret_hash,
                    expires_at: row.expires_at,
                };
                self.keys
                    .insert(parsed.key_id.to_owned(), verified.clone(), now, generation);
                verified
            }
        };
        let expected = self.key.api_key_hash(parsed.key_id, parsed.secret);
        // An expired key is refused like an unknown one (and its use is not recorded). The
        // expiry is checked on every call, so a cached key expires on time too.
        let live = verified.expires_at.is_none_or(|at| to_micros(now) < at);
        let matches = bool::from(expected.ct_eq(&verified.secret_hash)) && live;
        if matches && self.use_is_due(parsed.key_id, stored_use, to_micros(now)) {
            // Advisory, so off the request's path: a failure only leaves the older time.
            let key_id = parsed.key_id.to_owned();
            let at = to_micros(now);
            let registry = self.clone();
            tokio::spawn(async move {
                let db = &registry;
                let result = run!(db, |c| {
                    diesel::update(api_keys::table.filter(api_keys::key_id.eq(&key_id)))
                        .set(api_keys::last_used_at.eq(Some(at)))
                        .execute(c)
                        .await
                        .map_err(db_error)
                });
                if let Err(e) = result {
                    tracing::debug!(error = %e, "could not record an API key's last use");
                }
            });
        }
        Ok(matches.then_some(verified.project))
    }

    /// Whether a use of `key_id` at `at` should be written: the last use known here (this
    /// process's, or the row's when just read) is older than [`LAST_USE_PRECISION`]. Marks it
    /// written when it is, so one use a minute per key reaches the database.
    fn use_is_due(&self, key_id: &str, stored: Option<i64>, at: i64) -> bool {
        let precision = i64::try_from(LAST_USE_PRECISION.as_micros()).unwrap_or(i64::MAX);
        let mut known = self
            .last_use
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: forgetting only costs an early write.
        if known.len() >= 100_000 {
            known.clear();
        }
        let last = known.get(key_id).copied().max(stored);
        let due = last.is_none_or(|t| t.saturating_add(precision) <= at);
        let remembered = if due { Some(at) } else { last };
        if let Some(t) = remembered {
            known.insert(key_id.to_owned(), t);
        }
        due
    }

    /// Revokes a key by its key id. Idempotent (the first revocation time is kept);
    /// [`RegistryError::NotFound`] when no such key exists.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<ApiKeyInfo> {
        let revoked = key_id;
        let key_id = key_id.to_owned();
        let now = to_micros(self.db.now());
        let row: Option<ApiKeyRow> = run!(self, |c| {
            diesel::update(
                api_keys::table
                    .filter(api_keys::key_id.eq(&key_id))
                    .filter(api_keys::revoked_at.is_null()),
            )
            .set(api_keys::revoked_at.eq(Some(now)))
            .execute(c)
            .await
            .map_err(db_error)?;
            api_keys::table
                .filter(api_keys::key_id.eq(&key_id))
                .select(ApiKeyRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        // This process stops trusting the key at once (after the update: a lookup that read the
        // row before it cannot cache it any more).
        self.keys.forget(revoked);
        row.ok_or(RegistryError::NotFound { what: "API key" })?
            .info()
    }

    /// A project's keys (revoked and expired ones included), newest first.
    pub async fn list_api_keys(&self, project: ProjectId) -> Result<Vec<ApiKeyInfo>> {
        let project = project.to_string();
        let rows: Vec<ApiKeyRow> = run!(self, |c| {
            api_keys::table
                .filter(api_keys::project_id.eq(&project))
                .order((api_keys::created_at.desc(), api_keys::key_id.desc()))
                .select(ApiKeyRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.iter().map(ApiKeyRow::info).collect()
    }

    // --- provider profiles -------------------------------------------------------------------

    /// Stores or replaces the project's profile for `provider`. The credential is encrypted
    /// with XChaCha20-Poly1305 under a subkey of the master key, its associated data binding
    /// project id, provider and profile id. Every put gives the profile a fresh id, so
    /// verifications recorded for an earlier credential no longer apply.
    pub async fn put_profile(
        &self,
        project: ProjectId,
        provider: Provider,
        input: ProfileInput,
    ) -> Result<ProviderProfile> {
        let profile_id = Ulid::generate().to_string().to_ascii_lowercase();
        let credential = input
            .credential
            .as_ref()
            .map(|secret| {
                self.key
                    .seal(&credential_aad(project, provider, &profile_id), secret)
            })
            .transpose()?;
        let now = to_micros(self.db.now());
        let row = ProfileRow {
            id: profile_id,
            project_id: project.to_string(),
            provider: provider.as_str().to_owned(),
            context: json(&input.context)?,
            settings: json(&input.settings)?,
            credential,
            created_at: now,
            updated_at: now,
        };
        let stored: Result<ProfileRow> = write_tx!(self, |c| {
            diesel::insert_into(provider_profiles::table)
                .values(&row)
                .on_conflict((provider_profiles::project_id, provider_profiles::provider))
                .do_update()
                .set((
                    provider_profiles::id.eq(excluded(provider_profiles::id)),
                    provider_profiles::context.eq(excluded(provider_profiles::context)),
                    provider_profiles::settings.eq(excluded(provider_profiles::settings)),
                    provider_profiles::credential.eq(excluded(provider_profiles::credential)),
                    provider_profiles::updated_at.eq(excluded(provider_profiles::updated_at)),
                ))
                .execute(c)
                .await?;
            // Verifications of replaced credentials are unreachable now; drop them.
            diesel::delete(
                profile_verifications::table.filter(
                    profile_verifications::profile_id
                        .ne_all(provider_profiles::table.select(provider_profiles::id)),
                ),
            )
            .execute(c)
            .await?;
            Ok::<_, RegistryError>(
                provider_profiles::table
                    .filter(provider_profiles::id.eq(&row.id))
                    .select(ProfileRow::as_select())
                    .first(c)
                    .await?,
            )
        });
        // Forgotten after the write, whatever came of it: this process sees the change at once.
        self.profiles.forget(&(project, provider));
        self.profile_view(stored?, Vec::new())
    }

    fn profile_view(
        &self,
        row: ProfileRow,
        verifications: Vec<VerificationRow>,
    ) -> Result<ProviderProfile> {
        let mut verifications = verifications
            .into_iter()
            .map(VerificationRow::into_verification)
            .collect::<Result<Vec<_>>>()?;
        verifications.sort_by(|a, b| a.operation.cmp(&b.operation));
        Ok(ProviderProfile {
            project_id: crate::rows::parse_project_id(&row.project_id)?,
            provider: row.provider()?,
            context: row.context()?,
            settings: row.settings()?,
            has_credential: row.credential.is_some(),
            verifications,
            created_at: crate::db::from_micros(row.created_at)?,
            updated_at: crate::db::from_micros(row.updated_at)?,
        })
    }

    async fn profile_rows(
        &self,
        project: ProjectId,
        provider: Option<Provider>,
    ) -> Result<Vec<(ProfileRow, Vec<VerificationRow>)>> {
        let project = project.to_string();
        let provider = provider.map(Provider::as_str);
        let (profiles, verifications): (Vec<ProfileRow>, Vec<VerificationRow>) = run!(self, |c| {
            let mut query = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .select(ProfileRow::as_select())
                .order(provider_profiles::provider.asc())
                .into_boxed();
            if let Some(provider) = provider {
                query = query.filter(provider_profiles::provider.eq(provider));
            }
            let profiles: Vec<ProfileRow> = query.load(c).await.map_err(db_error)?;
            let ids: Vec<&str> = profiles.iter().map(|p| p.id.as_str()).collect();
            let verifications: Vec<VerificationRow> = profile_verifications::table
                .filter(profile_verifications::profile_id.eq_any(ids))
                .select(VerificationRow::as_select())
                .load(c)
                .await
                .map_err(db_error)?;
            Ok((profiles, verifications))
        })?;
        let mut verifications = verifications;
        Ok(profiles
            .into_iter()
            .map(|p| {
                let (mine, rest): (Vec<_>, Vec<_>) =
                    verifications.drain(..).partition(|v| v.profile_id == p.id);
                verifications = rest;
                (p, mine)
            })
            .collect())
    }

    /// The project's profile for `provider` with its credential decrypted, or `None`.
    /// [`RegistryError::CredentialUndecryptable`] if the ciphertext does not authenticate.
    ///
    /// A found profile is served from a cache for the registry's cache TTL; changes made
    /// through this registry (or a clone) apply at once, changes made by another process within
    /// the TTL, and a profile created anywhere is seen at once (absence is not cached).
    pub async fn profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Option<ProfileWithCredential>> {
        let now = self.db.now();
        match self.profiles.get(&(project, provider), now) {
            Ok(cached) => Ok(cached),
            Err(generation) => {
                let loaded = self.load_profile(project, provider).await?;
                // Absence is not cached: connecting a profile (say with the CLI) right after a
                // request failed for the lack of one must work on the next request.
                if let Some(found) = &loaded {
                    self.profiles
                        .insert((project, provider), Some(found.clone()), now, generation);
                }
                Ok(loaded)
            }
        }
    }

    async fn load_profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Option<ProfileWithCredential>> {
        let Some((row, verifications)) = self
            .profile_rows(project, Some(provider))
            .await?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let credential = row
            .credential
            .as_deref()
            .map(|sealed| {
                self.key
                    .open(&credential_aad(project, provider, &row.id), sealed)
            })
            .transpose()?;
        Ok(Some(ProfileWithCredential {
            profile: self.profile_view(row, verifications)?,
            credential,
        }))
    }

    /// The project's profiles (non-secret view), by provider.
    pub async fn list_profiles(&self, project: ProjectId) -> Result<Vec<ProviderProfile>> {
        self.profile_rows(project, None)
            .await?
            .into_iter()
            .map(|(row, verifications)| self.profile_view(row, verifications))
            .collect()
    }

    /// Records the result of a deep verification, replacing the previous one for the same
    /// operation. [`RegistryError::NotFound`] when the profile does not exist.
    pub async fn record_verification(
        &self,
        project: ProjectId,
        provider: Provider,
        verification: Verification,
    ) -> Result<()> {
        let cached = (project, provider);
        let project = project.to_string();
        let provider = provider.as_str();
        let recorded = run!(self, |c| {
            let id: Option<String> = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .filter(provider_profiles::provider.eq(provider))
                .select(provider_profiles::id)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(id) = id else {
                return Err(RegistryError::NotFound {
                    what: "provider profile",
                });
            };
            let row = VerificationRow {
                profile_id: id,
                operation: verification.operation.clone(),
                ok: verification.ok,
                reason: verification.reason.clone(),
                remediation: verification.remediation.clone(),
                checked_at: to_micros(verification.checked_at),
            };
            diesel::insert_into(profile_verifications::table)
                .values(&row)
                .on_conflict((
                    profile_verifications::profile_id,
                    profile_verifications::operation,
                ))
                .do_update()
                .set((
                    profile_verifications::ok.eq(excluded(profile_verifications::ok)),
                    profile_verifications::reason.eq(excluded(profile_verifications::reason)),
                    profile_verifications::remediation
                        .eq(excluded(profile_verifications::remediation)),
                    profile_verifications::checked_at
                        .eq(excluded(profile_verifications::checked_at)),
                ))
                .execute(c)
                .await
                .map_err(db_error)?;
            Ok(())
        });
        self.profiles.forget(&cached);
        recorded
    }

    /// Deletes the project's profile for `provider`; `false` when there was none.
    pub async fn delete_profile(&self, project: ProjectId, provider: Provider) -> Result<bool> {
        let cached = (project, provider);
        let project = project.to_string();
        let provider = provider.as_str();
        let deleted: Result<usize> = write_tx!(self, |c| {
            let ids: Vec<String> = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .filter(provider_profiles::provider.eq(provider))
                .select(provider_profiles::id)
                .load(c)
                .await?;
            diesel::delete(
                profile_verifications::table.filter(profile_verifications::profile_id.eq_any(&ids)),
            )
            .execute(c)
            .await?;
            Ok::<_, RegistryError>(
                diesel::delete(provider_profiles::table.filter(provider_profiles::id.eq_any(&ids)))
                    .execute(c)
                    .await?,
            )
        });
        self.profiles.forget(&cached);
        Ok(deleted? > 0)
    }

    // --- sandboxes ---------------------------------------------------------------------------

    /// Records a sandbox before the provider is called: create state `pending`, status
    /// `creating`. [`RegistryError::Conflict`] when the id or operation id is taken.
    pub async fn insert_sandbox(&self, new: NewSandbox) -> Result<SandboxRecord> {
        self.insert_sandbox_until(new, None).await
    }

    /// [`Registry::insert_sandbox`], remembering when the lifetime asked for ends (so a
    /// sandbox the provider no longer has can be told expired from vanished).
    pub async fn insert_sandbox_until(
        &self,
        new: NewSandbox,
        expires_at: Option<Timestamp>,
    ) -> Result<SandboxRecord> {
        self.insert_sandbox_with(new, expires_at, SandboxLifecycle::default())
            .await
    }

    /// [`Registry::insert_sandbox_until`] with what the sandbox is created with for its
    /// lifecycle (auto-resume, idle stop, the snapshot it is restored from). Its last activity
    /// starts at its creation. An idle stop too long to add to a timestamp (past 292 000
    /// years) is [`RegistryError::InvalidInput`]; callers check the API's limits.
    pub async fn insert_sandbox_with(
        &self,
        new: NewSandbox,
        expires_at: Option<Timestamp>,
        lifecycle: SandboxLifecycle,
    ) -> Result<SandboxRecord> {
        let now = self.db.now();
        let record = SandboxRecord {
            id: new.id,
            project_id: new.project_id,
            native_id: new.metadata.native_provider_id.clone(),
            status: SandboxStatus::Creating,
            status_observed_at: now,
            metadata: new.metadata,
            create_state: CreateState::Pending,
            created_at: now,
            updated_at: now,
            deleted_at: None,
            expires_at,
            end_reason: None,
            auto_resume: lifecycle.auto_resume,
            idle_stop_seconds: lifecycle.idle_stop_seconds,
            snapshot_id: lifecycle.snapshot_id,
            last_activity_at: now,
        };
        let row = SandboxRow::from_record(&record)?;
        let stored = row.clone().into_record()?;
        run!(self, |c| {
            diesel::insert_into(sandboxes::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "sandbox id or operation id",
                    },
                    other => other,
                })
        })?;
        Ok(stored)
    }

    /// Stores records exactly as given, in one transaction (restores, bulk loads, tests).
    pub async fn import_sandboxes(&self, records: &[SandboxRecord]) -> Result<()> {
        let rows = records
            .iter()
            .map(SandboxRow::from_record)
            .collect::<Result<Vec<_>>>()?;
        let db = self.db.clone();
        self.db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    PooledConnection::Sqlite(c) => {
                        // One blocking task for the whole import, in one `BEGIN IMMEDIATE`
                        // transaction; 18 columns × 500 rows stays below SQLite's bind limit
                        // (32 766).
                        c.spawn_blocking(move |c| {
                            c.immediate_transaction(|c| {
                                for chunk in rows.chunks(500) {
                                    diesel::RunQueryDsl::execute(
                                        diesel::insert_into(sandboxes::table).values(chunk),
                                        c,
                                    )?;
                                }
                                Ok::<_, diesel::result::Error>(())
                            })
                        })
                        .await
                        .map_err(db_error)?;
                    }
                    PooledConnection::Postgres(c) => {
                        use diesel_async::AsyncConnection as _;
                        let rows = &rows;
                        c.transaction(async |c| {
                            // 18 columns × 1000 rows stays below PostgreSQL's 65535 binds.
                            for chunk in rows.chunks(1000) {
                                diesel_async::RunQueryDsl::execute(
                                    diesel::insert_into(sandboxes::table).values(chunk),
                                    c,
                                )
                                .await?;
                            }
                            Ok::<_, RegistryError>(())
                        })
                        .await?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn fetch_sandbox(&self, project: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let (project, id) = (project.to_owned(), id.to_owned());
        let row: Option<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .select(SandboxRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(SandboxRow::into_record).transpose()
    }

    async fn fetch_existing(&self, project: &str, id: &str) -> Result<SandboxRecord> {
        self.fetch_sandbox(project, id)
            .await?
            .ok_or(RegistryError::NotFound { what: SANDBOX })
    }

    /// The sandbox `id` if it belongs to `project` (tombstones included).
    pub async fn sandbox(
        &self,
        project: ProjectId,
        id: SandboxId,
    ) -> Result<Option<SandboxRecord>> {
        self.fetch_sandbox(&project.to_string(), &id.to_string())
            .await
    }

    /// The sandbox created by `operation` (in any project; operation ids are unique).
    pub async fn sandbox_by_operation(
        &self,
        operation: OperationId,
    ) -> Result<Option<SandboxRecord>> {
        let operation = operation.to_string();
        let row: Option<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::operation_id.eq(&operation))
                .select(SandboxRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.map(SandboxRow::into_record).transpose()
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
        let (project, id) = (project.to_string(), id.to_string());
        let native_id = native_id.to_owned();
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        // `sandbox.created` once: only when this update moves the create to `created` (a
        // repeated confirmation refreshes the native id and status without a second event).
        let updated: Option<SandboxRow> = write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .filter(sandboxes::deleted_at.is_null());
            let before: Option<String> = target
                .select(sandboxes::create_state)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(before) = before else {
                return Ok(None);
            };
            let row: Option<SandboxRow> = diesel::update(target)
                .set((
                    sandboxes::native_id.eq(Some(&native_id)),
                    sandboxes::status.eq(status.as_str()),
                    sandboxes::status_observed_at.eq(now),
                    sandboxes::create_state.eq(CreateState::Created.as_str()),
                    sandboxes::updated_at.eq(now),
                ))
                .returning(SandboxRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
            if row.is_some() && before != CreateState::Created.as_str() {
                append_event!(
                    c,
                    NewEventRow {
                        status: Some(status.as_str().to_owned()),
                        ..NewEventRow::new(&project, EventType::SandboxCreated, &id, now)
                    }
                );
            }
            Ok::<_, RegistryError>(row)
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing(&p, &i).await,
        }
    }

    /// Moves the create state (e.g. to `failed` or `unknown`); a `failed` create also gets
    /// status `failed`. [`RegistryError::NotFound`] if absent.
    pub async fn set_create_state(
        &self,
        project: ProjectId,
        id: SandboxId,
        state: CreateState,
    ) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id));
            if state == CreateState::Failed {
                let before: Option<(String, String)> = target
                    .filter(sandboxes::deleted_at.is_null())
                    .select((sandboxes::status, sandboxes::create_state))
                    .first(c)
                    .await
                    .optional()
                    .map_err(db_error)?;
                let Some((old_status, old_state)) = before else {
                    return Ok(());
                };
                diesel::update(target.filter(sandboxes::deleted_at.is_null()))
                    .set((
                        sandboxes::create_state.eq(state.as_str()),
                        sandboxes::status.eq(SandboxStatus::Failed.as_str()),
                        sandboxes::status_observed_at.eq(now),
                        sandboxes::updated_at.eq(now),
                    ))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
                if old_state != CreateState::Failed.as_str()
                    && old_status != SandboxStatus::Failed.as_str()
                {
                    append_event!(
                        c,
                        NewEventRow::status_changed(
                            &project,
                            &id,
                            &old_status,
                            SandboxStatus::Failed.as_str(),
                            event_reason::CREATE_FAILED,
                            now,
                        )
                    );
                }
            } else {
                diesel::update(target)
                    .set((
                        sandboxes::create_state.eq(state.as_str()),
                        sandboxes::updated_at.eq(now),
                    ))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
            }
            Ok::<_, RegistryError>(())
        })?;
        self.fetch_existing(&p, &i).await
    }

    /// Caches a status observed at `observed_at`. Ignored for tombstones and when a newer
    /// observation is already stored. [`RegistryError::NotFound`] if absent.
    /// [`Registry::record_status_for`] with reason `observed`.
    pub async fn record_status(
        &self,
        project: ProjectId,
        id: SandboxId,
        status: SandboxStatus,
        observed_at: Timestamp,
    ) -> Result<SandboxRecord> {
        self.record_status_for(project, id, status, observed_at, event_reason::OBSERVED)
            .await
    }

    /// Stores `status` as of `at` for `reason` (one of [`corral_domain::event_reason`]), in one
    /// transaction with the events it causes: when the status changed, `sandbox.status_changed`;
    /// besides, `sandbox.stopped` when it became `stopped`, and `sandbox.resumed` when it
    /// became `running` from `stopped`, `stopping` or `starting` (each with `reason`). Becoming
    /// `running` is activity: the last activity moves up to `at`. Ignored for tombstones and
    /// when a newer observation is already stored. [`RegistryError::NotFound`] if absent.
    pub async fn record_status_for(
        &self,
        project: ProjectId,
        id: SandboxId,
        status: SandboxStatus,
        at: Timestamp,
        reason: &str,
    ) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let observed = to_micros(at);
        let now = to_micros(self.db.now());
        let reason = reason.to_owned();
        let (p, i) = (project.clone(), id.clone());
        // A read of the stored status first, in the same write transaction, so a change is
        // reported exactly once, with what it changed from; a second read only when the update
        // did not apply (a tombstone, a newer observation, or no such record).
        let updated: Option<SandboxRow> = write_tx!(self, |c| {
            let target = sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::id.eq(&id))
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::status_observed_at.le(observed));
            let old: Option<String> = target
                .select(sandboxes::status)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(old) = old else {
                return Ok(None);
            };
            let changed = old != status.as_str();
            if changed && status == SandboxStatus::Running {
                // Only ever forward, in the statement itself, so a concurrent
                // `touch_activity` with a later time is never overwritten.
                diesel::update(target.filter(sandboxes::last_activity_at.lt(observed)))
                    .set(sandboxes::last_activity_at.eq(observed))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
            }
            let row: Option<SandboxRow> = diesel::update(target)
                .set((
                    sandboxes::status.eq(status.as_str()),
                    sandboxes::status_observed_at.eq(observed),
                    sandboxes::updated_at.eq(now),
                ))
                .returning(SandboxRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
            if row.is_some() && changed {
                let change = (old.as_str(), status.as_str());
                append_event!(
                    c,
                    NewEventRow::status_changed(
                        &project, &id, change.0, change.1, &reason, observed,
                    )
                );
                let resumed_from = [
                    SandboxStatus::Stopped,
                    SandboxStatus::Stopping,
                    SandboxStatus::Starting,
                ];
                let also = match status {
                    SandboxStatus::Stopped => Some(EventType::SandboxStopped),
                    SandboxStatus::Running
                        if resumed_from.iter().any(|s| s.as_str() == old.as_str()) =>
                    {
                        Some(EventType::SandboxResumed)
                    }
                    _ => None,
                };
                if let Some(kind) = also {
                    append_event!(
                        c,
                        NewEventRow::stopped_or_resumed(
                            kind, &project, &id, change, &reason, observed,
                        )
                    );
                }
            }
            Ok::<_, RegistryError>(row)
        })?;
        match updated {
            Some(row) => row.into_record(),
            None => self.fetch_existing(&p, &i).await,
        }
    }

    /// Records activity on the sandbox at `at`: its last activity becomes the later of the
    /// stored one and `at` (never earlier). One `UPDATE`, no event, so it is cheap enough for
    /// every request that reaches a sandbox; a tombstone or an absent record is left alone,
    /// without an error.
    pub async fn touch_activity(
        &self,
        project: ProjectId,
        id: SandboxId,
        at: Timestamp,
    ) -> Result<()> {
        let (project, id) = (project.to_string(), id.to_string());
        let at = to_micros(at);
        run!(self, |c| {
            diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id))
                    .filter(sandboxes::deleted_at.is_null())
                    .filter(sandboxes::last_activity_at.lt(at)),
            )
            .set(sandboxes::last_activity_at.eq(at))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(())
    }

    /// Up to `limit` sandboxes, across projects, due for an idle stop at `now`: not deleted,
    /// `running`, with an idle stop whose seconds have passed since their last activity
    /// (`lastActivityAt + idleStopSeconds <= now`); the longest idle first.
    pub async fn idle_sandboxes(&self, now: Timestamp, limit: u32) -> Result<Vec<SandboxRecord>> {
        use diesel::IntoSql as _;
        use diesel::sql_types::{BigInt, Nullable};
        let now = to_micros(now);
        let rows: Vec<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::idle_stop_seconds.is_not_null())
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::status.eq(SandboxStatus::Running.as_str()))
                // `last + idle * 10^6 <= now` spelled as a subtraction from `now`: stored idle
                // stops are at most i64::MAX / 10^6 seconds, so neither side can overflow.
                .filter(
                    sandboxes::last_activity_at
                        .nullable()
                        .le(now.into_sql::<Nullable<BigInt>>()
                            - sandboxes::idle_stop_seconds * 1_000_000_i64),
                )
                .order((sandboxes::last_activity_at.asc(), sandboxes::id.asc()))
                .limit(i64::from(limit))
                .select(SandboxRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SandboxRow::into_record).collect()
    }

    /// Marks the sandbox deleted (status `deleted`, `deletedAt` now). Idempotent: a second call
    /// returns the tombstone unchanged. [`RegistryError::NotFound`] if absent.
    pub async fn tombstone(&self, project: ProjectId, id: SandboxId) -> Result<SandboxRecord> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        let (p, i) = (project.clone(), id.clone());
        write_tx!(self, |c| {
            let n = diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id))
                    .filter(sandboxes::deleted_at.is_null()),
            )
            .set((
                sandboxes::status.eq(SandboxStatus::Deleted.as_str()),
                sandboxes::status_observed_at.eq(now),
                sandboxes::deleted_at.eq(Some(now)),
                sandboxes::updated_at.eq(now),
                sandboxes::end_reason.eq(Some(EndReason::Deleted.as_str())),
            ))
            .execute(c)
            .await
            .map_err(db_error)?;
            if n > 0 {
                append_event!(
                    c,
                    NewEventRow {
                        status: Some(SandboxStatus::Deleted.as_str().to_owned()),
                        ..NewEventRow::new(&project, EventType::SandboxDeleted, &id, now)
                    }
                );
            }
            Ok::<_, RegistryError>(())
        })?;
        self.fetch_existing(&p, &i).await
    }

    /// How many live sandboxes `project` has on each provider: not deleted, not expired, and
    /// not a create known to have failed (pending and unconfirmed creates count: they may
    /// exist). For quotas, checked before a provider is called.
    pub async fn count_live_sandboxes(
        &self,
        project: ProjectId,
    ) -> Result<std::collections::BTreeMap<corral_domain::Provider, u64>> {
        let project = project.to_string();
        let rows: Vec<(String, i64)> = run!(self, |c| {
            sandboxes::table
                .filter(sandboxes::project_id.eq(&project))
                .filter(sandboxes::deleted_at.is_null())
                .filter(sandboxes::create_state.ne("failed"))
                .filter(sandboxes::status.ne("expired"))
                .group_by(sandboxes::provider)
                .select((sandboxes::provider, diesel::dsl::count_star()))
                .load(c)
                .await
                .map_err(db_error)
        })?;
        let mut out = std::collections::BTreeMap::new();
        for (provider, n) in rows {
            let provider = provider.parse().map_err(|_| RegistryError::Internal {
                message: format!("unknown provider `{provider}` in the registry"),
            })?;
            out.insert(provider, u64::try_from(n).unwrap_or(0));
        }
        Ok(out)
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
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let after = cursor
            .map(ListCursor::parse)
            .transpose()?
            .map(|c| (c.created_at_micros, c.id.to_string()));
        let project = project.to_string();
        // One extra row tells whether another page exists.
        let fetch = i64::from(limit) + 1;
        // The page query, for whichever backend `$c` is.
        macro_rules! page {
            ($project:expr, $after:expr) => {{
                let mut query = sandboxes::table
                    .filter(sandboxes::project_id.eq($project))
                    .order((sandboxes::created_at.desc(), sandboxes::id.desc()))
                    .limit(fetch)
                    .select(SandboxRow::as_select())
                    .into_boxed();
                if let Some((created, id)) = $after {
                    // `(created_at, id) < cursor`, spelled so that PostgreSQL seeks the
                    // `sandboxes_page` index (project_id, created_at DESC, id DESC) to the
                    // cursor: with the `OR` alone it ranged on project_id only and filtered
                    // every newer row (15 000 rows read for one page 15 000 deep).
                    query = query
                        .filter(sandboxes::created_at.le(created))
                        .filter(sandboxes::created_at.lt(created).or(sandboxes::id.lt(id)));
                }
                query
            }};
        }
        let db = self.db.clone();
        let mut rows: Vec<SandboxRow> = self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    // Synchronous diesel on the connection's blocking thread: rows are decoded
                    // in place, where the async wrapper copies every value of every row into an
                    // owned row first (allocations were the largest item in the profile of a
                    // 100-row page).
                    PooledConnection::Sqlite(c) => c
                        .spawn_blocking(move |c| {
                            diesel::RunQueryDsl::load(page!(&project, after), c)
                        })
                        .await
                        .map_err(db_error),
                    PooledConnection::Postgres(c) => {
                        page!(&project, after).load(c).await.map_err(db_error)
                    }
                }
            })
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.created_at, &last.id)),
            _ => None,
        };
        Ok(SandboxRecordPage {
            items: rows
                .into_iter()
                .map(SandboxRow::into_record)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// [`Registry::list_sandboxes`] as the wire page itself, for `GET /v1/sandboxes`: the same
    /// rows, order, cursors and errors, but only the columns a [`SandboxListItem`] shows are
    /// read, each row becomes its item directly (no whole record in between), and the query
    /// is one of two fixed statements (first page, or after a cursor), so both backends keep
    /// it prepared instead of building and parsing its SQL on every call.
    pub async fn list_sandbox_page(
        &self,
        project: ProjectId,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SandboxPage> {
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(RegistryError::InvalidInput {
                message: format!("limit must be 1–{MAX_PAGE_LIMIT}"),
            });
        }
        let after = cursor
            .map(ListCursor::parse)
            .transpose()?
            .map(|c| (c.created_at_micros, c.id.to_string()));
        let project = project.to_string();
        // One extra row tells whether another page exists.
        let fetch = i64::from(limit) + 1;
        // Runs `$load` on the page query for `$after` (see `list_sandboxes` for why the
        // keyset condition is spelled this way).
        macro_rules! page {
            ($project:expr, $after:expr, |$q:ident| $load:expr) => {{
                let $q = sandboxes::table
                    .filter(sandboxes::project_id.eq($project))
                    .order((sandboxes::created_at.desc(), sandboxes::id.desc()))
                    .limit(fetch)
                    .select(SandboxListRow::as_select());
                match $after {
                    None => $load,
                    Some((created, id)) => {
                        let $q = $q
                            .filter(sandboxes::created_at.le(created))
                            .filter(sandboxes::created_at.lt(created).or(sandboxes::id.lt(id)));
                        $load
                    }
                }
            }};
        }
        let db = self.db.clone();
        let mut rows: Vec<SandboxListRow> = self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    // Synchronous diesel on the connection's blocking thread, rows decoded in
                    // place (as in `list_sandboxes`).
                    PooledConnection::Sqlite(c) => c
                        .spawn_blocking(move |c| {
                            page!(&project, after, |q| diesel::RunQueryDsl::load(q, c))
                        })
                        .await
                        .map_err(db_error),
                    PooledConnection::Postgres(c) => {
                        page!(&project, after, |q| q.load(c).await).map_err(db_error)
                    }
                }
            })
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(encode_cursor(last.created_at, &last.id)),
            _ => None,
        };
        Ok(SandboxPage {
            items: rows
                .into_iter()
                .map(SandboxListRow::into_item)
                .collect::<Result<_>>()?,
            next_cursor,
        })
    }

    /// Creates still `pending` or `unknown` that were recorded before `older_than`, across
    /// projects (for the reconciler): those never attempted first, oldest first, then the
    /// longest since [`Registry::mark_reconcile_attempted`].
    pub async fn stale_creates(
        &self,
        older_than: Timestamp,
        limit: u32,
    ) -> Result<Vec<SandboxRecord>> {
        let before = to_micros(older_than);
        let rows: Vec<SandboxRow> = run!(self, |c| {
            sandboxes::table
                .filter(
                    sandboxes::create_state
                        .eq_any([CreateState::Pending.as_str(), CreateState::Unknown.as_str()]),
                )
                .filter(sandboxes::created_at.lt(before))
                // Least recently attempted first, so records the reconciler cannot settle
                // rotate to the back instead of filling every batch forever. A stamp column
                // rather than an in-memory cursor: the rotation survives restarts and is
                // shared by replicas. `IS NOT NULL` ascending is `NULLS FIRST` spelled the
                // same on SQLite and PostgreSQL (whose own default puts NULLs last).
                .order((
                    sandboxes::reconcile_attempted_at.is_not_null().asc(),
                    sandboxes::reconcile_attempted_at.asc(),
                    sandboxes::created_at.asc(),
                    sandboxes::id.asc(),
                ))
                .limit(i64::from(limit))
                .select(SandboxRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(SandboxRow::into_record).collect()
    }

    /// Records that the reconciler just tried to settle this create (whatever came of it), so
    /// [`Registry::stale_creates`] hands it out after the ones tried longer ago. Leaves
    /// `updated_at` alone: the reconcile grace period counts from that. A record that is gone
    /// is not an error.
    pub async fn mark_reconcile_attempted(&self, project: ProjectId, id: SandboxId) -> Result<()> {
        let (project, id) = (project.to_string(), id.to_string());
        let now = to_micros(self.db.now());
        run!(self, |c| {
            diesel::update(
                sandboxes::table
                    .filter(sandboxes::project_id.eq(&project))
                    .filter(sandboxes::id.eq(&id)),
            )
            .set(sandboxes::reconcile_attempted_at.eq(Some(now)))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(())
    }
}
