//! The service's own limits: request rates per API key and per project (token buckets), a
//! throttle on failed authentication per source address, quotas on live sandboxes per
//! project, and caps on commands running at once per project and per server.
//! Framework-free: the server asks, and renders the answer as headers.
//!
//! Rates and running commands are kept **per replica**, in memory: N replicas behind a
//! balancer admit up to N times the configured rate and run up to N times the configured
//! commands. That keeps the limiter off the database on every request; the quota on live
//! sandboxes, which must hold across replicas, is counted in the registry.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use corral_domain::Provider;
use corral_registry::ProjectId;

use crate::error::ServiceError;
use crate::error::registry_error;
use crate::{Caller, Service};

/// One token bucket: `burst` requests at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Bucket size: the requests allowed at once.
    pub burst: u32,
}

impl Rate {
    /// The window of the `RateLimit-Policy` header: seconds to refill an empty bucket.
    pub fn window_seconds(&self) -> u64 {
        (f64::from(self.burst) / self.per_second).ceil().max(1.0) as u64
    }
}

/// The request-rate limits; `None` disables one.
#[derive(Debug, Clone, Default)]
pub struct RateLimits {
    /// Per API key.
    pub per_key: Option<Rate>,
    /// Per project (all its keys together).
    pub per_project: Option<Rate>,
    /// Failed authentications per source address.
    pub auth_failures: Option<Rate>,
}

impl RateLimits {
    /// The defaults: 20 requests/s with bursts of 100 per key, 50/s with bursts of 200 per
    /// project, and 30 failed authentications per source, refilled at one every 2 s.
    pub fn standard() -> Self {
        Self {
            per_key: Some(Rate {
                per_second: 20.0,
                burst: 100,
            }),
            per_project: Some(Rate {
                per_second: 50.0,
                burst: 200,
            }),
            auth_failures: Some(Rate {
                per_second: 0.5,
                burst: 30,
            }),
        }
    }
}

/// Quotas on live sandboxes of a project (not deleted, not expired, not failed); `None`
/// disables one.
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    /// All providers together.
    pub live_sandboxes: Option<u64>,
    /// Per provider.
    pub live_sandboxes_per_provider: BTreeMap<Provider, u64>,
}

/// Caps on commands (exec calls) running at once, counted from admission until the call
/// ends, whichever way it ends; `None` disables one.
///
/// An exec holds its caller's HTTP request, a provider connection or (on `local`) a thread
/// and processes, and up to two output buffers of
/// [`MAX_OUTPUT_BYTES_PER_STREAM`](corral_domain::limits::MAX_OUTPUT_BYTES_PER_STREAM) for as
/// long as the command runs (up to the exec deadline, 300 s by default): unlike request rates,
/// which count arrivals, these bound what is held at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecConcurrency {
    /// Commands of one project (all its keys together).
    pub per_project: Option<u32>,
    /// Commands of every project together, on this replica.
    pub total: Option<u32>,
}

impl ExecConcurrency {
    /// No cap at all.
    pub const NONE: Self = Self {
        per_project: None,
        total: None,
    };

    /// The defaults: 32 commands per project, 256 in all. 256 bounds the output buffers a
    /// replica may hold for commands to 512 MiB (2 × 1 MiB each); 32 lets one project use an
    /// eighth of that, so at least eight projects can be busy at once before any is refused,
    /// and is well past the parallelism of one agent or CI job.
    pub const fn standard() -> Self {
        Self {
            per_project: Some(32),
            total: Some(256),
        }
    }
}

impl Default for ExecConcurrency {
    /// [`ExecConcurrency::standard`]: a bound on held resources, on unless switched off.
    fn default() -> Self {
        Self::standard()
    }
}

/// `Retry-After` of an exec refused because too many commands run: a place frees as soon as
/// any of them ends, often within a second; the request rates bound how often a client
/// retries.
pub const EXEC_RETRY_AFTER_SECONDS: u64 = 1;

#[derive(Debug, Default)]
struct SlotCounts {
    total: u32,
    per_project: HashMap<ProjectId, u32>,
}

/// The commands running now, per project and in all (per replica).
#[derive(Debug, Default)]
pub(crate) struct ExecSlots {
    counts: Mutex<SlotCounts>,
}

