//! Create, made safe to retry (DESIGN.md §4): validate, claim the Idempotency-Key atomically,
//! record the sandbox with a fresh operation id before the provider call, run the provider call
//! in a task of its own (a client that goes away does not cancel the recording of its outcome),
//! and reconcile lost answers by operation id.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, SandboxId, SandboxMetadata, SandboxStatus};
use corral_idempotency::{Claim, ClaimOutcome, Fingerprint, IdempotencyKey};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider};
use corral_registry::{CreateState, NewSandbox, SandboxLifecycle, SandboxRecord};

use tracing::Instrument as _;

use crate::access::Access;
use crate::error::{ServiceError, Stage, map_provider_error};
use crate::error::{idempotency_error, registry_error};
use crate::failpoint::fail_point;
use crate::{Caller, Created, InlineAccess, Service};

/// Why a create whose answer was lost failed, once the provider has been shown to hold no
/// sandbox for it (kept for the console).
pub(crate) const NEVER_MADE: &str = "the provider holds no sandbox for this create past the grace period: the create did not happen";

/// The route the fingerprint names.
const CREATE_ROUTE: &str = "/v1/sandboxes";

/// How long a provider create may run before its outcome is declared unknown. The key's lease
/// is renewed while the create runs (a slow create must not look like a dead owner), so this
/// is what bounds how long a key can stay in progress.
const CREATE_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// The body a create answers (and replays byte for byte): the spec's state table moves an
/// accepted create to `creating` and the response carries that status, whatever the provider
/// already reported. The provider's observed status is recorded on the registry record and
/// shown by get and list with its `statusObservedAt`; the create response has no
/// `statusObservedAt` because its status is the operation's, not an observation. A create
/// settled by a delete (the tombstone) is answered as what it is.
fn body_of(rec: &SandboxRecord) -> Result<String, ServiceError> {
    let mut sandbox = rec.to_sandbox();
    if sandbox.deleted_at.is_none() {
        sandbox.status = SandboxStatus::Creating;
        sandbox.status_observed_at = None;
    }
    serde_json::to_string(&sandbox)
        .map_err(|_| ServiceError::internal("cannot serialize the sandbox"))
}

/// What looking an operation id up at the provider showed.
pub(crate) enum Lookup {
    /// Exactly one sandbox carries it: adopted into the record.
    Adopted(Box<SandboxRecord>),
    /// None found (not proof of absence: listings can lag).
    NoneFound,
    /// Several carry it: an anomaly, never resolved silently.
    Several,
}

