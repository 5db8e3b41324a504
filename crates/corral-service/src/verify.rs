//! Deep verification of a provider profile: run, with the profile's stored credential and
//! context, every operation the public API needs on a small probe sandbox, and store one
//! result per operation (docs/control-plane.md, "Deep verification").
//!
//! The probe goes through the same [`Contracted`](corral_provider::Contracted) provider as
//! public requests (so the provider-call metrics see it), each call under a deadline. It is
//! never recorded in the registry as a sandbox: it is not the customer's, must not count
//! against quotas or show in their lists, and is deleted before the verification answers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::SubsecRound as _;
use corral_domain::{
    CreateSandboxRequest, OperationId, Provider, ProviderCapabilities, SandboxStatus, TimeoutMode,
};
use corral_provider::{
    CallContext, CreateSpec, ExecSpec, ExposeSecret as _, ProviderError, SandboxProvider, excerpt,
};
use corral_registry::{ProjectId, RegistryError, Verification};
use tracing::Instrument as _;

use crate::error::{ServiceError, registry_error};
use crate::{Caller, InlineAccess, Service};

/// The operations checked, in the order they run, named as the public requests that need
/// them name them when they consult the stored results.
pub const VERIFIED_OPERATIONS: [&str; 6] =
    ["create", "exec", "write_file", "read_file", "get", "delete"];

/// How an operation that did not run because an earlier one failed is reported.
const NOT_REACHED: &str = "not reached: ";

/// How a failure that says nothing lasting about the credential (a rate limit, an outage, a
/// timeout) is reported.
const INCONCLUSIVE: &str = "inconclusive: ";

/// The lifetime the probe asks for where the provider takes one: short, so a probe whose
/// delete failed does not live (and bill) for long.
const PROBE_LIFETIME_SECONDS: u64 = 600;

/// What the probe's command prints first.
const PROBE_WORD: &str = "corral-probe";

/// The probe's command: the word to check, then a fresh directory for the file round trip
/// (`mktemp -d` honours the sandbox's `TMPDIR`; without it the round trip uses `/tmp`).
const PROBE_COMMAND: &str = "echo corral-probe; mktemp -d 2>/dev/null || true";

/// How long the probe's command may run.
const PROBE_EXEC_DEADLINE: Duration = Duration::from_secs(30);

/// Bytes of output kept from the probe's command and read back from its file.
const PROBE_OUTPUT_BYTES: usize = 4096;

/// The longest provider message kept in a reason.
const MAX_MESSAGE_CHARS: usize = 200;

/// Whether `v` is a failure that proves nothing about what the credential can do: the
/// operation was not reached (an earlier one failed), or failed for a passing reason (rate
/// limit, outage, timeout). Public requests are not refused for it.
pub(crate) fn proves_nothing(v: &Verification) -> bool {
    !v.ok
        && v.reason
            .as_deref()
            .is_some_and(|r| r.starts_with(NOT_REACHED) || r.starts_with(INCONCLUSIVE))
}

/// The probe's file in `dir`.
fn probe_file_in(dir: &str, op: OperationId) -> String {
    format!(
        "{dir}/corral-probe-{}.txt",
        op.to_string().to_ascii_lowercase()
    )
}

/// Where the probe of operation `op` writes its file when its command made no directory:
/// `/tmp`, present and writable in every sandbox image the adapters start. (Against a test
/// fake that runs commands on the host, that is the host's `/tmp`: tests remove it.)
pub fn fallback_probe_file(op: OperationId) -> String {
    probe_file_in("/tmp", op)
}

/// Why an operation failed and what the customer can do about it; never a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    reason: String,
    remediation: String,
}

impl Failure {
    fn new(reason: impl Into<String>, remediation: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            remediation: remediation.into(),
        }
    }

    fn inconclusive(self) -> Self {
        Self {
            reason: format!("{INCONCLUSIVE}{}", self.reason),
            ..self
        }
    }

    fn not_reached(after: &str) -> Self {
        Self::new(
            format!("{NOT_REACHED}{after} failed"),
            format!("fix `{after}` first, then run the test again"),
        )
    }
}

