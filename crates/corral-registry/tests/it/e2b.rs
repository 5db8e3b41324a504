//! What the E2B door remembers per sandbox: records with env vars sealed at rest, a filtered
//! newest-first listing of live sandboxes paged by cursor, timeout ends, and stateless access
//! tokens bound to a sandbox and the master key.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_domain::{
    CredentialSource, OperationId, Provider, SandboxId, SandboxMetadata, SandboxStatus, Timestamp,
};
use corral_registry::schema::e2b_sandboxes;
use corral_registry::testing::{TestDb, dump_all_rows, hex};
use corral_registry::{
    E2bFilter, E2bRecord, E2bTemplate, MasterKey, NewSandbox, ProjectId, Registry, RegistryError,
};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use proptest::prelude::*;

use crate::{on_both_backends, registry};

on_both_backends!(e2b:
    a_record_round_trips_with_its_env_sealed_at_rest,
    a_sealed_env_moved_to_another_row_or_read_under_another_key_does_not_open,
    listing_is_newest_first_filtered_and_paged_across_filtered_out_rows,
    a_selective_filter_pages_through_many_filtered_out_rows,
    deleted_sandboxes_and_other_projects_are_never_listed,
    set_e2b_end_moves_the_end_of_the_projects_record_only,
    access_tokens_are_bound_to_their_sandbox_and_master_key,
    access_tokens_end_with_the_api_key_they_were_issued_to,
    template_and_start_filters_and_the_due_sweep,
    a_projects_own_templates_are_set_replaced_listed_and_removed,
);

const SECRET_VALUE: &str = "sk-live-9f3a7c1e5b2d8f4a6c0e";

fn micros(us: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_micros(us).unwrap()
}

