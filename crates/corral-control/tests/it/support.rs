//! A world per test: a fresh database (SQLite file or PostgreSQL schema), the registry, the
//! sandbox service over the testkit's counting double posing as E2B, and the control plane.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use corral_control::{
    AcceptInvitation, Actor, Control, ControlConfig, ControlError, Mail, MailError, Mailer,
};
use corral_control_store::{AccountId, ControlStore, NewInvitation, Role};
use corral_domain::{CreateSandboxRequest, Provider};
use corral_errors::ErrorCode;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::SandboxProvider;
use corral_provider_testkit::counting::Counting;
use corral_registry::testing::TestDb;
use corral_registry::{MasterKey, ProjectId, Registry};
use corral_service::{Caller, InlineAccess, Service, ServiceConfig};
use sha2::Digest as _;

/// Collects mails instead of sending them.
#[derive(Debug, Default)]
pub(crate) struct Outbox(Mutex<Vec<Mail>>);

impl Outbox {
    pub(crate) fn take(&self) -> Vec<Mail> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl Mailer for Outbox {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        self.0.lock().unwrap().push(mail.clone());
        Ok(())
    }
}

pub(crate) struct World {
    pub(crate) control: Control,
    pub(crate) double: Arc<Counting>,
    pub(crate) outbox: Arc<Outbox>,
    _db: TestDb,
}

impl World {
    pub(crate) async fn new(db: TestDb) -> Self {
        let database = db.connect().await;
        let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
        let idempotency = IdempotencyStore::new(database.clone(), IdempotencyConfig::default());
        let double = Arc::new(Counting::new(Provider::E2b, false));
        let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
        providers.insert(Provider::E2b, double.clone());
        let service = Service::new(
            providers,
            registry.clone(),
            idempotency,
            ServiceConfig::default(),
        );
        let outbox = Arc::new(Outbox::default());
        let control = Control::new(
            ControlStore::new(database),
            registry,
            service,
            ControlConfig {
                public_url: "https://corral.example.com".to_owned(),
                ..ControlConfig::default()
            },
        )
        .with_mailer(outbox.clone());
        Self {
            control,
            double,
            outbox,
            _db: db,
        }
    }

    /// A user with their personal account.
    pub(crate) async fn user(&self, email: &str) -> (Actor, AccountId) {
        let (user_id, personal) = self.control.store().insert_test_user(email).await.unwrap();
        let actor = Actor {
            user_id,
            email: email.to_owned(),
            session_hash: vec![0; 32],
        };
        (actor, personal)
    }

    /// A new user who joins `account` with `role` by accepting an invitation whose token the
    /// test made (the mailed link is the identity work's).
    pub(crate) async fn member(&self, account: AccountId, email: &str, role: Role) -> Actor {
        let (actor, _) = self.user(email).await;
        let token = self.invitation(account, email, role).await;
        self.control
            .accept_invitation(&actor, AcceptInvitation { token })
            .await
            .unwrap();
        actor
    }

    /// Stores an invitation for `email` and returns its token.
    pub(crate) async fn invitation(&self, account: AccountId, email: &str, role: Role) -> String {
        let (token, hash) = token();
        let owner = self
            .control
            .store()
            .members(account)
            .await
            .unwrap()
            .into_iter()
            .find(|m| m.role == Role::Owner)
            .unwrap();
        self.control
            .store()
            .create_invitation(NewInvitation {
                account_id: account,
                email: email.to_owned(),
                role,
                token_hash: hash,
                invited_by: owner.user_id,
                expires_at: self.control.store().now() + chrono::Duration::days(1),
            })
            .await
            .unwrap();
        token
    }

    /// Creates an E2B sandbox in `project` through the sandbox API's use case; its id.
    pub(crate) async fn sandbox(&self, project: ProjectId) -> String {
        let created = self
            .control
            .service()
            .create(
                &Caller::trusted(project),
                InlineAccess::default(),
                None,
                CreateSandboxRequest::standard(Provider::E2b, None, None),
            )
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_str(&created.body).unwrap();
        body["id"].as_str().unwrap().to_owned()
    }
}

/// A token as the control plane makes them, and its SHA-256.
pub(crate) fn token() -> (String, Vec<u8>) {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).unwrap();
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let hash = sha2::Sha256::digest(token.as_bytes()).to_vec();
    (token, hash)
}

/// The v3 code of a failure (panics on success).
pub(crate) fn code<T: Debug>(r: Result<T, ControlError>) -> ErrorCode {
    r.expect_err("expected a failure").code()
}

/// Asserts `invalid_request` with exactly `message`.
#[track_caller]
pub(crate) fn assert_invalid<T: Debug>(r: Result<T, ControlError>, message: &str) {
    match r {
        Err(e @ ControlError::Invalid { .. }) => assert_eq!(e.to_string(), message),
        other => panic!("expected invalid_request `{message}`, got {other:?}"),
    }
}
