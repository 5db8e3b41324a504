//! Sandbox creates and deletes made through the sandbox API, audited for the account owning
//! the project with the API key as the actor; a project no account owns records nothing.

use corral_control::{ApiSandboxAction, ProjectName};
use corral_registry::ProjectId;
use corral_registry::testing::TestDb;

use crate::both_backends;
use crate::support::World;

both_backends!(api_sandbox_changes_are_audited_with_the_key_as_actor);

async fn api_sandbox_changes_are_audited_with_the_key_as_actor(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let project = c
        .create_project(&owner, personal, ProjectName { name: "web".into() })
        .await
        .unwrap();
    let project: ProjectId = project.id.parse().unwrap();

    c.audit_api_sandbox(
        project,
        "0123456789abcdef",
        ApiSandboxAction::Create,
        "sbx_one",
        "e2b",
    )
    .await
    .unwrap();
    c.audit_api_sandbox(
        project,
        "0123456789abcdef",
        ApiSandboxAction::Delete,
        "sbx_one",
        "e2b",
    )
    .await
    .unwrap();
    // A project no account owns (the CLI's default project): nothing to record, no failure.
    let unowned = c.registry().create_project("default").await.unwrap();
    c.audit_api_sandbox(
        unowned.id,
        "fedcba9876543210",
        ApiSandboxAction::Create,
        "sbx_two",
        "e2b",
    )
    .await
    .unwrap();

    let log = c.audit_log(&owner, personal, None).await.unwrap();
    let sandbox: Vec<_> = log
        .iter()
        .filter(|e| e.action.starts_with("sandbox."))
        .collect();
    assert_eq!(
        sandbox
            .iter()
            .map(|e| e.action.as_str())
            .collect::<Vec<_>>(),
        ["sandbox.delete", "sandbox.create"],
        "newest first, the unowned project's create nowhere: {log:?}"
    );
    for e in &sandbox {
        assert_eq!(e.actor, None, "no user acted: {e:?}");
        assert_eq!(e.actor_api_key.as_deref(), Some("0123456789abcdef"));
        assert_eq!(e.target, "sbx_one");
        assert_eq!(
            e.detail["projectId"],
            serde_json::json!(project.to_string())
        );
        assert_eq!(e.detail["provider"], serde_json::json!("e2b"));
    }
    // A user's own events never name an API key, even where their detail names one.
    let created = log.iter().find(|e| e.action == "project.create").unwrap();
    assert!(created.actor.is_some());
    assert_eq!(created.actor_api_key, None);
}
