//! One harness per adapter: the few facts the shared suites need about an adapter and its
//! fake, and [`adapter_tests!`](crate::adapter_tests), which turns them into one test per
//! conformance scenario, one per fault scenario, and the opt-in live test.
//!
//! Each adapter implements it on its fake (`fake::Fake`, feature `fake`), so the adapter's own
//! tests and the server's tests drive the same worlds:
//!
//! ```ignore
//! // crates/corral-provider-morph/src/fake.rs
//! #[async_trait::async_trait]
//! impl Harness for Fake {
//!     type Adapter = MorphProvider;
//!     async fn start() -> Self { Fake::start().await }
//!     /* server, config_at, context, calls, live … */
//! }
//!
//! // crates/corral-provider-morph/tests/it/main.rs
//! corral_provider_testkit::adapter_tests!(corral_provider_morph::fake::Fake);
//! ```

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::Method;
use corral_domain::CreateSandboxRequest;
use corral_provider::contract::NoObserver;
use corral_provider::{Adapter, CallContext, Contracted, SandboxProvider};
use corral_provider_http::HttpConfig;
use futures::FutureExt as _;

use crate::Conformance;
use crate::fake::FakeServer;
use crate::faults::FaultSuite;

/// An adapter's configuration.
pub type ConfigOf<H> = <<H as Harness>::Adapter as Adapter>::Config;

/// What the shared suites need to know about one adapter and its loopback fake.
#[async_trait]
pub trait Harness: Sized + Send + Sync + 'static {
    /// The adapter under test.
    type Adapter: Adapter;

    /// Starts the adapter's fake on loopback (a fresh world per test).
    async fn start() -> Self;

    /// The fake's control-API server: its request log and fault injection.
    fn server(&self) -> &FakeServer;

    /// The base URL the adapter is pointed at: the server's address plus any API prefix.
    fn base_url(&self) -> String {
        self.server().base_url()
    }

    /// The adapter's configuration pointed at `base_url`, with `http` settings.
    fn config_at(&self, base_url: &str, http: HttpConfig) -> ConfigOf<Self>;

    /// A call context (credential and routing context) the fake accepts.
    fn context(&self) -> CallContext;

    /// The create request the suites send (default: no image, the default lifetime).
    fn request(&self) -> CreateSandboxRequest {
        CreateSandboxRequest::standard(<Self::Adapter as Adapter>::PROVIDER, None, None)
    }

    /// How long a new sandbox may stay `creating` in the conformance suite.
    fn ready_within(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// Whether the adapter lists its sandboxes by deployment tag (the orphan reaper's
    /// listing); `false`: it must answer `Unsupported`.
    fn lists_by_tag() -> bool {
        false
    }
    /// Called before each conformance scenario (e.g. to make the fake answer `creating`
    /// first); nothing by default.
    fn before_conformance(&self) {}

    /// The create request's method and a substring of its path, for the fault suite.
    fn create_call() -> (Method, &'static str);

    /// The get request's method and a substring of its path, for the fault suite.
    fn get_call() -> (Method, &'static str);

    /// A native id the fake does not know.
    fn unknown_id() -> &'static str;

    /// A credential the fake rejects.
    fn wrong_credential() -> &'static str {
        "corral-wrong-credential"
    }

    /// The real provider's configuration, context and create request, read from environment
    /// variables for the opt-in live test: `Err` names the variables to set.
    fn live() -> Result<(ConfigOf<Self>, CallContext, CreateSandboxRequest), String>;

    /// The adapter pointed at this fake, wrapped as the server wraps it.
    fn provider(&self) -> Contracted {
        contracted::<Self::Adapter>(self.config_at(&self.base_url(), HttpConfig::default()))
    }

    /// The conformance suite over `provider` with this harness's context and request.
    fn conformance<'a>(&self, provider: &'a dyn SandboxProvider) -> Conformance<'a> {
        self.before_conformance();
        Conformance::new(provider)
            .with_context(self.context())
            .with_request(self.request())
            .with_ready_within(self.ready_within())
    }

    /// The fault suite bound to this fake.
    fn fault_suite(&self) -> FaultSuite<'_> {
        let (create_method, create_path) = Self::create_call();
        let (get_method, get_path) = Self::get_call();
        FaultSuite::new(self.server(), self.base_url(), move |url: &str, http| {
            contracted::<Self::Adapter>(self.config_at(url, http))
        })
        .with_context(self.context())
        .with_request(self.request())
        .create_call(create_method, create_path)
        .get_call(get_method, get_path)
        .unknown_id(Self::unknown_id())
        .wrong_credential(Self::wrong_credential())
    }
}

/// Builds the adapter from `config` and wraps it in the contract rules, as the server does.
pub fn contracted<A: Adapter>(config: A::Config) -> Contracted {
    let adapter = A::from_config(config)
        .unwrap_or_else(|e| panic!("{}: the adapter cannot be built: {e}", A::PROVIDER));
    Contracted::new(Arc::new(adapter), Arc::new(NoObserver))
}