/// What an operation is, in a customer's words.
fn doing(operation: &str) -> &'static str {
    match operation {
        "create" => "create sandboxes",
        "exec" => "run commands in sandboxes",
        "write_file" => "write files in sandboxes",
        "read_file" => "read files in sandboxes",
        "get" => "read a sandbox's status",
        "delete" => "delete sandboxes",
        _ => "do this",
    }
}

/// A provider failure of `operation` in words without secrets, with a remediation.
/// `authenticated`: an earlier call with the same credential succeeded, so a refusal of the
/// credential is about permission rather than identity.
fn explain(operation: &str, e: &ProviderError, authenticated: bool) -> Failure {
    let failure = describe(operation, e, authenticated);
    if e.is_transient() || matches!(e, ProviderError::CommandTimedOut { .. }) {
        return failure.inconclusive();
    }
    failure
}

fn describe(operation: &str, e: &ProviderError, authenticated: bool) -> Failure {
    let what = doing(operation);
    let later = "run the test again later; if it keeps failing, check the provider's status";
    let says = |m: &str| excerpt(m, MAX_MESSAGE_CHARS);
    match e {
        ProviderError::MissingCredential { .. } => Failure::new(
            "the profile has no credential",
            "store the provider credential in the profile",
        ),
        ProviderError::MissingContext { field, .. } => Failure::new(
            format!("the profile does not set `{field}`"),
            format!("set `{field}` in the profile's context"),
        ),
        ProviderError::Unauthorized { message, .. } if authenticated => Failure::new(
            format!(
                "the provider refused the credential permission to {what}: {}",
                says(message)
            ),
            format!(
                "grant the key permission to {what} (`{operation}`), or store a credential that has it"
            ),
        ),
        ProviderError::Unauthorized { message, .. } => Failure::new(
            format!("the provider rejected the credential: {}", says(message)),
            "check the credential and its scopes (it may be revoked, expired or for another account or team)",
        ),
        ProviderError::InvalidRequest { message, .. } => Failure::new(
            format!("the provider rejected the request: {}", says(message)),
            if operation == "create" {
                "check the profile's context and the provider account's limits (quota, plan, region)"
            } else {
                "check the profile's context; if it is right, report this to the operator"
            },
        ),
        ProviderError::NotFound { .. } => Failure::new(
            "the provider no longer has the probe sandbox",
            "check that nothing else deletes sandboxes in this account, then run the test again",
        ),
        ProviderError::RateLimited { .. } => {
            Failure::new("the provider rate-limited the request", later)
        }
        ProviderError::Unavailable { message, .. } => Failure::new(
            format!("the provider is unavailable: {}", says(message)),
            later,
        ),
        ProviderError::CapacityExceeded { message, .. } => Failure::new(
            format!("the provider is out of capacity: {}", says(message)),
            "free capacity (delete sandboxes you no longer need) or ask the operator to raise the limit",
        ),
        ProviderError::TimedOutAfterSend { .. } => {
            Failure::new("the provider did not answer in time", later)
        }
        ProviderError::ServerError {
            status, message, ..
        } => Failure::new(
            format!("the provider failed with HTTP {status}: {}", says(message)),
            later,
        ),
        ProviderError::Protocol { message, .. } => Failure::new(
            format!(
                "the provider sent an answer Corral cannot use: {}",
                says(message)
            ),
            later,
        ),
        ProviderError::Unexpected {
            status, message, ..
        } => Failure::new(
            format!("the provider failed with HTTP {status}: {}", says(message)),
            format!("check that the credential may {what}; if it may, report this to the operator"),
        ),
        ProviderError::CommandTimedOut { after } => Failure::new(
            format!(
                "the probe command did not finish within {}s",
                after.as_secs()
            ),
            later,
        ),
        ProviderError::Unsupported { reason, .. } => Failure::new(
            format!("the provider cannot {what}: {}", says(reason)),
            "use another provider for workloads that need this",
        ),
        ProviderError::FileNotFound { .. }
        | ProviderError::ParentMissing { .. }
        | ProviderError::FileTooLarge { .. }
        | ProviderError::FileRefused { .. }
        | ProviderError::FileOperation { .. } => Failure::new(
            format!("the probe file could not be used: {}", says(&e.to_string())),
            "check that the sandbox's default image has a writable temporary directory",
        ),
    }
}

