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
//!     init.sock           the control socket of the sandbox's init, while one runs
//!     commands/           durable commands: their output, exit and stdin (see `jobs`)
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
/// Name of the sandbox's own root inside its directory (image sandboxes: its layer's
/// filesystem, holding `upper` and `work`).
const FS: &str = "fs";
/// An image sandbox's writable layer, in `fs`.
const UPPER: &str = "upper";
/// overlayfs' work directory, in `fs`.
const WORK: &str = "work";
/// Where an image sandbox's init mounts its view of the image (empty on the host).
const LOWER: &str = "lower";
/// Where an image sandbox's init mounts its root (empty on the host).
const MERGED: &str = "merged";
/// The control socket of the sandbox's init.
pub(crate) const CONTROL: &str = "init.sock";
/// The sandbox's durable commands.
const COMMANDS: &str = "commands";

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
    /// The first of the sandbox's own host uids (and gids), when the server runs as root;
    /// absent: commands run as the server's uid.
    #[serde(default)]
    pub(crate) uid: Option<u32>,
    /// How many host ids from `uid` on are the sandbox's (inner ids 0, 1, …); absent: one
    /// (sandboxes made before ranges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) uid_count: Option<u32>,
    /// The project the sandbox counts against, if the create named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) project: Option<String>,
    /// The Corral deployment whose create made it (the orphan reaper's tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deployment: Option<String>,
    /// Whether the sandbox has a (guarded) network of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) network: bool,
    /// The image the sandbox was made from (absent: the host's system directories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<String>,
    /// That image's root filesystem at create (the sandbox's layer sits on this one, even if
    /// the image's name later names another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image_root: Option<PathBuf>,
    /// The size of the sandbox's own filesystem, reserved on the volume while its image is
    /// there (absent: no image, or a sandbox made before this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) disk_bytes: Option<u64>,
    /// Stopped (`SandboxProvider::stop`): nothing of it runs, its image is unmounted, and no
    /// init may start until a resume clears this. Kept here so it survives a restart.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) stopped: bool,
}