async fn created(reg: &Registry, project: ProjectId) -> SandboxId {
    let id = SandboxId::new(Provider::Local);
    reg.insert_sandbox(NewSandbox {
        id,
        project_id: project,
        metadata: SandboxMetadata {
            native_provider_id: None,
            operation_id: OperationId::new(),
            credential_source: CredentialSource::Profile,
            workspace: None,
            team_id: None,
            project_id: None,
            bridge_url: None,
        },
    })
    .await
    .unwrap();
    reg.complete_create(project, id, &format!("n-{id}"), SandboxStatus::Running)
        .await
        .unwrap();
    id
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn record(project: ProjectId, sandbox: SandboxId, created_us: i64) -> E2bRecord {
    E2bRecord {
        project_id: project,
        sandbox_id: sandbox,
        template_id: "base".to_owned(),
        alias: Some("base-alias".to_owned()),
        metadata: map(&[("team", "red")]),
        env: BTreeMap::new(),
        end_at: micros(created_us + 300_000_000),
        created_at: micros(created_us),
    }
}

async fn stored_env(reg: &Registry, sandbox: SandboxId) -> Option<Vec<u8>> {
    let mut conn = reg.database().connection().await.unwrap();
    let s = sandbox.to_string();
    corral_registry::with_conn!(&mut conn, |c| e2b_sandboxes::table
        .filter(e2b_sandboxes::sandbox_id.eq(&s))
        .select(e2b_sandboxes::env_sealed)
        .first::<Option<Vec<u8>>>(c)
        .await)
    .unwrap()
}

async fn overwrite_env(reg: &Registry, sandbox: SandboxId, bytes: Option<Vec<u8>>) {
    let mut conn = reg.database().connection().await.unwrap();
    let s = sandbox.to_string();
    let n = corral_registry::with_conn!(&mut conn, |c| diesel::update(
        e2b_sandboxes::table.filter(e2b_sandboxes::sandbox_id.eq(&s))
    )
    .set(e2b_sandboxes::env_sealed.eq(bytes.clone()))
    .execute(c)
    .await)
    .unwrap();
    assert_eq!(n, 1);
}

pub(crate) async fn a_record_round_trips_with_its_env_sealed_at_rest(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("q").await.unwrap().id;
    let sandbox = created(&reg, project).await;
    let now_us = chrono::Utc::now().timestamp_micros();
    let mut rec = record(project, sandbox, now_us);
    rec.metadata = map(&[("team", "red"), ("user", "ada")]);
    rec.env = map(&[("API_TOKEN", SECRET_VALUE), ("MODE", "prod")]);

    reg.put_e2b(&rec).await.unwrap();
    assert_eq!(
        reg.get_e2b(project, sandbox).await.unwrap(),
        Some(rec.clone())
    );

    // Stored sealed: the value appears nowhere in the database, in clear or as hex, and the
    // column is not the JSON of the map.
    let sealed = stored_env(&reg, sandbox).await.unwrap();
    let json = serde_json::to_string(&rec.env).unwrap();
    assert_ne!(sealed, json.as_bytes());
    let dump = dump_all_rows(reg.database()).await;
    assert!(
        dump.contains(&sandbox.to_string()),
        "the dump holds the row"
    );
    assert!(!dump.contains(SECRET_VALUE));
    assert!(!dump.contains(&hex(SECRET_VALUE.as_bytes())));
    // Debug names the variables, never their values.
    let debug = format!("{rec:?}");
    assert!(
        debug.contains("API_TOKEN") && !debug.contains(SECRET_VALUE),
        "{debug}"
    );

    // A repeated put keeps the first record.
    let mut again = rec.clone();
    again.template_id = "other".to_owned();
    again.env = map(&[("API_TOKEN", "changed")]);
    reg.put_e2b(&again).await.unwrap();
    assert_eq!(
        reg.get_e2b(project, sandbox).await.unwrap(),
        Some(rec.clone())
    );

    // Another project neither sees it nor can record the sandbox as its own.
    assert_eq!(reg.get_e2b(other, sandbox).await.unwrap(), None);
    let mut stolen = rec.clone();
    stolen.project_id = other;
    assert!(matches!(
        reg.put_e2b(&stolen).await,
        Err(RegistryError::NotFound { .. })
    ));
    assert!(matches!(
        reg.put_e2b(&record(project, SandboxId::new(Provider::Local), now_us))
            .await,
        Err(RegistryError::NotFound { .. })
    ));

    // No env vars, no alias: nothing sealed, and it reads back the same.
    let bare_id = created(&reg, project).await;
    let mut bare = record(project, bare_id, now_us + 1);
    bare.alias = None;
    bare.metadata = BTreeMap::new();
    reg.put_e2b(&bare).await.unwrap();
    assert_eq!(stored_env(&reg, bare_id).await, None);
    assert_eq!(reg.get_e2b(project, bare_id).await.unwrap(), Some(bare));
}

pub(crate) async fn a_sealed_env_moved_to_another_row_or_read_under_another_key_does_not_open(
    db: &TestDb,
) {
    let database = db.connect().await;
    let reg = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let project = reg.create_project("p").await.unwrap().id;
    let (a, b) = (created(&reg, project).await, created(&reg, project).await);
    let now_us = chrono::Utc::now().timestamp_micros();
    let mut ra = record(project, a, now_us);
    ra.env = map(&[("API_TOKEN", SECRET_VALUE)]);
    let mut rb = record(project, b, now_us + 1);
    rb.env = map(&[("API_TOKEN", "b")]);
    reg.put_e2b(&ra).await.unwrap();
    reg.put_e2b(&rb).await.unwrap();

    // A's ciphertext copied into B's row is bound to A and does not open there.
    let sealed_a = stored_env(&reg, a).await;
    overwrite_env(&reg, b, sealed_a.clone()).await;
    assert!(matches!(
        reg.get_e2b(project, b).await,
        Err(RegistryError::CredentialUndecryptable)
    ));
    // A flipped bit does not open either.
    let mut flipped = sealed_a.unwrap();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    overwrite_env(&reg, b, Some(flipped)).await;
    assert!(matches!(
        reg.get_e2b(project, b).await,
        Err(RegistryError::CredentialUndecryptable)
    ));
    // Under another master key A's own row does not open; under the right one it does.
    let elsewhere = Registry::new(database, MasterKey::generate().unwrap());
    assert!(matches!(
        elsewhere.get_e2b(project, a).await,
        Err(RegistryError::CredentialUndecryptable)
    ));
    assert_eq!(reg.get_e2b(project, a).await.unwrap(), Some(ra));
}

pub(crate) async fn listing_is_newest_first_filtered_and_paged_across_filtered_out_rows(
    db: &TestDb,
) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let base = chrono::Utc::now().timestamp_micros();
    // Seven records a second apart; the 2nd and 5th (oldest first) are another team's.
    let mut all = Vec::new();
    for i in 0..7_i64 {
        let id = created(&reg, project).await;
        let mut rec = record(project, id, base + i * 1_000_000);
        let team = if i == 1 || i == 4 { "blue" } else { "red" };
        rec.metadata = map(&[("team", team), ("n", &i.to_string())]);
        rec.env = map(&[("I", &i.to_string())]);
        reg.put_e2b(&rec).await.unwrap();
        all.push(rec);
    }
    let newest_first: Vec<E2bRecord> = all.iter().rev().cloned().collect();
    let red: Vec<E2bRecord> = newest_first
        .iter()
        .filter(|r| r.metadata["team"] == "red")
        .cloned()
        .collect();
    assert_eq!(red.len(), 5);

    // Unfiltered: one page of everything, newest first, no cursor.
    let page = reg
        .list_e2b(project, &BTreeMap::new(), 10, None)
        .await
        .unwrap();
    assert_eq!(page.records, newest_first);
    assert_eq!(page.next, None);

    // Filtered, three per page: 3 then 2, each page filled past the filtered-out rows.
    let filter = map(&[("team", "red")]);
    let first = reg.list_e2b(project, &filter, 3, None).await.unwrap();
    assert_eq!(first.records, red[..3]);
    let cursor = first.next.expect("a second page");
    let second = reg
        .list_e2b(project, &filter, 3, Some(&cursor))
        .await
        .unwrap();
    assert_eq!(second.records, red[3..]);
    assert_eq!(second.next, None);

    // Exactly a page's worth of matches leaves no cursor behind.
    let exact = reg.list_e2b(project, &filter, 5, None).await.unwrap();
    assert_eq!(exact.records, red);
    assert_eq!(exact.next, None);

    // Every pair must match; an unknown key or value matches nothing.
    let two = map(&[("team", "red"), ("n", "3")]);
    let page = reg.list_e2b(project, &two, 3, None).await.unwrap();
    assert_eq!(page.records, vec![all[3].clone()]);
    let none = reg
        .list_e2b(project, &map(&[("team", "green")]), 3, None)
        .await
        .unwrap();
    assert!(none.records.is_empty() && none.next.is_none());

    // Bad input is refused, not a 500.
    assert!(matches!(
        reg.list_e2b(project, &filter, 3, Some("not-a-cursor"))
            .await,
        Err(RegistryError::InvalidCursor)
    ));
    assert!(matches!(
        reg.list_e2b(project, &filter, 0, None).await,
        Err(RegistryError::InvalidInput { .. })
    ));
}