/// The cheapest create the provider accepts: its default image and, where the request may
/// set a lifetime, [`PROBE_LIFETIME_SECONDS`] within its bounds.
fn probe_request(p: Provider, caps: &ProviderCapabilities) -> CreateSandboxRequest {
    let timeout = (caps.timeout_mode == TimeoutMode::Seconds && !p.is_bridge()).then(|| {
        let granularity = caps.timeout_granularity_seconds.unwrap_or(1).max(1);
        let mut t = PROBE_LIFETIME_SECONDS.div_ceil(granularity) * granularity;
        if let Some(max) = caps.timeout_maximum_seconds {
            // The largest multiple of the granularity within the maximum.
            t = t.min(max / granularity * granularity);
        }
        t
    });
    let request = CreateSandboxRequest::standard(p, None, timeout.filter(|t| *t > 0));
    match request.validate(caps) {
        Ok(()) => request,
        // Bounds the lifetime cannot meet: leave it to the provider's default.
        Err(_) => CreateSandboxRequest::standard(p, None, None),
    }
}

/// One verification run against one provider with one credential.
struct Probe {
    provider: Arc<dyn SandboxProvider>,
    ctx: CallContext,
    /// The credential, to scrub from anything the provider echoes.
    secret: Option<String>,
    call_timeout: Duration,
}

impl Probe {
    fn ctx(&self, within: Duration) -> CallContext {
        self.ctx.clone().with_timeout(within)
    }

    /// Runs `call` under the call deadline; a call that does not finish is
    /// `TimedOutAfterSend` (it may have reached the provider).
    async fn bounded<T>(
        &self,
        within: Duration,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let p = self.provider.provider();
        let out = tokio::time::timeout(within, call)
            .await
            .unwrap_or(Err(ProviderError::TimedOutAfterSend { provider: p }));
        match &self.secret {
            Some(secret) => out.map_err(|e| e.redact(secret)),
            None => out,
        }
    }

