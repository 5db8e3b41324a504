//! Webhook endpoints (URL, event types, a sealed signing secret with rotation overlap) and
//! their delivery outbox: one row per (endpoint, event), queued in the event's own
//! transaction by [`crate::events::append_event`], claimed by one replica at a time under a
//! lease, and attempted until delivered or dead.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use base64::Engine as _;
use corral_domain::{DeliveryState, EventType, Timestamp, Webhook, WebhookDelivery};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use secrecy::{ExposeSecret as _, SecretString};
use ulid::Ulid;

use crate::db::{from_micros, run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::ProjectId;
use crate::registry::Registry;
use crate::schema::{webhook_deliveries as wd, webhook_endpoints as we};
use crate::secret::random_fill;

/// Webhook endpoints a project may have.
pub const MAX_WEBHOOKS_PER_PROJECT: i64 = 16;

/// A fresh ULID greater than every earlier one of this process: endpoints made at the same
/// stored time (a fast sequence, a test's manual clock) still list in the order they were
/// made (listing orders by time, then id).
fn next_ulid() -> Ulid {
    static IDS: std::sync::Mutex<Option<ulid::Generator>> = std::sync::Mutex::new(None);
    let mut ids = IDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ids.get_or_insert_with(ulid::Generator::new)
        .generate()
        // Only when 2^80 ids were made in one millisecond: any fresh id will do then.
        .unwrap_or_else(|_| Ulid::generate())
}

fn secret_aad(id: &str) -> Vec<u8> {
    format!("corral/webhook-secret/v1\0{id}").into_bytes()
}

fn corrupt(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: format!("stored webhook {what} cannot be read"),
    }
}

/// The stored form of a type filter: `*`, or each type with a space on both sides.
fn types_column(types: &[EventType]) -> String {
    if types.is_empty() {
        "*".to_owned()
    } else {
        let mut s = String::from(" ");
        for t in types {
            s.push_str(t.as_str());
            s.push(' ');
        }
        s
    }
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = we)]
struct EndpointRow {
    id: String,
    project_id: String,
    url: String,
    types: String,
    secret: Vec<u8>,
    previous_secret: Option<Vec<u8>>,
    previous_until: Option<i64>,
    created_at: i64,
    deleted_at: Option<i64>,
}

impl EndpointRow {
    fn to_webhook(&self) -> Result<Webhook> {
        let types = if self.types == "*" {
            Vec::new()
        } else {
            self.types
                .split_whitespace()
                .map(|t| t.parse::<EventType>().map_err(|_| corrupt("type")))
                .collect::<Result<_>>()?
        };
        Ok(Webhook {
            id: self.id.clone(),
            url: self.url.clone(),
            types,
            created_at: from_micros(self.created_at)?,
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = wd)]
struct DeliveryRow {
    id: String,
    endpoint_id: String,
    project_id: String,
    event_seq: i64,
    state: String,
    attempts: i32,
    next_attempt_at: i64,
    last_status: Option<i32>,
    last_error: Option<String>,
    created_at: i64,
}

/// A delivery as the dispatcher works on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The `webhook-id`.
    pub id: String,
    /// The endpoint it goes to.
    pub endpoint_id: String,
    /// The project whose event it is.
    pub project_id: ProjectId,
    /// The event's id in the project's log.
    pub event_seq: u64,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The wire form.
    pub delivery: WebhookDelivery,
}

impl DeliveryRow {
    fn into_record(self) -> Result<DeliveryRecord> {
        let state = DeliveryState::parse(&self.state).ok_or_else(|| corrupt("state"))?;
        let seq = u64::try_from(self.event_seq).map_err(|_| corrupt("event"))?;
        let attempts = u32::try_from(self.attempts).map_err(|_| corrupt("attempts"))?;
        Ok(DeliveryRecord {
            id: self.id.clone(),
            endpoint_id: self.endpoint_id,
            project_id: crate::rows::parse_project_id(&self.project_id)?,
            event_seq: seq,
            attempts,
            delivery: WebhookDelivery {
                id: self.id,
                event_id: seq,
                state,
                attempts,
                next_attempt_at: if state == DeliveryState::Pending {
                    Some(from_micros(self.next_attempt_at)?)
                } else {
                    None
                },
                last_status: self.last_status.and_then(|s| u16::try_from(s).ok()),
                last_error: self.last_error,
                created_at: from_micros(self.created_at)?,
            },
        })
    }
}

/// Where an endpoint is and the secrets that sign for it now (the current one first; the
/// previous one too while its rotation overlap lasts).
pub struct EndpointTarget {
    /// The URL.
    pub url: String,
    /// `whsec_…` secrets, current first.
    pub secrets: Vec<SecretString>,
}

/// An endpoint's circuit breaker, as the dispatcher configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitPolicy {
    /// Consecutive failed attempts that open the circuit.
    pub failures: u32,
    /// How long it stays open the first time; doubled at each reopening.
    pub open: Duration,
    /// The longest it stays open.
    pub max_open: Duration,
}