/// One running command's place; given back when dropped, on every path: the command's end,
/// an error, a timeout, or the caller's future being dropped (a client that went away).
#[derive(Debug)]
pub(crate) struct ExecPermit {
    slots: Arc<ExecSlots>,
    project: ProjectId,
}

impl Drop for ExecPermit {
    fn drop(&mut self) {
        let mut c = self
            .slots
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_project.get_mut(&self.project) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_project.remove(&self.project);
            }
        }
    }
}

impl ExecSlots {
    /// Takes a place for a command of `project` if both caps allow it; never waits.
    fn try_acquire(
        self: &Arc<Self>,
        project: ProjectId,
        caps: ExecConcurrency,
    ) -> Result<ExecPermit, ServiceError> {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = c.per_project.get(&project).copied().unwrap_or(0);
        let refuse = |message: String| ServiceError::RateLimited {
            message,
            retry_after: Some(EXEC_RETRY_AFTER_SECONDS),
        };
        if let Some(cap) = caps.per_project
            && mine >= cap
        {
            return Err(refuse(format!(
                "the project already runs {mine} commands, the most this service runs at once for one project ({cap}); retry when one has finished, after Retry-After"
            )));
        }
        if let Some(cap) = caps.total
            && c.total >= cap
        {
            return Err(refuse(format!(
                "this server already runs {} commands, the most it runs at once ({cap}); retry after Retry-After",
                c.total
            )));
        }
        c.total += 1;
        *c.per_project.entry(project).or_insert(0) += 1;
        Ok(ExecPermit {
            slots: self.clone(),
            project,
        })
    }

    fn running(&self, project: Option<ProjectId>) -> u32 {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match project {
            Some(p) => c.per_project.get(&p).copied().unwrap_or(0),
            None => c.total,
        }
    }
}

/// The state of one rate policy after a request, for the `RateLimit` headers.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyState {
    /// `per-key` or `per-project`.
    pub name: &'static str,
    /// The policy.
    pub rate: Rate,
    /// Whole requests left now.
    pub remaining: u32,
    /// Seconds until the bucket is full again.
    pub reset_seconds: u64,
}

/// What the rate limiter said about one authenticated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// Every policy that applied, in the order checked.
    pub policies: Vec<PolicyState>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by key, in memory.
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    map: Mutex<HashMap<(&'static str, String), Bucket>>,
}

/// `Retry-After` of a quota refusal.
pub const QUOTA_RETRY_AFTER_SECONDS: u64 = 60;

/// Entries kept before full buckets (which carry no information) are dropped.
const PRUNE_ABOVE: usize = 10_000;

enum Take {
    Taken { remaining: f64 },
    Refused { wait_seconds: f64 },
}

impl Buckets {
    fn refill(b: &mut Bucket, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        b.at = now;
    }

    /// Takes `cost` tokens (0 only looks) from the bucket `policy`/`key`.
    fn take(&self, policy: &'static str, key: &str, rate: Rate, cost: f64) -> Take {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() > PRUNE_ABOVE {
            map.retain(|_, b| {
                let mut b2 = *b;
                Self::refill(&mut b2, rate, now);
                b2.tokens < f64::from(rate.burst)
            });
        }
        let b = map
            .entry((policy, key.to_owned()))
            .or_insert_with(|| Bucket {
                tokens: f64::from(rate.burst),
                at: now,
            });
        Self::refill(b, rate, now);
        let needed = cost.max(1.0);
        if b.tokens < needed {
            return Take::Refused {
                wait_seconds: (needed - b.tokens) / rate.per_second,
            };
        }
        b.tokens -= cost;
        Take::Taken {
            remaining: b.tokens,
        }
    }
}

fn retry_after(wait_seconds: f64) -> u64 {
    wait_seconds.ceil().max(1.0) as u64
}

fn state(name: &'static str, rate: Rate, remaining: f64) -> PolicyState {
    PolicyState {
        name,
        rate,
        remaining: remaining.floor().max(0.0) as u32,
        reset_seconds: ((f64::from(rate.burst) - remaining) / rate.per_second)
            .ceil()
            .max(0.0) as u64,
    }
}

