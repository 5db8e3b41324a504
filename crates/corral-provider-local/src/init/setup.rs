//! Building one sandbox's root, in the init, before anything of the caller's runs.
//!
//! Every mount lands on a descriptor, never on a path looked up again later: targets inside
//! the sandbox's root are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from
//! a descriptor of the root, and the new mount API (`open_tree`, `fsmount`, `move_mount`)
//! attaches to that descriptor. The sandbox's root is writable by its commands (and another
//! process sharing the sandboxes root may run commands in it while this init starts), so a
//! path could be swapped for a symlink between a lookup and a mount; a descriptor cannot.
//! The old root leaves with `pivot_root(".", ".")` and a detached unmount: no directory of
//! the sandbox is used as a mount point for the host's root or `/proc` on the way.
//!
//! After the pivot the mount table is checked once: exactly one procfs (the sandbox's own),
//! and every expected mount point present (a directory renamed under a mount in flight would
//! leave one missing). Anything else and the init refuses to serve.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountPropagationFlags, MoveMountFlags,
    OpenTreeFlags, UnmountFlags,
};

use super::proto::{ImageLayers, Setup};
use crate::sys;

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

fn context(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// Opens directory `name` (one component) in `dir`, creating it if missing; whatever else
/// is there under that name (a symlink, a file) is removed first.
fn ensure_dir(dir: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
        Ok(_) => {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))?;
        }
        Err(rustix::io::Errno::NOENT) => {
            match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(rustix::fs::openat2(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )?)
}

/// Opens `rel` beneath `root` (no symlinks anywhere on the way) as a mount target.
fn target(root: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat2(
        root,
        rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )?)
}

/// A detached copy of the host's `source` (and what is mounted below it).
fn clone_tree(source: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )?)
}

/// Attaches the detached mount `tree` on `target`.
fn attach(tree: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    Ok(rustix::mount::move_mount(
        tree,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?)
}

/// A new, detached filesystem of type `fs` with string options `options` and flag options
/// `flags`.
fn new_fs(
    fs: &str,
    options: &[(&str, &str)],
    flags: &[&str],
    attrs: MountAttrFlags,
) -> io::Result<OwnedFd> {
    let ctx = rustix::mount::fsopen(fs, FsOpenFlags::FSOPEN_CLOEXEC)?;
    for (key, value) in options {
        rustix::mount::fsconfig_set_string(&ctx, *key, *value)?;
    }
    for key in flags {
        rustix::mount::fsconfig_set_flag(&ctx, *key)?;
    }
    rustix::mount::fsconfig_create(&ctx)?;
    Ok(rustix::mount::fsmount(
        &ctx,
        FsMountFlags::FSMOUNT_CLOEXEC,
        attrs,
    )?)
}

/// Builds the sandbox's root and pivots into it. `userns`: the sandbox's user namespace
/// (server as root), through which an image's files are id-mapped.
pub(super) fn build_root(setup: &Setup, userns: Option<&OwnedFd>) -> Result<(), String> {
    // Nothing mounted from here on propagates back to the host.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    let root_path = match &setup.image {
        Some(layers) => {
            overlay(layers, userns)?;
            layers.merged.clone()
        }
        None => setup.fs_root.clone(),
    };
    // A mount of its own, for `pivot_root`.
    rustix::mount::mount_bind_recursive(&root_path, &root_path)
        .map_err(|e| format!("cannot bind the sandbox root: {e}"))?;
    let root = rustix::fs::open(
        &root_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open the sandbox root: {e}"))?;
    let mut expected = vec!["/proc".to_owned(), "/dev".to_owned()];
    for dir in &setup.system_dirs {
        let at = ensure_dir(root.as_fd(), &dir.name).map_err(context(format!("/{}", dir.name)))?;
        let tree = clone_tree(&dir.source).map_err(context(dir.source.display()))?;
        sys::mount_setattr(
            tree.as_fd(),
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
            None,
        )
        .map_err(context(format!("read-only {}", dir.source.display())))?;
        attach(&tree, &at).map_err(context(format!("mount /{}", dir.name)))?;
        expected.push(format!("/{}", dir.name));
    }
    for mask in &setup.masks {
        let rel = mask
            .strip_prefix("/")
            .map_err(|_| format!("mask {} is not absolute", mask.display()))?;
        let rel = rel.to_str().ok_or("a mask path is not UTF-8")?;
        let at = target(root.as_fd(), rel).map_err(context(mask.display()))?;
        let st = rustix::fs::fstat(&at).map_err(|e| format!("{}: {e}", mask.display()))?;
        let cover = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            new_fs(
                "tmpfs",
                &[("size", "4k"), ("mode", "0755")],
                &[],
                MountAttrFlags::MOUNT_ATTR_RDONLY,
            )
        } else {
            clone_tree(Path::new("/dev/null"))
        }
        .map_err(context(format!("mask {}", mask.display())))?;
        attach(&cover, &at).map_err(context(format!("mask {}", mask.display())))?;
        expected.push(mountinfo_escaped(&mask.to_string_lossy()));
    }
    if let Some(resolv) = &setup.resolv_conf {
        let at = resolv_conf_target(root.as_fd(), setup)?;
        let tree = clone_tree(resolv).map_err(context(resolv.display()))?;
        sys::mount_setattr(tree.as_fd(), sys::MOUNT_ATTR_RDONLY, None)
            .map_err(context("read-only /etc/resolv.conf"))?;
        attach(&tree, &at).map_err(context("/etc/resolv.conf"))?;
    }
    dev(root.as_fd())?;
    let proc_at = ensure_dir(root.as_fd(), "proc").map_err(context("/proc"))?;
    let procfs = new_fs(
        "proc",
        &[],
        &[],
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )
    .map_err(context("a procfs"))?;
    attach(&procfs, &proc_at).map_err(context("mount /proc"))?;
    rustix::system::sethostname(setup.hostname.as_bytes())
        .map_err(|e| format!("cannot set the hostname: {e}"))?;
    // Into the new root; the old one is unmounted (lazily: nothing of it stays reachable).
    rustix::process::fchdir(&root).map_err(|e| format!("cannot enter the root: {e}"))?;
    rustix::process::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| format!("cannot unmount the host's root: {e}"))?;
    rustix::process::chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    check_mounts(&expected)
}

