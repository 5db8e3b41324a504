//! The fault suite: how an HTTP adapter must report what goes wrong on the wire, written once
//! and run by every adapter against its loopback fake.
//!
//! Each scenario arms a [`Fault`] on the fake, makes a fresh adapter (with short timeouts or
//! a small body cap where the scenario needs them) and checks the [`ProviderError`] kind and
//! whether the call may have been applied — the bit the reconciler relies on. A scenario
//! panics with a message naming the provider.
//!
//! ```no_run
//! # async fn demo<P: corral_provider::SandboxProvider + 'static>(
//! #     server: &corral_provider_testkit::fake::FakeServer,
//! #     make: fn(&str, corral_provider_http::HttpConfig) -> P,
//! #     ctx: corral_provider::CallContext,
//! # ) {
//! use axum::http::Method;
//! use corral_provider_testkit::faults::FaultSuite;
//! FaultSuite::new(server, server.base_url(), make)
//!     .with_context(ctx)
//!     .create_call(Method::POST, "/sandboxes")
//!     .get_call(Method::GET, "/sandboxes/")
//!     .unknown_id("sbx-nope")
//!     .run_all()
//!     .await;
//! # }
//! ```
//!
//! [`fault_suite_tests!`](crate::fault_suite_tests) turns the scenarios into one
//! `#[tokio::test]` each, so a report names the broken scenario.

use std::time::Duration;

use axum::http::Method;
use corral_domain::{CreateSandboxRequest, OperationId};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::HttpConfig;

use crate::fake::{FakeServer, Fault, FaultKind, HOSTILE_ID, refused_base_url};

/// Makes the adapter under test, pointed at a base URL with these HTTP settings.
pub type MakeProvider<'a> = Box<dyn Fn(&str, HttpConfig) -> Box<dyn SandboxProvider> + 'a>;

/// The `Retry-After` the rate-limit scenario sends, in seconds.
const RETRY_AFTER_SECS: u64 = 7;
/// The client timeout for the timeout scenarios: far below the fake's delays.
const SHORT_TIMEOUT: Duration = Duration::from_millis(400);
/// How long the fake holds a create's answer after applying it.
const CREATE_DELAY: Duration = Duration::from_secs(2);
/// The fake's pace for a slow body: a status line at once, then one byte per this.
const SLOW_BYTE: Duration = Duration::from_millis(50);
/// The body cap of the oversized scenario, and the body the fake sends past it.
const SMALL_CAP: usize = 4096;
const OVERSIZED_BODY: usize = 100_000;

/// Which requests a fault applies to: a method and a substring of the path.
#[derive(Debug, Clone)]
struct Call {
    method: Method,
    path_contains: String,
}

impl Call {
    fn arm(&self, server: &FakeServer, fault: Fault) {
        server.faults().arm(
            fault
                .on_method(self.method.clone())
                .on_path(&self.path_contains),
        );
    }
}

/// The fault suite bound to one adapter and its running fake.
pub struct FaultSuite<'a> {
    name: &'static str,
    make: MakeProvider<'a>,
    server: &'a FakeServer,
    base_url: String,
    ctx: CallContext,
    request: CreateSandboxRequest,
    create_call: Call,
    get_call: Call,
    unknown_id: String,
    wrong_credential: String,
}

