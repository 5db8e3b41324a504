//! E2B's control API: create (answers once the sandbox runs), connect (resuming a paused
//! sandbox), get, list with metadata and state filters and `nextToken` paging, pause, the
//! legacy resume, kill and set-timeout, over Corral's use cases. A create whose template is
//! a snapshot's id restores it (snapshots and fork: [`crate::snapshots`]).
//!
//! A pause is Corral's stop (on providers whose capabilities allow it) and its state is
//! Corral's: a `stopping`, `stopped` or `paused` sandbox is E2B's `paused`. No timeout runs
//! while paused, as with E2B: the door moves the sandbox's end out of its sweep's reach
//! ([`paused_end`]), and a connect that resumes it gives it a new lifetime.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use corral_domain::TimeoutMode;
use corral_domain::{CreateSandboxRequest, RunCommandInput, Sandbox, SandboxId, SandboxStatus};
use corral_registry::{E2bFilter, E2bRecord, ProjectId};
use corral_service::{Caller, InlineAccess};

use crate::wire::{
    ConnectRequest, NewSandbox, PauseRequest, ResumeRequest, SandboxCreated, SandboxDetail,
    TimeoutRequest,
};
use crate::{DEFAULT_TIMEOUT_SECONDS, E2bError, ENVD_VERSION, FrontDoor, fs};

/// E2B's SDKs read a client id nobody uses; Corral has none.
const CLIENT_ID: &str = "corral";

/// How long a create waits for a `creating` sandbox to run before answering anyway.
pub(crate) const READY_WAIT: Duration = Duration::from_secs(120);

/// The E2B end of a sandbox made through Corral's own API and first seen at this door: in
/// effect none (a century).
const NATIVE_LIFETIME_DAYS: i64 = 36_525;

/// Largest page of `GET /v2/sandboxes` (E2B's own cap).
const MAX_LIMIT: u32 = 100;

/// How many registry pages a list with a `state` filter reads for one answer before it
/// answers a short page with its `nextToken` (the SDK's paginator reads on).
pub(crate) const STATE_SCAN_PAGES: usize = 20;

/// E2B's legacy resume's default lifetime (its description's `ResumedSandbox.timeout`).
const RESUME_DEFAULT_TIMEOUT_SECONDS: u64 = 15;

/// Whether Corral's `status` is E2B's `paused`: stopping, stopped, or asleep at its provider.
pub fn is_paused(status: SandboxStatus) -> bool {
    matches!(
        status,
        SandboxStatus::Stopping | SandboxStatus::Stopped | SandboxStatus::Paused
    )
}

/// E2B's `state` of a sandbox whose Corral status is `status`.
pub fn e2b_state(status: SandboxStatus) -> &'static str {
    if is_paused(status) {
        "paused"
    } else {
        "running"
    }
}

/// The end the door gives a sandbox it pauses: past every end a live sandbox has (the
/// longest, [`NATIVE_LIFETIME_DAYS`] from when it was first seen), so the sweep leaves it and
/// [`is_paused_end`] tells it apart. Not a real end: a connect that resumes it replaces it.
pub fn paused_end(now: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    now + chrono::Duration::days(2 * NATIVE_LIFETIME_DAYS)
}

/// Whether `end` is one [`paused_end`] gave (a century of margin either way).
pub fn is_paused_end(end: chrono::DateTime<Utc>, now: chrono::DateTime<Utc>) -> bool {
    end > now + chrono::Duration::days(NATIVE_LIFETIME_DAYS)
}

/// Which states a list asks for: (running, paused).
fn wanted_states(raw: Option<&str>) -> Result<(bool, bool), E2bError> {
    let Some(raw) = raw.filter(|s| !s.trim().is_empty()) else {
        return Ok((true, true));
    };
    let (mut running, mut paused) = (false, false);
    for s in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match s {
            "running" => running = true,
            "paused" => paused = true,
            other => {
                return Err(E2bError::invalid(format!(
                    "unknown state '{}': running or paused",
                    other.chars().take(40).collect::<String>()
                )));
            }
        }
    }
    Ok((running, paused))
}

