//! The orphan reaper: compares what providers hold under this deployment's tag with the
//! registry, both ways.
//!
//! - A provider sandbox tagged by this deployment whose operation names no live record here
//!   is an **orphan**: recorded (first sighting kept, `sandbox.orphan_found` once), and
//!   deleted at the provider only when the operator enabled it and its grace period since the
//!   first sighting has passed.
//! - A live record whose sandbox is absent from a complete listing (or on a provider that
//!   cannot list) is asked for by id; a provider that answers "not found" before the record's
//!   lifetime ended makes it a `vanished` tombstone (after it, `expired`, as a get would).
//!
//! One pass per provider: `local` (no credential) once, every other provider once per
//! project with a stored profile. A dry run only reads. Passes run on a schedule with
//! jitter under a lease, so one replica reaps at a time.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corral_domain::{OperationId, Provider, SandboxStatus};
use corral_provider::{CallContext, ProviderError, SandboxProvider};
use corral_registry::{ProjectId, SandboxRecord};

use crate::access::recorded_context;
use crate::{Caller, InlineAccess, Service};

/// Pages of a provider's tagged listing read per pass and scope (at the adapters' page
/// sizes, a few thousand sandboxes); a listing cut here is incomplete and proves no absence.
const MAX_PAGES: usize = 20;
/// Live records checked per provider scope and pass.
const RECORD_BATCH: u32 = 200;
/// Projects whose profiles one pass visits.
const MAX_PROJECTS: usize = 1000;

/// The reaper's settings (`[reaper]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaperConfig {
    /// Whether passes run on a schedule at all.
    pub enabled: bool,
    /// Time between scheduled passes (each waits a random part of a tenth more).
    pub interval: Duration,
    /// Whether orphans are deleted at their provider (otherwise only reported).
    pub delete_orphans: bool,
    /// How long after its first sighting an orphan may be deleted.
    pub grace: Duration,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: Duration::from_secs(600),
            delete_orphans: false,
            grace: Duration::from_secs(3600),
        }
    }
}

/// One orphan as a pass saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanFinding {
    /// The provider holding it.
    pub provider: Provider,
    /// The provider's id.
    pub native_id: String,
    /// The project its tag names (or whose profile listed it).
    pub project: Option<String>,
    /// The operation its tag names.
    pub operation_id: Option<OperationId>,
    /// Whether this pass saw it first (never on a dry run, which records nothing).
    pub first_seen: bool,
    /// Whether this pass deleted it at the provider.
    pub deleted: bool,
}

/// One record a pass found gone at its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VanishedFinding {
    /// The record.
    pub record: SandboxRecord,
    /// `true`: gone before its lifetime ended (a `vanished` tombstone); `false`: its
    /// lifetime had ended (recorded `expired`).
    pub vanished: bool,
}

/// What one pass found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Orphans seen.
    pub orphans: Vec<OrphanFinding>,
    /// Live records found gone.
    pub gone: Vec<VanishedFinding>,
    /// Providers whose adapter cannot list by tag (their records were still checked).
    pub unlisted: Vec<Provider>,
    /// Scopes that failed (provider, why), left for the next pass.
    pub failures: Vec<(Provider, String)>,
    /// Whether the pass only read.
    pub dry_run: bool,
    /// The deployment whose tag was listed (empty when it could not be read).
    pub deployment: String,
}

/// Counters per provider for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct ReaperStats {
    by_provider: Mutex<BTreeMap<Provider, [u64; 3]>>,
}

impl ReaperStats {
    fn add(&self, report: &ReapReport) {
        let mut map = self
            .by_provider
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for o in &report.orphans {
            let c = map.entry(o.provider).or_default();
            c[0] += 1;
            c[1] += u64::from(o.deleted);
        }
        for g in report.gone.iter().filter(|g| g.vanished) {
            map.entry(g.record.provider()).or_default()[2] += 1;
        }
    }

    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let map = self
            .by_provider
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (i, (name, help)) in [
            (
                "corral_reaper_orphans_seen_total",
                "Orphan sightings by reaper passes.",
            ),
            (
                "corral_reaper_orphans_deleted_total",
                "Orphans the reaper deleted.",
            ),
            (
                "corral_reaper_vanished_total",
                "Live records the reaper found gone at their provider.",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n");
            for (p, c) in map.iter() {
                let _ = writeln!(out, "{name}{{provider=\"{p}\"}} {}", c[i]);
            }
        }
    }
}

/// A listing scope: who is asked, and for which project (`None`: every project's records).
struct Scope {
    ctx: CallContext,
    project: Option<ProjectId>,
}