impl<'a> FaultSuite<'a> {
    /// The suite for the adapters `make` builds, talking to `server` at `base_url` (the
    /// server's address plus any API prefix, e.g. `{server}/v1`).
    ///
    /// Defaults: an anonymous context, the bare standard create request, every POST counts
    /// as the create and every GET as the get, and `unknown` as the unknown native id —
    /// set them with the builder methods.
    pub fn new<P, F>(server: &'a FakeServer, base_url: impl Into<String>, make: F) -> Self
    where
        P: SandboxProvider + 'static,
        F: Fn(&str, HttpConfig) -> P + 'a,
    {
        let make: MakeProvider<'a> = Box::new(move |url, http| Box::new(make(url, http)));
        let base_url = base_url.into();
        let provider = make(&base_url, HttpConfig::default()).provider();
        Self {
            name: provider.as_str(),
            make,
            server,
            base_url,
            ctx: CallContext::anonymous(),
            request: CreateSandboxRequest::standard(provider, None, None),
            create_call: Call {
                method: Method::POST,
                path_contains: String::new(),
            },
            get_call: Call {
                method: Method::GET,
                path_contains: String::new(),
            },
            unknown_id: "unknown".to_owned(),
            wrong_credential: "corral-wrong-credential".to_owned(),
        }
    }

    /// Uses `ctx` (a valid credential and routing context) for every call.
    pub fn with_context(mut self, ctx: CallContext) -> Self {
        self.ctx = ctx;
        self
    }

    /// Creates sandboxes with `request` instead of the bare default.
    pub fn with_request(mut self, request: CreateSandboxRequest) -> Self {
        self.request = request;
        self
    }

    /// The adapter's create request: this method and a path containing `path_contains`.
    pub fn create_call(mut self, method: Method, path_contains: &str) -> Self {
        self.create_call = Call {
            method,
            path_contains: path_contains.to_owned(),
        };
        self
    }

    /// The adapter's get request: this method and a path containing `path_contains`.
    pub fn get_call(mut self, method: Method, path_contains: &str) -> Self {
        self.get_call = Call {
            method,
            path_contains: path_contains.to_owned(),
        };
        self
    }

    /// A well-formed native id the fake does not know.
    pub fn unknown_id(mut self, id: &str) -> Self {
        self.unknown_id = id.to_owned();
        self
    }

    /// The wrong credential to present (shaped like the provider's, so that the provider's
    /// refusal, not a format check, is what is tested).
    pub fn wrong_credential(mut self, credential: &str) -> Self {
        self.wrong_credential = credential.to_owned();
        self
    }

    /// Runs every scenario in turn.
    pub async fn run_all(&self) {
        self.rate_limit_carries_retry_after_and_was_not_applied()
            .await;
        self.server_error_on_create_may_have_been_applied().await;
        self.timeout_after_create_was_sent_may_have_been_applied_and_is_found_again()
            .await;
        self.connection_refused_is_unavailable_and_not_applied()
            .await;
        self.slow_body_times_out_after_send().await;
        self.oversized_body_is_a_protocol_error_that_may_have_been_applied()
            .await;
        self.malformed_body_is_a_protocol_error_that_may_have_been_applied()
            .await;
        self.hostile_native_id_is_refused_as_a_protocol_error_that_may_have_been_applied()
            .await;
        self.wrong_credential_is_unauthorized_without_leaking_it()
            .await;
        self.missing_credential_is_refused_before_any_request()
            .await;
        self.unknown_sandbox_is_not_found_and_deleting_it_is_ok()
            .await;
    }

    fn provider(&self) -> Box<dyn SandboxProvider> {
        self.provider_with(HttpConfig::default())
    }

    fn provider_with(&self, http: HttpConfig) -> Box<dyn SandboxProvider> {
        (self.make)(&self.base_url, http)
    }

    fn short_timeout() -> HttpConfig {
        HttpConfig {
            request_timeout: SHORT_TIMEOUT,
            ..HttpConfig::default()
        }
    }

    fn spec(&self, provider: &dyn SandboxProvider) -> CreateSpec {
        CreateSpec {
            operation_id: OperationId::new(),
            request: self.request.clone(),
            timeout_seconds: self.request.effective_timeout(provider.capabilities()),
        }
    }

    /// A create that must fail, with the error it failed with.
    async fn create_fails(
        &self,
        provider: &dyn SandboxProvider,
        ctx: &CallContext,
    ) -> ProviderError {
        match provider.create(ctx, &self.spec(provider)).await {
            Ok(created) => panic!(
                "{}: create succeeded ({}) where it must fail",
                self.name, created.native_id
            ),
            Err(e) => e,
        }
    }

    /// 429 with `Retry-After` is `RateLimited` carrying that wait, and was not applied.
    pub async fn rate_limit_carries_retry_after_and_was_not_applied(&self) {
        self.create_call.arm(
            self.server,
            Fault::status(429).retry_after(RETRY_AFTER_SECS),
        );
        let err = self.create_fails(&*self.provider(), &self.ctx).await;
        assert!(
            matches!(err, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(RETRY_AFTER_SECS)),
            "{}: 429 with Retry-After {RETRY_AFTER_SECS} gave {err:?}",
            self.name
        );
        assert!(
            !err.may_have_been_applied(),
            "{}: a rate-limited create may have been applied: {err:?}",
            self.name
        );
    }

    /// A 5xx answer to a create is `ServerError` with that status, and may have been applied.
    pub async fn server_error_on_create_may_have_been_applied(&self) {
        for status in [500, 502] {
            self.create_call.arm(self.server, Fault::status(status));
            let err = self.create_fails(&*self.provider(), &self.ctx).await;
            assert!(
                matches!(err, ProviderError::ServerError { status: s, .. } if s == status),
                "{}: {status} on create gave {err:?}",
                self.name
            );
            assert!(
                err.may_have_been_applied(),
                "{}: a create answered {status} is reported as not applied: {err:?}",
                self.name
            );
        }
    }

    /// A create whose answer never came in time is `TimedOutAfterSend` and may have been
    /// applied; it was, and is found again by its operation id.
    pub async fn timeout_after_create_was_sent_may_have_been_applied_and_is_found_again(&self) {
        self.create_call.arm(
            self.server,
            Fault::new(FaultKind::DelayAfterHandler(CREATE_DELAY)),
        );
        let slow = self.provider_with(Self::short_timeout());
        let spec = self.spec(&*slow);
        let err = match slow.create(&self.ctx, &spec).await {
            Ok(created) => panic!(
                "{}: create ({}) did not time out",
                self.name, created.native_id
            ),
            Err(e) => e,
        };
        assert!(
            matches!(err, ProviderError::TimedOutAfterSend { .. }),
            "{}: a create answered too late gave {err:?}",
            self.name
        );
        assert!(
            err.may_have_been_applied(),
            "{}: a timed-out create is reported as not applied: {err:?}",
            self.name
        );
        // The create was applied: reconciliation finds it by its operation id.
        let found = self
            .provider()
            .find_by_operation_id(&self.ctx, &spec.operation_id)
            .await
            .unwrap_or_else(|e| panic!("{}: find_by_operation_id failed: {e}", self.name));
        assert_eq!(
            found.len(),
            1,
            "{}: the timed-out create is not found exactly once by its operation id: {found:?}",
            self.name
        );
        assert_eq!(
            found[0].operation_id,
            Some(spec.operation_id),
            "{}: the sandbox found carries another operation id",
            self.name
        );
    }

    /// Nothing listening is `Unavailable`, and was not applied.
    pub async fn connection_refused_is_unavailable_and_not_applied(&self) {
        let prefix = self
            .base_url
            .strip_prefix(&self.server.base_url())
            .unwrap_or_default();
        let refused = format!("{}{prefix}", refused_base_url().await);
        let err = self
            .create_fails(&*(self.make)(&refused, HttpConfig::default()), &self.ctx)
            .await;
        assert!(
            matches!(err, ProviderError::Unavailable { .. }),
            "{}: connection refused gave {err:?}",
            self.name
        );
        assert!(
            !err.may_have_been_applied(),
            "{}: a refused connection may have been applied: {err:?}",
            self.name
        );
    }

    /// A body that trickles in past the timeout is `TimedOutAfterSend`.
    pub async fn slow_body_times_out_after_send(&self) {
        let provider = self.provider();
        let spec = self.spec(&*provider);
        let created = provider
            .create(&self.ctx, &spec)
            .await
            .unwrap_or_else(|e| panic!("{}: create failed: {e}", self.name));
        // Observed once at full speed first: some fakes move a sandbox on when it is seen.
        provider
            .get(&self.ctx, &created.native_id)
            .await
            .unwrap_or_else(|e| panic!("{}: get failed: {e}", self.name));
        self.get_call
            .arm(self.server, Fault::new(FaultKind::SlowBody(SLOW_BYTE)));
        let err = match self
            .provider_with(Self::short_timeout())
            .get(&self.ctx, &created.native_id)
            .await
        {
            Ok(seen) => panic!("{}: a slow get did not time out: {seen:?}", self.name),
            Err(e) => e,
        };
        assert!(
            matches!(err, ProviderError::TimedOutAfterSend { .. }),
            "{}: a slow body gave {err:?}",
            self.name
        );
    }

    /// A body past the cap is a `Protocol` error, and the create may have been applied.
    pub async fn oversized_body_is_a_protocol_error_that_may_have_been_applied(&self) {
        self.create_call.arm(
            self.server,
            Fault::new(FaultKind::Oversized(OVERSIZED_BODY)),
        );
        let small = self.provider_with(HttpConfig {
            max_response_bytes: SMALL_CAP,
            ..HttpConfig::default()
        });
        let err = self.create_fails(&*small, &self.ctx).await;
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{}: an oversized body gave {err:?}",
            self.name
        );
        assert!(
            err.may_have_been_applied(),
            "{}: a create with an oversized answer is reported as not applied: {err:?}",
            self.name
        );
    }

