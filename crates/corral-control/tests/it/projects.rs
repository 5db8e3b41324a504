//! Projects, keys, profiles (readiness), the sandbox views, and `account_deleting`.

use corral_control::{
    ChangeRole, CreateInvitation, CreateOrganization, KeyOptions, NewKey, ProjectName, PutProfile,
    RenameAccount,
};
use corral_control_store::Role;
use corral_domain::{Provider, ProviderContext};
use corral_errors::ErrorCode;
use corral_registry::testing::TestDb;
use secrecy::SecretString;

use crate::both_backends;
use crate::support::{World, assert_invalid, code};

both_backends!(
    projects_are_made_renamed_and_listed_with_registry_wide_names,
    keys_are_shown_once_scoped_to_their_project_and_revocable,
    keys_take_a_checked_name_and_expiry_and_list_newest_first,
    profiles_report_readiness_and_never_their_credential,
    sandboxes_of_a_project_are_visible_to_its_members,
    an_account_being_deleted_refuses_every_mutation,
);

fn name(n: &str) -> ProjectName {
    ProjectName { name: n.to_owned() }
}

async fn projects_are_made_renamed_and_listed_with_registry_wide_names(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
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
    // A CLI-made project holds its name too, and stays invisible here.
    let cli = c.registry().create_project("default").await.unwrap();

    let web = c.create_project(&owner, acc, name("web")).await.unwrap();
    assert_eq!(web.account_id, acc.to_string());
    assert_eq!(
        code(c.create_project(&owner, personal, name("web")).await),
        ErrorCode::ControlPlaneConflict
    );
    assert_eq!(
        code(c.create_project(&owner, acc, name("default")).await),
        ErrorCode::ControlPlaneConflict
    );
    assert_invalid(
        c.create_project(&member, acc, name("api")).await,
        "this needs the admin role in the account",
    );
    assert_invalid(
        c.create_project(&owner, acc, name("a\nb")).await,
        "`name` must be 1–255 characters without control characters",
    );
    let api = c.create_project(&owner, acc, name("api")).await.unwrap();
    let web_id = web.id.parse().unwrap();
    let renamed = c.rename_project(&owner, web_id, name("www")).await.unwrap();
    assert_eq!(renamed.name, "www");
    assert_eq!(c.registry().project(web_id).await.unwrap().name, "www");
    assert_eq!(
        code(c.rename_project(&owner, web_id, name("api")).await),
        ErrorCode::ControlPlaneConflict
    );
    assert_invalid(
        c.rename_project(&member, web_id, name("x")).await,
        "this needs the admin role in the account",
    );
    assert_invalid(
        c.rename_project(&owner, cli.id, name("x")).await,
        "no such project",
    );
    let mut listed: Vec<_> = c
        .list_projects(&member, acc)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    listed.sort();
    assert_eq!(listed, vec!["api", "www"]);
    assert!(c.list_projects(&owner, personal).await.unwrap().is_empty());
    let _ = api;
}

