//! Completed records this process has seen, kept in memory so a replay needs no database
//! round trip.
//!
//! Why this is safe without invalidation: a completed record never changes until it expires
//! (`complete` is the last transition; only an expired record is replaced or reaped), and an
//! entry is never served at or after its record's `expires_at`. So an entry says exactly what
//! the database would, in every process and replica. Bounded: at most [`MAX_ENTRIES`] entries
//! (expired ones are swept first, then everything) and bodies up to [`MAX_BODY`] bytes (a
//! create's answer is a few hundred); anything else is read from the database as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Entries kept at most.
const MAX_ENTRIES: usize = 4096;
/// Larger bodies are not kept.
const MAX_BODY: usize = 16 * 1024;

/// A completed record: what a claim needs to answer without the database.
#[derive(Debug, Clone)]
pub(crate) struct Completed {
    pub(crate) fingerprint: [u8; 32],
    pub(crate) status: u16,
    pub(crate) body: Arc<[u8]>,
    /// The record's `expires_at` (µs since the epoch, database clock).
    pub(crate) expires_at: i64,
}

/// (project id, idempotency key) → its completed record.
#[derive(Debug, Default)]
pub(crate) struct Replays {
    entries: Mutex<HashMap<(String, String), Completed>>,
}

impl Replays {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Completed>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The completed record of `(project, key)` if it is known and not expired at `now_us`.
    pub(crate) fn get(&self, project: &str, key: &str, now_us: i64) -> Option<Completed> {
        let entries = self.entries();
        // A tuple of Strings cannot be looked up by (&str, &str); the key is built once.
        let found = entries.get(&(project.to_owned(), key.to_owned()))?;
        (found.expires_at > now_us).then(|| found.clone())
    }

    /// Remembers a completed record (unless its body is too large to keep).
    pub(crate) fn put(&self, project: &str, key: &str, completed: Completed, now_us: i64) {
        if completed.body.len() > MAX_BODY {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, c| c.expires_at > now_us);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert((project.to_owned(), key.to_owned()), completed);
    }
}
