//! Reading and writing a sandbox's files from the host side, confined to its root.
//!
//! Confinement is the kernel's, not ours: every lookup is one `openat2(2)` from a descriptor
//! of the sandbox root with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, so a `..`, an absolute
//! symlink or a chain of relative symlinks that would leave the root fails inside the kernel,
//! atomically with the lookup (`EXDEV`). A canonicalize-then-check would leave a window in
//! which a command running in the sandbox swaps a directory for a symlink; `openat2` has no
//! such window. `..` is also refused up front, so the error says why.
//!
//! Paths are as the sandbox sees them: `/workspace/x` is `<root>/<id>/fs/workspace/x`, `/tmp/x`
//! is the sandbox's own tmp. Relative paths are taken from `/workspace`. The host's system
//! directories (`/usr`, `/etc`, …) are read-only mounts that exist only inside a command, so
//! paths under them are refused here: read them with a command.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;

use corral_provider::ProviderError;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, openat, openat2, renameat};
use rustix::io::Errno;

/// Top-level directories that are host mounts inside a command, not sandbox files.
const SYSTEM_DIRS: [&str; 10] = [
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "etc", "proc", "dev", "sys",
];
/// Top-level directories that are kernel filesystems inside a command (images).
const KERNEL_DIRS: [&str; 3] = ["proc", "dev", "sys"];

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// A sandbox root the file calls resolve beneath.
#[derive(Debug)]
pub(crate) enum Root {
    /// The sandbox's own directory on the host (host mode). The host's system directories
    /// are mounts that exist only inside commands: paths under them are refused.
    Host(std::path::PathBuf),
    /// The root as the sandbox's init sees it (an image's layers; a descriptor it sent).
    /// Paths stay on that filesystem: `/proc`, `/dev` and the other mounts are refused.
    Init(OwnedFd),
}

impl Root {
    fn system_dirs(&self) -> &'static [&'static str] {
        match self {
            Self::Host(_) => &SYSTEM_DIRS,
            Self::Init(_) => &KERNEL_DIRS,
        }
    }

    fn resolve(&self) -> ResolveFlags {
        match self {
            Self::Host(_) => RESOLVE,
            Self::Init(_) => RESOLVE.union(ResolveFlags::NO_XDEV),
        }
    }
}

fn refused(path: &str, reason: impl Into<String>) -> ProviderError {
    ProviderError::FileRefused {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The sandbox path `path` as components relative to the sandbox root, refusing paths
/// under `system` directories.
fn components<'p>(path: &'p str, system: &[&str]) -> Result<Vec<&'p str>, ProviderError> {
    if path.len() > corral_domain::limits::MAX_PATH_BYTES {
        return Err(refused(path, "the path is too long"));
    }
    if path.is_empty() {
        return Err(refused(path, "the path is empty"));
    }
    if path.contains('\0') {
        return Err(refused(path, "the path contains a NUL byte"));
    }
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        vec!["workspace"]
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(refused(path, "`..` is not allowed in sandbox paths")),
            other => parts.push(other),
        }
    }
    match parts.first() {
        None => Err(refused(path, "the path names the sandbox root, not a file")),
        Some(top) if system.contains(top) => Err(refused(
            path,
            "it is under a read-only system directory of the host; read it with a command",
        )),
        Some(_) => Ok(parts),
    }
}

fn open_root(root: &Root, path: &str) -> Result<OwnedFd, ProviderError> {
    match root {
        Root::Host(fs_root) => rustix::fs::open(
            fs_root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ),
        Root::Init(fd) => rustix::io::fcntl_dupfd_cloexec(fd, 0),
    }
    .map_err(|e| ProviderError::FileOperation {
        path: path.to_owned(),
        message: format!("the sandbox root cannot be opened: {e}"),
    })
}

fn lookup_error(path: &str, e: Errno, missing: ProviderError) -> ProviderError {
    match e {
        Errno::NOENT | Errno::NOTDIR => missing,
        Errno::XDEV => refused(
            path,
            "it resolves outside the sandbox (an absolute symlink, or a symlink chain that leaves it)",
        ),
        Errno::LOOP => refused(path, "too many levels of symlinks"),
        Errno::ACCESS | Errno::PERM => refused(path, "permission denied"),
        other => ProviderError::FileOperation {
            path: path.to_owned(),
            message: other.to_string(),
        },
    }
}

