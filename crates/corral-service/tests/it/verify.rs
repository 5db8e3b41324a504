//! Deep verification of a stored profile (`Service::verify_profile`) over the counting
//! double, on SQLite and PostgreSQL: every operation checked in order, failures stored with a
//! reason and remediation, the probe always deleted and never recorded as a sandbox, and the
//! stored results refusing public requests the profile's credential proved unable to do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::{Provider, ProviderContext, RunCommandInput};
use corral_errors::ErrorCode;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{ProviderError, SandboxProvider, SecretString};
use corral_provider_testkit::counting::Counting;
use corral_provider_testkit::spy::Spy;
use corral_registry::testing::{TestDb, dump_all_rows};
use corral_registry::{MasterKey, ProfileInput, ProjectId, Registry, Verification};
use corral_service::error::ServiceError;
use corral_service::verify::{VERIFIED_OPERATIONS, fallback_probe_file};
use corral_service::{Caller, InlineAccess, Service, ServiceConfig};

const PROVIDER: Provider = Provider::E2b;
const PROFILE_CREDENTIAL: &str = "profile-credential-7f3a";
const INLINE_CREDENTIAL: &str = "inline-credential-91bc";

struct World {
    _db: TestDb,
    registry: Registry,
    service: Service,
    double: Arc<Counting>,
    /// Around the double: the operation ids of the probes.
    spy: Arc<Spy>,
    project: ProjectId,
}

impl Drop for World {
    /// A probe whose exec failed wrote its file to `/tmp`, which for the double is the
    /// host's.
    fn drop(&mut self) {
        for op in self.spy.attempted() {
            let _ = std::fs::remove_file(fallback_probe_file(op));
        }
    }
}

async fn world(db: TestDb, gated: bool, config: ServiceConfig) -> World {
    let database = db.connect().await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let store = IdempotencyStore::new(database, IdempotencyConfig::default());
    let double = Arc::new(Counting::new(PROVIDER, gated));
    let spy = Arc::new(Spy::new(double.clone()));
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(PROVIDER, spy.clone());
    let service = Service::new(providers, registry.clone(), store, config);
    let project = registry.create_project("p").await.unwrap().id;
    registry
        .put_profile(
            project,
            PROVIDER,
            ProfileInput {
                context: ProviderContext {
                    team_id: Some("team-1".into()),
                    ..ProviderContext::default()
                },
                credential: Some(SecretString::from(PROFILE_CREDENTIAL)),
                ..ProfileInput::default()
            },
        )
        .await
        .unwrap();
    World {
        _db: db,
        registry,
        service,
        double,
        spy,
        project,
    }
}

/// Runs `scenario` on a fresh SQLite world and on a fresh PostgreSQL world.
macro_rules! on_both_backends {
    ($($name:ident => $scenario:ident($gated:expr, $config:expr);)+) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$scenario(super::world(
                        corral_registry::testing::TestDb::sqlite(), $gated, $config).await).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = corral_registry::testing::TestDb::postgres(
                        concat!("service::verify::", stringify!($name))).await else { return };
                    super::$scenario(super::world(db, $gated, $config).await).await;
                }
            )+
        }
    };
}

on_both_backends! {
    every_operation_passes_and_the_probe_is_deleted_and_never_recorded =>
        every_operation_passes(false, corral_service::ServiceConfig::default());
    a_refused_exec_is_stored_with_reason_and_remediation_while_independent_operations_run =>
        refused_exec(false, corral_service::ServiceConfig::default());
    a_rejected_create_leaves_the_rest_not_reached_and_nothing_to_delete =>
        rejected_create(false, corral_service::ServiceConfig::default());
    delete_runs_even_when_every_middle_operation_failed =>
        middle_failures(false, corral_service::ServiceConfig::default());
    a_lost_create_answer_is_looked_up_by_operation_id_and_removed =>
        lost_create(false, corral_service::ServiceConfig::default());
    a_hung_create_fails_at_the_provider_call_deadline =>
        hung_create(true, corral_service::ServiceConfig {
            provider_call_timeout: std::time::Duration::from_millis(300),
            ..corral_service::ServiceConfig::default()
        });
    after_a_failed_exec_public_exec_with_the_profile_is_refused_without_a_provider_call =>
        refusal_path(false, corral_service::ServiceConfig::default());
    a_rate_limited_exec_is_inconclusive_and_does_not_refuse_public_exec =>
        rate_limited_exec(false, corral_service::ServiceConfig::default());
    operations_a_verification_did_not_reach_are_not_refused =>
        not_reached_is_not_refused(false, corral_service::ServiceConfig::default());
    a_credential_echoed_by_the_provider_is_stored_nowhere =>
        echoed_credential(false, corral_service::ServiceConfig::default());
    without_a_profile_the_verification_is_refused_and_runs_nothing =>
        no_profile(false, corral_service::ServiceConfig::default());
}

