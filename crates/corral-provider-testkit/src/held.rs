//! A provider double whose commands run until the test lets them go, for tests of what
//! holds while commands run: caps on running commands, callers that go away, deadlines.
//!
//! [`HeldExecs`] poses as any provider over the [`HostShellProvider`] double (real sandboxes
//! as temporary directories). Every exec waits at a closed gate: let through
//! ([`HeldExecs::release`]), it runs its command for real; at its deadline (the spec's
//! timeout, bounded by the call's) it answers `CommandTimedOut`, as a real provider does.
//!
//! ```
//! use std::sync::Arc;
//! use corral_domain::Provider;
//! use corral_provider::SandboxProvider;
//! use corral_provider_testkit::held::HeldExecs;
//!
//! let double = Arc::new(HeldExecs::new(Provider::Local));
//! let _as_port: Arc<dyn SandboxProvider> = double.clone();
//! assert_eq!((double.arrived(), double.running()), (0, 0));
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities};
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError, Result,
    SandboxProvider,
};
use tokio::sync::Semaphore;

use crate::host_shell::HostShellProvider;

/// What the next exec does instead of waiting at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextExec {
    /// Fails at once with `Unavailable`.
    Fail,
    /// Panics.
    Panic,
}

/// A provider double whose execs wait at a gate (see the module docs).
pub struct HeldExecs {
    caps: ProviderCapabilities,
    inner: HostShellProvider,
    gate: Semaphore,
    arrived: AtomicUsize,
    running: AtomicUsize,
    next: Mutex<Option<NextExec>>,
}

/// Counts an exec as running until its future ends or is dropped.
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl HeldExecs {
    /// A double posing as `provider`, its gate closed.
    pub fn new(provider: Provider) -> Self {
        let inner = HostShellProvider::new();
        let mut caps = inner.capabilities().clone();
        caps.provider = provider;
        caps.display_name = format!("Held {provider}");
        // Only execs are held here: the lifecycle is not offered.
        caps.supports_explicit_stop = false;
        caps.supports_snapshots = false;
        caps.supports_restore = false;
        Self {
            caps,
            inner,
            gate: Semaphore::new(0),
            arrived: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            next: Mutex::new(None),
        }
    }

    /// Lets `n` execs through the gate (those waiting, then those still to come).
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Execs that reached the provider so far.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::SeqCst)
    }

    /// Execs inside the provider now (a dropped call leaves at once).
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// The next exec fails or panics instead of waiting.
    pub fn script_next(&self, what: NextExec) {
        *self.next.lock().unwrap() = Some(what);
    }

    /// Waits (real time, up to 10 s) until `n` execs have arrived.
    ///
    /// # Panics
    /// When they do not.
    pub async fn until_arrived(&self, n: usize) {
        for _ in 0..1000 {
            if self.arrived() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("only {} of {n} execs reached the provider", self.arrived());
    }
}

#[async_trait]
impl SandboxProvider for HeldExecs {
    fn provider(&self) -> Provider {
        self.caps.provider
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.inner.create(ctx, spec).await
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.inner.get(ctx, native_id).await
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.inner.delete(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_add(1, Ordering::SeqCst);
        let _running = Running(&self.running);
        let scripted = self.next.lock().unwrap().take();
        match scripted {
            Some(NextExec::Fail) => {
                return Err(ProviderError::Unavailable {
                    provider: self.caps.provider,
                    message: "scripted failure".into(),
                    retry_after: None,
                });
            }
            Some(NextExec::Panic) => panic!("scripted panic in exec"),
            None => {}
        }
        let timeout = ctx.bounded(spec.timeout);
        tokio::select! {
            permit = self.gate.acquire() => permit.expect("the gate is never closed").forget(),
            () = tokio::time::sleep(timeout) => {
                return Err(ProviderError::CommandTimedOut { after: spec.timeout });
            }
        }
        self.inner.exec(ctx, native_id, spec).await
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max: usize,
    ) -> Result<Vec<u8>> {
        self.inner.read_file(ctx, native_id, path, max).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        self.inner.write_file(ctx, native_id, path, content).await
    }

    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<corral_provider::TaggedPage> {
        self.inner.list_tagged(ctx, deployment, page).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        op: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.inner.find_by_operation_id(ctx, op).await
    }
}
