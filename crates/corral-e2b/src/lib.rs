//! Corral's E2B-compatible front door: E2B's control API (`/sandboxes`, `/v2/sandboxes`) and
//! its in-sandbox daemon API (envd: Connect-RPC `process.Process`, `filesystem.Filesystem`,
//! `/files`, `/health`) answered by Corral's use cases, so the E2B SDKs run unchanged against
//! Corral, on every provider. The user's guide, with every difference from E2B, is
//! `docs/compat/e2b.md`.
//!
//! Framework-free: [`FrontDoor`] takes parsed requests (headers as strings, bodies as bytes)
//! and answers values, byte streams or [`E2bError`]s; `corral-web` only carries them.
//!
//! - Control side ([`control`]): the project API key in `X-API-KEY`; an E2B template names
//!   a provider and image ([`E2bConfig::templates`], or `provider` / `provider:image` as the
//!   template itself); E2B's timeout is kept by the front door ([`FrontDoor::sweep_once`]
//!   ends sandboxes past it), so it can be set and extended on every provider.
//! - envd side ([`process`], [`files`]): every call names its sandbox in `E2b-Sandbox-Id`
//!   and carries the per-sandbox access token the create answered (`X-Access-Token`: an HMAC
//!   of project, sandbox, the API key it was issued to and its end under the server's master
//!   key, so nothing is stored, another project's token never opens it, and revoking the key
//!   or a day passing ends it). Processes are Corral commands (durable jobs); a pid is
//!   a stable 31-bit hash of the command id.
//!
//! Modules, bottom to top: `wire`, `connect`, `connect_code`, `fs`, `error` → `lib` (the door,
//! its config and the callers) → `control`, `snapshots`, `process`, `files`.

pub mod connect;
pub mod connect_code;
pub mod control;
mod error;
pub mod files;
pub mod fs;
pub mod process;
pub mod snapshots;
pub mod wire;

use std::collections::BTreeMap;
use std::str::FromStr;

use corral_domain::{Provider, SandboxId};
use corral_registry::E2bRecord;
use corral_service::{Caller, Service};

pub use error::{E2bError, connect_status};

/// The envd version Corral answers: new enough that the SDKs use the default user, stdin,
/// `CloseStdin` and octet-stream uploads; older than file metadata (0.6.2), which Corral
/// does not store, so the SDK itself refuses `metadata` on writes.
pub const ENVD_VERSION: &str = "0.5.7";

/// E2B's default sandbox timeout, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

/// Where an E2B template's sandboxes are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The provider.
    pub provider: Provider,
    /// The image (the provider's default when absent).
    pub image: Option<String>,
}

/// `[e2b]` in the server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bConfig {
    /// Template names and where their sandboxes are made; `base` → `local` by default.
    pub templates: BTreeMap<String, Template>,
    /// Longest timeout a create or set-timeout may ask for (E2B's own cap: 24 hours).
    pub max_timeout_seconds: u64,
}

impl Default for E2bConfig {
    fn default() -> Self {
        Self {
            templates: BTreeMap::from([(
                "base".to_owned(),
                Template {
                    provider: Provider::Local,
                    image: None,
                },
            )]),
            max_timeout_seconds: 24 * 60 * 60,
        }
    }
}

impl E2bConfig {
    /// Where `template` is made: a configured name; else a provider's name, alone or as
    /// `provider:image`.
    pub fn resolve(&self, template: &str) -> Result<Template, E2bError> {
        if let Some(t) = self.templates.get(template) {
            return Ok(t.clone());
        }
        let (provider, image) = match template.split_once(':') {
            Some((p, image)) if !image.is_empty() => (p, Some(image.to_owned())),
            _ => (template, None),
        };
        let provider = Provider::from_str(provider).map_err(|_| E2bError::NotFound {
            message: format!(
                "template '{}' not found: name a configured template ({}), a provider, or provider:image",
                template.chars().take(80).collect::<String>(),
                self.templates.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        })?;
        Ok(Template { provider, image })
    }
}

/// The front door: the use cases and the door's configuration. Cheap to clone.
#[derive(Clone)]
pub struct FrontDoor {
    service: Service,
    config: std::sync::Arc<E2bConfig>,
    /// Sandboxes this door is ending now (kill, timeout): a command stream that ends with
    /// one breaks as envd's does instead of reporting a killed process.
    ending: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<SandboxId>>>,
}

/// An envd call's sandbox, authorized by its access token.
#[derive(Debug, Clone)]
pub struct SandboxCaller {
    /// Acting for the sandbox's project.
    pub caller: Caller,
    /// The sandbox.
    pub sandbox: SandboxId,
    /// What the E2B door knows of it.
    pub record: E2bRecord,
}

impl SandboxCaller {
    /// The sandbox id as the use cases take it.
    pub fn id(&self) -> String {
        self.sandbox.to_string()
    }
}

impl FrontDoor {
    /// The door over `service`.
    pub fn new(service: Service, config: E2bConfig) -> Self {
        Self {
            service,
            config: std::sync::Arc::new(config),
            ending: std::sync::Arc::default(),
        }
    }

