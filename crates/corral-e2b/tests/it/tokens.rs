//! The envd side's caller: a sandbox opens only with an access token the door issued for it,
//! to a key that is still live, of its own project.

use std::collections::BTreeMap;
use std::sync::Arc;

use corral_domain::Provider;
use corral_e2b::{E2bConfig, E2bError, FrontDoor};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::SandboxProvider;
use corral_provider_testkit::host_shell::HostShellProvider;
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
use corral_service::{Service, ServiceConfig};
use secrecy::ExposeSecret as _;

struct Door {
    _dir: tempfile::TempDir,
    registry: Registry,
    service: Service,
    door: FrontDoor,
}

async fn door() -> Door {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let db = Database::connect(DatabaseConfig::new(url)).await.unwrap();
    let registry = Registry::new(db.clone(), MasterKey::generate().unwrap());
    let store = IdempotencyStore::new(db, IdempotencyConfig::default());
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(Provider::Local, Arc::new(HostShellProvider::new()));
    let service = Service::new(providers, registry.clone(), store, ServiceConfig::default());
    let door = FrontDoor::new(service.clone(), E2bConfig::default());
    Door {
        _dir: dir,
        registry,
        service,
        door,
    }
}

fn denied(got: Result<corral_e2b::SandboxCaller, E2bError>) -> bool {
    matches!(got, Err(E2bError::Unauthenticated { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_opens_only_with_its_own_token_of_a_live_key_of_its_project() {
    let w = door().await;
    let project = w.registry.create_project("p").await.unwrap().id;
    let (a, b) = (
        w.registry.issue_api_key(project).await.unwrap(),
        w.registry.issue_api_key(project).await.unwrap(),
    );
    let caller = |key: &corral_registry::NewApiKey| {
        let key = format!("Bearer {}", key.key.expose_secret());
        let service = w.service.clone();
        async move { service.authenticate(Some(&key)).await.unwrap() }
    };
    let body = br#"{"templateID": "local"}"#;
    let first = w.door.create(&caller(&a).await, None, body).await.unwrap();
    let second = w.door.create(&caller(&a).await, None, body).await.unwrap();
    let (id, token) = (
        first.answer.sandbox_id.as_str(),
        first.answer.envd_access_token.as_str(),
    );
    let opened = w.door.sandbox_caller(Some(id), Some(token)).await.unwrap();
    assert_eq!(opened.caller.project_id(), project);
    // Not another sandbox's token, no token, nor a forged one.
    let other = second.answer.envd_access_token.as_str();
    assert!(denied(w.door.sandbox_caller(Some(id), Some(other)).await));
    assert!(denied(w.door.sandbox_caller(Some(id), None).await));
    let forged = format!("{}x", &token[..token.len() - 1]);
    assert!(denied(w.door.sandbox_caller(Some(id), Some(&forged)).await));

    // The token of key b (fetched with it) and of key a; revoking a ends a's only.
    let by_b = w.door.get(&caller(&b).await, id).await.unwrap();
    let b_token = by_b.envd_access_token.unwrap();
    w.registry.revoke_api_key(&a.info.key_id).await.unwrap();
    assert!(denied(w.door.sandbox_caller(Some(id), Some(token)).await));
    w.door
        .sandbox_caller(Some(id), Some(&b_token))
        .await
        .unwrap();

    // Another project's key cannot be named on this project's sandbox.
    let elsewhere = w.registry.create_project("q").await.unwrap().id;
    let c = w.registry.issue_api_key(elsewhere).await.unwrap();
    let crossed = w.registry.e2b_access_token(
        project,
        &c.info.key_id,
        first.answer.sandbox_id.parse().unwrap(),
    );
    assert!(denied(
        w.door.sandbox_caller(Some(id), Some(&crossed)).await
    ));
}