    /// A body that is not the expected JSON is a `Protocol` error, and the create (which the
    /// fake did apply) may have been applied.
    pub async fn malformed_body_is_a_protocol_error_that_may_have_been_applied(&self) {
        self.create_call
            .arm(self.server, Fault::new(FaultKind::Malformed));
        let err = self.create_fails(&*self.provider(), &self.ctx).await;
        assert!(
            matches!(err, ProviderError::Protocol { .. }),
            "{}: a malformed body gave {err:?}",
            self.name
        );
        assert!(
            err.may_have_been_applied(),
            "{}: a create with a malformed answer is reported as not applied: {err:?}",
            self.name
        );
    }

    /// A create whose answer names a hostile sandbox id (`../../x<b>`) is a `Protocol` error
    /// that may have been applied (so the service answers `sandbox_create_outcome_unknown` and
    /// reconciliation finds the real sandbox by its operation id), and the error does not echo
    /// the id. Recording it would make later calls name another resource.
    pub async fn hostile_native_id_is_refused_as_a_protocol_error_that_may_have_been_applied(
        &self,
    ) {
        self.create_call
            .arm(self.server, Fault::new(FaultKind::HostileId));
        let err = self.create_fails(&*self.provider(), &self.ctx).await;
        assert!(
            matches!(&err, ProviderError::Protocol { message, .. } if message.contains("sandbox id")),
            "{}: an answer with a hostile id gave {err:?}",
            self.name
        );
        assert!(
            err.may_have_been_applied(),
            "{}: a create with a hostile id is reported as not applied: {err:?}",
            self.name
        );
        assert!(
            !format!("{err}").contains(HOSTILE_ID),
            "{}: the error echoes the hostile id: {err}",
            self.name
        );
    }

