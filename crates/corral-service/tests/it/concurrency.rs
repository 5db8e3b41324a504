//! Caps on commands running at once, per project and per server: the next exec is refused at
//! once (`rate_limited`, retryable, with a Retry-After hint) and never queued; other projects
//! are unaffected by one project's cap; a place is given back however the call ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, Provider, RunCommandInput, Sandbox};
use corral_errors::ErrorCode;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{ExposeSecret as _, SandboxProvider};
use corral_provider_testkit::held::{HeldExecs, NextExec};
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
use corral_service::error::ServiceError;
use corral_service::limiter::ExecConcurrency;
use corral_service::{Caller, InlineAccess, Service, ServiceConfig};

/// A service over the held-exec double posing as `local`.
struct Held {
    _dir: tempfile::TempDir,
    registry: Registry,
    service: Service,
    double: Arc<HeldExecs>,
}

/// A project of the world: its caller and one sandbox.
#[derive(Clone)]
struct Project {
    caller: Caller,
    sandbox: String,
}

impl Held {
    async fn new(caps: ExecConcurrency, exec_deadline: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("corral.db").display());
        let db = Database::connect(DatabaseConfig::new(url)).await.unwrap();
        let registry = Registry::new(db.clone(), MasterKey::generate().unwrap());
        let store = IdempotencyStore::new(db, IdempotencyConfig::default());
        let double = Arc::new(HeldExecs::new(Provider::Local));
        let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
        providers.insert(Provider::Local, double.clone());
        let service = Service::new(
            providers,
            registry.clone(),
            store,
            ServiceConfig {
                exec_concurrency: caps,
                exec_deadline,
                ..ServiceConfig::default()
            },
        );
        Self {
            _dir: dir,
            registry,
            service,
            double,
        }
    }

    async fn project(&self, name: &str) -> Project {
        let p = self.registry.create_project(name).await.unwrap();
        let key = self.registry.issue_api_key(p.id).await.unwrap();
        let caller = self
            .service
            .authenticate(Some(&format!("Bearer {}", key.key.expose_secret())))
            .await
            .unwrap();
        let created = self
            .service
            .create(
                &caller,
                InlineAccess::default(),
                None,
                CreateSandboxRequest::standard(Provider::Local, None, None),
            )
            .await
            .unwrap();
        let sandbox: Sandbox = serde_json::from_str(&created.body).unwrap();
        Project {
            caller,
            sandbox: sandbox.id.to_string(),
        }
    }

    /// Starts an exec of `echo ok` in `p`'s sandbox on a task of its own.
    fn spawn_exec(
        &self,
        p: &Project,
    ) -> tokio::task::JoinHandle<Result<corral_domain::CommandResult, ServiceError>> {
        let service = self.service.clone();
        let p = p.clone();
        tokio::spawn(async move {
            service
                .exec(
                    &p.caller,
                    InlineAccess::default(),
                    &p.sandbox,
                    run("echo ok"),
                )
                .await
        })
    }

    /// An exec that must be answered without waiting for any running command.
    async fn exec_now(&self, p: &Project) -> Result<corral_domain::CommandResult, ServiceError> {
        tokio::time::timeout(
            Duration::from_secs(5),
            self.service.exec(
                &p.caller,
                InlineAccess::default(),
                &p.sandbox,
                run("echo ok"),
            ),
        )
        .await
        .expect("an exec over the cap must be refused at once, not queued")
    }

    /// Waits (up to 10 s) until this replica counts `n` running commands in all.
    async fn until_running(&self, n: u32) {
        for _ in 0..1000 {
            if self.service.execs_running(None) == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{} commands still counted as running, expected {n}",
            self.service.execs_running(None)
        );
    }
}

fn run(command: &str) -> RunCommandInput {
    serde_json::from_value(serde_json::json!({ "command": command })).unwrap()
}

#[track_caller]
fn assert_refused(result: Result<corral_domain::CommandResult, ServiceError>, names: &str) {
    let err = result.expect_err("the exec over the cap ran");
    assert_eq!(err.code(), ErrorCode::RateLimited, "{err}");
    assert!(err.code().retryable());
    assert_eq!(err.retry_after_seconds(), Some(1));
    assert!(err.to_string().contains(names), "{err}");
}

