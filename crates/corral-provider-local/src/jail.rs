//! Running one command in fresh namespaces over a sandbox's root, with hakoniwa.
//!
//! Process tree of one exec: the server forks hakoniwa's supervisor, which unshares the user,
//! mount, pid, ipc, uts (and network) namespaces, builds the mounts over the sandbox root,
//! `pivot_root`s into it and forks `sh -c`, pid 1 of the new pid namespace. Killing the
//! supervisor kills pid 1 (its parent-death signal), and the kernel kills every other process
//! of a pid namespace when its pid 1 dies: one `SIGKILL` ends the whole tree.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use corral_provider::{CappedOutput, ExecOutput};
use hakoniwa::{Container, Namespace, Rlimit, Runctl, Stdio};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

use crate::LocalLimits;

/// `PATH` inside a sandbox.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// util-linux `unshare`, run inside the sandbox to lock its mounts (see `Jail::run`; the
/// path is also spelled out in its script).
const UNSHARE: &str = "/usr/bin/unshare";
/// util-linux `setsid`, which detaches a command from the server's session (the path is
/// also spelled out in the script of `Jail::run`).
const SETSID: &str = "/usr/bin/setsid";
/// The variable that names the mount points pid 1 checks before anything else runs.
const EXPECTED_MOUNTS: &str = "CORRAL_EXPECTED_MOUNTS";

/// Run first by pid 1, before anything of the caller's: refuses to go on unless `/proc` is
/// the namespace's own, it is the only procfs mounted, and every mount point named in
/// `$CORRAL_EXPECTED_MOUNTS` (escaped as in mountinfo, space-separated) is still mounted.
///
/// Why: hakoniwa builds the mounts inside the sandbox root, which a command of the same
/// sandbox running concurrently can write. It creates `.oldproc-<uuid>` and `.oldrootfs` there,
/// mounts the host's `/proc` (and, at `pivot_root`, the host's whole root) on them, and
/// unmounts them by path. A command that swaps such a directory for a symlink at the right
/// moment could make the mount land elsewhere, or the unmount hit another mount (the new
/// `/proc`, a mask), leaving the host's `/proc` or root filesystem inside the new sandbox.
/// Either leaves a second procfs (the host root holds one) or removes an expected mount, so
/// the command is refused (exit 125) rather than run in a tampered namespace.
pub(crate) const MOUNT_GUARD: &str = concat!(
    "corral_t() { echo \"corral: the sandbox's mounts changed during setup; the command was ",
    "not run\" >&2; exit 125; }; set -f; ",
    "[ /proc/self -ef /proc/$$ ] || corral_t; corral_n=0; corral_m=' '; ",
    "while read -r corral_a corral_b corral_c corral_d corral_p corral_o; do ",
    "corral_m=\"$corral_m$corral_p \"; ",
    "case \" $corral_o \" in *' - proc '*) corral_n=$((corral_n + 1));; esac; ",
    "done < /proc/self/mountinfo; [ \"$corral_n\" = 1 ] || corral_t; ",
    "for corral_p in $CORRAL_EXPECTED_MOUNTS; do case \"$corral_m\" in *\" $corral_p \"*) ;; ",
    "*) corral_t;; esac; done; set +f; unset CORRAL_EXPECTED_MOUNTS corral_a corral_b corral_c ",
    "corral_d corral_p corral_o corral_n corral_m; "
);

/// The variable that carries the caller's environment to the command (see `Jail::run`).
const EXEC_ENV: &str = "CORRAL_EXEC_ENV";
/// util-linux `setpriv`, which drops a command to its sandbox's uid when the server is root
/// (the path is also spelled out in the script of `Jail::run`).
const SETPRIV: &str = "/usr/bin/setpriv";
/// Home and default working directory inside a sandbox.
pub(crate) const WORKSPACE: &str = "/workspace";

/// Run by pid 1 after [`MOUNT_GUARD`]: waits for the server's `go` on stdin, which it sends
/// once pid 1 is in the sandbox's cgroup (everything pid 1 starts is then in it too), then
/// gives the command `/dev/null` as its stdin. Anything else (the server could not apply the
/// limits and closed the pipe) runs nothing.
const GATE: &str = concat!(
    "if ! read -r corral_go || [ \"$corral_go\" != go ]; then echo \"corral: the sandbox's ",
    "limits could not be applied; the command was not run\" >&2; exit 125; fi; ",
    "exec </dev/null; unset corral_go; "
);

