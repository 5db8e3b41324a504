//! Accounts, members, ownership, invitations and the audit log.

use corral_control::{
    AcceptInvitation, ChangeRole, CreateInvitation, CreateOrganization, RenameAccount,
    TransferOwnership,
};
use corral_control_store::{AccountKind, NewInvitation, Role, StoreError};
use corral_errors::ErrorCode;
use corral_registry::testing::TestDb;

use crate::both_backends;
use crate::support::{World, assert_invalid, code, token};

both_backends!(
    organizations_are_listed_renamed_with_versions_and_deduplicated_per_owner,
    a_double_submitted_organization_is_made_once,
    roles_follow_who_may_change_what_and_keep_an_owner,
    concurrent_demotions_cannot_remove_the_last_owner,
    ownership_transfer_swaps_roles_in_one_step,
    invitations_are_single_use_for_the_invited_email,
    audit_log_records_mutations_for_owners_only,
);

fn org(name: &str) -> CreateOrganization {
    CreateOrganization {
        name: name.to_owned(),
    }
}

async fn organizations_are_listed_renamed_with_versions_and_deduplicated_per_owner(db: TestDb) {
    let w = World::new(db).await;
    let (alice, personal) = w.user("alice@example.com").await;
    let (bob, _) = w.user("bob@example.com").await;
    let c = &w.control;

    let acme = c
        .create_organization(&alice, org("  Acme  "))
        .await
        .unwrap();
    assert_eq!(acme.name, "Acme");
    assert_eq!(acme.kind, AccountKind::Organization);
    assert_eq!(acme.role, Role::Owner);
    let listed = c.list_accounts(&alice).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|a| (a.id.as_str(), a.kind))
            .collect::<Vec<_>>(),
        vec![
            (personal.to_string().as_str(), AccountKind::Personal),
            (acme.id.as_str(), AccountKind::Organization)
        ]
    );

    // The same owner cannot make a second "Acme"; someone else can.
    assert_eq!(
        code(c.create_organization(&alice, org("Acme")).await),
        ErrorCode::ControlPlaneConflict
    );
    c.create_organization(&bob, org("Acme")).await.unwrap();
    assert_invalid(
        c.create_organization(&alice, org("")).await,
        "`name` must be 1–100 characters without control characters",
    );

    let id = acme.id.parse().unwrap();
    let renamed = c
        .rename_account(
            &alice,
            id,
            RenameAccount {
                name: "Acme Corp".into(),
                version: acme.version,
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.name, "Acme Corp");
    assert_eq!(renamed.version, acme.version + 1);
    // The version read before the rename is stale now.
    assert_eq!(
        code(
            c.rename_account(
                &alice,
                id,
                RenameAccount {
                    name: "Other".into(),
                    version: acme.version,
                },
            )
            .await
        ),
        ErrorCode::ControlPlaneConflict
    );
    // A personal account may be renamed.
    let mine = listed[0].clone();
    let renamed = c
        .rename_account(
            &alice,
            personal,
            RenameAccount {
                name: "Alice".into(),
                version: mine.version,
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.name, "Alice");
    // Bob sees none of it.
    assert_eq!(c.list_accounts(&bob).await.unwrap().len(), 2);
}

async fn a_double_submitted_organization_is_made_once(db: TestDb) {
    let w = World::new(db).await;
    let (alice, _) = w.user("alice@example.com").await;
    for round in 0..6 {
        let name = format!("Acme {round}");
        // Straight at the store, so the submissions meet in the database.
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let store = w.control.store().clone();
                let name = name.clone();
                tokio::spawn(async move { store.create_organization(alice.user_id, &name).await })
            })
            .collect();
        let mut made = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => made += 1,
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(made, 1, "round {round}");
    }
    assert_eq!(
        code(w.control.create_organization(&alice, org("Acme 0")).await),
        ErrorCode::ControlPlaneConflict
    );
    assert_eq!(w.control.list_accounts(&alice).await.unwrap().len(), 7);
}

