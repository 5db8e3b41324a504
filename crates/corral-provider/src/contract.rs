//! The port's contract rules that hold for every adapter, applied once by a wrapper (as
//! object_store's `LimitStore` wraps any store) instead of in each adapter and again in the
//! service:
//!
//! - deleting a sandbox the provider no longer has is `Ok`;
//! - `find_by_operation_id` returns only sandboxes that carry the operation tag asked for, so an
//!   adapter whose provider ignored a filter cannot make Corral adopt another operation's
//!   sandbox;
//! - every call is timed and reported to a [`CallObserver`] (the service's metrics).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities};

use crate::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError, Result,
    SandboxProvider,
};

/// Receives one observation per provider call.
pub trait CallObserver: Send + Sync + 'static {
    /// `call` on `provider` took `took` and succeeded or not.
    fn observe(&self, provider: Provider, call: &'static str, took: Duration, ok: bool);
}

/// An observer that drops every observation.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl CallObserver for NoObserver {
    fn observe(&self, _: Provider, _: &'static str, _: Duration, _: bool) {}
}

/// Any adapter, with the contract rules above applied.
pub struct Contracted {
    inner: Arc<dyn SandboxProvider>,
    observer: Arc<dyn CallObserver>,
}

impl std::fmt::Debug for Contracted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contracted")
            .field("provider", &self.inner.provider())
            .finish_non_exhaustive()
    }
}

impl Contracted {
    /// Wraps `inner`, reporting every call to `observer`.
    pub fn new(inner: Arc<dyn SandboxProvider>, observer: Arc<dyn CallObserver>) -> Self {
        Self { inner, observer }
    }

    fn observe<T>(&self, call: &'static str, start: Instant, result: &Result<T>) {
        self.observer
            .observe(self.inner.provider(), call, start.elapsed(), result.is_ok());
    }
}

#[async_trait]
impl SandboxProvider for Contracted {
    fn provider(&self) -> Provider {
        self.inner.provider()
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        self.inner.capabilities()
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = self.inner.create(ctx, spec).await;
        self.observe("create", start, &result);
        result
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = self.inner.get(ctx, native_id).await;
        self.observe("get", start, &result);
        result
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        let start = Instant::now();
        let result = match self.inner.delete(ctx, native_id).await {
            Err(ProviderError::NotFound { .. }) => Ok(()),
            other => other,
        };
        self.observe("delete", start, &result);
        result
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let start = Instant::now();
        let result = self.inner.exec(ctx, native_id, spec).await;
        self.observe("exec", start, &result);
        result
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let start = Instant::now();
        let result = self.inner.read_file(ctx, native_id, path, max_bytes).await;
        self.observe("read_file", start, &result);
        result
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let start = Instant::now();
        let result = self.inner.write_file(ctx, native_id, path, content).await;
        self.observe("write_file", start, &result);
        result
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        let start = Instant::now();
        let result = self
            .inner
            .find_by_operation_id(ctx, operation_id)
            .await
            .map(|found| {
                found
                    .into_iter()
                    .filter(|s| s.operation_id.as_ref() == Some(operation_id))
                    .collect()
            });
        self.observe("find_by_operation_id", start, &result);
        result
    }
}
