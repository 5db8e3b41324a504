//! The sandbox lifecycle: stop and resume (by request, by `autoResume` on use, and by the
//! idle sweep), snapshots (made, followed while the provider works, listed from the registry,
//! deleted) and forks (one snapshot restored into each copy). Restores themselves are creates
//! (`create.rs`), so a lost answer is reconciled by operation id like any create.
//!
//! Every change of status is written with its reason (`requested`, `idle`, `auto_resume`) in
//! the registry's transaction that appends its events (`sandbox.stopped`, `sandbox.resumed`,
//! `snapshot.created`, `snapshot.deleted`).

use std::sync::Arc;
use std::time::Duration;

use corral_domain::{
    CreateSandboxRequest, CreateSnapshotInput, ForkInput, ForkResult, OperationId, Sandbox,
    SandboxStatus, Snapshot, SnapshotId, SnapshotPage, SnapshotStatus, event_reason,
};
use corral_idempotency::{ClaimOutcome, Fingerprint, IdempotencyKey};
use corral_provider::{CallContext, ProviderError, SandboxProvider, SnapshotSpec};
use corral_registry::{NewSnapshot, SandboxRecord, SnapshotRecord};

use crate::access::recorded_context;
use crate::error::{ServiceError, Stage, idempotency_error, map_provider_error, registry_error};
use crate::{Caller, Created, InlineAccess, Service};

/// How long a follower polls a provider's asynchronous transition (a stop, a resume, a
/// snapshot) before leaving it to the next observation.
const FOLLOW_FOR: Duration = Duration::from_secs(10 * 60);
/// The first pause between two polls; it doubles up to [`FOLLOW_PAUSE_MAX`].
const FOLLOW_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two polls.
const FOLLOW_PAUSE_MAX: Duration = Duration::from_secs(5);
/// How long a call on a stopped `autoResume` sandbox waits for it to run again.
const AUTO_RESUME_WAIT: Duration = Duration::from_secs(120);
/// How long a fork waits for its snapshot to become ready before restoring it.
const FORK_SNAPSHOT_WAIT: Duration = Duration::from_secs(15 * 60);
/// How many idle sandboxes one sweep stops at most (the next sweep takes the rest).
const IDLE_BATCH: u32 = 100;

fn snapshot_not_found(id: &str) -> ServiceError {
    ServiceError::SnapshotNotFound {
        message: format!(
            "no snapshot `{}` in this project",
            id.chars().take(80).collect::<String>()
        ),
    }
}

fn stopped(id: &str) -> ServiceError {
    ServiceError::SandboxStopped {
        message: format!(
            "sandbox `{id}` is stopped: resume it first (POST /v1/sandboxes/{id}/resume), or create sandboxes with `autoResume: true`"
        ),
    }
}

fn unsupported(provider: corral_domain::Provider, what: &str, flag: &str) -> ServiceError {
    ServiceError::CapabilityUnsupported {
        message: format!(
            "provider `{provider}` cannot {what} ({flag} is false in its capabilities)"
        ),
    }
}

/// How an idempotent piece of work failed: whether it may have made something a retry must
/// not make again (then its key's outcome stays unknown instead of being freed).
struct WorkFailed {
    error: ServiceError,
    made_something: bool,
}

impl From<ServiceError> for WorkFailed {
    fn from(error: ServiceError) -> Self {
        Self {
            error,
            made_something: false,
        }
    }
}

impl Service {
    /// The provider and call context for work on `rec` in the background or on request.
    async fn lifecycle_call(
        &self,
        caller: &Caller,
        rec: &SandboxRecord,
        inline: InlineAccess,
        operation: &str,
    ) -> Result<(Arc<dyn SandboxProvider>, CallContext), ServiceError> {
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        let access = self
            .access(
                caller,
                p,
                crate::sandboxes::workspace_only(inline),
                Some(&recorded_context(&rec.metadata)),
                operation,
            )
            .await?;
        let ctx = access
            .ctx
            .with_timeout(self.inner.config.provider_call_timeout);
        Ok((provider, ctx))
    }

