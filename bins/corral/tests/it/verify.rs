//! Deep verification (`Service::verify_profile`) of every registered adapter against its
//! loopback fake, built by the server's own wiring, with a profile stored from the fake's
//! configuration and context; and a fake refusing one operation for the profile's credential.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral::config::{FileConfig, Overrides};
use corral::wiring::FakeVisitor;
use corral_domain::Provider;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{Adapter, CallContext, ExposeSecret as _, SandboxProvider};
use corral_provider_http::HttpConfig;
use corral_provider_testkit::fake::{Fault, FaultKind};
use corral_provider_testkit::harness::Harness;
use corral_provider_testkit::spy::Spy;
use corral_registry::{
    Database, DatabaseConfig, MasterKey, ProfileInput, ProjectId, Registry, Verification,
};
use corral_service::Service;
use corral_service::verify::{VERIFIED_OPERATIONS, fallback_probe_file};

/// The service as the server builds it, with only `id` enabled and configured by `table`;
/// the adapter is wrapped in a [`Spy`]; a project with a profile holding `ctx`.
struct World {
    _dir: tempfile::TempDir,
    service: Service,
    spy: Arc<Spy>,
    project: ProjectId,
}

async fn world(id: &str, table: toml::Table, ctx: &CallContext) -> World {
    world_with(id, table, ctx, None).await
}

/// As [`world`], with `[limits] provider_call_timeout` set to `call_timeout`.
async fn world_with(
    id: &str,
    table: toml::Table,
    ctx: &CallContext,
    call_timeout: Option<Duration>,
) -> World {
    let mut providers = toml::Table::new();
    providers.insert("enabled".into(), toml::Value::try_from([id]).unwrap());
    providers.insert(id.into(), toml::Value::Table(table));
    let mut doc = toml::Table::new();
    doc.insert("providers".into(), toml::Value::Table(providers));
    let dir = tempfile::tempdir().unwrap();
    let file: FileConfig = doc.try_into().unwrap();
    let settings = corral::config::resolve(
        file,
        &Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            ..Overrides::default()
        },
        &corral::wiring::compiled_in(),
    )
    .unwrap();
    let mut settings = settings;
    if let Some(t) = call_timeout {
        settings.provider_call_timeout = t;
    }
    let built = corral::wiring::build(&settings).unwrap();
    let provider: Provider = id.parse().unwrap();
    let spy = Arc::new(Spy::new(built[&provider].clone()));
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(provider, spy.clone());
    let db = Database::connect(DatabaseConfig::new(settings.database_url.clone()))
        .await
        .unwrap();
    let registry = Registry::new(
        db.clone(),
        MasterKey::load_or_create(&dir.path().join("master.key")).unwrap(),
    );
    let store = IdempotencyStore::new(db, IdempotencyConfig::default());
    let project = registry.create_project("p").await.unwrap().id;
    registry
        .put_profile(
            project,
            provider,
            ProfileInput {
                context: ctx.context().clone(),
                credential: ctx.credential().cloned(),
                ..ProfileInput::default()
            },
        )
        .await
        .unwrap();
    let service = corral::server::service(&settings, providers, registry, store);
    World {
        _dir: dir,
        service,
        spy,
        project,
    }
}

async fn world_for<H: Harness>(harness: &H) -> World {
    let config = harness.config_at(&harness.base_url(), HttpConfig::default());
    let table = toml::Table::try_from(config).unwrap();
    world(H::Adapter::PROVIDER.as_str(), table, &harness.context()).await
}

fn failures(results: &[Verification]) -> Vec<&Verification> {
    results.iter().filter(|v| !v.ok).collect()
}

/// Every operation passes with the fake's own credential and context, and the probe is gone
/// from the fake afterwards.
async fn verified<H: Harness>() {
    let harness = H::start().await;
    let id = H::Adapter::PROVIDER;
    let w = world_for(&harness).await;
    let results = w.service.verify_profile(w.project, id).await.unwrap();
    let ops: Vec<&str> = results.iter().map(|v| v.operation.as_str()).collect();
    assert_eq!(ops, VERIFIED_OPERATIONS, "{id}");
    assert!(failures(&results).is_empty(), "{id}: {results:#?}");
    assert_eq!(w.spy.made().len(), 1, "{id}: one probe");
    assert_eq!(w.spy.count("delete"), 1, "{id}");
    let left = w.spy.leftovers(&harness.context()).await;
    assert!(left.is_empty(), "{id}: left at the fake: {left:?}");
}

struct Verified(Vec<Provider>);

