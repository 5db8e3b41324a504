//! The shared fault suite, and Vercel's own faults: the team and project context.

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_http::reqwest::Method;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::faults::FaultSuite;
use corral_provider_vercel::fake::{self, FAKE_PROJECT_ID, FAKE_TEAM_ID, FAKE_TOKEN};

use crate::{ctx, provider, provider_with};

fn suite(server: &FakeServer) -> FaultSuite<'_> {
    FaultSuite::new(server, server.base_url(), provider_with)
        .with_context(ctx())
        .create_call(Method::POST, "/v3/sandboxes")
        .get_call(Method::GET, "/v2/sandboxes/")
        .unknown_id("sandbox-nope")
        .wrong_credential("vercel_wrong_token")
}

corral_provider_testkit::fault_suite_tests!(world: fake::start, suite: suite);

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Vercel, None, None),
        timeout_seconds: Some(300),
    }
}

#[tokio::test]
async fn missing_team_or_project_is_missing_context_and_sends_nothing() {
    let server = fake::start().await;
    let vercel = provider(&server.base_url());
    let token = || Some(SecretString::from(FAKE_TOKEN));
    let no_team = CallContext::new(
        token(),
        ProviderContext {
            project_id: Some(FAKE_PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.create(&no_team, &spec()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "teamId",
                ..
            }
        ),
        "{err:?}"
    );
    let no_project = CallContext::new(
        token(),
        ProviderContext {
            team_id: Some(FAKE_TEAM_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.get(&no_project, "sandbox-1").await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::MissingContext {
                field: "projectId",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(server.log().all().is_empty());
    // Another team is refused by Vercel.
    let other = CallContext::new(
        token(),
        ProviderContext {
            team_id: Some("team_other".into()),
            project_id: Some(FAKE_PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.create(&other, &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
