//! Corral's control plane, framework-free: the use cases behind the 36 cookie-authenticated
//! operations under `/v1/control` and the web console (see `docs/control-plane.md` for the
//! model, the rules and every operation).
//!
//! [`Control`] holds the control-plane store, the registry (projects, keys, profiles) and the
//! sandbox [`Service`] (verification, deletion at the providers, the read-only sandbox view).
//! Every use case takes the signed-in [`Actor`] and checks membership and role itself; the web
//! layer only parses and renders. Every failure is a [`ControlError`] with one v3 code.

mod accounts;
mod deletion;
mod error;
mod identity_stubs;
mod profiles;
mod projects;
mod token;
mod verify_stub;

use std::sync::Arc;
use std::time::Duration;

use corral_control_store::{ControlStore, UserId};
use corral_registry::Registry;
use corral_service::Service;

pub use accounts::{
    AcceptInvitation, AccountView, AuditEventView, ChangeRole, CreateInvitation,
    CreateOrganization, InvitationView, MAX_ACCOUNT_NAME, MAX_AUDIT_LIMIT, MemberView,
    RenameAccount, TransferOwnership,
};
pub use deletion::DeletionReport;
pub use error::{ControlError, Result};
pub use profiles::{
    MAX_FIELD_BYTES, MAX_SETTINGS_BYTES, ProfileView, PutProfile, Readiness, VerificationView,
    readiness, required_context,
};
pub use projects::{CreatedKey, KeyView, MAX_PROJECT_NAME, ProjectName, ProjectView};

/// Tunables of the control plane.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The server's public base URL (`https://corral.example.com`): sign-in and invitation
    /// links point here, the `Origin` check compares with it, and `Secure` cookies follow its
    /// scheme.
    pub public_url: String,
    /// A session unused this long expires.
    pub session_idle: Duration,
    /// A session expires this long after sign-in, used or not.
    pub session_absolute: Duration,
    /// How long a sign-in link works.
    pub sign_in_token_ttl: Duration,
    /// How long an invitation works.
    pub invitation_ttl: Duration,
}

impl Default for ControlConfig {
    /// Public URL `http://127.0.0.1:8080`, idle 12 h, absolute 7 days, sign-in links 15
    /// minutes, invitations 7 days.
    fn default() -> Self {
        Self {
            public_url: "http://127.0.0.1:8080".to_owned(),
            session_idle: Duration::from_secs(12 * 3600),
            session_absolute: Duration::from_secs(7 * 24 * 3600),
            sign_in_token_ttl: Duration::from_secs(15 * 60),
            invitation_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// A signed-in user, as established from a session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The user.
    pub user_id: UserId,
    /// Their verified, lower-cased email.
    pub email: String,
    /// The SHA-256 of the session token (identifies the session without being it).
    pub session_hash: Vec<u8>,
}

/// The control plane's use cases. Cheap to clone.
#[derive(Clone)]
pub struct Control {
    inner: Arc<Inner>,
}

struct Inner {
    store: ControlStore,
    registry: Registry,
    service: Service,
    config: ControlConfig,
}

impl Control {
    /// The control plane over `store`, `registry` and `service` (all on the same database).
    pub fn new(
        store: ControlStore,
        registry: Registry,
        service: Service,
        config: ControlConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                registry,
                service,
                config,
            }),
        }
    }

    /// The control-plane store.
    pub fn store(&self) -> &ControlStore {
        &self.inner.store
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The sandbox use cases.
    pub fn service(&self) -> &Service {
        &self.inner.service
    }

    /// The configuration.
    pub fn config(&self) -> &ControlConfig {
        &self.inner.config
    }
}