/// First host uid given to a sandbox: far above the ranges distributions hand to users and
/// to subordinate-id maps (`/etc/subuid` starts at 100000).
pub(crate) const FIRST_SANDBOX_UID: u32 = 1_500_000_000;
/// The first uid of the availability probe's range (the 65 536 ids below the sandboxes').
pub(crate) const PROBE_UID: u32 = FIRST_SANDBOX_UID - 65_536;

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
        // Absolute: the inits and their keepers start in `/`, and take these paths as they are.
        Ok(Self {
            root: std::path::absolute(root)?,
        })
    }

    /// The directory of every sandbox.
    pub(crate) fn root(&self) -> PathBuf {
        self.root.clone()
    }

    /// What every sandbox holds, for the capacity caps: its project, the disk its image
    /// reserves (its size, while it is there), and whether it is live.
    pub(crate) fn held(&self) -> std::io::Result<Vec<crate::capacity::Held>> {
        let now = now_unix();
        Ok(self
            .list()?
            .into_iter()
            .map(|m| {
                let image = fs::metadata(self.dir(&m.native_id).join(crate::disk::IMAGE)).ok();
                crate::capacity::Held {
                    disk_bytes: image.map_or(0, |i| m.disk_bytes.unwrap_or(i.len())),
                    live: !m.expired_at(now),
                    project: m.project,
                }
            })
            .collect())
    }

    /// The directory of sandbox `id` (which must be a checked native id).
    pub(crate) fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// The sandbox's own root directory.
    pub(crate) fn fs_root(&self, id: &str) -> PathBuf {
        self.dir(id).join(FS)
    }

    /// Where the control socket of the sandbox's init is.
    pub(crate) fn control_socket(&self, id: &str) -> PathBuf {
        self.dir(id).join(CONTROL)
    }

    /// Where the sandbox's durable commands are (beside its root, out of its reach).
    pub(crate) fn commands_dir(&self, id: &str) -> PathBuf {
        self.dir(id).join(COMMANDS)
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
    pub(crate) fn lock_creates(&self) -> std::io::Result<crate::lock::FileLock> {
        crate::lock::FileLock::exclusive(&self.root.join(".create.lock"))
    }

    /// Creates the directory tree of a new sandbox (its root on a filesystem of its own when
    /// `disks` is given; a copy of a snapshot's image when `from` is), then records `meta`
    /// (last, atomically).
    pub(crate) fn create(
        &self,
        meta: &Metadata,
        disks: Option<&crate::disk::Disks>,
        from: Option<&Restored<'_>>,
    ) -> std::io::Result<()> {
        let dir = self.dir(&meta.native_id);
        fs::create_dir(&dir)?;
        if let Some(disks) = disks {
            fs::create_dir(dir.join(FS))?;
            disks
                .create(&dir, &dir.join(FS), from.map(|f| f.image))
                .map_err(std::io::Error::other)?;
        }
        // The copy's files belong to the snapshotted sandbox's host ids: they become this
        // one's, which no other sandbox shares.
        if let (Some(from), Some(new)) = (from, meta.uid)
            && let Some(old) = from.uid
            && old != new
        {
            let count = meta.uid_count.unwrap_or(1).min(from.uid_count);
            shift_ids(&dir.join(FS), old, new, count)?;
        }
        if meta.image_root.is_some() {
            prepare_layers(&dir, meta.uid)?;
        } else {
            prepare_fs_root(&dir.join(FS), meta.uid)?;
        }
        write_atomically(&dir, META, &serde_json::to_vec_pretty(meta)?)
    }

    /// Where an image sandbox's layers and views are.
    pub(crate) fn layers(&self, id: &str, lower: &Path) -> crate::init::proto::ImageLayers {
        let dir = self.dir(id);
        crate::init::proto::ImageLayers {
            lower: lower.to_owned(),
            lower_view: dir.join(LOWER),
            upper: dir.join(FS).join(UPPER),
            work: dir.join(FS).join(WORK),
            merged: dir.join(MERGED),
        }
    }

    /// The lowest first id of `count` free host ids: ids no recorded sandbox has and no
    /// process holds (a deleted sandbox's ids are free only once its processes are gone).
    /// Callers serialise creates.
    pub(crate) fn free_ids(&self, count: u32) -> std::io::Result<u32> {
        let ranges: Vec<(u32, u32)> = self
            .list()?
            .iter()
            .filter_map(|m| {
                m.uid
                    .map(|u| (u, u.saturating_add(m.uid_count.unwrap_or(1))))
            })
            .collect();
        let in_use = crate::procs::uids_in_use();
        let mut candidates: Vec<u32> = std::iter::once(FIRST_SANDBOX_UID)
            .chain(ranges.iter().map(|(_, end)| *end))
            .collect();
        candidates.sort_unstable();
        for first in candidates {
            let Some(end) = first.checked_add(count).filter(|e| *e < u32::MAX - 1) else {
                continue;
            };
            let overlaps = ranges.iter().any(|(a, b)| first < *b && *a < end)
                || in_use.range(first..end).next().is_some();
            if !overlaps {
                return Ok(first);
            }
        }
        // Ranges freed below the highest one, or ids held by stray processes: look further,
        // one range at a time.
        (FIRST_SANDBOX_UID..u32::MAX - 1)
            .step_by(usize::try_from(count.max(1)).unwrap_or(1))
            .find(|first| {
                let end = first.saturating_add(count);
                !ranges.iter().any(|(a, b)| *first < *b && *a < end)
                    && in_use.range(*first..end).next().is_none()
            })
            .ok_or_else(|| std::io::Error::other("no sandbox ids are left"))
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

    /// Records `meta` again (atomically), as a stop or resume changes it.
    pub(crate) fn save(&self, meta: &Metadata) -> std::io::Result<()> {
        write_atomically(
            &self.dir(&meta.native_id),
            META,
            &serde_json::to_vec_pretty(meta)?,
        )
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

/// What a restore copies a new sandbox from: a snapshot's image, and the first host id and
/// count of the sandbox it was taken of (its files are owned by those).
#[derive(Debug)]
pub(crate) struct Restored<'a> {
    pub(crate) image: &'a Path,
    pub(crate) uid: Option<u32>,
    pub(crate) uid_count: u32,
}

/// Gives every file under `fs_root` (itself included) owned by host ids `old ..  old + count`
/// the same ids from `new` on. Symlinks are not followed and nothing else is mounted there:
/// the tree is a new sandbox's that nothing runs in yet, so no process can swap a directory
/// for a symlink meanwhile. `chown` clears the setuid and setgid bits, which are put back.
fn shift_ids(fs_root: &Path, old: u32, new: u32, count: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let shift = |id: u32| {
        id.checked_sub(old)
            .filter(|off| *off < count)
            .map_or(id, |off| new.saturating_add(off))
    };
    let mut stack = vec![fs_root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path)?;
        let (uid, gid) = (shift(meta.uid()), shift(meta.gid()));
        if (uid, gid) != (meta.uid(), meta.gid()) {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
            if !meta.file_type().is_symlink() && meta.mode() & 0o6000 != 0 {
                fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            }
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
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

/// Makes an image sandbox's layer: `fs/upper` (its writable layer, with `workspace` and a
/// sticky `tmp` in case the image has neither) and `fs/work`, and the empty mount points
/// `lower` and `merged` beside `fs`, out of the sandbox's reach.
fn prepare_layers(dir: &Path, uid: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let fs_root = dir.join(FS);
    let upper = fs_root.join(UPPER);
    fs::create_dir_all(&upper)?;
    prepare_fs_root(&upper, uid)?;
    fs::set_permissions(&upper, fs::Permissions::from_mode(0o755))?;
    fs::create_dir_all(fs_root.join(WORK))?;
    for view in [LOWER, MERGED] {
        fs::create_dir_all(dir.join(view))?;
        fs::set_permissions(dir.join(view), fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes `dir/name` through a temporary file in the same directory and a rename, so a
/// reader sees the old content or the new, never a part.
pub(crate) fn write_atomically(dir: &Path, name: &str, content: &[u8]) -> std::io::Result<()> {
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
            uid_count: None,
            project: None,
            deployment: None,
            network: false,
            image: None,
            image_root: None,
            disk_bytes: None,
            stopped: false,
        };
        assert!(!meta.expired_at(109));
        assert!(meta.expired_at(110));
    }
}