pub(crate) async fn a_selective_filter_pages_through_many_filtered_out_rows(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let base = chrono::Utc::now().timestamp_micros();
    // 25 records; every sixth (0, 6, 12, 18, 24) is "rare".
    let mut rare = Vec::new();
    for i in 0..25_i64 {
        let id = created(&reg, project).await;
        let mut rec = record(project, id, base + i);
        if i % 6 == 0 {
            rec.metadata.insert("kind".to_owned(), "rare".to_owned());
            rare.push(rec.clone());
        }
        reg.put_e2b(&rec).await.unwrap();
    }
    rare.reverse();
    let filter = map(&[("kind", "rare")]);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = reg
            .list_e2b(project, &filter, 2, cursor.as_deref())
            .await
            .unwrap();
        pages += 1;
        assert!(
            !page.records.is_empty(),
            "a page with a cursor before it is never empty"
        );
        seen.extend(page.records);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, rare);
}

pub(crate) async fn deleted_sandboxes_and_other_projects_are_never_listed(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("q").await.unwrap().id;
    let base = chrono::Utc::now().timestamp_micros();
    let (kept, gone) = (created(&reg, project).await, created(&reg, project).await);
    let theirs = created(&reg, other).await;
    reg.put_e2b(&record(project, kept, base)).await.unwrap();
    reg.put_e2b(&record(project, gone, base + 1)).await.unwrap();
    // Newer than both, same metadata, another project's.
    reg.put_e2b(&record(other, theirs, base + 2)).await.unwrap();
    reg.tombstone(project, gone).await.unwrap();

    let filter = map(&[("team", "red")]);
    let page = reg.list_e2b(project, &filter, 10, None).await.unwrap();
    let ids: Vec<SandboxId> = page.records.iter().map(|r| r.sandbox_id).collect();
    assert_eq!(ids, vec![kept]);
    let page = reg
        .list_e2b(project, &BTreeMap::new(), 10, None)
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    // The tombstoned sandbox's record is still readable by id (the caller reports it gone).
    assert!(reg.get_e2b(project, gone).await.unwrap().is_some());

    let page = reg.list_e2b(other, &filter, 10, None).await.unwrap();
    let ids: Vec<SandboxId> = page.records.iter().map(|r| r.sandbox_id).collect();
    assert_eq!(ids, vec![theirs]);
}