fn ops(results: &[Verification]) -> Vec<&str> {
    results.iter().map(|v| v.operation.as_str()).collect()
}

fn by_op<'a>(results: &'a [Verification], op: &str) -> &'a Verification {
    results
        .iter()
        .find(|v| v.operation == op)
        .unwrap_or_else(|| panic!("no result for {op}: {results:?}"))
}

async fn stored(w: &World) -> Vec<Verification> {
    w.registry
        .profile(w.project, PROVIDER)
        .await
        .unwrap()
        .unwrap()
        .profile
        .verifications
}

fn unauthorized(message: &str) -> impl Fn() -> ProviderError + Send + Sync + 'static {
    let message = message.to_owned();
    move || ProviderError::Unauthorized {
        provider: PROVIDER,
        message: message.clone(),
    }
}

async fn every_operation_passes(w: World) {
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    assert_eq!(ops(&results), VERIFIED_OPERATIONS);
    for v in &results {
        assert!(v.ok, "{v:?}");
        assert_eq!(
            (v.reason.as_deref(), v.remediation.as_deref()),
            (None, None)
        );
    }
    // Every call made with the profile's credential, the probe deleted, nothing else made.
    let calls = w.double.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        ["create", "exec", "write_file", "read_file", "get", "delete"]
    );
    let creds = w.double.credentials.lock().unwrap().clone();
    assert!(
        creds
            .iter()
            .all(|c| c.as_deref() == Some(PROFILE_CREDENTIAL)),
        "{creds:?}"
    );
    // The probe is not a customer sandbox.
    let page = w
        .service
        .list(&Caller::trusted(w.project), None, None)
        .await
        .unwrap();
    assert!(page.items.is_empty(), "{page:?}");
    // Stored, one per operation (sorted by operation), and seen by the metrics.
    let mut expected: Vec<&str> = VERIFIED_OPERATIONS.to_vec();
    expected.sort_unstable();
    let kept = stored(&w).await;
    assert_eq!(ops(&kept), expected);
    for v in &results {
        assert!(kept.contains(v), "answered {v:?}, stored {kept:?}");
    }
    let mut metrics = String::new();
    w.service.render_metrics(&mut metrics);
    for call in VERIFIED_OPERATIONS {
        assert!(
            metrics.contains(&format!(
                "provider=\"e2b\",call=\"{call}\",outcome=\"ok\"}} 1"
            )),
            "{call} not counted:\n{metrics}"
        );
    }
}

async fn refused_exec(w: World) {
    w.double
        .fail_next("exec", unauthorized("token lacks sandbox:exec"));
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    assert_eq!(ops(&results), VERIFIED_OPERATIONS);
    let exec = by_op(&results, "exec");
    assert!(!exec.ok);
    let reason = exec.reason.as_deref().unwrap();
    assert!(reason.contains("permission to run commands"), "{reason}");
    assert!(reason.contains("token lacks sandbox:exec"), "{reason}");
    let remediation = exec.remediation.as_deref().unwrap();
    assert!(
        remediation.starts_with("grant the key permission to run commands"),
        "{remediation}"
    );
    // Files, get and delete do not need exec: they ran and passed.
    for op in ["create", "write_file", "read_file", "get", "delete"] {
        assert!(by_op(&results, op).ok, "{op}: {results:?}");
    }
    assert_eq!(w.double.count("delete"), 1);
    assert_eq!(stored(&w).await.iter().filter(|v| !v.ok).count(), 1);
}