async fn roles_follow_who_may_change_what_and_keep_an_owner(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let acc = c.create_organization(&owner, org("Acme")).await.unwrap();
    let acc = acc.id.parse().unwrap();
    let admin = w.member(acc, "admin@example.com", Role::Admin).await;
    let member = w.member(acc, "member@example.com", Role::Member).await;
    let role = |r| ChangeRole { role: r };

    // A member reads members but changes nothing.
    assert_eq!(c.list_members(&member, acc).await.unwrap().len(), 3);
    assert_invalid(
        c.change_role(&member, acc, admin.user_id, role(Role::Member))
            .await,
        "this needs the admin role in the account",
    );
    assert_invalid(
        c.remove_member(&member, acc, admin.user_id).await,
        "this needs the admin role in the account",
    );
    // An admin moves members between member and admin, but neither makes nor touches owners.
    c.change_role(&admin, acc, member.user_id, role(Role::Admin))
        .await
        .unwrap();
    c.change_role(&admin, acc, member.user_id, role(Role::Member))
        .await
        .unwrap();
    assert_invalid(
        c.change_role(&admin, acc, member.user_id, role(Role::Owner))
            .await,
        "this needs the owner role in the account",
    );
    assert_invalid(
        c.change_role(&admin, acc, owner.user_id, role(Role::Member))
            .await,
        "this needs the owner role in the account",
    );
    assert_invalid(
        c.remove_member(&admin, acc, owner.user_id).await,
        "this needs the owner role in the account",
    );
    assert_invalid(
        c.change_role(
            &owner,
            acc,
            corral_control_store::UserId::new(),
            role(Role::Admin),
        )
        .await,
        "no such member",
    );
    // The only owner can neither step down nor leave.
    assert_eq!(
        code(
            c.change_role(&owner, acc, owner.user_id, role(Role::Admin))
                .await
        ),
        ErrorCode::LastAccountOwner
    );
    assert_eq!(
        code(c.remove_member(&owner, acc, owner.user_id).await),
        ErrorCode::LastAccountOwner
    );
    // With a second owner, they can.
    c.change_role(&owner, acc, admin.user_id, role(Role::Owner))
        .await
        .unwrap();
    c.change_role(&owner, acc, owner.user_id, role(Role::Admin))
        .await
        .unwrap();
    // Anyone may leave; the member is gone from the list and from the account.
    c.remove_member(&member, acc, member.user_id).await.unwrap();
    assert_invalid(c.list_members(&member, acc).await, "no such account");
    let members = c.list_members(&admin, acc).await.unwrap();
    assert_eq!(
        members
            .iter()
            .map(|m| (m.email.as_str(), m.role))
            .collect::<Vec<_>>(),
        vec![
            ("admin@example.com", Role::Owner),
            ("owner@example.com", Role::Admin)
        ]
    );
    // A personal account's membership never changes.
    assert_eq!(
        code(
            c.change_role(&owner, personal, owner.user_id, role(Role::Admin))
                .await
        ),
        ErrorCode::PersonalAccountImmutable
    );
    assert_eq!(
        code(c.remove_member(&owner, personal, owner.user_id).await),
        ErrorCode::PersonalAccountImmutable
    );
}

async fn concurrent_demotions_cannot_remove_the_last_owner(db: TestDb) {
    let w = World::new(db).await;
    let (a, _) = w.user("a@example.com").await;
    let c = &w.control;
    for round in 0..8 {
        let acc = c
            .create_organization(&a, org(&format!("Org {round}")))
            .await
            .unwrap();
        let acc = acc.id.parse().unwrap();
        let b = w
            .member(acc, &format!("b{round}@example.com"), Role::Owner)
            .await;
        let store = c.store().clone();
        let store2 = store.clone();
        // Each owner demotes themself at the same time: one must be refused.
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { store.set_role(acc, a.user_id, Role::Admin).await }),
            tokio::spawn(async move { store2.set_role(acc, b.user_id, Role::Admin).await }),
        );
        let results = [ra.unwrap(), rb.unwrap()];
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let last_owner = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::LastOwner)))
            .count();
        assert_eq!((ok, last_owner), (1, 1), "round {round}: {results:?}");
        let owners = c
            .store()
            .members(acc)
            .await
            .unwrap()
            .into_iter()
            .filter(|m| m.role == Role::Owner)
            .count();
        assert_eq!(owners, 1);
    }
}

async fn ownership_transfer_swaps_roles_in_one_step(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let acc = c.create_organization(&owner, org("Acme")).await.unwrap();
    let acc = acc.id.parse().unwrap();
    let member = w.member(acc, "member@example.com", Role::Member).await;
    let (stranger, _) = w.user("stranger@example.com").await;
    let to = |u: &corral_control::Actor| TransferOwnership {
        user_id: u.user_id.to_string(),
    };

    assert_invalid(
        c.transfer_ownership(&member, acc, to(&member)).await,
        "this needs the owner role in the account",
    );
    assert_invalid(
        c.transfer_ownership(&owner, acc, to(&stranger)).await,
        "no such member",
    );
    assert_invalid(
        c.transfer_ownership(
            &owner,
            acc,
            TransferOwnership {
                user_id: "x".into(),
            },
        )
        .await,
        "no such member",
    );
    assert_eq!(
        code(c.transfer_ownership(&owner, personal, to(&member)).await),
        ErrorCode::PersonalAccountImmutable
    );
    c.transfer_ownership(&owner, acc, to(&member))
        .await
        .unwrap();
    let roles: Vec<_> = c
        .list_members(&owner, acc)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.email, m.role))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("member@example.com".to_owned(), Role::Owner),
            ("owner@example.com".to_owned(), Role::Admin)
        ]
    );
    // The former owner is an admin now.
    assert_invalid(
        c.transfer_ownership(&owner, acc, to(&owner)).await,
        "this needs the owner role in the account",
    );
}