pub(crate) async fn set_e2b_end_moves_the_end_of_the_projects_record_only(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("q").await.unwrap().id;
    let sandbox = created(&reg, project).await;
    let base = chrono::Utc::now().timestamp_micros();
    let rec = record(project, sandbox, base);
    reg.put_e2b(&rec).await.unwrap();

    let later = rec.end_at + Duration::from_secs(3600);
    assert!(reg.set_e2b_end(project, sandbox, later).await.unwrap());
    let got = reg.get_e2b(project, sandbox).await.unwrap().unwrap();
    assert_eq!(got.end_at, later);
    assert_eq!(
        E2bRecord {
            end_at: rec.end_at,
            ..got
        },
        rec
    );

    // Another project's call, or a sandbox without a record, changes nothing.
    assert!(!reg.set_e2b_end(other, sandbox, rec.end_at).await.unwrap());
    let bare = created(&reg, project).await;
    assert!(!reg.set_e2b_end(project, bare, later).await.unwrap());
    assert_eq!(
        reg.get_e2b(project, sandbox).await.unwrap().unwrap().end_at,
        later
    );
}

pub(crate) async fn access_tokens_are_bound_to_their_sandbox_and_master_key(db: &TestDb) {
    let database = db.connect().await;
    let bytes = [7u8; 32];
    let reg = Registry::new(database.clone(), MasterKey::from_bytes(bytes));
    let project = reg.create_project("p").await.unwrap().id;
    let (sandbox, another) = (created(&reg, project).await, created(&reg, project).await);

    let ends = reg.database().now() + chrono::TimeDelta::hours(1);
    let token = reg.e2b_access_token_ending(project, "k1", sandbox, ends);
    let fields: Vec<&str> = token.split('.').collect();
    assert_eq!(fields.len(), 4, "{token}");
    assert_eq!(fields[0], project.to_string());
    assert_eq!(fields[1], "k1");
    assert_eq!(fields[2], ends.timestamp().to_string());
    let tag = fields[3];
    assert_eq!(tag.len(), 43, "base64url without padding of 32 bytes");
    let claims = reg.check_e2b_access_token(sandbox, &token).unwrap();
    assert_eq!((claims.project, claims.key_id.as_str()), (project, "k1"));
    // Stateless: the same key elsewhere issues and accepts the same token.
    let replica = Registry::new(database.clone(), MasterKey::from_bytes(bytes));
    assert_eq!(
        replica.e2b_access_token_ending(project, "k1", sandbox, ends),
        token
    );
    assert_eq!(
        replica.check_e2b_access_token(sandbox, &token),
        Some(claims)
    );

    // Not for another sandbox, nor under another master key.
    assert_eq!(reg.check_e2b_access_token(another, &token), None);
    let elsewhere = Registry::new(database, MasterKey::generate().unwrap());
    assert_eq!(elsewhere.check_e2b_access_token(sandbox, &token), None);
    // Another project's, key's or end's name on this tag does not pass.
    let other = reg.create_project("q").await.unwrap().id;
    let later = ends.timestamp() + 86_400;
    for forged in [
        format!("{other}.k1.{}.{tag}", fields[2]),
        format!("{project}.k2.{}.{tag}", fields[2]),
        format!("{project}.k1.{later}.{tag}"),
    ] {
        assert_eq!(
            reg.check_e2b_access_token(sandbox, &forged),
            None,
            "{forged}"
        );
    }
    // Past its end it opens nothing, though its tag is right.
    let ended = reg.e2b_access_token_ending(
        project,
        "k1",
        sandbox,
        reg.database().now() - chrono::TimeDelta::seconds(1),
    );
    assert_eq!(reg.check_e2b_access_token(sandbox, &ended), None);
    // Every single-character change is refused.
    for i in 0..token.len() {
        let mut b = token.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(b).unwrap();
        if tampered != token {
            assert_eq!(
                reg.check_e2b_access_token(sandbox, &tampered),
                None,
                "{tampered}"
            );
        }
    }
    // Malformed: no panic, no claims (the version-1 form, project and tag, included).
    let e = fields[2];
    for bad in [
        "",
        ".",
        "...",
        &format!("{project}.{tag}"),
        &format!("{project}.k1.{e}."),
        &format!("{project}.k1.{e}"),
        &format!(".k1.{e}.{tag}"),
        &format!("{project}..{e}.{tag}"),
        &format!("{project}.k1..{tag}"),
        &format!("{project}.k1.{e}.{tag}="),
        &format!("{project}.k1.{e}.{tag}.{tag}"),
        &format!("{project}.k1.{e}.{}", &tag[..42]),
        &format!("{project}.k-1.{e}.{tag}"),
        &format!("{project}.k1.x{e}.{tag}"),
        "prj_.x.1.y",
        "é.é.é.é",
    ] {
        assert_eq!(reg.check_e2b_access_token(sandbox, bad), None, "{bad}");
    }
}