    /// Creates the probe and waits until it can run commands. The native id comes back
    /// whenever a sandbox exists, also when the create is judged failed (it never got ready),
    /// so that it is deleted.
    async fn create(&self, op: OperationId) -> (Option<String>, Result<(), Failure>) {
        let provider = &self.provider;
        let request = probe_request(provider.provider(), provider.capabilities());
        let spec = CreateSpec {
            operation_id: op,
            timeout_seconds: request.effective_timeout(provider.capabilities()),
            request,
        };
        let t = self.call_timeout;
        let created = self.bounded(t, provider.create(&self.ctx(t), &spec)).await;
        let mut seen = match created {
            Ok(seen) => seen,
            Err(e) => {
                if e.may_have_been_applied() {
                    self.remove_lost(op).await;
                }
                return (None, Err(explain("create", &e, false)));
            }
        };
        let native = seen.native_id.clone();
        let ready_by = tokio::time::Instant::now() + t;
        let mut pause = Duration::from_millis(100);
        while seen.status == SandboxStatus::Creating {
            if tokio::time::Instant::now() + pause > ready_by {
                let failure = Failure::new(
                    format!(
                        "the probe sandbox was not ready within {}s",
                        t.as_secs().max(1)
                    ),
                    "run the test again later; if it keeps failing, check the provider account's capacity",
                )
                .inconclusive();
                return (Some(native), Err(failure));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            match self.bounded(t, provider.get(&self.ctx(t), &native)).await {
                Ok(now) => seen = now,
                Err(e) => return (Some(native), Err(explain("create", &e, true))),
            }
        }
        let started = match seen.status {
            SandboxStatus::Running | SandboxStatus::Paused => Ok(()),
            other => Err(Failure::new(
                format!("the probe sandbox is {other} right after its create"),
                "check the provider account's limits and its default image",
            )),
        };
        (Some(native), started)
    }

    /// After a create whose answer was lost: removes whatever the operation id finds, so the
    /// probe leaks nothing. Best effort; failures are logged.
    async fn remove_lost(&self, op: OperationId) {
        let t = self.call_timeout;
        let found = self
            .bounded(t, self.provider.find_by_operation_id(&self.ctx(t), &op))
            .await;
        match found {
            Ok(found) => {
                for s in found {
                    if let Err(e) = self
                        .bounded(t, self.provider.delete(&self.ctx(t), &s.native_id))
                        .await
                    {
                        tracing::warn!(operation_id = %op, error = %e, "cannot remove a lost probe sandbox");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(operation_id = %op, error = %e, "cannot look for a lost probe sandbox");
            }
        }
    }

    /// Runs the probe command; on success, the directory it made for the file round trip.
    async fn exec(&self, native: &str) -> Result<Option<String>, Failure> {
        let spec = ExecSpec {
            command: PROBE_COMMAND.into(),
            cwd: None,
            env: Default::default(),
            timeout: PROBE_EXEC_DEADLINE.min(self.call_timeout),
            max_output_bytes: PROBE_OUTPUT_BYTES,
        };
        let t = spec.timeout + Duration::from_secs(10);
        let out = self
            .bounded(t, self.provider.exec(&self.ctx(t), native, &spec))
            .await
            .map_err(|e| explain("exec", &e, true))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines().map(str::trim);
        if out.exit_code != 0 || lines.next() != Some(PROBE_WORD) {
            return Err(Failure::new(
                format!(
                    "`echo {PROBE_WORD}` exited with {} and printed `{}`",
                    out.exit_code,
                    excerpt(&stdout, 80)
                ),
                "check that the sandbox's default image has a POSIX shell (`sh`)",
            ));
        }
        Ok(lines
            .next()
            .filter(|d| d.starts_with('/') && d.len() < 200 && !d.contains(char::is_control))
            .map(str::to_owned))
    }

    async fn write(&self, native: &str, path: &str, content: &[u8]) -> Result<(), Failure> {
        let t = self.call_timeout;
        self.bounded(
            t,
            self.provider
                .write_file(&self.ctx(t), native, path, content),
        )
        .await
        .map_err(|e| explain("write_file", &e, true))
    }

    async fn read(&self, native: &str, path: &str, expected: &[u8]) -> Result<(), Failure> {
        let t = self.call_timeout;
        let back = self
            .bounded(
                t,
                self.provider
                    .read_file(&self.ctx(t), native, path, PROBE_OUTPUT_BYTES),
            )
            .await
            .map_err(|e| explain("read_file", &e, true))?;
        if back != expected {
            return Err(Failure::new(
                format!(
                    "the file read back ({} bytes) differs from the {} bytes written",
                    back.len(),
                    expected.len()
                ),
                "report this to the operator: the provider's file API does not round-trip content",
            ));
        }
        Ok(())
    }

    async fn get(&self, native: &str) -> Result<(), Failure> {
        let t = self.call_timeout;
        let seen = self
            .bounded(t, self.provider.get(&self.ctx(t), native))
            .await
            .map_err(|e| explain("get", &e, true))?;
        if seen.status.is_terminal() {
            return Err(explain(
                "get",
                &ProviderError::NotFound {
                    provider: self.provider.provider(),
                    resource: "the probe sandbox".into(),
                },
                true,
            ));
        }
        Ok(())
    }

    async fn delete(&self, native: &str) -> Result<(), Failure> {
        let t = self.call_timeout;
        self.bounded(t, self.provider.delete(&self.ctx(t), native))
            .await
            .map_err(|e| explain("delete", &e, true))
    }

    /// Every operation, in order: one result each.
    async fn run(&self) -> Vec<(&'static str, Result<(), Failure>)> {
        let op = OperationId::new();
        let [create, exec, write, read, get, delete] = VERIFIED_OPERATIONS;
        let (native, created) = self.create(op).await;
        let Some(native) = native else {
            // Nothing exists: the rest cannot run, and there is nothing to delete.
            let mut out = vec![(create, created)];
            out.extend(
                VERIFIED_OPERATIONS[1..]
                    .iter()
                    .map(|o| (*o, Err(Failure::not_reached(create)))),
            );
            return out;
        };
        let mut out = Vec::with_capacity(VERIFIED_OPERATIONS.len());
        if created.is_err() {
            out.push((create, created));
            out.extend([exec, write, read, get].map(|o| (o, Err(Failure::not_reached(create)))));
        } else {
            out.push((create, created));
            // Exec, files and get do not depend on one another (the file only needs the
            // directory exec made, and falls back to /tmp), so each runs whatever the others
            // found: a credential may lack one permission and hold the rest.
            let dir = self.exec(&native).await;
            let folder = dir.as_ref().ok().cloned().flatten();
            out.push((exec, dir.map(|_| ())));
            let path = match folder {
                Some(dir) => probe_file_in(&dir, op),
                None => fallback_probe_file(op),
            };
            let content = format!("{PROBE_WORD} {op}\n").into_bytes();
            let written = self.write(&native, &path, &content).await;
            let read_back = match &written {
                Ok(()) => self.read(&native, &path, &content).await,
                Err(_) => Err(Failure::not_reached(write)),
            };
            out.push((write, written));
            out.push((read, read_back));
            out.push((get, self.get(&native).await));
        }
        // Always attempted once a sandbox exists, whatever failed before: nothing leaks.
        out.push((delete, self.delete(&native).await));
        out
    }
}

impl Service {
    /// Deep verification of `project`'s stored profile for `provider`: with the profile's
    /// credential and context, resolved as a public request resolves them (but never refused
    /// by an earlier verification's results), creates a small probe sandbox, runs a command,
    /// writes and reads back a file, gets and deletes it, and stores one
    /// [`Verification`] per operation of [`VERIFIED_OPERATIONS`] with
    /// `Registry::record_verification`, replacing the previous results. Returns them in
    /// that order.
    ///
    /// A failed operation is an `ok: false` result, not an error; errors are
    /// `provider_profile_not_found` (no profile), `provider_unavailable` (the provider is
    /// not configured here), and registry or profile-store outages. The run continues in a
    /// task of its own when the caller goes away, so the probe is always deleted.
    pub async fn verify_profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Vec<Verification>, ServiceError> {
        let adapter = self.provider(provider)?.clone();
        let access = self
            .access_for(
                &Caller::trusted(project),
                provider,
                InlineAccess::default(),
                None,
                None,
            )
            .await?;
        let probe = Probe {
            secret: access
                .ctx
                .credential()
                .map(|c| c.expose_secret().to_owned()),
            provider: adapter,
            ctx: access.ctx,
            call_timeout: self.inner.config.provider_call_timeout,
        };
        let this = self.clone();
        let task = tokio::spawn(
            async move { this.verify_and_record(project, provider, probe).await }
                .instrument(tracing::Span::current()),
        );
        task.await
            .map_err(|_| ServiceError::internal("the verification stopped unexpectedly"))?
    }

    async fn verify_and_record(
        &self,
        project: ProjectId,
        provider: Provider,
        probe: Probe,
    ) -> Result<Vec<Verification>, ServiceError> {
        let registry = &self.inner.registry;
        let mut results = Vec::with_capacity(VERIFIED_OPERATIONS.len());
        for (operation, outcome) in probe.run().await {
            let (ok, reason, remediation) = match outcome {
                Ok(()) => (true, None, None),
                Err(f) => (false, Some(f.reason), Some(f.remediation)),
            };
            results.push(Verification {
                operation: operation.to_owned(),
                ok,
                reason,
                remediation,
                // Stored with microsecond precision: answer exactly what is stored.
                checked_at: registry.database().now().trunc_subsecs(6),
            });
        }
        for v in &results {
            registry
                .record_verification(project, provider, v.clone())
                .await
                .map_err(|e| match e {
                    // Deleted while the verification ran.
                    RegistryError::NotFound { .. } => ServiceError::ProfileNotFound { provider },
                    other => registry_error(other),
                })?;
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_credential_is_an_authentication_failure_first_and_a_permission_failure_after() {
        let e = ProviderError::Unauthorized {
            provider: Provider::E2b,
            message: "forbidden".into(),
        };
        let first = explain("create", &e, false);
        assert!(
            first.reason.contains("rejected the credential"),
            "{first:?}"
        );
        assert!(
            first
                .remediation
                .contains("check the credential and its scopes")
        );
        let later = explain("exec", &e, true);
        assert!(
            later.reason.contains("permission to run commands"),
            "{later:?}"
        );
        assert!(
            later.remediation.starts_with("grant the key permission to"),
            "{later:?}"
        );
        assert!(later.remediation.contains("`exec`"));
    }

    #[test]
    fn only_not_reached_and_passing_failures_prove_nothing() {
        let v = |ok: bool, reason: Option<&str>| Verification {
            operation: "exec".into(),
            ok,
            reason: reason.map(str::to_owned),
            remediation: None,
            checked_at: chrono::Utc::now(),
        };
        let nr = Failure::not_reached("create");
        assert_eq!(nr.reason, "not reached: create failed");
        assert!(proves_nothing(&v(false, Some(&nr.reason))));
        let limited = explain(
            "exec",
            &ProviderError::RateLimited {
                provider: Provider::E2b,
                retry_after: None,
            },
            true,
        );
        assert_eq!(
            limited.reason,
            "inconclusive: the provider rate-limited the request"
        );
        assert!(proves_nothing(&v(false, Some(&limited.reason))));
        let refused = explain(
            "exec",
            &ProviderError::Unauthorized {
                provider: Provider::E2b,
                message: "no".into(),
            },
            true,
        );
        assert!(!proves_nothing(&v(false, Some(&refused.reason))));
        assert!(!proves_nothing(&v(true, None)));
    }

    #[test]
    fn the_probe_asks_for_a_short_lifetime_within_the_providers_bounds() {
        use corral_provider_testkit::host_shell::HostShellProvider;
        let mut caps = HostShellProvider::new().capabilities().clone();
        caps.provider = Provider::E2b;
        let timeout = |caps: &ProviderCapabilities| probe_request(Provider::E2b, caps).timeout();
        assert_eq!(timeout(&caps), Some(PROBE_LIFETIME_SECONDS));
        caps.timeout_granularity_seconds = Some(7);
        assert_eq!(timeout(&caps), Some(602), "rounded up to the granularity");
        caps.timeout_maximum_seconds = Some(300);
        assert_eq!(
            timeout(&caps),
            Some(294),
            "the largest multiple within the maximum"
        );
        caps.timeout_maximum_seconds = Some(5);
        assert_eq!(
            timeout(&caps),
            None,
            "no multiple fits: the provider's default"
        );
        caps.timeout_maximum_seconds = None;
        caps.timeout_mode = TimeoutMode::ProviderManaged;
        caps.timeout_granularity_seconds = None;
        assert_eq!(timeout(&caps), None, "provider-managed lifetimes take none");
    }

    #[test]
    fn long_provider_messages_are_cut_and_control_characters_dropped() {
        let e = ProviderError::Unavailable {
            provider: Provider::Fly,
            message: format!("down\n{}", "x".repeat(1000)),
            retry_after: None,
        };
        let f = explain("create", &e, false);
        assert!(f.reason.chars().count() < MAX_MESSAGE_CHARS + 60, "{f:?}");
        assert!(!f.reason.contains('\n'));
    }
}
