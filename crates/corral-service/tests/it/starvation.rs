//! The background reconciler against records it can never settle, on SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::{CredentialSource, OperationId, Provider, SandboxId, SandboxMetadata};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::SandboxProvider;
use corral_provider_testkit::host_shell::HostShellProvider;
use corral_registry::testing::TestDb;
use corral_registry::{Clock, CreateState, ManualClock, MasterKey, NewSandbox, Registry};
use corral_service::{Service, ServiceConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettleable_creates_do_not_starve_a_newer_one_sqlite() {
    a_newer_unknown_create_is_settled_behind_a_full_batch_of_unsettleable_ones(&TestDb::sqlite())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettleable_creates_do_not_starve_a_newer_one_postgres() {
    let Some(db) = TestDb::postgres("service::starvation").await else {
        return;
    };
    a_newer_unknown_create_is_settled_behind_a_full_batch_of_unsettleable_ones(&db).await;
}

fn metadata(source: CredentialSource) -> SandboxMetadata {
    SandboxMetadata {
        native_provider_id: None,
        operation_id: OperationId::new(),
        credential_source: source,
        workspace: None,
        team_id: None,
        project_id: None,
        bridge_url: None,
    }
}

/// More unknown creates than one reconciler batch (50) were made with an inline credential,
/// which is never stored, so the reconciler cannot look them up; a newer unknown create needs
/// no credential. Within a few passes the newer one must be settled.
async fn a_newer_unknown_create_is_settled_behind_a_full_batch_of_unsettleable_ones(db: &TestDb) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let database = db.connect_with(db.config(), c).await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let store = IdempotencyStore::new(database, IdempotencyConfig::default());
    // Both are served by the host-shell double: the e2b records fail before any provider
    // call (no stored profile, and the inline credential is gone), the local one is looked
    // up and found missing.
    let shell: Arc<dyn SandboxProvider> = Arc::new(HostShellProvider::new());
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(Provider::E2b, shell.clone());
    providers.insert(Provider::Local, shell);
    let service = Service::new(
        providers,
        registry.clone(),
        store,
        ServiceConfig {
            reconcile_grace: Duration::ZERO,
            ..ServiceConfig::default()
        },
    );
    let project = registry.create_project("p").await.unwrap().id;

    let mut stuck = Vec::new();
    for _ in 0..60 {
        let id = SandboxId::new(Provider::E2b);
        registry
            .insert_sandbox(NewSandbox {
                id,
                project_id: project,
                metadata: metadata(CredentialSource::Inline),
            })
            .await
            .unwrap();
        registry
            .set_create_state(project, id, CreateState::Unknown)
            .await
            .unwrap();
        stuck.push(id);
        clock.advance(Duration::from_millis(1));
    }
    let newer = SandboxId::new(Provider::Local);
    registry
        .insert_sandbox(NewSandbox {
            id: newer,
            project_id: project,
            metadata: metadata(CredentialSource::None),
        })
        .await
        .unwrap();
    registry
        .set_create_state(project, newer, CreateState::Unknown)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));

    for _ in 0..3 {
        service.reconcile_once().await;
    }
    let rec = registry.sandbox(project, newer).await.unwrap().unwrap();
    // Nothing exists at the provider and the grace period is zero: given up as failed.
    assert_eq!(rec.create_state, CreateState::Failed, "{rec:?}");
    // The stuck ones cannot be looked up and stay unknown.
    for id in stuck {
        let rec = registry.sandbox(project, id).await.unwrap().unwrap();
        assert_eq!(rec.create_state, CreateState::Unknown);
    }
}
