#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Integration tests of the local provider: conformance, escapes, persistence, concurrency,
//! deadlines and output, stop and resume, snapshots and restores.

mod capacity;
mod commands;
mod conformance;
mod contain;
mod escape;
mod exec;
mod images;
mod lifecycle;
mod network;
mod non_root;
mod snapshots;
mod threads;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, ExecOutput, ExecSpec, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};

/// A provider over a fresh temporary data dir: sandboxes live in `<data>/sandboxes`.
/// The provider is declared first so that it is dropped first: it unmounts its sandboxes'
/// filesystems before the directory is removed.
pub(crate) struct World {
    pub(crate) provider: LocalProvider,
    pub(crate) data: tempfile::TempDir,
}

impl World {
    pub(crate) fn new() -> Self {
        Self::with(|_| {})
    }

    pub(crate) fn with(tweak: impl FnOnce(&mut LocalConfig)) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut config = config(data.path().join("sandboxes"));
        tweak(&mut config);
        let provider = LocalProvider::new(config).unwrap();
        assert_eq!(provider.unavailable_reason(), None);
        Self { provider, data }
    }

    pub(crate) fn root(&self) -> std::path::PathBuf {
        self.data.path().join("sandboxes")
    }

    pub(crate) async fn create(&self) -> String {
        create(&self.provider, None).await
    }

    pub(crate) async fn sh(&self, id: &str, command: &str) -> ExecOutput {
        sh(&self.provider, id, command).await
    }
}

/// The configuration every test starts from: small images and a small reserve, because tests
/// run many sandboxes at once, each image is allocated whole, and the machine that runs them
/// may have little disk to spare (the defaults ask a GiB for each, and a GiB kept free).
pub(crate) fn config(root: impl Into<std::path::PathBuf>) -> LocalConfig {
    let mut config = LocalConfig::new(root.into());
    config.limits.disk_bytes = Some(64 << 20);
    config.limits.disk_reserve_bytes = 256 << 20;
    config
}

pub(crate) fn ctx() -> CallContext {
    CallContext::anonymous()
}

pub(crate) async fn create(provider: &LocalProvider, timeout: Option<u64>) -> String {
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, timeout),
        timeout_seconds: timeout,
    };
    provider.create(&ctx(), &spec).await.unwrap().native_id
}

pub(crate) async fn sh(provider: &LocalProvider, id: &str, command: &str) -> ExecOutput {
    provider
        .exec(&ctx(), id, &ExecSpec::new(command))
        .await
        .unwrap_or_else(|e| panic!("exec `{command}` failed: {e}"))
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs two commands in sandbox `id` at once, each trying to start `each` processes and
/// holding them until both are done trying; how many the two held together. perl, not the
/// shell: a shell ends at its first failed fork (its processes die with it, freeing places
/// for the other command), whereas perl's `fork` just returns nothing. At least `each` is
/// required: the first command to start gets its processes unless the sandbox cannot hold
/// even that many, so a run that started nothing (a broken setup) does not pass for a limit.
pub(crate) async fn processes_held_by_two_commands(world: &World, id: &str, each: usize) -> usize {
    const HOLD: &str = r#"my ($me, $each) = @ARGV; my @kids;
        for (1 .. $each) { my $p = fork; last unless defined $p;
            if ($p == 0) { sleep 60; exit 0 } push @kids, $p }
        $| = 1; print scalar(@kids), "\n";
        open(my $f, ">", "/workspace/held/$me") or die "$!"; close $f;
        my $until = time + 20;
        while (time < $until) { opendir(my $d, "/workspace/held") or last;
            my @in = grep { !/^[.]/ } readdir($d); closedir $d; last if @in >= 2;
            select(undef, undef, undef, 0.05) }
        kill 9, @kids"#;
    world
        .sh(id, "rm -rf /workspace/held && mkdir /workspace/held")
        .await;
    let hold = |me: usize| format!("perl -e '{HOLD}' {me} {each}");
    let (first, second) = (hold(0), hold(1));
    let (a, b) = tokio::join!(world.sh(id, &first), world.sh(id, &second));
    let held = |o: &ExecOutput| text(&o.stdout).trim().parse::<usize>().unwrap_or(0);
    let total = held(&a) + held(&b);
    assert!(
        total >= each,
        "only {total} held (exit codes {} and {}): {}{}",
        a.exit_code,
        b.exit_code,
        text(&a.stderr),
        text(&b.stderr)
    );
    total
}

/// Whether this run must not skip (CI): a missing tool is then a failure.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Debian's static busybox (`busybox-static`), or `None` (said on stdout) when it is missing
/// outside CI; under CI a missing busybox fails the test.
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
pub(crate) fn busybox() -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from("/bin/busybox");
    // The static build: an image holds busybox alone, no shared libraries.
    let is_static = std::fs::read(&path).is_ok_and(|elf| elf_is_static(&elf));
    if is_static {
        return Some(path);
    }
    assert!(
        !in_ci(),
        "/bin/busybox is missing or not the static build: install Debian's busybox-static (.ci/run does)"
    );
    println!("skipped: /bin/busybox (busybox-static) is missing or not the static build");
    None
}

