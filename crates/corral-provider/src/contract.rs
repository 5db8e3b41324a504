//! The port's contract rules that hold for every adapter, applied once by a wrapper (as
//! object_store's `LimitStore` wraps any store) instead of in each adapter and again in the
//! service:
//!
//! - deleting a sandbox the provider no longer has is `Ok`;
//! - `find_by_operation_id` returns only sandboxes that carry the operation tag asked for, so an
//!   adapter whose provider ignored a filter cannot make Corral adopt another operation's
//!   sandbox;
//! - every native id a provider answers (create, get, find by operation id) passes
//!   [`check_native_id`]: it is stored, put into provider URLs and shown in the console, so an
//!   answer such as `../../x` or markup is refused as a protocol error (on create the service
//!   maps it to `sandbox_create_outcome_unknown`, and reconciliation finds the real sandbox by
//!   its operation id) instead of being recorded and later used against the wrong resource;
//! - every call is timed and reported to a [`CallObserver`] (the service's metrics).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use corral_domain::{CommandId, OperationId, Provider, ProviderCapabilities, Signal};

use crate::{
    CallContext, CommandEvents, CommandSpec, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox,
    ObservedSnapshot, OutputOffsets, ProviderError, Result, SandboxProvider, SnapshotSpec, Started,
    TaggedPage,
};

/// The longest native id accepted. Every provider Corral speaks to documents ids far shorter
/// (UUIDs, prefixed base62/hex ids, machine names); the bound keeps a hostile answer out of
/// the registry and URLs.
pub const MAX_NATIVE_ID_LEN: usize = 256;

