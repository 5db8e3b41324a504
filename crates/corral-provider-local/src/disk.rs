//! A filesystem of its own for each sandbox: a preallocated ext4 image, loop-mounted on the
//! sandbox's root.
//!
//! ```text
//! <root>/<native-id>/disk.img   the image (LocalLimits::disk_bytes, allocated at create)
//! <root>/<native-id>/fs/        its mount point: the sandbox's root
//! ```
//!
//! Why an image: the volume that holds the sandboxes usually holds the database too, and
//! neither rlimits (per file) nor cgroups (no disk space controller) bound what a sandbox
//! writes in total. A full image answers `ENOSPC` to that sandbox alone. Preallocating it
//! (`fallocate`) reserves the space when the sandbox is created, so sandboxes together can
//! never take the database's free space either; a create that cannot reserve it, or would
//! leave less than `disk_reserve_bytes` free, fails instead. Project quotas would avoid the
//! image but need a filesystem made or remounted with `prjquota`, which the server cannot
//! arrange; a `tmpfs` would cost memory and lose the files at reboot.
//!
//! The mount lives in the server's mount namespace; after a reboot (or a server started in
//! a fresh mount namespace) it is mounted again when the sandbox is next named. Needs root,
//! `mkfs.ext4` (e2fsprogs) and loop devices; otherwise [`Disks::detect`] says why, and
//! sandboxes live on the root's filesystem without a quota.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use snafu::{ResultExt as _, Snafu};

/// e2fsprogs' `mkfs.ext4`.
const MKFS: &str = "/usr/sbin/mkfs.ext4";
/// The image's name in a sandbox directory.
pub(crate) const IMAGE: &str = "disk.img";

#[derive(Debug, Snafu)]
pub(crate) enum Error {
    #[snafu(display(
        "not enough disk space for a {size}-byte sandbox: {free} bytes free on {}, and \
         {reserve} must stay free",
        path.display()
    ))]
    NoSpace {
        path: PathBuf,
        size: u64,
        free: u64,
        reserve: u64,
    },
    #[snafu(display("cannot {what} {}: {source}", path.display()))]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[snafu(display("{tool} failed on {}: {message}", path.display()))]
    Tool {
        tool: &'static str,
        path: PathBuf,
        message: String,
    },
}

/// The disk images of every sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Disks {
    size: u64,
    reserve: u64,
    /// The formatted, sparse image every new one is copied from (made on first use).
    template: PathBuf,
}

fn run(tool: &'static str, args: &[&std::ffi::OsStr], path: &Path) -> Result<(), Error> {
    let out = Command::new(tool)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .context(IoSnafu {
            what: "run a tool for",
            path,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Tool {
            tool,
            path: path.to_owned(),
            message: corral_provider::excerpt(&String::from_utf8_lossy(&out.stderr), 300),
        })
    }
}

/// Whether `dir` is a mount point (its device differs from its parent's).
pub(crate) fn is_mount_point(dir: &Path) -> bool {
    let (Ok(me), Some(Ok(parent))) = (fs::metadata(dir), dir.parent().map(fs::metadata)) else {
        return false;
    };
    me.dev() != parent.dev()
}

impl Disks {
    /// Images of `size` bytes, keeping `reserve` bytes free; or why there can be none here.
    pub(crate) fn detect(size: u64, reserve: u64, root: &Path) -> Result<Self, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("the server is not root, so it cannot mount sandbox filesystems".into());
        }
        for tool in [MKFS] {
            if !Path::new(tool).exists() {
                return Err(format!("{tool} is missing"));
            }
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("there are no loop devices (/dev/loop-control)".into());
        }
        Ok(Self {
            size,
            reserve,
            template: root.join(format!(".disk-template-{size}.img")),
        })
    }

    /// Size of each sandbox's filesystem, in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Whether the volume that holds `dir` has room for `bytes` more, keeping the reserve.
    pub(crate) fn check_room(&self, dir: &Path, bytes: u64) -> Result<(), Error> {
        let stat = rustix::fs::statvfs(dir).map_err(|e| Error::Io {
            what: "measure the free space of",
            path: dir.to_owned(),
            source: e.into(),
        })?;
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        if free < bytes.saturating_add(self.reserve) {
            return Err(Error::NoSpace {
                path: dir.to_owned(),
                size: bytes,
                free,
                reserve: self.reserve,
            });
        }
        Ok(())
    }

    /// Makes `dir/disk.img` and mounts it on `fs_root` (an empty directory): a new
    /// filesystem, or a copy of the image `from` (a snapshot's; its own size). The caller
    /// serialises creates, so the free-space check and the allocation go together.
    pub(crate) fn create(
        &self,
        dir: &Path,
        fs_root: &Path,
        from: Option<&Path>,
    ) -> Result<(), Error> {
        let source = match from {
            Some(image) => image.to_owned(),
            None => self.template()?,
        };
        let size = match from {
            Some(image) => fs::metadata(image)
                .context(IoSnafu {
                    what: "measure",
                    path: image,
                })?
                .len(),
            None => self.size,
        };
        self.check_room(dir, size)?;
        let image = dir.join(IMAGE);
        // Every block of the image reserved on the volume (a clone's shared blocks aside).
        copy_image(&source, &image, Some(size))?;
        mount(dir, fs_root)?;
        // A sandbox root starts empty, as without an image.
        let _ = fs::remove_dir(fs_root.join("lost+found"));
        Ok(())
    }
}