impl Service {
    /// `POST /v1/sandboxes`.
    pub async fn create(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        idempotency_key: Option<&str>,
        request: CreateSandboxRequest,
    ) -> Result<Created, ServiceError> {
        let p = request.provider();
        let provider = self.inner.providers.get(&p).cloned().ok_or_else(|| {
            ServiceError::invalid(format!("provider `{p}` is not configured on this server"))
        })?;
        request.validate(provider.capabilities())?;
        let key = idempotency_key
            .map(IdempotencyKey::parse)
            .transpose()
            .map_err(idempotency_error)?;
        // The fingerprint covers the canonical body and the non-secret context headers; the
        // credential never enters it.
        let body_value = serde_json::to_value(&request)
            .map_err(|_| ServiceError::internal("cannot serialize the request"))?;
        let c = &inline.context;
        let headers: Vec<(&str, &str)> = [
            ("x-provider-workspace", c.workspace.as_deref()),
            ("x-provider-team-id", c.team_id.as_deref()),
            ("x-provider-project-id", c.project_id.as_deref()),
            ("x-provider-bridge-url", c.bridge_url.as_deref()),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .collect();
        let fingerprint = Fingerprint::compute("POST", CREATE_ROUTE, Some(&body_value), &headers);
        // Rejections before execution (no profile, refused bridge URL…) leave no record.
        let access = self.access(caller, p, inline, None, "create").await?;
        let Some(key) = key else {
            self.check_quota(caller, p).await?;
            let restore_from = self.restore_from(caller, &request).await?;
            return self
                .run_create(
                    caller,
                    provider,
                    access,
                    (request, restore_from),
                    None,
                    OperationId::new(),
                )
                .await;
        };
        let store = &self.inner.idempotency;
        let outcome = store
            .claim(caller.project_id(), &key, &fingerprint)
            .await
            .map_err(idempotency_error)?;
        match outcome {
            ClaimOutcome::Claimed(mut claim) => {
                fail_point!("create.after_claim");
                // A new create (a replay is never refused): over quota, nothing is stored and
                // the key is free again.
                if let Err(e) = self.check_quota(caller, p).await {
                    let _ = store.release(&claim).await;
                    return Err(e);
                }
                let restore_from = match self.restore_from(caller, &request).await {
                    Ok(native) => native,
                    Err(e) => {
                        let _ = store.release(&claim).await;
                        return Err(e);
                    }
                };
                let op = OperationId::new();
                if let Err(e) = store.attach_operation(&mut claim, op).await {
                    let _ = store.release(&claim).await;
                    return Err(idempotency_error(e));
                }
                fail_point!("create.after_attach");
                self.run_create(
                    caller,
                    provider,
                    access,
                    (request, restore_from),
                    Some(claim),
                    op,
                )
                .await
            }
            ClaimOutcome::Replay(stored) => Ok(Created {
                status: 200,
                body: String::from_utf8_lossy(&stored.body).into_owned(),
                replayed: true,
            }),
            ClaimOutcome::InProgress { retry_after } => Err(ServiceError::IdempotencyInProgress {
                retry_after: retry_after.as_secs().max(1),
            }),
            ClaimOutcome::Conflict => Err(ServiceError::IdempotencyConflict),
            ClaimOutcome::Unknown { operation_id } => {
                match store
                    .take_over_for_reconciliation(caller.project_id(), &key)
                    .await
                    .map_err(idempotency_error)?
                {
                    Some(claim) => {
                        self.reconcile_claim(caller, &provider, &access.ctx, claim)
                            .await
                    }
                    None => Err(ServiceError::IdempotencyOutcomeUnknown { operation_id }),
                }
            }
            ClaimOutcome::NeedsReconciliation(claim) => {
                self.reconcile_claim(caller, &provider, &access.ctx, claim)
                    .await
            }
        }
    }

    /// A restore names a ready snapshot of this project: its native id, checked before
    /// anything is kept (and only for a new create: a replay answers what was made, even if
    /// the snapshot is gone since).
    async fn restore_from(
        &self,
        caller: &Caller,
        request: &CreateSandboxRequest,
    ) -> Result<Option<String>, ServiceError> {
        match request.snapshot() {
            Some(snapshot) => Ok(Some(self.restorable(caller, snapshot).await?)),
            None => Ok(None),
        }
    }

    /// A create that restores a snapshot (a fork's copy), without a key: the sandbox as the
    /// registry holds it once the create answered.
    pub(crate) async fn create_restoring(
        &self,
        caller: &Caller,
        inline: InlineAccess,
        request: CreateSandboxRequest,
    ) -> Result<corral_domain::Sandbox, ServiceError> {
        let created = self.create(caller, inline, None, request).await?;
        let made: corral_domain::Sandbox = serde_json::from_str(&created.body).map_err(|_| {
            ServiceError::internal("a create answered something else than a sandbox")
        })?;
        Ok(self
            .record(caller, &made.id.to_string())
            .await?
            .to_sandbox())
    }

    /// Records the sandbox, then runs the provider create (or, with a native snapshot id, the
    /// restore) in its own task and waits for it up to `create_wait`.
    async fn run_create(
        &self,
        caller: &Caller,
        provider: Arc<dyn SandboxProvider>,
        access: Access,
        (request, restore_from): (CreateSandboxRequest, Option<String>),
        claim: Option<Claim>,
        op: OperationId,
    ) -> Result<Created, ServiceError> {
        let p = provider.provider();
        let c = &access.context;
        let new = NewSandbox {
            id: SandboxId::new(p),
            project_id: caller.project_id(),
            metadata: SandboxMetadata {
                native_provider_id: None,
                operation_id: op,
                credential_source: access.source,
                workspace: c.workspace.clone(),
                team_id: c.team_id.clone(),
                project_id: c.project_id.clone(),
                bridge_url: c.bridge_url.clone(),
            },
        };
        // When the asked-for lifetime ends: a sandbox gone before it vanished, after it expired.
        let expires_at = request
            .effective_timeout(provider.capabilities())
            .and_then(|t| chrono::Duration::try_seconds(i64::try_from(t).ok()?))
            .map(|t| self.inner.registry.database().now() + t);
        let lifecycle = SandboxLifecycle {
            auto_resume: request.auto_resume(),
            idle_stop_seconds: request.idle_stop_seconds(),
            snapshot_id: request.snapshot(),
        };
        let rec = match self
            .inner
            .registry
            .insert_sandbox_with(new, expires_at, lifecycle)
            .await
        {
            Ok(rec) => rec,
            Err(e) => {
                if let Some(claim) = &claim {
                    let _ = self.inner.idempotency.release(claim).await;
                }
                return Err(registry_error(e));
            }
        };
        fail_point!("create.after_pending");
        let spec = CreateSpec {
            operation_id: op,
            timeout_seconds: request.effective_timeout(provider.capabilities()),
            request,
        };
        let this = self.clone();
        let flight = self.enter_flight(op);
        // The task carries the request's span, so its log lines keep the request id.
        let task = tokio::spawn(
            async move {
                let _flight = flight;
                this.finish_create(rec, provider, access.ctx, (spec, restore_from), claim)
                    .await
            }
            .instrument(tracing::Span::current()),
        );
        match tokio::time::timeout(self.inner.config.create_wait, task).await {
            Ok(Ok(result)) => {
                fail_point!("create.before_response");
                result
            }
            Ok(Err(_panicked)) => Err(ServiceError::CreateOutcomeUnknown { operation_id: op }),
            // The task goes on and records the outcome; the client reconciles with the key.
            Err(_elapsed) => Err(ServiceError::CreateOutcomeUnknown { operation_id: op }),
        }
    }

    async fn finish_create(
        &self,
        rec: SandboxRecord,
        provider: Arc<dyn SandboxProvider>,
        ctx: CallContext,
        (spec, restore_from): (CreateSpec, Option<String>),
        mut claim: Option<Claim>,
    ) -> Result<Created, ServiceError> {
        let p = provider.provider();
        let op = spec.operation_id;
        let registry = &self.inner.registry;
        let store = &self.inner.idempotency;
        let ctx = ctx.with_timeout(CREATE_DEADLINE);
        let made = async {
            match &restore_from {
                Some(snapshot) => provider.restore(&ctx, &spec, snapshot).await,
                None => provider.create(&ctx, &spec).await,
            }
        };
        let call = tokio::time::timeout(CREATE_DEADLINE, made);
        let result = match claim.as_mut() {
            // Held for as long as the provider works: if the lease ran out mid-call, a same-key
            // retry (or the reconciler) would take the key over, find nothing yet, and past the
            // grace period free it for a second provider create.
            Some(held) => self.renewing(held, call).await,
            None => call.await,
        }
        .unwrap_or(Err(ProviderError::TimedOutAfterSend { provider: p }));
        let (project, id) = (rec.project_id, rec.id);
        let held = claim.as_ref();
        let unknown = |why: String| async move {
            tracing::warn!(operation_id = %op, sandbox_id = %id, "create outcome unknown: {why}");
            let _ = registry
                .set_create_state(project, id, CreateState::Unknown)
                .await;
            if let Some(claim) = held {
                let _ = store.mark_unknown(claim, op).await;
            }
            ServiceError::CreateOutcomeUnknown { operation_id: op }
        };
        match result {
            Ok(seen) => {
                fail_point!("create.after_provider");
                let done = registry
                    .complete_create(rec.project_id, rec.id, &seen.native_id, seen.status)
                    .await;
                let done = match done {
                    Ok(done) => done,
                    Err(e) => return Err(unknown(format!("cannot record the result: {e}")).await),
                };
                fail_point!("create.after_native_id");
                if done.deleted_at.is_some() {
                    // Deleted while the provider was still creating it: the delete found
                    // nothing to remove, so remove what was just made.
                    let ctx = ctx.with_timeout(self.inner.config.provider_call_timeout);
                    if let Err(e) = provider.delete(&ctx, &seen.native_id).await {
                        tracing::warn!(operation_id = %op, sandbox_id = %id, error = %e, "cannot remove a sandbox deleted while it was being created");
                    }
                }
                let body = body_of(&done)?;
                if let Some(claim) = &claim
                    && let Err(e) = store.complete(claim, 201, body.as_bytes()).await
                {
                    tracing::warn!(operation_id = %op, error = %e, "cannot store the idempotent response");
                }
                fail_point!("create.after_complete");
                Ok(Created {
                    status: 201,
                    body,
                    replayed: false,
                })
            }
            Err(e) if e.may_have_been_applied() => Err(unknown(e.to_string()).await),
            Err(e) => {
                let _ = registry
                    .set_create_state(rec.project_id, rec.id, CreateState::Failed)
                    .await;
                if let Some(claim) = &claim {
                    let _ = store.release(claim).await;
                }
                let err = map_provider_error(e, Stage::Create, Some(op));
                // Kept for the console's sandbox page: the same words the caller got.
                if let Err(e) = registry
                    .record_create_failure(
                        rec.project_id,
                        rec.id,
                        err.code().as_str(),
                        &err.to_string(),
                    )
                    .await
                {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot record why a create failed");
                }
                Err(err)
            }
        }
    }

    /// Runs `work` while renewing `claim`'s lease every third of the lease. A failed renewal
    /// is only logged: the outcome is still recorded, and a lost claim is reported then.
    async fn renewing<T>(&self, claim: &mut Claim, work: impl Future<Output = T>) -> T {
        let store = &self.inner.idempotency;
        let every = (store.config().lease / 3).max(Duration::from_millis(10));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let work = std::pin::pin!(work);
        let mut work = work;
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tick.tick() => {
                    if let Err(e) = store.renew(claim).await {
                        tracing::warn!(error = %e, "cannot renew the create's idempotency lease");
                    }
                }
            }
        }
    }

    /// Whether an unconfirmed create was last touched more than the reconciliation grace
    /// period ago, so that finding nothing at the provider is taken as absence.
    ///
    /// The clock starts when we last heard of the create: `updated_at`, which for a pending or
    /// unknown record is when it was recorded or when its answer was declared lost (a provider
    /// call can run up to `CREATE_DEADLINE`, far longer than the grace). Counting from
    /// `created_at` would accept "absent" the moment a slow create's answer is lost, while the
    /// provider's listing still lags.
    ///
    /// The bound: freeing the key after the grace is safe only if the provider lists a sandbox
    /// within `reconcile_grace` of our last contact with its create (late processing plus list
    /// lag). A provider slower than that can still end up with two sandboxes for one key.
    pub(crate) fn grace_over(&self, rec: &SandboxRecord) -> bool {
        let grace =
            chrono::Duration::from_std(self.inner.config.reconcile_grace).unwrap_or_default();
        rec.created_at.max(rec.updated_at) + grace < self.inner.registry.database().now()
    }

    /// Whether the background reconciler may take "nothing found" as absence for `rec`.
    ///
    /// On top of the grace: a `pending` record's create may still be running in another
    /// replica (whose in-flight set this one cannot see) for up to `CREATE_DEADLINE` after it
    /// was recorded; failing it meanwhile would leave the sandbox that call then makes an
    /// orphan if its owner dies before recording it (found by the model check in
    /// `tests/it/model.rs`). After the deadline its owner has recorded the outcome (or
    /// `unknown`, which moves `updated_at`) or is gone.
    pub(crate) fn absence_provable(&self, rec: &SandboxRecord) -> bool {
        if !self.grace_over(rec) {
            return false;
        }
        if rec.create_state != CreateState::Pending {
            return true;
        }
        let wait = CREATE_DEADLINE.saturating_add(self.inner.config.reconcile_grace);
        let wait = chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
        rec.created_at.max(rec.updated_at) + wait < self.inner.registry.database().now()
    }

    /// Looks `rec`'s operation id up at the provider and adopts exactly one match.
    pub(crate) async fn lookup_operation(
        &self,
        provider: &Arc<dyn SandboxProvider>,
        ctx: &CallContext,
        rec: &SandboxRecord,
    ) -> Result<Lookup, ServiceError> {
        let p = provider.provider();
        // Bounded: a same-key retry (and the reconciler) wait on this lookup, and the claim
        // it runs under is not renewed meanwhile.
        let within = self.inner.config.provider_call_timeout;
        let ctx = ctx.clone().with_timeout(within);
        let found = tokio::time::timeout(
            within,
            provider.find_by_operation_id(&ctx, &rec.operation_id()),
        )
        .await
        .unwrap_or(Err(ProviderError::TimedOutAfterSend { provider: p }));
        let found = found.map_err(|e| map_provider_error(e, Stage::Other, None))?;
        match found.as_slice() {
            [] => Ok(Lookup::NoneFound),
            [one] => {
                fail_point!("reconcile.before_adopt");
                let adopted = self
                    .inner
                    .registry
                    .complete_create(rec.project_id, rec.id, &one.native_id, one.status)
                    .await
                    .map_err(registry_error)?;
                tracing::info!(operation_id = %rec.operation_id(), sandbox_id = %rec.id, "reconciled: adopted the provider's sandbox");
                Ok(Lookup::Adopted(Box::new(adopted)))
            }
            several => {
                tracing::error!(operation_id = %rec.operation_id(), count = several.len(), "reconciliation anomaly: several sandboxes carry one operation id");
                Ok(Lookup::Several)
            }
        }
    }

    /// A same-key retry after a lost answer (or a dead owner): reconcile, never re-create.
    async fn reconcile_claim(
        &self,
        caller: &Caller,
        provider: &Arc<dyn SandboxProvider>,
        ctx: &CallContext,
        claim: Claim,
    ) -> Result<Created, ServiceError> {
        let store = &self.inner.idempotency;
        let Some(op) = claim.operation_id else {
            // No operation was attached, so no provider call started: free the key.
            store.release(&claim).await.map_err(idempotency_error)?;
            return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
        };
        let keep_unknown = || async {
            let _ = store.mark_unknown(&claim, op).await;
            ServiceError::IdempotencyOutcomeUnknown {
                operation_id: Some(op),
            }
        };
        let rec = match self.inner.registry.sandbox_by_operation(op).await {
            Ok(Some(rec)) if rec.project_id == caller.project_id() => rec,
            Ok(_) => {
                // Attached but never recorded: the provider was not called.
                store.release(&claim).await.map_err(idempotency_error)?;
                return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
            }
            Err(_) => return Err(keep_unknown().await),
        };
        let adopted = match (rec.create_state, &rec.native_id) {
            // Deleted by the client meanwhile: settled, answer the tombstone, never re-create.
            _ if rec.deleted_at.is_some() => Some(rec.clone()),
            (CreateState::Created, Some(_)) => Some(rec.clone()),
            (CreateState::Failed, _) => {
                store.release(&claim).await.map_err(idempotency_error)?;
                return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
            }
            _ => match self.lookup_operation(provider, ctx, &rec).await {
                Ok(Lookup::Adopted(r)) => Some(*r),
                Ok(Lookup::NoneFound) if self.grace_over(&rec) => {
                    // Absent past the grace period that covers listing lag: the create did not
                    // happen. Record it failed and free the key; the retry creates afresh.
                    let _ = self
                        .inner
                        .registry
                        .set_create_state(rec.project_id, rec.id, CreateState::Failed)
                        .await;
                    let _ = self
                        .inner
                        .registry
                        .record_create_failure(rec.project_id, rec.id, "provider_error", NEVER_MADE)
                        .await;
                    store.release(&claim).await.map_err(idempotency_error)?;
                    return Err(ServiceError::IdempotencyInProgress { retry_after: 1 });
                }
                Ok(Lookup::NoneFound | Lookup::Several) | Err(_) => None,
            },
        };
        let Some(done) = adopted else {
            return Err(keep_unknown().await);
        };
        let body = body_of(&done)?;
        store
            .complete(&claim, 201, body.as_bytes())
            .await
            .map_err(idempotency_error)?;
        Ok(Created {
            status: 201,
            body,
            replayed: false,
        })
    }
}