/// A token opens its sandbox only while the API key it was issued to is live: revoking the
/// key, or its expiry, ends every token issued to it; another key of the project is untouched.
pub(crate) async fn access_tokens_end_with_the_api_key_they_were_issued_to(db: &TestDb) {
    let reg = Registry::new(db.connect().await, MasterKey::generate().unwrap());
    let project = reg.create_project("p").await.unwrap().id;
    let sandbox = created(&reg, project).await;
    let (a, b) = (
        reg.issue_api_key(project).await.unwrap(),
        reg.issue_api_key(project).await.unwrap(),
    );
    let (ta, tb) = (
        reg.e2b_access_token(project, &a.info.key_id, sandbox),
        reg.e2b_access_token(project, &b.info.key_id, sandbox),
    );
    for t in [&ta, &tb] {
        assert_eq!(
            reg.authorize_e2b_access_token(sandbox, t).await.unwrap(),
            Some(project)
        );
    }
    reg.revoke_api_key(&a.info.key_id).await.unwrap();
    assert_eq!(
        reg.authorize_e2b_access_token(sandbox, &ta).await.unwrap(),
        None
    );
    assert_eq!(
        reg.authorize_e2b_access_token(sandbox, &tb).await.unwrap(),
        Some(project)
    );
    // A token naming an unknown key, or another project's key, opens nothing.
    let other = reg.create_project("q").await.unwrap().id;
    let c = reg.issue_api_key(other).await.unwrap();
    for key_id in ["nosuchkey0000000", c.info.key_id.as_str()] {
        let t = reg.e2b_access_token(project, key_id, sandbox);
        assert_eq!(
            reg.authorize_e2b_access_token(sandbox, &t).await.unwrap(),
            None,
            "{key_id}"
        );
    }
}

fn any_sandbox_id() -> impl Strategy<Value = SandboxId> {
    (
        proptest::sample::select(Provider::ALL.to_vec()),
        any::<u128>(),
    )
        .prop_map(|(p, u)| SandboxId::from_parts(p, ulid::Ulid::from(u)))
}

