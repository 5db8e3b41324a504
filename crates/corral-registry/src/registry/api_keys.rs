//! API keys: issued, authenticated (with the verified-key cache and the throttled
//! last-use record), revoked and listed.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use secrecy::ExposeSecret as _;
use subtle::ConstantTimeEq as _;

use crate::cache::VerifiedKey;
use crate::db::{run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::{ApiKeyInfo, ApiKeyOptions, NewApiKey, ProjectId};
use crate::rows::ApiKeyRow;
use crate::schema::api_keys;
use crate::secret::{generate_api_key, parse_api_key};

use super::{LAST_USE_PRECISION, Registry};

impl Registry {
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

    /// What the registry knows of live (not revoked) API key `key_id`, served from the key
    /// cache when the database vouched for it less than the TTL ago; with its stored last use
    /// when this call read the row. `None` for an unknown or revoked key. Expiry is the
    /// caller's check (on every use, cached or not).
    pub(crate) async fn key_state(
        &self,
        key_id: &str,
    ) -> Result<Option<(VerifiedKey, Option<i64>)>> {
        let now = self.db.now();
        let generation = match self.keys.get(key_id, now) {
            Ok(cached) => return Ok(Some((cached, None))),
            Err(generation) => generation,
        };
        let owned = key_id.to_owned();
        let row: Option<ApiKeyRow> = run!(self, |c| {
            api_keys::table
                .filter(api_keys::key_id.eq(&owned))
                .select(ApiKeyRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        // Unknown or revoked: nothing to cache. (An expired entry left for this id is never
        // served again; no generation bump either, so a flood of unknown key ids cannot keep
        // valid keys from being cached.)
        let Some(row) = row.filter(|r| r.revoked_at.is_none()) else {
            return Ok(None);
        };
        let verified = VerifiedKey {
            project: crate::rows::parse_project_id(&row.project_id)?,
            secret_hash: row.secret_hash,
            expires_at: row.expires_at,
        };
        self.keys
            .insert(key_id.to_owned(), verified.clone(), now, generation);
        Ok(Some((verified, row.last_used_at)))
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
        let Some((verified, stored_use)) = self.key_state(parsed.key_id).await? else {
            return Ok(None);
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
}
