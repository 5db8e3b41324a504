//! Membership scoping: a member of account B learns nothing of account A through any use
//! case — every answer is the one a missing target gets.

use corral_control::{
    AcceptInvitation, ChangeRole, CreateInvitation, CreateOrganization, ProjectName, PutProfile,
    RenameAccount, TransferOwnership,
};
use corral_control_store::{AccountId, InvitationId, Role, UserId};
use corral_domain::Provider;
use corral_errors::ErrorCode;
use corral_registry::ProjectId;
use corral_registry::testing::TestDb;
use secrecy::SecretString;

use crate::both_backends;
use crate::support::{World, code};

both_backends!(another_accounts_objects_are_indistinguishable_from_missing_ones);

/// The answers for A's real targets and for made-up ids of the same kind.
struct Target {
    account: AccountId,
    project: ProjectId,
    member: UserId,
    invitation: InvitationId,
    key: String,
    sandbox: String,
}

async fn every_answer(w: &World, who: &corral_control::Actor, t: &Target) -> Vec<(String, String)> {
    let c = &w.control;
    let mut answers = Vec::new();
    macro_rules! check {
        ($name:literal, $call:expr) => {{
            let r = $call.await;
            let e = r.expect_err(concat!($name, " succeeded on another account's target"));
            answers.push(($name.to_owned(), format!("{}: {}", e.code().as_str(), e)));
        }};
    }
    let a = t.account;
    let p = t.project;
    check!("list_members", c.list_members(who, a));
    check!(
        "rename_account",
        c.rename_account(
            who,
            a,
            RenameAccount {
                name: "x".into(),
                version: 1
            }
        )
    );
    check!("delete_account", c.delete_account(who, a));
    check!(
        "change_role",
        c.change_role(who, a, t.member, ChangeRole { role: Role::Member })
    );
    check!("remove_member", c.remove_member(who, a, t.member));
    check!(
        "transfer_ownership",
        c.transfer_ownership(
            who,
            a,
            TransferOwnership {
                user_id: t.member.to_string()
            }
        )
    );
    check!("list_invitations", c.list_invitations(who, a));
    check!(
        "invite",
        c.invite(
            who,
            a,
            CreateInvitation {
                email: "z@example.com".into(),
                role: Role::Member
            }
        )
    );
    check!(
        "revoke_invitation",
        c.revoke_invitation(who, a, t.invitation)
    );
    check!("audit_log", c.audit_log(who, a, None));
    check!("list_projects", c.list_projects(who, a));
    check!(
        "create_project",
        c.create_project(who, a, ProjectName { name: "zz".into() })
    );
    check!(
        "rename_project",
        c.rename_project(who, p, ProjectName { name: "zz".into() })
    );
    check!("delete_project", c.delete_project(who, p));
    check!("list_keys", c.list_keys(who, p));
    check!("create_key", c.create_key(who, p, Default::default()));
    check!("revoke_key", c.revoke_key(who, p, &t.key));
    check!("list_profiles", c.list_profiles(who, p));
    check!(
        "put_profile",
        c.put_profile(who, p, Provider::E2b, PutProfile::default())
    );
    check!("delete_profile", c.delete_profile(who, p, Provider::E2b));
    check!("test_profile", c.test_profile(who, p, Provider::E2b));
    check!("list_sandboxes", c.list_sandboxes(who, p, None, None));
    check!("get_sandbox", c.get_sandbox(who, p, &t.sandbox));
    answers
}

async fn another_accounts_objects_are_indistinguishable_from_missing_ones(db: TestDb) {
    let w = World::new(db).await;
    let c = &w.control;
    let (alice, _) = w.user("alice@example.com").await;
    let (bob, _) = w.user("bob@example.com").await;
    let a = c
        .create_organization(&alice, CreateOrganization { name: "A".into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    // Bob owns an organization of his own (so he holds every role somewhere).
    c.create_organization(&bob, CreateOrganization { name: "B".into() })
        .await
        .unwrap();
    let member = w.member(a, "m@example.com", Role::Member).await;
    let project = c
        .create_project(&alice, a, ProjectName { name: "web".into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    c.put_profile(
        &alice,
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
        .create_key(&alice, project, Default::default())
        .await
        .unwrap()
        .info
        .key_id;
    let sandbox = w.sandbox(project).await;
    let invitation = c
        .invite(
            &alice,
            a,
            CreateInvitation {
                email: "later@example.com".into(),
                role: Role::Member,
            },
        )
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    let real = Target {
        account: a,
        project,
        member: member.user_id,
        invitation,
        key: key.clone(),
        sandbox: sandbox.clone(),
    };
    let made_up = Target {
        account: AccountId::new(),
        project: ProjectId::new(),
        member: UserId::new(),
        invitation: InvitationId::new(),
        key: "nokey".into(),
        sandbox: sandbox.clone(),
    };
    let seen = every_answer(&w, &bob, &real).await;
    let missing = every_answer(&w, &bob, &made_up).await;
    assert_eq!(seen, missing);
    assert_eq!(seen.len(), 23);
    for (name, answer) in &seen {
        assert!(
            answer == "invalid_request: no such account"
                || answer == "invalid_request: no such project",
            "{name}: {answer}"
        );
    }
    // Nothing changed and no provider was called on Bob's behalf.
    assert_eq!(w.double.count("delete"), 0);
    assert_eq!(c.list_members(&alice, a).await.unwrap().len(), 2);
    assert_eq!(
        c.list_keys(&alice, project).await.unwrap()[0].revoked_at,
        None
    );
    // Nor can Bob accept an invitation meant for someone else's email.
    let token = w.invitation(a, "carol@example.com", Role::Member).await;
    assert_eq!(
        code(c.accept_invitation(&bob, AcceptInvitation { token }).await),
        ErrorCode::ControlPlaneConflict
    );
}
