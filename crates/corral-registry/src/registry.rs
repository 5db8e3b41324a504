//! The registry: projects, API keys, provider profiles and sandbox records. This file holds
//! the [`Registry`] handle and the cursor scheme the listings share; each store's `impl
//! Registry` is a module of its own (`projects`, `api_keys`, `profiles`, `sandboxes`), as
//! snapshots, events and webhooks are beside it.

mod api_keys;
mod profiles;
mod projects;
mod sandboxes;

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{Provider, SandboxId};

use crate::cache::{DEFAULT_CACHE_TTL, TtlCache, VerifiedKey};
use crate::db::Database;
use crate::error::{RegistryError, Result};
use crate::model::{ProfileWithCredential, ProjectId};
use crate::secret::MasterKey;

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
}