impl Disks {
    /// The template image of this size, formatted once (on the first create) and kept.
    /// Callers serialise creates, across processes too.
    fn template(&self) -> Result<PathBuf, Error> {
        if self.template.is_file() {
            return Ok(self.template.clone());
        }
        let tmp = self.template.with_extension(format!(
            "tmp-{}",
            ulid::Ulid::generate().to_string().to_ascii_lowercase()
        ));
        let made = (|| {
            let file = fs::File::create_new(&tmp).context(IoSnafu {
                what: "create",
                path: &tmp,
            })?;
            file.set_len(self.size).context(IoSnafu {
                what: "size",
                path: &tmp,
            })?;
            drop(file);
            // A 4 MiB journal (the smallest). Inode tables and journal are zeroed here, not
            // lazily by the kernel after mounting: the kernel zeroes with `WRITE_ZEROES`,
            // which the loop driver turns into holes punched in the image, giving preallocated
            // blocks back to the volume (to be taken again later). In this sparse template
            // mke2fs "zeroes" by leaving holes, and a copy's holes are preallocated (read as
            // zeros). No discard, for the same reason. 0.5 % is reserved for host root, which
            // the sandbox never is: a full sandbox can still be set up (its init makes mount
            // points in its root), so it can free space.
            run(
                MKFS,
                &[
                    "-q".as_ref(),
                    "-F".as_ref(),
                    "-m".as_ref(),
                    "0.5".as_ref(),
                    "-J".as_ref(),
                    "size=4".as_ref(),
                    "-E".as_ref(),
                    "lazy_itable_init=0,lazy_journal_init=0,nodiscard".as_ref(),
                    tmp.as_os_str(),
                ],
                &tmp,
            )?;
            fs::rename(&tmp, &self.template).context(IoSnafu {
                what: "keep",
                path: &self.template,
            })
        })();
        if made.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        made.map(|()| self.template.clone())
    }
}

/// How [`copy_image`] copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Copied {
    /// A reflink clone (`FICLONE`): the copy shares the source's blocks until either writes.
    Reflink,
    /// The blocks that hold data, copied (`copy_file_range`); holes stay holes.
    Sparse,
}

/// Copies the image `from` to the new file `to` (which must not exist) and syncs it: a
/// reflink clone where the filesystem supports it (Btrfs, XFS), else its data regions.
/// `allocate`: every block of that many bytes is reserved too (a sandbox's image), else the
/// copy holds only the data (a snapshot). A failure removes what was made.
pub(crate) fn copy_image(from: &Path, to: &Path, allocate: Option<u64>) -> Result<Copied, Error> {
    let source = fs::File::open(from).context(IoSnafu {
        what: "open",
        path: from,
    })?;
    let file = fs::File::create_new(to).context(IoSnafu {
        what: "create",
        path: to,
    })?;
    let copied = (|| {
        let io = |what: &'static str| {
            let path = to.to_owned();
            move |e: rustix::io::Errno| Error::Io {
                what,
                path,
                source: e.into(),
            }
        };
        let len = source
            .metadata()
            .context(IoSnafu {
                what: "measure",
                path: from,
            })?
            .len();
        let how = if rustix::fs::ioctl_ficlone(&file, &source).is_ok() {
            Copied::Reflink
        } else {
            // Not supported here (ext4, or another volume): copy what holds data. The
            // length first, so trailing holes are kept.
            file.set_len(len).context(IoSnafu {
                what: "size",
                path: to,
            })?;
            if let Some(size) = allocate {
                // Unwritten extents (fast, read as zeros); the data is copied over them.
                rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, size)
                    .map_err(io("allocate"))?;
            }
            for (start, end) in data_regions(&source).map_err(io("read the source of"))? {
                let mut at_from = start;
                let mut at_to = start;
                while at_from < end {
                    let n = usize::try_from(end - at_from).unwrap_or(usize::MAX);
                    let n = rustix::fs::copy_file_range(
                        &source,
                        Some(&mut at_from),
                        &file,
                        Some(&mut at_to),
                        n,
                    )
                    .map_err(io("copy into"))?;
                    if n == 0 {
                        break;
                    }
                }
            }
            Copied::Sparse
        };
        if let (Copied::Reflink, Some(size)) = (how, allocate) {
            // Holes of the clone reserved; its shared blocks are not (see the module docs).
            rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, size)
                .map_err(io("allocate"))?;
        }
        // Durable before anything records that the copy exists.
        file.sync_all().context(IoSnafu {
            what: "sync",
            path: to,
        })?;
        Ok(how)
    })();
    if copied.is_err() {
        drop(file);
        let _ = fs::remove_file(to);
    }
    copied
}

