//! The `local` provider: persistent, isolated sandboxes on the server's own machine — the
//! embedded default, which needs no account.
//!
//! # What a sandbox is
//!
//! A directory under [`LocalConfig::root`] (`<root>/<native-id>/`) holding the sandbox's own
//! files: its root (`fs/`, on a filesystem of its own when disk quotas are on) and a small
//! `meta.json` (operation id, creation time, lifetime, host ids, image, project; written
//! atomically, last) that lets a new process find every sandbox again
//! ([`find_by_operation_id`](SandboxProvider::find_by_operation_id) scans them). Whatever a
//! command writes persists across commands and restarts of the server, until the sandbox is
//! deleted.
//!
//! A sandbox sees either the host's system directories (`/usr`, `/etc`, `/bin`, `/sbin`,
//! `/lib*`, read-only; the default), or an image the operator named in
//! [`LocalConfig::images`] (a root filesystem directory, or an OCI image layout unpacked
//! once and verified by digest): the image is shared read-only and each sandbox writes to
//! its own layer (overlayfs), so what `apt` or `pip` installs persists in the sandbox and
//! never touches the image. `/workspace` (home and default working directory) and `/tmp`
//! are the sandbox's.
//!
//! # How a command runs: one long-lived init per sandbox
//!
//! The first command (or file call on an image sandbox) starts the sandbox's **init**: a
//! process of its own (this crate's [`init_main`], run as `corral-sandbox-init` or by the
//! host program through [`run_init_if_requested`]) that builds the sandbox's namespaces
//! once — mount (a `pivot_root` into the sandbox's root), pid, ipc, uts, network, user —
//! joins the sandbox's cgroup, becomes the sandbox's own unprivileged host uid, loads the
//! seccomp filter, and then serves. A command is one request to it over a private socket
//! pair; the init answers with one `clone` into a pid and mount namespace of the command's
//! own (pid 1 there waits for the command's shell, so the whole tree ends with it) and one
//! `exec` of `/bin/sh -c`. Output goes straight to pipes the provider reads; the exit comes
//! on a status pipe once every process of the command is gone. An init that died is
//! started again on the next use; a deleted or expired sandbox's init is stopped. The
//! process layout, the protocol and why each step is there: the `init` module.
//!
//! # Commands as durable jobs
//!
//! The port's commands are native: a durable command is a job of the sandbox's init, whose
//! output the init copies from pipes into files of the sandbox's host directory
//! (`<root>/<id>/commands/<command id>/`, out of the sandbox's reach), with its exit written
//! once the output is complete; readers follow the files by byte offset (inotify), stdin
//! is a FIFO with a persisted count of the bytes accepted, and signals go through the init.
//! An init with a durable command running does not end with its server: it listens on a
//! control socket in the sandbox's host directory, where the next server (or another one
//! sharing the root) finds it, and the command with it. The layout and the rules: the
//! `jobs` module.
//!
//! The namespaces and mounts are built by the init itself, with `openat2`-resolved targets
//! and the new mount API (`open_tree`, `fsmount`, `move_mount`): no mount ever lands on a
//! path a command of the same sandbox could swap for a symlink. The uid drop, session and
//! seccomp happen in-process (the filter is loaded with `seccompiler`), without helper
//! programs. The little `unsafe` this needs (fork, clone, exec, a few system calls no safe
//! wrapper covers) is confined to the `sys` module.
//!
//! # How a command is isolated
//!
//! - **Its root**: `pivot_root` into the sandbox's own tree; the host's system directories
//!   (or the image) read-only and nosuid; files under `/etc` that other users may not read
//!   but the server's uid could (`/etc/shadow`, private keys) masked; a minimal `/dev`.
//!   Nothing else of the host is mounted: not the server's data directory, not other
//!   sandboxes, not `/root`, `/home`, `/var`, the host's `/tmp`.
//! - **Its own host ids** (server as root): a range of 65 536 host uids and gids per sandbox,
//!   from 1 500 000 000 up (`meta.json`), so root inside is an unprivileged uid outside, and
//!   the image's files are id-mapped to it. Commands are root of a user namespace nested in
//!   the sandbox's own: mounts inherited from a more privileged namespace are locked (no
//!   unmasking, no read-write remount), and the sandbox's network namespace belongs to the
//!   outer one, so its root cannot change its routes. A server that is not root runs
//!   commands as its own uid in a user namespace.
//! - A session of its own (`setsid`), `no_new_privs`, the seccomp filter (the `seccomp`
//!   module: no new user namespaces, keyring, BPF, ptrace, modules, clocks, …), a fresh
//!   `/proc` for its own pid namespace, a private hostname (`corral`) and IPC.
//! - **Network**: none by default (a namespace with a down loopback);
//!   [`LocalConfig::network`] lets a create ask for a guarded one ([`LocalCreate`]): the
//!   outside world through `pasta`, never the host's loopback, link-local or private ranges
//!   unless allow-listed (the `network` module). [`LocalConfig::allow_network`] is the
//!   unguarded host network.
//! - The caller's environment reaches the command alone (it travels in the request and is
//!   given to `execve`), never on a command line.
//!
//! Files are read and written from the host side, confined to the sandbox root by the
//! kernel (`openat2` with `RESOLVE_BENEATH`); for an image sandbox, through the root its
//! init sees (a descriptor of it the init sends when it is ready).
//!
//! # Limits, capacity, and what is not isolated
//!
//! [`LocalLimits`] bounds each sandbox (cgroup: memory with swap off, processes, CPU, disk
//! bandwidth; a preallocated ext4 image per sandbox; rlimits per process).
//! [`LocalCapacity`] bounds what all sandboxes, and each project's, hold together: disk
//! reserved (refused at create, before anything is made), memory and processes (parent
//! cgroups), and live sandboxes per project; defaults are derived from the machine. A part
//! the machine cannot provide is logged when the provider starts and reported by
//! [`LocalProvider::containment`]. The kernel is shared (no VM boundary).
//!
//! # Threads
//!
//! A running command is watched by an OS thread of its own (its output pipes, its status
//! pipe, its deadline and the caller's cancellation), at most [`LocalConfig::exec_threads`]
//! at once, never threads of tokio's blocking pool (which the database layer shares); an
//! exec that finds every thread busy waits at most [`LocalConfig::exec_queue_wait`], then is
//! refused with a retryable [`ProviderError::Unavailable`].
//!
//! # Stop, resume, snapshots and restores
//!
//! A stop records `stopped` in `meta.json` (so it survives a restart and no init starts on
//! the sandbox), ends every process of it (init, durable commands, cgroup) and unmounts its
//! image, releasing its loop device; its files stay. Calls that would run something or touch
//! its files are refused until a resume mounts the image again (the init starts on first
//! use). A snapshot is a copy of the sandbox's own image (`FICLONE` where the volume can,
//! else its data regions), taken with the filesystem frozen (`FIFREEZE`) and kept under
//! `<root>/.snapshots/`, named only once complete; a start removes what a crash left half
//! made. A restore is a create over a copy of a snapshot's image, its files given the new
//! sandbox's host ids. The `snapshots` module and `docs/providers/local.md` give the rules.
//!
//! Deleting a sandbox stops its init and returns once every process of the sandbox is gone;
//! only then is its metadata removed, so its ids are never given to a new sandbox while a
//! process still holds them. Expiry (a create's `timeout`) is enforced when the sandbox is
//! next named.
//!
//! On a system where sandboxes cannot run (no user namespaces, no init program, not Linux),
//! [`LocalProvider::new`] still succeeds, [`LocalProvider::unavailable_reason`] says why,
//! and every call answers [`ProviderError::Unavailable`]. The probe runs one real command
//! at construction.
//!
//! # Use
//!
//! A program that builds the provider must let it start sandbox inits: call
//! [`run_init_if_requested`] first thing in `main`, before any thread (or ship
//! `corral-sandbox-init` beside it, or name a program in [`LocalConfig::init`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), corral_provider::ProviderError> {
//! use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider};
//! use corral_provider_local::{LocalConfig, LocalProvider};
//!
//! let local = LocalProvider::new(LocalConfig::new("/var/lib/corral/sandboxes"))?;
//! let ctx = CallContext::anonymous();
//! let spec = CreateSpec {
//!     operation_id: corral_domain::OperationId::new(),
//!     request: corral_domain::CreateSandboxRequest::standard(
//!         corral_domain::Provider::Local, None, None),
//!     timeout_seconds: None,
//! };
//! let sandbox = local.create(&ctx, &spec).await?;
//! let out = local.exec(&ctx, &sandbox.native_id, &ExecSpec::new("echo hi")).await?;
//! assert_eq!(out.stdout, b"hi\n");
//! # Ok(()) }
//! ```