impl Service {
    /// One reaper pass over every configured provider. `dry_run`: find, change nothing.
    pub async fn reap_once(&self, dry_run: bool) -> ReapReport {
        let mut report = ReapReport {
            dry_run,
            ..ReapReport::default()
        };
        let deployment = match self.deployment().await {
            Ok(d) => {
                report.deployment = d.to_string();
                d
            }
            Err(e) => {
                tracing::warn!(error = %e, "reaper: cannot read the deployment id");
                return report;
            }
        };
        let providers: Vec<_> = self
            .inner
            .providers
            .iter()
            .map(|(p, a)| (*p, a.clone()))
            .collect();
        for (p, provider) in providers {
            let scopes = match self.scopes(p, &deployment).await {
                Ok(s) => s,
                Err(e) => {
                    report.failures.push((p, e));
                    continue;
                }
            };
            for scope in scopes {
                self.reap_scope(&provider, &scope, &deployment, dry_run, &mut report)
                    .await;
            }
        }
        if !dry_run {
            self.inner.reaper_stats.add(&report);
        }
        report
    }

    /// Who to ask on `p`: `local` once; any other provider once per project profile.
    async fn scopes(&self, p: Provider, deployment: &str) -> Result<Vec<Scope>, String> {
        if p == Provider::Local {
            return Ok(vec![Scope {
                ctx: CallContext::anonymous().with_deployment(deployment),
                project: None,
            }]);
        }
        let registry = &self.inner.registry;
        let projects = registry
            .list_projects()
            .await
            .map_err(|e| format!("cannot list projects: {e}"))?;
        let mut scopes = Vec::new();
        for project in projects.into_iter().take(MAX_PROJECTS) {
            let caller = Caller {
                project: project.id,
                key: None,
            };
            // Only a stored profile: `access_for` with no inline credential uses it, and
            // answers `ProfileNotFound` where the project has none.
            match self
                .access_for(&caller, p, InlineAccess::default(), None, None)
                .await
            {
                Ok(access) => scopes.push(Scope {
                    ctx: access.ctx,
                    project: Some(project.id),
                }),
                Err(crate::ServiceError::ProfileNotFound { .. }) => {}
                Err(e) => return Err(format!("cannot load a profile: {e}")),
            }
        }
        Ok(scopes)
    }

