//! A counting provider double for service and HTTP tests.
//!
//! [`Counting`] poses as any provider over the [`HostShellProvider`] double (real sandboxes
//! as temporary directories, real commands), records every call and the credential it
//! carried, and can be scripted: hold creates at a gate, fail a call once, panic in a call,
//! lose a create's answer after creating, and make `find_by_operation_id` lag (find nothing)
//! or hang (never answer).
//!
//! ```
//! use std::sync::Arc;
//! use corral_domain::Provider;
//! use corral_provider::{ProviderError, SandboxProvider};
//! use corral_provider_testkit::counting::Counting;
//!
//! let double = Arc::new(Counting::new(Provider::E2b, true));
//! double.fail_next("get", || ProviderError::TimedOutAfterSend { provider: Provider::E2b });
//! let _as_port: Arc<dyn SandboxProvider> = double.clone();
//! assert_eq!(double.total(), 0);
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use corral_domain::{
    CommandId, ImageMode, OperationId, Provider, ProviderCapabilities, Signal, TimeoutMode,
};
use corral_provider::{
    CallContext, CommandSpec, CreateSpec, ExecOutput, ExecSpec, ExposeSecret as _, ObservedSandbox,
    ProviderError, Result, SandboxProvider, Started, commands_via_exec,
};
use tokio::sync::Semaphore;

use crate::host_shell::HostShellProvider;

type MakeError = Box<dyn Fn() -> ProviderError + Send + Sync>;

/// A provider double posing as one provider: counts calls and plays scripted faults.
///
/// Calls are recorded by name (`"create"`, `"get"`, `"delete"`, `"exec"`, `"read_file"`,
/// `"write_file"`, `"find_by_operation_id"`). A gated create is recorded as
/// `"create_arrived"` when it reaches the gate and as `"create"` once let through, so a test
/// can wait for "the provider saw it" and still count the creates that went on.
pub struct Counting {
    provider: Provider,
    caps: ProviderCapabilities,
    inner: HostShellProvider,
    faults: Mutex<HashMap<&'static str, VecDeque<MakeError>>>,
    /// Every call, in order.
    pub calls: Mutex<Vec<&'static str>>,
    /// Creates wait here for a permit (when set) before anything else happens.
    pub gate: Option<Arc<Semaphore>>,
    /// Calls that panic, once each (after being recorded).
    pub panic_on: Mutex<Vec<&'static str>>,
    /// The next create makes its sandbox and then answers `TimedOutAfterSend`.
    pub lose_next_create_answer: Mutex<bool>,
    /// The next command start starts the command and then answers `TimedOutAfterSend`.
    pub lose_next_start_answer: Mutex<bool>,
    /// `find_by_operation_id` finds nothing while set (a provider whose listing lags).
    pub listing_lags: Mutex<bool>,
    /// `find_by_operation_id` never answers while set.
    pub listing_hangs: Mutex<bool>,
    /// The credentials seen, exposed, in call order: proves what reached the provider.
    pub credentials: Mutex<Vec<Option<String>>>,
    /// The pinned bridge addresses each call's context carried, in call order.
    pub pinned: Mutex<Vec<Option<Vec<std::net::SocketAddr>>>>,
}

