//! A short-lived cache of verified API keys, so that authenticating a request needs no database
//! round trip every time.
//!
//! What is cached per key id is what the database said about it: the stored keyed hash of its
//! secret and its project, and only while it was not revoked. A presented key is still checked
//! in full (its secret hashed and compared in constant time with the cached hash), so the cache
//! can answer "wrong secret" as well as "right secret" without the database.
//!
//! Revocation: [`Registry::revoke_api_key`](crate::Registry::revoke_api_key) drops the entry
//! of every clone of that registry at once (a generation counter keeps a lookup that raced the
//! revocation from putting the entry back). A key revoked through another process (the admin
//! CLI, another replica) is refused here once its entry is older than the time to live: that is
//! the documented staleness bound ([`DEFAULT_KEY_CACHE_TTL`]). A zero TTL disables the cache.
//!
//! Entries age by the registry's [`Clock`](crate::Clock), so tests move time instead of
//! sleeping; an entry from the future (the clock went back) counts as expired.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use corral_domain::Timestamp;

use crate::model::ProjectId;

/// How long a verified key is trusted without asking the database again: the longest a key
/// revoked by another process (the CLI, another replica) keeps working here.
pub const DEFAULT_KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// More entries than this and the expired ones are swept (and, if that is not enough, all).
const MAX_ENTRIES: usize = 10_000;

/// What the database said about one key id.
#[derive(Clone)]
pub(crate) struct VerifiedKey {
    /// The stored keyed hash of the key's secret.
    pub(crate) secret_hash: Vec<u8>,
    /// The key's project.
    pub(crate) project: ProjectId,
}

struct Entry {
    key: VerifiedKey,
    verified_at: Timestamp,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// Bumped by every revocation: a lookup that read the database before a revocation must
    /// not put its (now stale) answer into the cache after it.
    generation: u64,
}

/// The cache (shared by the clones of one registry).
pub(crate) struct KeyCache {
    ttl: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache").field("ttl", &self.ttl).finish()
    }
}

fn fresh(verified_at: Timestamp, now: Timestamp, ttl: Duration) -> bool {
    match (now - verified_at).to_std() {
        Ok(age) => age < ttl,
        // Negative age: the clock went back. Ask the database again.
        Err(_) => false,
    }
}

impl KeyCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer for `key_id` if it is younger than the TTL, and the generation to pass
    /// to [`KeyCache::insert`] after asking the database otherwise.
    pub(crate) fn get(&self, key_id: &str, now: Timestamp) -> Result<VerifiedKey, u64> {
        let state = self.state();
        match state.entries.get(key_id) {
            Some(e) if fresh(e.verified_at, now, self.ttl) => Ok(e.key.clone()),
            _ => Err(state.generation),
        }
    }

    /// Caches what the database said at `now`, unless a revocation happened since `generation`.
    pub(crate) fn insert(&self, key_id: &str, key: VerifiedKey, now: Timestamp, generation: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        if state.entries.len() >= MAX_ENTRIES {
            let ttl = self.ttl;
            state.entries.retain(|_, e| fresh(e.verified_at, now, ttl));
            if state.entries.len() >= MAX_ENTRIES {
                state.entries.clear();
            }
        }
        state.entries.insert(
            key_id.to_owned(),
            Entry {
                key,
                verified_at: now,
            },
        );
    }

    /// Forgets `key_id` (it was revoked, or the database no longer vouches for it).
    pub(crate) fn forget(&self, key_id: &str) {
        let mut state = self.state();
        state.generation = state.generation.wrapping_add(1);
        state.entries.remove(key_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> VerifiedKey {
        VerifiedKey {
            secret_hash: vec![1, 2, 3],
            project: ProjectId::new(),
        }
    }

    #[test]
    fn an_entry_lives_for_the_ttl_only() {
        let cache = KeyCache::new(Duration::from_secs(5));
        let t0 = chrono::Utc::now();
        let generation = cache.get("k", t0).err().unwrap_or(u64::MAX);
        cache.insert("k", key(), t0, generation);
        assert!(cache.get("k", t0 + chrono::TimeDelta::seconds(4)).is_ok());
        assert!(cache.get("k", t0 + chrono::TimeDelta::seconds(5)).is_err());
        // A clock that went back does not extend the entry's life.
        assert!(cache.get("k", t0 - chrono::TimeDelta::seconds(1)).is_err());
    }

    #[test]
    fn a_lookup_that_raced_a_revocation_is_not_cached() {
        let cache = KeyCache::new(Duration::from_secs(5));
        let t0 = chrono::Utc::now();
        let before = cache.get("k", t0).err().unwrap_or(u64::MAX);
        cache.forget("k");
        cache.insert("k", key(), t0, before);
        assert!(cache.get("k", t0).is_err());
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let cache = KeyCache::new(Duration::ZERO);
        let t0 = chrono::Utc::now();
        cache.insert("k", key(), t0, 0);
        assert!(cache.get("k", t0).is_err());
    }
}