/// The namespaces and mounts every command of every sandbox gets; cloned per exec.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    template: Container,
    as_root: bool,
    /// Mount points pid 1 checks (see [`MOUNT_GUARD`]), escaped as in mountinfo.
    expected_mounts: String,
    /// The seccomp filter (hex) loaded just before the command, if any.
    seccomp: Option<String>,
}

/// What to run.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) command: &'a str,
    pub(crate) cwd: &'a str,
    pub(crate) env: &'a BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    pub(crate) max_output_bytes: usize,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command finished (exit code, or `128 + n` for death by signal `n`).
    Finished(ExecOutput),
    /// The deadline passed; the whole tree was killed.
    TimedOut,
    /// The caller went away; the whole tree was killed.
    Cancelled,
}

impl Jail {
    /// Whether commands drop to a per-sandbox uid (the server runs as root); otherwise they
    /// run as the server's own uid.
    pub(crate) fn per_sandbox_uid(&self) -> bool {
        self.as_root
    }

    /// The template: fresh mount, pid (with a fresh `/proc`), ipc and uts namespaces (and a
    /// user namespace when the server is not root), and a network namespace with no
    /// interfaces but a down loopback unless `allow_network`. The host's system directories
    /// are bind-mounted read-only, `/dev` is a minimal devfs, and the sandbox root itself
    /// stays writable.
    pub(crate) fn new(
        allow_network: bool,
        limits: &LocalLimits,
        seccomp: Option<String>,
    ) -> Result<Self, String> {
        for tool in [UNSHARE, SETPRIV, SETSID] {
            if !Path::new(tool).exists() {
                return Err(format!("{tool} (util-linux) is missing"));
            }
        }
        let as_root = rustix::process::geteuid().is_root();
        let mut c = if as_root {
            // As root, hakoniwa needs no user namespace to build the mounts; the command
            // itself then drops to the sandbox's own unprivileged uid (see `run`).
            let mut c = Container::empty();
            c.unshare(Namespace::Mount).unshare(Namespace::Pid);
            c
        } else {
            // Otherwise a user namespace maps the server's own (unprivileged) uid to root.
            Container::new()
        };
        c.unshare(Namespace::Ipc).unshare(Namespace::Uts);
        c.procfsmount("/proc");
        if !allow_network {
            c.unshare(Namespace::Network);
        }
        // `/` as rootfs binds exactly /bin, /etc, /lib, /lib64, /lib32, /sbin and /usr (as
        // symlinks where the host has symlinks), read-only and nosuid.
        c.rootfs("/").map_err(|e| e.to_string())?;
        c.devfsmount("/dev")
            .hostname("corral")
            .runctl(Runctl::RootdirRW)
            .runctl(Runctl::MountFallback);
        let mut expected: Vec<String> = ["/proc", "/dev", "/etc", "/usr"]
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        for secret in unreadable_under("/etc") {
            expected.push(mountinfo_escaped(&secret.to_string_lossy()));
            if secret.is_dir() {
                c.tmpfsmount(&secret.to_string_lossy());
            } else {
                c.bindmount_ro("/dev/null", &secret.to_string_lossy());
            }
        }
        c.setrlimit(Rlimit::Nproc, limits.max_processes, limits.max_processes)
            .setrlimit(Rlimit::As, limits.memory_bytes, limits.memory_bytes)
            .setrlimit(
                Rlimit::Fsize,
                limits.file_size_bytes,
                limits.file_size_bytes,
            )
            .setrlimit(Rlimit::Cpu, limits.cpu_seconds, limits.cpu_seconds);
        Ok(Self {
            template: c,
            as_root,
            expected_mounts: expected.join(" "),
            seccomp,
        })
    }