    /// Records what the provider answered with `reason`; a status still on its way
    /// (`stopping`, `starting`) is followed in the background until it settles.
    async fn settle(
        &self,
        rec: &SandboxRecord,
        provider: Arc<dyn SandboxProvider>,
        ctx: CallContext,
        seen: SandboxStatus,
        reason: &'static str,
    ) -> Result<SandboxRecord, ServiceError> {
        let now = self.inner.registry.database().now();
        let updated = self
            .inner
            .registry
            .record_status_for(rec.project_id, rec.id, seen, now, reason)
            .await
            .map_err(registry_error)?;
        if matches!(seen, SandboxStatus::Stopping | SandboxStatus::Starting) {
            let this = self.clone();
            let rec = updated.clone();
            tokio::spawn(async move {
                this.follow_status(&rec, provider.as_ref(), &ctx, reason)
                    .await;
            });
        }
        Ok(updated)
    }

    /// Polls `get` until the sandbox leaves its transitional status, then records the new
    /// one with `reason`. Gives up after [`FOLLOW_FOR`] (the next get records it).
    async fn follow_status(
        &self,
        rec: &SandboxRecord,
        provider: &dyn SandboxProvider,
        ctx: &CallContext,
        reason: &'static str,
    ) -> Option<SandboxStatus> {
        let native = rec.native_id.as_deref()?;
        let start = tokio::time::Instant::now();
        let mut pause = FOLLOW_PAUSE;
        while start.elapsed() < FOLLOW_FOR {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(FOLLOW_PAUSE_MAX);
            let ctx = ctx
                .clone()
                .with_timeout(self.inner.config.provider_call_timeout);
            let seen = match provider.get(&ctx, native).await {
                Ok(seen) => seen.status,
                Err(e) => {
                    tracing::debug!(sandbox_id = %rec.id, error = %e, "lifecycle: a poll failed");
                    continue;
                }
            };
            if seen != rec.status {
                let now = self.inner.registry.database().now();
                if let Err(e) = self
                    .inner
                    .registry
                    .record_status_for(rec.project_id, rec.id, seen, now, reason)
                    .await
                {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "lifecycle: cannot record a settled status");
                }
            }
            if !matches!(seen, SandboxStatus::Stopping | SandboxStatus::Starting) {
                return Some(seen);
            }
        }
        None
    }

    /// `POST /v1/sandboxes/{id}/stop`. Idempotent: a stopped sandbox is answered as it is.
    /// Its running commands end with it (their records stay readable).
    pub async fn stop(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
    ) -> Result<Sandbox, ServiceError> {
        let rec = self.record(caller, id).await?;
        let native = self.live_native(&rec, id)?.to_owned();
        let p = rec.provider();
        if !self.provider(p)?.capabilities().supports_explicit_stop {
            return Err(unsupported(p, "stop a sandbox", "supportsExplicitStop"));
        }
        if rec.status == SandboxStatus::Stopped {
            return Ok(rec.to_sandbox());
        }
        let (provider, ctx) = self.lifecycle_call(caller, &rec, inline, "stop").await?;
        self.stop_record(
            caller,
            &rec,
            &native,
            provider,
            ctx,
            event_reason::REQUESTED,
        )
        .await
        .map(|r| r.to_sandbox())
    }

    async fn stop_record(
        &self,
        caller: &Caller,
        rec: &SandboxRecord,
        native: &str,
        provider: Arc<dyn SandboxProvider>,
        ctx: CallContext,
        reason: &'static str,
    ) -> Result<SandboxRecord, ServiceError> {
        self.end_commands_of(caller, rec, Some((provider.as_ref(), &ctx)))
            .await?;
        let seen = match provider.stop(&ctx, native).await {
            Ok(seen) => seen.status,
            Err(e) => return Err(self.lifecycle_failed(rec, e).await),
        };
        self.settle(rec, provider, ctx, seen, reason).await
    }

    /// `POST /v1/sandboxes/{id}/resume`. Idempotent: a running sandbox is answered as it is.
    pub async fn resume(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
    ) -> Result<Sandbox, ServiceError> {
        let rec = self.record(caller, id).await?;
        let native = self.live_native(&rec, id)?.to_owned();
        let p = rec.provider();
        if !self.provider(p)?.capabilities().supports_explicit_stop {
            return Err(unsupported(p, "resume a sandbox", "supportsExplicitStop"));
        }
        if rec.status == SandboxStatus::Running {
            return Ok(rec.to_sandbox());
        }
        let (provider, ctx) = self.lifecycle_call(caller, &rec, inline, "resume").await?;
        self.resume_record(&rec, &native, provider, ctx, event_reason::REQUESTED)
            .await
            .map(|r| r.to_sandbox())
    }

    async fn resume_record(
        &self,
        rec: &SandboxRecord,
        native: &str,
        provider: Arc<dyn SandboxProvider>,
        ctx: CallContext,
        reason: &'static str,
    ) -> Result<SandboxRecord, ServiceError> {
        let seen = match provider.resume(&ctx, native).await {
            Ok(seen) => seen.status,
            Err(e) => return Err(self.lifecycle_failed(rec, e).await),
        };
        self.settle(rec, provider, ctx, seen, reason).await
    }

    /// A lifecycle call failed: a sandbox the provider lost is recorded `expired`.
    async fn lifecycle_failed(&self, rec: &SandboxRecord, e: ProviderError) -> ServiceError {
        if let ProviderError::NotFound { .. } = e {
            let now = self.inner.registry.database().now();
            if let Err(err) = self
                .inner
                .registry
                .record_status(rec.project_id, rec.id, SandboxStatus::Expired, now)
                .await
            {
                return registry_error(err);
            }
            return ServiceError::SandboxNotFound {
                message: "the provider no longer has this sandbox".into(),
            };
        }
        map_provider_error(e, Stage::Other, None)
    }

    /// Before a command, exec or file call: a stopped sandbox is refused (`sandbox_stopped`)
    /// unless it was made with `autoResume`, which resumes it and waits until it runs. The
    /// call counts as activity for the idle stop.
    pub(crate) async fn ready_for_work(
        &self,
        caller: &Caller,
        rec: SandboxRecord,
        id: &str,
    ) -> Result<SandboxRecord, ServiceError> {
        let rec = if rec.status.is_stopped() || rec.status == SandboxStatus::Starting {
            if !rec.auto_resume {
                return Err(stopped(id));
            }
            let native = self.live_native(&rec, id)?.to_owned();
            let (provider, ctx) = self
                .lifecycle_call(caller, &rec, InlineAccess::default(), "resume")
                .await?;
            let resumed = if rec.status == SandboxStatus::Starting {
                rec.clone()
            } else {
                self.resume_record(
                    &rec,
                    &native,
                    provider.clone(),
                    ctx.clone(),
                    event_reason::AUTO_RESUME,
                )
                .await?
            };
            if resumed.status != SandboxStatus::Running {
                let settled = tokio::time::timeout(
                    AUTO_RESUME_WAIT,
                    self.follow_status(
                        &resumed,
                        provider.as_ref(),
                        &ctx,
                        event_reason::AUTO_RESUME,
                    ),
                )
                .await;
                if settled.ok().flatten() != Some(SandboxStatus::Running) {
                    return Err(ServiceError::ProviderUnavailable {
                        message: format!("sandbox `{id}` is resuming and not running yet"),
                        retry_after: Some(5),
                    });
                }
            }
            self.record(caller, id).await?
        } else {
            rec
        };
        if rec.idle_stop_seconds.is_some() {
            let now = self.inner.registry.database().now();
            if let Err(e) = self
                .inner
                .registry
                .touch_activity(rec.project_id, rec.id, now)
                .await
            {
                tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot record a sandbox's activity");
            }
        }
        Ok(rec)
    }

    /// One pass of the idle stop: every running sandbox whose `idleStopSeconds` passed
    /// without activity is stopped (reason `idle`). Returns how many were stopped.
    pub async fn idle_stop_once(&self) -> usize {
        let now = self.inner.registry.database().now();
        let idle = match self.inner.registry.idle_sandboxes(now, IDLE_BATCH).await {
            Ok(idle) => idle,
            Err(e) => {
                tracing::warn!(error = %e, "idle stop: cannot read the registry");
                return 0;
            }
        };
        let mut stopped = 0;
        for rec in idle {
            let Some(native) = rec.native_id.clone() else {
                continue;
            };
            // A command still running is activity: the sandbox is busy, not idle.
            let live = self
                .inner
                .journal
                .live_in_sandbox(rec.project_id, rec.id)
                .await;
            if live.as_ref().map_or(true, |l| !l.is_empty()) {
                if let Err(e) = self
                    .inner
                    .registry
                    .touch_activity(rec.project_id, rec.id, now)
                    .await
                {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "idle stop: cannot record a busy sandbox's activity");
                }
                continue;
            }
            let caller = Caller::trusted(rec.project_id);
            // Only a stored profile (or no credential at all) can be used in the background.
            let call = self
                .lifecycle_call(&caller, &rec, InlineAccess::default(), "stop")
                .await;
            let (provider, ctx) = match call {
                Ok(call) => call,
                Err(e) => {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "idle stop: no access to the provider");
                    continue;
                }
            };
            match self
                .stop_record(&caller, &rec, &native, provider, ctx, event_reason::IDLE)
                .await
            {
                Ok(_) => stopped += 1,
                Err(e) => {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "idle stop: the stop failed")
                }
            }
        }
        stopped
    }

    /// Every `interval` until the runtime shuts down: [`Service::idle_stop_once`] and
    /// [`Service::settle_snapshots_once`] (snapshots whose follower a restart ended).
    pub fn spawn_lifecycle_sweeper(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let stopped = this.idle_stop_once().await;
                let settled = this.settle_snapshots_once().await;
                if stopped > 0 || settled > 0 {
                    tracing::info!(stopped, settled, "lifecycle sweep");
                }
            }
        })
    }

    /// The caller's snapshot record (tombstones included), or `snapshot_not_found`.
    async fn snapshot_record(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<SnapshotRecord, ServiceError> {
        let parsed: SnapshotId = id.parse().map_err(|e| ServiceError::InvalidRequest {
            message: format!(
                "`{}` is not a snapshot id: {e}",
                id.chars().take(80).collect::<String>()
            ),
        })?;
        self.inner
            .registry
            .snapshot(caller.project_id(), parsed)
            .await
            .map_err(registry_error)?
            .ok_or_else(|| snapshot_not_found(id))
    }

    /// `POST /v1/sandboxes/{id}/snapshots`: 201 with the snapshot, `creating` while the
    /// provider works (followed in the background) or already `ready`. With an
    /// `Idempotency-Key`, the same request replays the stored answer.
    pub async fn create_snapshot(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
        idempotency_key: Option<&str>,
        input: CreateSnapshotInput,
    ) -> Result<Created, ServiceError> {
        input.validate()?;
        let rec = self.record(caller, id).await?;
        self.live_native(&rec, id)?;
        let p = rec.provider();
        if !self.provider(p)?.capabilities().supports_snapshots {
            return Err(unsupported(p, "snapshot a sandbox", "supportsSnapshots"));
        }
        let route = format!("/v1/sandboxes/{}/snapshots", rec.id);
        let body = serde_json::to_value(&input)
            .map_err(|_| ServiceError::internal("cannot serialize the request"))?;
        self.idempotent(caller, idempotency_key, &route, &body, || async {
            let (provider, ctx) = self
                .lifecycle_call(caller, &rec, inline, "snapshot")
                .await?;
            let snap = self
                .take_snapshot(&rec, provider, ctx, input.name.clone())
                .await?;
            serde_json::to_string(&snap.to_snapshot())
                .map_err(|_| ServiceError::internal("cannot serialize the snapshot").into())
        })
        .await
    }

    /// Records a snapshot, asks the provider for it and records the answer; a snapshot still
    /// `creating` is followed in the background.
    async fn take_snapshot(
        &self,
        rec: &SandboxRecord,
        provider: Arc<dyn SandboxProvider>,
        ctx: CallContext,
        name: Option<String>,
    ) -> Result<SnapshotRecord, ServiceError> {
        let native = rec
            .native_id
            .clone()
            .ok_or_else(|| ServiceError::invalid("the sandbox is still being created"))?;
        let registry = &self.inner.registry;
        let id = SnapshotId::new(rec.provider());
        let made = registry
            .insert_snapshot(NewSnapshot {
                id,
                project_id: rec.project_id,
                sandbox_id: rec.id,
                name: name.clone(),
            })
            .await
            .map_err(registry_error)?;
        let spec = SnapshotSpec {
            snapshot_id: id,
            name,
        };
        let seen = match provider.snapshot(&ctx, &native, &spec).await {
            Ok(seen) => seen,
            Err(e) => {
                let err = map_provider_error(e, Stage::Other, None);
                if let Err(e) = registry
                    .fail_snapshot(made.project_id, made.id, &err.to_string())
                    .await
                {
                    tracing::warn!(snapshot_id = %made.id, error = %e, "cannot record a failed snapshot");
                }
                return Err(err);
            }
        };
        let done = registry
            .complete_snapshot(
                made.project_id,
                made.id,
                &seen.native_id,
                seen.status,
                seen.size_bytes,
            )
            .await
            .map_err(registry_error)?;
        if done.status == SnapshotStatus::Creating {
            let this = self.clone();
            let rec = done.clone();
            tokio::spawn(async move {
                this.follow_snapshot(&rec, provider.as_ref(), &ctx).await;
            });
        }
        Ok(done)
    }

    /// Polls `get_snapshot` until the snapshot is no longer `creating`, and records it.
    async fn follow_snapshot(
        &self,
        rec: &SnapshotRecord,
        provider: &dyn SandboxProvider,
        ctx: &CallContext,
    ) -> Option<SnapshotRecord> {
        let native = rec.native_id.as_deref()?;
        let start = tokio::time::Instant::now();
        let mut pause = FOLLOW_PAUSE;
        while start.elapsed() < FOLLOW_FOR {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(FOLLOW_PAUSE_MAX);
            if let Some(done) = self.observe_snapshot(rec, native, provider, ctx).await {
                return Some(done);
            }
        }
        None
    }

    /// One observation of a `creating` snapshot; `Some` once it settled.
    async fn observe_snapshot(
        &self,
        rec: &SnapshotRecord,
        native: &str,
        provider: &dyn SandboxProvider,
        ctx: &CallContext,
    ) -> Option<SnapshotRecord> {
        let ctx = ctx
            .clone()
            .with_timeout(self.inner.config.provider_call_timeout);
        let registry = &self.inner.registry;
        let recorded = match provider.get_snapshot(&ctx, native).await {
            Ok(seen) if seen.status == SnapshotStatus::Creating => return None,
            Ok(seen) => {
                registry
                    .complete_snapshot(rec.project_id, rec.id, native, seen.status, seen.size_bytes)
                    .await
            }
            Err(ProviderError::NotFound { .. }) => {
                registry
                    .fail_snapshot(
                        rec.project_id,
                        rec.id,
                        "the provider no longer has this snapshot",
                    )
                    .await
            }
            Err(e) => {
                tracing::debug!(snapshot_id = %rec.id, error = %e, "snapshot: a poll failed");
                return None;
            }
        };
        match recorded {
            Ok(done) => Some(done),
            Err(e) => {
                tracing::warn!(snapshot_id = %rec.id, error = %e, "snapshot: cannot record its status");
                None
            }
        }
    }

    /// One pass over the snapshots still `creating` (after a restart, their followers are
    /// gone): each is observed once; one whose provider call never answered (no native id)
    /// past `reconcile_grace` is recorded failed.
    pub async fn settle_snapshots_once(&self) -> usize {
        let pending = match self.inner.registry.pending_snapshots(IDLE_BATCH).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "snapshots: cannot read the registry");
                return 0;
            }
        };
        let grace =
            chrono::Duration::from_std(self.inner.config.reconcile_grace).unwrap_or_default();
        let now = self.inner.registry.database().now();
        let mut settled = 0;
        for snap in pending {
            let Some(native) = snap.native_id.clone() else {
                if snap.updated_at + grace < now {
                    let failed = self
                        .inner
                        .registry
                        .fail_snapshot(
                            snap.project_id,
                            snap.id,
                            "the snapshot was interrupted before the provider answered",
                        )
                        .await;
                    if failed.is_ok() {
                        settled += 1;
                    }
                }
                continue;
            };
            let caller = Caller::trusted(snap.project_id);
            let Ok(Some(rec)) = self
                .inner
                .registry
                .sandbox(snap.project_id, snap.sandbox_id)
                .await
            else {
                continue;
            };
            let Ok((provider, ctx)) = self
                .lifecycle_call(&caller, &rec, InlineAccess::default(), "snapshot")
                .await
            else {
                continue;
            };
            if self
                .observe_snapshot(&snap, &native, provider.as_ref(), &ctx)
                .await
                .is_some()
            {
                settled += 1;
            }
        }
        settled
    }

    /// `GET /v1/snapshots/{id}`: from the registry, never calling a provider.
    pub async fn get_snapshot(&self, caller: &Caller, id: &str) -> Result<Snapshot, ServiceError> {
        Ok(self.snapshot_record(caller, id).await?.to_snapshot())
    }

    /// `GET /v1/snapshots`: one page of the project's snapshot registry, newest first,
    /// tombstones included; never calls a provider.
    pub async fn list_snapshots(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SnapshotPage, ServiceError> {
        let limit = crate::sandboxes::page_limit(limit)?;
        let page = self
            .inner
            .registry
            .list_snapshots(caller.project_id(), limit, cursor)
            .await
            .map_err(registry_error)?;
        Ok(page.into_page())
    }

    /// `DELETE /v1/snapshots/{id}`: deletes it at the provider, then records the tombstone.
    /// Deleting a tombstone returns it unchanged.
    pub async fn delete_snapshot(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
    ) -> Result<Snapshot, ServiceError> {
        let snap = self.snapshot_record(caller, id).await?;
        if snap.deleted_at.is_some() {
            return Ok(snap.to_snapshot());
        }
        if let Some(native) = &snap.native_id {
            let p = snap.id.provider();
            let provider = self.provider(p)?.clone();
            // The sandbox's recorded context (workspace, team) is where its snapshot lives.
            let recorded = self
                .inner
                .registry
                .sandbox(snap.project_id, snap.sandbox_id)
                .await
                .map_err(registry_error)?
                .map(|rec| recorded_context(&rec.metadata));
            let access = self
                .access(caller, p, inline, recorded.as_ref(), "delete")
                .await?;
            let ctx = access
                .ctx
                .with_timeout(self.inner.config.provider_call_timeout);
            // Gone already is fine: `Contracted` answers `Ok` for an unknown snapshot.
            provider
                .delete_snapshot(&ctx, native)
                .await
                .map_err(|e| map_provider_error(e, Stage::Other, None))?;
        }
        let tomb = self
            .inner
            .registry
            .tombstone_snapshot(snap.project_id, snap.id)
            .await
            .map_err(registry_error)?;
        Ok(tomb.to_snapshot())
    }

    /// The native id of the `ready` snapshot a restore names, checked before any provider
    /// call: it must be the caller's, on the request's provider, and ready.
    pub(crate) async fn restorable(
        &self,
        caller: &Caller,
        snapshot: SnapshotId,
    ) -> Result<String, ServiceError> {
        let snap = self.snapshot_record(caller, &snapshot.to_string()).await?;
        match (snap.status, snap.native_id) {
            (SnapshotStatus::Ready, Some(native)) => Ok(native),
            (status, _) => Err(ServiceError::ProviderInvalidRequest {
                message: format!(
                    "snapshot `{snapshot}` is {status}: only a ready snapshot can be restored"
                ),
            }),
        }
    }

    /// `POST /v1/sandboxes/{id}/fork`: snapshots the sandbox, then restores that snapshot
    /// into `count` new sandboxes (each a full registry record). 201 with the snapshot's id
    /// and the copies. With an `Idempotency-Key`, a retry replays the answer and never makes
    /// extra copies; a fork that failed after making copies keeps its key unknown (those
    /// copies stay listed, with the fork's snapshot as their `snapshotId`).
    pub async fn fork(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        id: &str,
        idempotency_key: Option<&str>,
        input: ForkInput,
    ) -> Result<Created, ServiceError> {
        let count = input.count()?;
        let rec = self.record(caller, id).await?;
        self.live_native(&rec, id)?;
        let p = rec.provider();
        let provider = self.provider(p)?.clone();
        if !provider.capabilities().supports_fork() {
            return Err(unsupported(
                p,
                "fork a sandbox",
                "supportsSnapshots or supportsRestore",
            ));
        }
        let route = format!("/v1/sandboxes/{}/fork", rec.id);
        let body = serde_json::to_value(&input)
            .map_err(|_| ServiceError::internal("cannot serialize the request"))?;
        self.idempotent(caller, idempotency_key, &route, &body, || async {
            let (provider, ctx) = self
                .lifecycle_call(caller, &rec, inline.clone(), "snapshot")
                .await?;
            let snap = self
                .take_snapshot(
                    &rec,
                    provider.clone(),
                    ctx.clone(),
                    Some(format!("fork of {}", rec.id)),
                )
                .await?;
            let snap = if snap.status == SnapshotStatus::Creating {
                tokio::time::timeout(
                    FORK_SNAPSHOT_WAIT,
                    self.follow_snapshot(&snap, provider.as_ref(), &ctx),
                )
                .await
                .ok()
                .flatten()
                .unwrap_or(snap)
            } else {
                snap
            };
            if snap.status != SnapshotStatus::Ready {
                return Err(WorkFailed::from(ServiceError::ProviderFailed {
                    message: format!(
                        "the fork's snapshot `{}` is {}: no copy was made",
                        snap.id, snap.status
                    ),
                }));
            }
            let request = CreateSandboxRequest::standard(p, None, None)
                .restoring(snap.id)
                .with_lifecycle(rec.auto_resume, rec.idle_stop_seconds);
            let mut copies = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let made = self
                    .create_restoring(caller, inline.clone(), request.clone())
                    .await;
                match made {
                    Ok(sandbox) => copies.push(sandbox),
                    Err(e) if copies.is_empty() => return Err(e.into()),
                    // The copies made stay listed; the failure keeps its own code (a full
                    // quota is `rate_limited`, not a server error), and the key stays
                    // unknown so that a retry makes no extra copies.
                    Err(e) => {
                        let made: Vec<String> =
                            copies.iter().map(|s: &Sandbox| s.id.to_string()).collect();
                        tracing::warn!(sandbox_id = %rec.id, made = ?made, error = %e, "a fork stopped part-way");
                        return Err(WorkFailed {
                            error: e,
                            made_something: true,
                        });
                    }
                }
            }
            let result = ForkResult {
                sandbox_id: rec.id,
                snapshot_id: snap.id,
                sandboxes: copies,
            };
            serde_json::to_string(&result)
                .map_err(|_| ServiceError::internal("cannot serialize the fork").into())
        })
        .await
    }

    /// Runs `work` once per `Idempotency-Key` (when given): a replay answers the stored body,
    /// a key in use by another request conflicts, a key still running answers in progress.
    /// A failure frees the key, unless the work may have made something (then its outcome
    /// stays unknown: a retry must not make it twice).
    async fn idempotent<F, Fut>(
        &self,
        caller: &Caller,
        key: Option<&str>,
        route: &str,
        body: &serde_json::Value,
        work: F,
    ) -> Result<Created, ServiceError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<String, WorkFailed>>,
    {
        let key = key
            .map(IdempotencyKey::parse)
            .transpose()
            .map_err(idempotency_error)?;
        let Some(key) = key else {
            let body = work().await.map_err(|f| f.error)?;
            return Ok(Created {
                status: 201,
                body,
                replayed: false,
            });
        };
        let fingerprint = Fingerprint::compute("POST", route, Some(body), &[]);
        let store = &self.inner.idempotency;
        let claim = match store
            .claim(caller.project_id(), &key, &fingerprint)
            .await
            .map_err(idempotency_error)?
        {
            ClaimOutcome::Claimed(claim) => claim,
            ClaimOutcome::Replay(stored) => {
                return Ok(Created {
                    status: 200,
                    body: String::from_utf8_lossy(&stored.body).into_owned(),
                    replayed: true,
                });
            }
            ClaimOutcome::InProgress { retry_after } => {
                return Err(ServiceError::IdempotencyInProgress {
                    retry_after: retry_after.as_secs().max(1),
                });
            }
            ClaimOutcome::Conflict => return Err(ServiceError::IdempotencyConflict),
            ClaimOutcome::Unknown { operation_id } => {
                return Err(ServiceError::IdempotencyOutcomeUnknown { operation_id });
            }
            // Its owner died mid-way: what it made is not known here, so it is not redone.
            ClaimOutcome::NeedsReconciliation(claim) => {
                let op = claim.operation_id.unwrap_or_default();
                let _ = store.mark_unknown(&claim, op).await;
                return Err(ServiceError::IdempotencyOutcomeUnknown {
                    operation_id: claim.operation_id,
                });
            }
        };
        // An operation id marks the claim as one whose work may have started (see above).
        let op = OperationId::new();
        let mut claim = claim;
        if let Err(e) = store.attach_operation(&mut claim, op).await {
            let _ = store.release(&claim).await;
            return Err(idempotency_error(e));
        }
        match work().await {
            Ok(body) => {
                if let Err(e) = store.complete(&claim, 201, body.as_bytes()).await {
                    tracing::warn!(error = %e, "cannot store the idempotent response");
                }
                Ok(Created {
                    status: 201,
                    body,
                    replayed: false,
                })
            }
            Err(WorkFailed {
                error,
                made_something: true,
            }) => {
                let _ = store.mark_unknown(&claim, op).await;
                Err(error)
            }
            Err(WorkFailed { error, .. }) => {
                let _ = store.release(&claim).await;
                Err(error)
            }
        }
    }
}