/// A create's answer, whether it replayed an earlier one, and where the sandbox is.
#[derive(Debug, Clone)]
pub struct DoorCreated {
    /// E2B's answer.
    pub answer: SandboxCreated,
    /// An `Idempotency-Key` replay (nothing new was made).
    pub replayed: bool,
    /// The sandbox's provider.
    pub provider: corral_domain::Provider,
}

/// `GET /v2/sandboxes`'s query.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// `metadata`: `key=value` pairs joined by `&`, URL-encoded as one parameter.
    pub metadata: Option<String>,
    /// `state`: comma-separated `running`, `paused`.
    pub state: Option<String>,
    /// `limit` (default and cap 100).
    pub limit: Option<u32>,
    /// `nextToken`.
    pub next_token: Option<String>,
    /// `template`: only sandboxes made from this template.
    pub template: Option<String>,
    /// `startedAfter` (RFC 3339): only sandboxes started after it.
    pub started_after: Option<String>,
    /// `order`: `desc` (newest first, the default) or `asc`.
    pub order: Option<String>,
}

fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(crate) fn parse_body<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, E2bError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| E2bError::invalid(format!("request body has an error: {e}")))
}

fn sandbox_id(id: &str) -> Result<SandboxId, E2bError> {
    id.parse().map_err(|_| {
        E2bError::not_found(format!(
            "sandbox '{}' not found",
            id.chars().take(80).collect::<String>()
        ))
    })
}

/// `secs` seconds as a duration (saturating).
pub(crate) fn seconds(secs: u64) -> chrono::Duration {
    chrono::Duration::seconds(i64::try_from(secs).unwrap_or(i64::MAX))
}

pub(crate) fn registry_err(e: corral_registry::RegistryError) -> E2bError {
    E2bError::Service {
        source: corral_service::error::registry_error(e),
    }
}

impl FrontDoor {
    pub(crate) fn check_timeout(&self, timeout: u64) -> Result<u64, E2bError> {
        let max = self.config().max_timeout_seconds;
        if timeout == 0 || timeout > max {
            return Err(E2bError::invalid(format!(
                "timeout must be from 1 to {max} seconds, not {timeout}"
            )));
        }
        Ok(timeout)
    }

    /// Where `template` is made for `project`: the project's own template of that name
    /// (`corral e2b template set`), else the server's ([`crate::E2bConfig::resolve`]).
    async fn resolve_template(
        &self,
        project: ProjectId,
        template: &str,
    ) -> Result<crate::Template, E2bError> {
        let own = self
            .service()
            .registry()
            .e2b_template(project, template)
            .await
            .map_err(registry_err)?;
        match own {
            Some(t) => Ok(crate::Template {
                provider: t.provider,
                image: t.image,
            }),
            None => self.config().resolve(template),
        }
    }

    /// The provider-side lifetime of a door sandbox: the provider's longest, so the door's
    /// own timeout (which can be extended) is what ends it.
    pub(crate) fn provider_lifetime(&self, provider: corral_domain::Provider) -> Option<u64> {
        let catalog = self.service().providers();
        let caps = catalog.providers.iter().find(|c| c.provider == provider)?;
        match caps.timeout_mode {
            TimeoutMode::Seconds => caps.timeout_maximum_seconds,
            TimeoutMode::ProviderManaged => None,
        }
    }

    pub(crate) fn created(&self, caller: &Caller, record: &E2bRecord) -> SandboxCreated {
        SandboxCreated {
            template_id: record.template_id.clone(),
            sandbox_id: record.sandbox_id.to_string(),
            client_id: CLIENT_ID.to_owned(),
            envd_version: ENVD_VERSION.to_owned(),
            envd_access_token: self.access_token(caller, record),
            domain: None,
            alias: record.alias.clone(),
        }
    }

    /// The sandbox's access token for the door's envd side, issued to the caller's API key:
    /// revoking the key ends it. (The door's control side authenticates every caller by an API
    /// key; a caller without one would get a token naming no key, which never opens.)
    fn access_token(&self, caller: &Caller, record: &E2bRecord) -> String {
        self.service().registry().e2b_access_token(
            caller.project_id(),
            caller.key_id().unwrap_or("none"),
            record.sandbox_id,
        )
    }

