#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.
//! Integration tests of the local provider: conformance, escapes, persistence, concurrency,
//! deadlines and output.

mod conformance;
mod contain;
mod escape;
mod exec;
mod lifecycle;
mod non_root;
mod threads;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, ExecOutput, ExecSpec, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};

/// A provider over a fresh temporary data dir: sandboxes live in `<data>/sandboxes`.
/// The provider is declared first so that it is dropped first: it unmounts its sandboxes'
/// filesystems before the directory is removed.
pub(crate) struct World {
    pub(crate) provider: LocalProvider,
    pub(crate) data: tempfile::TempDir,
}

impl World {
    pub(crate) fn new() -> Self {
        Self::with(|_| {})
    }

    pub(crate) fn with(tweak: impl FnOnce(&mut LocalConfig)) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut config = LocalConfig::new(data.path().join("sandboxes"));
        // Small images: tests run many sandboxes at once, and each image is allocated whole.
        config.limits.disk_bytes = Some(64 << 20);
        tweak(&mut config);
        let provider = LocalProvider::new(config).unwrap();
        assert_eq!(provider.unavailable_reason(), None);
        Self { provider, data }
    }

    pub(crate) fn root(&self) -> std::path::PathBuf {
        self.data.path().join("sandboxes")
    }

    pub(crate) async fn create(&self) -> String {
        create(&self.provider, None).await
    }

    pub(crate) async fn sh(&self, id: &str, command: &str) -> ExecOutput {
        sh(&self.provider, id, command).await
    }
}

pub(crate) fn ctx() -> CallContext {
    CallContext::anonymous()
}

pub(crate) async fn create(provider: &LocalProvider, timeout: Option<u64>) -> String {
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, timeout),
        timeout_seconds: timeout,
    };
    provider.create(&ctx(), &spec).await.unwrap().native_id
}

pub(crate) async fn sh(provider: &LocalProvider, id: &str, command: &str) -> ExecOutput {
    provider
        .exec(&ctx(), id, &ExecSpec::new(command))
        .await
        .unwrap_or_else(|e| panic!("exec `{command}` failed: {e}"))
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs two commands in sandbox `id` at once, each trying to start `each` processes and
/// holding them until both are done trying; how many the two held together. perl, not the
/// shell: a shell ends at its first failed fork (its processes die with it, freeing places
/// for the other command), whereas perl's `fork` just returns nothing. At least `each` is
/// required: the first command to start gets its processes unless the sandbox cannot hold
/// even that many, so a run that started nothing (a broken setup) does not pass for a limit.
pub(crate) async fn processes_held_by_two_commands(world: &World, id: &str, each: usize) -> usize {
    const HOLD: &str = r#"my ($me, $each) = @ARGV; my @kids;
        for (1 .. $each) { my $p = fork; last unless defined $p;
            if ($p == 0) { sleep 60; exit 0 } push @kids, $p }
        $| = 1; print scalar(@kids), "\n";
        open(my $f, ">", "/workspace/held/$me") or die "$!"; close $f;
        my $until = time + 20;
        while (time < $until) { opendir(my $d, "/workspace/held") or last;
            my @in = grep { !/^[.]/ } readdir($d); closedir $d; last if @in >= 2;
            select(undef, undef, undef, 0.05) }
        kill 9, @kids"#;
    world
        .sh(id, "rm -rf /workspace/held && mkdir /workspace/held")
        .await;
    let hold = |me: usize| format!("perl -e '{HOLD}' {me} {each}");
    let (first, second) = (hold(0), hold(1));
    let (a, b) = tokio::join!(world.sh(id, &first), world.sh(id, &second));
    let held = |o: &ExecOutput| text(&o.stdout).trim().parse::<usize>().unwrap_or(0);
    let total = held(&a) + held(&b);
    assert!(
        total >= each,
        "only {total} held (exit codes {} and {}): {}{}",
        a.exit_code,
        b.exit_code,
        text(&a.stderr),
        text(&b.stderr)
    );
    total
}
