//! Snapshots of sandboxes' own filesystems: a copy of the sandbox's image, kept under the
//! root until deleted, which restores copy into new sandboxes.
//!
//! ```text
//! <root>/.snapshots/<snapshot-id>/disk.img        the copy (a reflink clone, or sparse)
//! <root>/.snapshots/<snapshot-id>/snapshot.json   what it is a copy of; written before the
//!                                                 directory gets its name
//! <root>/.snapshots/.tmp-<snapshot-id>/           one being made (`source`: the sandbox,
//!                                                 whose filesystem may be frozen meanwhile)
//! <root>/.snapshots/.tmp-<snapshot-id>.lock       held (flock) by the process making it
//! ```
//!
//! A snapshot exists only once its directory has its final name, which a rename gives it
//! when the copy and its record are complete and synced: a server killed half-way leaves a
//! `.tmp-` directory, never a snapshot that reads as ready. [`Snapshots::clean`] (at each
//! start) removes the `.tmp-` directories whose lock nobody holds, after thawing their
//! sandbox's filesystem in case the server died while it was frozen.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use snafu::{ResultExt as _, Snafu};

use crate::lock::FileLock;

/// The directory of snapshots, under the sandboxes root.
pub(crate) const DIR: &str = ".snapshots";
/// A snapshot's record.
const META: &str = "snapshot.json";
/// Names of snapshots being made start with this.
const TEMP: &str = ".tmp-";
/// In a snapshot being made: the native id of the sandbox it copies.
const SOURCE: &str = "source";

#[derive(Debug, Snafu)]
pub(crate) enum Error {
    #[snafu(display("cannot {what} {}: {source}", path.display()))]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a snapshot is a copy of: enough to restore it into a new sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SnapshotMeta {
    /// Its native id (a lowercase ULID, as sandboxes').
    pub(crate) native_id: String,
    /// Corral's id for it.
    pub(crate) snapshot_id: String,
    /// The client's name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The sandbox it was taken of.
    pub(crate) sandbox: String,
    /// That sandbox's project (the snapshot's disk counts against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) project: Option<String>,
    /// When it was taken, in seconds since the epoch.
    pub(crate) created_at_unix: u64,
    /// That sandbox's image name and root filesystem (the copy is its writable layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image_root: Option<PathBuf>,
    /// That sandbox's first host id and count: the copy's files are owned by them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) uid_count: Option<u32>,
    /// Whether that sandbox had a guarded network (restores get one too).
    #[serde(default)]
    pub(crate) network: bool,
    /// Bytes the copy takes on the volume.
    pub(crate) size_bytes: u64,
    /// `reflink` or `sparse`.
    pub(crate) copied: String,
}

/// The snapshots under one sandboxes root.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots {
    dir: PathBuf,
    /// Where deletions go first (the root's `.trash`), so a removal interrupted half-way
    /// never leaves a half snapshot under its name.
    trash: PathBuf,
}

