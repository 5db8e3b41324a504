//! Vercel's own faults: the team and project context (the shared fault suite runs through
//! the harness).

use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, ProviderError, SandboxProvider, SecretString};
use corral_provider_vercel::fake::{API_KEY, PROJECT_ID, TEAM_ID};

use crate::setup;

fn spec() -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Vercel, None, None),
        timeout_seconds: Some(300),
    }
}

#[tokio::test]
async fn missing_team_or_project_is_missing_context_and_sends_nothing() {
    let (fake, vercel) = setup().await;
    let token = || Some(SecretString::from(API_KEY));
    let no_team = CallContext::new(
        token(),
        ProviderContext {
            project_id: Some(PROJECT_ID.into()),
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
            team_id: Some(TEAM_ID.into()),
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
    assert!(fake.server().log().all().is_empty());
    // Another team is refused by Vercel.
    let other = CallContext::new(
        token(),
        ProviderContext {
            team_id: Some("team_other".into()),
            project_id: Some(PROJECT_ID.into()),
            ..ProviderContext::default()
        },
    );
    let err = vercel.create(&other, &spec()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
}