mod capabilities;
mod capacity;
mod cgroup;
mod command;
mod config;
mod disk;
mod dns;
mod files;
mod host;
mod images;
mod init;
mod inits;
mod jobs;
mod lock;
mod network;
mod pool;
mod procs;
mod running;
mod seccomp;
mod settings;
mod snapshots;
mod store;
mod sys;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use corral_domain::{
    CommandId, OperationId, Provider, ProviderCapabilities, SandboxStatus, Signal, SnapshotStatus,
};
use corral_provider::{
    CallContext, CommandEvents, CommandSpec, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox,
    ObservedSnapshot, OutputOffsets, ProviderError, Result, SandboxProvider, SnapshotSpec, Started,
    TaggedPage, TaggedSandbox,
};

pub use capabilities::{MAX_TIMEOUT_SECONDS, capabilities};
pub use capacity::{CapacityLimits, DEFAULT_SANDBOXES_PER_PROJECT, LocalCapacity};
pub use config::{
    DEFAULT_EXEC_QUEUE_WAIT, DEFAULT_EXEC_THREADS, IoLimits, LocalConfig, LocalCreate, LocalLimits,
};
pub use host::Containment;
pub use images::ImageSource;
pub use init::{INIT_ARG, main as init_main, run_if_requested as run_init_if_requested};
pub use inits::InitProgram;
pub use network::{BLOCKED_RANGES, Ipv4Net, NetworkConfig};
pub use settings::{CapacitySettings, ImageSettings, LocalSettings};

use command::{Outcome, Run, RunError};
use init::proto::{IdRange, NetworkSetup, ProcessLimits, Setup, SystemDir};
use inits::{Init, Inits, RequestError};
use running::Running;
use store::{Metadata, Store};

/// Home and default working directory inside a sandbox.
const WORKSPACE: &str = "/workspace";
/// `PATH` inside a sandbox.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Host ids each sandbox gets (server as root): inner ids 0 ..= 65 535, as a container has.
const IDS_PER_SANDBOX: u32 = 65_536;

/// The `local` provider. Cheap to share: hold it in an `Arc`.
pub struct LocalProvider {
    caps: ProviderCapabilities,
    shared: Arc<Shared>,
    /// Why no sandbox can run here, if none can.
    unavailable: Option<String>,
    running: Arc<Running>,
    /// The threads commands are watched from.
    pool: pool::ExecPool,
    exec_queue_wait: Duration,
    containment: Containment,
}

/// What command threads and blocking tasks share.
struct Shared {
    store: Store,
    snapshots: snapshots::Snapshots,
    capacity: LocalCapacity,
    images: images::Images,
    cgroups: Option<cgroup::Cgroups>,
    disks: Option<disk::Disks>,
    inits: Inits,
    program: InitProgram,
    template: Template,
    as_root: bool,
}

/// What every sandbox's setup has in common.
#[derive(Debug, Clone)]
struct Template {
    system_dirs: Vec<SystemDir>,
    masks: Vec<PathBuf>,
    limits: ProcessLimits,
    cpu_seconds: u64,
    seccomp: Option<Vec<u8>>,
    host_network: bool,
    network: Option<NetworkConfig>,
    /// The resolver configuration of sandboxes with a guarded network.
    resolv_conf: Option<PathBuf>,
}

