//! The background reconciler: drives creates whose outcome is unknown (or whose owner died) to
//! a final state without a client's help, by looking their operation ids up at the provider.

use std::time::Duration;

use corral_registry::{CreateState, SandboxRecord};

use crate::access::recorded_context;
use crate::create::Lookup;
use crate::{Caller, InlineAccess, Service};

/// Records younger than this (or the grace period, if shorter) are left to the request that is
/// still creating them.
const MIN_AGE: Duration = Duration::from_secs(30);
/// Records handled per pass.
const BATCH: u32 = 50;

/// What one reconciliation pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Sandboxes found at the provider and adopted.
    pub adopted: usize,
    /// Creates given up as failed (nothing found after the grace period).
    pub failed: usize,
    /// Creates still unresolved.
    pub unresolved: usize,
    /// Completed idempotency records past their retention, deleted.
    pub reaped: u64,
}

impl Service {
    /// One pass over stale creates (records still `pending` or `unknown`) and idempotency keys
    /// needing reconciliation; then reaps completed keys past their retention.
    pub async fn reconcile_once(&self) -> ReconcileReport {
        let mut report = ReconcileReport::default();
        let registry = &self.inner.registry;
        let now = registry.database().now();
        let min_age = MIN_AGE.min(self.inner.config.reconcile_grace);
        let cutoff = now - chrono::Duration::from_std(min_age).unwrap_or_default();
        let stale = match registry.stale_creates(cutoff, BATCH).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "reconciler: cannot list stale creates");
                return report;
            }
        };
        for rec in stale {
            self.reconcile_record(&rec, &mut report).await;
            // Settled or not, it goes to the back of the next batches: records that can never
            // be settled here (an inline credential is never stored) would otherwise fill
            // every batch and starve newer ones. `updated_at` is not touched, so the grace
            // period still runs from when the answer was lost.
            if let Err(e) = registry
                .mark_reconcile_attempted(rec.project_id, rec.id)
                .await
            {
                tracing::warn!(error = %e, "reconciler: cannot record the attempt");
            }
        }
        self.reconcile_keys(&mut report).await;
        // Completed keys past retention are new again anyway (a claim replaces them); reaping
        // keeps the table from growing without bound.
        match self.inner.idempotency.reap(now).await {
            Ok(n) => report.reaped = n,
            Err(e) => tracing::warn!(error = %e, "reconciler: cannot reap expired keys"),
        }
        report
    }

    async fn reconcile_record(&self, rec: &SandboxRecord, report: &mut ReconcileReport) {
        if rec.deleted_at.is_some() {
            // Deleted by the client: nothing left to adopt or fail (a tombstone no longer
            // changes state), so do not ask the provider.
            return;
        }
        if self.in_flight(rec.operation_id()) {
            // Its create is still running here and will record its own outcome; finding
            // nothing at the provider now proves nothing.
            report.unresolved += 1;
            return;
        }
        let Some(provider) = self.inner.providers.get(&rec.provider()).cloned() else {
            report.unresolved += 1;
            return;
        };
        let caller = Caller {
            project: rec.project_id,
            key: None,
        };
        // Only a stored profile (or no credential at all) can be used: inline credentials are
        // never kept.
        let access = match self
            .access(
                &caller,
                rec.provider(),
                InlineAccess::default(),
                Some(&recorded_context(&rec.metadata)),
                "create",
            )
            .await
        {
            Ok(a) => a,
            Err(_) => {
                report.unresolved += 1;
                return;
            }
        };
        match self.lookup_operation(&provider, &access.ctx, rec).await {
            Ok(Lookup::Adopted(_)) => report.adopted += 1,
            Ok(Lookup::NoneFound) => {
                if self.absence_provable(rec) {
                    let _ = self
                        .inner
                        .registry
                        .set_create_state(rec.project_id, rec.id, CreateState::Failed)
                        .await;
                    let _ = self
                        .inner
                        .registry
                        .record_create_failure(
                            rec.project_id,
                            rec.id,
                            "provider_error",
                            crate::create::NEVER_MADE,
                        )
                        .await;
                    report.failed += 1;
                } else {
                    report.unresolved += 1;
                }
            }
            Ok(Lookup::Several) | Err(_) => report.unresolved += 1,
        }
    }

    async fn reconcile_keys(&self, report: &mut ReconcileReport) {
        let store = &self.inner.idempotency;
        let Ok(candidates) = store.needing_reconciliation(BATCH).await else {
            return;
        };
        for c in candidates {
            let Ok(Some(claim)) = store
                .take_over_for_reconciliation(c.project_id, &c.key)
                .await
            else {
                continue;
            };
            let Some(op) = claim.operation_id else {
                // Nothing reached a provider: free the key.
                let _ = store.release(&claim).await;
                continue;
            };
            match self.inner.registry.sandbox_by_operation(op).await {
                Ok(Some(rec))
                    if rec.create_state == CreateState::Created || rec.deleted_at.is_some() =>
                {
                    if let Ok(body) = serde_json::to_string(&rec.to_sandbox())
                        && store.complete(&claim, 201, body.as_bytes()).await.is_ok()
                    {
                        report.adopted += 1;
                        continue;
                    }
                    let _ = store.mark_unknown(&claim, op).await;
                }
                Ok(Some(rec)) if rec.create_state == CreateState::Failed => {
                    let _ = store.release(&claim).await;
                }
                Ok(None) => match self.inner.journal.by_operation(op).await {
                    // A command start's key: its record says what was started (never start
                    // it again by freeing the key).
                    Ok(Some(cmd)) => match serde_json::to_string(&cmd.to_command()) {
                        Ok(body) if store.complete(&claim, 201, body.as_bytes()).await.is_ok() => {
                            report.adopted += 1;
                        }
                        _ => {
                            let _ = store.mark_unknown(&claim, op).await;
                        }
                    },
                    Ok(None) => {
                        let _ = store.release(&claim).await;
                    }
                    Err(_) => {
                        let _ = store.mark_unknown(&claim, op).await;
                        report.unresolved += 1;
                    }
                },
                _ => {
                    // Still pending or unknown: the record pass above handles it; keep the
                    // key unknown until then.
                    let _ = store.mark_unknown(&claim, op).await;
                    report.unresolved += 1;
                }
            }
        }
    }

    /// Runs [`Service::reconcile_once`] every `interval` until the runtime shuts down.
    pub fn spawn_reconciler(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = this.reconcile_once().await;
                if r != ReconcileReport::default() {
                    tracing::info!(
                        adopted = r.adopted,
                        failed = r.failed,
                        unresolved = r.unresolved,
                        reaped = r.reaped,
                        "reconciler pass"
                    );
                }
            }
        })
    }
}
