//! Where sandboxes live on disk and what is recorded about them.
//!
//! ```text
//! <root>/
//!   <native-id>/          one sandbox
//!     meta.json           operation id, creation time, lifetime (written atomically, last)
//!     fs/                 the sandbox's own root: workspace/, tmp/, whatever commands create
//!     disk.img            the filesystem mounted on fs/, when disk quotas are on (see `disk`)
//!     mount.lock          held (flock) while disk.img is mounted again after a reboot
//!     setup.lock          held (flock) while a command of the sandbox is set up
//!   .create.lock          held (flock) while a sandbox is created and picks its uid
//!   .probe-<ulid>/fs/     the root of one process's availability probe (removed after it)
//!   .trash/               sandboxes being deleted (renamed here first, then removed)
//! ```
//!
//! The locks are advisory file locks, not in-process mutexes, so that several server
//! processes sharing one root (replicas on one machine) never pick the same uid or set up two
//! commands of one sandbox at once.
//!
//! A directory without `meta.json` is a create that did not finish: it is not a sandbox.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Name of the metadata file in a sandbox directory.
const META: &str = "meta.json";
/// Name of the sandbox's own root inside its directory.
const FS: &str = "fs";

/// What is recorded about one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Metadata {
    /// The native id (also the directory name).
    pub(crate) native_id: String,
    /// The operation id the create was tagged with (`op_<ulid>`).
    pub(crate) operation_id: String,
    /// Creation time, seconds since the Unix epoch.
    pub(crate) created_at_unix: u64,
    /// The lifetime asked for, if any.
    pub(crate) timeout_seconds: Option<u64>,
    /// When the lifetime ends, seconds since the Unix epoch (absent: never).
    pub(crate) expires_at_unix: Option<u64>,
    /// The sandbox's own host uid (and gid), when the server runs as root; absent: commands
    /// run as the server's uid.
    #[serde(default)]
    pub(crate) uid: Option<u32>,
}

/// First host uid given to a sandbox: far above the ranges distributions hand to users and
/// to subordinate-id maps (`/etc/subuid` starts at 100000).
pub(crate) const FIRST_SANDBOX_UID: u32 = 1_500_000_000;
/// The uid of the availability probe.
pub(crate) const PROBE_UID: u32 = FIRST_SANDBOX_UID - 1;