impl Template {
    fn setup(
        &self,
        fs_root: &Path,
        ids: Option<IdRange>,
        network: bool,
        image: Option<init::proto::ImageLayers>,
        control: Option<PathBuf>,
    ) -> Setup {
        let host = image.is_none();
        let network = match (&self.network, network) {
            _ if self.host_network => NetworkSetup::Host,
            (Some(config), true) => NetworkSetup::Guarded(Box::new(config.setup())),
            _ => NetworkSetup::None,
        };
        Setup {
            fs_root: fs_root.to_owned(),
            image,
            system_dirs: if host {
                self.system_dirs.clone()
            } else {
                Vec::new()
            },
            masks: if host { self.masks.clone() } else { Vec::new() },
            ids,
            resolv_conf: match &network {
                NetworkSetup::Guarded(_) => self.resolv_conf.clone(),
                _ => None,
            },
            network,
            limits: self.limits,
            seccomp: self.seccomp.clone(),
            hostname: "corral".into(),
            env: [
                ("HOME", WORKSPACE),
                ("PATH", PATH),
                ("USER", "root"),
                ("LANG", "C.UTF-8"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            instance: ulid::Ulid::generate().to_string().to_ascii_lowercase(),
            control,
        }
    }
}

impl Shared {
    /// The metadata and status of sandbox `id` (a checked native id); expiry is enforced
    /// here. Blocking.
    fn observe(&self, id: &str) -> Result<(Metadata, SandboxStatus)> {
        let store = &self.store;
        let meta = store
            .load(id)
            .map_err(|e| unavailable(format!("cannot read sandbox {id}: {e}")))?
            .ok_or_else(|| not_found(id))?;
        if meta.expired_at(store::now_unix()) {
            // Best effort: a failure leaves files that the next call removes.
            self.stop_init(id);
            if end_processes(self.cgroups.as_ref(), store, id, &meta).is_ok() {
                let _ = store.reclaim_files(id);
            }
            return Ok((meta, SandboxStatus::Expired));
        }
        // A stopped sandbox's image stays unmounted until it is resumed.
        if meta.stopped {
            return Ok((meta, SandboxStatus::Stopped));
        }
        // After a reboot the sandbox's filesystem must be mounted again before its root
        // is used: otherwise commands would write to the bare mount point, unlimited.
        disk::ensure_mounted(&store.dir(id), &store.fs_root(id)).map_err(|e| {
            unavailable(format!("cannot mount the filesystem of sandbox {id}: {e}"))
        })?;
        Ok((meta, SandboxStatus::Running))
    }

    /// The metadata of sandbox `id` if it exists, has not expired and is not stopped;
    /// otherwise `NotFound`, or `InvalidRequest` when stopped.
    fn live(&self, id: &str) -> Result<Metadata> {
        let (meta, status) = self.observe(id)?;
        usable(id, status)?;
        Ok(meta)
    }

    /// The record of sandbox `id` if it exists and has not expired (nothing is mounted,
    /// started or cleaned up: callers hold its setup lock, under which `observe`'s clean-up
    /// of an expired sandbox must not run).
    fn recorded(&self, id: &str) -> Result<Metadata> {
        let meta = self
            .store
            .load(id)
            .map_err(|e| unavailable(format!("cannot read sandbox {id}: {e}")))?
            .ok_or_else(|| not_found(id))?;
        if meta.expired_at(store::now_unix()) {
            return Err(expired(id));
        }
        Ok(meta)
    }

    /// What every sandbox and snapshot holds, for the capacity caps.
    fn held(&self) -> Result<Vec<capacity::Held>> {
        let mut held = self
            .store
            .held()
            .map_err(|e| unavailable(format!("cannot count the sandboxes: {e}")))?;
        held.extend(self.snapshots.held());
        Ok(held)
    }

    /// Stops sandbox `id` (see [`SandboxProvider::stop`]): recorded as stopped first, so
    /// no init starts on it from then on; then its init, every process and its cgroup go,
    /// and its image is unmounted (its loop device with it). Every step runs again on a
    /// stopped sandbox, so a stop that failed half-way is finished by the next one.
    /// Blocking.
    fn stop(&self, id: &str) -> Result<Metadata> {
        let fail = |e: String| unavailable(format!("cannot stop sandbox {id}: {e}"));
        let fs_root = self.store.fs_root(id);
        // Known before its directory is named (the lock is a file in it).
        self.recorded(id)?;
        let meta = {
            // The same lock an init's start holds: one under way finishes first (and is
            // stopped below), and none starts after.
            let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root))
                .map_err(|e| fail(format!("cannot lock its setup: {e}")))?;
            let mut meta = self.recorded(id)?;
            if !meta.stopped {
                meta.stopped = true;
                self.store.save(&meta).map_err(|e| fail(e.to_string()))?;
            }
            meta
        };
        // Not under the setup lock: a start waiting for it holds this sandbox's slot of
        // `inits`, which stopping the init takes.
        self.stop_init(id);
        end_processes(self.cgroups.as_ref(), &self.store, id, &meta).map_err(&fail)?;
        let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root))
            .map_err(|e| fail(format!("cannot lock its setup: {e}")))?;
        // A resume that came in meanwhile has mounted it again for its own use.
        if self
            .store
            .load(id)
            .ok()
            .flatten()
            .is_some_and(|m| m.stopped)
        {
            disk::unmount(&fs_root).map_err(|e| fail(e.to_string()))?;
        }
        Ok(meta)
    }

    /// Resumes sandbox `id`: its image mounted again, then recorded as running. Its init
    /// starts on first use, as a new sandbox's. Blocking.
    fn resume(&self, id: &str) -> Result<Metadata> {
        let fail = |e: String| unavailable(format!("cannot resume sandbox {id}: {e}"));
        let fs_root = self.store.fs_root(id);
        // Known before its directory is named (the lock is a file in it).
        self.recorded(id)?;
        let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root))
            .map_err(|e| fail(format!("cannot lock its setup: {e}")))?;
        let mut meta = self.recorded(id)?;
        if meta.stopped {
            disk::ensure_mounted(&self.store.dir(id), &fs_root)
                .map_err(|e| fail(format!("cannot mount its filesystem: {e}")))?;
            meta.stopped = false;
            self.store.save(&meta).map_err(|e| fail(e.to_string()))?;
        }
        Ok(meta)
    }

    /// Takes snapshot `spec` of sandbox `id`: a copy of its image, consistent (a running
    /// sandbox's filesystem is frozen while it is copied; a stopped one's is unmounted),
    /// made under a temporary name and named only when complete. Blocking.
    fn snapshot(&self, id: &str, spec: &SnapshotSpec) -> Result<snapshots::SnapshotMeta> {
        let fail = |e: String| unavailable(format!("cannot snapshot sandbox {id}: {e}"));
        let dir = self.store.dir(id);
        let fs_root = self.store.fs_root(id);
        let image = dir.join(disk::IMAGE);
        // Known before its directory is named (the lock is a file in it).
        self.recorded(id)?;
        // No stop, resume or init start while it is copied.
        let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root))
            .map_err(|e| fail(format!("cannot lock its setup: {e}")))?;
        let meta = self.recorded(id)?;
        if !image.is_file() {
            return Err(invalid(format!(
                "sandbox {id} has no filesystem image of its own (it was made without \
                 LocalLimits::disk_bytes), so it cannot be snapshotted"
            )));
        }
        let native_id = store::new_native_id();
        let pending = {
            let store = &self.store;
            let _one_at_a_time = store
                .lock_creates()
                .map_err(|e| fail(format!("cannot lock the sandboxes root: {e}")))?;
            // At most what the image holds now; counted against the caps as a sandbox is.
            let bytes = disk::allocated_bytes(&image);
            if let Some(disks) = &self.disks {
                disks
                    .check_room(&store.root(), bytes)
                    .map_err(|e| fail(e.to_string()))?;
            }
            capacity::admit_disk(
                &self.capacity,
                &self.held()?,
                meta.project.as_deref(),
                bytes,
            )
            .map_err(capacity::Refused::into_error)?;
            self.snapshots
                .begin(&native_id, id)
                .map_err(|e| fail(e.to_string()))?
        };
        let frozen = (!meta.stopped && disk::is_mount_point(&fs_root))
            .then(|| disk::Frozen::new(&fs_root))
            .transpose()
            .map_err(|e| fail(e.to_string()))?;
        let copied = disk::copy_image(&image, &pending.image(), None);
        drop(frozen);
        let copied = copied.map_err(|e| fail(e.to_string()))?;
        let record = snapshots::SnapshotMeta {
            native_id,
            snapshot_id: spec.snapshot_id.to_string(),
            name: spec.name.clone(),
            sandbox: id.to_owned(),
            project: meta.project.clone(),
            created_at_unix: store::now_unix(),
            image: meta.image.clone(),
            image_root: meta.image_root.clone(),
            uid: meta.uid,
            uid_count: meta.uid_count,
            network: meta.network,
            size_bytes: disk::allocated_bytes(&pending.image()),
            copied: match copied {
                disk::Copied::Reflink => "reflink",
                disk::Copied::Sparse => "sparse",
            }
            .into(),
        };
        pending.finish(&record).map_err(|e| fail(e.to_string()))?;
        Ok(record)
    }

    /// The ready snapshot `id`, or `NotFound`. Blocking.
    fn load_snapshot(&self, id: &str) -> Result<snapshots::SnapshotMeta> {
        if !store::is_native_id(id) {
            return Err(snapshot_not_found(id));
        }
        self.snapshots
            .load(id)
            .map_err(|e| unavailable(e.to_string()))?
            .ok_or_else(|| snapshot_not_found(id))
    }

    /// The running init of sandbox `id`, if it has one: this provider's, or one found
    /// through its control socket (started by an earlier run of the server, or by another
    /// server sharing the root). Never starts one.
    fn existing_init(&self, id: &str) -> Option<Arc<Init>> {
        let control = self.store.control_socket(id);
        self.inits.existing(id, || Init::connect(&control))
    }

    /// Stops sandbox `id`'s init, whoever started it, and waits until it is gone.
    fn stop_init(&self, id: &str) {
        self.existing_init(id);
        self.inits.stop(id);
    }

    /// The running init of sandbox `id`, found through its control socket or else started:
    /// under the sandbox's setup lock, with its filesystem mounted and its cgroup made.
    fn init(&self, id: &str, meta: &Metadata) -> std::result::Result<Arc<Init>, String> {
        self.inits.get(id, || {
            let fs_root = self.store.fs_root(id);
            let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root))
                .map_err(|e| format!("cannot lock the sandbox's setup: {e}"))?;
            let control = self.store.control_socket(id);
            if let Some(running) = Init::connect(&control) {
                return Ok(running);
            }
            // Checked under the lock a stop takes to record it.
            if self
                .store
                .load(id)
                .ok()
                .flatten()
                .is_some_and(|m| m.stopped)
            {
                return Err("the sandbox is stopped".into());
            }
            // A command never starts on the bare mount point of an unmounted image.
            disk::ensure_mounted(&self.store.dir(id), &fs_root)
                .map_err(|e| format!("cannot mount the sandbox's filesystem: {e}"))?;
            let group = self
                .cgroups
                .as_ref()
                .map(|c| c.prepare(id, meta.project.as_deref(), disk::block_device(&fs_root)))
                .transpose()
                .map_err(|e| format!("cannot set up the sandbox's cgroup: {e}"))?;
            let ids = self.ids(meta)?;
            let layers = meta
                .image_root
                .as_ref()
                .map(|lower| self.store.layers(id, lower));
            if let Some(layers) = &layers
                && !layers.lower.is_dir()
            {
                return Err(format!(
                    "the sandbox's image ({}) is gone from {}",
                    meta.image.as_deref().unwrap_or("?"),
                    layers.lower.display()
                ));
            }
            let setup = self
                .template
                .setup(&fs_root, ids, meta.network, layers, Some(control));
            Init::start(&self.program, &setup, group.as_ref())
        })
    }

    /// Starts durable command `spec` in sandbox `id` (see `jobs`); its handle, the command
    /// id. A command id that was started before starts nothing and answers the same handle.
    /// Blocking: on a command thread.
    fn start_command(&self, id: &str, spec: &CommandSpec) -> Result<String> {
        let meta = self.live(id)?;
        let cwd = spec.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        let root = self.files_root(id, &meta)?;
        files::check_cwd(&root, &cwd).map_err(invalid)?;
        drop(root);
        let handle = spec.command_id.to_string();
        let commands = self.store.commands_dir(id);
        let Some(claimed) = jobs::claim(&commands, &spec.command_id, spec.stdin)? else {
            return Ok(handle);
        };
        // Corral's own deadline comes first; the init's is a backstop a minute later, and
        // never past the sandbox's lifetime.
        let mut kill_after = spec.timeout.saturating_add(COMMAND_BACKSTOP);
        if let Some(end) = meta.expires_at_unix {
            let left = (std::time::UNIX_EPOCH + Duration::from_secs(end))
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            kill_after = kill_after.min(left);
        }
        let start = jobs::start_request(spec, &cwd, self.template.cpu_seconds, kill_after);
        let failed = |e: String| unavailable(format!("the sandbox could not run the command: {e}"));
        // An init found gone before it took the request is replaced once: nothing started.
        let mut retried = false;
        loop {
            let init = match self.init(id, &meta) {
                Ok(init) => init,
                Err(e) => {
                    claimed.abandon();
                    return Err(failed(e));
                }
            };
            let record = jobs::JobRecord {
                job: start.job,
                instance: init.instance().to_owned(),
                stdin: spec.stdin,
            };
            if let Err(e) = claimed.record(&record) {
                claimed.abandon();
                return Err(e.into());
            }
            match init.start_job(&start, &claimed.descriptors()) {
                Ok(()) => return Ok(handle),
                Err(RequestError::Gone(_)) if !retried => {
                    self.inits.discard(id, &init, false);
                    claimed.reset();
                    retried = true;
                }
                Err(RequestError::Gone(why) | RequestError::Refused(why)) => {
                    claimed.abandon();
                    return Err(failed(why));
                }
                // Sent, and not answered: whether it runs is the init's to say, and the
                // directory stays for a reader to learn it (a lost command, at worst).
                Err(RequestError::Unanswered(why)) => {
                    self.inits.discard(id, &init, true);
                    return Err(failed(why));
                }
            }
        }
    }

    /// Whether the durable command recorded as `record` still runs in sandbox `id`: its
    /// init is alive and runs it. Blocking.
    fn still_running(&self, id: &str, record: &jobs::JobRecord) -> bool {
        match self.existing_init(id) {
            Some(init) if init.instance() == record.instance => init
                .is_running(record.job)
                .unwrap_or_else(|_| init.is_alive()),
            _ => false,
        }
    }

    /// The init that runs the durable command recorded as `record` in sandbox `id`, if it
    /// still runs. Blocking.
    fn init_of(&self, id: &str, record: &jobs::JobRecord) -> Option<Arc<Init>> {
        self.existing_init(id)
            .filter(|init| init.instance() == record.instance)
    }

    /// The root file calls resolve beneath: the sandbox's directory, or (an image's
    /// layers exist only in its init's mount namespace) the root its init sees.
    fn files_root(&self, id: &str, meta: &Metadata) -> Result<files::Root> {
        if meta.image_root.is_none() {
            return Ok(files::Root::Host(self.store.fs_root(id)));
        }
        let init = self
            .init(id, meta)
            .map_err(|e| unavailable(format!("sandbox {id}: {e}")))?;
        let root = init
            .root()
            .map_err(|e| unavailable(format!("cannot reach the root of sandbox {id}: {e}")))?;
        Ok(files::Root::Init(root))
    }

    /// The sandbox's host ids.
    fn ids(&self, meta: &Metadata) -> std::result::Result<Option<IdRange>, String> {
        match (self.as_root, meta.uid) {
            (true, Some(first)) => Ok(Some(IdRange {
                first,
                count: meta.uid_count.unwrap_or(1),
            })),
            (true, None) => {
                Err("a sandbox without ids of its own cannot run under a root server".into())
            }
            (false, _) => Ok(None),
        }
    }
}