async fn rejected_create(w: World) {
    w.double
        .fail_next("create", unauthorized("invalid API key"));
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    assert_eq!(ops(&results), VERIFIED_OPERATIONS);
    let create = by_op(&results, "create");
    assert!(!create.ok);
    assert!(
        create
            .reason
            .as_deref()
            .unwrap()
            .contains("the provider rejected the credential: invalid API key"),
        "{create:?}"
    );
    assert!(
        create
            .remediation
            .as_deref()
            .unwrap()
            .starts_with("check the credential and its scopes"),
        "{create:?}"
    );
    for v in &results[1..] {
        assert!(!v.ok);
        assert_eq!(
            v.reason.as_deref(),
            Some("not reached: create failed"),
            "{v:?}"
        );
        assert!(v.remediation.is_some());
    }
    // A clean refusal made nothing: no lookup, no delete.
    assert_eq!(*w.double.calls.lock().unwrap(), ["create"]);
}

async fn middle_failures(w: World) {
    let lost = |what: &str| {
        let what = what.to_owned();
        move || ProviderError::ServerError {
            provider: PROVIDER,
            status: 500,
            message: format!("{what} broke"),
        }
    };
    w.double.fail_next("exec", lost("exec"));
    w.double.fail_next("write_file", lost("write"));
    w.double.fail_next("get", lost("get"));
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let failed: Vec<&str> = results
        .iter()
        .filter(|v| !v.ok)
        .map(|v| v.operation.as_str())
        .collect();
    assert_eq!(failed, ["exec", "write_file", "read_file", "get"]);
    assert_eq!(
        by_op(&results, "read_file").reason.as_deref(),
        Some("not reached: write_file failed")
    );
    assert!(
        by_op(&results, "get")
            .reason
            .as_deref()
            .unwrap()
            .contains("HTTP 500: get broke")
    );
    assert!(by_op(&results, "delete").ok);
    assert_eq!(w.double.count("read_file"), 0);
    assert_eq!(w.double.count("delete"), 1);
}

async fn lost_create(w: World) {
    *w.double.lose_next_create_answer.lock().unwrap() = true;
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let create = by_op(&results, "create");
    assert!(!create.ok);
    assert_eq!(
        create.reason.as_deref(),
        Some("inconclusive: the provider did not answer in time")
    );
    assert_eq!(
        *w.double.calls.lock().unwrap(),
        ["create", "find_by_operation_id", "delete"],
        "the sandbox made behind the lost answer is found and removed"
    );
}

async fn hung_create(w: World) {
    let started = std::time::Instant::now();
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let create = by_op(&results, "create");
    assert_eq!(
        create.reason.as_deref(),
        Some("inconclusive: the provider did not answer in time")
    );
    assert!(results[1..].iter().all(|v| !v.ok));
    // The hung create never got past the gate; the lookup for it found nothing.
    assert_eq!(w.double.count("create"), 0);
    assert_eq!(w.double.count("find_by_operation_id"), 1);
}

async fn refusal_path(w: World) {
    w.double
        .fail_next("exec", unauthorized("exec is not allowed for this key"));
    w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let caller = Caller::trusted(w.project);
    // Create was proved possible: a sandbox made with the profile.
    let created = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            corral_domain::CreateSandboxRequest::standard(PROVIDER, None, None),
        )
        .await
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let input = || RunCommandInput {
        command: "echo hi".into(),
        cwd: None,
        env: None,
    };
    let before = w.double.total();
    let refused = w
        .service
        .exec(&caller, InlineAccess::default(), &id, input())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::ProviderOperationUnavailable);
    let ServiceError::OperationUnavailable {
        provider,
        operation,
        reason,
        remediation,
    } = &refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!((*provider, operation.as_str()), (PROVIDER, "exec"));
    assert!(
        reason.contains("exec is not allowed for this key"),
        "{reason}"
    );
    assert!(
        remediation.starts_with("grant the key permission"),
        "{remediation}"
    );
    assert_eq!(
        w.double.total(),
        before,
        "refused without calling the provider"
    );
    // An inline credential is another credential: the stored result does not apply to it.
    let inline = InlineAccess {
        credential: Some(SecretString::from(INLINE_CREDENTIAL)),
        ..InlineAccess::default()
    };
    let out = w.service.exec(&caller, inline, &id, input()).await.unwrap();
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(w.double.count("exec"), 2, "the probe's and this one");
    assert_eq!(
        w.double
            .credentials
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .as_deref(),
        Some(INLINE_CREDENTIAL)
    );
    // The verification itself is never refused by earlier results: run again, exec passes
    // now, and public exec with the profile works.
    let again = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    assert!(again.iter().all(|v| v.ok), "{again:?}");
    let out = w
        .service
        .exec(&caller, InlineAccess::default(), &id, input())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
}

