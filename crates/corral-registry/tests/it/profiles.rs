use corral_domain::{Provider, ProviderContext};
use corral_registry::schema::provider_profiles;
use corral_registry::testing::TestDb;
use std::sync::Arc;
use std::time::Duration;

use corral_registry::{
    DEFAULT_CACHE_TTL, MASTER_KEY_LEN, ManualClock, MasterKey, ProfileInput, Registry,
    RegistryError, Verification, with_conn,
};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use secrecy::{ExposeSecret, SecretString};

use crate::{on_both_backends, registry};

on_both_backends!(profiles:
    a_profile_round_trips_its_credential_context_settings_and_verifications,
    a_tampered_or_moved_credential_does_not_decrypt,
    a_profile_change_applies_at_once_here_and_within_the_cache_ttl_on_other_replicas,
);

fn input(credential: &str) -> ProfileInput {
    let mut settings = serde_json::Map::new();
    settings.insert("app".into(), serde_json::json!("my-fly-app"));
    ProfileInput {
        context: ProviderContext {
            team_id: Some("team_1".into()),
            ..Default::default()
        },
        settings,
        credential: Some(SecretString::from(credential)),
    }
}

pub(crate) async fn a_profile_round_trips_its_credential_context_settings_and_verifications(
    db: &TestDb,
) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap();
    assert!(
        reg.profile(project.id, Provider::Fly)
            .await
            .unwrap()
            .is_none()
    );
    let stored = reg
        .put_profile(project.id, Provider::Fly, input("tok-1"))
        .await
        .unwrap();
    assert!(stored.has_credential);
    assert_eq!(stored.context.team_id.as_deref(), Some("team_1"));

    let checked_at = chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000).unwrap();
    reg.record_verification(
        project.id,
        Provider::Fly,
        Verification {
            operation: "create".into(),
            ok: false,
            reason: Some("token lacks machines:write".into()),
            remediation: Some("create a deploy token".into()),
            checked_at,
        },
    )
    .await
    .unwrap();
    reg.record_verification(
        project.id,
        Provider::Fly,
        Verification {
            operation: "create".into(),
            ok: true,
            reason: None,
            remediation: None,
            checked_at,
        },
    )
    .await
    .unwrap();
    let got = reg
        .profile(project.id, Provider::Fly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.credential.as_ref().unwrap().expose_secret(), "tok-1");
    assert_eq!(got.profile.settings["app"], "my-fly-app");
    assert_eq!(
        got.profile.verifications.len(),
        1,
        "one result per operation"
    );
    assert!(got.profile.verifications[0].ok);
    assert_eq!(got.profile.verifications[0].checked_at, checked_at);

    // Replacing the credential forgets verifications about the old one.
    reg.put_profile(project.id, Provider::Fly, input("tok-2"))
        .await
        .unwrap();
    let got = reg
        .profile(project.id, Provider::Fly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.credential.unwrap().expose_secret(), "tok-2");
    assert!(got.profile.verifications.is_empty());
    assert_eq!(reg.list_profiles(project.id).await.unwrap().len(), 1);

    assert!(matches!(
        reg.record_verification(
            project.id,
            Provider::E2b,
            Verification {
                operation: "create".into(),
                ok: true,
                reason: None,
                remediation: None,
                checked_at,
            }
        )
        .await,
        Err(RegistryError::NotFound { .. })
    ));
    assert!(reg.delete_profile(project.id, Provider::Fly).await.unwrap());
    assert!(!reg.delete_profile(project.id, Provider::Fly).await.unwrap());
    assert!(
        reg.profile(project.id, Provider::Fly)
            .await
            .unwrap()
            .is_none()
    );
}

async fn stored_credential(reg: &Registry, project: &str) -> Vec<u8> {
    let mut conn = reg.database().connection().await.unwrap();
    with_conn!(&mut conn, |c| provider_profiles::table
        .filter(provider_profiles::project_id.eq(project))
        .select(provider_profiles::credential)
        .first::<Option<Vec<u8>>>(c)
        .await)
    .unwrap()
    .unwrap()
}

async fn overwrite_credential(reg: &Registry, project: &str, bytes: Vec<u8>) {
    let mut conn = reg.database().connection().await.unwrap();
    let n = with_conn!(&mut conn, |c| diesel::update(
        provider_profiles::table.filter(provider_profiles::project_id.eq(project))
    )
    .set(provider_profiles::credential.eq(Some(bytes.clone())))
    .execute(c)
    .await)
    .unwrap();
    assert_eq!(n, 1);
}