impl std::fmt::Debug for LocalProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProvider")
            .field("store", &self.shared.store)
            .field("unavailable_reason", &self.unavailable_reason())
            .finish_non_exhaustive()
    }
}

impl Drop for LocalProvider {
    /// Lets go of every sandbox's init (each ends, unless a durable command or another
    /// server sharing the root still holds it), then unmounts the filesystems of this root's
    /// sandboxes that no init uses any more (each under its setup lock, so no init of
    /// another process sharing the root is being set up on it) and removes their empty
    /// cgroups: none of it is state, all of it is made again when a sandbox is next used,
    /// and a test or a server that goes away leaves no process but running durable
    /// commands' (which the next server finds), and no loop device holding a deleted image.
    fn drop(&mut self) {
        self.shared.inits.release_all();
        let Ok(sandboxes) = self.shared.store.list() else {
            return;
        };
        for meta in sandboxes {
            let fs_root = self.shared.store.fs_root(&meta.native_id);
            let _setup = lock::FileLock::exclusive(&lock::setup_lock_path(&fs_root));
            // An init that goes on keeps its mounts: the image stays mounted here too, so
            // the next server never mounts it a second time beside the init's.
            if inits::is_listening(&self.shared.store.control_socket(&meta.native_id)) {
                continue;
            }
            // The image itself may already be gone (a test's temporary directory being
            // removed): the mount is what matters.
            if disk::is_mount_point(&fs_root) {
                let _ = disk::unmount(&fs_root);
            }
            if let Some(cgroups) = &self.shared.cgroups {
                cgroups.remove_if_empty(&meta.native_id, meta.project.as_deref());
            }
        }
    }
}

