use std::sync::Arc;
use std::time::Duration;

use corral_domain::Provider;
use corral_registry::testing::{TestDb, dump_all_rows, hex};
use corral_registry::{
    API_KEY_PREFIX, ApiKeyOptions, Clock as _, DEFAULT_CACHE_TTL, ManualClock, MasterKey,
    ProfileInput, Registry, RegistryError,
};
use secrecy::{ExposeSecret, SecretString};

use crate::{on_both_backends, registry};

on_both_backends!(keys:
    an_api_key_authenticates_its_project_until_revoked,
    a_revoked_key_is_refused_at_once_here_and_within_the_cache_ttl_on_other_replicas,
    a_cached_key_still_refuses_a_wrong_secret,
    a_zero_cache_ttl_reads_the_database_every_time,
    canary_secrets_appear_in_no_table,
    a_keys_last_use_is_recorded_to_within_a_minute_and_never_for_a_wrong_secret,
    a_named_key_keeps_its_name_and_keys_list_newest_first,
    an_expired_key_is_refused_like_an_unknown_one_cached_or_not,
);

pub(crate) async fn an_api_key_authenticates_its_project_until_revoked(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap();
    let other = reg.create_project("q").await.unwrap();
    let issued = reg.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    assert!(key.starts_with(API_KEY_PREFIX));
    assert!(key.contains(&issued.info.key_id));
    assert!(
        !format!("{issued:?}").contains(&key),
        "Debug must not show the key"
    );

    assert_eq!(reg.authenticate(&key).await.unwrap(), Some(project.id));
    let other_key = reg.issue_api_key(other.id).await.unwrap();
    assert_eq!(
        reg.authenticate(other_key.key.expose_secret())
            .await
            .unwrap(),
        Some(other.id)
    );

    // Malformed, wrong checksum, unknown id, and a right id with a wrong secret.
    for bad in [
        "",
        "crl_",
        "sk_live_abc",
        &key[..key.len() - 1],
        &format!("{key}x"),
    ] {
        assert_eq!(reg.authenticate(bad).await.unwrap(), None, "{bad:?}");
    }
    let forged = forge_with_valid_checksum(&issued.info.key_id);
    assert_eq!(reg.authenticate(&forged).await.unwrap(), None);

    let revoked = reg.revoke_api_key(&issued.info.key_id).await.unwrap();
    let when = revoked.revoked_at.expect("revoked");
    assert_eq!(reg.authenticate(&key).await.unwrap(), None);
    // Idempotent: the first revocation time stays.
    let again = reg.revoke_api_key(&issued.info.key_id).await.unwrap();
    assert_eq!(again.revoked_at, Some(when));
    assert!(matches!(
        reg.revoke_api_key("0000000000000000").await,
        Err(RegistryError::NotFound { .. })
    ));
    // The other project's key is unaffected.
    assert_eq!(
        reg.authenticate(other_key.key.expose_secret())
            .await
            .unwrap(),
        Some(other.id)
    );
    let listed = reg.list_api_keys(project.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_at, Some(when));
}

/// A key with the right id and a well-formed secret and checksum, but not the issued secret.
fn forge_with_valid_checksum(key_id: &str) -> String {
    // Build through a throwaway registry-independent path: issue keys until the format is
    // known, then swap the secret. The checksum is CRC-32 over the body, recomputed here.
    let body = format!("{API_KEY_PREFIX}{key_id}_{}", "a".repeat(52));
    let crc = crc32(body.as_bytes());
    let alphabet = b"0123456789abcdefghjkmnpqrstvwxyz";
    let bytes = crc.to_be_bytes();
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    let mut it = bytes.iter();
    let mut sum = String::new();
    while sum.len() < 7 {
        if bits < 5 {
            acc = (acc << 8) | u64::from(it.next().copied().unwrap_or(0));
            bits += 8;
        }
        sum.push(char::from(alphabet[((acc >> (bits - 5)) & 31) as usize]));
        bits -= 5;
    }
    format!("{body}{sum}")
}

pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

