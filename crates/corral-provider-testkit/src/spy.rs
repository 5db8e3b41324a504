//! A recording wrapper around any provider, for tests that drive a real adapter (against its
//! fake) through the service and then ask what reached it.
//!
//! [`Spy`] forwards every call unchanged and records its name and, for creates that
//! succeeded, the native id and operation id made: with them a test can check at the
//! provider itself that nothing was left behind ([`Spy::leftovers`]).
//!
//! ```
//! use std::sync::Arc;
//! use corral_provider::SandboxProvider;
//! use corral_provider_testkit::host_shell::HostShellProvider;
//! use corral_provider_testkit::spy::Spy;
//!
//! let spy = Arc::new(Spy::new(Arc::new(HostShellProvider::new())));
//! let _as_port: Arc<dyn SandboxProvider> = spy.clone();
//! assert!(spy.calls().is_empty());
//! ```

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities};
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError, Result,
    SandboxProvider,
};

/// A sandbox a create made, as the provider answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// The provider-native id.
    pub native_id: String,
    /// The operation id the create carried.
    pub operation_id: OperationId,
}

/// Forwards to `inner`, recording every call (see the module docs).
pub struct Spy {
    inner: Arc<dyn SandboxProvider>,
    calls: Mutex<Vec<&'static str>>,
    made: Mutex<Vec<Made>>,
    /// Operation ids of every create attempted, answered or not.
    attempted: Mutex<Vec<OperationId>>,
}

impl Spy {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn SandboxProvider>) -> Self {
        Self {
            inner,
            calls: Mutex::default(),
            made: Mutex::default(),
            attempted: Mutex::default(),
        }
    }

    /// Every call so far, by name (`"create"`, `"get"`, `"delete"`, `"exec"`, `"read_file"`,
    /// `"write_file"`, `"find_by_operation_id"`), in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().expect("spy lock").clone()
    }

    /// How many times `call` was made.
    pub fn count(&self, call: &str) -> usize {
        self.calls().iter().filter(|c| **c == call).count()
    }

    /// The sandboxes creates answered with.
    pub fn made(&self) -> Vec<Made> {
        self.made.lock().expect("spy lock").clone()
    }

    /// The operation ids of every create attempted (also those that failed).
    pub fn attempted(&self) -> Vec<OperationId> {
        self.attempted.lock().expect("spy lock").clone()
    }

    /// What the provider still has of what went through this spy, asked of the provider
    /// itself with `ctx`: every made sandbox that `get` does not report gone (not found, or
    /// in a terminal status), and every live sandbox `find_by_operation_id` finds for an
    /// attempted create. Empty when nothing leaked.
    pub async fn leftovers(&self, ctx: &CallContext) -> Vec<String> {
        let mut left = Vec::new();
        for made in self.made() {
            match self.inner.get(ctx, &made.native_id).await {
                Err(ProviderError::NotFound { .. }) => {}
                Ok(seen) if seen.status.is_terminal() => {}
                other => left.push(format!("{}: get gave {other:?}", made.native_id)),
            }
        }
        for op in self.attempted() {
            match self.inner.find_by_operation_id(ctx, &op).await {
                Ok(found) => left.extend(
                    found
                        .into_iter()
                        .filter(|s| !s.status.is_terminal())
                        .map(|s| format!("{}: found by {op} ({})", s.native_id, s.status)),
                ),
                Err(ProviderError::Unsupported { .. }) => {}
                Err(e) => left.push(format!("{op}: find_by_operation_id failed: {e}")),
            }
        }
        left.sort();
        left.dedup();
        left
    }

    fn record(&self, call: &'static str) {
        self.calls.lock().expect("spy lock").push(call);
    }
}

#[async_trait]
impl SandboxProvider for Spy {
    fn provider(&self) -> Provider {
        self.inner.provider()
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        self.inner.capabilities()
    }

    async fn create(&self, ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.record("create");
        self.attempted
            .lock()
            .expect("spy lock")
            .push(spec.operation_id);
        let made = self.inner.create(ctx, spec).await;
        if let Ok(seen) = &made {
            self.made.lock().expect("spy lock").push(Made {
                native_id: seen.native_id.clone(),
                operation_id: spec.operation_id,
            });
        }
        made
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.record("get");
        self.inner.get(ctx, native_id).await
    }

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.record("stop");
        self.inner.stop(ctx, native_id).await
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        self.record("resume");
        self.inner.resume(ctx, native_id).await
    }

    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &corral_provider::SnapshotSpec,
    ) -> Result<corral_provider::ObservedSnapshot> {
        self.record("snapshot");
        self.inner.snapshot(ctx, native_id, spec).await
    }

    async fn get_snapshot(
        &self,
        ctx: &CallContext,
        snapshot: &str,
    ) -> Result<corral_provider::ObservedSnapshot> {
        self.record("get_snapshot");
        self.inner.get_snapshot(ctx, snapshot).await
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        self.record("delete_snapshot");
        self.inner.delete_snapshot(ctx, snapshot).await
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        self.record("restore");
        self.inner.restore(ctx, spec, snapshot).await
    }

    async fn delete(&self, ctx: &CallContext, native_id: &str) -> Result<()> {
        self.record("delete");
        self.inner.delete(ctx, native_id).await
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        self.record("exec");
        self.inner.exec(ctx, native_id, spec).await
    }

    async fn read_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        self.record("read_file");
        self.inner.read_file(ctx, native_id, path, max_bytes).await
    }

    async fn write_file(
        &self,
        ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        self.record("write_file");
        self.inner.write_file(ctx, native_id, path, content).await
    }

    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<corral_provider::TaggedPage> {
        self.record("list_tagged");
        self.inner.list_tagged(ctx, deployment, page).await
    }

    async fn find_by_operation_id(
        &self,
        ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.record("find_by_operation_id");
        self.inner.find_by_operation_id(ctx, operation_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_shell::HostShellProvider;
    use corral_domain::CreateSandboxRequest;

    #[tokio::test]
    async fn a_made_sandbox_is_a_leftover_until_deleted() {
        let spy = Spy::new(Arc::new(HostShellProvider::new()));
        let ctx = CallContext::anonymous();
        let spec = CreateSpec {
            operation_id: OperationId::new(),
            request: CreateSandboxRequest::standard(Provider::Local, None, None),
            timeout_seconds: None,
        };
        let seen = spy.create(&ctx, &spec).await.unwrap();
        // Seen both by get and by its operation id.
        let left = spy.leftovers(&ctx).await;
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            left.iter().all(|l| l.starts_with(&seen.native_id)),
            "{left:?}"
        );
        spy.delete(&ctx, &seen.native_id).await.unwrap();
        assert!(spy.leftovers(&ctx).await.is_empty());
        // `leftovers` asks the provider directly: only the test's own calls are recorded.
        assert_eq!(spy.calls(), ["create", "delete"]);
        assert_eq!(spy.made()[0].operation_id, spec.operation_id);
    }
}
