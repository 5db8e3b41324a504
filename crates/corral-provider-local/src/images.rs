//! Images a sandbox may be made from: root filesystems the operator names in configuration.
//!
//! An image is either a root filesystem directory, used as it is, or an OCI image layout on
//! disk (`oci-layout`, `index.json`, `blobs/sha256/…`, as `skopeo copy … oci:DIR:TAG` or
//! `podman save --format oci-dir` write it), whose layers are unpacked once, at start, into
//! `<root>/.images/<manifest digest>/rootfs`: every blob (manifest, layers) is checked against
//! its sha256 digest before it is used, whiteouts are applied, and the result is kept for
//! the next start (a rename makes it appear only when whole). Sandboxes share it read-only:
//! each has its own writable layer on its own filesystem (overlayfs, mounted by its init).
//!
//! Unpacking runs as the server: as root the layers' owners are kept (the init id-maps them
//! to the sandbox's ids); otherwise every file is the server's (root inside the sandbox).
//! Removals (whiteouts) resolve paths with `openat2(RESOLVE_IN_ROOT)`, so an image's
//! symlinks stay inside its root; entries are extracted by the `tar` crate, which refuses
//! any that would land outside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use serde::Deserialize;
use sha2::Digest as _;

/// Where an image comes from (`LocalConfig::images`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// A root filesystem directory (it must hold `/bin/sh`).
    Directory(PathBuf),
    /// An OCI image layout directory; `reference` picks a manifest by its
    /// `org.opencontainers.image.ref.name` annotation (the tag), `None` the only one.
    OciLayout {
        /// The layout's directory.
        path: PathBuf,
        /// The tag, when the layout holds several.
        reference: Option<String>,
    },
}

/// One usable image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    /// Its root filesystem.
    pub(crate) rootfs: PathBuf,
}

/// The configured images, each usable or with the reason it is not.
#[derive(Debug, Default)]
pub(crate) struct Images {
    images: BTreeMap<String, Result<Image, String>>,
}

impl Images {
    /// Prepares every configured image (OCI layouts are unpacked under `store_root` unless
    /// they already are).
    pub(crate) fn prepare(config: &BTreeMap<String, ImageSource>, store_root: &Path) -> Self {
        let images = config
            .iter()
            .map(|(name, source)| {
                let image = match source {
                    ImageSource::Directory(dir) => directory(dir),
                    ImageSource::OciLayout { path, reference } => {
                        unpack_layout(path, reference.as_deref(), &store_root.join(".images"))
                    }
                };
                if let Err(why) = &image {
                    tracing::warn!(image = %name, reason = %why, "a local image cannot be used");
                }
                (
                    name.clone(),
                    image.map_err(|e| format!("image `{name}`: {e}")),
                )
            })
            .collect();
        Self { images }
    }

    /// The names operators configured.
    pub(crate) fn names(&self) -> Vec<String> {
        self.images.keys().cloned().collect()
    }

    /// Whether any image is configured.
    pub(crate) fn any(&self) -> bool {
        !self.images.is_empty()
    }

    /// Image `name`: `None` if no image has that name; `Some(Err)` if it has, but cannot be
    /// used.
    pub(crate) fn get(&self, name: &str) -> Option<Result<&Image, &String>> {
        self.images.get(name).map(Result::as_ref)
    }

    /// Why each unusable image is so.
    pub(crate) fn problems(&self) -> Vec<String> {
        self.images
            .values()
            .filter_map(|i| i.as_ref().err().cloned())
            .collect()
    }
}

fn directory(dir: &Path) -> Result<Image, String> {
    let rootfs = fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !rootfs.is_dir() {
        return Err(format!("{} is not a directory", rootfs.display()));
    }
    Ok(Image { rootfs })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: Option<String>,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

/// An index (`index.json`, or a multi-platform index blob) or a manifest.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The platform's architecture as OCI names it.
fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The path of blob `digest` in `layout`, after checking the digest's form.
fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf, String> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        })
        .ok_or_else(|| format!("unsupported digest `{digest}` (sha256 only)"))?;
    Ok(layout.join("blobs/sha256").join(hex))
}