async fn keys_are_shown_once_scoped_to_their_project_and_revocable(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let p1 = c
        .create_project(&owner, personal, name("one"))
        .await
        .unwrap();
    let p2 = c
        .create_project(&owner, personal, name("two"))
        .await
        .unwrap();
    let (p1, p2) = (p1.id.parse().unwrap(), p2.id.parse().unwrap());

    let created = c.create_key(&owner, p1, Default::default()).await.unwrap();
    assert!(created.key.starts_with("crl_"));
    assert!(!format!("{created:?}").contains(&created.key));
    let caller = c
        .service()
        .authenticate(Some(&format!("Bearer {}", created.key)))
        .await
        .unwrap();
    assert_eq!(caller.project_id(), p1);
    let listed = c.list_keys(&owner, p1).await.unwrap();
    assert_eq!(listed.len(), 1);
    // The key was just used, so its last use may already be recorded (in the background).
    assert_eq!(
        (
            &listed[0].key_id,
            listed[0].created_at,
            listed[0].revoked_at
        ),
        (&created.info.key_id, created.info.created_at, None)
    );
    assert!(c.list_keys(&owner, p2).await.unwrap().is_empty());
    // The key of one project cannot be revoked through another.
    assert_invalid(
        c.revoke_key(&owner, p2, &created.info.key_id).await,
        "no such key",
    );
    assert_invalid(c.revoke_key(&owner, p1, "nope").await, "no such key");
    let revoked = c
        .revoke_key(&owner, p1, &created.info.key_id)
        .await
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(
        c.service()
            .authenticate(Some(&format!("Bearer {}", created.key)))
            .await
            .is_err()
    );
    // Audit entries name the key id, never the key.
    let log = c.audit_log(&owner, personal, None).await.unwrap();
    let text = serde_json::to_string(&log).unwrap();
    assert!(text.contains(&created.info.key_id));
    assert!(!text.contains(&created.key));
}

async fn profiles_report_readiness_and_never_their_credential(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
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
    let member = w.member(org, "member@example.com", Role::Member).await;
    let project = c.create_project(&owner, org, name("web")).await.unwrap();
    let project = project.id.parse().unwrap();
    let _ = personal;

    // No credential yet: stored, but not ready.
    let bare = c
        .put_profile(&owner, project, Provider::E2b, PutProfile::default())
        .await
        .unwrap();
    assert!(!bare.readiness.ready);
    assert_eq!(bare.readiness.missing, vec!["credential"]);
    let secret = "e2b_top_secret_credential";
    let put = PutProfile {
        credential: Some(SecretString::from(secret.to_owned())),
        context: ProviderContext::default(),
        settings: serde_json::Map::new(),
    };
    assert!(!format!("{put:?}").contains(secret));
    let stored = c
        .put_profile(&owner, project, Provider::E2b, put)
        .await
        .unwrap();
    assert!(stored.has_credential);
    assert!(stored.readiness.ready, "{:?}", stored.readiness);
    // Members read profiles; nothing they read carries the credential.
    let listed = c.list_profiles(&member, project).await.unwrap();
    assert_eq!(listed, vec![stored.clone()]);
    assert!(!serde_json::to_string(&listed).unwrap().contains(secret));
    let rows = corral_registry::testing::dump_all_rows(c.store().database()).await;
    assert!(!rows.contains(secret), "a credential was stored in clear");
    assert_invalid(
        c.put_profile(&member, project, Provider::E2b, PutProfile::default())
            .await,
        "this needs the admin role in the account",
    );
    // A provider this server does not run.
    assert_invalid(
        c.put_profile(&owner, project, Provider::Vercel, PutProfile::default())
            .await,
        "provider `vercel` is not configured on this server",
    );
    // The stored credential serves the sandbox API.
    w.sandbox(project).await;
    assert_eq!(
        w.double
            .credentials
            .lock()
            .unwrap()
            .last()
            .cloned()
            .flatten(),
        Some(secret.to_owned())
    );

    c.delete_profile(&owner, project, Provider::E2b)
        .await
        .unwrap();
    assert!(c.list_profiles(&member, project).await.unwrap().is_empty());
    assert_eq!(
        code(c.delete_profile(&owner, project, Provider::E2b).await),
        ErrorCode::ProviderProfileNotFound
    );
}