fn unavailable(message: impl Into<String>) -> ProviderError {
    ProviderError::Unavailable {
        provider: Provider::Local,
        message: message.into(),
        retry_after: None,
    }
}

fn expired(id: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: Provider::Local,
        resource: format!("sandbox {id} (it has expired)"),
    }
}

fn snapshot_not_found(id: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: Provider::Local,
        resource: format!("snapshot {id}"),
    }
}

/// Whether a sandbox of `status` can run commands and serve files: an expired one is
/// `NotFound`; a stopped one is refused until it is resumed (never mounted behind the
/// caller's back).
fn usable(id: &str, status: SandboxStatus) -> Result<()> {
    match status {
        SandboxStatus::Expired => Err(expired(id)),
        s if s.is_stopped() => Err(invalid(format!("sandbox {id} is stopped; resume it first"))),
        _ => Ok(()),
    }
}

/// The status a sandbox's record says, at `now` (without mounting or probing anything).
fn recorded_status(meta: &Metadata, now: u64) -> SandboxStatus {
    if meta.expired_at(now) {
        SandboxStatus::Expired
    } else if meta.stopped {
        SandboxStatus::Stopped
    } else {
        SandboxStatus::Running
    }
}

fn not_found(id: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: Provider::Local,
        resource: format!("sandbox {id}"),
    }
}

fn invalid(message: impl Into<String>) -> ProviderError {
    ProviderError::InvalidRequest {
        provider: Provider::Local,
        message: message.into(),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| unavailable(format!("a local worker failed: {e}")))
}

