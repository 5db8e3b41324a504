//! Shared capacity: what all sandboxes, and each project's, hold together is capped; a
//! create past a cap is refused before anything is made; memory and processes are held
//! to the caps by parent cgroups.

use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CreateSpec, ProviderError, SandboxProvider};
use corral_provider_local::{CapacityLimits, LocalCapacity, LocalCreate, LocalProvider};

use crate::{World, ctx, text};

#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn root_only() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    println!("skipped: cgroups and sandbox filesystems need a root server");
    false
}

/// A create of `project`'s (none: no project).
async fn create_in(
    provider: &LocalProvider,
    project: Option<&str>,
    timeout: Option<u64>,
) -> Result<String, ProviderError> {
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, timeout),
        timeout_seconds: timeout,
    };
    let local = LocalCreate {
        project: project.map(str::to_owned),
        ..LocalCreate::default()
    };
    provider
        .create_with(&ctx(), &spec, &local)
        .await
        .map(|o| o.native_id)
}

#[track_caller]
fn assert_refused(got: Result<String, ProviderError>, words: &str) {
    match got {
        Err(ProviderError::CapacityExceeded { message, .. }) => {
            assert!(message.contains(words), "{message}");
        }
        other => panic!("expected a refusal naming `{words}`, got {other:?}"),
    }
}

/// Sandbox directories under the root (not the dot-entries: trash, locks, templates).
fn sandbox_dirs(world: &World) -> usize {
    std::fs::read_dir(world.root())
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count()
}