fn caps(per_project: u32, total: u32) -> ExecConcurrency {
    ExecConcurrency {
        per_project: Some(per_project),
        total: Some(total),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exec_past_the_per_project_cap_is_refused_at_once_and_other_projects_still_run() {
    let w = Held::new(caps(3, 100), Duration::from_secs(60)).await;
    let a = w.project("a").await;
    let b = w.project("b").await;
    let running: Vec<_> = (0..3).map(|_| w.spawn_exec(&a)).collect();
    w.double.until_arrived(3).await;
    assert_eq!(w.service.execs_running(Some(a.caller.project_id())), 3);

    assert_refused(w.exec_now(&a).await, "project");
    assert_eq!(
        w.double.arrived(),
        3,
        "a refused exec never reaches the provider"
    );
    // Another project has its own places.
    let other = w.spawn_exec(&b);
    w.double.until_arrived(4).await;

    w.double.release(4);
    for r in running {
        assert_eq!(r.await.unwrap().unwrap().stdout, "ok\n");
    }
    other.await.unwrap().unwrap();
    w.until_running(0).await;
    // The places are free again.
    w.double.release(1);
    w.exec_now(&a).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_cap_counts_the_commands_of_every_project() {
    let w = Held::new(caps(10, 2), Duration::from_secs(60)).await;
    let a = w.project("a").await;
    let b = w.project("b").await;
    let c = w.project("c").await;
    let held = [w.spawn_exec(&a), w.spawn_exec(&b)];
    w.double.until_arrived(2).await;
    assert_refused(w.exec_now(&c).await, "server");
    assert_refused(w.exec_now(&a).await, "server");
    w.double.release(2);
    for r in held {
        r.await.unwrap().unwrap();
    }
    w.until_running(0).await;
    w.double.release(1);
    w.exec_now(&c).await.unwrap();
}

/// One place per project; after each way an exec can end, the next one is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_is_given_back_when_the_call_fails_times_out_panics_or_is_dropped() {
    let w = Held::new(caps(1, 1), Duration::from_millis(300)).await;
    let a = w.project("a").await;

    // A provider failure.
    w.double.script_next(NextExec::Fail);
    let failed = w.exec_now(&a).await.unwrap_err();
    assert_eq!(failed.code(), ErrorCode::ProviderUnavailable);
    assert_eq!(w.service.execs_running(None), 0);

    // The command's deadline: the provider answers CommandTimedOut after 300 ms.
    let timed_out = w.exec_now(&a).await.unwrap_err();
    assert_eq!(timed_out.code(), ErrorCode::RequestTimeout, "{timed_out}");
    assert_eq!(w.service.execs_running(None), 0);

    // A panic inside the provider call unwinds through the exec.
    w.double.script_next(NextExec::Panic);
    assert!(w.spawn_exec(&a).await.unwrap_err().is_panic());
    assert_eq!(w.service.execs_running(None), 0);

    // A caller that goes away (the HTTP request dropped) while the command is held.
    let arrived = w.double.arrived();
    let abandoned = w.spawn_exec(&a);
    w.double.until_arrived(arrived + 1).await;
    assert_refused(w.exec_now(&a).await, "project");
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    w.until_running(0).await;
    assert_eq!(w.double.running(), 0);

    w.double.release(1);
    assert_eq!(w.exec_now(&a).await.unwrap().stdout, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_refused_for_other_reasons_take_no_place_and_no_caps_means_no_refusal() {
    let w = Held::new(caps(1, 1), Duration::from_secs(60)).await;
    let a = w.project("a").await;
    let held = w.spawn_exec(&a);
    w.double.until_arrived(1).await;
    // Invalid input and unknown sandboxes are answered for what they are, not as the cap.
    let empty = w
        .service
        .exec(&a.caller, InlineAccess::default(), &a.sandbox, run(""))
        .await
        .unwrap_err();
    assert_eq!(empty.code(), ErrorCode::InvalidRequest);
    let unknown = w
        .service
        .exec(
            &a.caller,
            InlineAccess::default(),
            "sbx_local_01m80q64ank677bazxsr5nkj71",
            run("true"),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::SandboxNotFound);
    assert_eq!(w.service.execs_running(None), 1);
    w.double.release(1);
    held.await.unwrap().unwrap();

    // With the caps off, 40 commands of one project run at once.
    let w = Held::new(ExecConcurrency::NONE, Duration::from_secs(60)).await;
    let a = w.project("a").await;
    let all: Vec<_> = (0..40).map(|_| w.spawn_exec(&a)).collect();
    w.double.until_arrived(40).await;
    assert_eq!(w.service.execs_running(Some(a.caller.project_id())), 40);
    w.double.release(40);
    for r in all {
        r.await.unwrap().unwrap();
    }
}

#[test]
fn the_default_caps_are_32_per_project_and_256_per_server() {
    assert_eq!(ServiceConfig::default().exec_concurrency, caps(32, 256));
    assert_eq!(ExecConcurrency::default(), ExecConcurrency::standard());
}
