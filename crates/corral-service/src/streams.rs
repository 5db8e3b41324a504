//! The bound on live streams (`GET /v1/events?follow`, a command's output follow) one API key
//! holds open at once: each holds a connection and a task until its client goes, so without
//! it one key could hold hundreds. A stream takes a permit when it starts and gives it back
//! when it is dropped (its client gone or the stream ended). Callers without a key (the
//! console's, an embedding service's) count against their project.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::Caller;
use crate::error::ServiceError;

/// Live streams one API key may hold by default.
pub const DEFAULT_STREAMS_PER_KEY: usize = 64;

/// The streams open now, per key.
#[derive(Debug)]
pub(crate) struct Streams {
    per_key: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream's place, given back when dropped.
#[derive(Debug)]
pub(crate) struct StreamPermit {
    streams: Arc<Streams>,
    key: String,
}

impl Streams {
    pub(crate) fn new(per_key: usize) -> Arc<Self> {
        Arc::new(Self {
            per_key,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A permit for one more stream of `caller`'s key, or `rate_limited` when it holds its
    /// limit already.
    pub(crate) fn acquire(self: &Arc<Self>, caller: &Caller) -> Result<StreamPermit, ServiceError> {
        let key = match caller.key_id() {
            Some(id) => format!("key:{id}"),
            None => format!("project:{}", caller.project_id()),
        };
        let mut open = self.lock();
        let held = open.entry(key.clone()).or_insert(0);
        if *held >= self.per_key {
            return Err(ServiceError::RateLimited {
                message: format!(
                    "this API key holds {} live streams already, its limit: close one first",
                    self.per_key
                ),
                retry_after: Some(1),
            });
        }
        *held += 1;
        Ok(StreamPermit {
            streams: Arc::clone(self),
            key,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Each critical section is a map update that cannot panic half-way.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_limit_and_a_dropped_stream_frees_its_place() {
        let streams = Streams::new(2);
        let (a, b) = (
            Caller::trusted("prj_01hzzzzzzzzzzzzzzzzzzzzzza".parse().unwrap()),
            Caller::trusted("prj_01hzzzzzzzzzzzzzzzzzzzzzzb".parse().unwrap()),
        );
        let first = streams.acquire(&a).unwrap();
        let _second = streams.acquire(&a).unwrap();
        let refused = streams.acquire(&a).unwrap_err();
        assert!(
            matches!(refused, ServiceError::RateLimited { .. }),
            "{refused}"
        );
        // Another project is not held back by the first one's streams.
        let _other = streams.acquire(&b).unwrap();
        drop(first);
        let _again = streams.acquire(&a).unwrap();
        assert!(streams.acquire(&a).is_err());
    }
}