/// What one fair claim may take (see [`Registry::claim_deliveries_fairly`]).
#[derive(Debug, Clone)]
pub struct FairClaim<'a> {
    /// Who claims (a replica's name).
    pub owner: &'a str,
    /// How long the claimed deliveries stay `owner`'s.
    pub lease: Duration,
    /// Deliveries to claim, at most.
    pub limit: u32,
    /// Deliveries to one endpoint `owner` may have in flight, at most.
    pub per_endpoint: u32,
    /// Deliveries for one project `owner` may have in flight, at most.
    pub per_project: u32,
    /// What `owner` has in flight now, per endpoint id.
    pub in_flight_endpoints: &'a HashMap<String, u32>,
    /// What `owner` has in flight now, per project.
    pub in_flight_projects: &'a HashMap<ProjectId, u32>,
    /// Consecutive failures past which an endpoint's circuit counts as tripped: once it is
    /// no longer open, one probe at a time.
    pub circuit_failures: u32,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// 2xx.
    Delivered {
        /// The status received.
        status: u16,
    },
    /// Anything else; `retry_at` when another attempt is due, `None` when given up (dead).
    Failed {
        /// The status received, if any.
        status: Option<u16>,
        /// Why (no secrets: a status line or a transport error's kind).
        error: String,
        /// When to try again, if ever.
        retry_at: Option<Timestamp>,
    },
}

fn new_secret() -> Result<SecretString> {
    let mut bytes = [0u8; 32];
    random_fill(&mut bytes)?;
    Ok(SecretString::from(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )))
}

