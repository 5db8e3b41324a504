//! Lifecycle: persistence across restarts, expiry, delete, lookups.

use corral_domain::{CreateSandboxRequest, OperationId, Provider, SandboxStatus};
use corral_provider::{CreateSpec, ProviderError, SandboxProvider};
use corral_provider_local::LocalProvider;

use crate::{World, create, ctx, sh, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_survives_a_restart_of_its_provider() {
    let world = World::new();
    let operation_id = OperationId::new();
    let spec = CreateSpec {
        operation_id,
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: None,
    };
    let id = world
        .provider
        .create(&ctx(), &spec)
        .await
        .unwrap()
        .native_id;
    world
        .sh(
            &id,
            "echo kept > /workspace/a; mkdir /tmp/d; echo t > /tmp/d/b; echo r > /root-file",
        )
        .await;
    world
        .provider
        .write_file(&ctx(), &id, "/workspace/w.txt", b"written")
        .await
        .unwrap();
    let root = world.root();
    let World { data, provider } = world;
    drop(provider);

    let again = LocalProvider::new(crate::config(&root)).unwrap();
    let seen = again.get(&ctx(), &id).await.unwrap();
    assert_eq!(seen.status, SandboxStatus::Running);
    assert_eq!(seen.operation_id, Some(operation_id));
    let out = sh(
        &again,
        &id,
        "cat /workspace/a /tmp/d/b /root-file /workspace/w.txt",
    )
    .await;
    assert_eq!(text(&out.stdout), "kept\nt\nr\nwritten");
    let found = again
        .find_by_operation_id(&ctx(), &operation_id)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].native_id, id);
    drop(again);
    drop(data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_everything_and_is_idempotent() {
    let world = World::new();
    let id = world.create().await;
    world.sh(&id, "echo x > /workspace/x").await;
    assert!(world.root().join(&id).exists());
    world.provider.delete(&ctx(), &id).await.unwrap();
    assert!(!world.root().join(&id).exists());
    assert!(
        std::fs::read_dir(world.root().join(".trash"))
            .unwrap()
            .next()
            .is_none()
    );
    world.provider.delete(&ctx(), &id).await.unwrap();
    for got in [
        world.provider.get(&ctx(), &id).await.map(drop),
        world
            .provider
            .exec(&ctx(), &id, &corral_provider::ExecSpec::new("true"))
            .await
            .map(drop),
        world
            .provider
            .read_file(&ctx(), &id, "/workspace/x", 10)
            .await
            .map(drop),
    ] {
        assert!(
            matches!(got, Err(ProviderError::NotFound { .. })),
            "{got:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_past_its_timeout_reads_as_expired() {
    let world = World::new();
    let id = create(&world.provider, Some(1)).await;
    assert_eq!(
        world.provider.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Running
    );
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(
        world.provider.get(&ctx(), &id).await.unwrap().status,
        SandboxStatus::Expired
    );
    let exec = world
        .provider
        .exec(&ctx(), &id, &corral_provider::ExecSpec::new("true"))
        .await;
    assert!(
        matches!(exec, Err(ProviderError::NotFound { .. })),
        "{exec:?}"
    );
    assert!(
        !world.root().join(&id).join("fs").exists(),
        "files not reclaimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_ids_and_timeouts_are_rejected() {
    let world = World::new();
    for bad in ["..", "../x", ".trash", "", "01ARZ3NDEKTSV4RRFFQ69G5FAV"] {
        let got = world.provider.get(&ctx(), bad).await;
        assert!(
            matches!(got, Err(ProviderError::NotFound { .. })),
            "{bad}: {got:?}"
        );
        world.provider.delete(&ctx(), bad).await.unwrap();
    }
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: Some(corral_provider_local::MAX_TIMEOUT_SECONDS + 1),
    };
    let got = world.provider.create(&ctx(), &spec).await;
    assert!(
        matches!(got, Err(ProviderError::InvalidRequest { .. })),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_kills_the_sandboxs_running_commands() {
    let world = std::sync::Arc::new(World::new());
    let id = world.create().await;
    let running = {
        let world = world.clone();
        let id = id.clone();
        tokio::spawn(async move {
            world
                .provider
                .exec(&ctx(), &id, &corral_provider::ExecSpec::new("sleep 1002"))
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    world.provider.delete(&ctx(), &id).await.unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), running)
        .await
        .expect("the command outlived its sandbox")
        .unwrap();
    assert!(
        matches!(ended, Err(ProviderError::NotFound { .. })),
        "{ended:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let host = std::process::Command::new("pgrep")
        .args(["-x", "-f", "sleep 1002"])
        .output()
        .unwrap();
    assert!(
        host.stdout.is_empty(),
        "left on the host: {}",
        text(&host.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_ends_when_its_sandbox_expires() {
    let world = World::new();
    let id = create(&world.provider, Some(2)).await;
    let mut spec = corral_provider::ExecSpec::new("sleep 30; echo outlived");
    spec.timeout = std::time::Duration::from_secs(60);
    let started = std::time::Instant::now();
    let exec = world.provider.exec(&ctx(), &id, &spec).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the command ran {:?} past its sandbox's lifetime",
        started.elapsed()
    );
    assert!(
        matches!(exec, Err(ProviderError::NotFound { .. })),
        "{exec:?}"
    );
}

/// Replicas on one machine may share a sandboxes root: their probes, uid choices and command
/// setups must not collide (they are serialised by file locks, not in-process mutexes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_providers_sharing_a_root_start_together_and_never_share_a_uid_or_a_setup() {
    let data = tempfile::tempdir().unwrap();
    let root = data.path().join("sandboxes");
    // Start-up: the two probes run at the same moment, several times over.
    let mut pair = Vec::new();
    for _ in 0..6 {
        let (a, b) = (root.clone(), root.clone());
        let (a, b) = tokio::join!(
            tokio::task::spawn_blocking(move || LocalProvider::new(crate::config(a)).unwrap()),
            tokio::task::spawn_blocking(move || LocalProvider::new(crate::config(b)).unwrap()),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.unavailable_reason(), None);
        assert_eq!(b.unavailable_reason(), None);
        pair = vec![a, b];
    }
    let leftovers: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".probe"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "probe roots left behind: {leftovers:?}"
    );

    // Creates from both at once: every sandbox gets its own uid (as root; otherwise none).
    let creates = (0..8).map(|i| create(&pair[i % 2], None));
    let ids = futures::future::join_all(creates).await;
    let uids: Vec<Option<u64>> = ids
        .iter()
        .map(|id| {
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join(id).join("meta.json")).unwrap())
                    .unwrap();
            meta["uid"].as_u64()
        })
        .collect();
    let distinct: std::collections::BTreeSet<_> = uids.iter().collect();
    assert_eq!(
        distinct.len(),
        uids.len(),
        "two sandboxes share a uid: {uids:?}"
    );

    // Commands of one sandbox from both providers at once all set up and run.
    let runs = (0..8).map(|i| sh(&pair[i % 2], &ids[0], "echo ok"));
    for out in futures::future::join_all(runs).await {
        assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, b"ok\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
async fn a_sandbox_whose_init_died_gets_a_new_one_at_its_next_command() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: the init is found by the sandbox's own uid, which needs a root server");
        return;
    }
    let world = World::new();
    let id = world.create().await;
    world.sh(&id, "echo one > /workspace/kept").await;
    let first = crate::inits_of(&world.root(), &id);
    assert_eq!(first.len(), 1, "{first:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(first[0]).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    // The next command finds it gone, and runs on a new one, with the sandbox's files.
    let out = world.sh(&id, "cat /workspace/kept").await;
    assert_eq!(text(&out.stdout), "one\n", "{}", text(&out.stderr));
    let second = crate::inits_of(&world.root(), &id);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first);
}