pub(crate) async fn canary_secrets_appear_in_no_table(db: &TestDb) {
    let database = db.connect().await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let project = reg.create_project("canary").await.unwrap();
    let canary = "CANARY-credential-7f3a9c1e5b";
    reg.put_profile(
        project.id,
        Provider::E2b,
        ProfileInput {
            credential: Some(SecretString::from(canary)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let issued = reg.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    let secret_part = key.rsplit('_').next().unwrap().to_owned();
    // Sanity: the credential is really stored and readable through the registry.
    let back = reg
        .profile(project.id, Provider::E2b)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.credential.unwrap().expose_secret(), canary);

    let dump = dump_all_rows(&database).await;
    assert!(
        dump.contains(&issued.info.key_id),
        "the dump must cover api_keys"
    );
    for needle in [
        canary.to_owned(),
        hex(canary.as_bytes()),
        key.clone(),
        secret_part.clone(),
    ] {
        assert!(
            !dump.contains(&needle),
            "a secret is stored in clear:\n{dump}"
        );
    }
    // On SQLite, the raw database and WAL files too.
    if let Some(path) = db.sqlite_path() {
        for file in [path.clone(), path.with_extension("db-wal")] {
            if let Ok(bytes) = std::fs::read(&file) {
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains(canary),
                    "{} holds the canary",
                    file.display()
                );
                assert!(
                    !text.contains(&secret_part),
                    "{} holds the key",
                    file.display()
                );
            }
        }
    }
}

/// Two replicas (two registries, each with its own key cache) on one database and one master
/// key, both on a clock the test moves.
async fn two_replicas(db: &TestDb, ttl: Duration) -> (Registry, Registry, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let bytes = [7u8; corral_registry::MASTER_KEY_LEN];
    let a = Registry::with_cache_ttl(
        db.connect_with(db.config(), clock.clone()).await,
        MasterKey::from_bytes(bytes),
        ttl,
    );
    let b = Registry::with_cache_ttl(
        db.connect_with(db.config(), clock.clone()).await,
        MasterKey::from_bytes(bytes),
        ttl,
    );
    (a, b, clock)
}

pub(crate) async fn a_revoked_key_is_refused_at_once_here_and_within_the_cache_ttl_on_other_replicas(
    db: &TestDb,
) {
    let (a, b, clock) = two_replicas(db, DEFAULT_CACHE_TTL).await;
    let project = a.create_project("p").await.unwrap();
    let issued = a.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    // Both replicas verify the key (and cache it).
    assert_eq!(a.authenticate(&key).await.unwrap(), Some(project.id));
    assert_eq!(b.authenticate(&key).await.unwrap(), Some(project.id));

    // Replica A revokes: A refuses the key at once, and so does a clone of A (shared cache).
    a.revoke_api_key(&issued.info.key_id).await.unwrap();
    assert_eq!(a.authenticate(&key).await.unwrap(), None);
    assert_eq!(a.clone().authenticate(&key).await.unwrap(), None);

    // Replica B answers from its cache until the entry is as old as the TTL (the documented
    // staleness bound), which also shows that a cached key needs no database read...
    clock.advance(DEFAULT_CACHE_TTL - Duration::from_millis(1));
    assert_eq!(b.authenticate(&key).await.unwrap(), Some(project.id));
    // ...and then asks the database again, which says revoked.
    clock.advance(Duration::from_millis(1));
    assert_eq!(b.authenticate(&key).await.unwrap(), None);
    // A refusal is not cached: the key stays refused however time moves on.
    clock.advance(DEFAULT_CACHE_TTL * 3);
    assert_eq!(b.authenticate(&key).await.unwrap(), None);
    assert_eq!(a.authenticate(&key).await.unwrap(), None);
}

pub(crate) async fn a_cached_key_still_refuses_a_wrong_secret(db: &TestDb) {
    let (a, _b, _clock) = two_replicas(db, DEFAULT_CACHE_TTL).await;
    let project = a.create_project("p").await.unwrap();
    let issued = a.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    assert_eq!(a.authenticate(&key).await.unwrap(), Some(project.id));
    // The key id is cached now; a forged secret under it is still refused, and the right key
    // still works afterwards.
    let forged = forge_with_valid_checksum(&issued.info.key_id);
    assert_eq!(a.authenticate(&forged).await.unwrap(), None);
    assert_eq!(a.authenticate(&key).await.unwrap(), Some(project.id));
}

pub(crate) async fn a_zero_cache_ttl_reads_the_database_every_time(db: &TestDb) {
    let (a, b, _clock) = two_replicas(db, Duration::ZERO).await;
    let project = a.create_project("p").await.unwrap();
    let issued = a.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    assert_eq!(b.authenticate(&key).await.unwrap(), Some(project.id));
    a.revoke_api_key(&issued.info.key_id).await.unwrap();
    // No time passes, yet the other replica refuses the key: nothing was cached.
    assert_eq!(b.authenticate(&key).await.unwrap(), None);
}

/// The recorded last use of the only key of `project`, once the background write has landed
/// (or after 5 s, whatever it then is).
async fn last_used(
    reg: &Registry,
    project: corral_registry::ProjectId,
    until: impl Fn(Option<corral_domain::Timestamp>) -> bool,
) -> Option<corral_domain::Timestamp> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let seen = reg.list_api_keys(project).await.unwrap()[0].last_used_at;
        if until(seen) || std::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn a_keys_last_use_is_recorded_to_within_a_minute_and_never_for_a_wrong_secret(
    db: &TestDb,
) {
    let (reg, _, clock) = two_replicas(db, DEFAULT_CACHE_TTL).await;
    let project = reg.create_project("p").await.unwrap();
    let issued = reg.issue_api_key(project.id).await.unwrap();
    let key = issued.key.expose_secret().to_owned();
    assert_eq!(
        reg.list_api_keys(project.id).await.unwrap()[0].last_used_at,
        None
    );

    // A right key id with a wrong secret is not a use.
    let forged = forge_with_valid_checksum(&issued.info.key_id);
    assert_eq!(reg.authenticate(&forged).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        reg.list_api_keys(project.id).await.unwrap()[0].last_used_at,
        None
    );

    let first_use = clock.now();
    assert_eq!(reg.authenticate(&key).await.unwrap(), Some(project.id));
    let recorded = last_used(&reg, project.id, |t| t.is_some()).await;
    assert_eq!(
        recorded.map(|t| t.timestamp_micros()),
        Some(first_use.timestamp_micros())
    );

    // Within the precision, later uses (cache misses included) leave it alone.
    clock.advance(Duration::from_secs(30));
    assert_eq!(reg.authenticate(&key).await.unwrap(), Some(project.id));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(last_used(&reg, project.id, |_| true).await, recorded);

    // Past it, the next database read records the new time.
    clock.advance(corral_registry::LAST_USE_PRECISION);
    let later = clock.now();
    assert_eq!(reg.authenticate(&key).await.unwrap(), Some(project.id));
    let updated = last_used(&reg, project.id, |t| t != recorded).await;
    assert_eq!(
        updated.map(|t| t.timestamp_micros()),
        Some(later.timestamp_micros())
    );
}

pub(crate) async fn a_named_key_keeps_its_name_and_keys_list_newest_first(db: &TestDb) {
    let (reg, other, clock) = two_replicas(db, DEFAULT_CACHE_TTL).await;
    let project = reg.create_project("p").await.unwrap();
    let unnamed = reg.issue_api_key(project.id).await.unwrap();
    assert_eq!(unnamed.info.name, None);
    assert_eq!(unnamed.info.expires_at, None);
    clock.advance(Duration::from_secs(1));
    let expires = clock.now() + chrono::Duration::days(30);
    let named = reg
        .issue_api_key_with(
            project.id,
            ApiKeyOptions {
                name: Some("ci — déploiement".to_owned()),
                expires_at: Some(expires),
            },
        )
        .await
        .unwrap();
    assert_eq!(named.info.name.as_deref(), Some("ci — déploiement"));
    // Read back through another replica: what was stored, newest first.
    let listed = other.list_api_keys(project.id).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|k| k.key_id.as_str()).collect();
    assert_eq!(
        ids,
        [named.info.key_id.as_str(), unnamed.info.key_id.as_str()]
    );
    assert_eq!(listed[0].name.as_deref(), Some("ci — déploiement"));
    assert_eq!(
        listed[0].expires_at.map(|t| t.timestamp_micros()),
        Some(expires.timestamp_micros())
    );
    assert!(!listed[0].is_expired(clock.now()));
    assert!(listed[0].is_expired(expires));
    assert_eq!(listed[1].name, None);
    assert!(!listed[1].is_expired(clock.now() + chrono::Duration::days(10_000)));
    // A named key authenticates like any other.
    assert_eq!(
        other.authenticate(named.key.expose_secret()).await.unwrap(),
        Some(project.id)
    );
}