/// Reads the whole regular file at `path`, at most `max_bytes` of it.
pub(crate) fn read(sandbox: &Root, path: &str, max_bytes: usize) -> Result<Vec<u8>, ProviderError> {
    let rel = components(path, sandbox.system_dirs())?.join("/");
    let root = open_root(sandbox, path)?;
    let not_found = || ProviderError::FileNotFound {
        path: path.to_owned(),
    };
    // O_NONBLOCK: opening a FIFO planted by a command must not hang the server.
    let fd = openat2(
        &root,
        rel.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        sandbox.resolve(),
    )
    .map_err(|e| lookup_error(path, e, not_found()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| ProviderError::FileOperation {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(refused(path, "not a regular file"));
    }
    let too_large = || ProviderError::FileTooLarge {
        path: path.to_owned(),
        limit: max_bytes,
    };
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > max_bytes as u64 {
        return Err(too_large());
    }
    let mut content = Vec::new();
    File::from(fd)
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut content)
        .map_err(|e| ProviderError::FileOperation {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if content.len() > max_bytes {
        return Err(too_large());
    }
    Ok(content)
}

/// Replaces the file at `path` with `content`, atomically (temporary file + rename in the
/// same directory). The parent directory must exist. The file belongs to `uid` (the
/// sandbox's root) when given, so commands can change it.
pub(crate) fn write(
    sandbox: &Root,
    path: &str,
    content: &[u8],
    uid: Option<u32>,
) -> Result<(), ProviderError> {
    let parts = components(path, sandbox.system_dirs())?;
    let Some((name, parent)) = parts.split_last() else {
        return Err(refused(path, "the path names the sandbox root, not a file"));
    };
    let root = open_root(sandbox, path)?;
    let parent_missing = || ProviderError::ParentMissing {
        path: path.to_owned(),
    };
    let dir = if parent.is_empty() {
        root
    } else {
        openat2(
            &root,
            parent.join("/").as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            sandbox.resolve(),
        )
        .map_err(|e| lookup_error(path, e, parent_missing()))?
    };
    let io_error = |e: std::io::Error| ProviderError::FileOperation {
        path: path.to_owned(),
        message: e.to_string(),
    };
    // An existing entry: only a regular file is replaced, and it keeps its mode. A symlink
    // is refused rather than followed or replaced: a write never goes through a link a
    // command planted.
    let mut mode = 0o644;
    match rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => mode = stat.st_mode & 0o777,
            FileType::Directory => return Err(refused(path, "it is a directory")),
            FileType::Symlink => return Err(refused(path, "it is a symlink")),
            _ => return Err(refused(path, "it is not a regular file")),
        },
        Err(Errno::NOENT) => {}
        Err(e) => return Err(lookup_error(path, e, parent_missing())),
    }
    let tmp = format!(".corral-write-{}", crate::store::new_native_id());
    let fd = openat(
        &dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| lookup_error(path, e, parent_missing()))?;
    let result = (|| {
        let mut file = File::from(fd);
        if let Some(uid) = uid {
            std::os::unix::fs::fchown(&file, Some(uid), Some(uid)).map_err(io_error)?;
        }
        file.write_all(content).map_err(io_error)?;
        // The mode asked for at creation is filtered by the umask; set it as it was.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(io_error)?;
        file.sync_data().map_err(io_error)?;
        renameat(&dir, tmp.as_str(), &dir, *name)
            .map_err(|e| lookup_error(path, e, parent_missing()))
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
    }
    result
}

/// Whether `cwd` names an existing directory inside the sandbox, as a command would see it.
/// System directories are taken on trust (they are host mounts).
pub(crate) fn check_cwd(sandbox: &Root, cwd: &str) -> Result<(), String> {
    if !cwd.starts_with('/') {
        return Err(format!("cwd `{cwd}` must be an absolute path"));
    }
    let parts = match components(cwd, sandbox.system_dirs()) {
        Ok(parts) => parts,
        Err(ProviderError::FileRefused { reason, .. }) if reason.contains("system directory") => {
            return Ok(());
        }
        Err(ProviderError::FileRefused { reason, .. }) if reason.contains("sandbox root") => {
            return Ok(());
        }
        Err(e) => return Err(format!("cwd `{cwd}`: {e}")),
    };
    let root = open_root(sandbox, cwd).map_err(|e| e.to_string())?;
    openat2(
        &root,
        parts.join("/").as_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        sandbox.resolve(),
    )
    .map(drop)
    .map_err(|e| match e {
        Errno::NOENT | Errno::NOTDIR => format!("cwd `{cwd}` is not a directory in the sandbox"),
        other => format!("cwd `{cwd}` cannot be used: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_into_the_sandbox_root() {
        assert_eq!(
            components("/workspace/a/b", &SYSTEM_DIRS).ok(),
            Some(vec!["workspace", "a", "b"])
        );
        assert_eq!(
            components("a//./b", &SYSTEM_DIRS).ok(),
            Some(vec!["workspace", "a", "b"])
        );
        assert_eq!(
            components("/tmp/x", &SYSTEM_DIRS).ok(),
            Some(vec!["tmp", "x"])
        );
    }

    #[test]
    fn dot_dot_system_dirs_and_the_root_are_refused() {
        for bad in [
            "/workspace/../x",
            "../x",
            "/etc/passwd",
            "/",
            "",
            "/usr/bin/sh",
            "a\0b",
        ] {
            assert!(
                matches!(
                    components(bad, &SYSTEM_DIRS),
                    Err(ProviderError::FileRefused { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
