//! The deletion worker: sandboxes deleted at the provider, keys revoked, profiles erased,
//! memberships removed; idempotent and resumable.

use std::time::Duration;

use corral_control::{CreateOrganization, DeletionReport, ProjectName, PutProfile};
use corral_control_store::Role;
use corral_domain::Provider;
use corral_provider::ProviderError;
use corral_registry::ProjectId;
use corral_registry::testing::TestDb;
use corral_service::Caller;
use secrecy::SecretString;

use crate::both_backends;
use crate::support::{World, assert_invalid};

both_backends!(
    deleting_a_project_deletes_its_sandboxes_at_the_provider,
    a_refused_sandbox_deletion_is_retried_by_the_next_pass,
    a_sandbox_without_a_credential_is_left_at_its_provider_and_named,
    deleting_an_account_deletes_its_projects_then_its_memberships,
);

async fn project_with_sandbox(
    w: &World,
    owner: &corral_control::Actor,
    account: corral_control_store::AccountId,
) -> (ProjectId, String, String) {
    let c = &w.control;
    let project = c
        .create_project(owner, account, ProjectName { name: "web".into() })
        .await
        .unwrap();
    let project: ProjectId = project.id.parse().unwrap();
    c.put_profile(
        owner,
        project,
        Provider::E2b,
        PutProfile {
            credential: Some(SecretString::from("cred".to_owned())),
            ..PutProfile::default()
        },
    )
    .await
    .unwrap();
    let key = c
        .create_key(owner, project, Default::default())
        .await
        .unwrap();
    let sandbox = w.sandbox(project).await;
    (project, sandbox, key.key)
}

async fn deleting_a_project_deletes_its_sandboxes_at_the_provider(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let (project, sandbox, key) = project_with_sandbox(&w, &owner, personal).await;
    let view = c.delete_project(&owner, project).await.unwrap();
    assert!(view.deleting_at.is_some());
    assert_eq!(w.double.count("delete"), 0, "deletion is asynchronous");

    let report = c.run_deletions().await.unwrap();
    assert_eq!(
        report,
        DeletionReport {
            projects_finished: 1,
            accounts_finished: 0,
            sandboxes_deleted: 1,
            keys_revoked: 1,
            profiles_erased: 1,
            failures: vec![],
            left_at_provider: vec![],
        }
    );
    assert_eq!(w.double.count("delete"), 1);
    let record = c
        .registry()
        .sandbox(project, sandbox.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(record.deleted_at.is_some(), "the sandbox is a tombstone");
    assert!(
        c.registry()
            .list_profiles(project)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        c.service()
            .authenticate(Some(&format!("Bearer {key}")))
            .await
            .is_err()
    );
    assert_invalid(
        c.list_sandboxes(&owner, project, None, None).await,
        "no such project",
    );
    assert!(c.list_projects(&owner, personal).await.unwrap().is_empty());
    // Idempotent: a second pass finds nothing to do.
    assert_eq!(c.run_deletions().await.unwrap(), DeletionReport::default());
    assert_eq!(w.double.count("delete"), 1);
    let _ = Caller::trusted(project);
}

async fn a_refused_sandbox_deletion_is_retried_by_the_next_pass(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let (project, _, _) = project_with_sandbox(&w, &owner, personal).await;
    c.delete_project(&owner, project).await.unwrap();
    w.double.fail_next("delete", || ProviderError::Unavailable {
        provider: Provider::E2b,
        message: "down for maintenance".into(),
        retry_after: None,
    });
    let first = c.run_deletions().await.unwrap();
    assert_eq!(first.projects_finished, 0);
    assert_eq!(first.failures.len(), 1);
    // The credential the retry needs is still there.
    assert_eq!(c.registry().list_profiles(project).await.unwrap().len(), 1);
    let second = c.run_deletions().await.unwrap();
    assert_eq!((second.projects_finished, second.sandboxes_deleted), (1, 1));
    assert!(
        c.registry()
            .list_profiles(project)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_sandbox_without_a_credential_is_left_at_its_provider_and_named(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let (project, sandbox, _) = project_with_sandbox(&w, &owner, personal).await;
    c.delete_profile(&owner, project, Provider::E2b)
        .await
        .unwrap();
    c.delete_project(&owner, project).await.unwrap();
    let report = c.run_deletions().await.unwrap();
    assert_eq!(report.projects_finished, 1);
    assert_eq!(report.left_at_provider, vec![sandbox.clone()]);
    assert_eq!(w.double.count("delete"), 0);
    let log = c.audit_log(&owner, personal, Some(1)).await.unwrap();
    assert_eq!(log[0].action, "project.deleted");
    assert_eq!(log[0].detail["leftAtProvider"][0], sandbox.as_str());
}

async fn deleting_an_account_deletes_its_projects_then_its_memberships(db: TestDb) {
    let w = World::new(db).await;
    let (owner, _) = w.user("owner@example.com").await;
    let c = &w.control;
    let acc = c
        .create_organization(
            &owner,
            CreateOrganization {
                name: "Acme".into(),
            },
        )
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    let member = w.member(acc, "member@example.com", Role::Member).await;
    let (project, _, _) = project_with_sandbox(&w, &owner, acc).await;
    c.delete_account(&owner, acc).await.unwrap();

    // The worker, as the server runs it.
    let worker = c.spawn_deletion_worker(Duration::from_millis(20));
    for _ in 0..250 {
        if c.list_accounts(&member).await.unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.abort();
    assert_eq!(w.double.count("delete"), 1);
    assert_eq!(
        c.list_accounts(&member).await.unwrap().len(),
        1,
        "only the personal account is left"
    );
    assert_invalid(c.list_members(&owner, acc).await, "no such account");
    assert!(c.store().members(acc).await.unwrap().is_empty());
    let account = c.store().account(acc).await.unwrap().unwrap();
    assert!(account.deleted_at.is_some());
    assert!(
        c.store()
            .project_ownership(project)
            .await
            .unwrap()
            .unwrap()
            .deleted_at
            .is_some()
    );
    let log = c.store().audit_events(acc, 10).await.unwrap();
    assert_eq!(log[0].action, "account.deleted");
    assert_eq!(log[1].action, "project.deleted");
}
