//! What the tenancy use cases share with identity and verification: the invitation mail, the
//! legal gate on every mutation, and deep verification of a profile.

use corral_control::{
    AcceptInvitation, ChangeRole, CreateInvitation, CreateOrganization, ProjectName, PutProfile,
    RenameAccount, TransferOwnership,
};
use corral_control_store::{InvitationId, Role};
use corral_domain::Provider;
use corral_errors::ErrorCode;
use corral_registry::testing::TestDb;
use secrecy::SecretString;

use crate::both_backends;
use crate::support::{World, assert_invalid, code};

both_backends!(
    the_invitation_mail_carries_the_only_copy_of_its_token,
    every_mutation_waits_for_the_current_legal_releases,
    testing_a_profile_stores_one_result_per_operation_until_replaced,
);

async fn the_invitation_mail_carries_the_only_copy_of_its_token(db: TestDb) {
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
    c.invite(
        &owner,
        acc,
        CreateInvitation {
            email: "new@example.com".into(),
            role: Role::Admin,
        },
    )
    .await
    .unwrap();
    let mails = w.outbox.take();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].to, "new@example.com");
    let prefix = "https://corral.example.com/console/invitations/accept?token=";
    let at = mails[0].text.find(prefix).expect("the mail has the link");
    let token: String = mails[0].text[at + prefix.len()..]
        .chars()
        .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '-' || *ch == '_')
        .collect();
    assert_eq!(token.len(), 43);
    let rows = corral_registry::testing::dump_all_rows(c.store().database()).await;
    assert!(!rows.contains(&token), "the invitation token was stored");

    let (new, _) = w.user("new@example.com").await;
    let joined = c
        .accept_invitation(&new, AcceptInvitation { token })
        .await
        .unwrap();
    assert_eq!(joined.role, Role::Admin);
    assert_eq!(c.list_members(&new, acc).await.unwrap().len(), 2);
}

async fn every_mutation_waits_for_the_current_legal_releases(db: TestDb) {
    let w = World::new(db).await;
    let c = &w.control;
    let (owner, personal) = w.user("owner@example.com").await;
    let acc = c
        .create_organization(
            &owner,
            CreateOrganization {
                name: "Acme".into(),
            },
        )
        .await
        .unwrap();
    let version = acc.version;
    let acc = acc.id.parse().unwrap();
    let project = c
        .create_project(&owner, acc, ProjectName { name: "web".into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    let other = w.member(acc, "other@example.com", Role::Member).await;
    c.publish_legal("terms", "Terms", "Be nice.").await.unwrap();

    let required = ErrorCode::LegalAcceptanceRequired;
    let o = &owner;
    let results = [
        code(
            c.create_organization(o, CreateOrganization { name: "B".into() })
                .await,
        ),
        code(
            c.rename_account(
                o,
                acc,
                RenameAccount {
                    name: "X".into(),
                    version,
                },
            )
            .await,
        ),
        code(c.delete_account(o, acc).await),
        code(
            c.change_role(o, acc, other.user_id, ChangeRole { role: Role::Admin })
                .await,
        ),
        code(c.remove_member(o, acc, other.user_id).await),
        code(
            c.transfer_ownership(
                o,
                acc,
                TransferOwnership {
                    user_id: other.user_id.to_string(),
                },
            )
            .await,
        ),
        code(
            c.invite(
                o,
                acc,
                CreateInvitation {
                    email: "n@example.com".into(),
                    role: Role::Member,
                },
            )
            .await,
        ),
        code(c.revoke_invitation(o, acc, InvitationId::new()).await),
        code(
            c.accept_invitation(o, AcceptInvitation { token: "t".into() })
                .await,
        ),
        code(
            c.create_project(o, personal, ProjectName { name: "p".into() })
                .await,
        ),
        code(
            c.rename_project(o, project, ProjectName { name: "p".into() })
                .await,
        ),
        code(c.delete_project(o, project).await),
        code(c.create_key(o, project, Default::default()).await),
        code(c.revoke_key(o, project, "k").await),
        code(
            c.put_profile(o, project, Provider::E2b, PutProfile::default())
                .await,
        ),
        code(c.delete_profile(o, project, Provider::E2b).await),
        code(c.test_profile(o, project, Provider::E2b).await),
    ];
    assert_eq!(results.to_vec(), vec![required; results.len()]);
    // Reads are not gated.
    assert_eq!(c.list_accounts(o).await.unwrap().len(), 2);
    assert_eq!(c.list_projects(o, acc).await.unwrap().len(), 1);
    // Accepting the release opens the mutations again.
    c.accept_legal(o, "terms", 1).await.unwrap();
    c.create_project(o, personal, ProjectName { name: "p".into() })
        .await
        .unwrap();
}

async fn testing_a_profile_stores_one_result_per_operation_until_replaced(db: TestDb) {
    let w = World::new(db).await;
    let c = &w.control;
    let (owner, personal) = w.user("owner@example.com").await;
    let project = c
        .create_project(&owner, personal, ProjectName { name: "web".into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    assert_eq!(
        code(c.test_profile(&owner, project, Provider::E2b).await),
        ErrorCode::ProviderProfileNotFound
    );
    let put = || PutProfile {
        credential: Some(SecretString::from("cred".to_owned())),
        ..PutProfile::default()
    };
    c.put_profile(&owner, project, Provider::E2b, put())
        .await
        .unwrap();
    let tested = c
        .test_profile(&owner, project, Provider::E2b)
        .await
        .unwrap();
    let ops: Vec<_> = tested
        .verifications
        .iter()
        .map(|v| (v.operation.as_str(), v.ok))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("create", true),
            ("delete", true),
            ("exec", true),
            ("get", true),
            ("read_file", true),
            ("write_file", true)
        ]
    );
    assert!(tested.readiness.ready);
    assert_eq!(
        c.list_profiles(&owner, project).await.unwrap(),
        vec![tested]
    );
    let log = c.audit_log(&owner, personal, Some(1)).await.unwrap();
    assert_eq!(log[0].action, "profile.test");
    // A new credential clears the results.
    let replaced = c
        .put_profile(&owner, project, Provider::E2b, put())
        .await
        .unwrap();
    assert!(replaced.verifications.is_empty());
    // Members cannot run a test (it creates a sandbox).
    let org = c
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
    let p2 = c
        .create_project(&owner, org, ProjectName { name: "api".into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    let member = w.member(org, "m@example.com", Role::Member).await;
    assert_invalid(
        c.test_profile(&member, p2, Provider::E2b).await,
        "this needs the admin role in the account",
    );
}