impl FakeVisitor for Verified {
    async fn visit<H: Harness>(&mut self) {
        verified::<H>().await;
        self.0.push(H::Adapter::PROVIDER);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_every_operation_for_every_adapter_against_its_fake_and_leaves_nothing() {
    let mut seen = Verified(Vec::new());
    corral::wiring::visit_fakes(&mut seen).await;
    assert_eq!(seen.0.len(), 12, "{:?}", seen.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_stores_a_refused_exec_with_reason_and_remediation_and_still_deletes_the_probe() {
    use corral_provider_morph::fake::Fake;
    let fake = Fake::start_with_key("morph-key-verify").await;
    let ctx = fake.context();
    let w = world("morph", toml::Table::try_from(fake.config()).unwrap(), &ctx).await;
    let server = fake.server();
    // A refusal armed for another credential does not touch this profile's calls.
    server.faults().arm(
        Fault::status(403)
            .on_path("/exec")
            .for_credential("some-other-morph-key"),
    );
    let first = w
        .service
        .verify_profile(w.project, Provider::Morph)
        .await
        .unwrap();
    assert!(failures(&first).is_empty(), "{first:#?}");
    // Now the profile's key may not exec.
    server.faults().arm(
        Fault::status(403)
            .on_path("/exec")
            .for_credential(ctx.credential().unwrap().expose_secret()),
    );
    let results = w
        .service
        .verify_profile(w.project, Provider::Morph)
        .await
        .unwrap();
    let failed = failures(&results);
    assert_eq!(failed.len(), 1, "{results:#?}");
    let exec = failed[0];
    assert_eq!(exec.operation, "exec");
    let reason = exec.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("the provider refused the credential permission to run commands"),
        "{reason}"
    );
    assert!(reason.contains("injected fault 403"), "{reason}");
    assert!(
        !reason.contains(ctx.credential().unwrap().expose_secret()),
        "{reason}"
    );
    assert!(
        exec.remediation
            .as_deref()
            .unwrap()
            .starts_with("grant the key permission to run commands"),
        "{exec:?}"
    );
    // Stored as answered (the registry keeps them sorted by operation).
    let stored = w
        .service
        .registry()
        .profile(w.project, Provider::Morph)
        .await
        .unwrap()
        .unwrap()
        .profile
        .verifications;
    assert_eq!(stored.len(), VERIFIED_OPERATIONS.len());
    assert!(stored.contains(exec), "{stored:#?}");
    // Files, get and delete do not depend on exec: they ran, and the probe is gone.
    assert!(results.iter().any(|v| v.operation == "read_file" && v.ok));
    assert!(results.iter().any(|v| v.operation == "delete" && v.ok));
    assert_eq!(w.spy.count("delete"), 2, "one per verification");
    let left = w.spy.leftovers(&ctx).await;
    assert!(left.is_empty(), "left at the fake: {left:?}");
    // Without exec's temporary directory the file round trip used /tmp, which on this
    // fake is the host's.
    let op = w.spy.made().last().unwrap().operation_id;
    std::fs::remove_file(fallback_probe_file(op)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_waits_for_a_probe_still_starting_before_running_commands() {
    use corral_provider_daytona::fake::Fake;
    let fake = Fake::start().await;
    // Three observations `starting` (the create's answer and two polls), then `started`.
    fake.set_warmup(3);
    let ctx = fake.context();
    let w = world(
        "daytona",
        toml::Table::try_from(fake.config()).unwrap(),
        &ctx,
    )
    .await;
    let results = w
        .service
        .verify_profile(w.project, Provider::Daytona)
        .await
        .unwrap();
    assert!(failures(&results).is_empty(), "{results:#?}");
    let calls = w.spy.calls();
    let first_exec = calls.iter().position(|c| *c == "exec").unwrap();
    assert!(
        calls[..first_exec].iter().filter(|c| **c == "get").count() >= 2,
        "polled until started: {calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_removes_a_probe_whose_create_answer_was_lost() {
    use corral_provider_morph::fake::Fake;
    let fake = Fake::start_with_key("morph-key-lost").await;
    let ctx = fake.context();
    let w = world_with(
        "morph",
        toml::Table::try_from(fake.config()).unwrap(),
        &ctx,
        Some(Duration::from_secs(1)),
    )
    .await;
    // The instance is started, but its answer comes after the call deadline.
    fake.server().faults().arm(
        Fault::new(FaultKind::DelayAfterHandler(Duration::from_secs(3)))
            .on_method(reqwest::Method::POST)
            .on_path("/api/instance"),
    );
    let results = w
        .service
        .verify_profile(w.project, Provider::Morph)
        .await
        .unwrap();
    assert_eq!(
        results[0].reason.as_deref(),
        Some("inconclusive: the provider did not answer in time"),
        "{results:#?}"
    );
    assert!(results[1..].iter().all(|v| !v.ok));
    assert_eq!(
        w.spy.calls(),
        ["create", "find_by_operation_id", "delete"],
        "found by its operation id and deleted"
    );
    let left = w.spy.leftovers(&ctx).await;
    assert!(left.is_empty(), "left at the fake: {left:?}");
}