async fn sandboxes_of_a_project_are_visible_to_its_members(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let project = c
        .create_project(&owner, personal, name("web"))
        .await
        .unwrap();
    let project = project.id.parse().unwrap();
    c.put_profile(
        &owner,
        project,
        Provider::E2b,
        PutProfile {
            credential: Some(SecretString::from("k".to_owned())),
            ..PutProfile::default()
        },
    )
    .await
    .unwrap();
    let first = w.sandbox(project).await;
    let second = w.sandbox(project).await;
    let page = c
        .list_sandboxes(&owner, project, None, Some(1))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].id.to_string(), second);
    let rest = c
        .list_sandboxes(&owner, project, page.next_cursor.as_deref(), Some(1))
        .await
        .unwrap();
    assert_eq!(rest.items[0].id.to_string(), first);
    let got = c.get_sandbox(&owner, project, &first).await.unwrap();
    assert_eq!(got.id.to_string(), first);
    assert_eq!(
        code(c.get_sandbox(&owner, project, "sbx_nope").await),
        ErrorCode::InvalidSandboxId
    );
    assert_eq!(
        code(c.list_sandboxes(&owner, project, None, Some(0)).await),
        ErrorCode::InvalidRequest
    );
}

async fn an_account_being_deleted_refuses_every_mutation(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let created = c
        .create_organization(
            &owner,
            CreateOrganization {
                name: "Acme".into(),
            },
        )
        .await
        .unwrap();
    let acc = created.id.parse().unwrap();
    let admin = w.member(acc, "admin@example.com", Role::Admin).await;
    let project = c.create_project(&owner, acc, name("web")).await.unwrap();
    let project = project.id.parse().unwrap();
    let key = c
        .create_key(&owner, project, Default::default())
        .await
        .unwrap();

    assert_eq!(
        code(c.delete_account(&owner, personal).await),
        ErrorCode::PersonalAccountImmutable
    );
    assert_invalid(
        c.delete_account(&admin, acc).await,
        "this needs the owner role in the account",
    );
    let deleting = c.delete_account(&owner, acc).await.unwrap();
    assert!(deleting.deleting_at.is_some());
    let deleting_code = ErrorCode::AccountDeleting;
    assert_eq!(code(c.delete_account(&owner, acc).await), deleting_code);
    let version = deleting.version;
    assert_eq!(
        code(
            c.rename_account(
                &owner,
                acc,
                RenameAccount {
                    name: "X".into(),
                    version
                }
            )
            .await
        ),
        deleting_code
    );
    assert_eq!(
        code(
            c.change_role(
                &owner,
                acc,
                admin.user_id,
                ChangeRole { role: Role::Member }
            )
            .await
        ),
        deleting_code
    );
    assert_eq!(
        code(c.remove_member(&admin, acc, admin.user_id).await),
        deleting_code
    );
    assert_eq!(
        code(
            c.invite(
                &owner,
                acc,
                CreateInvitation {
                    email: "x@example.com".into(),
                    role: Role::Member
                }
            )
            .await
        ),
        deleting_code
    );
    assert_eq!(
        code(c.create_project(&owner, acc, name("api")).await),
        deleting_code
    );
    assert_eq!(
        code(c.rename_project(&owner, project, name("www")).await),
        deleting_code
    );
    assert_eq!(code(c.delete_project(&owner, project).await), deleting_code);
    assert_eq!(
        code(c.create_key(&owner, project, Default::default()).await),
        deleting_code
    );
    assert_eq!(
        code(c.revoke_key(&owner, project, &key.info.key_id).await),
        deleting_code
    );
    assert_eq!(
        code(
            c.put_profile(&owner, project, Provider::E2b, PutProfile::default())
                .await
        ),
        deleting_code
    );
    assert_eq!(
        code(c.delete_profile(&owner, project, Provider::E2b).await),
        deleting_code
    );
    // Reads still work while the deletion runs, and say so.
    let listed = c.list_projects(&owner, acc).await.unwrap();
    assert!(listed[0].deleting_at.is_some());
    assert!(c.list_keys(&owner, project).await.is_ok());
}