impl LocalProvider {
    /// The provider over `config.root`, which is created if missing (an error if it cannot
    /// be). Whether sandboxes can run here is probed once, here, by starting a sandbox init
    /// and running `true` in it; if they cannot, the provider is still returned and reports
    /// itself unavailable.
    pub fn new(config: LocalConfig) -> Result<Self> {
        let store = Store::open(&config.root).map_err(|e| {
            unavailable(format!(
                "the sandbox directory {} cannot be created: {e}",
                config.root.display()
            ))
        })?;
        store.empty_trash();
        store.remove_unfinished();
        let snapshots = snapshots::Snapshots::open(&store.root()).map_err(|e| {
            unavailable(format!(
                "the snapshot directory under {} cannot be created: {e}",
                config.root.display()
            ))
        })?;
        // Snapshots a crash interrupted: under the create lock, which every snapshot holds
        // while it starts, so one of another process sharing the root is never taken for one.
        if let Ok(_one_at_a_time) = store.lock_creates() {
            snapshots.clean(|sandbox| disk::thaw(&store.fs_root(sandbox)));
        }
        let as_root = rustix::process::geteuid().is_root();
        let program = match config.init.clone() {
            Some(p) => Ok(p),
            None => InitProgram::beside_current_exe()
                .map_err(|e| format!("cannot find this executable: {e}")),
        };
        let network_check = match &config.network {
            Some(net) => net.check(),
            None => Err("not configured (LocalConfig::network)".into()),
        };
        let l = &config.limits;
        let mut template = Template {
            system_dirs: host::system_dirs(),
            masks: host::unreadable_under("/etc"),
            limits: ProcessLimits {
                processes: l.max_processes,
                address_space: l.memory_bytes,
                file_size: l.file_size_bytes,
            },
            cpu_seconds: l.cpu_seconds,
            seccomp: None,
            host_network: config.allow_network,
            network: config.network.clone().filter(|_| network_check.is_ok()),
            resolv_conf: None,
        };
        if template.network.is_some() {
            template.resolv_conf = network::write_resolv_conf(&config.root)
                .map_err(|e| tracing::warn!(reason = %e, "local sandboxes get no resolver"))
                .ok();
        }
        let mut seccomp = seccomp::program();
        template.seccomp = seccomp.as_ref().ok().cloned();
        let mut ready = program
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| host::probe(&store, p, &template, as_root));
        // A filter this kernel refuses must not make the provider unusable: run without it,
        // and say so.
        if let (Err(why), Ok(_), Ok(p)) = (&ready, &seccomp, &program) {
            let mut plain = template.clone();
            plain.seccomp = None;
            if host::probe(&store, p, &plain, as_root).is_ok() {
                seccomp = Err(format!("the filter cannot be loaded here: {why}"));
                template = plain;
                ready = Ok(());
            }
        }
        let images = images::Images::prepare(&config.images, &config.root);
        let capacity = config
            .capacity
            .unwrap_or_else(|| LocalCapacity::for_this_machine(&config.root));
        let cgroups =
            cgroup::Cgroups::detect(&config.limits, config.cgroup_parent.as_deref()).map(|c| {
                c.with_project_caps(
                    capacity.per_project.memory_bytes,
                    capacity.per_project.processes,
                )
            });
        let server_cgroup_caps = match &cgroups {
            Ok(c) => c
                .cap_subtree(capacity.server.memory_bytes, capacity.server.processes)
                .map_err(|e| e.to_string()),
            Err(why) => Err(format!("no cgroups: {why}")),
        };
        let disks = match config.limits.disk_bytes {
            Some(size) => disk::Disks::detect(size, config.limits.disk_reserve_bytes, &config.root),
            None => Err("no disk quota is configured (LocalLimits::disk_bytes)".into()),
        };
        let containment = Containment {
            cgroups: cgroups
                .as_ref()
                .map(cgroup::Cgroups::describe)
                .map_err(Clone::clone),
            disk_quota: disks.as_ref().map(disk::Disks::size).map_err(Clone::clone),
            io: host::io_containment(cgroups.as_ref(), disks.as_ref(), &config.limits.io),
            seccomp: seccomp.as_ref().map(drop).map_err(Clone::clone),
            network: network_check,
            images: if images.problems().is_empty() {
                Ok(images.names())
            } else {
                Err(images.problems())
            },
            capacity,
            server_cgroup_caps,
        };
        if ready.is_ok() {
            containment.warn_missing(config.network.is_some());
        }
        let mut caps = capabilities::with_images(images.any());
        caps.images = images.names();
        // Snapshots copy a sandbox's own image, and restores need images to copy into.
        if disks.is_err() {
            caps.supports_snapshots = false;
            caps.supports_restore = false;
        }
        let shared = Shared {
            store,
            snapshots,
            capacity,
            images,
            cgroups: cgroups.ok(),
            disks: disks.ok(),
            inits: Inits::default(),
            program: program.unwrap_or_else(|_| InitProgram::dedicated("/nonexistent")),
            template,
            as_root,
        };
        Ok(Self {
            caps,
            shared: Arc::new(shared),
            unavailable: ready.err(),
            running: Arc::new(Running::default()),
            pool: pool::ExecPool::new(config.exec_threads),
            exec_queue_wait: config.exec_queue_wait,
            containment,
        })
    }

    /// What contains sandboxes here (cgroups, disk quota, seccomp), and why a part is missing.
    pub fn containment(&self) -> &Containment {
        &self.containment
    }

    /// The names of the images a create may name, every configured one (the catalog's
    /// `imageMode` is `template` when there are any).
    pub fn image_names(&self) -> Vec<String> {
        self.shared.images.names()
    }

    /// The caps in force on what sandboxes hold together.
    pub fn capacity(&self) -> &LocalCapacity {
        &self.containment.capacity
    }

    /// Why the provider cannot run sandboxes on this machine, if it cannot.
    pub fn unavailable_reason(&self) -> Option<String> {
        self.unavailable.clone()
    }

    fn ready(&self) -> Result<()> {
        match &self.unavailable {
            Some(why) => Err(unavailable(why.clone())),
            None => Ok(()),
        }
    }

    /// A thread of the command pool, waited for at most `exec_queue_wait` and never past
    /// the call's deadline.
    async fn command_thread(&self, ctx: &CallContext) -> Result<pool::Reserved> {
        let wait = ctx.bounded(self.exec_queue_wait);
        self.pool.reserve(wait).await.map_err(|busy| {
            ProviderError::Unavailable {
                provider: Provider::Local,
                message: format!(
                    "all {} threads that run local commands are busy (waited {} ms for one); retry after Retry-After",
                    busy.size,
                    busy.waited.as_millis()
                ),
                retry_after: Some(Duration::from_secs(1)),
            }
        })
    }

    /// The directory of command `handle` of sandbox `native_id` (both checked before they
    /// become paths), once the sandbox is known to exist and not to have expired.
    async fn command_dir(&self, native_id: &str, handle: &str) -> Result<PathBuf> {
        self.live(native_id).await?;
        Ok(jobs::dir(
            &self.shared.store.commands_dir(native_id),
            handle,
        )?)
    }

    /// The metadata of a sandbox that exists, has not expired and is not stopped
    /// ([`usable`]).
    async fn live(&self, native_id: &str) -> Result<Metadata> {
        let (meta, status) = self.observe(native_id).await?;
        usable(native_id, status)?;
        Ok(meta)
    }

    /// The metadata and status of a sandbox; expiry is enforced here.
    async fn observe(&self, native_id: &str) -> Result<(Metadata, SandboxStatus)> {
        self.ready()?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        blocking(move || shared.observe(&id)).await?
    }

    /// [`SandboxProvider::create`] with what the port does not carry yet: the project the
    /// sandbox counts against, and whether it gets a network.
    pub async fn create_with(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        local: &LocalCreate,
    ) -> Result<ObservedSandbox> {
        self.create_from(ctx, spec, local, None).await
    }

    /// A create, or with `from` a restore: the new sandbox's image a copy of that
    /// snapshot's, its image (name and root) the snapshotted sandbox's.
    async fn create_from(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        local: &LocalCreate,
        from: Option<snapshots::SnapshotMeta>,
    ) -> Result<ObservedSandbox> {
        self.ready()?;
        if let Some(t) = spec.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(invalid(format!(
                "timeout {t} is outside 1..={MAX_TIMEOUT_SECONDS} seconds"
            )));
        }
        let image = match spec.request.image() {
            // A restore's layer sits on the image it was written over.
            _ if from.is_some() => from
                .as_ref()
                .and_then(|f| Some((f.image.clone()?, f.image_root.clone()?))),
            None => None,
            Some(name) => match self.shared.images.get(name) {
                None if !self.shared.images.any() => {
                    return Err(invalid(
                        "`image` is not selectable on this server's local provider (no images are configured)",
                    ));
                }
                None => {
                    return Err(invalid(format!(
                        "no local image is named `{name}` (configured: {})",
                        self.shared.images.names().join(", ")
                    )));
                }
                Some(Err(why)) => return Err(unavailable(why.clone())),
                Some(Ok(image)) => Some((name.to_owned(), image.rootfs.clone())),
            },
        };
        if local.network && self.shared.template.network.is_none() {
            let why = self
                .containment
                .network
                .as_ref()
                .err()
                .cloned()
                .unwrap_or_default();
            return Err(invalid(format!(
                "this server gives local sandboxes no network ({why})"
            )));
        }
        let now = store::now_unix();
        let record = Metadata {
            native_id: store::new_native_id(),
            operation_id: spec.operation_id.to_string(),
            created_at_unix: now,
            timeout_seconds: spec.timeout_seconds,
            expires_at_unix: spec.timeout_seconds.map(|t| now.saturating_add(t)),
            uid: None,
            uid_count: None,
            project: local.project.clone(),
            deployment: ctx.deployment().map(str::to_owned),
            network: local.network,
            image: image.as_ref().map(|(name, _)| name.clone()),
            image_root: image.map(|(_, root)| root),
            disk_bytes: None,
            stopped: false,
        };
        let shared = self.shared.clone();
        let meta = blocking(move || {
            let mut record = record;
            let store = &shared.store;
            // One create at a time across every process sharing the root, so no two sandboxes
            // ever pick the same ids.
            let _one_at_a_time = store
                .lock_creates()
                .map_err(|e| unavailable(format!("cannot lock the sandboxes root: {e}")))?;
            let source = from.as_ref().map(|f| shared.snapshots.image(&f.native_id));
            // A snapshot's image is as large as its sandbox's was.
            let disk = match (&shared.disks, &source) {
                (None, Some(_)) => {
                    return Err(unavailable(
                        "restoring a snapshot needs sandbox filesystem images, which this \
                         server does not make (LocalLimits::disk_bytes, root)",
                    ));
                }
                (None, None) => 0,
                (Some(disks), None) => disks.size(),
                (Some(_), Some(image)) => std::fs::metadata(image)
                    .map_err(|e| unavailable(format!("cannot read the snapshot's image: {e}")))?
                    .len(),
            };
            // Nothing is made for a create the volume or a cap has no room for.
            if let Some(disks) = &shared.disks {
                disks.check_room(&store.root(), disk).map_err(|e| {
                    unavailable(format!("cannot create the sandbox directory: {e}"))
                })?;
            }
            let held = shared.held()?;
            capacity::admit(&shared.capacity, &held, record.project.as_deref(), disk)
                .map_err(capacity::Refused::into_error)?;
            record.disk_bytes = (disk > 0).then_some(disk);
            if shared.as_root {
                record.uid = Some(
                    store
                        .free_ids(IDS_PER_SANDBOX)
                        .map_err(|e| unavailable(format!("cannot pick sandbox ids: {e}")))?,
                );
                record.uid_count = Some(IDS_PER_SANDBOX);
            }
            let restored = source
                .as_deref()
                .zip(from.as_ref())
                .map(|(image, f)| store::Restored {
                    image,
                    uid: f.uid,
                    uid_count: f.uid_count.unwrap_or(1),
                });
            store
                .create(&record, shared.disks.as_ref(), restored.as_ref())
                .map_err(|e| {
                    // Without its metadata the directory is not a sandbox; clean it up.
                    let _ = store.delete(&record.native_id);
                    unavailable(format!("cannot create the sandbox directory: {e}"))
                })?;
            Ok::<_, ProviderError>(record)
        })
        .await??;
        Ok(observed(&meta, SandboxStatus::Running))
    }
}

