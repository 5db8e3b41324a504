//! A world per test: a temporary data dir with a SQLite registry, the `local` provider, any
//! scripted providers (the testkit's counting double), the service and the actix app.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::HeaderMap;
use actix_web::test::TestRequest;
use corral_domain::Provider;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::ExposeSecret as _;
use corral_provider::SandboxProvider;
use corral_provider_local::{LocalConfig, LocalProvider};
pub(crate) use corral_provider_testkit::counting::Counting;
use corral_registry::{Database, DatabaseConfig, MasterKey, ProjectId, Registry};
use corral_service::{Service, ServiceConfig};
use corral_web::AppState;
use serde_json::Value;

/// Everything one test needs.
pub(crate) struct World {
    #[allow(dead_code)] // Kept alive (and deleted) with the world.
    pub(crate) dir: tempfile::TempDir,
    pub(crate) registry: Registry,
    pub(crate) service: Service,
    pub(crate) state: AppState,
    pub(crate) key: String,
    pub(crate) project: ProjectId,
}

pub(crate) type Providers = BTreeMap<Provider, Arc<dyn SandboxProvider>>;

pub(crate) fn local(root: &Path) -> Arc<dyn SandboxProvider> {
    Arc::new(LocalProvider::new(small_local(root.join("sandboxes"))).unwrap())
}

/// `local` with a 32 MiB filesystem per sandbox: the 1 GiB default is allocated in full at
/// create, and the suite makes many sandboxes at once.
pub(crate) fn small_local(root: std::path::PathBuf) -> LocalConfig {
    let mut config = LocalConfig::new(root);
    // The sandbox init is the server's own executable (as `corral serve` runs it).
    config.init = Some(corral_provider_local::InitProgram {
        path: env!("CARGO_BIN_EXE_corral").into(),
        args: vec![corral_provider_local::INIT_ARG.into()],
    });
    config.limits.disk_bytes = Some(32 << 20);
    config.limits.disk_reserve_bytes = 256 << 20;
    config
}

impl World {
    /// `local` only, default configuration.
    pub(crate) async fn new() -> Self {
        Self::with(|_| BTreeMap::new(), ServiceConfig::default()).await
    }

    /// `local` plus the providers `extra` builds, with `config`.
    pub(crate) async fn with(
        extra: impl FnOnce(&Path) -> Providers,
        config: ServiceConfig,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("corral.db").display());
        let db = Database::connect(DatabaseConfig::new(url)).await.unwrap();
        Self::with_db(dir, db, extra, config, None).await
    }

    /// As [`World::with`], over a given database and (optionally) a separate idempotency pool.
    pub(crate) async fn with_db(
        dir: tempfile::TempDir,
        db: Database,
        extra: impl FnOnce(&Path) -> Providers,
        config: ServiceConfig,
        idem_db: Option<Database>,
    ) -> Self {
        let registry = Registry::new(
            db.clone(),
            MasterKey::load_or_create(&dir.path().join("master.key")).unwrap(),
        );
        let store = IdempotencyStore::new(idem_db.unwrap_or(db), IdempotencyConfig::default());
        let mut providers: Providers = BTreeMap::new();
        providers.insert(Provider::Local, local(dir.path()));
        providers.extend(extra(dir.path()));
        let service = Service::new(providers, registry.clone(), store, config);
        let project = registry.create_project("default").await.unwrap();
        let issued = registry.issue_api_key(project.id).await.unwrap();
        let control = corral_control::Control::new(
            corral_control_store::ControlStore::new(registry.database().clone()),
            registry.clone(),
            service.clone(),
            corral_control::ControlConfig::default(),
        );
        let state = AppState {
            service: service.clone(),
            control,
            metrics: Arc::new(corral_web::request_metrics()),
            build: corral::server::build_info(),
            e2b: Some(corral_e2b::FrontDoor::new(
                service.clone(),
                corral_e2b::E2bConfig::default(),
            )),
        };
        World {
            dir,
            registry,
            service,
            state,
            key: issued.key.expose_secret().to_owned(),
            project: project.id,
        }
    }

    /// Another project's key.
    pub(crate) async fn other_project_key(&self, name: &str) -> String {
        let p = self.registry.create_project(name).await.unwrap();
        let k = self.registry.issue_api_key(p.id).await.unwrap();
        k.key.expose_secret().to_owned()
    }

    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }
}

/// A response, read whole.
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
    pub(crate) json: Value,
}

impl Resp {
    pub(crate) fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    #[track_caller]
    pub(crate) fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status.as_u16(), self.code()),
            (status, code),
            "body: {}",
            self.text
        );
        let rid = self.headers.get("x-request-id").unwrap().to_str().unwrap();
        assert_eq!(
            self.json["error"]["requestId"], rid,
            "requestId matches the header"
        );
    }

    #[track_caller]
    pub(crate) fn expect_ok(&self, status: u16) -> &Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert!(self.headers.contains_key("x-request-id"));
        &self.json
    }
}

/// Sends one request to an initialized app.
pub(crate) async fn send<S, B>(app: &S, req: TestRequest) -> Resp
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: MessageBody,
{
    let (status, headers, body) = match app.call(req.to_request()).await {
        Ok(res) => {
            let (status, headers) = (res.status(), res.headers().clone());
            let body = actix_web::body::to_bytes(res.into_body())
                .await
                .unwrap_or_default();
            (status, headers, body)
        }
        // What actix-http does with the app's error: answers its response (for a handler's
        // panic, the envelope the request middleware put in it).
        Err(e) => {
            let resp = e.error_response();
            let (status, headers) = (resp.status(), resp.headers().clone());
            let body = actix_web::body::to_bytes(resp.into_body())
                .await
                .unwrap_or_default();
            (status, headers, body)
        }
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        text,
        json,
    }
}

/// `TestRequest` with the world's key and a JSON body.
pub(crate) fn post(w: &World, path: &str, body: Value) -> TestRequest {
    TestRequest::post()
        .uri(path)
        .insert_header(("Authorization", w.bearer()))
        .set_json(body)
}

pub(crate) fn get(w: &World, path: &str) -> TestRequest {
    TestRequest::get()
        .uri(path)
        .insert_header(("Authorization", w.bearer()))
}

pub(crate) fn delete(w: &World, path: &str) -> TestRequest {
    TestRequest::delete()
        .uri(path)
        .insert_header(("Authorization", w.bearer()))
}
