//! The lifecycle scenarios: stop and resume, snapshot and restore, fork. Each runs what the
//! provider's capabilities advertise and checks that what they do not advertise is refused as
//! `Unsupported` (`harness::unsupported_lifecycle_is_refused_before_any_call` also checks
//! that no request reached the provider).
//!
//! Files are written and read with exec, by a name relative to the default working directory:
//! a restored sandbox is another sandbox, so an absolute scratch path of the original need not
//! exist in it, while the working directory is the same on every copy.

use std::time::Duration;

use corral_domain::{SandboxStatus, SnapshotId, SnapshotStatus};
use corral_provider::{CreateSpec, ExecSpec, ObservedSnapshot, ProviderError, SnapshotSpec};

use crate::Conformance;

/// The file the scenarios write, relative to the working directory.
const FILE: &str = ".corral-lifecycle-check";

impl Conformance<'_> {
    /// Writes `content` to [`FILE`] with exec.
    async fn put(&self, id: &str, content: &str) {
        let out = self
            .exec(
                id,
                ExecSpec::new(format!("printf '%s' '{content}' > {FILE}")),
            )
            .await;
        assert_eq!(out.exit_code, 0, "{}: cannot write {FILE}", self.name());
    }

    /// Reads [`FILE`] with exec.
    async fn get_file(&self, id: &str) -> String {
        let out = self.exec(id, ExecSpec::new(format!("cat {FILE}"))).await;
        assert_eq!(
            out.exit_code,
            0,
            "{}: cannot read {FILE}: {}",
            self.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn is_unsupported<T: std::fmt::Debug>(&self, what: &str, result: corral_provider::Result<T>) {
        match result {
            Err(ProviderError::Unsupported { .. }) => {}
            other => panic!(
                "{}: {what} is not advertised but answered {other:?} instead of Unsupported",
                self.name()
            ),
        }
    }

    /// Polls `get` until the sandbox is `want`, allowing `passing` on the way.
    async fn wait_status(&self, id: &str, want: SandboxStatus, passing: SandboxStatus) {
        let start = tokio::time::Instant::now();
        loop {
            let seen = self
                .provider
                .get(&self.ctx, id)
                .await
                .unwrap_or_else(|e| panic!("{}: get failed: {e}", self.name()));
            match seen.status {
                s if s == want => return,
                s if s == passing && start.elapsed() < self.ready_within => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("{}: sandbox is {other}, expected {want}", self.name()),
            }
        }
    }

    /// Snapshots `id` and waits until the snapshot is ready.
    async fn ready_snapshot(&self, id: &str) -> ObservedSnapshot {
        let spec = SnapshotSpec {
            snapshot_id: SnapshotId::new(self.provider.provider()),
            name: Some("conformance".into()),
        };
        let mut snap = self
            .provider
            .snapshot(&self.ctx, id, &spec)
            .await
            .unwrap_or_else(|e| panic!("{}: snapshot failed: {e}", self.name()));
        let start = tokio::time::Instant::now();
        while snap.status == SnapshotStatus::Creating && start.elapsed() < self.ready_within {
            tokio::time::sleep(Duration::from_millis(50)).await;
            snap = self
                .provider
                .get_snapshot(&self.ctx, &snap.native_id)
                .await
                .unwrap_or_else(|e| panic!("{}: get_snapshot failed: {e}", self.name()));
        }
        assert_eq!(
            snap.status,
            SnapshotStatus::Ready,
            "{}: the snapshot did not become ready",
            self.name()
        );
        snap
    }

    /// Restores `snapshot` into a new sandbox and waits until it runs.
    async fn restored(&self, snapshot: &str) -> String {
        let caps = self.provider.capabilities();
        let spec = CreateSpec {
            operation_id: corral_domain::OperationId::new(),
            request: self.request.clone(),
            timeout_seconds: self.request.effective_timeout(caps),
        };
        let made = self
            .provider
            .restore(&self.ctx, &spec, snapshot)
            .await
            .unwrap_or_else(|e| panic!("{}: restore failed: {e}", self.name()));
        self.created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(made.native_id.clone());
        let found = self
            .provider
            .find_by_operation_id(&self.ctx, &spec.operation_id)
            .await
            .unwrap_or_else(|e| panic!("{}: find after restore failed: {e}", self.name()));
        assert!(
            found.iter().any(|s| s.native_id == made.native_id),
            "{}: a restored sandbox is not found by its operation id",
            self.name()
        );
        self.wait_status(
            &made.native_id,
            SandboxStatus::Running,
            SandboxStatus::Creating,
        )
        .await;
        made.native_id
    }

    /// stop → (stop again) → resume → (resume again): the file written before is there,
    /// both operations are idempotent, and exec works again after the resume. Where stop is
    /// not advertised, both answer `Unsupported`.
    pub async fn stop_then_resume_keeps_a_file(&self) {
        let (id, _) = self.create_running().await;
        if !self.provider.capabilities().supports_explicit_stop {
            self.is_unsupported("stop", self.provider.stop(&self.ctx, &id).await);
            self.is_unsupported("resume", self.provider.resume(&self.ctx, &id).await);
            self.delete(&id).await;
            return;
        }
        self.put(&id, "kept across a stop").await;
        let stopped = self
            .provider
            .stop(&self.ctx, &id)
            .await
            .unwrap_or_else(|e| panic!("{}: stop failed: {e}", self.name()));
        assert!(
            stopped.status.is_stopped(),
            "{}: a stop answered {}",
            self.name(),
            stopped.status
        );
        self.wait_status(&id, SandboxStatus::Stopped, SandboxStatus::Stopping)
            .await;
        let again = self
            .provider
            .stop(&self.ctx, &id)
            .await
            .unwrap_or_else(|e| panic!("{}: a second stop failed: {e}", self.name()));
        assert_eq!(
            again.status,
            SandboxStatus::Stopped,
            "{}: stopping a stopped sandbox changed it",
            self.name()
        );
        let resumed = self
            .provider
            .resume(&self.ctx, &id)
            .await
            .unwrap_or_else(|e| panic!("{}: resume failed: {e}", self.name()));
        assert!(
            matches!(
                resumed.status,
                SandboxStatus::Starting | SandboxStatus::Running
            ),
            "{}: a resume answered {}",
            self.name(),
            resumed.status
        );
        self.wait_status(&id, SandboxStatus::Running, SandboxStatus::Starting)
            .await;
        let again = self
            .provider
            .resume(&self.ctx, &id)
            .await
            .unwrap_or_else(|e| panic!("{}: a second resume failed: {e}", self.name()));
        assert_eq!(
            again.status,
            SandboxStatus::Running,
            "{}: resuming a running sandbox changed it",
            self.name()
        );
        assert_eq!(
            self.get_file(&id).await,
            "kept across a stop",
            "{}: a file did not survive stop and resume",
            self.name()
        );
        self.delete(&id).await;
    }

    /// snapshot → write → restore: the restored sandbox sees the content at the snapshot,
    /// the original keeps its newer content; the snapshot is deleted (twice: `Ok`) and then
    /// not found. Where snapshots or restores are not advertised, they answer `Unsupported`.
    pub async fn snapshot_then_restore_sees_the_old_content(&self) {
        let caps = self.provider.capabilities().clone();
        let (id, _) = self.create_running().await;
        if !caps.supports_snapshots {
            let spec = SnapshotSpec {
                snapshot_id: SnapshotId::new(self.provider.provider()),
                name: None,
            };
            self.is_unsupported(
                "snapshot",
                self.provider.snapshot(&self.ctx, &id, &spec).await,
            );
        }
        if !caps.supports_restore {
            let spec = CreateSpec {
                operation_id: corral_domain::OperationId::new(),
                request: self.request.clone(),
                timeout_seconds: None,
            };
            self.is_unsupported(
                "restore",
                self.provider.restore(&self.ctx, &spec, "snapshot-x").await,
            );
        }
        if !caps.supports_fork() {
            self.delete(&id).await;
            return;
        }
        self.put(&id, "at the snapshot").await;
        let snap = self.ready_snapshot(&id).await;
        self.put(&id, "after the snapshot").await;
        let copy = self.restored(&snap.native_id).await;
        assert_eq!(
            self.get_file(&copy).await,
            "at the snapshot",
            "{}: the restored sandbox does not hold the snapshot's content",
            self.name()
        );
        assert_eq!(
            self.get_file(&id).await,
            "after the snapshot",
            "{}: restoring changed the original",
            self.name()
        );
        self.provider
            .delete_snapshot(&self.ctx, &snap.native_id)
            .await
            .unwrap_or_else(|e| panic!("{}: delete_snapshot failed: {e}", self.name()));
        self.provider
            .delete_snapshot(&self.ctx, &snap.native_id)
            .await
            .unwrap_or_else(|e| panic!("{}: deleting a deleted snapshot failed: {e}", self.name()));
        match self.provider.get_snapshot(&self.ctx, &snap.native_id).await {
            Err(ProviderError::NotFound { .. }) => {}
            other => panic!(
                "{}: a deleted snapshot answered {other:?}, expected NotFound",
                self.name()
            ),
        }
        self.delete(&copy).await;
        self.delete(&id).await;
    }

    /// A fork (one snapshot restored twice) gives copies independent of each other and of
    /// the original.
    pub async fn forks_are_independent(&self) {
        if !self.provider.capabilities().supports_fork() {
            return;
        }
        let (id, _) = self.create_running().await;
        self.put(&id, "base").await;
        let snap = self.ready_snapshot(&id).await;
        let a = self.restored(&snap.native_id).await;
        let b = self.restored(&snap.native_id).await;
        assert_ne!(a, b, "{}: two restores gave one sandbox", self.name());
        self.put(&a, "changed in a").await;
        assert_eq!(
            self.get_file(&b).await,
            "base",
            "{}: a write in one copy showed in another",
            self.name()
        );
        assert_eq!(
            self.get_file(&id).await,
            "base",
            "{}: a write in a copy showed in the original",
            self.name()
        );
        self.provider
            .delete_snapshot(&self.ctx, &snap.native_id)
            .await
            .unwrap_or_else(|e| panic!("{}: delete_snapshot failed: {e}", self.name()));
        for sandbox in [a, b, id] {
            self.delete(&sandbox).await;
        }
    }
}
