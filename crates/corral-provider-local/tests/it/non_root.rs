//! A server that is not root still runs isolated sandboxes (its own uid, in a user namespace).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::{World, text};

const INNER: &str = "non_root::inner_sandboxes_work_for_an_unprivileged_server";

/// Runs the ignored test `inner` of a copy of this binary as uid 65534, with `env`, first
/// moving the process into cgroup v2 group `into` (as a delegating service manager starts
/// its service inside the delegated subtree). Skipped (and says so) unless this is root.
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn run_unprivileged(inner: &str, env: &[(&str, String)], into: Option<&Path>) {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: this process is not root, so it cannot start one that is not");
        return;
    }
    // A copy of this test binary that any user may run, in a directory any user may enter.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("it");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // And the sandbox init beside it, where the provider looks for it.
    let init = dir.path().join("corral-sandbox-init");
    std::fs::copy(env!("CARGO_BIN_EXE_corral-sandbox-init"), &init).unwrap();
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let procs = into.map_or_else(|| "/dev/null".into(), |g| g.join("cgroup.procs"));
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
        .arg(procs)
        .args([
            "/usr/bin/setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .arg(&exe)
        .args([
            inner,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("TMPDIR", "/tmp")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unprivileged_server_runs_sandboxes_too() {
    run_unprivileged(INNER, &[], None);
}

/// A cgroup subtree delegated to uid 65534, as an operator (or systemd's `Delegate=yes`)
/// hands one to a service: the directory and its interface files are that user's, in each
/// hierarchy the sandboxes' limits use. Removed again on drop.
struct Delegated {
    /// Relative to the cgroup mounts.
    name: String,
    dirs: Vec<PathBuf>,
    /// cgroup v2: the leaf the server runs in (a group with processes hands on no
    /// controllers, so the server cannot sit in the subtree's top).
    supervisor: Option<PathBuf>,
}

impl Delegated {
    fn new() -> Self {
        // Unique per test, not only per process: under `cargo test` the tests are threads of
        // one process, and two of them must not share (and remove) one subtree.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("corral-delegated-{}-{n}", std::process::id());
        let mounts: Vec<(PathBuf, String, String)> =
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .filter_map(|l| {
                    let (left, right) = l.split_once(" - ")?;
                    let mut right = right.split(' ');
                    let fstype = right.next()?.to_owned();
                    let options = right.nth(1)?.to_owned();
                    Some((left.split(' ').nth(4)?.into(), fstype, options))
                })
                .collect();
        let give = |path: &Path| std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
        let unified = mounts.iter().find(|(p, t, _)| {
            t == "cgroup2"
                && std::fs::read_to_string(p.join("cgroup.controllers"))
                    .is_ok_and(|c| c.contains("memory") && c.contains("pids"))
        });
        if let Some((mount, _, _)) = unified {
            for c in ["memory", "pids", "cpu", "io"] {
                let _ = std::fs::write(mount.join("cgroup.subtree_control"), format!("+{c}"));
            }
            let dir = mount.join(&name);
            let supervisor = dir.join("supervisor");
            std::fs::create_dir_all(&supervisor).unwrap();
            for path in [
                dir.clone(),
                dir.join("cgroup.procs"),
                dir.join("cgroup.subtree_control"),
                dir.join("cgroup.threads"),
                supervisor.clone(),
                supervisor.join("cgroup.procs"),
            ] {
                give(&path);
            }
            return Self {
                name,
                dirs: vec![dir],
                supervisor: Some(supervisor),
            };
        }
        let mut dirs = Vec::new();
        for controller in ["memory", "pids", "cpu", "blkio"] {
            let Some((mount, _, _)) = mounts
                .iter()
                .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|o| o == controller))
            else {
                continue;
            };
            let dir = mount.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            for path in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
                give(&path);
            }
            dirs.push(dir);
        }
        Self {
            name,
            dirs,
            supervisor: None,
        }
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        if let Some(supervisor) = &self.supervisor {
            let _ = std::fs::remove_dir(supervisor);
        }
        for dir in &self.dirs {
            // Whatever the provider left (it removes its groups; a failed test may not).
            for child in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if child.path().is_dir() {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn an_unprivileged_server_with_a_delegated_cgroup_limits_each_sandbox_as_a_whole() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: this process is not root, so it cannot delegate a cgroup");
        return;
    }
    let delegated = Delegated::new();
    run_unprivileged(
        DELEGATED,
        &[(PARENT_ENV, delegated.name.clone())],
        delegated.supervisor.as_deref(),
    );
    // The provider removed each sandbox's group (only the server's own leaf is left).
    for dir in &delegated.dirs {
        let left: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir() && e.file_name() != "supervisor")
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", dir.display());
    }
}

/// The runtime of an inner test, which must be running as a non-root user.
fn unprivileged_runtime() -> tokio::runtime::Runtime {
    assert!(
        !rustix::process::geteuid().is_root(),
        "run this as a non-root user"
    );
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const DELEGATED: &str = "non_root::inner_a_delegated_cgroup_limits_each_sandbox_as_a_whole";
/// The delegated subtree, for the inner test.
const PARENT_ENV: &str = "CORRAL_TEST_CGROUP_PARENT";

#[test]
#[ignore = "run as an unprivileged user by an_unprivileged_server_with_a_delegated_cgroup_limits_each_sandbox_as_a_whole"]
fn inner_a_delegated_cgroup_limits_each_sandbox_as_a_whole() {
    let parent = std::env::var(PARENT_ENV).unwrap();
    unprivileged_runtime().block_on(async {
        let world = World::with(|c| {
            c.cgroup_parent = Some(parent.clone().into());
            c.limits.max_processes = 40;
        });
        let containment = world.provider.containment();
        assert!(
            containment
                .cgroups
                .as_ref()
                .is_ok_and(|c| c.contains(&parent)),
            "{containment:?}"
        );
        let id = world.create().await;
        let groups = text(&world.sh(&id, "cat /proc/self/cgroup").await.stdout);
        assert!(groups.contains(&format!("/{parent}/{id}")), "{groups}");
        // Two commands at once, each trying to hold 30 processes: together they may hold
        // 40 (each command alone may: its own RLIMIT_NPROC is 40 too).
        let total = crate::processes_held_by_two_commands(&world, &id, 30).await;
        assert!(total <= 40, "{total} processes in a 40-process sandbox");
        assert_eq!(text(&world.sh(&id, "echo alive").await.stdout), "alive\n");
        corral_provider::SandboxProvider::delete(&world.provider, &crate::ctx(), &id)
            .await
            .unwrap();
    });
}

const COMMANDS: &str = "non_root::inner_an_unprivileged_servers_durable_commands_survive_a_restart";

#[test]
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn an_unprivileged_server_with_a_delegated_cgroup_keeps_durable_commands_across_a_restart() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: this process is not root, so it cannot delegate a cgroup");
        return;
    }
    let delegated = Delegated::new();
    run_unprivileged(
        COMMANDS,
        &[(PARENT_ENV, delegated.name.clone())],
        delegated.supervisor.as_deref(),
    );
}

#[test]
#[ignore = "run as an unprivileged user by an_unprivileged_server_with_a_delegated_cgroup_keeps_durable_commands_across_a_restart"]
fn inner_an_unprivileged_servers_durable_commands_survive_a_restart() {
    let parent = std::env::var(PARENT_ENV).unwrap();
    unprivileged_runtime().block_on(crate::commands::a_command_survives_a_restart(|root| {
        let mut config = crate::config(root);
        config.cgroup_parent = Some(parent.clone().into());
        config
    }));
}

const IMAGES: &str = "non_root::inner_an_unprivileged_server_runs_image_sandboxes";
/// The OCI layout, for the inner test.
const LAYOUT_ENV: &str = "CORRAL_TEST_IMAGE_LAYOUT";

#[test]
#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn an_unprivileged_server_with_a_delegated_cgroup_runs_image_sandboxes() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: this process is not root, so it cannot start one that is not");
        return;
    }
    let Some(busybox) = crate::busybox() else {
        return;
    };
    // An image any user may read, built here.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let rootfs = scratch.path().join("rootfs");
    crate::busybox_rootfs(&busybox, &rootfs);
    let layout = scratch.path().join("layout");
    crate::oci_layout(&rootfs, &layout, "v1");
    for entry in walk(&layout) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let delegated = Delegated::new();
    run_unprivileged(
        IMAGES,
        &[
            (PARENT_ENV, delegated.name.clone()),
            (LAYOUT_ENV, layout.display().to_string()),
        ],
        delegated.supervisor.as_deref(),
    );
}