fn observed_snapshot(meta: &snapshots::SnapshotMeta) -> ObservedSnapshot {
    ObservedSnapshot {
        native_id: meta.native_id.clone(),
        status: SnapshotStatus::Ready,
        size_bytes: Some(meta.size_bytes),
    }
}

fn observed(meta: &Metadata, status: SandboxStatus) -> ObservedSandbox {
    ObservedSandbox {
        native_id: meta.native_id.clone(),
        status,
        operation_id: meta.operation_id.parse::<OperationId>().ok(),
    }
}

/// How long after its own deadline a durable command is killed by its init, should Corral
/// not have killed it (a backstop).
const COMMAND_BACKSTOP: Duration = Duration::from_secs(60);

/// How long a delete waits for a sandbox's processes to be gone before it gives up (and the
/// sandbox, with its ids, stays until a retry).
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// Kills every process of sandbox `id` (its cgroup, and every process of its host ids
/// whose root is the sandbox's) and waits until they are gone; removes its cgroup. The
/// sandbox's metadata, and with it its ids, is removed only after this succeeds; and no id
/// that any process holds is given to a new sandbox (`Store::free_ids`).
fn end_processes(
    cgroups: Option<&cgroup::Cgroups>,
    store: &Store,
    id: &str,
    meta: &Metadata,
) -> std::result::Result<(), String> {
    if let Some(cgroups) = cgroups {
        cgroups
            .remove(id, meta.project.as_deref(), KILL_PATIENCE)
            .map_err(|e| e.to_string())?;
    }
    if let Some(uid) = meta.uid {
        let ids = uid..uid.saturating_add(meta.uid_count.unwrap_or(1));
        procs::kill_sandbox(&ids, &store.fs_root(id), KILL_PATIENCE).map_err(|left| {
            format!("processes {left:?} of ids {ids:?} are still there after {KILL_PATIENCE:?}")
        })?;
    }
    Ok(())
}

fn check_exec(spec: &ExecSpec) -> Result<()> {
    check_command(&spec.command, &spec.env)
}

/// A command and environment `/bin/sh -c` can be given.
fn check_command(command: &str, env: &BTreeMap<String, String>) -> Result<()> {
    if command.contains('\0') {
        return Err(invalid("the command contains a NUL byte"));
    }
    for (k, v) in env {
        let shell_name = k
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !shell_name {
            return Err(invalid(format!(
                "`{k}` is not a valid environment variable name"
            )));
        }
        if v.contains('\0') {
            return Err(invalid(format!("the value of `{k}` contains a NUL byte")));
        }
    }
    Ok(())
}

#[async_trait]
impl SandboxProvider for LocalProvider {
    fn provider(&self) -> Provider {
        Provider::Local
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        // The project the service names on the call (per-project caps) and the create's own
        // network flag.
        let network = match &spec.request {
            corral_domain::CreateSandboxRequest::Local(l) => l.network.unwrap_or(false),
            _ => false,
        };
        let local = LocalCreate {
            project: ctx.project().map(str::to_owned),
            network,
        };
        self.create_with(ctx, spec, &local).await
    }

    async fn get(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let (meta, status) = self.observe(native_id).await?;
        Ok(observed(&meta, status))
    }

    async fn delete(&self, _ctx: &CallContext, native_id: &str) -> Result<()> {
        self.ready()?;
        if !store::is_native_id(native_id) {
            return Ok(());
        }
        // Running commands of the sandbox are killed with it.
        self.running.cancel_all(native_id);
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        blocking(move || {
            let fail = |e: String| unavailable(format!("cannot delete sandbox {id}: {e}"));
            let store = &shared.store;
            shared.stop_init(&id);
            // The metadata (which holds the ids) goes last: until every process of the
            // sandbox is gone, its ids are not free for another sandbox.
            // Unreadable metadata is not a sandbox (`Store::list` skips it), so its ids are
            // not held either: delete what is there.
            if let Some(meta) = store.load(&id).ok().flatten() {
                end_processes(shared.cgroups.as_ref(), store, &id, &meta).map_err(&fail)?;
            } else if let Some(cgroups) = &shared.cgroups {
                cgroups
                    .remove(&id, None, KILL_PATIENCE)
                    .map_err(|e| fail(e.to_string()))?;
            }
            store.delete(&id).map_err(|e| fail(e.to_string()))
        })
        .await?
    }

    async fn stop(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.ready()?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        // Its running execs end now rather than when their init goes.
        self.running.cancel_all(native_id);
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        let meta = blocking(move || shared.stop(&id)).await??;
        Ok(observed(&meta, SandboxStatus::Stopped))
    }

    async fn resume(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.ready()?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        let meta = blocking(move || shared.resume(&id)).await??;
        Ok(observed(&meta, SandboxStatus::Running))
    }

    async fn snapshot(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        self.ready()?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        let shared = self.shared.clone();
        let (id, spec) = (native_id.to_owned(), spec.clone());
        let made = blocking(move || shared.snapshot(&id, &spec)).await??;
        Ok(observed_snapshot(&made))
    }

    async fn get_snapshot(&self, _ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        self.ready()?;
        let shared = self.shared.clone();
        let id = snapshot.to_owned();
        let found = blocking(move || shared.load_snapshot(&id)).await??;
        Ok(observed_snapshot(&found))
    }