/// Whether a 64-bit little-endian ELF file has no program interpreter (`PT_INTERP`): it
/// needs no shared library.
fn elf_is_static(elf: &[u8]) -> bool {
    let u16_at = |at: usize| {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |at: usize| {
        elf.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if elf.get(..4) != Some(b"\x7fELF".as_slice()) || elf.get(4) != Some(&2) {
        return false;
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    (0..usize::from(count)).all(|i| {
        let at = usize::try_from(phoff).unwrap() + i * usize::from(size);
        elf.get(at..at + 4) != Some(&3u32.to_le_bytes()[..])
    })
}

/// A tiny root filesystem at `at`: busybox and a link for each of its applets in `/bin`,
/// an `/etc/os-release` that names it, empty `/usr/local/bin`, `/tmp`, `/workspace`.
pub(crate) fn busybox_rootfs(busybox: &std::path::Path, at: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    for dir in ["bin", "etc", "usr/local/bin", "tmp", "workspace"] {
        std::fs::create_dir_all(at.join(dir)).unwrap();
    }
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(busybox, at.join("bin/busybox")).unwrap();
    let list = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .unwrap();
    for applet in text(&list.stdout).lines().filter(|a| *a != "busybox") {
        std::os::unix::fs::symlink("busybox", at.join("bin").join(applet)).unwrap();
    }
    std::fs::write(at.join("etc/os-release"), "ID=corral-test-image\n").unwrap();
}

/// `content` as a blob of the OCI layout at `layout`: its descriptor (media type, digest,
/// size).
pub(crate) fn oci_blob(
    layout: &std::path::Path,
    media_type: &str,
    content: &[u8],
) -> serde_json::Value {
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    std::fs::write(layout.join("blobs/sha256").join(&hex), content).unwrap();
    serde_json::json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": content.len()})
}

/// A tar header of a file (`Some(size)`) or directory, owned by root.
fn tar_header(size: Option<usize>) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(if size.is_some() {
        tar::EntryType::Regular
    } else {
        tar::EntryType::Directory
    });
    header.set_size(size.unwrap_or(0) as u64);
    header.set_mode(if size.is_some() { 0o644 } else { 0o755 });
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

/// A gzip-compressed layer of `entries` (path, content; `None`: a directory).
pub(crate) fn oci_layer(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, content) in entries {
        let mut header = tar_header(content.map(<[u8]>::len));
        match content {
            Some(bytes) => tar.append_data(&mut header, path, *bytes).unwrap(),
            None => tar
                .append_data(&mut header, path, std::io::empty())
                .unwrap(),
        }
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// An OCI image layout at `layout`, tagged `tag`: a first layer with `rootfs` (plus
/// `/etc/removed` and `/opaque/old`), and a second that removes `/etc/removed` (a
/// whiteout), replaces `/opaque`'s content (an opaque whiteout) and adds `/etc/layer2`.
pub(crate) fn oci_layout(rootfs: &std::path::Path, layout: &std::path::Path, tag: &str) {
    const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    tar.append_dir_all(".", rootfs).unwrap();
    for (path, content) in [("etc/removed", b"1" as &[u8]), ("opaque/old", b"old")] {
        let mut header = tar_header(Some(content.len()));
        tar.append_data(&mut header, path, content).unwrap();
    }
    let first = tar.into_inner().unwrap().finish().unwrap();
    let second = oci_layer(&[
        ("etc/.wh.removed", Some(b"")),
        ("etc/layer2", Some(b"from layer 2\n")),
        ("opaque", None),
        ("opaque/.wh..wh..opq", Some(b"")),
        ("opaque/new", Some(b"new")),
    ]);
    let layers = [
        oci_blob(layout, LAYER, &first),
        oci_blob(layout, LAYER, &second),
    ];
    let config = oci_blob(
        layout,
        "application/vnd.oci.image.config.v1+json",
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
    );
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    });
    let mut manifest = oci_blob(
        layout,
        "application/vnd.oci.image.manifest.v1+json",
        &serde_json::to_vec(&manifest).unwrap(),
    );
    manifest["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": tag});
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [manifest]});
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
}

/// The processes of the sandbox's init program (a root server): uid the sandbox's own, parent
/// root's (its keeper; the init's own children, such as a command's leader, have the init as
/// their parent) and root directory the sandbox's own. The root check matters: other tests'
/// roots pick their uids independently, so a sandbox of a test running beside this one may
/// hold the same uid.
pub(crate) fn inits_of(root: &std::path::Path, id: &str) -> Vec<i32> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(id).join("meta.json")).unwrap()).unwrap();
    let uid = u32::try_from(meta["uid"].as_u64().unwrap()).unwrap();
    let fs = rustix::fs::stat(root.join(id).join("fs")).unwrap();
    let field = |pid: i32, name: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("corral-sandbox-init")
                && field(*pid, "Uid:") == Some(uid)
                && field(*pid, "PPid:")
                    .and_then(|p| i32::try_from(p).ok())
                    .and_then(|p| field(p, "Uid:"))
                    == Some(0)
                && rustix::fs::stat(format!("/proc/{pid}/root"))
                    .is_ok_and(|st| (st.st_dev, st.st_ino) == (fs.st_dev, fs.st_ino))
        })
        .collect()
}