impl Service {
    /// Refuses a source that failed authentication too often (`rate_limited` with
    /// `Retry-After`), before its credential is even looked at.
    pub fn check_source(&self, source: &str) -> Result<(), ServiceError> {
        let Some(rate) = self.inner.config.rate_limits.auth_failures else {
            return Ok(());
        };
        match self.inner.buckets.take("auth-failures", source, rate, 0.0) {
            Take::Taken { .. } => Ok(()),
            Take::Refused { wait_seconds } => Err(ServiceError::RateLimited {
                message: "too many failed authentications from this address; wait for Retry-After"
                    .into(),
                retry_after: Some(retry_after(wait_seconds)),
            }),
        }
    }

    /// Records a failed authentication from `source`.
    pub fn authentication_failed(&self, source: &str) {
        if let Some(rate) = self.inner.config.rate_limits.auth_failures {
            let _ = self.inner.buckets.take("auth-failures", source, rate, 1.0);
        }
    }

    /// Counts one request of `caller` made with the API key `key_id` against the per-key and
    /// per-project rates. Refused: `rate_limited` with `Retry-After`, the policies' state
    /// alongside for the headers.
    pub fn admit(
        &self,
        caller: &Caller,
        key_id: &str,
    ) -> Result<Admission, (ServiceError, Admission)> {
        let limits = &self.inner.config.rate_limits;
        let project = caller.project_id().to_string();
        let checks = [
            ("per-key", limits.per_key, key_id),
            ("per-project", limits.per_project, project.as_str()),
        ];
        let mut policies = Vec::new();
        for (name, rate, key) in checks {
            let Some(rate) = rate else { continue };
            match self.inner.buckets.take(name, key, rate, 1.0) {
                Take::Taken { remaining } => policies.push(state(name, rate, remaining)),
                Take::Refused { wait_seconds } => {
                    policies.push(PolicyState {
                        name,
                        rate,
                        remaining: 0,
                        reset_seconds: rate.window_seconds(),
                    });
                    let err = ServiceError::RateLimited {
                        message: format!(
                            "the {name} request rate of this service ({} requests, refilled at {}/s) is exhausted; wait for Retry-After",
                            rate.burst, rate.per_second
                        ),
                        retry_after: Some(retry_after(wait_seconds)),
                    };
                    return Err((err, Admission { policies }));
                }
            }
        }
        Ok(Admission { policies })
    }

    /// Admits one command of `caller` under [`ExecConcurrency`], without waiting: refused,
    /// `rate_limited` with `Retry-After`. The place is held until the permit drops.
    pub(crate) fn admit_exec(&self, caller: &Caller) -> Result<ExecPermit, ServiceError> {
        self.inner
            .exec_slots
            .try_acquire(caller.project_id(), self.inner.config.exec_concurrency)
    }

    /// Commands running now on this replica: `project`'s, or every project's with `None`
    /// (for metrics and tests).
    pub fn execs_running(&self, project: Option<ProjectId>) -> u32 {
        self.inner.exec_slots.running(project)
    }

    /// Refuses a create that would take the project past a live-sandbox quota, before any
    /// provider call. Checked against the registry, so it holds across replicas (creates
    /// racing each other can each see the last free place).
    pub(crate) async fn check_quota(
        &self,
        caller: &Caller,
        provider: Provider,
    ) -> Result<(), ServiceError> {
        let q = &self.inner.config.quotas;
        let per_provider = q.live_sandboxes_per_provider.get(&provider).copied();
        if q.live_sandboxes.is_none() && per_provider.is_none() {
            return Ok(());
        }
        let live = self
            .inner
            .registry
            .count_live_sandboxes(caller.project_id())
            .await
            .map_err(registry_error)?;
        let total: u64 = live.values().sum();
        let on_provider = live.get(&provider).copied().unwrap_or(0);
        let refuse = |what: String, limit: u64| ServiceError::RateLimited {
            message: format!(
                "quota reached: the project has {what} live sandboxes, the most this service allows ({limit}); delete one first"
            ),
            // Only a polling hint: the quota frees when a sandbox is deleted.
            retry_after: Some(QUOTA_RETRY_AFTER_SECONDS),
        };
        if let Some(limit) = q.live_sandboxes
            && total >= limit
        {
            return Err(refuse(total.to_string(), limit));
        }
        if let Some(limit) = per_provider
            && on_provider >= limit
        {
            return Err(refuse(format!("{on_provider} `{provider}`"), limit));
        }
        Ok(())
    }
}
