//! Get, list, delete, exec and files.

use std::time::Duration;

use corral_domain::{
    CommandResult, ProviderContext, ReadFileInput, ReadFileResult, RunCommandInput, Sandbox,
    SandboxId, SandboxPage, SandboxStatus, WriteFileInput, WriteFileResult, limits,
};
use corral_provider::{ExecSpec, ProviderError};
use corral_registry::{CreateState, SandboxRecord};

use crate::access::recorded_context;
use crate::error::{ServiceError, Stage, map_provider_error, registry_error};
use crate::{Caller, InlineAccess, Service};

/// Slack past the exec deadline for the provider to report the kill before we stop waiting.
const EXEC_SLACK: Duration = Duration::from_secs(10);

/// A get that observes the status already recorded writes it again (to move
/// `statusObservedAt`) only once this much time has passed since the recorded observation:
/// a busy sandbox's gets would otherwise each commit a write that changes nothing but a
/// timestamp. A changed status is always written at once.
const STATUS_REFRESH: Duration = Duration::from_secs(1);

/// Exec and files take only `X-Provider-Workspace` of the inline context (the spec's header
/// table); the rest comes from the context recorded at create time.
pub(crate) fn workspace_only(inline: InlineAccess) -> InlineAccess {
    InlineAccess {
        credential: inline.credential,
        context: ProviderContext {
            workspace: inline.context.workspace,
            ..ProviderContext::default()
        },
    }
}

/// Whether the recorded observation of an unchanged status is old enough to write again.
fn refresh_due(rec: &SandboxRecord, now: corral_domain::Timestamp) -> bool {
    now.signed_duration_since(rec.status_observed_at)
        .to_std()
        .map_or(true, |age| age >= STATUS_REFRESH)
}

/// A registry page's size: the default, or one from 1 to the maximum.
pub(crate) fn page_limit(limit: Option<u32>) -> Result<u32, ServiceError> {
    let limit = limit.unwrap_or(limits::DEFAULT_PAGE_LIMIT);
    if !(1..=limits::MAX_PAGE_LIMIT).contains(&limit) {
        return Err(ServiceError::invalid(format!(
            "`limit` must be from 1 to {}",
            limits::MAX_PAGE_LIMIT
        )));
    }
    Ok(limit)
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::SandboxNotFound {
        message: format!(
            "no sandbox `{}` in this project",
            id.chars().take(80).collect::<String>()
        ),
    }
}

