//! Advisory file locks (`flock`), which serialise work across every process sharing a
//! sandboxes root (replicas on one machine), not only across threads of one.
//!
//! A module of its own so that `store` (which names the locks) and `disk` (which takes the
//! remount lock) both use it without importing each other.

use std::fs;
use std::path::{Path, PathBuf};

/// An exclusive advisory lock on a file, released when dropped (the file is closed).
#[derive(Debug)]
pub(crate) struct FileLock {
    // Held only to keep the lock: closing the file releases it.
    _file: fs::File,
}

impl FileLock {
    /// Blocks until this process holds the lock on `path` (created, mode 0600, if missing).
    pub(crate) fn exclusive(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(Self { _file: file })
    }

    /// The lock on `path` if no process holds it now; `None` if one does, or there is no
    /// such file (never created).
    pub(crate) fn try_existing(path: &Path) -> Option<Self> {
        let file = fs::OpenOptions::new().write(true).open(path).ok()?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(Self { _file: file })
    }
}

/// The lock held while the sandbox whose root is `fs_root` is set up (its init started).
pub(crate) fn setup_lock_path(fs_root: &Path) -> PathBuf {
    fs_root.with_file_name("setup.lock")
}