/// Bytes of the volume `path` takes (its allocated blocks).
pub(crate) fn allocated_bytes(path: &Path) -> u64 {
    fs::symlink_metadata(path).map_or(0, |m| m.blocks().saturating_mul(512))
}

/// A sandbox's filesystem frozen (`FIFREEZE`): every write into it waits, and everything
/// written before is on its image, until this is dropped (`FITHAW`).
pub(crate) struct Frozen {
    dir: fs::File,
    path: PathBuf,
}

impl Frozen {
    /// Freezes the filesystem mounted on `fs_root`.
    pub(crate) fn new(fs_root: &Path) -> Result<Self, Error> {
        let dir = fs::File::open(fs_root).context(IoSnafu {
            what: "open",
            path: fs_root,
        })?;
        crate::sys::freeze(rustix::fd::AsFd::as_fd(&dir)).context(IoSnafu {
            what: "freeze",
            path: fs_root,
        })?;
        Ok(Self {
            dir,
            path: fs_root.to_owned(),
        })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = crate::sys::thaw(rustix::fd::AsFd::as_fd(&self.dir)) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot thaw a sandbox's filesystem");
        }
    }
}

/// Thaws the filesystem mounted on `fs_root` if it is frozen (left so by a server that died
/// while it snapshotted). Best effort: one that is not frozen answers `EINVAL`.
pub(crate) fn thaw(fs_root: &Path) {
    if !is_mount_point(fs_root) {
        return;
    }
    if let Ok(dir) = fs::File::open(fs_root) {
        let _ = crate::sys::thaw(rustix::fd::AsFd::as_fd(&dir));
    }
}

/// The regions of `file` that hold data (`SEEK_DATA` / `SEEK_HOLE`): unwritten extents and
/// holes read as zeros and are left out.
fn data_regions(file: &fs::File) -> Result<Vec<(u64, u64)>, rustix::io::Errno> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let start = match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(pos)) {
            Ok(at) => at,
            Err(rustix::io::Errno::NXIO) => return Ok(out),
            Err(e) => return Err(e),
        };
        let end = rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(start))?;
        out.push((start, end));
        pos = end;
    }
}

/// Mounts the sandbox's image on `fs_root` unless it already is (after a reboot, or in a
/// new mount namespace). A sandbox without an image (made without a quota) is left as is.
pub(crate) fn ensure_mounted(dir: &Path, fs_root: &Path) -> Result<(), Error> {
    if !dir.join(IMAGE).exists() || is_mount_point(fs_root) {
        return Ok(());
    }
    let _one_at_a_time =
        crate::lock::FileLock::exclusive(&dir.join("mount.lock")).context(IoSnafu {
            what: "lock",
            path: dir,
        })?;
    if is_mount_point(fs_root) {
        return Ok(());
    }
    mount(dir, fs_root)
}

fn mount(dir: &Path, fs_root: &Path) -> Result<(), Error> {
    fs::create_dir_all(fs_root).context(IoSnafu {
        what: "create",
        path: fs_root,
    })?;
    let image = dir.join(IMAGE);
    let device = attach_loop(&image)?;
    // nosuid and nodev: a setuid file or device node a sandbox makes means nothing on
    // the host either.
    use rustix::mount::MountFlags;
    let mounted = rustix::mount::mount(
        &device.path,
        fs_root,
        "ext4",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOATIME,
        None,
    );
    // The mount holds the device now; closing ours lets it clear itself (autoclear) once
    // the mount is gone, or at once if mounting failed.
    drop(device);
    mounted.map_err(|e| Error::Io {
        what: "mount",
        path: fs_root.to_owned(),
        source: e.into(),
    })?;
    keep_zeroing_in_place(fs_root);
    Ok(())
}