    /// A credential the provider refuses is `Unauthorized`, and the error never shows it.
    pub async fn wrong_credential_is_unauthorized_without_leaking_it(&self) {
        let wrong = CallContext::new(
            Some(SecretString::from(self.wrong_credential.as_str())),
            self.ctx.context().clone(),
        );
        let err = self.create_fails(&*self.provider(), &wrong).await;
        assert!(
            matches!(err, ProviderError::Unauthorized { .. }),
            "{}: a wrong credential gave {err:?}",
            self.name
        );
        assert!(
            !format!("{err} {err:?}").contains(&self.wrong_credential),
            "{}: the error shows the credential",
            self.name
        );
    }

    /// No credential is `MissingCredential`, found before any request is sent.
    pub async fn missing_credential_is_refused_before_any_request(&self) {
        let none = CallContext::new(None, self.ctx.context().clone());
        let sent_before = self.server.log().all().len();
        let err = self.create_fails(&*self.provider(), &none).await;
        assert!(
            matches!(err, ProviderError::MissingCredential { .. }),
            "{}: no credential gave {err:?}",
            self.name
        );
        assert_eq!(
            self.server.log().all().len(),
            sent_before,
            "{}: a request went out without a credential",
            self.name
        );
    }

    /// A sandbox the provider does not know is `NotFound`, and deleting it is not an error.
    pub async fn unknown_sandbox_is_not_found_and_deleting_it_is_ok(&self) {
        let provider = self.provider();
        match provider.get(&self.ctx, &self.unknown_id).await {
            Err(ProviderError::NotFound { .. }) => {}
            other => panic!(
                "{}: get of unknown sandbox {} gave {other:?}",
                self.name, self.unknown_id
            ),
        }
        if let Err(e) = provider.delete(&self.ctx, &self.unknown_id).await {
            panic!(
                "{}: deleting unknown sandbox {} failed: {e:?}",
                self.name, self.unknown_id
            );
        }
    }
}

/// One `#[tokio::test]` per fault scenario.
///
/// `world` is an async fn making a fresh fake (each test gets its own), `suite` a fn from
/// `&World` to the [`FaultSuite`] for it:
///
/// ```text
/// corral_provider_testkit::fault_suite_tests!(world: crate::world, suite: suite);
/// ```
#[macro_export]
macro_rules! fault_suite_tests {
    (world: $world:path, suite: $suite:path) => {
        $crate::fault_suite_tests!(@each $world, $suite,
            rate_limit_carries_retry_after_and_was_not_applied,
            server_error_on_create_may_have_been_applied,
            timeout_after_create_was_sent_may_have_been_applied_and_is_found_again,
            connection_refused_is_unavailable_and_not_applied,
            slow_body_times_out_after_send,
            oversized_body_is_a_protocol_error_that_may_have_been_applied,
            malformed_body_is_a_protocol_error_that_may_have_been_applied,
            hostile_native_id_is_refused_as_a_protocol_error_that_may_have_been_applied,
            wrong_credential_is_unauthorized_without_leaking_it,
            missing_credential_is_refused_before_any_request,
            unknown_sandbox_is_not_found_and_deleting_it_is_ok,
        );
    };
    (@each $world:path, $suite:path, $($scenario:ident,)+) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                let world = $world().await;
                $suite(&world).$scenario().await;
            }
        )+
    };
}