/// Blob `digest`'s path, once its content is checked against the digest.
fn verified_blob(layout: &Path, digest: &str) -> Result<PathBuf, String> {
    let path = blob_path(layout, digest)?;
    let mut file = fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    let got: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if format!("sha256:{got}") != digest {
        return Err(format!(
            "blob {digest} does not match its digest (its content hashes to sha256:{got})"
        ));
    }
    Ok(path)
}

fn read_document(path: &Path) -> Result<Document, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The manifest `reference` names in `layout` (through a platform index if need be).
fn find_manifest(layout: &Path, reference: Option<&str>) -> Result<(String, Document), String> {
    let index = read_document(&layout.join("index.json"))?;
    let chosen: Vec<&Descriptor> = index
        .manifests
        .iter()
        .filter(|d| {
            reference.is_none_or(|r| {
                d.annotations
                    .get("org.opencontainers.image.ref.name")
                    .map(String::as_str)
                    == Some(r)
            })
        })
        .collect();
    let [descriptor] = chosen.as_slice() else {
        return Err(match reference {
            Some(r) => format!("{} manifests are tagged `{r}` in index.json", chosen.len()),
            None => format!(
                "index.json lists {} manifests; name one with a reference",
                chosen.len()
            ),
        });
    };
    let mut digest = descriptor.digest.clone();
    let mut document = read_document(&verified_blob(layout, &digest)?)?;
    let is_index = |d: &Document, desc_type: Option<&str>| {
        desc_type
            .or(d.media_type.as_deref())
            .is_some_and(|t| INDEX_TYPES.contains(&t))
            || (!d.manifests.is_empty() && d.layers.is_empty())
    };
    if is_index(&document, descriptor.media_type.as_deref()) {
        let arch = architecture();
        let platform = document
            .manifests
            .iter()
            .find(|d| {
                d.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == arch)
            })
            .ok_or_else(|| format!("no manifest for linux/{arch} in {digest}"))?;
        digest = platform.digest.clone();
        document = read_document(&verified_blob(layout, &digest)?)?;
    }
    Ok((digest, document))
}

/// Unpacks `layout`'s image into `<images>/<manifest digest>/rootfs` unless it is there.
fn unpack_layout(layout: &Path, reference: Option<&str>, images: &Path) -> Result<Image, String> {
    let (digest, manifest) = find_manifest(layout, reference)?;
    let hex = digest.trim_start_matches("sha256:");
    let done = images.join(hex);
    if done.join("rootfs").is_dir() {
        return Ok(Image {
            rootfs: done.join("rootfs"),
        });
    }
    fs::create_dir_all(images).map_err(|e| format!("{}: {e}", images.display()))?;
    // One unpack at a time, across every process sharing the root.
    let _one = crate::lock::FileLock::exclusive(&images.join(".lock"))
        .map_err(|e| format!("lock: {e}"))?;
    if done.join("rootfs").is_dir() {
        return Ok(Image {
            rootfs: done.join("rootfs"),
        });
    }
    let work = images.join(format!(".{hex}-{}", crate::store::new_native_id()));
    let result = (|| {
        let rootfs = work.join("rootfs");
        fs::create_dir_all(&rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))?;
        for layer in &manifest.layers {
            let blob = verified_blob(layout, &layer.digest)?;
            apply_layer(&blob, layer.media_type.as_deref().unwrap_or(""), &rootfs)
                .map_err(|e| format!("layer {}: {e}", layer.digest))?;
        }
        fs::rename(&work, &done).map_err(|e| format!("{}: {e}", done.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&work);
    }
    result.map(|()| Image {
        rootfs: done.join("rootfs"),
    })
}

/// Extracts one layer over `rootfs`, applying its whiteouts.
fn apply_layer(blob: &Path, media_type: &str, rootfs: &Path) -> Result<(), String> {
    let file = fs::File::open(blob).map_err(|e| e.to_string())?;
    let reader: Box<dyn std::io::Read> = if media_type.ends_with("gzip") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else if media_type.ends_with("zstd") {
        return Err(
            "zstd-compressed layers are not supported; convert the image with gzip layers".into(),
        );
    } else {
        Box::new(file)
    };
    let root = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", rootfs.display()))?;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(rustix::process::geteuid().is_root());
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    let mut this_layer: BTreeSet<PathBuf> = BTreeSet::new();
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let rel =
            normal(&path).ok_or_else(|| format!("entry {} leaves the image", path.display()))?;
        let (parent, name) = match (rel.parent(), rel.file_name().and_then(|n| n.to_str())) {
            (Some(parent), Some(name)) => (parent.to_owned(), name.to_owned()),
            _ => {
                entry
                    .unpack_in(rootfs)
                    .map_err(|e| format!("{}: {}", rel.display(), chain(&e)))?;
                continue;
            }
        };
        if name == ".wh..wh..opq" {
            // An opaque directory: what lower layers put in it is gone.
            clear_dir(root.as_fd(), &parent, &this_layer)
                .map_err(|e| format!("{}: {e}", parent.display()))?;
        } else if let Some(hidden) = name.strip_prefix(".wh.") {
            remove_beneath(root.as_fd(), &parent.join(hidden))
                .map_err(|e| format!("{}: {e}", rel.display()))?;
        } else {
            entry
                .unpack_in(rootfs)
                .map_err(|e| format!("{}: {}", rel.display(), chain(&e)))?;
            this_layer.insert(rel);
        }
    }
    Ok(())
}