pub(crate) async fn a_tampered_or_moved_credential_does_not_decrypt(db: &TestDb) {
    let database = db.connect().await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let a = reg.create_project("a").await.unwrap();
    let b = reg.create_project("b").await.unwrap();
    reg.put_profile(a.id, Provider::E2b, input("secret-a"))
        .await
        .unwrap();
    reg.put_profile(b.id, Provider::E2b, input("secret-b"))
        .await
        .unwrap();

    // Project A's ciphertext moved into project B's row does not authenticate there.
    let sealed_a = stored_credential(&reg, &a.id.to_string()).await;
    let sealed_b = stored_credential(&reg, &b.id.to_string()).await;
    overwrite_credential(&reg, &b.id.to_string(), sealed_a.clone()).await;
    assert!(matches!(
        reg.profile(b.id, Provider::E2b).await,
        Err(RegistryError::CredentialUndecryptable)
    ));
    overwrite_credential(&reg, &b.id.to_string(), sealed_b).await;
    assert_eq!(
        reg.profile(b.id, Provider::E2b)
            .await
            .unwrap()
            .unwrap()
            .credential
            .unwrap()
            .expose_secret(),
        "secret-b"
    );

    // One flipped bit anywhere (nonce, ciphertext or tag) is detected.
    for index in [0, 24, sealed_a.len() - 1] {
        let mut tampered = sealed_a.clone();
        tampered[index] ^= 0x01;
        overwrite_credential(&reg, &a.id.to_string(), tampered).await;
        assert!(matches!(
            reg.profile(a.id, Provider::E2b).await,
            Err(RegistryError::CredentialUndecryptable)
        ));
    }
    overwrite_credential(&reg, &a.id.to_string(), sealed_a).await;

    // Another master key cannot read it; the error names no secret.
    let stranger = Registry::new(database, MasterKey::generate().unwrap());
    let err = stranger.profile(a.id, Provider::E2b).await.unwrap_err();
    assert!(matches!(err, RegistryError::CredentialUndecryptable));
    assert!(!err.to_string().contains("secret-a"));
    assert_eq!(
        reg.profile(a.id, Provider::E2b)
            .await
            .unwrap()
            .unwrap()
            .credential
            .unwrap()
            .expose_secret(),
        "secret-a"
    );
}

pub(crate) async fn a_profile_change_applies_at_once_here_and_within_the_cache_ttl_on_other_replicas(
    db: &TestDb,
) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let replica = || async {
        Registry::new(
            db.connect_with(db.config(), clock.clone()).await,
            MasterKey::from_bytes([9; MASTER_KEY_LEN]),
        )
    };
    let (a, b) = (replica().await, replica().await);
    let project = a.create_project("p").await.unwrap();
    let credential = |reg: Registry| async move {
        reg.profile(project.id, Provider::E2b)
            .await
            .unwrap()
            .and_then(|p| p.credential)
            .map(|c| c.expose_secret().to_owned())
    };
    // A profile stored on A is seen by B at once: the absence of a profile is not cached.
    assert_eq!(credential(a.clone()).await, None);
    assert_eq!(credential(b.clone()).await, None);
    a.put_profile(project.id, Provider::E2b, input("first"))
        .await
        .unwrap();
    assert_eq!(credential(b.clone()).await.as_deref(), Some("first"));
    // A changed profile: A sees the change at once...
    a.put_profile(project.id, Provider::E2b, input("second"))
        .await
        .unwrap();
    assert_eq!(credential(a.clone()).await.as_deref(), Some("second"));
    // ...B answers from its cache until the entry is as old as the TTL, then reads it again.
    clock.advance(DEFAULT_CACHE_TTL - Duration::from_millis(1));
    assert_eq!(credential(b.clone()).await.as_deref(), Some("first"));
    clock.advance(Duration::from_millis(1));
    assert_eq!(credential(b.clone()).await.as_deref(), Some("second"));

    // A failed verification recorded on B is seen by B at once (it refuses the operation).
    b.record_verification(
        project.id,
        Provider::E2b,
        Verification {
            operation: "exec".into(),
            ok: false,
            reason: Some("no permission".into()),
            remediation: None,
            checked_at: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
    let seen = b.profile(project.id, Provider::E2b).await.unwrap().unwrap();
    assert_eq!(seen.profile.verifications.len(), 1);
    // Deleting on B applies on B at once.
    assert!(b.delete_profile(project.id, Provider::E2b).await.unwrap());
    assert_eq!(credential(b.clone()).await, None);
}