fn any_project_id() -> impl Strategy<Value = ProjectId> {
    any::<u128>().prop_map(|u| {
        format!(
            "prj_{}",
            ulid::Ulid::from(u).to_string().to_ascii_lowercase()
        )
        .parse()
        .unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_token_checks_for_its_own_sandbox_only(
        key in any::<[u8; 32]>(),
        project in any_project_id(),
        sandbox in any_sandbox_id(),
        other in any_sandbox_id(),
    ) {
        let reg = token_registry(key);
        let token = reg.e2b_access_token(project, "k1", sandbox);
        prop_assert_eq!(
            reg.check_e2b_access_token(sandbox, &token).map(|c| c.project),
            Some(project)
        );
        if other != sandbox {
            prop_assert_eq!(reg.check_e2b_access_token(other, &token), None);
        }
    }

    #[test]
    fn arbitrary_strings_are_refused_without_panic(
        text in "\\PC{0,200}|prj_[0-9a-z]{26}\\.[0-9a-z]{16}\\.[0-9]{10}\\.[A-Za-z0-9_-]{0,60}",
        sandbox in any_sandbox_id(),
    ) {
        let reg = token_registry([3u8; 32]);
        prop_assert_eq!(reg.check_e2b_access_token(sandbox, &text), None);
    }
}

/// A registry for token properties: tokens need only the key, so the database is a pool that
/// never opens a connection.
fn token_registry(key: [u8; 32]) -> Registry {
    let database = corral_registry::Database::open(
        corral_registry::DatabaseConfig::new("sqlite:///nonexistent/never-opened.db"),
        std::sync::Arc::new(corral_registry::SystemClock),
    )
    .unwrap();
    Registry::new(database, MasterKey::from_bytes(key))
}

pub(crate) async fn template_and_start_filters_and_the_due_sweep(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let base = chrono::Utc::now().timestamp_micros();
    let mut ids = Vec::new();
    for (i, template) in ["base", "python", "base", "python"].into_iter().enumerate() {
        let sandbox = created(&reg, project).await;
        let mut rec = record(project, sandbox, base + i as i64 * 1_000_000);
        rec.template_id = template.to_owned();
        // The first two are overdue, the others end in five minutes.
        if i < 2 {
            rec.end_at = micros(base - 1_000_000);
        }
        reg.put_e2b(&rec).await.unwrap();
        ids.push(sandbox);
    }
    let list = |filter: E2bFilter| {
        let reg = reg.clone();
        async move {
            reg.list_e2b_matching(project, &filter, 10, None)
                .await
                .unwrap()
                .records
                .into_iter()
                .map(|r| r.sandbox_id)
                .collect::<Vec<_>>()
        }
    };
    let python = list(E2bFilter {
        template: Some("python".into()),
        ..E2bFilter::default()
    })
    .await;
    assert_eq!(python, vec![ids[3], ids[1]]);
    let later = list(E2bFilter {
        started_after: Some(micros(base + 1_000_000)),
        ..E2bFilter::default()
    })
    .await;
    assert_eq!(later, vec![ids[3], ids[2]]);
    let both = list(E2bFilter {
        template: Some("base".into()),
        started_after: Some(micros(base)),
        metadata: map(&[("team", "red")]),
        oldest_first: false,
    })
    .await;
    assert_eq!(both, vec![ids[2]]);
    // Oldest first, across pages of one.
    let mut seen = Vec::new();
    let mut cursor = None;
    let oldest = E2bFilter {
        oldest_first: true,
        ..E2bFilter::default()
    };
    loop {
        let page = reg
            .list_e2b_matching(project, &oldest, 1, cursor.as_deref())
            .await
            .unwrap();
        seen.extend(page.records.iter().map(|r| r.sandbox_id));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ids);

    // The sweep sees the overdue live ones, oldest end first; a tombstone leaves it.
    let due = reg.due_e2b(chrono::Utc::now(), 10).await.unwrap();
    let due: Vec<SandboxId> = due
        .into_iter()
        .map(|(p, s)| {
            assert_eq!(p, project);
            s
        })
        .collect();
    assert_eq!(due.len(), 2, "{due:?}");
    assert!(due.contains(&ids[0]) && due.contains(&ids[1]));
    reg.tombstone(project, ids[0]).await.unwrap();
    let due = reg.due_e2b(chrono::Utc::now(), 10).await.unwrap();
    assert_eq!(due, vec![(project, ids[1])]);
}

pub(crate) async fn a_projects_own_templates_are_set_replaced_listed_and_removed(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let other = reg.create_project("q").await.unwrap().id;
    let t = |name: &str, provider: Provider, image: Option<&str>| E2bTemplate {
        name: name.to_owned(),
        provider,
        image: image.map(str::to_owned),
    };
    reg.put_e2b_template(project, &t("base", Provider::Local, None))
        .await
        .unwrap();
    reg.put_e2b_template(project, &t("py", Provider::Daytona, Some("python:3.12")))
        .await
        .unwrap();
    // Replaced, not added.
    reg.put_e2b_template(project, &t("base", Provider::E2b, Some("img")))
        .await
        .unwrap();
    assert_eq!(
        reg.e2b_templates(project).await.unwrap(),
        vec![
            t("base", Provider::E2b, Some("img")),
            t("py", Provider::Daytona, Some("python:3.12"))
        ]
    );
    assert_eq!(
        reg.e2b_template(project, "py").await.unwrap(),
        Some(t("py", Provider::Daytona, Some("python:3.12")))
    );
    // Another project sees none of them.
    assert_eq!(reg.e2b_template(other, "py").await.unwrap(), None);
    assert!(reg.e2b_templates(other).await.unwrap().is_empty());
    // Bad names and empty images are refused.
    for bad in ["", "has space", &"x".repeat(129)] {
        let e = reg
            .put_e2b_template(project, &t(bad, Provider::Local, None))
            .await
            .unwrap_err();
        assert!(
            matches!(e, RegistryError::InvalidInput { .. }),
            "{bad:?}: {e}"
        );
    }
    let e = reg
        .put_e2b_template(project, &t("ok", Provider::Local, Some("")))
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::InvalidInput { .. }), "{e}");
    assert!(reg.remove_e2b_template(project, "py").await.unwrap());
    assert!(!reg.remove_e2b_template(project, "py").await.unwrap());
    assert!(!reg.remove_e2b_template(other, "base").await.unwrap());
    assert_eq!(reg.e2b_templates(project).await.unwrap().len(), 1);
}