async fn not_reached_is_not_refused(w: World) {
    w.double
        .fail_next("create", unauthorized("no create scope"));
    w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let caller = Caller::trusted(w.project);
    let request = || corral_domain::CreateSandboxRequest::standard(PROVIDER, None, None);
    // Create was proved unavailable to the profile's credential.
    let before = w.double.total();
    let refused = w
        .service
        .create(&caller, InlineAccess::default(), None, request())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::ProviderOperationUnavailable);
    assert_eq!(w.double.total(), before);
    // Exec and delete were not reached, which proves nothing: a sandbox made inline is
    // still reachable with the profile's credential.
    let inline = InlineAccess {
        credential: Some(SecretString::from(INLINE_CREDENTIAL)),
        ..InlineAccess::default()
    };
    let created = w
        .service
        .create(&caller, inline, None, request())
        .await
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = w
        .service
        .exec(
            &caller,
            InlineAccess::default(),
            &id,
            RunCommandInput {
                command: "echo ok".into(),
                cwd: None,
                env: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "ok\n");
    w.service
        .delete(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
}

async fn echoed_credential(w: World) {
    w.double.fail_next(
        "get",
        unauthorized(&format!("key {PROFILE_CREDENTIAL} may not read sandboxes")),
    );
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let get = by_op(&results, "get");
    let reason = get.reason.as_deref().unwrap();
    assert!(!reason.contains(PROFILE_CREDENTIAL), "{reason}");
    assert!(reason.contains("[redacted]"), "{reason}");
    let rows = dump_all_rows(w.registry.database()).await;
    assert!(rows.contains("[redacted] may not read sandboxes"), "stored");
    assert!(!rows.contains(PROFILE_CREDENTIAL));
}

async fn no_profile(w: World) {
    assert!(
        w.registry
            .delete_profile(w.project, PROVIDER)
            .await
            .unwrap()
    );
    let e = w
        .service
        .verify_profile(w.project, PROVIDER)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ProviderProfileNotFound);
    let e = w
        .service
        .verify_profile(w.project, Provider::Fly)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ProviderUnavailable, "{e:?}");
    assert_eq!(w.double.total(), 0);
}

async fn rate_limited_exec(w: World) {
    w.double.fail_next("exec", || ProviderError::RateLimited {
        provider: PROVIDER,
        retry_after: Some(Duration::from_secs(3)),
    });
    let results = w.service.verify_profile(w.project, PROVIDER).await.unwrap();
    let exec = by_op(&results, "exec");
    assert!(!exec.ok);
    assert_eq!(
        exec.reason.as_deref(),
        Some("inconclusive: the provider rate-limited the request")
    );
    assert!(
        exec.remediation
            .as_deref()
            .unwrap()
            .starts_with("run the test again later")
    );
    // A passing refusal proves nothing about the credential: public exec still goes through.
    let caller = Caller::trusted(w.project);
    let created = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            corral_domain::CreateSandboxRequest::standard(PROVIDER, None, None),
        )
        .await
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = w
        .service
        .exec(
            &caller,
            InlineAccess::default(),
            &id,
            RunCommandInput {
                command: "echo still".into(),
                cwd: None,
                env: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "still\n");
}