    /// Deletes `sandbox`, marked as ending while that runs.
    pub(crate) async fn end_sandbox(
        &self,
        caller: &Caller,
        sandbox: SandboxId,
    ) -> Result<(), E2bError> {
        let set = |on: bool| {
            let mut ending = self
                .ending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if on {
                ending.insert(sandbox);
            } else {
                ending.remove(&sandbox);
            }
        };
        set(true);
        let result = self
            .service
            .delete(
                caller,
                corral_service::InlineAccess::default(),
                &sandbox.to_string(),
            )
            .await;
        set(false);
        result.map(drop).map_err(E2bError::from)
    }

    /// Whether this door is ending `sandbox` now.
    pub(crate) fn is_ending(&self, sandbox: SandboxId) -> bool {
        self.ending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&sandbox)
    }

    /// Ends the sandbox now if its E2B timeout has passed (the sweep would soon); whether it
    /// did. So a sandbox is never reachable past its end, whatever the sweep's pace.
    pub(crate) async fn end_if_due(
        &self,
        caller: &Caller,
        record: &E2bRecord,
    ) -> Result<bool, E2bError> {
        if record.end_at > chrono::Utc::now() {
            return Ok(false);
        }
        self.end_sandbox(caller, record.sandbox_id).await?;
        Ok(true)
    }

    /// The use cases.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The configuration.
    pub fn config(&self) -> &E2bConfig {
        &self.config
    }

    /// The control side's caller: the project API key E2B's SDK sends as `X-API-KEY`.
    pub async fn authenticate(&self, api_key: Option<&str>) -> Result<Caller, E2bError> {
        let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) else {
            return Err(E2bError::Unauthenticated {
                message: "send the Corral project API key as X-API-KEY (E2B_API_KEY)".into(),
            });
        };
        self.service
            .authenticate(Some(&format!("Bearer {key}")))
            .await
            .map_err(|e| match e.code() {
                corral_errors::ErrorCode::AuthenticationError
                | corral_errors::ErrorCode::MissingApiKey => E2bError::Unauthenticated {
                    message: "the API key was rejected".into(),
                },
                // The registry being unreachable is not the caller's fault: a 503, not a 401.
                _ => E2bError::from(e),
            })
    }

    /// The envd side's caller: the sandbox named by `E2b-Sandbox-Id` and its access token.
    /// A wrong token and an unknown sandbox answer alike (nothing tells which ids exist).
    pub async fn sandbox_caller(
        &self,
        sandbox: Option<&str>,
        token: Option<&str>,
    ) -> Result<SandboxCaller, E2bError> {
        let denied = || E2bError::Unauthenticated {
            message: "the sandbox's access token (X-Access-Token) was missing or rejected".into(),
        };
        let Some(id) = sandbox.map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(E2bError::invalid(
                "name the sandbox in the E2b-Sandbox-Id header",
            ));
        };
        let sandbox = SandboxId::from_str(id).map_err(|_| E2bError::NotFound {
            message: format!(
                "sandbox '{}' not found",
                id.chars().take(80).collect::<String>()
            ),
        })?;
        let registry = self.service.registry();
        let registry_failed = |e| E2bError::Service {
            source: corral_service::error::registry_error(e),
        };
        let project = match token {
            Some(t) => registry
                .authorize_e2b_access_token(sandbox, t)
                .await
                .map_err(registry_failed)?,
            None => None,
        }
        .ok_or_else(denied)?;
        let record = registry
            .get_e2b(project, sandbox)
            .await
            .map_err(|e| E2bError::Service {
                source: corral_service::error::registry_error(e),
            })?
            .ok_or_else(|| E2bError::not_found(format!("sandbox '{sandbox}' not found")))?;
        let caller = Caller::trusted(project);
        if self.end_if_due(&caller, &record).await? {
            return Err(E2bError::not_found(format!(
                "sandbox '{sandbox}' reached the end of its timeout"
            )));
        }
        Ok(SandboxCaller {
            caller,
            sandbox,
            record,
        })
    }

    /// Whether the caller's sandbox runs now (envd's `/health`).
    pub async fn running_now(&self, sc: &SandboxCaller) -> Result<bool, E2bError> {
        match self
            .service
            .get(
                &sc.caller,
                corral_service::InlineAccess::default(),
                &sc.id(),
            )
            .await
        {
            Ok(s) => Ok(s.deleted_at.is_none()
                && matches!(
                    s.status,
                    corral_domain::SandboxStatus::Running | corral_domain::SandboxStatus::Creating
                )),
            Err(e) if e.code() == corral_errors::ErrorCode::SandboxNotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
