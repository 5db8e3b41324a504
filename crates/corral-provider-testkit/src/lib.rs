//! The conformance suite: one contract, run by every provider adapter.
//!
//! Scenarios are `pub async fn`s over `&dyn SandboxProvider` (as object_store's
//! `integration.rs`), parameterised by the provider's advertised capabilities: cwd and env are
//! checked where advertised, and stderr is checked separately only where output is `separate`.
//! A scenario panics with a message naming the provider and the broken promise.
//!
//! ```no_run
//! # async fn demo(provider: &dyn corral_provider::SandboxProvider) {
//! use corral_provider_testkit::Conformance;
//! Conformance::new(provider).run_all().await;
//! # }
//! ```
//!
//! Paths are made inside the sandbox with `mktemp -d`, so the suite needs no knowledge of a
//! provider's filesystem layout and works against real providers as well as fakes.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // Test code: panics are the reports.

pub mod background;
pub mod commands;
pub mod counting;
pub mod fake;
pub mod faults;
pub mod harness;
pub mod held;
pub mod helpers;
pub mod host_shell;
pub mod lifecycle;
pub mod plumbing;
pub mod spy;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, OutputStreams, SandboxStatus};
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ProviderError, SandboxProvider,
};

/// The conformance suite bound to one provider, context and create request.
pub struct Conformance<'a> {
    provider: &'a dyn SandboxProvider,
    ctx: CallContext,
    request: CreateSandboxRequest,
    ready_within: Duration,
    /// Native ids this suite created, for [`Conformance::delete_created`].
    created: Mutex<Vec<String>>,
}

impl<'a> Conformance<'a> {
    /// The suite for `provider`, creating sandboxes with no image and the default lifetime,
    /// and an anonymous context.
    pub fn new(provider: &'a dyn SandboxProvider) -> Self {
        Self {
            provider,
            ctx: CallContext::anonymous(),
            request: CreateSandboxRequest::standard(provider.provider(), None, None),
            ready_within: Duration::from_secs(30),
            created: Mutex::default(),
        }
    }

    /// Uses `ctx` (credential and routing context) for every call.
    pub fn with_context(mut self, ctx: CallContext) -> Self {
        self.ctx = ctx;
        self
    }

    /// Creates sandboxes with `request` instead of the bare default.
    pub fn with_request(mut self, request: CreateSandboxRequest) -> Self {
        self.request = request;
        self
    }

    /// How long a new sandbox may stay `creating` before the suite fails.
    pub fn with_ready_within(mut self, within: Duration) -> Self {
        self.ready_within = within;
        self
    }

