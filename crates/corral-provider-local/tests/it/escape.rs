//! Nothing outside the sandbox is visible, readable or writable from inside it.

use std::io::Read as _;
use std::net::TcpListener;
use std::time::Duration;

use corral_provider::{ProviderError, SandboxProvider};

use crate::{World, ctx, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_see_the_data_dir_another_sandbox_or_host_paths() {
    let world = World::new();
    // A canary beside the sandboxes root, in the server's data dir.
    std::fs::write(world.data.path().join("canary.txt"), "data-dir-canary").unwrap();
    let host_tmp = tempfile::Builder::new()
        .prefix("corral-host-canary")
        .tempfile_in("/tmp")
        .unwrap();
    std::fs::write(host_tmp.path(), "host-tmp-canary").unwrap();
    let a = world.create().await;
    let b = world.create().await;
    let planted = world.sh(&b, "echo b-secret > /workspace/secret.txt").await;
    assert_eq!(planted.exit_code, 0);

    let data = world.data.path().display().to_string();
    let root = world.root().display().to_string();
    let host_tmp_path = host_tmp.path().display().to_string();
    let probe = world
        .sh(
            &a,
            &format!(
                "ls {data} {root} {root}/{b} /work /root /home /var /run /var/run 2>&1; \
                 cat {data}/canary.txt {host_tmp_path} 2>&1; \
                 cat /workspace/secret.txt 2>&1; \
                 ls -a /tmp /; echo done"
            ),
        )
        .await;
    let out = text(&probe.stdout);
    assert!(out.ends_with("done\n"), "{out}");
    assert!(!out.contains("data-dir-canary"), "data dir readable: {out}");
    assert!(!out.contains("b-secret"), "another sandbox readable: {out}");
    assert!(
        !out.contains("host-tmp-canary"),
        "host /tmp readable: {out}"
    );
    assert!(
        !out.contains("corral-host-canary") || out.contains(&format!("{host_tmp_path}: No such")),
        "host /tmp visible: {out}"
    );
    assert!(!out.contains("meta.json"), "metadata visible: {out}");
    for gone in [
        data.as_str(),
        root.as_str(),
        &format!("{root}/{b}"),
        "/work",
        "/root",
        "/home",
        "/var",
        "/run",
        "/var/run",
    ] {
        assert!(
            out.contains(&format!("{gone}': No such file or directory")),
            "{gone} exists inside: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_system_dirs_are_read_only_and_secrets_masked() {
    // cargo and nextest give test processes CARGO_* variables: the server's environment.
    assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
    let world = World::new();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            "touch /usr/corral-x 2>&1; touch /etc/corral-x 2>&1; \
             ps -o sid= -p $$ | tr -d ' '; ps -o pid= -p $$ | tr -d ' '; \
             env | grep -c CARGO; wc -c < /etc/shadow; id -u; hostname",
        )
        .await;
    let out = text(&out.stdout);
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!std::path::Path::new("/usr/corral-x").exists());
    assert!(!std::path::Path::new("/etc/corral-x").exists());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[lines.len() - 4],
        "0",
        "the server's environment leaks in: {out}"
    );
    assert_eq!(lines[lines.len() - 3], "0", "/etc/shadow not masked: {out}");
    assert_eq!(lines[lines.len() - 2], "0", "not root inside: {out}");
    assert_eq!(lines[lines.len() - 1], "corral", "uts not private: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_paths_that_leave_the_sandbox_are_refused() {
    let world = World::new();
    std::fs::write(world.data.path().join("canary.txt"), "data-dir-canary").unwrap();
    let id = world.create().await;
    let data = world.data.path().display().to_string();
    let made = world
        .sh(
            &id,
            &format!(
                "cd /workspace && ln -s {data}/canary.txt abs-link && \
                 ln -s ../../../../../../../../../../{data}/canary.txt rel-link && \
                 ln -s {data} abs-dir && ln -s ../../../../../../../../.. up-dir && \
                 ln -s rel-link chain && mkdir inside && echo in > inside/f && \
                 ln -s inside/f ok-link"
            ),
        )
        .await;
    assert_eq!(made.exit_code, 0, "{}", text(&made.stderr));
    let p = &world.provider;
    for path in [
        "/workspace/../../canary.txt".to_owned(),
        "../canary.txt".to_owned(),
        format!("{data}/canary.txt"),
        "/etc/passwd".to_owned(),
        "/workspace/abs-link".to_owned(),
        "/workspace/rel-link".to_owned(),
        "/workspace/chain".to_owned(),
        "/workspace/abs-dir/canary.txt".to_owned(),
        "/workspace/up-dir/canary.txt".to_owned(),
    ] {
        let read = p.read_file(&ctx(), &id, &path, 1024).await;
        assert!(
            matches!(
                read,
                Err(ProviderError::FileRefused { .. } | ProviderError::FileNotFound { .. })
            ),
            "read {path}: {read:?}"
        );
        let write = p.write_file(&ctx(), &id, &path, b"pwned").await;
        assert!(
            matches!(
                write,
                Err(ProviderError::FileRefused { .. } | ProviderError::ParentMissing { .. })
            ),
            "write {path}: {write:?}"
        );
    }
    // The symlinks that escape are refused as such, not merely missing.
    for path in [
        "/workspace/abs-link",
        "/workspace/rel-link",
        "/workspace/up-dir/x",
    ] {
        let read = p.read_file(&ctx(), &id, path, 1024).await;
        assert!(
            matches!(read, Err(ProviderError::FileRefused { .. })),
            "{path}: {read:?}"
        );
    }
    let write = p
        .write_file(&ctx(), &id, "/workspace/abs-dir/canary.txt", b"pwned")
        .await;
    assert!(
        matches!(write, Err(ProviderError::FileRefused { .. })),
        "{write:?}"
    );
    assert_eq!(
        std::fs::read_to_string(world.data.path().join("canary.txt")).unwrap(),
        "data-dir-canary"
    );
    // A relative symlink that stays inside is followed.
    assert_eq!(
        p.read_file(&ctx(), &id, "/workspace/ok-link", 1024)
            .await
            .unwrap(),
        b"in\n"
    );
    // A write never goes through a symlink, even one that stays inside.
    let write = p.write_file(&ctx(), &id, "/workspace/ok-link", b"x").await;
    assert!(
        matches!(write, Err(ProviderError::FileRefused { .. })),
        "{write:?}"
    );
    assert_eq!(
        text(&world.sh(&id, "cat /workspace/inside/f").await.stdout),
        "in\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_a_connect_to_the_host_loopback_fails() {
    let world = World::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            &format!(
                "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; \
                 else echo refused; fi; cat /proc/net/dev | tail -n +3 | cut -d: -f1"
            ),
        )
        .await;
    let stdout = text(&out.stdout);
    // /dev/tcp is a bash feature; sh may be dash, so fall back to what interfaces exist.
    assert!(!stdout.contains("connected"), "{stdout}");
    let interfaces: Vec<&str> = stdout.lines().skip(1).map(str::trim).collect();
    assert_eq!(interfaces, ["lo"], "{stdout}");
    let tried = world
        .sh(
            &id,
            &format!(
                "if command -v python3 >/dev/null; then python3 -c \"import socket; \
                 socket.create_connection(('127.0.0.1', {port}), timeout=2)\" \
                 && echo connected || echo failed; \
                 else bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected || echo failed; fi"
            ),
        )
        .await;
    assert_eq!(
        text(&tried.stdout).trim(),
        "failed",
        "{}",
        text(&tried.stderr)
    );
    std::thread::sleep(Duration::from_millis(50));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((mut stream, from)) => {
            let mut buf = Vec::new();
            let _ = stream.read_to_end(&mut buf);
            panic!("the listener saw a connection from {from}");
        }
        Err(e) => panic!("accept failed: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_root_cannot_remount_or_unmask_host_mounts() {
    let world = World::new();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            "mount -o remount,rw,bind /usr 2>&1; touch /usr/corral-pwn 2>&1; \
             umount /etc/shadow 2>&1; wc -c < /etc/shadow; \
             umount -l /usr 2>&1; ls /usr | head -3; \
             mount -o remount,rw /proc 2>&1; \
             echo corral > /proc/sys/kernel/domainname 2>&1 || echo proc-sys-refused; \
             test -w /proc/sysrq-trigger && echo sysrq-writable; \
             mount -t tmpfs none /workspace/m 2>&1; echo end",
        )
        .await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("proc-sys-refused"),
        "/proc/sys writable: {stdout}"
    );
    assert!(!stdout.contains("sysrq-writable"), "{stdout}");
    assert!(stdout.ends_with("end\n"), "{stdout}");
    let exists = std::path::Path::new("/usr/corral-pwn").exists();
    let _ = std::fs::remove_file("/usr/corral-pwn");
    assert!(!exists, "the sandbox wrote to the host's /usr: {stdout}");
    assert!(stdout.contains("\n0\n"), "/etc/shadow unmasked: {stdout}");
    let mode = std::fs::metadata(world.root()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700,
        "sandboxes are reachable by other host users"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_root_each_sandbox_runs_as_its_own_unprivileged_host_uid() {
    use std::os::unix::fs::MetadataExt as _;
    if !rustix::process::geteuid().is_root() {
        println!("skipped: the server is not root here, so sandboxes share its uid");
        return;
    }
    let world = World::new();
    let a = world.create().await;
    let b = world.create().await;
    for id in [&a, &b] {
        let out = world.sh(id, "touch /workspace/owned; id -u").await;
        assert_eq!(text(&out.stdout), "0\n", "not root inside");
    }
    let owner = |id: &str| {
        std::fs::metadata(world.root().join(id).join("fs/workspace/owned"))
            .unwrap()
            .uid()
    };
    let (ua, ub) = (owner(&a), owner(&b));
    assert!(ua >= 1_000_000 && ub >= 1_000_000, "{ua} {ub}");
    assert_ne!(ua, ub, "two sandboxes share a host uid");
    // A file written through the API belongs to the sandbox too, so commands can change it.
    world
        .provider
        .write_file(&ctx(), &a, "/workspace/api.txt", b"x")
        .await
        .unwrap();
    let changed = world
        .sh(&a, "echo y >> /workspace/api.txt && cat /workspace/api.txt")
        .await;
    assert_eq!(text(&changed.stdout), "xy\n", "{}", text(&changed.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_break_the_setup_of_its_next_command() {
    let world = World::new();
    let id = world.create().await;
    let planted = world
        .sh(
            &id,
            "for d in /bin /lib /lib64 /sbin; do [ -L $d ] && rm $d; mkdir -p $d 2>/dev/null; done; \
             ln -s / /.oldrootfs; echo planted",
        )
        .await;
    assert!(
        text(&planted.stdout).contains("planted"),
        "{}",
        text(&planted.stderr)
    );
    let after = world.sh(&id, "ls /bin/sh && echo works").await;
    assert_eq!(
        text(&after.stdout),
        "/bin/sh\nworks\n",
        "{}",
        text(&after.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_network_allowed_the_host_loopback_is_reachable() {
    let world = World::with(|c| c.allow_network = true);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            &format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected"),
        )
        .await;
    assert_eq!(text(&out.stdout), "connected\n", "{}", text(&out.stderr));
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok(), "the listener saw no connection");
}

/// A library that, preloaded into a process with capabilities over the sandbox's mounts,
/// unmounts the `/etc/shadow` mask and records that it could.
const UNMASK_SO: &str = r#"
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>
__attribute__((constructor)) static void unmask(void) {
    if (umount2("/etc/shadow", MNT_DETACH) == 0) {
        int fd = open("/workspace/unmasked", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) { write(fd, "x", 1); close(fd); }
    }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_environment_reaches_only_the_command_not_the_privileged_stages() {
    let world = World::new();
    let id = world.create().await;
    // The dynamic loader of every process that starts with LD_DEBUG reports what it loads:
    // only the command's own processes may see the caller's variables, never pid 1, setsid,
    // setpriv or unshare (which hold capabilities over the sandbox's mounts, or host root).
    let mut spec = corral_provider::ExecSpec::new("true");
    spec.env.insert("LD_DEBUG".into(), "files".into());
    let out = world.provider.exec(&ctx(), &id, &spec).await.unwrap();
    let stderr = text(&out.stderr);
    for stage in ["/usr/bin/setsid", "/usr/bin/setpriv", "/usr/bin/unshare"] {
        assert!(
            !stderr.contains(stage),
            "the caller's environment reached {stage}: {stderr}"
        );
    }

    // And the attack it enables: a library written into the sandbox and preloaded.
    let cc = ["/usr/bin/cc", "/usr/bin/gcc"]
        .into_iter()
        .find(|c| std::path::Path::new(c).exists());
    let Some(cc) = cc else {
        println!("skipped the LD_PRELOAD half: no C compiler on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("u.c"), UNMASK_SO).unwrap();
    let built = std::process::Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.path().join("u.so"))
        .arg(dir.path().join("u.c"))
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built.stderr));
    let so = std::fs::read(dir.path().join("u.so")).unwrap();
    world
        .provider
        .write_file(&ctx(), &id, "/workspace/u.so", &so)
        .await
        .unwrap();
    let mut spec = corral_provider::ExecSpec::new(
        "wc -c < /etc/shadow; cat /workspace/unmasked 2>/dev/null; echo end",
    );
    spec.env
        .insert("LD_PRELOAD".into(), "/workspace/u.so".into());
    let out = world.provider.exec(&ctx(), &id, &spec).await.unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout, "0\nend\n",
        "a preloaded library unmasked /etc/shadow: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_abstract_unix_sockets_of_the_host_are_unreachable() {
    use std::os::linux::net::SocketAddrExt as _;
    if !std::path::Path::new("/usr/bin/python3").exists() {
        println!("skipped: no /usr/bin/python3 to connect from inside the sandbox");
        return;
    }
    let name = format!("corral-canary-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let world = World::new();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            &format!(
                "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                 s.connect(b'\\0{name}'); print('connected')\" 2>&1 || echo refused"
            ),
        )
        .await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("refused"), "{stdout}");
    assert!(!stdout.contains("connected"), "{stdout}");
    assert!(
        listener.accept().is_err(),
        "the host's abstract socket was reached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_of_a_command_outlives_its_exec() {
    let world = World::new();
    let id = world.create().await;
    let tag = 3000 + std::process::id() % 900;
    let out = world
        .sh(
            &id,
            &format!(
                "sleep {tag}1 & (setsid sleep {tag}2 &); nohup sleep {tag}3 >/dev/null 2>&1 & \
                 echo started"
            ),
        )
        .await;
    assert_eq!(text(&out.stdout), "started\n");
    let survivors = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("sleep ") && c.contains(&format!("{tag}")))
            .collect::<Vec<_>>()
    };
    // The kernel kills the rest of a pid namespace when its pid 1 exits; give it a moment.
    let mut left = survivors();
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        left = survivors();
    }
    assert!(left.is_empty(), "processes outlived the exec: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_of_the_server_are_not_inherited() {
    let world = World::new();
    let canary = world.data.path().join("fd-canary.txt");
    std::fs::write(&canary, "fd-canary-secret").unwrap();
    // Opened without O_CLOEXEC, as a careless library might (a database, a log file).
    let fd = rustix::fs::open(
        &canary,
        rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            "for f in /proc/self/fd/* /proc/1/fd/* /proc/$$/fd/*; do cat \"$f\" </dev/null; done \
             2>/dev/null; echo end",
        )
        .await;
    drop(fd);
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with("end\n"), "{stdout}");
    assert!(!stdout.contains("fd-canary-secret"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_signal_host_processes() {
    let mut host = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let world = World::new();
    let id = world.create().await;
    let out = world
        .sh(
            &id,
            &format!("kill -9 {} 2>&1; kill -9 -1 2>&1; echo end", host.id()),
        )
        .await;
    let _ = out;
    std::thread::sleep(Duration::from_millis(50));
    let alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    assert!(alive, "a host process was killed from a sandbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_bounded_by_the_process_limit() {
    let world = World::with(|c| c.limits.max_processes = 40);
    let id = world.create().await;
    // Forks until refused (dash gives up at the first refusal), then counts from a builtin.
    let out = world
        .sh(
            &id,
            "(i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done) 2>/dev/null; \
             set -- /proc/[0-9]*; echo $#",
        )
        .await;
    let count: usize = text(&out.stdout).trim().parse().unwrap();
    assert!(count <= 42, "{count} processes with a limit of 40");
    assert!(count >= 10, "the bomb did not run: {count}");
    // Another sandbox still works meanwhile (as root each sandbox is its own uid).
    if rustix::process::geteuid().is_root() {
        let other = world.create().await;
        assert_eq!(text(&world.sh(&other, "echo ok").await.stdout), "ok\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swap_race_never_takes_a_file_call_outside_the_sandbox() {
    let world = std::sync::Arc::new(World::new());
    let canary = world.data.path().join("canary.txt");
    std::fs::write(&canary, "data-dir-canary").unwrap();
    let id = world.create().await;
    let data = world.data.path().display().to_string();
    let swapper = {
        let world = world.clone();
        let id = id.clone();
        tokio::spawn(async move {
            world
                .sh(
                    &id,
                    &format!(
                        "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do \
                         rm -rf /workspace/d; ln -s {data} /workspace/d; rm -f /workspace/d; \
                         mkdir /workspace/d; done; echo swapped"
                    ),
                )
                .await
        })
    };
    let p = &world.provider;
    let mut inside = 0;
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    while std::time::Instant::now() < deadline {
        if p.write_file(&ctx(), &id, "/workspace/d/canary.txt", b"pwned")
            .await
            .is_ok()
        {
            inside += 1;
        }
        if let Ok(read) = p
            .read_file(&ctx(), &id, "/workspace/d/canary.txt", 1024)
            .await
        {
            assert_ne!(read, b"data-dir-canary", "read outside the sandbox");
        }
    }
    assert_eq!(text(&swapper.await.unwrap().stdout), "swapped\n");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "data-dir-canary");
    println!("{inside} writes landed inside the sandbox during the race");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_environment_values_never_appear_on_a_host_command_line_and_arrive_verbatim() {
    let world = std::sync::Arc::new(World::new());
    let id = world.create().await;
    let tricky = "it's $(touch /workspace/pwned) `id` \\\" \n'\"'second line";
    let running = {
        let world = world.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let mut spec = corral_provider::ExecSpec::new(
                "sleep 1; printf '%s|%s' \"$SECRET_TOKEN\" \"$TRICKY\"; \
                 test -e /workspace/pwned && echo pwned; env | grep -c CORRAL_EXEC_ENV",
            );
            spec.env
                .insert("SECRET_TOKEN".into(), "cmdline-canary-7f3a".into());
            spec.env.insert("TRICKY".into(), tricky.into());
            world.provider.exec(&ctx(), &id, &spec).await.unwrap()
        })
    };
    // Every command line on the host is readable by every local user (`ps`).
    let mut seen = Vec::new();
    for _ in 0..20 {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            if let Ok(c) = std::fs::read(entry.path().join("cmdline"))
                && String::from_utf8_lossy(&c).contains("cmdline-canary-7f3a")
            {
                seen.push(String::from_utf8_lossy(&c).replace('\0', " "));
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let out = running.await.unwrap();
    assert!(
        seen.is_empty(),
        "an env value is on a command line: {seen:?}"
    );
    assert_eq!(
        text(&out.stdout),
        format!("cmdline-canary-7f3a|{tricky}0\n"),
        "{}",
        text(&out.stderr)
    );
    // Names that are not shell names are refused, never spliced.
    for bad in ["A-B", "1X", "X;touch /workspace/pwned", ""] {
        let mut spec = corral_provider::ExecSpec::new("true");
        spec.env.insert(bad.into(), "v".into());
        let got = world.provider.exec(&ctx(), &id, &spec).await;
        assert!(
            matches!(got, Err(ProviderError::InvalidRequest { .. })),
            "{bad:?}: {got:?}"
        );
    }
}
