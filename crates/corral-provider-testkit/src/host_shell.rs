//! A test double that runs commands with the host's `sh`, one temporary directory per sandbox.
//!
//! **No isolation**: for tests only. Provider fakes use [`run_command`] to give their exec
//! endpoints real behaviour (real exit codes, streams, deadlines), and [`HostShellProvider`]
//! runs the conformance suite against the port's files-through-exec helper.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use corral_domain::{
    ImageMode, OperationId, OutputStreams, PricingEvidence, Provider, ProviderCapabilities,
    SandboxStatus, TimeoutMode,
};
use corral_provider::{
    CallContext, CappedOutput, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError,
    Result, SandboxProvider, TaggedPage, TaggedSandbox, files_via_exec,
};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Outcome of [`run_command`].
#[derive(Debug)]
pub enum RunOutcome {
    /// The command finished.
    Finished(ExecOutput),
    /// The command ran past its deadline; its process group was killed.
    TimedOut,
}

async fn drain(mut from: impl AsyncRead + Unpin, cap: usize) -> CappedOutput {
    let mut out = CappedOutput::new(cap);
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.push(&buf[..n]),
        }
    }
}

/// Runs `sh -c command` on the host in `cwd` with `env` added, keeping at most `cap` bytes per
/// stream and killing the whole process group after `timeout`.
pub async fn run_command(
    command: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    cap: usize,
) -> std::io::Result<RunOutcome> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .envs(env)
        .env("TMPDIR", cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id();
    let stdout = tokio::spawn(drain(child.stdout.take().expect("piped"), cap));
    let stderr = tokio::spawn(drain(child.stderr.take().expect("piped"), cap));
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            if let Some(pid) = pid {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--"])
                    .arg(format!("-{pid}"))
                    .status();
            }
            let _ = child.wait().await;
            return Ok(RunOutcome::TimedOut);
        }
    };
    let (stdout, so_trunc) = stdout.await.expect("drain").finish();
    let (stderr, se_trunc) = stderr.await.expect("drain").finish();
    use std::os::unix::process::ExitStatusExt as _;
    let exit_code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    Ok(RunOutcome::Finished(ExecOutput {
        stdout,
        stderr,
        exit_code,
        truncated: so_trunc || se_trunc,
    }))
}

struct HostSandbox {
    dir: tempfile::TempDir,
    /// Stopped: exec is refused until a resume (its files stay).
    stopped: bool,
    operation_id: OperationId,
    deployment: Option<String>,
    project: Option<String>,
}

/// Sandboxes per page of [`HostShellProvider::list_tagged`]: small, so tests cross pages.
pub const TAGGED_PAGE_SIZE: usize = 2;

/// A [`SandboxProvider`] over host directories, with files through exec. Tests only.
pub struct HostShellProvider {
    caps: ProviderCapabilities,
    sandboxes: Mutex<HashMap<String, HostSandbox>>,
    /// Snapshots: a copy of a sandbox's directory each.
    snapshots: Mutex<HashMap<String, tempfile::TempDir>>,
}

fn unavailable(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable {
        provider: Provider::Local,
        message: e.to_string(),
        retry_after: None,
    }
}

/// Copies the tree `from` into the existing directory `to` (regular files, directories and
/// symbolic links: what commands in a test sandbox make).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

impl Default for HostShellProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl HostShellProvider {
    /// A provider posing as `local`, with separate streams, cwd and env.
    pub fn new() -> Self {
        Self {
            caps: ProviderCapabilities {
                lifecycle: corral_domain::LifecycleCapabilities::default(),
                provider: Provider::Local,
                display_name: "Host shell (tests only)".into(),
                pricing: PricingEvidence {
                    summary: "free".into(),
                    source_url: "https://example.invalid/none".into(),
                    read_on: "2026-11-22".into(),
                    rates: Vec::new(),
                    size: None,
                },
                image_mode: ImageMode::Fixed,
                timeout_mode: TimeoutMode::Seconds,
                timeout_default_seconds: None,
                timeout_maximum_seconds: None,
                timeout_granularity_seconds: Some(1),
                supports_cwd: true,
                supports_env: true,
                output_streams: OutputStreams::Separate,
                supports_persistent_resume: true,
                supports_explicit_stop: true,
                supports_snapshots: true,
                supports_restore: true,
                supports_delete: true,
                images: Vec::new(),
                commands: corral_domain::CommandCapabilities::emulated(),
            },
            sandboxes: Mutex::new(HashMap::new()),
            snapshots: Mutex::new(HashMap::new()),
        }
    }

    fn dir_of(&self, native_id: &str) -> Result<PathBuf> {
        let sandboxes = self.sandboxes.lock().expect("lock");
        let sb = sandboxes
            .get(native_id)
            .ok_or_else(|| ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id}"),
            })?;
        if sb.stopped {
            return Err(ProviderError::InvalidRequest {
                provider: Provider::Local,
                message: format!("sandbox {native_id} is stopped"),
            });
        }
        Ok(sb.dir.path().to_owned())
    }

    /// Sets a sandbox's stopped flag; answers its status.
    fn set_stopped(&self, native_id: &str, stopped: bool) -> Result<ObservedSandbox> {
        let mut sandboxes = self.sandboxes.lock().expect("lock");
        let sb = sandboxes
            .get_mut(native_id)
            .ok_or_else(|| ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id}"),
            })?;
        sb.stopped = stopped;
        Ok(ObservedSandbox {
            native_id: native_id.to_owned(),
            status: status_of(sb),
            operation_id: Some(sb.operation_id),
        })
    }

    /// Records a new sandbox in `dir`.
    fn adopt(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        dir: tempfile::TempDir,
    ) -> ObservedSandbox {
        let native_id = format!("host-{}", OperationId::new());
        self.sandboxes.lock().expect("lock").insert(
            native_id.clone(),
            HostSandbox {
                dir,
                stopped: false,
                operation_id: spec.operation_id,
                deployment: ctx.deployment().map(str::to_owned),
                project: ctx.project().map(str::to_owned),
            },
        );
        ObservedSandbox {
            native_id,
            status: SandboxStatus::Running,
            operation_id: Some(spec.operation_id),
        }
    }
}