    fn detail(
        &self,
        caller: &Caller,
        record: &E2bRecord,
        state: &'static str,
        with_token: bool,
    ) -> SandboxDetail {
        SandboxDetail {
            template_id: record.template_id.clone(),
            sandbox_id: record.sandbox_id.to_string(),
            client_id: CLIENT_ID.to_owned(),
            started_at: rfc3339(record.created_at),
            end_at: rfc3339(record.end_at),
            cpu_count: 0,
            memory_mb: 0,
            disk_size_mb: 0,
            state,
            envd_version: ENVD_VERSION.to_owned(),
            metadata: record.metadata.clone(),
            envd_access_token: with_token.then(|| self.access_token(caller, record)),
            domain: None,
            alias: record.alias.clone(),
        }
    }

    /// `POST /sandboxes` and `POST /v2/sandboxes`: 201 once the sandbox runs. With an
    /// `Idempotency-Key` (the v2 SDKs send one), a repeated create answers the same sandbox.
    pub async fn create(
        &self,
        caller: &Caller,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> Result<DoorCreated, E2bError> {
        let new: NewSandbox = serde_json::from_slice(body)
            .map_err(|e| E2bError::invalid(format!("request body has an error: {e}")))?;
        if let Some(what) = new.unsupported() {
            return Err(E2bError::Unsupported {
                message: format!("{what} is not supported by Corral's E2B front door"),
            });
        }
        let timeout = self.check_timeout(new.timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS))?;
        // A snapshot's id is a template, as E2B's snapshots are: the create restores it
        // (the same test as `snapshots::snapshot_template`, which imports this module).
        let request = match new.template_id.parse::<corral_domain::SnapshotId>().ok() {
            Some(snapshot) => {
                self.restorable(caller, snapshot).await?;
                let p = snapshot.provider();
                CreateSandboxRequest::standard(p, None, self.provider_lifetime(p))
                    .restoring(snapshot)
            }
            None => {
                let template = self
                    .resolve_template(caller.project_id(), &new.template_id)
                    .await?;
                CreateSandboxRequest::standard(
                    template.provider,
                    template.image.clone(),
                    self.provider_lifetime(template.provider),
                )
            }
        };
        let created = self
            .service()
            .create(caller, InlineAccess::default(), idempotency_key, request)
            .await?;
        let sandbox: Sandbox = serde_json::from_str(&created.body)
            .map_err(|_| E2bError::invalid("the create's answer could not be read"))?;
        let sandbox = self.wait_running(caller, sandbox).await?;
        let id = sandbox.id.to_string();
        if !created.replayed {
            self.prepare_home(caller, &id).await;
        }
        let now = Utc::now();
        let record = E2bRecord {
            project_id: caller.project_id(),
            sandbox_id: sandbox.id,
            template_id: new.template_id.clone(),
            alias: None,
            metadata: new.metadata.unwrap_or_default(),
            env: new.env_vars.unwrap_or_default(),
            end_at: now + chrono::Duration::seconds(i64::try_from(timeout).unwrap_or(i64::MAX)),
            created_at: now,
        };
        let registry = self.service().registry();
        registry.put_e2b(&record).await.map_err(registry_err)?;
        // A replay answers the record the first create stored.
        let stored = registry
            .get_e2b(caller.project_id(), sandbox.id)
            .await
            .map_err(registry_err)?
            .unwrap_or(record);
        Ok(DoorCreated {
            answer: self.created(caller, &stored),
            replayed: created.replayed,
            provider: sandbox.provider,
        })
    }

    /// Waits (bounded) until a `creating` sandbox runs; a failed create is an error.
    pub(crate) async fn wait_running(
        &self,
        caller: &Caller,
        sandbox: Sandbox,
    ) -> Result<Sandbox, E2bError> {
        let sandbox = self.wait_settled(caller, sandbox).await?;
        match sandbox.status {
            SandboxStatus::Running | SandboxStatus::Creating => Ok(sandbox),
            other => Err(E2bError::Service {
                source: corral_service::error::ServiceError::internal(format!(
                    "the sandbox is {other} instead of running"
                )),
            }),
        }
    }