impl Service {
    /// The caller's record for `id` (tombstones included), or `sandbox_not_found`.
    pub(crate) async fn record(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<SandboxRecord, ServiceError> {
        let parsed: SandboxId = id.parse().map_err(|e| ServiceError::InvalidSandboxId {
            message: format!(
                "`{}` is not a sandbox id: {e}",
                id.chars().take(80).collect::<String>()
            ),
        })?;
        self.inner
            .registry
            .sandbox(caller.project_id(), parsed)
            .await
            .map_err(registry_error)?
            .ok_or_else(|| not_found(id))
    }

    /// The native id of a live sandbox, for exec and files.
    pub(crate) fn live_native<'r>(
        &self,
        rec: &'r SandboxRecord,
        id: &str,
    ) -> Result<&'r str, ServiceError> {
        if rec.deleted_at.is_some() || rec.status == SandboxStatus::Expired {
            return Err(not_found(id));
        }
        match (&rec.native_id, rec.create_state) {
            (Some(n), _) => Ok(n),
            (None, CreateState::Failed) => Err(not_found(id)),
            (None, _) => Err(ServiceError::invalid(format!(
                "sandbox `{id}` is still being created; retry when its status is running"
            ))),
        }
    }

    /// A provider said the sandbox is gone: remember it as `expired`.
    async fn mark_expired(&self, rec: &SandboxRecord) -> Result<SandboxRecord, ServiceError> {
        let now = self.inner.registry.database().now();
        self.inner
            .registry
            .record_status(rec.project_id, rec.id, SandboxStatus::Expired, now)
            .await
            .map_err(registry_error)
    }

    /// `GET /v1/sandboxes/{id}`: asks the provider and records what it saw. A tombstone is
    /// returned without calling the provider.
    pub async fn get(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
    ) -> Result<Sandbox, ServiceError> {
        let rec = self.record(caller, id).await?;
        let native = match (&rec.native_id, rec.deleted_at) {
            (_, Some(_)) | (None, _) => return Ok(rec.to_sandbox()),
            _ if rec.status == SandboxStatus::Expired => return Ok(rec.to_sandbox()),
            (Some(n), None) => n.clone(),
        };
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let access = self
            .access(
                caller,
                p,
                inline,
                Some(&recorded_context(&rec.metadata)),
                "get",
            )
            .await?;
        let ctx = access
            .ctx
            .with_timeout(self.inner.config.provider_call_timeout);
        let seen = provider.get(&ctx, &native).await;
        let now = self.inner.registry.database().now();
        let updated = match seen {
            Ok(obs) if obs.status == rec.status && !refresh_due(&rec, now) => rec,
            Ok(obs) => self
                .inner
                .registry
                .record_status(rec.project_id, rec.id, obs.status, now)
                .await
                .map_err(registry_error)?,
            Err(ProviderError::NotFound { .. }) => self.mark_expired(&rec).await?,
            Err(e) => return Err(map_provider_error(e, Stage::Other, None)),
        };
        Ok(updated.to_sandbox())
    }

    /// `GET /v1/sandboxes`: one page of the registry; never calls a provider.
    pub async fn list(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SandboxPage, ServiceError> {
        let limit = page_limit(limit)?;
        self.inner
            .registry
            .list_sandbox_page(caller.project_id(), limit, cursor)
            .await
            .map_err(registry_error)
    }

    /// `DELETE /v1/sandboxes/{id}`: deletes at the provider, then records the tombstone.
    /// Deleting a tombstone returns it unchanged.
    pub async fn delete(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
    ) -> Result<Sandbox, ServiceError> {
        let rec = self.record(caller, id).await?;
        if rec.deleted_at.is_some() {
            return Ok(rec.to_sandbox());
        }
        let p = rec.provider();
        let needs_provider = rec.native_id.is_some() || rec.create_state != CreateState::Failed;
        if needs_provider {
            let provider = self.provider(p)?.clone();
            let access = self
                .access(
                    caller,
                    p,
                    inline,
                    Some(&recorded_context(&rec.metadata)),
                    "delete",
                )
                .await?;
            let ctx = access
                .ctx
                .with_timeout(self.inner.config.provider_call_timeout);
            let natives: Vec<String> = match &rec.native_id {
                Some(n) => vec![n.clone()],
                // An unconfirmed create: delete whatever the operation id finds.
                None => {
                    let found = provider
                        .find_by_operation_id(&ctx, &rec.operation_id())
                        .await;
                    found
                        .map_err(|e| map_provider_error(e, Stage::Other, None))?
                        .into_iter()
                        .map(|o| o.native_id)
                        .collect()
                }
            };
            // Its commands end with it (their records stay readable with the tombstone).
            self.end_commands_of(caller, &rec, Some((provider.as_ref(), &ctx)))
                .await?;
            for native in &natives {
                // Gone already is fine: `Contracted` answers `Ok` for an unknown sandbox.
                provider
                    .delete(&ctx, native)
                    .await
                    .map_err(|e| map_provider_error(e, Stage::Other, None))?;
            }
            // Settle an unconfirmed create before the tombstone, so the reconciler stops
            // looking for it (it only looks at pending and unknown creates, and a tombstone
            // can no longer change state) and a same-key retry replays the tombstone.
            if rec.create_state != CreateState::Created {
                let registry = &self.inner.registry;
                let settled = match natives.first() {
                    Some(native) => {
                        registry
                            .complete_create(rec.project_id, rec.id, native, SandboxStatus::Deleted)
                            .await
                    }
                    None => {
                        registry
                            .set_create_state(rec.project_id, rec.id, CreateState::Failed)
                            .await
                    }
                };
                settled.map_err(registry_error)?;
            }
        }
        let tomb = self
            .inner
            .registry
            .tombstone(rec.project_id, rec.id)
            .await
            .map_err(registry_error)?;
        Ok(tomb.to_sandbox())
    }

    /// Maps a failure of exec or files; a sandbox the provider lost is recorded `expired`.
    async fn call_failed(&self, rec: &SandboxRecord, id: &str, e: ProviderError) -> ServiceError {
        if let ProviderError::NotFound { .. } = e {
            if let Err(err) = self.mark_expired(rec).await {
                return err;
            }
            return not_found(id);
        }
        map_provider_error(e, Stage::Other, None)
    }

    /// `POST /v1/sandboxes/{id}/exec`. Admitted under the caps on commands running at once
    /// ([`crate::limiter::ExecConcurrency`]) once the request is known to be valid, before
    /// any provider call.
    pub async fn exec(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
        input: RunCommandInput,
    ) -> Result<CommandResult, ServiceError> {
        let rec = self.record(caller, id).await?;
        let rec = self.ready_for_work(caller, rec, id).await?;
        let native = self.live_native(&rec, id)?.to_owned();
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        input.validate(provider.capabilities())?;
        // Held until this call ends, however it ends (a dropped future included).
        let _running = self.admit_exec(caller)?;
        let access = self
            .access(
                caller,
                p,
                workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                "exec",
            )
            .await?;
        let deadline = self.inner.config.exec_deadline;
        let ctx = access.ctx.with_timeout(deadline + EXEC_SLACK);
        let spec = ExecSpec {
            command: input.command,
            cwd: input.cwd,
            env: input.env.unwrap_or_default(),
            timeout: deadline,
            max_output_bytes: limits::MAX_OUTPUT_BYTES_PER_STREAM,
        };
        let out = tokio::time::timeout(deadline + EXEC_SLACK, provider.exec(&ctx, &native, &spec))
            .await
            .unwrap_or(Err(ProviderError::CommandTimedOut { after: deadline }));
        let out = match out {
            Ok(out) => out,
            Err(e) => return Err(self.call_failed(&rec, id, e).await),
        };
        Ok(CommandResult {
            sandbox_id: rec.id,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            exit_code: out.exit_code,
            truncated: out.truncated,
        })
    }

    /// `POST /v1/sandboxes/{id}/files/read`.
    pub async fn read_file(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
        input: ReadFileInput,
    ) -> Result<ReadFileResult, ServiceError> {
        input.validate()?;
        let rec = self.record(caller, id).await?;
        let rec = self.ready_for_work(caller, rec, id).await?;
        let native = self.live_native(&rec, id)?.to_owned();
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let access = self
            .access(
                caller,
                p,
                workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                "read_file",
            )
            .await?;
        let ctx = access
            .ctx
            .with_timeout(self.inner.config.provider_call_timeout);
        let bytes = provider
            .read_file(&ctx, &native, &input.path, limits::MAX_READ_BYTES)
            .await;
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => return Err(self.call_failed(&rec, id, e).await),
        };
        let encoding = input.encoding.unwrap_or_default();
        ReadFileResult::encode(rec.id, input.path.clone(), bytes, encoding)
            .ok_or(ServiceError::FileNotUtf8 { path: input.path })
    }

    /// `POST /v1/sandboxes/{id}/files/write`.
    pub async fn write_file(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
        input: WriteFileInput,
    ) -> Result<WriteFileResult, ServiceError> {
        let content = input.decode()?;
        let rec = self.record(caller, id).await?;
        let rec = self.ready_for_work(caller, rec, id).await?;
        let native = self.live_native(&rec, id)?.to_owned();
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let access = self
            .access(
                caller,
                p,
                workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                "write_file",
            )
            .await?;
        let ctx = access
            .ctx
            .with_timeout(self.inner.config.provider_call_timeout);
        let done = provider
            .write_file(&ctx, &native, &input.path, &content)
            .await;
        if let Err(e) = done {
            return Err(self.call_failed(&rec, id, e).await);
        }
        Ok(WriteFileResult {
            sandbox_id: rec.id,
            path: input.path,
            bytes_written: content.len() as u64,
        })
    }
}