async fn keys_take_a_checked_name_and_expiry_and_list_newest_first(db: TestDb) {
    let w = World::new(db).await;
    let (owner, personal) = w.user("owner@example.com").await;
    let c = &w.control;
    let project = c
        .create_project(&owner, personal, name("keys"))
        .await
        .unwrap()
        .id
        .parse()
        .unwrap();
    let opts = |name: Option<&str>, expires_at| KeyOptions {
        name: name.map(str::to_owned),
        expires_at,
    };
    let now = chrono::Utc::now();

    // Refused before anything is issued, each with its own message.
    let long = "k".repeat(65);
    assert_invalid(
        c.create_key(&owner, project, opts(Some(&long), None)).await,
        "`name` must be at most 64 characters without control characters",
    );
    assert_invalid(
        c.create_key(&owner, project, opts(Some("a\u{7}b"), None))
            .await,
        "`name` must be at most 64 characters without control characters",
    );
    assert_invalid(
        c.create_key(
            &owner,
            project,
            opts(None, Some(now - chrono::Duration::seconds(1))),
        )
        .await,
        "`expiresAt` must be in the future",
    );
    assert_invalid(
        c.create_key(
            &owner,
            project,
            opts(None, Some(now + chrono::Duration::days(800))),
        )
        .await,
        "`expiresAt` must be at most 732 days ahead",
    );
    let bad_date = KeyOptions::try_from(NewKey {
        name: None,
        expires_at: Some("next tuesday".to_owned()),
    });
    assert_invalid(
        bad_date,
        "`expiresAt` must be an RFC 3339 date-time, like 2027-01-31T00:00:00Z",
    );
    assert!(c.list_keys(&owner, project).await.unwrap().is_empty());

    // 64 characters (not bytes) is fine; the name is trimmed; a blank one is no name.
    let longest = "é".repeat(64);
    let first = c
        .create_key(&owner, project, opts(Some(&longest), None))
        .await
        .unwrap();
    assert_eq!(first.info.name.as_deref(), Some(longest.as_str()));
    let parsed = KeyOptions::try_from(NewKey {
        name: Some("  deploy bot  ".to_owned()),
        expires_at: Some("2026-01-31T10:00:00+01:00".to_owned()),
    })
    .unwrap();
    assert_eq!(
        parsed.expires_at.unwrap().to_rfc3339(),
        "2026-01-31T09:00:00+00:00"
    );
    let expires = now + chrono::Duration::days(30);
    let second = c
        .create_key(&owner, project, opts(Some("  deploy bot  "), Some(expires)))
        .await
        .unwrap();
    assert_eq!(second.info.name.as_deref(), Some("deploy bot"));
    assert_eq!(
        second.info.expires_at.map(|t| t.timestamp_micros()),
        Some(expires.timestamp_micros())
    );
    assert!(!second.info.expired);
    let third = c
        .create_key(&owner, project, opts(Some("   "), None))
        .await
        .unwrap();
    assert_eq!(third.info.name, None);

    // Newest first, with names and expiries.
    let listed = c.list_keys(&owner, project).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|k| k.key_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            third.info.key_id.as_str(),
            second.info.key_id.as_str(),
            first.info.key_id.as_str()
        ]
    );
    assert_eq!(listed[1].name.as_deref(), Some("deploy bot"));
    assert_eq!(listed[1].expires_at, second.info.expires_at);
    assert!(listed.iter().all(|k| !k.expired));
    let json = serde_json::to_value(&listed[1]).unwrap();
    assert_eq!(json["name"], "deploy bot");
    assert_eq!(json["expired"], false);
    assert!(json["expiresAt"].is_string());

    // The audit entry of a creation names the key.
    let log = c.audit_log(&owner, personal, None).await.unwrap();
    let created: Vec<_> = log
        .iter()
        .filter(|e| e.action == "key.create")
        .map(|e| (e.detail["keyId"].clone(), e.detail["name"].clone()))
        .collect();
    assert!(created.contains(&(
        serde_json::json!(second.info.key_id),
        serde_json::json!("deploy bot")
    )));
    assert!(created.contains(&(
        serde_json::json!(third.info.key_id),
        serde_json::Value::Null
    )));
}