/// `dir` and everything below it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_owned()];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

#[test]
#[ignore = "run as an unprivileged user by an_unprivileged_server_with_a_delegated_cgroup_runs_image_sandboxes"]
fn inner_an_unprivileged_server_runs_image_sandboxes() {
    let parent = std::env::var(PARENT_ENV).unwrap();
    let layout = std::env::var(LAYOUT_ENV).unwrap();
    unprivileged_runtime().block_on(async {
        let world = World::with(|c| {
            c.cgroup_parent = Some(parent.clone().into());
            c.images = std::collections::BTreeMap::from([(
                "tiny".to_owned(),
                corral_provider_local::ImageSource::OciLayout {
                    path: layout.clone().into(),
                    reference: Some("v1".into()),
                },
            )]);
        });
        let containment = world.provider.containment();
        assert_eq!(
            containment.images,
            Ok(vec!["tiny".to_owned()]),
            "{containment:?}"
        );
        let a = crate::images::create_from(&world.provider, "tiny")
            .await
            .unwrap();
        let b = crate::images::create_from(&world.provider, "tiny")
            .await
            .unwrap();
        let out = world
            .sh(
                &a,
                "cat /etc/layer2; id -u; echo installed > /usr/local/bin/tool; \
                 cat /proc/self/cgroup",
            )
            .await;
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("from layer 2\n0\n"),
            "{stdout}{}",
            text(&out.stderr)
        );
        assert!(stdout.contains(&format!("/{parent}/{a}")), "{stdout}");
        // The install persists in its sandbox, and only there.
        assert_eq!(
            text(&world.sh(&a, "cat /usr/local/bin/tool").await.stdout),
            "installed\n"
        );
        let other = world.sh(&b, "cat /usr/local/bin/tool 2>&1").await;
        assert!(
            text(&other.stdout).contains("No such file"),
            "{}",
            text(&other.stdout)
        );
        let read = corral_provider::SandboxProvider::read_file(
            &world.provider,
            &crate::ctx(),
            &a,
            "/usr/local/bin/tool",
            64,
        )
        .await
        .unwrap();
        assert_eq!(read, b"installed\n");
    });
}