impl Metadata {
    /// Whether the lifetime has ended at `now` (seconds since the epoch).
    pub(crate) fn expired_at(&self, now: u64) -> bool {
        self.expires_at_unix.is_some_and(|end| now >= end)
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh native id: a lowercase ULID (26 characters of `[0-9a-z]`).
pub(crate) fn new_native_id() -> String {
    ulid::Ulid::generate().to_string().to_ascii_lowercase()
}

/// Whether `id` has the shape of a native id. Checked before an id becomes a path, so a
/// caller cannot name `..` or another directory.
pub(crate) fn is_native_id(id: &str) -> bool {
    id.len() == 26
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

/// The sandboxes under one root directory.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    root: PathBuf,
}

impl Store {
    /// The store at `root` (created if missing).
    pub(crate) fn open(root: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        fs::create_dir_all(root)?;
        // Only the server's uid may enter: a sandbox's root is that uid on the host, so a file
        // a command made setuid would otherwise be a way up for any local user.
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
        fs::create_dir_all(root.join(".trash"))?;
        Ok(Self {
            root: root.to_owned(),
        })
    }

    /// The directory of sandbox `id` (which must be a checked native id).
    pub(crate) fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// The sandbox's own root directory.
    pub(crate) fn fs_root(&self, id: &str) -> PathBuf {
        self.dir(id).join(FS)
    }

    /// A fresh root for this process's availability probe, owned by `uid`: its own directory,
    /// so probes of two processes starting at once never share mount points. Remove it with
    /// [`Store::remove_probe`].
    pub(crate) fn probe_root(&self, uid: Option<u32>) -> std::io::Result<PathBuf> {
        let dir = self
            .root
            .join(format!(".probe-{}", new_native_id()))
            .join(FS);
        prepare_fs_root(&dir, uid)?;
        Ok(dir)
    }

    /// Removes a probe root made by [`Store::probe_root`] (its `fs` directory and parent).
    pub(crate) fn remove_probe(&self, fs_root: &Path) {
        if let Some(dir) = fs_root.parent()
            && dir.parent() == Some(self.root.as_path())
        {
            let _ = fs::remove_dir_all(dir);
        }
    }

    /// Holds the lock that serialises creates (and so the choice of uids) across processes.
    pub(crate) fn lock_creates(&self) -> std::io::Result<FileLock> {
        FileLock::exclusive(&self.root.join(".create.lock"))
    }

    /// Creates the directory tree of a new sandbox (its root on a filesystem of its own when
    /// `disks` is given), then records `meta` (last, atomically).
    pub(crate) fn create(
        &self,
        meta: &Metadata,
        disks: Option<&crate::disk::Disks>,
    ) -> std::io::Result<()> {
        let dir = self.dir(&meta.native_id);
        fs::create_dir(&dir)?;
        if let Some(disks) = disks {
            fs::create_dir(dir.join(FS))?;
            disks
                .create(&dir, &dir.join(FS))
                .map_err(std::io::Error::other)?;
        }
        prepare_fs_root(&dir.join(FS), meta.uid)?;
        write_atomically(&dir, META, &serde_json::to_vec_pretty(meta)?)
    }

    /// The lowest sandbox uid that no recorded sandbox has and no process holds (a deleted
    /// sandbox's uid is free only once its processes are gone). Callers serialise creates.
    pub(crate) fn free_uid(&self) -> std::io::Result<u32> {
        let mut taken: std::collections::BTreeSet<u32> =
            self.list()?.iter().filter_map(|m| m.uid).collect();
        taken.extend(crate::procs::uids_in_use());
        (FIRST_SANDBOX_UID..u32::MAX - 1)
            .find(|uid| !taken.contains(uid))
            .ok_or_else(|| std::io::Error::other("no sandbox uid is left"))
    }

    /// The metadata of sandbox `id`, or `None` when there is no such sandbox.
    pub(crate) fn load(&self, id: &str) -> std::io::Result<Option<Metadata>> {
        match fs::read(self.dir(id).join(META)) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every recorded sandbox (unreadable entries are skipped: a half-written create or a
    /// foreign file is not a sandbox).
    pub(crate) fn list(&self) -> std::io::Result<Vec<Metadata>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !is_native_id(&name) {
                continue;
            }
            if let Ok(Some(meta)) = self.load(&name) {
                out.push(meta);
            }
        }
        Ok(out)
    }

    /// Removes the sandbox's files but keeps its metadata, so it reads as expired.
    pub(crate) fn reclaim_files(&self, id: &str) -> std::io::Result<()> {
        let fs_root = self.fs_root(id);
        crate::disk::unmount(&fs_root).map_err(std::io::Error::other)?;
        match fs::remove_file(self.dir(id).join(crate::disk::IMAGE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !fs_root.exists() {
            return Ok(());
        }
        let trash = self
            .root
            .join(".trash")
            .join(format!("{id}-{}", new_native_id()));
        fs::rename(&fs_root, &trash)?;
        fs::remove_dir_all(&trash)
    }

    /// Removes everything of sandbox `id`; removing what is gone is not an error.
    ///
    /// The directory is first renamed into `.trash`, so the sandbox disappears at once and a
    /// removal interrupted half-way never leaves a half sandbox behind.
    pub(crate) fn delete(&self, id: &str) -> std::io::Result<()> {
        // A mount point cannot be renamed, nor its files removed through it by accident.
        crate::disk::unmount(&self.fs_root(id)).map_err(std::io::Error::other)?;
        let trash = self
            .root
            .join(".trash")
            .join(format!("{id}-{}", new_native_id()));
        match fs::rename(self.dir(id), &trash) {
            Ok(()) => fs::remove_dir_all(&trash),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes creates that a crash interrupted: directories of a native id without
    /// `meta.json` (which is written last), unmounting their image first. Under the create
    /// lock, so no create of another process sharing the root is under way.
    pub(crate) fn remove_unfinished(&self) {
        let Ok(_one_at_a_time) = self.lock_creates() else {
            return;
        };
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().filter(|n| is_native_id(n)) else {
                continue;
            };
            if !self.dir(id).join(META).exists() {
                // A failure leaves it for the next start.
                let _ = self.delete(id);
            }
        }
    }

    /// Removes leftovers of deletions that a crash interrupted.
    pub(crate) fn empty_trash(&self) {
        if let Ok(entries) = fs::read_dir(self.root.join(".trash")) {
            for entry in entries.flatten() {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

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
}

/// The lock held while a command of the sandbox whose root is `fs_root` is set up.
pub(crate) fn setup_lock_path(fs_root: &Path) -> PathBuf {
    fs_root.with_file_name("setup.lock")
}

/// Makes a sandbox root: `workspace` (home and default cwd) and a sticky, world-writable
/// `tmp`, as on any Linux system, owned by the sandbox's uid (root inside).
fn prepare_fs_root(fs_root: &Path, uid: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::create_dir_all(fs_root.join("workspace"))?;
    let tmp = fs_root.join("tmp");
    fs::create_dir_all(&tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))?;
    if let Some(uid) = uid {
        for dir in [fs_root.to_owned(), fs_root.join("workspace"), tmp] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(uid))?;
        }
    }
    Ok(())
}

/// Writes `dir/name` through a temporary file in the same directory and a rename, so a
/// reader sees the old content or the new, never a part.
fn write_atomically(dir: &Path, name: &str, content: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}", new_native_id()));
    let result = (|| {
        let mut file = fs::File::create_new(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_ids_are_checked_before_they_become_paths() {
        assert!(is_native_id(&new_native_id()));
        for bad in [
            "..",
            "",
            "../../etc/passwd",
            "01J0000000000000000000000A",
            ".trash",
        ] {
            assert!(!is_native_id(bad), "{bad}");
        }
    }

    #[test]
    fn expiry_is_inclusive_of_the_end() {
        let meta = Metadata {
            native_id: new_native_id(),
            operation_id: "op_x".into(),
            created_at_unix: 100,
            timeout_seconds: Some(10),
            expires_at_unix: Some(110),
            uid: None,
        };
        assert!(!meta.expired_at(109));
        assert!(meta.expired_at(110));
    }
}