/// The file to mount the sandbox's resolver configuration on: `/etc/resolv.conf`, made if
/// missing (an image without one); where it is a symlink (systemd-resolved's stub, say),
/// the file it points to, made in the sandbox's own root if need be. A link into one of
/// the host's read-only directories cannot be followed there.
fn resolv_conf_target(root: BorrowedFd<'_>, setup: &Setup) -> Result<OwnedFd, String> {
    let etc = ensure_dir(root, "etc").map_err(context("/etc"))?;
    let link = match rustix::fs::readlinkat(&etc, "resolv.conf", Vec::new()) {
        Ok(link) => Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(
            link.into_bytes(),
        ))),
        Err(_) => None,
    };
    let rel = match link {
        None => std::path::PathBuf::from("etc/resolv.conf"),
        Some(link) => {
            let mut rel = std::path::PathBuf::new();
            let joined = if link.is_absolute() {
                link
            } else {
                Path::new("/etc").join(link)
            };
            for c in joined.components() {
                match c {
                    std::path::Component::Normal(n) => rel.push(n),
                    std::path::Component::ParentDir => {
                        rel.pop();
                    }
                    _ => {}
                }
            }
            rel
        }
    };
    let top = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    if setup.image.is_none()
        && rel != Path::new("etc/resolv.conf")
        && top
            .as_deref()
            .is_some_and(|t| setup.system_dirs.iter().any(|d| d.name == t))
    {
        return Err(format!(
            "/etc/resolv.conf points into /{} (read-only here)",
            rel.display()
        ));
    }
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err("/etc/resolv.conf points nowhere".into());
    };
    let mut dir = rustix::fs::openat2(
        root,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
    .map_err(|e| format!("/: {e}"))?;
    for part in parent.components() {
        let part = part.as_os_str().to_str().ok_or("a non-UTF-8 path")?;
        dir = ensure_dir(dir.as_fd(), part).map_err(context(format!("/{}", parent.display())))?;
    }
    let writable = rustix::fs::openat2(
        &dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
    .map_err(|e| format!("/{}: {e}", parent.display()))?;
    if let Ok(st) = rustix::fs::statat(&writable, name, AtFlags::SYMLINK_NOFOLLOW)
        && FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
    {
        let _ = rustix::fs::unlinkat(&writable, name, AtFlags::empty());
    }
    match rustix::fs::openat(
        &writable,
        name,
        OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    ) {
        // A read-only file (the host's /etc) is there already: mounted over as it is.
        Ok(_) | Err(rustix::io::Errno::ROFS) => {}
        Err(e) => return Err(format!("/{}: {e}", rel.display())),
    }
    target(dir.as_fd(), &name.to_string_lossy()).map_err(context(format!("/{}", rel.display())))
}

/// The image's files (id-mapped to the sandbox's ids, read-only) under the sandbox's
/// writable layer, mounted on `layers.merged`.
fn overlay(layers: &ImageLayers, userns: Option<&OwnedFd>) -> Result<(), String> {
    for path in [&layers.lower_view, &layers.upper, &layers.work] {
        if path.to_string_lossy().contains([',', ':', '\\']) {
            return Err(format!(
                "{} cannot be an overlay layer (, : or \\ in it)",
                path.display()
            ));
        }
    }
    let view = clone_tree(&layers.lower).map_err(context(layers.lower.display()))?;
    sys::mount_setattr(
        view.as_fd(),
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        userns.map(AsFd::as_fd),
    )
    .map_err(context(format!(
        "cannot map the image's ids ({})",
        layers.lower.display()
    )))?;
    let at = rustix::fs::open(
        &layers.lower_view,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", layers.lower_view.display()))?;
    attach(&view, &at).map_err(context("the image's view"))?;
    let lower = layers.lower_view.to_string_lossy();
    let upper = layers.upper.to_string_lossy();
    let work = layers.work.to_string_lossy();
    // A server that is not root mounts in a user namespace, where overlayfs keeps its
    // bookkeeping in `user.` extended attributes.
    let userxattr: &[&str] = if rustix::process::geteuid().is_root() && userns.is_some() {
        &[]
    } else {
        &["userxattr"]
    };
    let merged = new_fs(
        "overlay",
        &[
            ("lowerdir", &lower),
            ("upperdir", &upper),
            ("workdir", &work),
        ],
        userxattr,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(context("the sandbox's layers (overlayfs)"))?;
    let at = rustix::fs::open(
        &layers.merged,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", layers.merged.display()))?;
    attach(&merged, &at).map_err(context("the sandbox's root"))
}

/// A minimal `/dev`: a tmpfs with the host's `null`, `zero`, `full`, `random`, `urandom`
/// and `tty` bound in, a private devpts, and the usual links (as bubblewrap makes it).
fn dev(root: BorrowedFd<'_>) -> Result<(), String> {
    let at = ensure_dir(root, "dev").map_err(context("/dev"))?;
    let tmpfs = new_fs(
        "tmpfs",
        &[("mode", "0755"), ("size", "64k")],
        &[],
        MountAttrFlags::MOUNT_ATTR_NOSUID,
    )
    .map_err(context("a tmpfs for /dev"))?;
    attach(&tmpfs, &at).map_err(context("mount /dev"))?;
    // Opened again: now the tmpfs, which nothing else can reach yet.
    let dev = rustix::fs::openat2(
        root,
        "dev",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
    .map_err(|e| format!("/dev: {e}"))?;
    let fail = |what: &str, e: rustix::io::Errno| format!("/dev/{what}: {e}");
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        drop(
            rustix::fs::openat(
                &dev,
                name,
                OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )
            .map_err(|e| fail(name, e))?,
        );
        let at = target(dev.as_fd(), name).map_err(context(format!("/dev/{name}")))?;
        let node =
            clone_tree(&Path::new("/dev").join(name)).map_err(context(format!("/dev/{name}")))?;
        attach(&node, &at).map_err(context(format!("/dev/{name}")))?;
    }
    for (link, to) in [
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("fd", "/proc/self/fd"),
        ("core", "/proc/kcore"),
        ("ptmx", "pts/ptmx"),
    ] {
        rustix::fs::symlinkat(to, &dev, link).map_err(|e| fail(link, e))?;
    }
    rustix::fs::mkdirat(&dev, "shm", Mode::from_raw_mode(0o1777)).map_err(|e| fail("shm", e))?;
    rustix::fs::chmodat(&dev, "shm", Mode::from_raw_mode(0o1777), AtFlags::empty())
        .map_err(|e| fail("shm", e))?;
    rustix::fs::mkdirat(&dev, "pts", Mode::from_raw_mode(0o755)).map_err(|e| fail("pts", e))?;
    let pts_at = target(dev.as_fd(), "pts").map_err(context("/dev/pts"))?;
    let pts = new_fs(
        "devpts",
        &[("ptmxmode", "0666"), ("mode", "620")],
        &["newinstance"],
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )
    .map_err(context("a devpts"))?;
    attach(&pts, &pts_at).map_err(context("mount /dev/pts"))
}

/// Refuses a mount table with another procfs than the sandbox's own (the host's `/proc`, or
/// the host's root, which holds one) or without one of the `expected` mount points
/// (escaped as mountinfo spells them).
fn check_mounts(expected: &[String]) -> Result<(), String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read the mount table: {e}"))?;
    let mut procfs = 0;
    let mut points = std::collections::BTreeSet::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if let Some(point) = left.split(' ').nth(4) {
            points.insert(point.to_owned());
        }
        if right.split(' ').next() == Some("proc") {
            procfs += 1;
        }
    }
    if procfs != 1 {
        return Err(format!(
            "the sandbox's mounts changed during setup ({procfs} procfs)"
        ));
    }
    match expected.iter().find(|p| !points.contains(*p)) {
        Some(missing) => Err(format!(
            "the sandbox's mounts changed during setup ({missing} is not mounted)"
        )),
        None => Ok(()),
    }
}

/// `path` as `/proc/self/mountinfo` spells it: space, tab, newline and backslash in octal.
pub(crate) fn mountinfo_escaped(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_escaped_as_mountinfo_spells_them() {
        assert_eq!(mountinfo_escaped("/etc/a b\\c"), "/etc/a\\040b\\134c");
    }
}
