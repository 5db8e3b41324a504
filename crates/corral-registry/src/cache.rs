//! Short-lived caches of what the database said about the rows every request reads: verified
//! API keys and provider profiles. They spare the hot paths a database round trip per request.
//!
//! API keys: what is cached per key id is the stored keyed hash of its secret and its project,
//! and only while it was not revoked. A presented key is still checked in full (its secret
//! hashed and compared in constant time with the cached hash), so the cache answers "wrong
//! secret" as well as "right secret" without the database. Provider profiles: the profile of a
//! (project, provider) with its credential decrypted (held in a `SecretString`, zeroized when
//! the entry goes); the absence of one is not cached, so a newly connected profile is seen at
//! once.
//!
//! Invalidation: a change made through a registry (revoking a key; putting, verifying or
//! deleting a profile) drops the entry in every clone of that registry at once, and a
//! generation counter keeps a lookup that raced the change from putting the old answer back. A
//! change made through another process (the admin CLI, another replica) is seen here once the
//! entry is older than the time to live: that is the documented staleness bound
//! ([`DEFAULT_CACHE_TTL`]). A zero TTL disables the caches.
//!
//! Entries age by the registry's [`Clock`](crate::Clock), so tests move time instead of
//! sleeping; an entry from the future (the clock went back) counts as expired.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use corral_domain::Timestamp;

use crate::model::ProjectId;

/// How long a verified key (or a loaded provider profile) is trusted without asking the
/// database again: the longest a key revoked, or a profile changed, by another process (the
/// CLI, another replica) keeps its old meaning here.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(5);

/// More entries than this and the expired ones are swept (and, if that is not enough, all).
const MAX_ENTRIES: usize = 10_000;

/// What the database said about one key id.
#[derive(Clone)]
pub(crate) struct VerifiedKey {
    /// The stored keyed hash of the key's secret.
    pub(crate) secret_hash: Vec<u8>,
    /// The key's project.
    pub(crate) project: ProjectId,
    /// When the key stops authenticating (micros), checked on every use, cached or not.
    pub(crate) expires_at: Option<i64>,
}

struct Entry<V> {
    value: V,
    verified_at: Timestamp,
}

struct State<K, V> {
    entries: HashMap<K, Entry<V>>,
    /// Bumped by every revocation: a lookup that read the database before a revocation must
    /// not put its (now stale) answer into the cache after it.
    generation: u64,
}

/// One cache (shared by the clones of one registry).
pub(crate) struct TtlCache<K, V> {
    ttl: Duration,
    state: Mutex<State<K, V>>,
}

impl<K, V> std::fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: a profile entry holds a credential.
        f.debug_struct("TtlCache").field("ttl", &self.ttl).finish()
    }
}

fn fresh(verified_at: Timestamp, now: Timestamp, ttl: Duration) -> bool {
    match (now - verified_at).to_std() {
        Ok(age) => age < ttl,
        // Negative age: the clock went back. Ask the database again.
        Err(_) => false,
    }
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            state: Mutex::new(State {
                entries: HashMap::new(),
                generation: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<K, V>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer for `key` if it is younger than the TTL, and the generation to pass
    /// to [`TtlCache::insert`] after asking the database otherwise.
    pub(crate) fn get<Q>(&self, key: &Q, now: Timestamp) -> Result<V, u64>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.state();
        match state.entries.get(key) {
            Some(e) if fresh(e.verified_at, now, self.ttl) => Ok(e.value.clone()),
            _ => Err(state.generation),
        }
    }

    /// Caches what the database said at `now`, unless a change happened since `generation`.
    pub(crate) fn insert(&self, key: K, value: V, now: Timestamp, generation: u64) {
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
            key,
            Entry {
                value,
                verified_at: now,
            },
        );
    }

    /// Forgets `key` (it changed, or the database no longer vouches for it).
    pub(crate) fn forget<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut state = self.state();
        state.generation = state.generation.wrapping_add(1);
        state.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type KeyCache = TtlCache<String, VerifiedKey>;

    fn key() -> VerifiedKey {
        VerifiedKey {
            secret_hash: vec![1, 2, 3],
            project: ProjectId::new(),
            expires_at: None,
        }
    }

    #[test]
    fn an_entry_lives_for_the_ttl_only() {
        let cache = KeyCache::new(Duration::from_secs(5));
        let t0 = chrono::Utc::now();
        let generation = cache.get("k", t0).err().unwrap_or(u64::MAX);
        cache.insert("k".to_owned(), key(), t0, generation);
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
        cache.insert("k".to_owned(), key(), t0, before);
        assert!(cache.get("k", t0).is_err());
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let cache = KeyCache::new(Duration::ZERO);
        let t0 = chrono::Utc::now();
        cache.insert("k".to_owned(), key(), t0, 0);
        assert!(cache.get("k", t0).is_err());
    }
}
