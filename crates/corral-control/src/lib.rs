//! Corral's control plane, framework-free: the use cases behind the 41 cookie-authenticated
//! operations under `/v1/control` and the web console (see `docs/control-plane.md` for the
//! model, the rules and every operation).
//!
//! [`Control`] holds the control-plane store, the registry (projects, keys, profiles) and the
//! sandbox [`Service`] (verification, deletion at the providers, the read-only sandbox view).
//! Every use case takes the signed-in [`Actor`] and checks membership and role itself; the web
//! layer only parses and renders. The exceptions record what happened elsewhere: the reaper's
//! findings ([`Control::audit_reap`]) and sandbox changes made through the sandbox API with a
//! project key ([`Control::audit_api_sandbox`]). Every failure is a [`ControlError`] with one
//! v3 code.
//!
//! Mail goes through a [`Mailer`] ([`LogMailer`] unless [`Control::with_mailer`] sets another,
//! such as [`SmtpMailer`]).

mod accounts;
mod api_audit;
mod deletion;
mod error;
mod hashing;
mod identity;
mod legal;
mod lifecycle;
mod limits;
mod mail;
mod mail_events;
mod profiles;
mod projects;
mod reaper;
mod session;
mod throttle;
mod token;
mod webhooks;
mod work;

use std::sync::Arc;
use std::time::Duration;

use corral_control_store::ControlStore;
use corral_registry::Registry;
use corral_service::Service;
use secrecy::SecretString;

pub use accounts::{
    AcceptInvitation, AccountView, AuditEventView, ChangeRole, CreateInvitation,
    CreateOrganization, INVITATION_SUBJECT, InvitationPreview, InvitationView, MAX_ACCOUNT_NAME,
    MAX_AUDIT_LIMIT, MemberView, RenameAccount, TransferOwnership, neutralise,
};
pub use api_audit::ApiSandboxAction;
pub use deletion::DeletionReport;
pub use error::{ControlError, Result};
pub use hashing::{HashingConfig, HashingStats};
pub use identity::{DEFAULT_PROJECT, MIN_PASSWORD_CHARS, Me, normalize_email};
pub use legal::{LEGAL_DOCUMENTS, LegalStatus};
pub use limits::{ControlLimits, Rate};
pub use mail::{
    LogMailer, Mail, MailError, MailPurpose, Mailer, SmtpConfig, SmtpMailer, SmtpSecurity,
};
pub use mail_events::{EMAIL_WEBHOOK_TOLERANCE, EmailWebhookHeaders, sign_email_webhook};
pub use profiles::{
    MAX_FIELD_BYTES, MAX_SETTINGS_BYTES, ProfileView, PutProfile, Readiness, VerificationView,
    readiness, required_context,
};
pub use projects::{
    CreatedKey, KeyOptions, KeyView, MAX_KEY_LIFETIME_DAYS, MAX_KEY_NAME, MAX_PROJECT_NAME, NewKey,
    ProjectName, ProjectView,
};
pub use session::SESSION_COOKIE;
pub use throttle::{Backoff, ClientAddress, SignInThrottling};

// The ids and kinds the use cases take and return, so the web layer can name them without
// depending on a storage crate.
pub use corral_control_store::{AccountId, AccountKind, InvitationId, Role, UserId};
pub use corral_registry::ProjectId;

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
    /// The email webhook's signing secret (`whsec_<base64>`, from `[control.email_webhook]`);
    /// without it every webhook delivery is refused (`invalid_email_webhook`).
    pub email_webhook_secret: Option<SecretString>,
    /// A password change without the current password needs a session signed in this
    /// recently (by link or password).
    pub reauthentication_window: Duration,
    /// Request, creation, mail and sign-in limits.
    pub limits: ControlLimits,
    /// The password hashing pool.
    pub hashing: HashingConfig,
}

impl Default for ControlConfig {
    /// Public URL `http://127.0.0.1:8080`, idle 12 h, absolute 7 days, sign-in links 15
    /// minutes, invitations 7 days, no email webhook secret, re-authentication within 10
    /// minutes, [`ControlLimits::standard`] and [`HashingConfig::default`].
    fn default() -> Self {
        Self {
            public_url: "http://127.0.0.1:8080".to_owned(),
            session_idle: Duration::from_secs(12 * 3600),
            session_absolute: Duration::from_secs(7 * 24 * 3600),
            sign_in_token_ttl: Duration::from_secs(15 * 60),
            invitation_ttl: Duration::from_secs(7 * 24 * 3600),
            email_webhook_secret: None,
            reauthentication_window: Duration::from_secs(10 * 60),
            limits: ControlLimits::standard(),
            hashing: HashingConfig::default(),
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

#[derive(Clone)]
struct Inner {
    store: ControlStore,
    registry: Registry,
    service: Service,
    config: ControlConfig,
    mailer: Arc<dyn Mailer>,
    throttle: Arc<throttle::Throttle>,
    buckets: Arc<limits::Buckets>,
    passwords: Arc<hashing::PasswordPool>,
}

impl Control {
    /// The control plane over `store`, `registry` and `service` (all on the same database),
    /// mailing through [`LogMailer`] until [`Control::with_mailer`] says otherwise.
    pub fn new(
        store: ControlStore,
        registry: Registry,
        service: Service,
        config: ControlConfig,
    ) -> Self {
        let throttle = Arc::new(throttle::Throttle::new(config.limits.sign_in.clone()));
        let passwords = Arc::new(hashing::PasswordPool::new(config.hashing));
        Self {
            inner: Arc::new(Inner {
                store,
                registry,
                service,
                config,
                mailer: Arc::new(LogMailer),
                throttle,
                buckets: Arc::new(limits::Buckets::default()),
                passwords,
            }),
        }
    }

    /// The same control plane mailing through `mailer` (call it before cloning).
    pub fn with_mailer(mut self, mailer: Arc<dyn Mailer>) -> Self {
        Arc::make_mut(&mut self.inner).mailer = mailer;
        self
    }

    /// The mailer.
    pub fn mailer(&self) -> &Arc<dyn Mailer> {
        &self.inner.mailer
    }

    pub(crate) fn throttle(&self) -> &Arc<throttle::Throttle> {
        &self.inner.throttle
    }

    pub(crate) fn buckets(&self) -> &limits::Buckets {
        &self.inner.buckets
    }

    pub(crate) fn passwords(&self) -> &hashing::PasswordPool {
        &self.inner.passwords
    }

    /// What the password hashing pool did since this control plane was built (argon2
    /// verifications and hashes, refusals, the most running at once).
    pub fn hashing_stats(&self) -> HashingStats {
        self.inner.passwords.stats()
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