    /// Runs `run` over `fs_root` and waits for it, its deadline, or `cancel` becoming readable
    /// or hung up (the caller dropped its end). Blocking: call from a thread that lives until
    /// this returns (the supervisor's parent-death signal is tied to the forking thread).
    ///
    /// The sandbox's `setup.lock` (beside `fs_root`) is held while the namespaces and mounts
    /// are set up (until `spawn` returns): hakoniwa prepares mount points inside the sandbox
    /// root (`.oldrootfs`), so two commands of one sandbox — from this process or another
    /// sharing the root — must not set up at the same time. The commands then run concurrently.
    ///
    /// With `cgroup` (the cgroups and the sandbox's id), pid 1 joins the sandbox's group
    /// before the command starts (see [`GATE`]); a command that cannot be put in it is not run.
    pub(crate) fn run(
        &self,
        fs_root: &Path,
        uid: Option<u32>,
        run: &Run<'_>,
        cancel: Option<&OwnedFd>,
        cgroup: Option<(&crate::cgroup::Cgroups, &str)>,
    ) -> Result<Outcome, String> {
        repair_root(fs_root);
        let mut container = self.template.clone();
        container.rootdir(fs_root);
        // The mounts above belong to the sandbox's user namespace (or to the host's, as root):
        // a root holding capabilities there could unmount or remount them (revealing
        // /etc/shadow, or writing to the host's /usr through a read-write remount). So the
        // command first becomes the sandbox's own unprivileged uid (as root: `setpriv`), then
        // `unshare` moves it into a nested user and mount namespace where it is root again.
        // Mounts copied into a less privileged mount namespace are locked: they cannot be
        // unmounted to reveal what is beneath, and read-only, nosuid and nodev cannot be
        // cleared — the kernel's own guarantee. Being an unprivileged uid on the host also
        // keeps it out of what checks for uid 0 rather than a capability (/proc/sys,
        // /proc/sysrq-trigger), and makes `RLIMIT_NPROC` count this sandbox alone.
        //
        // pid 1 stays a plain shell that waits for the command: its parent-death signal (which
        // a change of uid would clear) is what ends the namespace when the supervisor is
        // killed; pid 1 ignores signals it has no handler for, so the command must not be pid 1
        // for `kill $$` to work; and death by signal n reaches us as 128 + n through `$?`. The
        // `exit` keeps the shell from exec'ing its last command. The command and uid travel as
        // positional parameters, never spliced into the script.
        //
        // `setsid` first: the supervisor is in the server's session, and a command in it could
        // open the server's controlling terminal as /dev/tty (write to the operator's
        // terminal, or inject input) when the server runs in one.
        //
        // The caller's environment reaches the command alone. pid 1, `setsid`, `setpriv` and
        // `unshare` hold capabilities over the sandbox's mounts (as root: host root itself),
        // and a variable such as `LD_PRELOAD=/workspace/x.so` would run the caller's code in
        // them. So it travels as one inert variable, a shell script of `export`s, that the
        // command's own shell evaluates as its very first step, inside the nested namespace,
        // then `exec`s the command. Not as arguments: a command line is readable by every
        // user of the host (`ps`), an environment only by its owner.
        //
        // The seccomp filter comes last, just before the command: it forbids new user
        // namespaces, and the nested one above is one (see `seccomp`).
        let drop_uid = match (self.as_root, uid) {
            (true, Some(_)) => "/usr/bin/setpriv --reuid \"$2\" --regid \"$2\" --clear-groups -- ",
            (true, None) => return Err("a sandbox without its own uid cannot run as root".into()),
            (false, _) => "",
        };
        let filter = if self.seccomp.is_some() {
            "/usr/bin/perl -e \"$3\" -- "
        } else {
            ""
        };
        let script = format!(
            "{MOUNT_GUARD}{GATE}/usr/bin/setsid {drop_uid}/usr/bin/unshare --user \
             --map-root-user --mount -- {filter}/bin/sh -c \
             'eval \"$CORRAL_EXEC_ENV\"; exec /bin/sh -c \"$1\"' sh \"$1\"; exit $?"
        );
        let uid = uid.map(|u| u.to_string()).unwrap_or_default();
        let mut cmd = container.command("/bin/sh");
        cmd.args([
            "-c",
            &script,
            "sh",
            run.command,
            &uid,
            crate::seccomp::LOADER,
        ]);
        cmd.env(EXEC_ENV, &exports(run.env)?);
        if let Some(filter) = &self.seccomp {
            cmd.env(crate::seccomp::FILTER_ENV, filter);
            cmd.env(
                crate::seccomp::NR_ENV,
                &crate::seccomp::seccomp_nr().to_string(),
            );
        }
        cmd.env(EXPECTED_MOUNTS, &self.expected_mounts);
        cmd.env("HOME", WORKSPACE)
            .env("PATH", PATH)
            .env("USER", "root")
            .env("LANG", "C.UTF-8");
        cmd.current_dir(run.cwd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());

        // The lock is held until pid 1 is in the sandbox's cgroup: a provider that drops
        // removes empty groups under it too.
        let (mut child, contained) = {
            let _setup = crate::store::FileLock::exclusive(&crate::store::setup_lock_path(fs_root))
                .map_err(|e| format!("cannot lock the sandbox's setup: {e}"))?;
            // Checked under the setup lock, which a provider that unmounts on drop holds too:
            // a command never starts on the bare mount point of an unmounted image.
            if let Some(dir) = fs_root.parent() {
                crate::disk::ensure_mounted(dir, fs_root)
                    .map_err(|e| format!("cannot mount the sandbox's filesystem: {e}"))?;
            }
            let group = cgroup
                .map(|(cgroups, id)| cgroups.prepare(id, crate::disk::block_device(fs_root)))
                .transpose()
                .map_err(|e| format!("cannot set up the sandbox's cgroup: {e}"))?;
            let child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
            // pid 1 exists once `spawn` returns (hakoniwa's supervisor reports success after
            // forking it) and waits at the gate: nothing of the caller's has run yet.
            let contained = match &group {
                Some(group) => crate::procs::children_of(child.id())
                    .into_iter()
                    .try_for_each(|pid| group.join(pid))
                    .map_err(|e| format!("cannot apply the sandbox's limits: {e}")),
                None => Ok(()),
            };
            (child, contained)
        };
        let gate = child.stdin.take();
        if let (Ok(()), Some(mut gate)) = (&contained, gate) {
            // A pid 1 that is already gone (its setup failed) reads nothing: no error here.
            let _ = std::io::Write::write_all(&mut gate, b"go\n");
        }
        // Opened before the child is reaped, so the pid cannot have been reused.
        let pidfd = i32::try_from(child.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or("the supervisor has no pid")
            .and_then(|pid| {
                pidfd_open(pid, PidfdFlags::empty()).map_err(|_| "cannot open a pidfd")
            });
        let cap = run.max_output_bytes;
        let stdout = child
            .stdout
            .take()
            .map(|r| thread::spawn(move || drain(r, cap)));
        let stderr = child
            .stderr
            .take()
            .map(|r| thread::spawn(move || drain(r, cap)));

        let ending = match &pidfd {
            Ok(pidfd) => wait_for(pidfd, cancel, Instant::now() + run.timeout),
            Err(e) => Ending::Failed((*e).to_owned()),
        };
        if !matches!(ending, Ending::Exited) {
            match &pidfd {
                Ok(pidfd) => {
                    let _ = pidfd_send_signal(pidfd, Signal::KILL);
                }
                Err(_) => {
                    let _ = child.kill();
                }
            }
        }
        let status = child.wait().map_err(|e| format!("cannot wait: {e}"));
        // Every writer of the pipes is in the (now dead) pid namespace: the drains end.
        let (out, out_cut) = join(stdout);
        let (err, err_cut) = join(stderr);
        contained?;
        match ending {
            Ending::TimedOut => return Ok(Outcome::TimedOut),
            Ending::Cancelled => return Ok(Outcome::Cancelled),
            Ending::Failed(e) => return Err(e),
            Ending::Exited => {}
        }
        let status = status?;
        let exit_code = match status.exit_code {
            Some(code) => code,
            // Death by signal n is reported as 128 + n; 125 without an exit code means the
            // sandbox itself could not be set up (the reason says why).
            None if status.code > 128 => status.code,
            None => return Err(status.reason),
        };
        Ok(Outcome::Finished(ExecOutput {
            stdout: out,
            stderr: err,
            exit_code,
            truncated: out_cut || err_cut,
        }))
    }
}

/// `path` as `/proc/self/mountinfo` spells it: space, tab, newline and backslash in octal.
fn mountinfo_escaped(path: &str) -> String {
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

/// The caller's environment as a shell script for the command's shell to `eval`: it first
/// unsets its own carrier, then exports each variable, its value single-quoted. Names must be
/// shell names (`[A-Za-z_][A-Za-z0-9_]*`, as the API requires): anything else could not be
/// exported, and must never be spliced into the script.
fn exports(env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut script = format!("unset {EXEC_ENV}\n");
    for (name, value) in env {
        let shell_name = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !shell_name {
            return Err(format!("`{name}` is not a valid environment variable name"));
        }
        if value.contains('\0') {
            return Err(format!("the value of `{name}` contains a NUL byte"));
        }
        script.push_str(&format!(
            "export {name}='{}'\n",
            value.replace('\'', "'\\''")
        ));
    }
    Ok(script)
}

/// Removes what a command may have planted in its root where the next setup expects its own
/// entries: the host's top-level symlinks (`/bin -> usr/bin`, which hakoniwa recreates and
/// would refuse to replace) and `.oldrootfs` (the `pivot_root` mount point, which must be a
/// directory). Without this a command could make its own sandbox unusable. Everything else
/// the setup touches is a mount point inside the sandbox, which a command cannot change.
fn repair_root(fs_root: &Path) {
    for name in ["bin", "sbin", "lib", "lib32", "lib64"] {
        let Ok(host) = std::fs::read_link(Path::new("/").join(name)) else {
            continue;
        };
        let entry = fs_root.join(name);
        let Ok(meta) = entry.symlink_metadata() else {
            continue;
        };
        if meta.is_symlink() && std::fs::read_link(&entry).ok() == Some(host.clone()) {
            continue;
        }
        let _ = if meta.is_dir() {
            std::fs::remove_dir_all(&entry)
        } else {
            std::fs::remove_file(&entry)
        };
    }
    let oldroot = fs_root.join(".oldrootfs");
    if oldroot.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
        let _ = std::fs::remove_file(&oldroot);
    }
}

enum Ending {
    Exited,
    TimedOut,
    Cancelled,
    Failed(String),
}

/// Waits until the supervisor exits, the deadline passes, or `cancel` fires.
fn wait_for(pidfd: &OwnedFd, cancel: Option<&OwnedFd>, deadline: Instant) -> Ending {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ending::TimedOut;
        }
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = vec![PollFd::new(pidfd, PollFlags::IN)];
        if let Some(cancel) = cancel {
            fds.push(PollFd::new(cancel, PollFlags::IN));
        }
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => {}
            Ok(_) => {
                if !fds[0].revents().is_empty() {
                    return Ending::Exited;
                }
                if fds.get(1).is_some_and(|fd| !fd.revents().is_empty()) {
                    return Ending::Cancelled;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Ending::Failed(format!("cannot wait for the command: {e}")),
        }
    }
}