/// An error and its sources, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `path` without `.`, a leading `/` or `./`; `None` if it has a `..`.
fn normal(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// Removes `rel` (a file, a link, or a directory with everything in it) inside `root`,
/// resolving its parent as if `root` were `/`. Nothing to do if it is not there.
fn remove_beneath(root: rustix::fd::BorrowedFd<'_>, rel: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let dir = match rustix::fs::openat2(
        root,
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        IN_ROOT,
    ) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    remove_entry(&dir, name)
}

fn remove_entry(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<()> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::Directory =>
        {
            let child = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            empty_dir(&child, &BTreeSet::new(), Path::new(""))?;
            Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
        }
        Ok(_) => Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
    }
}

/// Removes everything in directory `dir` (at `rel` in the image) but what `keep` names.
fn empty_dir(dir: &OwnedFd, keep: &BTreeSet<PathBuf>, rel: &Path) -> std::io::Result<()> {
    let names: Vec<std::ffi::OsString> = {
        let dup = rustix::fs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut iter = rustix::fs::Dir::read_from(&dup)?;
        let mut names = Vec::new();
        while let Some(entry) = iter.read() {
            let entry = entry?;
            let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names
    };
    for name in names {
        if keep.contains(&rel.join(&name)) {
            continue;
        }
        remove_entry(dir, &name)?;
    }
    Ok(())
}

use std::os::unix::ffi::OsStrExt as _;

/// Empties directory `rel` of what earlier layers put in it (what this layer added stays).
fn clear_dir(
    root: rustix::fd::BorrowedFd<'_>,
    rel: &Path,
    this_layer: &BTreeSet<PathBuf>,
) -> std::io::Result<()> {
    let target = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let dir = match rustix::fs::openat2(
        root,
        target,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        IN_ROOT,
    ) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    empty_dir(&dir, this_layer, rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_before_they_become_paths() {
        let layout = Path::new("/x");
        assert!(blob_path(layout, "sha256:../../etc/passwd").is_err());
        assert!(blob_path(layout, "sha512:00").is_err());
        let ok = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            blob_path(layout, &ok).unwrap(),
            layout.join("blobs/sha256").join("a".repeat(64))
        );
    }

    #[test]
    fn a_whiteout_through_an_absolute_symlink_stays_in_the_image() {
        let host = tempfile::tempdir().unwrap();
        let canary = host.path().join("canary");
        fs::write(&canary, "host").unwrap();
        let rootfs = tempfile::tempdir().unwrap();
        // In the image, `/lib` points at the host's directory by its absolute path.
        std::os::unix::fs::symlink(host.path(), rootfs.path().join("lib")).unwrap();
        let root = rustix::fs::open(
            rootfs.path(),
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        remove_beneath(root.as_fd(), Path::new("lib/canary")).unwrap();
        assert_eq!(fs::read_to_string(&canary).unwrap(), "host");
    }
}
