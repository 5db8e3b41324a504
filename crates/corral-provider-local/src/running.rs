//! Bookkeeping of running commands: who may set up when, and how to cancel them.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The cancel handles (pipe write ends) of the commands running now, by sandbox.
#[derive(Default)]
pub(crate) struct Running {
    next: AtomicU64,
    handles: Mutex<HashMap<u64, (String, OwnedFd)>>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (String, OwnedFd)>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the cancel handle of a command of `native_id` until the guard is dropped.
    pub(crate) fn register(self: &Arc<Self>, native_id: &str, cancel: OwnedFd) -> RunningGuard {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(token, (native_id.to_owned(), cancel));
        RunningGuard {
            running: self.clone(),
            token,
        }
    }

    /// Drops the cancel handles of every command of `native_id`: their workers kill them.
    pub(crate) fn cancel_all(&self, native_id: &str) {
        self.lock().retain(|_, (id, _)| id != native_id);
    }
}

/// Drops a command's cancel handle when its call ends.
pub(crate) struct RunningGuard {
    running: Arc<Running>,
    token: u64,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.lock().remove(&self.token);
    }
}