    /// Waits (bounded by [`READY_WAIT`]) while the sandbox is on its way somewhere
    /// (`creating`, `starting`, `stopping`); the sandbox as last seen.
    async fn wait_settled(
        &self,
        caller: &Caller,
        mut sandbox: Sandbox,
    ) -> Result<Sandbox, E2bError> {
        let until = tokio::time::Instant::now() + READY_WAIT;
        let mut pause = Duration::from_millis(100);
        while matches!(
            sandbox.status,
            SandboxStatus::Creating | SandboxStatus::Starting | SandboxStatus::Stopping
        ) && tokio::time::Instant::now() < until
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            sandbox = self
                .service()
                .get(caller, InlineAccess::default(), &sandbox.id.to_string())
                .await?;
        }
        Ok(sandbox)
    }

    /// E2B's processes start in the default user's home, and relative paths resolve there;
    /// make sure it exists. Best effort: a sandbox without it still answers absolute paths.
    pub(crate) async fn prepare_home(&self, caller: &Caller, id: &str) {
        let input = RunCommandInput {
            command: format!("mkdir -p {}", fs::shell_quote(fs::HOME)),
            cwd: None,
            env: None,
        };
        match self
            .service()
            .exec(caller, InlineAccess::default(), id, input)
            .await
        {
            Ok(r) if r.exit_code == 0 => {}
            Ok(r) => tracing::warn!(
                sandbox = id,
                exit_code = r.exit_code,
                "could not make the E2B home"
            ),
            Err(e) => tracing::warn!(sandbox = id, error = %e, "could not make the E2B home"),
        }
    }

    /// The door's record of a live sandbox (running or paused) and its Corral status, the
    /// record made on first use for a sandbox created through Corral's own API (its template
    /// is then its provider), so any of the project's sandboxes can be connected to. Deleted
    /// or ended sandboxes are not found.
    pub(crate) async fn live_record(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(E2bRecord, SandboxStatus), E2bError> {
        let sid = sandbox_id(id)?;
        let sandbox = self
            .service()
            .get(caller, InlineAccess::default(), id)
            .await?;
        if sandbox.deleted_at.is_some()
            || !(matches!(
                sandbox.status,
                SandboxStatus::Running | SandboxStatus::Creating | SandboxStatus::Starting
            ) || is_paused(sandbox.status))
        {
            return Err(E2bError::not_found(format!("sandbox '{sid}' not found")));
        }
        let registry = self.service().registry();
        if let Some(r) = registry
            .get_e2b(caller.project_id(), sid)
            .await
            .map_err(registry_err)?
        {
            if self.end_if_due(caller, &r).await? {
                return Err(E2bError::not_found(format!(
                    "sandbox '{sid}' reached the end of its timeout"
                )));
            }
            return Ok((r, sandbox.status));
        }
        let now = Utc::now();
        let record = E2bRecord {
            project_id: caller.project_id(),
            sandbox_id: sid,
            template_id: sandbox.provider.to_string(),
            alias: None,
            metadata: BTreeMap::new(),
            env: BTreeMap::new(),
            // Made through Corral's own API: it keeps its own lifetime until an E2B call
            // sets a timeout (connect never shortens this one).
            end_at: now + chrono::Duration::days(NATIVE_LIFETIME_DAYS),
            created_at: now,
        };
        registry.put_e2b(&record).await.map_err(registry_err)?;
        let record = registry
            .get_e2b(caller.project_id(), sid)
            .await
            .map_err(registry_err)?
            .unwrap_or(record);
        Ok((record, sandbox.status))
    }

    /// Resumes a paused sandbox (Corral's resume) and waits until it runs; a `stopping` one
    /// is first let stop. The provider's refusal (no stop and resume) is E2B's 400.
    async fn resume_running(&self, caller: &Caller, id: &str) -> Result<(), E2bError> {
        let sandbox = self
            .service()
            .get(caller, InlineAccess::default(), id)
            .await?;
        let mut sandbox = self.wait_settled(caller, sandbox).await?;
        if is_paused(sandbox.status) {
            let resumed = self
                .service()
                .resume(caller, InlineAccess::default(), id)
                .await?;
            sandbox = self.wait_settled(caller, resumed).await?;
        }
        match sandbox.status {
            SandboxStatus::Running => Ok(()),
            other => Err(E2bError::Service {
                source: corral_service::error::ServiceError::ProviderUnavailable {
                    message: format!("sandbox '{id}' is {other} instead of running"),
                    retry_after: Some(5),
                },
            }),
        }
    }

    /// Sets the door's end of `record` to `end`.
    async fn set_end(
        &self,
        caller: &Caller,
        record: &mut E2bRecord,
        end: chrono::DateTime<Utc>,
    ) -> Result<(), E2bError> {
        self.service()
            .registry()
            .set_e2b_end(caller.project_id(), record.sandbox_id, end)
            .await
            .map_err(registry_err)?;
        record.end_at = end;
        Ok(())
    }

    /// `POST /sandboxes/{id}/pause`: Corral's stop, answered once the sandbox is stopped
    /// (E2B's 204). A paused sandbox is E2B's 409; a provider without stop and resume is
    /// refused (400) before anything is changed. Its running commands end with it.
    pub async fn pause(&self, caller: &Caller, id: &str, body: &[u8]) -> Result<(), E2bError> {
        let _: PauseRequest = parse_body(body)?;
        let (mut record, status) = self.live_record(caller, id).await?;
        if is_paused(status) {
            return Err(E2bError::Conflict {
                message: format!("sandbox '{}' is already paused", record.sandbox_id),
            });
        }
        let stopping = self
            .service()
            .stop(caller, InlineAccess::default(), id)
            .await?;
        // No timeout runs while it is paused, as with E2B's.
        self.set_end(caller, &mut record, paused_end(Utc::now()))
            .await?;
        let settled = self.wait_settled(caller, stopping).await?;
        if is_paused(settled.status) {
            Ok(())
        } else {
            Err(E2bError::Service {
                source: corral_service::error::ServiceError::internal(format!(
                    "the sandbox is {} instead of paused",
                    settled.status
                )),
            })
        }
    }

    /// `POST /sandboxes/{id}/resume` (E2B's legacy resume, deprecated for connect): resumes a
    /// paused sandbox for `timeout` seconds (default 15); a running one is E2B's 409.
    pub async fn resume(
        &self,
        caller: &Caller,
        id: &str,
        body: &[u8],
    ) -> Result<SandboxCreated, E2bError> {
        let req: ResumeRequest = parse_body(body)?;
        if req.auto_pause == Some(true) {
            return Err(E2bError::Unsupported {
                message: "autoPause is not supported by Corral's E2B front door".into(),
            });
        }
        let timeout = self.check_timeout(req.timeout.unwrap_or(RESUME_DEFAULT_TIMEOUT_SECONDS))?;
        let (mut record, status) = self.live_record(caller, id).await?;
        if !is_paused(status) {
            return Err(E2bError::Conflict {
                message: format!("sandbox '{}' is already running", record.sandbox_id),
            });
        }
        self.resume_running(caller, id).await?;
        let end = Utc::now() + seconds(timeout);
        self.set_end(caller, &mut record, end).await?;
        Ok(self.created(caller, &record))
    }

    /// `POST /sandboxes/{id}/connect` (and v2): the sandbox's token, its timeout extended to
    /// at least `timeout` from now (E2B's rule: connect never shortens it). A paused sandbox
    /// is resumed first (answered once it runs) and lives `timeout` seconds (default 300)
    /// from now; whether it was resumed (E2B's 201, else 200).
    pub async fn connect(
        &self,
        caller: &Caller,
        id: &str,
        body: &[u8],
    ) -> Result<(SandboxCreated, bool), E2bError> {
        let req: ConnectRequest = parse_body(body)?;
        let timeout = req.timeout.map(|t| self.check_timeout(t)).transpose()?;
        let (mut record, status) = self.live_record(caller, id).await?;
        let resumed = is_paused(status);
        if resumed {
            self.resume_running(caller, id).await?;
        }
        let now = Utc::now();
        // A sandbox the door paused (resumed now, or elsewhere since) starts a new lifetime.
        let end = if resumed || is_paused_end(record.end_at, now) {
            Some(now + seconds(timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS)))
        } else {
            timeout
                .map(|t| now + seconds(t))
                .filter(|end| *end > record.end_at)
        };
        if let Some(end) = end {
            self.set_end(caller, &mut record, end).await?;
        }
        Ok((self.created(caller, &record), resumed))
    }

    /// `GET /sandboxes/{id}`: `running` or `paused`.
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<SandboxDetail, E2bError> {
        let (record, status) = self.live_record(caller, id).await?;
        Ok(self.detail(caller, &record, e2b_state(status), true))
    }

    /// Corral's status of a door sandbox, from the registry (no provider call); an unknown
    /// one reads as running, as the door listed every sandbox before pauses existed.
    async fn status_of(
        &self,
        project: ProjectId,
        sandbox: SandboxId,
    ) -> Result<SandboxStatus, E2bError> {
        Ok(self
            .service()
            .registry()
            .sandbox(project, sandbox)
            .await
            .map_err(registry_err)?
            .map_or(SandboxStatus::Running, |r| r.status))
    }

    /// `GET /v2/sandboxes`: the project's running door sandboxes, newest first, with every
    /// metadata pair asked for; the next page's token when more may follow.
    pub async fn list(
        &self,
        caller: &Caller,
        query: &ListQuery,
    ) -> Result<(Vec<SandboxDetail>, Option<String>), E2bError> {
        let limit = query.limit.unwrap_or(MAX_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(E2bError::invalid(format!(
                "limit must be from 1 to {MAX_LIMIT}"
            )));
        }
        let (want_running, want_paused) = wanted_states(query.state.as_deref())?;
        let started_after = query
            .started_after
            .as_deref()
            .map(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| E2bError::invalid("startedAfter must be an RFC 3339 time"))
            })
            .transpose()?;
        let oldest_first = match query.order.as_deref() {
            None | Some("" | "desc") => false,
            Some("asc") => true,
            Some(other) => {
                return Err(E2bError::invalid(format!(
                    "order must be asc or desc, not '{}'",
                    other.chars().take(20).collect::<String>()
                )));
            }
        };
        let filter = E2bFilter {
            metadata: parse_metadata_filter(query.metadata.as_deref())?,
            template: query.template.clone().filter(|t| !t.is_empty()),
            started_after,
            oldest_first,
        };
        let project = caller.project_id();
        let mut cursor = query.next_token.clone();
        // The state is Corral's status, not the door's record: a page is filtered after it
        // is read, and pages that keep nothing are read past (up to STATE_SCAN_PAGES).
        for _ in 0..STATE_SCAN_PAGES {
            let page = self
                .service()
                .registry()
                .list_e2b_matching(project, &filter, limit, cursor.as_deref())
                .await
                .map_err(|e| match e {
                    corral_registry::RegistryError::InvalidCursor => {
                        E2bError::invalid("nextToken is not one this server gave")
                    }
                    e => registry_err(e),
                })?;
            let mut items = Vec::with_capacity(page.records.len());
            for r in &page.records {
                let paused = is_paused(self.status_of(project, r.sandbox_id).await?);
                if (paused && want_paused) || (!paused && want_running) {
                    let state = if paused { "paused" } else { "running" };
                    items.push(self.detail(caller, r, state, false));
                }
            }
            if !items.is_empty() || page.next.is_none() {
                return Ok((items, page.next));
            }
            cursor = page.next;
        }
        Ok((Vec::new(), cursor))
    }

    /// `DELETE /sandboxes/{id}`: 204; an unknown or already deleted sandbox is not found.
    /// The provider it was on, for the audit log.
    pub async fn kill(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<corral_domain::Provider, E2bError> {
        let sid = sandbox_id(id)?;
        let before = self
            .service()
            .get(caller, InlineAccess::default(), id)
            .await?;
        if before.deleted_at.is_some() {
            return Err(E2bError::not_found(format!("sandbox '{sid}' not found")));
        }
        self.end_sandbox(caller, sid).await?;
        Ok(before.provider)
    }

    /// `POST /sandboxes/{id}/timeout`: the sandbox ends `timeout` seconds from now (shorter
    /// or longer than before).
    pub async fn set_timeout(
        &self,
        caller: &Caller,
        id: &str,
        body: &[u8],
    ) -> Result<(), E2bError> {
        let req: TimeoutRequest = serde_json::from_slice(body)
            .map_err(|e| E2bError::invalid(format!("request body has an error: {e}")))?;
        let t = self.check_timeout(req.timeout)?;
        let (mut record, status) = self.live_record(caller, id).await?;
        // A paused sandbox has no timeout running; the connect that resumes it sets one.
        if is_paused(status) {
            return Err(E2bError::Conflict {
                message: format!(
                    "sandbox '{}' is paused: connect resumes it with a timeout",
                    record.sandbox_id
                ),
            });
        }
        self.set_end(caller, &mut record, Utc::now() + seconds(t))
            .await
    }

    /// Ends the door's sandboxes whose timeout has passed (at most `limit`); how many.
    pub async fn sweep_once(&self, limit: u32) -> Result<usize, E2bError> {
        let due = self
            .service()
            .registry()
            .due_e2b(Utc::now(), limit)
            .await
            .map_err(registry_err)?;
        let mut ended = 0;
        for (project, sandbox) in due {
            let caller = Caller::trusted(project);
            match self.end_sandbox(&caller, sandbox).await {
                Ok(()) => ended += 1,
                Err(e) => {
                    tracing::warn!(%sandbox, error = %e, "could not end an E2B sandbox past its timeout")
                }
            }
        }
        Ok(ended)
    }
}