impl Snapshots {
    /// The snapshots of the sandboxes root `root` (their directory made if missing).
    pub(crate) fn open(root: &Path) -> std::io::Result<Self> {
        let dir = root.join(DIR);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            trash: root.join(".trash"),
        })
    }

    /// The image of snapshot `id` (a checked native id).
    pub(crate) fn image(&self, id: &str) -> PathBuf {
        self.dir.join(id).join(crate::disk::IMAGE)
    }

    /// The record of snapshot `id` (a checked native id), or `None` if there is none.
    pub(crate) fn load(&self, id: &str) -> Result<Option<SnapshotMeta>, Error> {
        let path = self.dir.join(id).join(META);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(std::io::Error::from)
                .context(IoSnafu { what: "read", path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).context(IoSnafu { what: "read", path }),
        }
    }

    /// What every snapshot, and every one being made, holds on the volume (for the disk
    /// caps; a snapshot is no live sandbox).
    pub(crate) fn held(&self) -> Vec<crate::capacity::Held> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_str()?.to_owned();
                let id = name.strip_prefix(TEMP).unwrap_or(&name);
                if !crate::store::is_native_id(id) {
                    return None;
                }
                let project = self.load(id).ok().flatten().and_then(|m| m.project);
                Some(crate::capacity::Held {
                    project,
                    disk_bytes: crate::disk::allocated_bytes(
                        &entry.path().join(crate::disk::IMAGE),
                    ),
                    live: false,
                })
            })
            .collect()
    }

    /// Starts snapshot `id` of sandbox `sandbox`: its lock taken, then its `.tmp-` directory
    /// made. The caller holds the root's create lock, as [`Snapshots::clean`] does, so a
    /// start-up never finds the directory without its lock held.
    pub(crate) fn begin(&self, id: &str, sandbox: &str) -> Result<Pending, Error> {
        let lock_path = self.dir.join(format!("{TEMP}{id}.lock"));
        let lock = FileLock::exclusive(&lock_path).context(IoSnafu {
            what: "lock",
            path: &lock_path,
        })?;
        let dir = self.dir.join(format!("{TEMP}{id}"));
        let pending = Pending {
            dir: dir.clone(),
            name: self.dir.join(id),
            lock_path,
            _lock: lock,
            done: false,
        };
        fs::create_dir(&dir).context(IoSnafu {
            what: "create",
            path: &dir,
        })?;
        // Before the sandbox's filesystem is frozen: a start-up after a crash knows which
        // one to thaw.
        fs::write(dir.join(SOURCE), sandbox).context(IoSnafu {
            what: "write",
            path: dir.join(SOURCE),
        })?;
        Ok(pending)
    }

    /// Deletes snapshot `id` (a checked native id); one that is not there is not an error.
    pub(crate) fn delete(&self, id: &str) -> Result<(), Error> {
        let trash = self
            .trash
            .join(format!("snapshot-{id}-{}", crate::store::new_native_id()));
        match fs::rename(self.dir.join(id), &trash) {
            Ok(()) => fs::remove_dir_all(&trash).context(IoSnafu {
                what: "remove",
                path: &trash,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).context(IoSnafu {
                what: "delete",
                path: self.dir.join(id),
            }),
        }
    }

    /// Removes what interrupted snapshots left (a server killed while it made one): every
    /// `.tmp-` directory whose lock no process holds, after `thaw` is called with the
    /// native id of the sandbox it was copying; and any directory under a snapshot's name
    /// without a record. The caller holds the root's create lock. Best effort: a failure
    /// leaves it for the next start. Returns how many it removed.
    pub(crate) fn clean(&self, thaw: impl Fn(&str)) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let path = entry.path();
            if let Some(id) = name.strip_prefix(TEMP) {
                let (id, is_lock) = match id.strip_suffix(".lock") {
                    Some(id) => (id, true),
                    None => (id, false),
                };
                let lock_path = self.dir.join(format!("{TEMP}{id}.lock"));
                // Locked: another process sharing the root is making it right now.
                let lock = FileLock::try_existing(&lock_path);
                if lock.is_none() && lock_path.exists() {
                    continue;
                }
                if is_lock {
                    // The directory's own entry removes it; a lock left alone goes here.
                    if !self.dir.join(format!("{TEMP}{id}")).exists() {
                        let _ = fs::remove_file(&lock_path);
                    }
                    continue;
                }
                if let Ok(sandbox) = fs::read_to_string(path.join(SOURCE))
                    && crate::store::is_native_id(sandbox.trim())
                {
                    thaw(sandbox.trim());
                }
                if fs::remove_dir_all(&path).is_ok() {
                    removed += 1;
                    tracing::info!(snapshot = id, "removed a snapshot that was never finished");
                }
                let _ = fs::remove_file(&lock_path);
            } else if crate::store::is_native_id(&name) && !path.join(META).exists() {
                let _ = fs::remove_dir_all(&path);
                removed += 1;
            }
        }
        removed
    }
}

/// A snapshot being made: its `.tmp-` directory, removed when this is dropped unless
/// [`Pending::finish`] gave it its name.
#[derive(Debug)]
pub(crate) struct Pending {
    dir: PathBuf,
    name: PathBuf,
    lock_path: PathBuf,
    _lock: FileLock,
    done: bool,
}

impl Pending {
    /// Where the copy goes.
    pub(crate) fn image(&self) -> PathBuf {
        self.dir.join(crate::disk::IMAGE)
    }

    /// Records `meta`, and gives the snapshot its name: from here on it is ready.
    pub(crate) fn finish(mut self, meta: &SnapshotMeta) -> Result<(), Error> {
        let io = |what: &'static str, path: &Path| IoSnafu {
            what,
            path: path.to_owned(),
        };
        let json = serde_json::to_vec_pretty(meta)
            .map_err(std::io::Error::from)
            .context(io("encode", &self.dir))?;
        crate::store::write_atomically(&self.dir, META, &json).context(io("write", &self.dir))?;
        let _ = fs::remove_file(self.dir.join(SOURCE));
        sync_dir(&self.dir).context(io("sync", &self.dir))?;
        fs::rename(&self.dir, &self.name).context(io("name", &self.name))?;
        self.done = true;
        if let Some(parent) = self.name.parent() {
            sync_dir(parent).context(io("sync", parent))?;
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.dir);
        }
        // Removed while still held, so no other process takes a lock on a name about to go.
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// `fsync` of a directory, so the entries made in it (and renames into it) are durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