async fn invitations_are_single_use_for_the_invited_email(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let acc = c.create_organization(&owner, org("Acme")).await.unwrap();
    let acc = acc.id.parse().unwrap();
    let invite = |email: &str, role| CreateInvitation {
        email: email.to_owned(),
        role,
    };

    let sent = c
        .invite(&owner, acc, invite(" New@Example.com ", Role::Member))
        .await
        .unwrap();
    assert_eq!(sent.email, "new@example.com");
    assert_eq!(
        code(
            c.invite(&owner, acc, invite("new@example.com", Role::Admin))
                .await
        ),
        ErrorCode::ControlPlaneConflict
    );
    assert_eq!(
        code(
            c.invite(&owner, acc, invite("owner@example.com", Role::Admin))
                .await
        ),
        ErrorCode::ControlPlaneConflict
    );
    assert_eq!(
        code(
            c.invite(&owner, personal, invite("x@example.com", Role::Member))
                .await
        ),
        ErrorCode::PersonalAccountImmutable
    );
    assert_invalid(
        c.invite(&owner, acc, invite("not an email", Role::Member))
            .await,
        "that is not an email address",
    );
    let listed = c.list_invitations(&owner, acc).await.unwrap();
    assert_eq!(listed, vec![sent.clone()]);
    c.revoke_invitation(&owner, acc, sent.id.parse().unwrap())
        .await
        .unwrap();
    assert!(c.list_invitations(&owner, acc).await.unwrap().is_empty());
    assert_invalid(
        c.revoke_invitation(&owner, acc, sent.id.parse().unwrap())
            .await,
        "no such invitation",
    );

    // Accepting: only the invited email, only once, only if not a member already.
    let (joiner, _) = w.user("joiner@example.com").await;
    let (other, _) = w.user("other@example.com").await;
    let joiner_token = w.invitation(acc, "joiner@example.com", Role::Admin).await;
    let accept = |t: &str| AcceptInvitation {
        token: t.to_owned(),
    };
    assert_eq!(
        code(c.accept_invitation(&other, accept(&joiner_token)).await),
        ErrorCode::ControlPlaneConflict
    );
    let joined = c
        .accept_invitation(&joiner, accept(&joiner_token))
        .await
        .unwrap();
    assert_eq!(joined.role, Role::Admin);
    assert_eq!(
        code(c.accept_invitation(&joiner, accept(&joiner_token)).await),
        ErrorCode::ControlPlaneConflict
    );
    assert_invalid(
        c.accept_invitation(&joiner, accept("garbage")).await,
        "no such invitation",
    );
    assert_invalid(
        c.accept_invitation(&joiner, accept(&token().0)).await,
        "no such invitation",
    );
    // An expired invitation is as good as none.
    let (expired, hash) = token();
    c.store()
        .create_invitation(NewInvitation {
            account_id: acc,
            email: "other@example.com".into(),
            role: Role::Member,
            token_hash: hash,
            invited_by: owner.user_id,
            expires_at: c.store().now() - chrono::Duration::seconds(1),
        })
        .await
        .unwrap();
    assert_invalid(
        c.accept_invitation(&other, accept(&expired)).await,
        "no such invitation",
    );
    // Only the token's hash is stored.
    let rows = corral_registry::testing::dump_all_rows(c.store().database()).await;
    assert!(
        !rows.contains(&joiner_token),
        "an invitation token was stored"
    );
    // Members may not list or send invitations.
    let member = w.member(acc, "m@example.com", Role::Member).await;
    assert_invalid(
        c.list_invitations(&member, acc).await,
        "this needs the admin role in the account",
    );
    // An admin cannot invite an owner.
    assert_invalid(
        c.invite(&joiner, acc, invite("boss@example.com", Role::Owner))
            .await,
        "this needs the owner role in the account",
    );
}

async fn audit_log_records_mutations_for_owners_only(db: TestDb) {
    let w = World::new(db).await;
    let (owner, _) = w.user("owner@example.com").await;
    let c = &w.control;
    let acc = c.create_organization(&owner, org("Acme")).await.unwrap();
    let acc = acc.id.parse().unwrap();
    let admin = w.member(acc, "admin@example.com", Role::Admin).await;
    c.invite(
        &admin,
        acc,
        CreateInvitation {
            email: "x@example.com".into(),
            role: Role::Member,
        },
    )
    .await
    .unwrap();
    let log = c.audit_log(&owner, acc, None).await.unwrap();
    let actions: Vec<_> = log.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        vec!["invitation.create", "invitation.accept", "account.create"]
    );
    assert_eq!(log[0].actor, Some(admin.user_id.to_string()));
    assert_eq!(c.audit_log(&owner, acc, Some(1)).await.unwrap().len(), 1);
    assert_invalid(
        c.audit_log(&owner, acc, Some(0)).await,
        "`limit` must be from 1 to 500",
    );
    assert_invalid(
        c.audit_log(&admin, acc, None).await,
        "this needs the owner role in the account",
    );
}