impl Registry {
    /// Makes a webhook endpoint for `project` with a fresh secret (returned once, stored
    /// sealed). `Conflict` past [`MAX_WEBHOOKS_PER_PROJECT`].
    pub async fn create_webhook(
        &self,
        project: ProjectId,
        url: &str,
        types: &[EventType],
    ) -> Result<(Webhook, SecretString)> {
        let id = format!("whe_{}", next_ulid().to_string().to_ascii_lowercase());
        let secret = new_secret()?;
        let row = EndpointRow {
            id: id.clone(),
            project_id: project.to_string(),
            url: url.to_owned(),
            types: types_column(types),
            secret: self.key.seal(&secret_aad(&id), &secret)?,
            previous_secret: None,
            previous_until: None,
            created_at: to_micros(self.db.now()),
            deleted_at: None,
        };
        let webhook = row.to_webhook()?;
        let p = project.to_string();
        run!(self, |c| {
            let live: i64 = we::table
                .filter(we::project_id.eq(&p))
                .filter(we::deleted_at.is_null())
                .count()
                .get_result(c)
                .await
                .map_err(db_error)?;
            if live >= MAX_WEBHOOKS_PER_PROJECT {
                return Err(RegistryError::Conflict {
                    what: "webhook endpoints (at most 16 per project)",
                });
            }
            diesel::insert_into(we::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok((webhook, secret))
    }

    async fn live_endpoint(&self, project: ProjectId, id: &str) -> Result<EndpointRow> {
        let (p, i) = (project.to_string(), id.to_owned());
        let row: Option<EndpointRow> = run!(self, |c| {
            we::table
                .filter(we::project_id.eq(&p))
                .filter(we::id.eq(&i))
                .filter(we::deleted_at.is_null())
                .select(EndpointRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.ok_or(RegistryError::NotFound { what: "webhook" })
    }

    /// The project's live endpoints, oldest first.
    pub async fn list_webhooks(&self, project: ProjectId) -> Result<Vec<Webhook>> {
        let p = project.to_string();
        let rows: Vec<EndpointRow> = run!(self, |c| {
            we::table
                .filter(we::project_id.eq(&p))
                .filter(we::deleted_at.is_null())
                .order((we::created_at.asc(), we::id.asc()))
                .select(EndpointRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.iter().map(EndpointRow::to_webhook).collect()
    }

    /// Removes an endpoint: nothing more is queued for it and its pending deliveries go dead.
    /// `NotFound` when it is not the project's (or already removed).
    pub async fn delete_webhook(&self, project: ProjectId, id: &str) -> Result<Webhook> {
        let row = self.live_endpoint(project, id).await?;
        let now = to_micros(self.db.now());
        let i = id.to_owned();
        run!(self, |c| {
            diesel::update(we::table.filter(we::id.eq(&i)))
                .set(we::deleted_at.eq(Some(now)))
                .execute(c)
                .await
                .map_err(db_error)?;
            diesel::update(
                wd::table
                    .filter(wd::endpoint_id.eq(&i))
                    .filter(wd::state.eq(DeliveryState::Pending.as_str())),
            )
            .set((
                wd::state.eq(DeliveryState::Dead.as_str()),
                wd::last_error.eq(Some("the endpoint was removed")),
                wd::updated_at.eq(now),
            ))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        row.to_webhook()
    }

    /// A new secret for an endpoint; the previous one keeps signing for `overlap`.
    pub async fn rotate_webhook_secret(
        &self,
        project: ProjectId,
        id: &str,
        overlap: Duration,
    ) -> Result<(Webhook, SecretString)> {
        let row = self.live_endpoint(project, id).await?;
        let secret = new_secret()?;
        let sealed = self.key.seal(&secret_aad(id), &secret)?;
        let until = to_micros(self.db.now())
            .saturating_add(i64::try_from(overlap.as_micros()).unwrap_or(i64::MAX));
        let (i, previous) = (id.to_owned(), row.secret.clone());
        run!(self, |c| {
            diesel::update(we::table.filter(we::id.eq(&i)))
                .set((
                    we::secret.eq(&sealed),
                    we::previous_secret.eq(Some(&previous)),
                    we::previous_until.eq(Some(until)),
                ))
                .execute(c)
                .await
                .map_err(db_error)
        })?;
        Ok((row.to_webhook()?, secret))
    }

    /// Where endpoint `id` is and the secrets that sign for it now; `None` once removed.
    pub async fn webhook_target(&self, id: &str) -> Result<Option<EndpointTarget>> {
        let i = id.to_owned();
        let row: Option<EndpointRow> = run!(self, |c| {
            we::table
                .filter(we::id.eq(&i))
                .filter(we::deleted_at.is_null())
                .select(EndpointRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        let Some(row) = row else { return Ok(None) };
        let aad = secret_aad(&row.id);
        let mut secrets = vec![self.key.open(&aad, &row.secret)?];
        let now = to_micros(self.db.now());
        if let (Some(prev), Some(until)) = (&row.previous_secret, row.previous_until)
            && now < until
        {
            secrets.push(self.key.open(&aad, prev)?);
        }
        Ok(Some(EndpointTarget {
            url: row.url,
            secrets,
        }))
    }

    /// Claims up to `limit` due deliveries for `owner` until `lease` from now: each is taken
    /// by one conditional update, so two replicas never hold the same delivery. No share
    /// limits besides `limit`; deliveries of an endpoint whose circuit is open wait.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>> {
        let none = HashMap::new();
        self.claim_deliveries_fairly(&FairClaim {
            owner,
            lease,
            limit,
            per_endpoint: limit,
            per_project: limit,
            in_flight_endpoints: &none,
            in_flight_projects: &HashMap::new(),
            circuit_failures: u32::MAX,
        })
        .await
    }

    /// Claims due deliveries as [`Registry::claim_deliveries`] does, within the shares of
    /// `claim`: none of an endpoint whose circuit is open (or whose probe is out), one (the
    /// probe, reserved for every replica) of an endpoint whose circuit is half-open, and no
    /// more per endpoint or per project than their share minus what `owner` already has in
    /// flight. Endpoints and projects at their share are left out of the query itself, so a
    /// busy project's backlog never hides another project's due deliveries.
    pub async fn claim_deliveries_fairly(
        &self,
        claim: &FairClaim<'_>,
    ) -> Result<Vec<DeliveryRecord>> {
        let now = to_micros(self.db.now());
        let until = now.saturating_add(i64::try_from(claim.lease.as_micros()).unwrap_or(i64::MAX));
        let owner = claim.owner.to_owned();
        let limit = usize::try_from(claim.limit.max(1)).unwrap_or(usize::MAX);
        let window = i64::from(claim.limit.max(16)).saturating_mul(4);
        let (per_endpoint, per_project) = (claim.per_endpoint.max(1), claim.per_project.max(1));
        let threshold = i32::try_from(claim.circuit_failures).unwrap_or(i32::MAX);
        let mut endpoints: HashMap<String, u32> = claim.in_flight_endpoints.clone();
        let mut projects: HashMap<String, u32> = claim
            .in_flight_projects
            .iter()
            .map(|(p, n)| (p.to_string(), *n))
            .collect();
        let full_endpoints: Vec<String> = endpoints
            .iter()
            .filter(|(_, n)| **n >= per_endpoint)
            .map(|(e, _)| e.clone())
            .collect();
        let full_projects: Vec<String> = projects
            .iter()
            .filter(|(_, n)| **n >= per_project)
            .map(|(p, _)| p.clone())
            .collect();
        let rows: Vec<DeliveryRow> = run!(self, |c| {
            let open = we::table
                .filter(we::open_until.gt(now).or(we::probe_until.gt(now)))
                .select(we::id);
            let due: Vec<(String, String, String)> = wd::table
                .filter(wd::state.eq(DeliveryState::Pending.as_str()))
                .filter(wd::next_attempt_at.le(now))
                .filter(wd::lease_until.is_null().or(wd::lease_until.lt(now)))
                .filter(wd::endpoint_id.ne_all(&full_endpoints))
                .filter(wd::project_id.ne_all(&full_projects))
                .filter(wd::endpoint_id.ne_all(open))
                .order((wd::next_attempt_at.asc(), wd::id.asc()))
                .limit(window)
                .select((wd::id, wd::endpoint_id, wd::project_id))
                .load(c)
                .await
                .map_err(db_error)?;
            let mut named: Vec<&String> = due.iter().map(|(_, e, _)| e).collect();
            named.sort_unstable();
            named.dedup();
            // Endpoints past the threshold whose circuit is no longer open: half-open.
            let half_open: HashSet<String> = we::table
                .filter(we::id.eq_any(named))
                .filter(we::consecutive_failures.ge(threshold))
                .select(we::id)
                .load::<String>(c)
                .await
                .map_err(db_error)?
                .into_iter()
                .collect();
            let mut taken = Vec::new();
            for (id, endpoint, project) in due {
                if taken.len() >= limit {
                    break;
                }
                let probe = half_open.contains(&endpoint);
                let endpoint_share = if probe { 1 } else { per_endpoint };
                let (e, p) = (
                    endpoints.get(&endpoint).copied().unwrap_or(0),
                    projects.get(&project).copied().unwrap_or(0),
                );
                if e >= endpoint_share || p >= per_project {
                    continue;
                }
                if probe {
                    // One probe for every replica: whoever sets `probe_until` first sends it.
                    let reserved = diesel::update(
                        we::table
                            .filter(we::id.eq(&endpoint))
                            .filter(we::open_until.is_null().or(we::open_until.le(now)))
                            .filter(we::probe_until.is_null().or(we::probe_until.le(now))),
                    )
                    .set(we::probe_until.eq(Some(until)))
                    .execute(c)
                    .await
                    .map_err(db_error)?;
                    if reserved == 0 {
                        endpoints.insert(endpoint, u32::MAX);
                        continue;
                    }
                }
                let row: Option<DeliveryRow> = diesel::update(
                    wd::table
                        .filter(wd::id.eq(&id))
                        .filter(wd::state.eq(DeliveryState::Pending.as_str()))
                        .filter(wd::lease_until.is_null().or(wd::lease_until.lt(now))),
                )
                .set((wd::owner.eq(Some(&owner)), wd::lease_until.eq(Some(until))))
                .returning(DeliveryRow::as_returning())
                .get_result(c)
                .await
                .optional()
                .map_err(db_error)?;
                match row {
                    Some(row) => {
                        *endpoints.entry(endpoint).or_default() += 1;
                        *projects.entry(project).or_default() += 1;
                        taken.push(row);
                    }
                    None if probe => {
                        // Another replica took the delivery: the probe is not out after all.
                        diesel::update(
                            we::table
                                .filter(we::id.eq(&endpoint))
                                .filter(we::probe_until.eq(Some(until))),
                        )
                        .set(we::probe_until.eq(None::<i64>))
                        .execute(c)
                        .await
                        .map_err(db_error)?;
                    }
                    None => {}
                }
            }
            Ok::<_, RegistryError>(taken)
        })?;
        rows.into_iter().map(DeliveryRow::into_record).collect()
    }

    /// Feeds an attempt's result to endpoint `id`'s circuit: a delivered attempt closes it;
    /// a failed one counts, and at `policy.failures` in a row opens it (again, after a failed
    /// probe) for `policy.open`, doubled at each reopening up to `policy.max_open`. Returns
    /// when it opened the circuit until, if it did.
    pub async fn record_circuit(
        &self,
        id: &str,
        delivered: bool,
        policy: &CircuitPolicy,
    ) -> Result<Option<Timestamp>> {
        let now = to_micros(self.db.now());
        let i = id.to_owned();
        if delivered {
            run!(self, |c| {
                diesel::update(
                    we::table.filter(we::id.eq(&i)).filter(
                        we::consecutive_failures
                            .gt(0)
                            .or(we::open_until.is_not_null())
                            .or(we::probe_until.is_not_null()),
                    ),
                )
                .set((
                    we::consecutive_failures.eq(0),
                    we::circuit_opens.eq(0),
                    we::open_until.eq(None::<i64>),
                    we::probe_until.eq(None::<i64>),
                ))
                .execute(c)
                .await
                .map_err(db_error)
            })?;
            return Ok(None);
        }
        let threshold = i32::try_from(policy.failures).unwrap_or(i32::MAX);
        let (open, max_open) = (policy.open, policy.max_open);
        let opened: Option<i64> = run!(self, |c| {
            let counted: Option<(i32, i32, Option<i64>)> =
                diesel::update(we::table.filter(we::id.eq(&i)))
                    .set(we::consecutive_failures.eq(we::consecutive_failures + 1))
                    .returning((we::consecutive_failures, we::circuit_opens, we::open_until))
                    .get_result(c)
                    .await
                    .optional()
                    .map_err(db_error)?;
            let Some((failures, opens, open_until)) = counted else {
                return Ok::<_, RegistryError>(None);
            };
            // Already open (a second attempt in flight failed too): it stays as it is.
            if failures < threshold || open_until.is_some_and(|u| u > now) {
                return Ok(None);
            }
            let wait = open
                .saturating_mul(1_u32 << opens.clamp(0, 20))
                .min(max_open.max(open));
            let reopen = now.saturating_add(i64::try_from(wait.as_micros()).unwrap_or(i64::MAX));
            let n = diesel::update(
                we::table
                    .filter(we::id.eq(&i))
                    .filter(we::open_until.is_null().or(we::open_until.le(now))),
            )
            .set((
                we::open_until.eq(Some(reopen)),
                we::circuit_opens.eq(opens.saturating_add(1)),
                we::probe_until.eq(None::<i64>),
            ))
            .execute(c)
            .await
            .map_err(db_error)?;
            Ok((n > 0).then_some(reopen))
        })?;
        opened.map(from_micros).transpose()
    }

    /// Records an attempt of delivery `id` by `owner` and releases its lease. `false` when
    /// `owner` no longer held it (another replica took it over; its own outcome stands).
    pub async fn record_attempt(
        &self,
        id: &str,
        owner: &str,
        outcome: &AttemptOutcome,
    ) -> Result<bool> {
        let now = to_micros(self.db.now());
        let (id, owner) = (id.to_owned(), owner.to_owned());
        let (state, status, error, next) = match outcome {
            AttemptOutcome::Delivered { status } => {
                (DeliveryState::Delivered, Some(*status), None, now)
            }
            AttemptOutcome::Failed {
                status,
                error,
                retry_at,
            } => (
                if retry_at.is_some() {
                    DeliveryState::Pending
                } else {
                    DeliveryState::Dead
                },
                *status,
                Some(error.chars().take(300).collect::<String>()),
                retry_at.map_or(now, to_micros),
            ),
        };
        let n = run!(self, |c| {
            diesel::update(
                wd::table
                    .filter(wd::id.eq(&id))
                    .filter(wd::owner.eq(&owner))
                    .filter(wd::state.eq(DeliveryState::Pending.as_str())),
            )
            .set((
                wd::state.eq(state.as_str()),
                wd::attempts.eq(wd::attempts + 1),
                wd::next_attempt_at.eq(next),
                wd::last_status.eq(status.map(i32::from)),
                wd::last_error.eq(&error),
                wd::owner.eq(None::<String>),
                wd::lease_until.eq(None::<i64>),
                wd::updated_at.eq(now),
            ))
            .execute(c)
            .await
            .map_err(db_error)
        })?;
        Ok(n > 0)
    }

    /// Endpoint `id`'s most recent deliveries (at most `limit`), newest first.
    pub async fn list_deliveries(
        &self,
        project: ProjectId,
        id: &str,
        limit: u32,
    ) -> Result<Vec<WebhookDelivery>> {
        let (p, i) = (project.to_string(), id.to_owned());
        let owned: bool = run!(self, |c| {
            diesel::select(diesel::dsl::exists(
                we::table
                    .filter(we::project_id.eq(&p))
                    .filter(we::id.eq(&i)),
            ))
            .get_result(c)
            .await
            .map_err(db_error)
        })?;
        if !owned {
            return Err(RegistryError::NotFound { what: "webhook" });
        }
        let i = id.to_owned();
        let limit = i64::from(limit.clamp(1, 200));
        let rows: Vec<DeliveryRow> = run!(self, |c| {
            wd::table
                .filter(wd::endpoint_id.eq(&i))
                .order((wd::created_at.desc(), wd::event_seq.desc()))
                .limit(limit)
                .select(DeliveryRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter()
            .map(|r| r.into_record().map(|r| r.delivery))
            .collect()
    }
}

/// A secret's bytes for signing: the base64 after `whsec_` (Standard Webhooks' format).
pub fn secret_bytes(secret: &SecretString) -> Option<Vec<u8>> {
    let s = secret.expose_secret();
    base64::engine::general_purpose::STANDARD
        .decode(s.strip_prefix("whsec_").unwrap_or(s))
        .ok()
}
