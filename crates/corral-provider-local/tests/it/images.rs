//! Images: a sandbox made from an image the operator named runs the image's programs, keeps
//! what it installs in its own layer (never in the image, never in another sandbox), and an
//! OCI image layout is unpacked once, verified by digest, and shared.

use std::collections::BTreeMap;

use corral_domain::{CreateSandboxRequest, ImageMode, OperationId, Provider};
use corral_provider::{CreateSpec, ProviderError, SandboxProvider};
use corral_provider_local::{ImageSource, LocalProvider};

use crate::{World, ctx, text};

pub(crate) async fn create_from(
    provider: &LocalProvider,
    image: &str,
) -> Result<String, ProviderError> {
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, Some(image.into()), None),
        timeout_seconds: None,
    };
    provider.create(&ctx(), &spec).await.map(|o| o.native_id)
}

fn images(name: &str, source: ImageSource) -> BTreeMap<String, ImageSource> {
    BTreeMap::from([(name.to_owned(), source)])
}

/// Sandbox directories under `root` (not the dot-entries).
fn sandbox_dirs(root: &std::path::Path) -> usize {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sandbox_runs_the_images_programs_and_keeps_what_it_installs_in_its_own_layer() {
    let Some(busybox) = crate::busybox() else {
        return;
    };
    let image = tempfile::tempdir().unwrap();
    crate::busybox_rootfs(&busybox, image.path());
    let source = ImageSource::Directory(image.path().to_owned());
    let world = World::with(|c| c.images = images("busybox", source.clone()));
    assert_eq!(
        world.provider.capabilities().image_mode,
        ImageMode::Template
    );
    assert_eq!(world.provider.image_names(), ["busybox"]);
    let a = create_from(&world.provider, "busybox").await.unwrap();
    let b = create_from(&world.provider, "busybox").await.unwrap();

    // The image's root, not the host's: no host /usr/bin, the image's os-release.
    let out = world
        .sh(
            &a,
            "cat /etc/os-release; test -e /usr/bin/perl || echo no-host-perl; id -u; pwd",
        )
        .await;
    assert_eq!(
        text(&out.stdout),
        "ID=corral-test-image\nno-host-perl\n0\n/workspace\n",
        "{}",
        text(&out.stderr)
    );
    // An install into the image's directories, and a change to one of its files.
    let out = world
        .sh(
            &a,
            "printf '#!/bin/sh\\necho tool-ran\\n' > /usr/local/bin/tool && chmod +x /usr/local/bin/tool \
             && tool && echo VERSION=2 >> /etc/os-release && mkdir -p /opt/pkg && echo lib > /opt/pkg/lib",
        )
        .await;
    assert_eq!(text(&out.stdout), "tool-ran\n", "{}", text(&out.stderr));
    // The other sandbox of the same image sees none of it; nor does the image.
    let out = world
        .sh(&b, "tool 2>&1; cat /etc/os-release; ls /opt 2>&1")
        .await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("not found"), "{stdout}");
    assert!(
        stdout.contains("ID=corral-test-image\n") && !stdout.contains("VERSION=2"),
        "{stdout}"
    );
    assert!(!image.path().join("usr/local/bin/tool").exists());
    assert!(!image.path().join("opt").exists());
    assert_eq!(
        std::fs::read_to_string(image.path().join("etc/os-release")).unwrap(),
        "ID=corral-test-image\n"
    );
    // Files through the API see the sandbox's own layer, the image's directories included.
    world
        .provider
        .write_file(&ctx(), &a, "/workspace/hello", b"from the api")
        .await
        .unwrap();
    assert_eq!(
        world
            .provider
            .read_file(&ctx(), &a, "/usr/local/bin/tool", 1024)
            .await
            .unwrap(),
        b"#!/bin/sh\necho tool-ran\n"
    );
    assert_eq!(
        text(&world.sh(&a, "cat /workspace/hello").await.stdout),
        "from the api"
    );

    // It all persists across a restart of the provider.
    let root = world.root();
    let crate::World { provider, data } = world;
    drop(provider);
    let mut config = crate::config(&root);
    config.images = images("busybox", source);
    let again = LocalProvider::new(config).unwrap();
    let out = crate::sh(&again, &a, "tool; cat /opt/pkg/lib /workspace/hello").await;
    assert_eq!(
        text(&out.stdout),
        "tool-ran\nlib\nfrom the api",
        "{}",
        text(&out.stderr)
    );
    drop(again);
    drop(data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_layout_is_unpacked_once_verified_by_digest_and_shared() {
    let Some(busybox) = crate::busybox() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let rootfs = scratch.path().join("rootfs");
    crate::busybox_rootfs(&busybox, &rootfs);
    let layout = scratch.path().join("layout");
    crate::oci_layout(&rootfs, &layout, "v1");
    let source = ImageSource::OciLayout {
        path: layout.clone(),
        reference: Some("v1".into()),
    };
    let world = World::with(|c| c.images = images("tiny", source.clone()));
    assert_eq!(
        world.provider.containment().images,
        Ok(vec!["tiny".to_owned()])
    );
    let unpacked: Vec<_> = std::fs::read_dir(world.root().join(".images"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(unpacked.len(), 1, "{unpacked:?}");
    let a = create_from(&world.provider, "tiny").await.unwrap();
    let b = create_from(&world.provider, "tiny").await.unwrap();
    for id in [&a, &b] {
        let out = world
            .sh(
                id,
                "cat /etc/layer2; test -e /etc/removed || echo whiteout-applied; ls /opaque; \
                 cat /etc/os-release",
            )
            .await;
        assert_eq!(
            text(&out.stdout),
            "from layer 2\nwhiteout-applied\nnew\nID=corral-test-image\n",
            "{}",
            text(&out.stderr)
        );
    }
    // A second provider on the same root finds it unpacked: nothing is unpacked again.
    let rootfs_dir = world
        .root()
        .join(".images")
        .join(&unpacked[0])
        .join("rootfs");
    let marker = rootfs_dir.join("etc/layer2");
    let before = std::fs::metadata(&marker).unwrap().modified().unwrap();
    let mut config = crate::config(world.root());
    config.images = images("tiny", source);
    let again = LocalProvider::new(config).unwrap();
    assert_eq!(
        std::fs::metadata(&marker).unwrap().modified().unwrap(),
        before
    );
    drop(again);

    // A layer whose bytes do not match its digest is never used.
    let broken = scratch.path().join("broken");
    crate::oci_layout(&rootfs, &broken, "v1");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(broken.join("index.json")).unwrap()).unwrap();
    let manifest_digest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(broken.join("blobs/sha256").join(manifest_digest)).unwrap(),
    )
    .unwrap();
    let layer = manifest["layers"][1]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let layer_path = broken.join("blobs/sha256").join(layer);
    let mut bytes = std::fs::read(&layer_path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer_path, bytes).unwrap();
    let bad = World::with(|c| {
        c.images = images(
            "broken",
            ImageSource::OciLayout {
                path: broken.clone(),
                reference: None,
            },
        )
    });
    let problems = bad.provider.containment().images.clone().unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("does not match its digest")),
        "{problems:?}"
    );
    let got = create_from(&bad.provider, "broken").await;
    assert!(
        matches!(got, Err(ProviderError::Unavailable { .. })),
        "{got:?}"
    );
    assert_eq!(sandbox_dirs(&bad.root()), 0);
    let leftovers: Vec<_> = std::fs::read_dir(bad.root().join(".images"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(
        leftovers.is_empty(),
        "a half-unpacked image was kept: {leftovers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_image_is_refused_before_anything_is_made() {
    let plain = World::new();
    assert_eq!(plain.provider.capabilities().image_mode, ImageMode::Fixed);
    let got = create_from(&plain.provider, "anything").await;
    assert!(
        matches!(got, Err(ProviderError::InvalidRequest { .. })),
        "{got:?}"
    );
    let Some(busybox) = crate::busybox() else {
        return;
    };
    let image = tempfile::tempdir().unwrap();
    crate::busybox_rootfs(&busybox, image.path());
    let world =
        World::with(|c| c.images = images("busybox", ImageSource::Directory(image.path().into())));
    match create_from(&world.provider, "debian:12").await {
        Err(ProviderError::InvalidRequest { message, .. }) => {
            assert!(
                message.contains("debian:12") && message.contains("busybox"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sandbox_dirs(&world.root()), 0);
    assert_eq!(sandbox_dirs(&plain.root()), 0);
}
