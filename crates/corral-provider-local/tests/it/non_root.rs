//! A server that is not root still runs isolated sandboxes (its own uid, in a user namespace).

use std::os::unix::fs::PermissionsExt as _;

use crate::{World, text};

const INNER: &str = "non_root::inner_sandboxes_work_for_an_unprivileged_server";

#[test]
fn an_unprivileged_server_runs_sandboxes_too() {
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
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .arg(&exe)
        .args([
            INNER,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("TMPDIR", "/tmp")
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
#[ignore = "run as an unprivileged user by an_unprivileged_server_runs_sandboxes_too"]
fn inner_sandboxes_work_for_an_unprivileged_server() {
    assert!(
        !rustix::process::geteuid().is_root(),
        "run this as a non-root user"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
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