#[test]
#[ignore = "run as an unprivileged user by an_unprivileged_server_runs_sandboxes_too"]
fn inner_sandboxes_work_for_an_unprivileged_server() {
    unprivileged_runtime().block_on(async {
        let world = World::new();
        let id = world.create().await;
        let out = world
            .sh(
                &id,
                "id -u; echo kept > /workspace/f; cat /workspace/f; ls /root 2>&1",
            )
            .await;
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with("0\nkept\n"), "{stdout}");
        assert!(stdout.contains("No such file"), "{stdout}");
        // The caller's environment reaches the command (set last, by `env`).
        let mut spec = corral_provider::ExecSpec::new("echo \"$GREETING\"; id -u");
        spec.env.insert("GREETING".into(), "hi there".into());
        let out =
            corral_provider::SandboxProvider::exec(&world.provider, &crate::ctx(), &id, &spec)
                .await
                .unwrap();
        assert_eq!(text(&out.stdout), "hi there\n0\n", "{}", text(&out.stderr));
        // ... and never the stages with capabilities over the sandbox's mounts.
        let mut spec = corral_provider::ExecSpec::new("true");
        spec.env.insert("LD_DEBUG".into(), "files".into());
        let out =
            corral_provider::SandboxProvider::exec(&world.provider, &crate::ctx(), &id, &spec)
                .await
                .unwrap();
        let stderr = text(&out.stderr);
        for stage in ["/usr/bin/setsid", "/usr/bin/unshare"] {
            assert!(
                !stderr.contains(stage),
                "{stage} saw the caller's env: {stderr}"
            );
        }
        let remount = world
            .sh(
                &id,
                "mount -o remount,rw,bind /usr 2>&1; touch /usr/x 2>&1 || echo refused",
            )
            .await;
        assert!(
            text(&remount.stdout).contains("refused"),
            "{}",
            text(&remount.stdout)
        );
        // Without root there are no cgroups or disk images, and the provider says why; the
        // seccomp filter still applies.
        let containment = world.provider.containment();
        assert!(
            containment
                .cgroups
                .as_ref()
                .is_err_and(|why| why.contains("not root")),
            "{containment:?}"
        );
        assert!(containment.disk_quota.is_err(), "{containment:?}");
        assert_eq!(containment.seccomp, Ok(()));
        let nested = world
            .sh(&id, "unshare -r -n true 2>/dev/null || echo refused")
            .await;
        assert_eq!(text(&nested.stdout), "refused\n");
    });
}