/// Reads a stream to its end, keeping the first `cap` bytes: reading on past the cap keeps
/// the command from blocking on a full pipe.
fn drain(mut from: impl std::io::Read, cap: usize) -> CappedOutput {
    let mut out = CappedOutput::new(cap);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return out,
        }
    }
}

fn join(drain: Option<thread::JoinHandle<CappedOutput>>) -> (Vec<u8>, bool) {
    drain
        .and_then(|h| h.join().ok())
        .map_or((Vec::new(), false), CappedOutput::finish)
}

/// Files and directories under `dir` (recursively) that other users may not read but the
/// server's uid or gid may: secrets such as `/etc/shadow` or private keys. When the server is
/// not root, a sandbox runs as the server's uid and could read them through the read-only
/// bind of `/etc`; they are masked (in every mode, so sandboxes look the same). Those of
/// other owners stay unreadable inside anyway: the sandbox holds no capability over ids it
/// does not map.
fn unreadable_under(dir: &str) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(dir)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let mode = meta.permissions().mode();
            let ours = meta.uid() == uid || meta.gid() == gid;
            if meta.is_dir() {
                if mode & 0o005 != 0o005 {
                    if ours {
                        out.push(entry.path());
                    }
                } else {
                    stack.push(entry.path());
                }
            } else if meta.is_file() && mode & 0o004 == 0 && ours {
                out.push(entry.path());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_in(jail: &Jail, command: &str) -> ExecOutput {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("fs");
        std::fs::create_dir_all(root.join("workspace")).unwrap();
        let uid = jail.per_sandbox_uid().then_some(crate::store::PROBE_UID);
        if let Some(uid) = uid {
            for dir in [root.clone(), root.join("workspace")] {
                std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
            }
        }
        let env = BTreeMap::new();
        let run = Run {
            command,
            cwd: WORKSPACE,
            env: &env,
            timeout: Duration::from_secs(20),
            max_output_bytes: 1 << 16,
        };
        match jail.run(&root, uid, &run, None, None) {
            Ok(Outcome::Finished(out)) => out,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_namespace_left_with_the_hosts_proc_or_without_an_expected_mount_runs_nothing() {
        let jail = Jail::new(false, &LocalLimits::default(), None).unwrap();
        let clean = run_in(&jail, "echo ran");
        assert_eq!(
            clean.stdout,
            b"ran\n",
            "{}",
            String::from_utf8_lossy(&clean.stderr)
        );

        // What a won race against hakoniwa's `.oldproc-*` / `.oldrootfs` would leave: the
        // host's procfs (or root, which holds it) somewhere in the new namespace.
        let mut raced = jail.clone();
        raced.template.bindmount_ro("/proc", "/workspace/hostproc");
        let out = run_in(&raced, "echo ran; ls /workspace/hostproc | head -3");
        assert_eq!(
            out.exit_code,
            125,
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("mounts changed during setup"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        // A mask or system bind that an unmount through a swapped symlink took away.
        let mut unmasked = jail.clone();
        unmasked
            .expected_mounts
            .push_str(" /etc/corral-mask-that-is-gone");
        let out = run_in(&unmasked, "echo ran");
        assert_eq!(out.exit_code, 125);
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn mount_points_are_escaped_as_mountinfo_spells_them() {
        assert_eq!(mountinfo_escaped("/etc/a b\\c"), "/etc/a\\040b\\134c");
    }
}