/// A loop device with an image attached (auto-clearing: it lets go of the image when the
/// last user, a mount or this descriptor, is gone).
struct LoopDevice {
    path: PathBuf,
    _fd: rustix::fd::OwnedFd,
}

/// Attaches `image` to a free loop device (`LOOP_CTL_GET_FREE`, `LOOP_CONFIGURE`), as
/// `mount -o loop` does, without running `mount` (whose start-up costs more than the rest).
fn attach_loop(image: &Path) -> Result<LoopDevice, Error> {
    use rustix::fs::{Mode, OFlags};
    let io = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |e: rustix::io::Errno| Error::Io {
            what,
            path,
            source: e.into(),
        }
    };
    let control = Path::new("/dev/loop-control");
    let control_fd = rustix::fs::open(control, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(io("open", control))?;
    let backing = rustix::fs::open(image, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(io("open", image))?;
    // Another process may take the free device between the question and the attach.
    for _ in 0..32 {
        let n =
            crate::sys::loop_free_number(rustix::fd::AsFd::as_fd(&control_fd)).map_err(|e| {
                Error::Io {
                    what: "find a free loop device for",
                    path: image.to_owned(),
                    source: e,
                }
            })?;
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let fd = rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(io("open", &path))?;
        match crate::sys::loop_configure(
            rustix::fd::AsFd::as_fd(&fd),
            rustix::fd::AsFd::as_fd(&backing),
            false,
        ) {
            Ok(()) => return Ok(LoopDevice { path, _fd: fd }),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => {
                return Err(Error::Io {
                    what: "attach a loop device to",
                    path: image.to_owned(),
                    source: e,
                });
            }
        }
    }
    Err(Error::Tool {
        tool: "loop-control",
        path: image.to_owned(),
        message: "every free loop device was taken before it could be used".into(),
    })
}

/// Tells ext4 not to zero small extents of its own accord (`extent_max_zeroout_kb = 0`):
/// it would do so with `WRITE_ZEROES`, which the loop driver turns into holes punched in the
/// image, handing preallocated space back to the volume. Best effort: without it a sandbox
/// can punch at most 32 KiB per such write.
fn keep_zeroing_in_place(fs_root: &Path) {
    let Some((major, minor)) = block_device(fs_root) else {
        return;
    };
    let Ok(link) = fs::read_link(format!("/sys/dev/block/{major}:{minor}")) else {
        return;
    };
    if let Some(name) = link.file_name() {
        let knob = Path::new("/sys/fs/ext4")
            .join(name)
            .join("extent_max_zeroout_kb");
        let _ = fs::write(knob, "0");
    }
}

/// The block device (major, minor) of the sandbox's own filesystem mounted on `fs_root`;
/// `None` when nothing of its own is mounted there (no quota), or it is no block device.
pub(crate) fn block_device(fs_root: &Path) -> Option<(u32, u32)> {
    if !is_mount_point(fs_root) {
        return None;
    }
    let dev = rustix::fs::Dev::from(rustix::fs::stat(fs_root).ok()?.st_dev);
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    Path::new(&format!("/sys/dev/block/{major}:{minor}"))
        .exists()
        .then_some((major, minor))
}

/// Unmounts whatever is mounted on `fs_root` (every stacked mount), so the directory can be
/// renamed and removed. The loop device goes with the last mount (`autoclear`). Works
/// without a [`Disks`] too: a sandbox made with a quota is still cleaned up by a server
/// configured without one.
pub(crate) fn unmount(fs_root: &Path) -> Result<(), Error> {
    for _ in 0..8 {
        if !is_mount_point(fs_root) {
            return Ok(());
        }
        if let Err(e) = rustix::mount::unmount(fs_root, rustix::mount::UnmountFlags::empty()) {
            // Busy (a process of another server still holds it): let go of it here; the
            // kernel frees it when the last user is gone.
            rustix::mount::unmount(fs_root, rustix::mount::UnmountFlags::DETACH).map_err(|_| {
                Error::Io {
                    what: "unmount",
                    path: fs_root.to_owned(),
                    source: e.into(),
                }
            })?;
        }
    }
    Ok(())
}
