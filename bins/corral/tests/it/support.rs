//! A world per test: a temporary data dir with a SQLite registry, the `local` provider, any
//! scripted providers, the service and the actix app.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::HeaderMap;
use actix_web::test::TestRequest;
use async_trait::async_trait;
use corral::http::{AppState, BuildInfo};
use corral_domain::{ImageMode, OperationId, Provider, ProviderCapabilities, TimeoutMode};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::ExposeSecret as _;
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError, Result,
    SandboxProvider,
};
use corral_provider_local::{LocalConfig, LocalProvider};
use corral_provider_testkit::host_shell::HostShellProvider;
use corral_registry::{Database, DatabaseConfig, MasterKey, ProjectId, Registry};
use corral_service::{Service, ServiceConfig};
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
    Arc::new(LocalProvider::new(LocalConfig::new(root.join("sandboxes"))).unwrap())
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
        let state = AppState {
            service: service.clone(),
            metrics: Arc::new(corral::http::request_metrics()),
            build: BuildInfo::current(),
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
    let res = match app.call(req.to_request()).await {
        Ok(res) => res,
        Err(e) => panic!("the app failed instead of answering: {e}"),
    };
    let status = res.status();
    let headers = res.headers().clone();
    let body = actix_web::body::to_bytes(res.into_body())
        .await
        .unwrap_or_default();
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

type MakeError = Box<dyn Fn() -> ProviderError + Send + Sync>;

/// A provider double posing as `provider`: real behaviour from the host-shell double, plus
/// scripted failures per call and an optional gate that holds creates.
pub(crate) struct Scripted {
    provider: Provider,
    caps: ProviderCapabilities,
    inner: HostShellProvider,
    faults: Mutex<HashMap<&'static str, VecDeque<MakeError>>>,
    /// Creates wait for a permit when set.
    pub(crate) gate: Option<Arc<tokio::sync::Semaphore>>,
    /// Lose the answer of the next create after creating (TimedOutAfterSend).
    pub(crate) lose_next_create_answer: Mutex<bool>,
    /// Calls that panic (once each).
    pub(crate) panic_on: Mutex<Vec<&'static str>>,
    /// Every call, in order.
    pub(crate) calls: Mutex<Vec<&'static str>>,
    /// Credentials seen (exposed), to prove what reached the provider.
    pub(crate) credentials: Mutex<Vec<Option<String>>>,
}

impl Scripted {
    pub(crate) fn new(provider: Provider) -> Self {
        let inner = HostShellProvider::new();
        let mut caps = inner.capabilities().clone();
        caps.provider = provider;
        caps.display_name = format!("Scripted {provider}");
        if provider.is_bridge() {
            caps.image_mode = ImageMode::Fixed;
            caps.timeout_mode = TimeoutMode::ProviderManaged;
            caps.timeout_granularity_seconds = None;
        }
        Self {
            provider,
            caps,
            inner,
            faults: Mutex::new(HashMap::new()),
            gate: None,
            lose_next_create_answer: Mutex::new(false),
            panic_on: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            credentials: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn fail_next(
        &self,
        call: &'static str,
        make: impl Fn() -> ProviderError + Send + Sync + 'static,
    ) {
        self.faults
            .lock()
            .unwrap()
            .entry(call)
            .or_default()
            .push_back(Box::new(make));
    }

    pub(crate) fn count(&self, call: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| **c == call)
            .count()
    }

    fn enter(&self, call: &'static str, ctx: &CallContext) -> Result<()> {
        self.calls.lock().unwrap().push(call);
        let panics = {
            let mut p = self.panic_on.lock().unwrap();
            let hit = p.iter().position(|c| *c == call);
            hit.map(|i| p.remove(i)).is_some()
        };
        assert!(!panics, "scripted panic in {call}");
        self.credentials
            .lock()
            .unwrap()
            .push(ctx.credential().map(|c| c.expose_secret().to_owned()));
        match self
            .faults
            .lock()
            .unwrap()
            .get_mut(call)
            .and_then(VecDeque::pop_front)
        {
            Some(make) => Err(make()),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl SandboxProvider for Scripted {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.enter("create", ctx)?;
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        let made = self.inner.create(ctx, spec).await?;
        let lose = std::mem::take(&mut *self.lose_next_create_answer.lock().unwrap());
        if lose {
            return Err(ProviderError::TimedOutAfterSend {
                provider: self.provider,
            });
        }
        Ok(made)
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.enter("get", ctx)?;
        self.inner.get(ctx, native_id).await
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.enter("delete", ctx)?;
        self.inner.delete(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        self.enter("exec", ctx)?;
        self.inner.exec(ctx, native_id, spec).await
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max: usize,
    ) -> Result<Vec<u8>> {
        self.enter("read_file", ctx)?;
        self.inner.read_file(ctx, native_id, path, max).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        self.enter("write_file", ctx)?;
        self.inner.write_file(ctx, native_id, path, content).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        op: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.enter("find_by_operation_id", ctx)?;
        self.inner.find_by_operation_id(ctx, op).await
    }
}