    /// One that is not there (never made, or deleted) is `Ok`, as the port asks.
    async fn delete_snapshot(&self, _ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.ready()?;
        if !store::is_native_id(snapshot) {
            return Ok(());
        }
        let shared = self.shared.clone();
        let id = snapshot.to_owned();
        blocking(move || {
            shared
                .snapshots
                .delete(&id)
                .map_err(|e| unavailable(format!("cannot delete snapshot {id}: {e}")))
        })
        .await?
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        self.ready()?;
        let shared = self.shared.clone();
        let id = snapshot.to_owned();
        let from = blocking(move || shared.load_snapshot(&id)).await??;
        let network = match &spec.request {
            corral_domain::CreateSandboxRequest::Local(l) => l.network.unwrap_or(false),
            _ => false,
        };
        let local = LocalCreate {
            project: ctx.project().map(str::to_owned),
            network,
        };
        self.create_from(ctx, spec, &local, Some(from)).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        self.ready()?;
        check_exec(spec)?;
        // The write end lives in the registry of running commands, removed when this future
        // ends or is dropped, or when the sandbox is deleted (even before the command starts:
        // it is registered before the sandbox is looked up): the read end then hangs up and
        // the watching thread has the command killed instead of letting it run to its
        // deadline.
        let (cancel, cancel_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| unavailable(format!("cannot create a pipe: {e}")))?;
        let _running = self.running.register(native_id, cancel_w);
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        // A thread of the command pool (never tokio's blocking pool, which SQLite needs),
        // waited for at most `exec_queue_wait` and never past the call's deadline. The
        // sandbox is looked up on it (one hop fewer than on the blocking pool first).
        let thread = self.command_thread(ctx).await?;
        // Measured once the thread is ours: the wait is not taken from the command's time,
        // but the call's deadline still bounds it.
        let timeout = ctx.bounded(spec.timeout);
        let cwd = spec.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        let spec = spec.clone();
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        let outcome = thread
            .run(move || {
                let meta = shared.live(&id)?;
                // A command never outlives its sandbox: the lifetime's end is a deadline too.
                let lifetime_left = meta.expires_at_unix.map(|end| {
                    (std::time::UNIX_EPOCH + Duration::from_secs(end))
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or_default()
                });
                let run_for = lifetime_left.map_or(timeout, |left| left.min(timeout));
                let root = shared.files_root(&id, &meta)?;
                files::check_cwd(&root, &cwd).map_err(invalid)?;
                drop(root);
                let run = Run {
                    command: &spec.command,
                    cwd: &cwd,
                    env: &spec.env,
                    timeout: run_for,
                    max_output_bytes: spec.max_output_bytes,
                    cpu_seconds: shared.template.cpu_seconds,
                };
                let failed =
                    |e: String| unavailable(format!("the sandbox could not run the command: {e}"));
                // An init found dead (or dying) is replaced once: nothing was started on it.
                let mut retried = false;
                loop {
                    let init = shared.init(&id, &meta).map_err(failed)?;
                    match command::run(&init, &run, Some(&cancel)) {
                        Ok(outcome) => return Ok((outcome, run_for)),
                        Err(RunError::InitGone { stop, .. }) if !retried => {
                            shared.inits.discard(&id, &init, stop);
                            retried = true;
                        }
                        Err(RunError::InitGone { why: e, .. } | RunError::Failed(e)) => {
                            return Err(failed(e));
                        }
                    }
                }
            })
            .await
            .map_err(unavailable)??;
        let (outcome, run_for) = outcome;
        match outcome {
            Outcome::Finished(out) => Ok(out),
            Outcome::TimedOut if run_for < timeout => Err(ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id} (it expired while the command ran)"),
            }),
            Outcome::TimedOut => Err(ProviderError::CommandTimedOut { after: timeout }),
            Outcome::Cancelled => Err(not_found(native_id)),
        }
    }

    async fn read_file(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let meta = self.live(native_id).await?;
        let shared = self.shared.clone();
        let (id, path) = (native_id.to_owned(), path.to_owned());
        blocking(move || files::read(&shared.files_root(&id, &meta)?, &path, max_bytes)).await?
    }

    async fn write_file(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let meta = self.live(native_id).await?;
        let shared = self.shared.clone();
        let (id, path) = (native_id.to_owned(), path.to_owned());
        let content = content.to_vec();
        blocking(move || files::write(&shared.files_root(&id, &meta)?, &path, &content, meta.uid))
            .await?
    }

    async fn find_by_operation_id(
        &self,
        _ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.ready()?;
        let shared = self.shared.clone();
        let wanted = operation_id.to_string();
        blocking(move || {
            let now = store::now_unix();
            let all = shared
                .store
                .list()
                .map_err(|e| unavailable(format!("cannot list sandboxes: {e}")))?;
            Ok(all
                .iter()
                .filter(|m| m.operation_id == wanted)
                .map(|m| observed(m, recorded_status(m, now)))
                .collect())
        })
        .await?
    }

    /// One page: every sandbox on this host tagged with `deployment`, in native-id order (the
    /// store is a directory; a host holds few enough sandboxes for one page).
    async fn list_tagged(
        &self,
        _ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        self.ready()?;
        if page.is_some() {
            // No page but the first is ever handed out.
            return Ok(TaggedPage::default());
        }
        let shared = self.shared.clone();
        let wanted = deployment.to_owned();
        blocking(move || {
            let now = store::now_unix();
            let mut all = shared
                .store
                .list()
                .map_err(|e| unavailable(format!("cannot list sandboxes: {e}")))?;
            all.retain(|m| m.deployment.as_deref() == Some(wanted.as_str()));
            all.sort_by(|a, b| a.native_id.cmp(&b.native_id));
            Ok(TaggedPage {
                sandboxes: all
                    .iter()
                    .map(|m| TaggedSandbox {
                        observed: observed(m, recorded_status(m, now)),
                        project: m.project.clone(),
                    })
                    .collect(),
                next: None,
            })
        })
        .await?
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        self.ready()?;
        check_command(&spec.command, &spec.env)?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        // One request to the sandbox's init, as an exec's, on a command thread.
        let thread = self.command_thread(ctx).await?;
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        let spec = spec.clone();
        let handle = thread
            .run(move || shared.start_command(&id, &spec))
            .await
            .map_err(unavailable)??;
        // Ended commands past what is kept go, off the start's path.
        let commands = self.shared.store.commands_dir(native_id);
        drop(tokio::task::spawn_blocking(move || jobs::prune(&commands)));
        Ok(Started {
            handle,
            events: None,
        })
    }

    async fn attach_command<'a>(
        &'a self,
        _ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let dir = self.command_dir(native_id, handle).await?;
        let (id, h) = (native_id.to_owned(), handle.to_owned());
        let opened = blocking(move || jobs::open(&dir, &id, &h)).await??;
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        let still_running: jobs::StillRunning =
            Arc::new(move |record: &jobs::JobRecord| shared.still_running(&id, record));
        Ok(jobs::events(
            opened,
            native_id,
            handle,
            from,
            still_running,
        )?)
    }

    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let dir = self.command_dir(native_id, handle).await?;
        // It may wait for the command to read: a command thread, not the blocking pool.
        let thread = self.command_thread(ctx).await?;
        let patience = ctx.bounded(jobs::STDIN_PATIENCE);
        let (id, data) = (native_id.to_owned(), data.to_vec());
        Ok(thread
            .run(move || jobs::write_stdin(&dir, &id, offset, &data, patience))
            .await
            .map_err(unavailable)??)
    }

    async fn close_stdin(&self, _ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        let dir = self.command_dir(native_id, handle).await?;
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        blocking(move || {
            let Some(record) = jobs::mark_stdin_closed(&dir, &id)? else {
                return Ok(());
            };
            // The init's holder was the last writer: the command reads to end-of-file.
            match shared.init_of(&id, &record) {
                Some(init) => init
                    .close_stdin(record.job)
                    .map_err(|e| unavailable(format!("cannot close the command's stdin: {e}"))),
                None => Ok(()),
            }
        })
        .await?
    }

    async fn signal_command(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let dir = self.command_dir(native_id, handle).await?;
        let shared = self.shared.clone();
        let id = native_id.to_owned();
        blocking(move || {
            let record = jobs::record(&dir, &id)?;
            // Ended, or its init (and with it the command) is gone: nothing to signal.
            if jobs::has_ended(&dir) {
                return Ok(());
            }
            let Some(init) = shared.init_of(&id, &record) else {
                return Ok(());
            };
            let Some(signal) = rustix::process::Signal::from_named_raw(signal.number()) else {
                return Err(invalid(format!("signal {signal} is not known here")));
            };
            init.signal(record.job, signal)
                .map(drop)
                .map_err(|e| unavailable(format!("cannot signal the command: {e}")))
        })
        .await?
    }

    async fn find_command(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        self.live(native_id).await?;
        let commands = self.shared.store.commands_dir(native_id);
        let id = *command_id;
        blocking(move || jobs::exists(&commands, &id).then(|| id.to_string())).await
    }
}