/// The conservative shape every provider's documented sandbox ids fit: non-empty, at most
/// [`MAX_NATIVE_ID_LEN`] bytes of `[A-Za-z0-9._:-]`, and no `..` (nor `.` alone), so an id
/// can never be a path segment that climbs out of a provider URL, nor markup, whitespace or a
/// query. An adapter whose provider documents a tighter format may check more.
pub fn check_native_id(provider: Provider, id: &str) -> Result<()> {
    let shape_ok = !id.is_empty()
        && id.len() <= MAX_NATIVE_ID_LEN
        && id != "."
        && !id.contains("..")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if shape_ok {
        Ok(())
    } else {
        // The id itself is not echoed: it is hostile or broken input.
        Err(ProviderError::Protocol {
            provider,
            message: format!(
                "its sandbox id ({} bytes) is not of the documented shape (1 to {MAX_NATIVE_ID_LEN} of A-Z a-z 0-9 . _ : -, no `..`)",
                id.len()
            ),
        })
    }
}

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

    /// Refuses an operation the capabilities do not advertise, before any provider call: the
    /// catalog is the one statement of what works.
    fn capable(
        &self,
        operation: &'static str,
        advertised: impl Fn(&ProviderCapabilities) -> bool,
    ) -> Result<()> {
        if advertised(self.inner.capabilities()) {
            return Ok(());
        }
        Err(ProviderError::Unsupported {
            provider: self.inner.provider(),
            operation,
            reason: "the provider's capabilities do not advertise it".into(),
        })
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
        let result = self.inner.create(ctx, spec).await.and_then(|s| {
            check_native_id(self.inner.provider(), &s.native_id)?;
            Ok(s)
        });
        self.observe("create", start, &result);
        result
    }

    async fn get(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = self.inner.get(ctx, native_id).await.and_then(|s| {
            check_native_id(self.inner.provider(), &s.native_id)?;
            Ok(s)
        });
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
            .and_then(|found| {
                let found: Vec<_> = found
                    .into_iter()
                    .filter(|s| s.operation_id.as_ref() == Some(operation_id))
                    .collect();
                for s in &found {
                    check_native_id(self.inner.provider(), &s.native_id)?;
                }
                Ok(found)
            });
        self.observe("find_by_operation_id", start, &result);
        result
    }

    async fn list_tagged(
        &self,
        ctx: &CallContext,
        deployment: &str,
        page: Option<&str>,
    ) -> Result<TaggedPage> {
        let start = Instant::now();
        let result = self
            .inner
            .list_tagged(ctx, deployment, page)
            .await
            .and_then(|page| {
                for s in &page.sandboxes {
                    check_native_id(self.inner.provider(), &s.observed.native_id)?;
                }
                Ok(page)
            });
        self.observe("list_tagged", start, &result);
        result
    }

    async fn stop(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = match self.capable("stop", |c| c.supports_explicit_stop) {
            Ok(()) => self.inner.stop(ctx, native_id).await.and_then(|s| {
                check_native_id(self.inner.provider(), &s.native_id)?;
                Ok(s)
            }),
            Err(e) => Err(e),
        };
        self.observe("stop", start, &result);
        result
    }

    async fn resume(&self, ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = match self.capable("resume", |c| c.supports_explicit_stop) {
            Ok(()) => self.inner.resume(ctx, native_id).await.and_then(|s| {
                check_native_id(self.inner.provider(), &s.native_id)?;
                Ok(s)
            }),
            Err(e) => Err(e),
        };
        self.observe("resume", start, &result);
        result
    }

    async fn snapshot(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &SnapshotSpec,
    ) -> Result<ObservedSnapshot> {
        let start = Instant::now();
        let result = match self.capable("snapshot", |c| c.supports_snapshots) {
            Ok(()) => self
                .inner
                .snapshot(ctx, native_id, spec)
                .await
                .and_then(|s| {
                    check_native_id(self.inner.provider(), &s.native_id)?;
                    Ok(s)
                }),
            Err(e) => Err(e),
        };
        self.observe("snapshot", start, &result);
        result
    }

    async fn get_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<ObservedSnapshot> {
        let start = Instant::now();
        let result = match self.capable("get_snapshot", |c| c.supports_snapshots) {
            Ok(()) => self.inner.get_snapshot(ctx, snapshot).await.and_then(|s| {
                check_native_id(self.inner.provider(), &s.native_id)?;
                Ok(s)
            }),
            Err(e) => Err(e),
        };
        self.observe("get_snapshot", start, &result);
        result
    }

    async fn delete_snapshot(&self, ctx: &CallContext, snapshot: &str) -> Result<()> {
        let start = Instant::now();
        let result = match self.capable("delete_snapshot", |c| c.supports_snapshots) {
            Ok(()) => match self.inner.delete_snapshot(ctx, snapshot).await {
                Err(ProviderError::NotFound { .. }) => Ok(()),
                other => other,
            },
            Err(e) => Err(e),
        };
        self.observe("delete_snapshot", start, &result);
        result
    }

    async fn restore(
        &self,
        ctx: &CallContext,
        spec: &CreateSpec,
        snapshot: &str,
    ) -> Result<ObservedSandbox> {
        let start = Instant::now();
        let result = match self.capable("restore", |c| c.supports_restore) {
            Ok(()) => self.inner.restore(ctx, spec, snapshot).await.and_then(|s| {
                check_native_id(self.inner.provider(), &s.native_id)?;
                Ok(s)
            }),
            Err(e) => Err(e),
        };
        self.observe("restore", start, &result);
        result
    }

    async fn start_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        spec: &CommandSpec,
    ) -> Result<Started<'a>> {
        let start = Instant::now();
        let result = self.inner.start_command(ctx, native_id, spec).await;
        self.observe("start_command", start, &result);
        result
    }

    async fn attach_command<'a>(
        &'a self,
        ctx: &'a CallContext,
        native_id: &'a str,
        handle: &str,
        from: OutputOffsets,
    ) -> Result<CommandEvents<'a>> {
        let start = Instant::now();
        let result = self
            .inner
            .attach_command(ctx, native_id, handle, from)
            .await;
        self.observe("attach_command", start, &result);
        result
    }

    async fn write_stdin(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        let start = Instant::now();
        let result = self
            .inner
            .write_stdin(ctx, native_id, handle, offset, data)
            .await;
        self.observe("write_stdin", start, &result);
        result
    }

    async fn close_stdin(&self, ctx: &CallContext, native_id: &str, handle: &str) -> Result<()> {
        let start = Instant::now();
        let result = self.inner.close_stdin(ctx, native_id, handle).await;
        self.observe("close_stdin", start, &result);
        result
    }

    async fn signal_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        handle: &str,
        signal: Signal,
    ) -> Result<()> {
        let start = Instant::now();
        let result = self
            .inner
            .signal_command(ctx, native_id, handle, signal)
            .await;
        self.observe("signal_command", start, &result);
        result
    }

    async fn find_command(
        &self,
        ctx: &CallContext,
        native_id: &str,
        command_id: &CommandId,
    ) -> Result<Option<String>> {
        let start = Instant::now();
        let result = self.inner.find_command(ctx, native_id, command_id).await;
        self.observe("find_command", start, &result);
        result
    }
}

#[cfg(test)]
mod native_id_tests {
    use super::*;

    #[test]
    fn documented_id_shapes_pass_and_paths_markup_and_oversized_ids_do_not() {
        for ok in [
            "sbx_01hzy",
            "3f1c2a9e-7b7d-4c1e-9a55-0f2d1b6c8e11",
            "my-app:3d8d9",
            "i8x2k4",
            "sandbox.v1_a",
            &"a".repeat(MAX_NATIVE_ID_LEN),
        ] {
            assert!(check_native_id(Provider::E2b, ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../../x",
            "a..b",
            "a/b",
            "<b>x</b>",
            "a b",
            "a?b=c",
            "a%2e%2e",
            "a\nb",
            "sbx\u{0}",
            "é",
            &"a".repeat(MAX_NATIVE_ID_LEN + 1),
        ] {
            let err = check_native_id(Provider::E2b, bad).unwrap_err();
            assert!(
                matches!(&err, ProviderError::Protocol { .. }) && err.may_have_been_applied(),
                "{bad:?}: {err:?}"
            );
            if bad.len() > 2 {
                assert!(
                    !err.to_string().contains(bad),
                    "the id is not echoed: {err}"
                );
            }
        }
    }
}