fn status_of(sb: &HostSandbox) -> SandboxStatus {
    if sb.stopped {
        SandboxStatus::Stopped
    } else {
        SandboxStatus::Running
    }
}

#[async_trait]
impl SandboxProvider for HostShellProvider {
    fn provider(&self) -> Provider {
        Provider::Local
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let dir = tempfile::tempdir().map_err(unavailable)?;
        Ok(self.adopt(ctx, spec, dir))
    }

    async fn stop(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.set_stopped(native_id, true)
    }

    async fn resume(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.set_stopped(native_id, false)
    }

    async fn snapshot(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        _spec: &corral_provider::SnapshotSpec,
    ) -> Result<corral_provider::ObservedSnapshot> {
        let from = self
            .sandboxes
            .lock()
            .expect("lock")
            .get(native_id)
            .map(|sb| sb.dir.path().to_owned())
            .ok_or_else(|| ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id}"),
            })?;
        let copy = tempfile::tempdir().map_err(unavailable)?;
        copy_tree(&from, copy.path()).map_err(unavailable)?;
        let id = format!("hostsnap-{}", OperationId::new());
        self.snapshots
            .lock()
            .expect("lock")
            .insert(id.clone(), copy);
        Ok(corral_provider::ObservedSnapshot {
            native_id: id,
            status: corral_domain::SnapshotStatus::Ready,
            size_bytes: None,
        })
    }

    async fn get_snapshot(
        &self,
        _ctx: &CallContext,
        snapshot: &str,
    ) -> Result<corral_provider::ObservedSnapshot> {
        if !self.snapshots.lock().expect("lock").contains_key(snapshot) {
            return Err(ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("snapshot {snapshot}"),
            });
        }
        Ok(corral_provider::ObservedSnapshot {
            native_id: snapshot.to_owned(),
            status: corral_domain::SnapshotStatus::Ready,
            size_bytes: None,
        })
    }

    async fn delete_snapshot(&self, _ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.snapshots.lock().expect("lock").remove(snapshot);
        Ok(())
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let dir = tempfile::tempdir().map_err(unavailable)?;
        {
            let snapshots = self.snapshots.lock().expect("lock");
            let from = snapshots
                .get(snapshot)
                .ok_or_else(|| ProviderError::NotFound {
                    provider: Provider::Local,
                    resource: format!("snapshot {snapshot}"),
                })?;
            copy_tree(from.path(), dir.path()).map_err(unavailable)?;
        }
        Ok(self.adopt(ctx, spec, dir))
    }

    async fn get(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let sandboxes = self.sandboxes.lock().expect("lock");
        let sb = sandboxes
            .get(native_id)
            .ok_or_else(|| ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id}"),
            })?;
        Ok(ObservedSandbox {
            native_id: native_id.to_owned(),
            status: status_of(sb),
            operation_id: Some(sb.operation_id),
        })
    }

    async fn delete(&self, _ctx: &CallContext, native_id: &str) -> Result<()> {
        self.sandboxes.lock().expect("lock").remove(native_id);
        Ok(())
    }

    async fn exec(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let dir = self.dir_of(native_id)?;
        let cwd = spec.cwd.as_ref().map_or(dir, PathBuf::from);
        match run_command(
            &spec.command,
            &cwd,
            &spec.env,
            spec.timeout,
            spec.max_output_bytes,
        )
        .await
        {
            Ok(RunOutcome::Finished(out)) => Ok(out),
            Ok(RunOutcome::TimedOut) => Err(ProviderError::CommandTimedOut {
                after: spec.timeout,
            }),
            Err(e) => Err(ProviderError::Unavailable {
                provider: Provider::Local,
                message: e.to_string(),
                retry_after: None,
            }),
        }
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        // A small command limit exercises the helper's chunking.
        files_via_exec::write_file(self, ctx, native_id, path, content, 4096).await
    }

    async fn find_by_operation_id(
        &self,
        _ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        Ok(self
            .sandboxes
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, sb)| sb.operation_id == *operation_id)
            .map(|(id, sb)| ObservedSandbox {
                native_id: id.clone(),
                status: status_of(sb),
                operation_id: Some(sb.operation_id),
            })
            .collect())
    }

    /// Pages of [`TAGGED_PAGE_SIZE`] in native-id order; the token is the last id of the
    /// page before.
    async fn list_tagged(
        &self,
        _ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let sandboxes = self.sandboxes.lock().expect("lock");
        let mut tagged: Vec<_> = sandboxes
            .iter()
            .filter(|(id, sb)| {
                sb.deployment.as_deref() == Some(deployment) && page.is_none_or(|p| id.as_str() > p)
            })
            .collect();
        tagged.sort_by(|a, b| a.0.cmp(b.0));
        let more = tagged.len() > TAGGED_PAGE_SIZE;
        tagged.truncate(TAGGED_PAGE_SIZE);
        Ok(TaggedPage {
            next: more
                .then(|| tagged.last().map(|(id, _)| (*id).clone()))
                .flatten(),
            sandboxes: tagged
                .into_iter()
                .map(|(id, sb)| TaggedSandbox {
                    observed: ObservedSandbox {
                        native_id: id.clone(),
                        status: SandboxStatus::Running,
                        operation_id: Some(sb.operation_id),
                    },
                    project: sb.project.clone(),
                })
                .collect(),
        })
    }
}