pub(crate) async fn an_expired_key_is_refused_like_an_unknown_one_cached_or_not(db: &TestDb) {
    let (a, b, clock) = two_replicas(db, DEFAULT_CACHE_TTL).await;
    let project = a.create_project("p").await.unwrap();
    let issued = a
        .issue_api_key_with(
            project.id,
            ApiKeyOptions {
                name: None,
                expires_at: Some(clock.now() + chrono::Duration::minutes(5)),
            },
        )
        .await
        .unwrap();
    let key = issued.key.expose_secret().to_owned();
    // Live: replica A verifies (and caches) it.
    assert_eq!(a.authenticate(&key).await.unwrap(), Some(project.id));
    let recorded = last_used(&a, project.id, |t| t.is_some()).await;
    assert!(recorded.is_some());

    // One microsecond before the end it still works (from A's cache); at the end it does not,
    // on the cached replica nor on one that reads the row, and the answer is the same `None`
    // as for an unknown key.
    clock.advance(Duration::from_secs(5 * 60) - Duration::from_micros(1));
    let last_live_use = clock.now();
    assert_eq!(a.authenticate(&key).await.unwrap(), Some(project.id));
    // (A real use, more than a minute after the first: recorded.)
    let recorded = last_used(&a, project.id, |t| t != recorded).await;
    assert_eq!(
        recorded.map(|t| t.timestamp_micros()),
        Some(last_live_use.timestamp_micros())
    );
    clock.advance(Duration::from_micros(1));
    assert_eq!(a.authenticate(&key).await.unwrap(), None);
    assert_eq!(b.authenticate(&key).await.unwrap(), None);
    let forged = forge_with_valid_checksum("0000000000000000");
    assert_eq!(a.authenticate(&forged).await.unwrap(), None);

    // A refused use is not a use: past the precision, nothing new is recorded.
    clock.advance(corral_registry::LAST_USE_PRECISION * 2);
    assert_eq!(a.authenticate(&key).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        a.list_api_keys(project.id).await.unwrap()[0].last_used_at,
        recorded
    );
}
