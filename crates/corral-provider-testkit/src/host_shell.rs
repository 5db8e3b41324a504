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
                supports_explicit_stop: false,
                supports_snapshots: false,
                supports_restore: false,
                supports_delete: true,
                images: Vec::new(),
                commands: corral_domain::CommandCapabilities::emulated(),
            },
            sandboxes: Mutex::new(HashMap::new()),
        }
    }

    fn dir_of(&self, native_id: &str) -> Result<PathBuf> {
        self.sandboxes
            .lock()
            .expect("lock")
            .get(native_id)
            .map(|s| s.dir.path().to_owned())
            .ok_or_else(|| ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id}"),
            })
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
        let dir = tempfile::tempdir().map_err(|e| ProviderError::Unavailable {
            provider: Provider::Local,
            message: e.to_string(),
            retry_after: None,
        })?;
        let native_id = format!("host-{}", OperationId::new());
        self.sandboxes.lock().expect("lock").insert(
            native_id.clone(),
            HostSandbox {
                dir,
                operation_id: spec.operation_id,
                deployment: ctx.deployment().map(str::to_owned),
                project: ctx.project().map(str::to_owned),
            },
        );
        Ok(ObservedSandbox {
            native_id,
            status: SandboxStatus::Running,
            operation_id: Some(spec.operation_id),
        })
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
            status: SandboxStatus::Running,
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
                status: SandboxStatus::Running,
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