/// `metadata=k1%3Dv1%26k2%3Dv2` (one parameter holding a query string) as pairs.
fn parse_metadata_filter(raw: Option<&str>) -> Result<BTreeMap<String, String>, E2bError> {
    let mut out = BTreeMap::new();
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Ok(out);
    };
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k)?, percent_decode(v)?);
        if k.is_empty() {
            return Err(E2bError::invalid("metadata filter keys must not be empty"));
        }
        out.insert(k, v);
    }
    Ok(out)
}

/// Decodes `%XX` and `+` of a form-encoded component.
fn percent_decode(s: &str) -> Result<String, E2bError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| E2bError::invalid("malformed percent-encoding in metadata"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| E2bError::invalid("metadata filter is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metadata_filter_is_one_form_encoded_parameter() {
        // The web layer decodes the parameter once; what is left is `k=v&k=v`, whose parts
        // may be encoded again.
        let f = parse_metadata_filter(Some("env=prod+eu&empty=")).unwrap();
        assert_eq!(f["env"], "prod eu");
        assert_eq!(f["empty"], "");
        let f = parse_metadata_filter(Some("user=alice&team=a%26b")).unwrap();
        assert_eq!(f["user"], "alice");
        assert_eq!(f["team"], "a&b");
        assert!(parse_metadata_filter(Some("=x")).is_err());
        assert!(parse_metadata_filter(Some("k=%zz")).is_err());
        assert!(parse_metadata_filter(None).unwrap().is_empty());
    }

    #[test]
    fn a_stopping_stopped_or_asleep_sandbox_is_e2bs_paused() {
        for status in SandboxStatus::ALL {
            let want = matches!(
                status,
                SandboxStatus::Stopping | SandboxStatus::Stopped | SandboxStatus::Paused
            );
            assert_eq!(is_paused(status), want, "{status}");
            assert_eq!(e2b_state(status), if want { "paused" } else { "running" });
        }
    }

    #[test]
    fn a_paused_end_is_past_every_live_end_and_told_apart() {
        let now = Utc::now();
        assert!(is_paused_end(paused_end(now), now));
        // Still told apart long after the pause.
        let later = now + chrono::Duration::days(NATIVE_LIFETIME_DAYS - 1);
        assert!(is_paused_end(paused_end(now), later));
        // A native sandbox's end (its lifetime from first sight) and an E2B timeout are not.
        let native = now + chrono::Duration::days(NATIVE_LIFETIME_DAYS);
        assert!(!is_paused_end(native, now));
        assert!(!is_paused_end(now + seconds(86_400), now));
    }

    #[test]
    fn a_list_asks_for_running_paused_or_both() {
        assert_eq!(wanted_states(None).unwrap(), (true, true));
        assert_eq!(wanted_states(Some("")).unwrap(), (true, true));
        assert_eq!(wanted_states(Some("paused")).unwrap(), (false, true));
        assert_eq!(wanted_states(Some("running")).unwrap(), (true, false));
        assert_eq!(
            wanted_states(Some("running, paused")).unwrap(),
            (true, true)
        );
        let e = wanted_states(Some("running,asleep")).unwrap_err();
        assert_eq!(e.http_status(), 400);
        assert!(e.to_string().contains("asleep"), "{e}");
    }
}