impl Counting {
    /// A double posing as `provider`, nothing scripted; with `gated`, creates wait at a
    /// closed gate for [`Counting::release_creates`].
    ///
    /// A bridge provider's capabilities are those of a bridge (fixed image, provider-managed
    /// timeout), so the service treats the double as it would the real one.
    pub fn new(provider: Provider, gated: bool) -> Self {
        let inner = HostShellProvider::new();
        let mut caps = inner.capabilities().clone();
        caps.provider = provider;
        caps.display_name = format!("Counting {provider}");
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
            calls: Mutex::new(Vec::new()),
            gate: gated.then(|| Arc::new(Semaphore::new(0))),
            panic_on: Mutex::new(Vec::new()),
            lose_next_create_answer: Mutex::new(false),
            lose_next_start_answer: Mutex::new(false),
            listing_lags: Mutex::new(false),
            listing_hangs: Mutex::new(false),
            credentials: Mutex::new(Vec::new()),
            pinned: Mutex::new(Vec::new()),
        }
    }

    /// The same double advertising `commands` as its command capabilities (e.g. fewer
    /// signals, no stdin), so a test can see the service refuse what a provider lacks.
    pub fn with_commands(mut self, commands: corral_domain::CommandCapabilities) -> Self {
        self.caps.commands = commands;
        self
    }

    /// The same double advertising no stop, snapshot or restore, so a test can see the
    /// service refuse them before any call.
    pub fn without_lifecycle(mut self) -> Self {
        self.caps.supports_explicit_stop = false;
        self.caps.supports_snapshots = false;
        self.caps.supports_restore = false;
        self
    }

    /// Lets `n` held creates through the gate.
    ///
    /// # Panics
    /// When the double has no gate.
    pub fn release_creates(&self, n: usize) {
        self.gate
            .as_ref()
            .expect("release_creates on a double without a gate")
            .add_permits(n);
    }

    /// The next `call` fails with `make()` (faults queue up per call).
    pub fn fail_next(
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

    /// How many times `call` was made.
    pub fn count(&self, call: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| **c == call)
            .count()
    }

    /// Every call so far.
    pub fn total(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    /// Records `call` and its credential, then plays a scripted panic or fault for it.
    fn enter(&self, call: &'static str, ctx: &CallContext) -> Result<()> {
        self.calls.lock().unwrap().push(call);
        self.credentials
            .lock()
            .unwrap()
            .push(ctx.credential().map(|c| c.expose_secret().to_owned()));
        self.pinned
            .lock()
            .unwrap()
            .push(ctx.pinned_addrs().map(<[std::net::SocketAddr]>::to_vec));
        let panics = {
            let mut p = self.panic_on.lock().unwrap();
            let hit = p.iter().position(|c| *c == call);
            hit.map(|i| p.remove(i)).is_some()
        };
        assert!(!panics, "scripted panic in {call}");
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
impl SandboxProvider for Counting {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        if let Some(gate) = &self.gate {
            // Counted once it arrives, so a test can wait for "the provider saw it".
            self.calls.lock().unwrap().push("create_arrived");
            gate.acquire().await.unwrap().forget();
        }
        self.enter("create", ctx)?;
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

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.enter("stop", ctx)?;
        self.inner.stop(ctx, native_id).await
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.enter("resume", ctx)?;
        self.inner.resume(ctx, native_id).await
    }

    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &corral_provider::SnapshotSpec,
    ) -> Result<corral_provider::ObservedSnapshot> {
        self.enter("snapshot", ctx)?;
        self.inner.snapshot(ctx, native_id, spec).await
    }

    async fn get_snapshot(
        &self,
        ctx: &CallContext,
        snapshot: &str,
    ) -> Result<corral_provider::ObservedSnapshot> {
        self.enter("get_snapshot", ctx)?;
        self.inner.get_snapshot(ctx, snapshot).await
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.enter("delete_snapshot", ctx)?;
        self.inner.delete_snapshot(ctx, snapshot).await
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        self.enter("restore", ctx)?;
        self.inner.restore(ctx, spec, snapshot).await
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

    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<corral_provider::TaggedPage> {
        self.enter("list_tagged", ctx)?;
        self.inner.list_tagged(ctx, deployment, page).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        op: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.enter("find_by_operation_id", ctx)?;
        let hangs = *self.listing_hangs.lock().unwrap();
        if hangs {
            std::future::pending::<()>().await;
        }
        if *self.listing_lags.lock().unwrap() {
            return Ok(Vec::new());
        }
        self.inner.find_by_operation_id(ctx, op).await
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        self.enter("start_command", ctx)?;
        let started = commands_via_exec::start(self, ctx, native_id, spec).await?;
        if std::mem::take(&mut *self.lose_next_start_answer.lock().unwrap()) {
            return Err(ProviderError::TimedOutAfterSend {
                provider: self.provider,
            });
        }
        Ok(started)
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        self.enter("signal_command", ctx)?;
        commands_via_exec::signal(self, ctx, native_id, handle, signal).await
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        self.enter("find_command", ctx)?;
        commands_via_exec::find(self, ctx, native_id, command_id).await
    }
}