fn caps(server: CapacityLimits, per_project: CapacityLimits, sandboxes: u64) -> LocalCapacity {
    LocalCapacity {
        server,
        per_project,
        sandboxes_per_project: sandboxes,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_past_the_servers_disk_cap_are_refused_before_anything_is_made() {
    if !root_only() {
        return;
    }
    let mib = 1 << 20;
    let world = World::with(|c| {
        c.limits.disk_bytes = Some(32 * mib);
        c.capacity = Some(caps(
            CapacityLimits {
                disk_bytes: 3 * 32 * mib,
                ..CapacityLimits::NONE
            },
            CapacityLimits::NONE,
            u64::MAX,
        ));
    });
    let mut ids = Vec::new();
    for project in [None, Some("a"), Some("b")] {
        ids.push(create_in(&world.provider, project, None).await.unwrap());
    }
    // A fourth would reserve 128 MiB of the server's 96: refused, whoever asks.
    for project in [None, Some("c")] {
        assert_refused(
            create_in(&world.provider, project, None).await,
            "server's cap",
        );
    }
    assert_eq!(
        sandbox_dirs(&world),
        3,
        "a refused create left something behind"
    );
    world.provider.delete(&ctx(), &ids[0]).await.unwrap();
    create_in(&world.provider, Some("c"), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_projects_creates_cannot_take_the_disk_other_projects_need() {
    if !root_only() {
        return;
    }
    let mib = 1 << 20;
    let world = World::with(|c| {
        c.limits.disk_bytes = Some(32 * mib);
        c.capacity = Some(caps(
            CapacityLimits::NONE,
            CapacityLimits {
                disk_bytes: 2 * 32 * mib,
                ..CapacityLimits::NONE
            },
            u64::MAX,
        ));
    });
    for _ in 0..2 {
        create_in(&world.provider, Some("greedy"), None)
            .await
            .unwrap();
    }
    assert_refused(
        create_in(&world.provider, Some("greedy"), None).await,
        "project `greedy`",
    );
    // Every other project still has its share.
    for _ in 0..2 {
        create_in(&world.provider, Some("other"), None)
            .await
            .unwrap();
    }
    assert_eq!(sandbox_dirs(&world), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_has_a_quota_of_live_sandboxes_by_default() {
    // The default is derived for every server, whatever the machine.
    let plain = World::new();
    assert_eq!(
        plain.provider.capacity().sandboxes_per_project,
        corral_provider_local::DEFAULT_SANDBOXES_PER_PROJECT
    );
    let world = World::with(|c| {
        let mut caps = LocalCapacity::for_this_machine(&c.root);
        caps.sandboxes_per_project = 2;
        c.capacity = Some(caps);
    });
    let first = create_in(&world.provider, Some("p"), None).await.unwrap();
    create_in(&world.provider, Some("p"), Some(1))
        .await
        .unwrap();
    assert_refused(create_in(&world.provider, Some("p"), None).await, "2 live");
    // Another project, and sandboxes of no project, are not held back by p's.
    create_in(&world.provider, Some("q"), None).await.unwrap();
    create_in(&world.provider, None, None).await.unwrap();
    // An expired sandbox is not live; a deleted one is gone.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let third = create_in(&world.provider, Some("p"), None).await.unwrap();
    assert_refused(create_in(&world.provider, Some("p"), None).await, "2 live");
    world.provider.delete(&ctx(), &first).await.unwrap();
    create_in(&world.provider, Some("p"), None).await.unwrap();
    let _ = third;
}

/// Through the provider's public `create`: the project is the call context's project (not its
/// deployment, which every project of a server shares), so one project at its quota does not
/// hold back another of the same deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_create_counts_each_project_of_a_deployment_against_its_own_quota() {
    let world = World::with(|c| {
        let mut caps = LocalCapacity::for_this_machine(&c.root);
        caps.sandboxes_per_project = 1;
        c.capacity = Some(caps);
    });
    let spec = || CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: None,
    };
    let of = |project: &str| {
        ctx()
            .with_deployment("dep_one")
            .with_project(project.to_owned())
    };
    let p = world.provider.create(&of("prj_p"), &spec()).await.unwrap();
    assert_refused(
        world
            .provider
            .create(&of("prj_p"), &spec())
            .await
            .map(|o| o.native_id),
        "1 live",
    );
    let q = world.provider.create(&of("prj_q"), &spec()).await.unwrap();
    for id in [p.native_id, q.native_id] {
        world.provider.delete(&ctx(), &id).await.unwrap();
    }
}

/// Each of two sandboxes holds `mib` MiB for 3 s at the same time; the exit status of each
/// holder (`0`: it kept its memory).
async fn hold_memory_in_two(world: &World, a: &str, b: &str, mib: u64) -> (String, String) {
    let hold = format!("{{ head -c {mib}M /dev/zero; sleep 3; }} | tail > /dev/null; echo $?");
    let (x, y) = tokio::join!(world.sh(a, &hold), world.sh(b, &hold));
    (
        text(&x.stdout).trim().to_owned(),
        text(&y.stdout).trim().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_sandboxes_together_are_held_to_its_memory_cap() {
    if !root_only() {
        return;
    }
    let mib = 1u64 << 20;
    let world = World::with(|c| {
        c.limits.memory_bytes = 200 * mib;
        c.capacity = Some(caps(
            CapacityLimits::NONE,
            CapacityLimits {
                memory_bytes: 220 * mib,
                ..CapacityLimits::NONE
            },
            u64::MAX,
        ));
    });
    let project = format!("memcap{}", std::process::id());
    let a = create_in(&world.provider, Some(&project), None)
        .await
        .unwrap();
    let b = create_in(&world.provider, Some(&project), None)
        .await
        .unwrap();
    // 140 MiB each: each sandbox within its own 200, both far over the project's 220.
    let (x, y) = hold_memory_in_two(&world, &a, &b, 140).await;
    assert!(
        x != "0" || y != "0",
        "two sandboxes of one project held 280 MiB under a 220 MiB cap ({x}, {y})"
    );
    // A sandbox of another project is not held to it, and the first sandboxes carry on.
    let c = create_in(&world.provider, Some("elsewhere"), None)
        .await
        .unwrap();
    let d = create_in(&world.provider, None, None).await.unwrap();
    let (x, y) = hold_memory_in_two(&world, &c, &d, 140).await;
    assert_eq!((x.as_str(), y.as_str()), ("0", "0"));
    assert_eq!(text(&world.sh(&a, "echo alive").await.stdout), "alive\n");
}

/// A cgroup subtree of the test's own (so its server-wide caps bind no other test's
/// sandboxes), removed again on drop.
struct OwnSubtree(String);

impl OwnSubtree {
    fn new(tag: &str) -> Self {
        Self(format!("corral-test-{tag}-{}", std::process::id()))
    }
}

impl Drop for OwnSubtree {
    fn drop(&mut self) {
        for mount in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir(mount.path().join(&self.0));
        }
        let _ = std::fs::remove_dir(std::path::Path::new("/sys/fs/cgroup").join(&self.0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sandbox_together_is_held_to_the_servers_memory_cap() {
    if !root_only() {
        return;
    }
    let mib = 1u64 << 20;
    let subtree = OwnSubtree::new("servermem");
    let world = World::with(|c| {
        c.cgroup_parent = Some(subtree.0.clone().into());
        c.limits.memory_bytes = 200 * mib;
        c.capacity = Some(caps(
            CapacityLimits {
                memory_bytes: 220 * mib,
                ..CapacityLimits::NONE
            },
            CapacityLimits::NONE,
            u64::MAX,
        ));
    });
    assert_eq!(world.provider.containment().server_cgroup_caps, Ok(()));
    let a = world.create().await;
    let b = world.create().await;
    let (x, y) = hold_memory_in_two(&world, &a, &b, 140).await;
    assert!(
        x != "0" || y != "0",
        "two sandboxes held 280 MiB under the server's 220 MiB cap ({x}, {y})"
    );
    assert_eq!(text(&world.sh(&b, "echo alive").await.stdout), "alive\n");
    drop(world);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_sandboxes_together_are_held_to_its_process_cap() {
    if !root_only() {
        return;
    }
    let world = World::with(|c| {
        c.limits.max_processes = 100;
        c.capacity = Some(caps(
            CapacityLimits::NONE,
            CapacityLimits {
                processes: 40,
                ..CapacityLimits::NONE
            },
            u64::MAX,
        ));
    });
    let project = format!("pidcap{}", std::process::id());
    let a = create_in(&world.provider, Some(&project), None)
        .await
        .unwrap();
    let b = create_in(&world.provider, Some(&project), None)
        .await
        .unwrap();
    // Each starts up to 30 children and holds them for 3 s; the second starts once the
    // first holds its own.
    let hold = "perl -e 'my @k; for (1 .. 30) { my $p = fork; last unless defined $p; \
                if ($p == 0) { sleep 60; exit 0 } push @k, $p } $| = 1; print scalar(@k), \"\\n\"; \
                sleep 3; kill 9, @k'";
    let (x, y) = tokio::join!(world.sh(&a, hold), async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        world.sh(&b, hold).await
    });
    let held = |o: &corral_provider::ExecOutput| text(&o.stdout).trim().parse::<u64>().unwrap_or(0);
    let (x, y) = (held(&x), held(&y));
    assert!(
        x >= 20,
        "the first sandbox could not even start its own: {x}"
    );
    assert!(
        x + y <= 40,
        "two sandboxes of one project held {x} + {y} children under a 40-process cap"
    );
}