    fn name(&self) -> &'static str {
        self.provider.provider().as_str()
    }

    /// Runs every scenario, each in its own sandbox.
    pub async fn run_all(&self) {
        self.capabilities_are_valid().await;
        self.create_get_find_delete().await;
        self.exec_reports_streams_and_exit_code().await;
        self.exec_honours_advertised_cwd_and_env().await;
        self.exec_caps_output_and_deadline().await;
        self.files_round_trip_utf8_and_binary().await;
        self.files_report_missing_parent_and_missing_file().await;
        self.run_commands().await;
        self.stop_then_resume_keeps_a_file().await;
        self.snapshot_then_restore_sees_the_old_content().await;
        self.forks_are_independent().await;
    }

    /// Capabilities pass the spec's invariants and name this provider.
    pub async fn capabilities_are_valid(&self) {
        let caps = self.provider.capabilities();
        assert_eq!(
            caps.provider,
            self.provider.provider(),
            "capabilities name another provider"
        );
        if let Err(e) = caps.check() {
            panic!("{}: capabilities break an invariant: {e}", self.name());
        }
    }

    /// Creates a sandbox tagged with a fresh operation id and waits until it runs.
    pub async fn create_running(&self) -> (String, OperationId) {
        self.create_running_in(&self.ctx).await
    }

    /// [`Conformance::create_running`] with another context (a deployment or project tag).
    async fn create_running_in(&self, ctx: &CallContext) -> (String, OperationId) {
        let caps = self.provider.capabilities();
        let spec = CreateSpec {
            operation_id: OperationId::new(),
            request: self.request.clone(),
            timeout_seconds: self.request.effective_timeout(caps),
        };
        let created = self
            .provider
            .create(ctx, &spec)
            .await
            .unwrap_or_else(|e| panic!("{}: create failed: {e}", self.name()));
        assert!(
            !created.native_id.is_empty(),
            "{}: empty native id",
            self.name()
        );
        self.created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(created.native_id.clone());
        assert!(
            matches!(
                created.status,
                SandboxStatus::Creating | SandboxStatus::Running
            ),
            "{}: a new sandbox is {}",
            self.name(),
            created.status
        );
        self.wait_running(&created.native_id).await;
        (created.native_id, spec.operation_id)
    }

    /// Deletes every sandbox this suite created (those already deleted included: deleting
    /// what is gone is not an error), reporting failures on stderr: the live test's clean-up,
    /// run even when a scenario failed.
    pub async fn delete_created(&self) {
        let ids = std::mem::take(
            &mut *self
                .created
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for id in ids {
            if let Err(e) = self.provider.delete(&self.ctx, &id).await {
                eprintln!("{}: could not delete sandbox {id}: {e}", self.name());
            }
        }
    }

    async fn wait_running(&self, native_id: &str) {
        let start = tokio::time::Instant::now();
        loop {
            let seen = self
                .provider
                .get(&self.ctx, native_id)
                .await
                .unwrap_or_else(|e| panic!("{}: get failed: {e}", self.name()));
            assert_eq!(seen.native_id, native_id);
            match seen.status {
                SandboxStatus::Running => return,
                SandboxStatus::Creating if start.elapsed() < self.ready_within => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("{}: sandbox is {other}, expected running", self.name()),
            }
        }
    }

    async fn delete(&self, native_id: &str) {
        self.provider
            .delete(&self.ctx, native_id)
            .await
            .unwrap_or_else(|e| panic!("{}: delete failed: {e}", self.name()));
    }

    async fn exec(&self, native_id: &str, spec: ExecSpec) -> ExecOutput {
        self.provider
            .exec(&self.ctx, native_id, &spec)
            .await
            .unwrap_or_else(|e| panic!("{}: exec `{}` failed: {e}", self.name(), spec.command))
    }

    async fn scratch_dir(&self, native_id: &str) -> String {
        let out = self.exec(native_id, ExecSpec::new("mktemp -d")).await;
        assert_eq!(out.exit_code, 0, "{}: mktemp -d failed", self.name());
        let dir = String::from_utf8(out.stdout).expect("utf8 path");
        dir.lines().last().expect("a path").trim().to_owned()
    }

    /// create → get → find by operation id → delete → get after delete → delete again.
    pub async fn create_get_find_delete(&self) {
        let (native_id, operation_id) = self.create_running().await;
        let found = self
            .provider
            .find_by_operation_id(&self.ctx, &operation_id)
            .await
            .unwrap_or_else(|e| panic!("{}: find_by_operation_id failed: {e}", self.name()));
        assert!(
            found.iter().any(|s| s.native_id == native_id),
            "{}: the sandbox is not found by its operation id",
            self.name()
        );
        let stranger = self
            .provider
            .find_by_operation_id(&self.ctx, &OperationId::new())
            .await
            .unwrap_or_else(|e| panic!("{}: find_by_operation_id failed: {e}", self.name()));
        assert!(
            stranger.iter().all(|s| s.native_id != native_id),
            "{}: another operation id finds the sandbox",
            self.name()
        );
        self.delete(&native_id).await;
        match self.provider.get(&self.ctx, &native_id).await {
            Err(ProviderError::NotFound { .. }) => {}
            Ok(seen) if seen.status.is_terminal() => {}
            other => panic!("{}: get after delete gave {other:?}", self.name()),
        }
        // Deleting what is gone is not an error.
        self.delete(&native_id).await;
    }

    /// The orphan reaper's listing: sandboxes created under a deployment's tag are listed
    /// (every page) with their operation id and project, and another deployment's are not.
    /// An adapter that cannot list by tag (`lists` false) must say so with `Unsupported`.
    pub async fn lists_its_deployments_tagged_sandboxes(&self, lists: bool) {
        let ours = format!("dep_conformance{}", OperationId::new());
        let theirs = format!("dep_other{}", OperationId::new());
        let tagged = |dep: &str| {
            self.ctx
                .clone()
                .with_deployment(dep.to_owned())
                .with_project("prj_conformance")
        };
        if !lists {
            match self.provider.list_tagged(&self.ctx, &ours, None).await {
                Err(ProviderError::Unsupported { .. }) => return,
                other => panic!(
                    "{}: an adapter declared unable to list by tag answered {other:?}",
                    self.name()
                ),
            }
        }
        let (a, op_a) = self.create_running_in(&tagged(&ours)).await;
        let (b, _) = self.create_running_in(&tagged(&ours)).await;
        let (c, _) = self.create_running_in(&tagged(&theirs)).await;
        let mut listed = Vec::new();
        let mut page: Option<String> = None;
        for _ in 0..50 {
            let got = self
                .provider
                .list_tagged(&self.ctx, &ours, page.as_deref())
                .await
                .unwrap_or_else(|e| panic!("{}: list_tagged failed: {e}", self.name()));
            listed.extend(got.sandboxes);
            page = got.next;
            if page.is_none() {
                break;
            }
        }
        let ids: Vec<&str> = listed
            .iter()
            .map(|s| s.observed.native_id.as_str())
            .collect();
        assert!(
            ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
            "{}: the deployment's sandboxes are not all listed: {ids:?}",
            self.name()
        );
        assert!(
            !ids.contains(&c.as_str()),
            "{}: another deployment's sandbox is listed",
            self.name()
        );
        let first = listed
            .iter()
            .find(|s| s.observed.native_id == a)
            .unwrap_or_else(|| panic!("{}: {a} not listed", self.name()));
        assert_eq!(
            first.observed.operation_id,
            Some(op_a),
            "{}: operation tag",
            self.name()
        );
        assert_eq!(
            first.project.as_deref(),
            Some("prj_conformance"),
            "{}: project tag",
            self.name()
        );
        for id in [a, b, c] {
            self.delete(&id).await;
        }
    }

    /// stdout, stderr and the exit code come back as the command produced them.
    pub async fn exec_reports_streams_and_exit_code(&self) {
        let (id, _) = self.create_running().await;
        let out = self
            .exec(&id, ExecSpec::new("echo out; echo err >&2; exit 3"))
            .await;
        assert_eq!(out.exit_code, 3, "{}: exit code", self.name());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match self.provider.capabilities().output_streams {
            OutputStreams::Separate => {
                assert_eq!(stdout, "out\n", "{}: stdout", self.name());
                assert_eq!(stderr, "err\n", "{}: stderr", self.name());
            }
            OutputStreams::Combined => {
                assert!(
                    stdout.contains("out") && stdout.contains("err"),
                    "{}: combined output {stdout:?}",
                    self.name()
                );
            }
        }
        assert!(!out.truncated);
        // State persists between commands: the sandbox is not replaced.
        let dir = self.scratch_dir(&id).await;
        let write = self
            .exec(&id, ExecSpec::new(format!("echo kept > {dir}/state")))
            .await;
        assert_eq!(write.exit_code, 0);
        let read = self
            .exec(&id, ExecSpec::new(format!("cat {dir}/state")))
            .await;
        assert_eq!(
            String::from_utf8_lossy(&read.stdout).trim(),
            "kept",
            "{}: state lost between commands",
            self.name()
        );
        self.delete(&id).await;
    }

    /// `cwd` and `env` are honoured where the capabilities say so.
    pub async fn exec_honours_advertised_cwd_and_env(&self) {
        let caps = self.provider.capabilities().clone();
        if !caps.supports_cwd && !caps.supports_env {
            return;
        }
        let (id, _) = self.create_running().await;
        if caps.supports_cwd {
            let dir = self.scratch_dir(&id).await;
            let mut spec = ExecSpec::new("pwd");
            spec.cwd = Some(dir.clone());
            let out = self.exec(&id, spec).await;
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                dir,
                "{}: cwd ignored",
                self.name()
            );
        }
        if caps.supports_env {
            let mut spec = ExecSpec::new("printf '%s|%s' \"$CORRAL_A\" \"$CORRAL_B\"");
            spec.env = BTreeMap::from([
                ("CORRAL_A".to_owned(), "one two".to_owned()),
                ("CORRAL_B".to_owned(), "it's \"quoted\" $HOME".to_owned()),
            ]);
            let out = self.exec(&id, spec).await;
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "one two|it's \"quoted\" $HOME",
                "{}: env not passed verbatim",
                self.name()
            );
        }
        self.delete(&id).await;
    }

    /// Output beyond the cap is cut and flagged; a command past its deadline is killed.
    pub async fn exec_caps_output_and_deadline(&self) {
        let (id, _) = self.create_running().await;
        let mut spec =
            ExecSpec::new("i=0; while [ $i -lt 100 ]; do printf 0123456789; i=$((i+1)); done");
        spec.max_output_bytes = 64;
        let out = self.exec(&id, spec).await;
        assert_eq!(out.exit_code, 0);
        assert!(
            out.truncated,
            "{}: output over the cap is not flagged",
            self.name()
        );
        assert_eq!(
            out.stdout.len(),
            64,
            "{}: output not cut at the cap",
            self.name()
        );

        let mut slow = ExecSpec::new("sleep 30");
        slow.timeout = Duration::from_secs(1);
        let started = std::time::Instant::now();
        match self.provider.exec(&self.ctx, &id, &slow).await {
            Err(ProviderError::CommandTimedOut { .. }) => {}
            other => panic!(
                "{}: a command past its deadline gave {other:?}",
                self.name()
            ),
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{}: deadline not enforced",
            self.name()
        );
        self.delete(&id).await;
    }

    /// Text and every byte value survive a write and a read; exec sees the same files.
    pub async fn files_round_trip_utf8_and_binary(&self) {
        let (id, _) = self.create_running().await;
        let dir = self.scratch_dir(&id).await;
        let text = format!("{dir}/hello.txt");
        let content = "héllo, wörld\nline two\n";
        self.write(&id, &text, content.as_bytes()).await;
        assert_eq!(
            self.read(&id, &text).await,
            content.as_bytes(),
            "{}: utf8 round trip",
            self.name()
        );
        let cat = self.exec(&id, ExecSpec::new(format!("cat '{text}'"))).await;
        assert_eq!(
            cat.stdout,
            content.as_bytes(),
            "{}: exec does not see the written file",
            self.name()
        );

        let binary: Vec<u8> = (0..=255u8).cycle().take(3 * 256 + 7).collect();
        let bin = format!("{dir}/data.bin");
        self.write(&id, &bin, &binary).await;
        assert_eq!(
            self.read(&id, &bin).await,
            binary,
            "{}: binary round trip",
            self.name()
        );
        // Overwrite replaces, it does not append.
        self.write(&id, &bin, b"x").await;
        assert_eq!(
            self.read(&id, &bin).await,
            b"x",
            "{}: overwrite",
            self.name()
        );
        self.write(&id, &bin, b"").await;
        assert_eq!(
            self.read(&id, &bin).await,
            b"",
            "{}: empty file",
            self.name()
        );
        self.delete(&id).await;
    }

    /// A write whose parent is missing and a read of a missing file fail as such.
    pub async fn files_report_missing_parent_and_missing_file(&self) {
        let (id, _) = self.create_running().await;
        let dir = self.scratch_dir(&id).await;
        let orphan = format!("{dir}/no-such-dir/file.txt");
        match self
            .provider
            .write_file(&self.ctx, &id, &orphan, b"x")
            .await
        {
            Err(ProviderError::ParentMissing { .. }) => {}
            other => panic!(
                "{}: write with a missing parent gave {other:?}",
                self.name()
            ),
        }
        let missing = format!("{dir}/missing.txt");
        match self
            .provider
            .read_file(&self.ctx, &id, &missing, 1024)
            .await
        {
            Err(ProviderError::FileNotFound { .. }) => {}
            other => panic!("{}: read of a missing file gave {other:?}", self.name()),
        }
        let big = format!("{dir}/big.txt");
        self.write(&id, &big, &[b'a'; 2048]).await;
        match self.provider.read_file(&self.ctx, &id, &big, 1024).await {
            Err(ProviderError::FileTooLarge { .. }) => {}
            other => panic!("{}: read over the limit gave {other:?}", self.name()),
        }
        self.delete(&id).await;
    }

    async fn write(&self, id: &str, path: &str, content: &[u8]) {
        self.provider
            .write_file(&self.ctx, id, path, content)
            .await
            .unwrap_or_else(|e| panic!("{}: write {path} failed: {e}", self.name()));
    }

    async fn read(&self, id: &str, path: &str) -> Vec<u8> {
        self.provider
            .read_file(&self.ctx, id, path, corral_domain::limits::MAX_READ_BYTES)
            .await
            .unwrap_or_else(|e| panic!("{}: read {path} failed: {e}", self.name()))
    }
}
