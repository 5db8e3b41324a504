//! The orphan reaper's findings in the audit log of the account owning the project: an
//! orphan's first sighting once, a vanished sandbox; a dry run records nothing.

use corral_control::{ProjectName, PutProfile};
use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CallContext, CreateSpec, SandboxProvider as _};
use corral_registry::ProjectId;
use corral_registry::testing::TestDb;
use secrecy::SecretString;

use crate::both_backends;
use crate::support::World;

both_backends!(reaper_findings_are_audited_for_the_owning_account_once);

async fn reaper_findings_are_audited_for_the_owning_account_once(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let project = c
        .create_project(&owner, personal, ProjectName { name: "web".into() })
        .await
        .unwrap();
    let project: ProjectId = project.id.parse().unwrap();
    c.put_profile(
        &owner,
        project,
        Provider::E2b,
        PutProfile {
            credential: Some(SecretString::from("cred".to_owned())),
            ..PutProfile::default()
        },
    )
    .await
    .unwrap();
    let sandbox = w.sandbox(project).await;
    let native = c
        .registry()
        .sandbox(project, sandbox.parse().unwrap())
        .await
        .unwrap()
        .unwrap()
        .native_id
        .unwrap();
    // Behind Corral's back: the sandbox is gone at the provider, and one made under this
    // deployment's tag for the project has no record.
    w.double
        .delete(&CallContext::anonymous(), &native)
        .await
        .unwrap();
    let deployment = c.service().deployment().await.unwrap();
    let planted = w
        .double
        .create(
            &CallContext::anonymous()
                .with_deployment(deployment.to_string())
                .with_project(project.to_string()),
            &CreateSpec {
                operation_id: OperationId::new(),
                request: CreateSandboxRequest::standard(Provider::E2b, None, None),
                timeout_seconds: None,
            },
        )
        .await
        .unwrap()
        .native_id;

    let actions = |log: &[corral_control::AuditEventView]| -> Vec<String> {
        log.iter()
            .filter(|e| e.action.starts_with("sandbox."))
            .map(|e| e.action.clone())
            .collect()
    };
    let dry = c.service().reap_once(true).await;
    assert_eq!(dry.orphans.len(), 1, "{dry:?}");
    c.audit_reap(&dry).await.unwrap();
    let log = c.audit_log(&owner, personal, None).await.unwrap();
    assert!(
        actions(&log).is_empty(),
        "a dry run audits nothing: {log:?}"
    );

    let report = c.service().reap_once(false).await;
    assert_eq!(report.orphans[0].native_id, planted);
    c.audit_reap(&report).await.unwrap();
    let again = c.service().reap_once(false).await;
    c.audit_reap(&again).await.unwrap();
    let log = c.audit_log(&owner, personal, None).await.unwrap();
    let mut found = actions(&log);
    found.sort();
    assert_eq!(
        found,
        ["sandbox.orphan_found", "sandbox.vanished"],
        "the second pass's repeat sighting is not logged again: {log:?}"
    );
    let orphan = log
        .iter()
        .find(|e| e.action == "sandbox.orphan_found")
        .unwrap();
    assert_eq!(orphan.target, project.to_string());
    assert_eq!(orphan.detail["nativeId"], serde_json::json!(planted));
}