/// The opt-in live test: runs the whole conformance suite against the real provider with the
/// variables [`Harness::live`] reads, and deletes every sandbox it created even when a
/// scenario fails. [`adapter_tests!`](crate::adapter_tests) marks it ignored, so a normal run
/// reports it skipped (never passed); `cargo nextest run --run-ignored ignored-only` runs it,
/// and then missing variables fail it.
pub async fn run_live<H: Harness>() {
    let (config, ctx, request) = H::live().unwrap_or_else(|missing| {
        panic!("the live {} test needs {missing} set", H::Adapter::PROVIDER)
    });
    let provider = contracted::<H::Adapter>(config);
    let suite = Conformance::new(&provider)
        .with_context(ctx)
        .with_request(request)
        .with_ready_within(Duration::from_secs(300));
    let outcome = AssertUnwindSafe(suite.run_all()).catch_unwind().await;
    suite.delete_created().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Every lifecycle operation the adapter's capabilities do not advertise answers
/// `Unsupported` without a request reaching its fake (the catalog is checked first, by
/// `Contracted`).
pub async fn unsupported_lifecycle_is_refused_before_any_call<H: Harness>(harness: &H) {
    let provider = harness.provider();
    let caps = provider.capabilities().clone();
    let ctx = harness.context();
    let id = H::unknown_id();
    let name = provider.provider().as_str();
    let before = harness.server().log().all().len();
    let refused = |what: &str, e: Option<corral_provider::ProviderError>| match e {
        Some(corral_provider::ProviderError::Unsupported { .. }) => {}
        other => panic!("{name}: {what} is not advertised but answered {other:?}"),
    };
    if !caps.supports_explicit_stop {
        refused("stop", provider.stop(&ctx, id).await.err());
        refused("resume", provider.resume(&ctx, id).await.err());
    }
    if !caps.supports_snapshots {
        let spec = corral_provider::SnapshotSpec {
            snapshot_id: corral_domain::SnapshotId::new(provider.provider()),
            name: None,
        };
        refused("snapshot", provider.snapshot(&ctx, id, &spec).await.err());
        refused("get_snapshot", provider.get_snapshot(&ctx, id).await.err());
        refused(
            "delete_snapshot",
            provider.delete_snapshot(&ctx, id).await.err(),
        );
    }
    if !caps.supports_restore {
        let spec = corral_provider::CreateSpec {
            operation_id: corral_domain::OperationId::new(),
            request: harness.request(),
            timeout_seconds: None,
        };
        refused("restore", provider.restore(&ctx, &spec, id).await.err());
    }
    assert_eq!(
        harness.server().log().all().len(),
        before,
        "{name}: a refused lifecycle operation reached the provider"
    );
}

/// One test per conformance scenario, one per fault scenario, and the opt-in live test, for
/// the [`Harness`] named by a path that resolves anywhere (an adapter's `fake::Fake`), in a
/// module `suite`:
/// `suite::conformance::<scenario>`, `suite::faults::<scenario>`, `suite::live::…`.
#[macro_export]
macro_rules! adapter_tests {
    ($harness:ty) => {
        mod suite {
        mod conformance {
            $crate::adapter_tests!(@conformance $harness,
                capabilities_are_valid,
                create_get_find_delete,
                exec_reports_streams_and_exit_code,
                exec_honours_advertised_cwd_and_env,
                exec_caps_output_and_deadline,
                files_round_trip_utf8_and_binary,
                files_report_missing_parent_and_missing_file,
                command_streams_output_then_exits,
                quiet_command_is_followed_to_its_end,
                resume_after_a_dropped_stream_loses_and_repeats_nothing,
                stdin_round_trip,
                signal_ends_a_running_command,
                command_outlives_its_start_call,
                command_output_that_is_not_utf8_survives,
                a_started_command_is_found_by_its_id,
                stop_then_resume_keeps_a_file,
                snapshot_then_restore_sees_the_old_content,
                forks_are_independent,
            );
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unsupported_lifecycle_is_refused_before_any_call() {
                use $crate::harness::Harness as _;
                let harness = <$harness>::start().await;
                $crate::harness::unsupported_lifecycle_is_refused_before_any_call(&harness).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lists_its_deployments_tagged_sandboxes() {
                use $crate::harness::Harness as _;
                let harness = <$harness>::start().await;
                let provider = harness.provider();
                harness
                    .conformance(&provider)
                    .lists_its_deployments_tagged_sandboxes(<$harness>::lists_by_tag())
                    .await;
            }
        }
        mod faults {
            $crate::adapter_tests!(@faults $harness,
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
        }
        mod live {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "opt-in: reaches the real provider with its CORRAL_LIVE_* variables"]
            async fn passes_the_conformance_suite_against_the_real_provider() {
                $crate::harness::run_live::<$harness>().await;
            }
        }
        }
    };
    (@conformance $harness:ty, $($scenario:ident,)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                use $crate::harness::Harness as _;
                let harness = <$harness>::start().await;
                let provider = harness.provider();
                harness.conformance(&provider).$scenario().await;
            }
        )+
    };
    (@faults $harness:ty, $($scenario:ident,)+) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                use $crate::harness::Harness as _;
                let harness = <$harness>::start().await;
                harness.fault_suite().$scenario().await;
            }
        )+
    };
}