    async fn reap_scope(
        &self,
        provider: &Arc<dyn SandboxProvider>,
        scope: &Scope,
        deployment: &str,
        dry_run: bool,
        report: &mut ReapReport,
    ) {
        let p = provider.provider();
        let ctx = scope
            .ctx
            .clone()
            .with_timeout(self.inner.config.provider_call_timeout);
        // The listing: complete (every page read), or not (cut, failed, unsupported).
        let mut seen: HashSet<String> = HashSet::new();
        let mut complete = false;
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            match provider
                .list_tagged(&ctx, deployment, token.as_deref())
                .await
            {
                Ok(page) => {
                    for s in page.sandboxes {
                        seen.insert(s.observed.native_id.clone());
                        let project = s.project.or_else(|| scope.project.map(|p| p.to_string()));
                        if let Some(found) = self
                            .orphan_check(provider, &ctx, &s.observed, project, dry_run)
                            .await
                        {
                            report.orphans.push(found);
                        }
                    }
                    token = page.next;
                    if token.is_none() {
                        complete = true;
                        break;
                    }
                }
                Err(ProviderError::Unsupported { .. }) => {
                    if !report.unlisted.contains(&p) {
                        report.unlisted.push(p);
                    }
                    break;
                }
                Err(e) => {
                    report.failures.push((p, format!("listing failed: {e}")));
                    return;
                }
            }
        }
        self.vanish_check(provider, scope, &seen, complete, dry_run, report)
            .await;
    }

    /// An orphan when its operation names no live record here.
    async fn orphan_check(
        &self,
        provider: &Arc<dyn SandboxProvider>,
        ctx: &CallContext,
        seen: &corral_provider::ObservedSandbox,
        project: Option<String>,
        dry_run: bool,
    ) -> Option<OrphanFinding> {
        let registry = &self.inner.registry;
        let record = match seen.operation_id {
            Some(op) => match registry.sandbox_by_operation(op).await {
                Ok(r) => r,
                // Unknown is not "absent": leave it for the next pass.
                Err(_) => return None,
            },
            None => None,
        };
        if let Some(r) = &record
            && r.deleted_at.is_none()
            && r.status != SandboxStatus::Expired
        {
            return None;
        }
        if seen.status == SandboxStatus::Expired || seen.status == SandboxStatus::Deleted {
            // Already on its way out at the provider.
            return None;
        }
        let p = provider.provider();
        let mut found = OrphanFinding {
            provider: p,
            native_id: seen.native_id.clone(),
            project: project.clone(),
            operation_id: seen.operation_id,
            first_seen: false,
            deleted: false,
        };
        if dry_run {
            return Some(found);
        }
        let stored = registry
            .record_orphan(
                p,
                &seen.native_id,
                project.as_deref(),
                seen.operation_id,
                record.as_ref().map(|r| r.id),
            )
            .await;
        let Ok((orphan, first)) = stored else {
            return Some(found);
        };
        found.first_seen = first;
        if first {
            tracing::warn!(provider = %p, native_id = %seen.native_id, "reaper: orphan found");
        }
        let config = &self.inner.config.reaper;
        let now = registry.database().now();
        let age = (now - orphan.first_seen_at).to_std().unwrap_or_default();
        if config.delete_orphans && orphan.deleted_at.is_none() && age >= config.grace {
            match provider.delete(ctx, &seen.native_id).await {
                Ok(()) => {
                    let _ = registry.mark_orphan_deleted(p, &seen.native_id).await;
                    tracing::warn!(provider = %p, native_id = %seen.native_id, "reaper: orphan deleted");
                    found.deleted = true;
                }
                Err(e) => {
                    tracing::warn!(provider = %p, error = %e, "reaper: cannot delete an orphan")
                }
            }
        }
        Some(found)
    }

    /// Live records absent from a complete listing (every one where there is no listing)
    /// are asked for by id; "not found" ends them.
    async fn vanish_check(
        &self,
        provider: &Arc<dyn SandboxProvider>,
        scope: &Scope,
        seen: &HashSet<String>,
        complete: bool,
        dry_run: bool,
        report: &mut ReapReport,
    ) {
        let p = provider.provider();
        let registry = &self.inner.registry;
        let records = match registry
            .live_created_sandboxes(p, scope.project, None, RECORD_BATCH)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                report
                    .failures
                    .push((p, format!("cannot read records: {e}")));
                return;
            }
        };
        for rec in records {
            let Some(native) = rec.native_id.clone() else {
                continue;
            };
            if complete && seen.contains(&native) {
                continue;
            }
            let ctx = self.record_ctx(scope, &rec).await;
            let ctx = ctx.with_timeout(self.inner.config.provider_call_timeout);
            match provider.get(&ctx, &native).await {
                Err(ProviderError::NotFound { .. }) => {}
                // There, or unknown: nothing to conclude.
                _ => continue,
            }
            let now = registry.database().now();
            let vanished = rec.expires_at.is_none_or(|end| now < end);
            if !dry_run {
                let done = if vanished {
                    registry
                        .tombstone_vanished(rec.project_id, rec.id)
                        .await
                        .map(|r| r.is_some())
                } else {
                    registry
                        .record_status(rec.project_id, rec.id, SandboxStatus::Expired, now)
                        .await
                        .map(|_| true)
                };
                match done {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        report.failures.push((p, format!("cannot record: {e}")));
                        continue;
                    }
                }
            }
            if vanished {
                tracing::warn!(provider = %p, sandbox = %rec.id, "reaper: sandbox vanished at its provider");
            }
            report.gone.push(VanishedFinding {
                record: rec,
                vanished,
            });
        }
    }

    /// The context a record's own calls use: the scope's credential with the context
    /// recorded at its create.
    async fn record_ctx(&self, scope: &Scope, rec: &SandboxRecord) -> CallContext {
        if rec.provider() == Provider::Local {
            return scope.ctx.clone();
        }
        let caller = Caller {
            project: rec.project_id,
            key: None,
        };
        match self
            .access_for(
                &caller,
                rec.provider(),
                InlineAccess::default(),
                Some(&recorded_context(&rec.metadata)),
                None,
            )
            .await
        {
            Ok(a) => a.ctx,
            Err(_) => scope.ctx.clone(),
        }
    }

    /// Runs passes forever: every `interval` plus jitter, each under the `reaper` lease so
    /// one replica reaps at a time, handing each report to `after` (the binary records it in
    /// the audit log). Returns at once when the reaper is disabled.
    pub async fn run_reaper<F, Fut>(self, after: F)
    where
        F: Fn(ReapReport) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let config = self.inner.config.reaper.clone();
        if !config.enabled {
            return;
        }
        let lease = config.interval.saturating_mul(2);
        loop {
            let jitter = config.interval.mul_f64(random_fraction() / 10.0);
            tokio::time::sleep(config.interval + jitter).await;
            match self
                .inner
                .registry
                .try_lease("reaper", &self.inner.replica, lease)
                .await
            {
                Ok(true) => {
                    let report = self.reap_once(false).await;
                    tracing::info!(
                        orphans = report.orphans.len(),
                        gone = report.gone.len(),
                        failures = report.failures.len(),
                        "reaper pass done"
                    );
                    after(report).await;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "reaper: cannot take the lease"),
            }
        }
    }
}

/// A number in [0, 1) that differs between calls and replicas (std's per-instance random
/// hash keys; enough to spread replicas' passes, not for secrets).
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1_u64 << 53) as f64
}
