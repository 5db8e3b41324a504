//! Identity, sessions, CSRF, throttling, legal gating, mail and the email webhook, each
//! scenario on SQLite and on PostgreSQL.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use corral_control::{
    Control, ControlConfig, ControlError, EmailWebhookHeaders, Mail, MailError, MailPurpose,
    Mailer, SmtpConfig, SmtpMailer, SmtpSecurity, sign_email_webhook,
};
use corral_control_store::{ControlStore, Role};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_registry::testing::{TestDb, dump_all_rows, hex};
use corral_registry::{Clock, ManualClock, MasterKey, Registry};
use corral_service::{Service, ServiceConfig};
use secrecy::SecretString;

const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Collects mails instead of sending them.
#[derive(Debug, Default)]
struct Outbox(Mutex<Vec<Mail>>);

impl Outbox {
    fn take(&self) -> Vec<Mail> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[async_trait]
impl Mailer for Outbox {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        self.0.lock().unwrap().push(mail.clone());
        Ok(())
    }
}

struct World {
    control: Control,
    clock: Arc<ManualClock>,
    outbox: Arc<Outbox>,
    _db: TestDb,
}

async fn world(db: TestDb) -> World {
    let config = db.config();
    world_with(db, config).await
}

async fn world_with(db: TestDb, db_config: corral_registry::DatabaseConfig) -> World {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let database = db.connect_with(db_config, c).await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let idempotency = IdempotencyStore::new(database.clone(), IdempotencyConfig::default());
    let service = Service::new(
        BTreeMap::new(),
        registry.clone(),
        idempotency,
        ServiceConfig::default(),
    );
    let config = ControlConfig {
        public_url: "https://corral.example.com/".to_owned(),
        email_webhook_secret: Some(SecretString::from(WEBHOOK_SECRET)),
        ..ControlConfig::default()
    };
    let outbox = Arc::new(Outbox::default());
    let control = Control::new(ControlStore::new(database), registry, service, config)
        .with_mailer(outbox.clone());
    World {
        control,
        clock,
        outbox,
        _db: db,
    }
}

/// Declares `mod $name { sqlite, postgres }` running `async fn $name(TestDb)` on each backend.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(corral_registry::testing::TestDb::sqlite()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) =
                    corral_registry::testing::TestDb::postgres(stringify!($name)).await
                {
                    super::$name(db).await;
                }
            }
        }
    )+};
}

on_both_backends!(
    sign_in_link_works_once_and_expires_after_15_minutes,
    session_expires_after_idle_window_and_absolute_lifetime,
    sign_out_ends_one_session_and_sign_out_everywhere_ends_all,
    password_sign_in_needs_the_set_password_and_12_characters,
    failed_sign_ins_are_throttled_per_email_and_per_client,
    legal_gating_requires_the_current_release_of_every_document,
    email_webhook_suppresses_bounced_addresses_and_refuses_bad_deliveries,
    sign_in_links_are_mailed_only_to_known_unsuppressed_addresses,
    invited_address_gets_a_user_when_its_link_is_used,
    me_lists_the_personal_account_and_audit_records_identity_events,
    no_token_or_password_is_stored,
    concurrent_uses_of_one_sign_in_link_yield_one_session,
    password_change_signs_out_every_other_session,
    unreachable_store_is_legal_unavailable_for_legal_operations,
);

fn token_of(link: &str) -> String {
    let (base, token) = link.split_once("?token=").expect("link has a token");
    assert_eq!(base, "https://corral.example.com/console/sign-in/verify");
    token.to_owned()
}

fn client(n: u8) -> Option<IpAddr> {
    Some(IpAddr::from([192, 0, 2, n]))
}

async fn signed_in(w: &World, email: &str) -> (corral_control::Actor, String) {
    let link = w.control.invite_user(email).await.unwrap();
    w.control
        .sign_in_with_token(&token_of(&link), client(1))
        .await
        .unwrap()
}

async fn sign_in_link_works_once_and_expires_after_15_minutes(db: TestDb) {
    let w = world(db).await;
    let link = w.control.invite_user("  Ada@Example.COM ").await.unwrap();
    let token = token_of(&link);
    let (actor, cookie) = w
        .control
        .sign_in_with_token(&token, client(1))
        .await
        .unwrap();
    assert_eq!(actor.email, "ada@example.com");
    assert_eq!(
        w.control.authenticate_session(&cookie).await.unwrap(),
        actor
    );

    let again = w.control.sign_in_with_token(&token, client(1)).await;
    assert!(matches!(again, Err(ControlError::Unauthenticated { .. })));

    let late = token_of(&w.control.invite_user("ada@example.com").await.unwrap());
    w.clock.advance(Duration::from_secs(15 * 60 + 1));
    let expired = w.control.sign_in_with_token(&late, client(1)).await;
    assert!(matches!(expired, Err(ControlError::Unauthenticated { .. })));

    let within = token_of(&w.control.invite_user("ada@example.com").await.unwrap());
    w.clock.advance(Duration::from_secs(14 * 60));
    assert!(
        w.control
            .sign_in_with_token(&within, client(1))
            .await
            .is_ok()
    );

    assert!(matches!(
        w.control.invite_user("not an email").await,
        Err(ControlError::Invalid { .. })
    ));
}

async fn session_expires_after_idle_window_and_absolute_lifetime(db: TestDb) {
    let w = world(db).await;
    let (_, cookie) = signed_in(&w, "idle@example.com").await;
    // Used every 11 hours, the session survives the 12-hour idle window...
    for _ in 0..3 {
        w.clock.advance(Duration::from_secs(11 * 3600));
        w.control.authenticate_session(&cookie).await.unwrap();
    }
    // ...but not 12 hours without use.
    w.clock.advance(Duration::from_secs(12 * 3600));
    assert!(matches!(
        w.control.authenticate_session(&cookie).await,
        Err(ControlError::Unauthenticated { .. })
    ));

    let (_, cookie) = signed_in(&w, "absolute@example.com").await;
    let mut used = Duration::ZERO;
    while used + Duration::from_secs(11 * 3600) < Duration::from_secs(7 * 24 * 3600) {
        w.clock.advance(Duration::from_secs(11 * 3600));
        used += Duration::from_secs(11 * 3600);
        w.control.authenticate_session(&cookie).await.unwrap();
    }
    w.clock.advance(Duration::from_secs(7 * 24 * 3600) - used);
    assert!(matches!(
        w.control.authenticate_session(&cookie).await,
        Err(ControlError::Unauthenticated { .. })
    ));

    for garbage in ["", "x", &"a".repeat(4096)] {
        assert!(matches!(
            w.control.authenticate_session(garbage).await,
            Err(ControlError::Unauthenticated { .. })
        ));
    }
}

async fn sign_out_ends_one_session_and_sign_out_everywhere_ends_all(db: TestDb) {
    let w = world(db).await;
    let (a1, c1) = signed_in(&w, "many@example.com").await;
    let (_, c2) = signed_in(&w, "many@example.com").await;
    let (_, c3) = signed_in(&w, "many@example.com").await;
    let (_, other) = signed_in(&w, "other@example.com").await;

    w.control.sign_out(&a1).await.unwrap();
    assert!(w.control.authenticate_session(&c1).await.is_err());
    let a2 = w.control.authenticate_session(&c2).await.unwrap();

    w.control.sign_out_everywhere(&a2).await.unwrap();
    assert!(w.control.authenticate_session(&c2).await.is_err());
    assert!(w.control.authenticate_session(&c3).await.is_err());
    assert!(w.control.authenticate_session(&other).await.is_ok());

    // CSRF: the token of a session, and only of that session.
    let csrf = w.control.csrf_token(&other);
    assert!(w.control.check_csrf(&other, &csrf).is_ok());
    assert_ne!(csrf, w.control.csrf_token(&c3));
    for bad in ["", "x", &w.control.csrf_token(&c3), &csrf[1..]] {
        assert!(matches!(
            w.control.check_csrf(&other, bad),
            Err(ControlError::Unauthenticated { .. })
        ));
    }
}

async fn password_sign_in_needs_the_set_password_and_12_characters(db: TestDb) {
    let w = world(db).await;
    let (actor, _) = signed_in(&w, "pw@example.com").await;
    // No password yet: refused like a wrong one.
    let none = w
        .control
        .sign_in_with_password("pw@example.com", "whatever-password", client(1))
        .await;
    assert!(matches!(none, Err(ControlError::Unauthenticated { .. })));

    assert!(matches!(
        w.control.set_password(&actor, None, "elevenchars").await,
        Err(ControlError::Invalid { .. })
    ));
    w.control
        .set_password(&actor, None, "correct horse battery")
        .await
        .unwrap();
    assert!(w.control.me(&actor).await.unwrap().has_password);

    let (signed, cookie) = w
        .control
        .sign_in_with_password("PW@example.com ", "correct horse battery", client(1))
        .await
        .unwrap();
    assert_eq!(signed.user_id, actor.user_id);
    w.control.authenticate_session(&cookie).await.unwrap();

    let wrong = w
        .control
        .sign_in_with_password("pw@example.com", "correct horse batterY", client(1))
        .await
        .unwrap_err();
    let unknown = w
        .control
        .sign_in_with_password("nobody@example.com", "correct horse battery", client(1))
        .await
        .unwrap_err();
    assert!(matches!(wrong, ControlError::Unauthenticated { .. }));
    assert_eq!(wrong.to_string(), unknown.to_string());
}

async fn failed_sign_ins_are_throttled_per_email_and_per_client(db: TestDb) {
    let w = world(db).await;
    let (actor, _) = signed_in(&w, "target@example.com").await;
    w.control
        .set_password(&actor, None, "the right password")
        .await
        .unwrap();

    // Five failures for one email from one client...
    for _ in 0..5 {
        let e = w
            .control
            .sign_in_with_password("target@example.com", "wrong password!", client(10))
            .await
            .unwrap_err();
        assert!(matches!(e, ControlError::Unauthenticated { .. }), "{e}");
    }
    // ...delay that email from that client, even with the right password...
    let e = w
        .control
        .sign_in_with_password("target@example.com", "the right password", client(10))
        .await
        .unwrap_err();
    let ControlError::Throttled { retry_after, .. } = e else {
        panic!("expected throttling, got {e}");
    };
    assert_eq!(retry_after, 30);
    assert_eq!(e.code().as_str(), "rate_limited");
    // ...but not from another client (no lock of the account).
    w.control
        .sign_in_with_password("target@example.com", "the right password", client(99))
        .await
        .unwrap();

    // Twenty failures from one client across emails delay that client for every email...
    for n in 0..20 {
        let _ = w
            .control
            .sign_in_with_password(&format!("u{n}@example.com"), "wrong password!", client(7))
            .await;
    }
    assert!(matches!(
        w.control
            .sign_in_with_password("target@example.com", "the right password", client(7))
            .await,
        Err(ControlError::Throttled { .. })
    ));
    // ...but its emailed links still work (only bad link tokens count against them).
    let link = w.control.invite_user("target@example.com").await.unwrap();
    w.control
        .sign_in_with_token(&token_of(&link), client(7))
        .await
        .unwrap();

    // After the delay, the right password works from the first client again.
    w.clock.advance(Duration::from_secs(30));
    w.control
        .sign_in_with_password("target@example.com", "the right password", client(10))
        .await
        .unwrap();
}

async fn legal_gating_requires_the_current_release_of_every_document(db: TestDb) {
    let w = world(db).await;
    let (actor, _) = signed_in(&w, "legal@example.com").await;
    // Nothing published: nothing to accept.
    w.control.require_legal(&actor).await.unwrap();
    assert!(w.control.legal_status(&actor).await.unwrap().is_empty());

    assert_eq!(
        w.control
            .publish_legal("terms", "Terms", "# Terms\nBe nice.")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        w.control
            .publish_legal("privacy", "Privacy", "We keep little.")
            .await
            .unwrap(),
        1
    );
    assert!(matches!(
        w.control.publish_legal("cookies", "C", "body").await,
        Err(ControlError::Invalid { .. })
    ));
    let e = w.control.require_legal(&actor).await.unwrap_err();
    assert_eq!(e.code().as_str(), "legal_acceptance_required");

    w.control.accept_legal(&actor, "terms", 1).await.unwrap();
    assert!(w.control.require_legal(&actor).await.is_err());
    w.control.accept_legal(&actor, "privacy", 1).await.unwrap();
    w.control.require_legal(&actor).await.unwrap();

    // A new release must be accepted again; accepting the old one is "changed".
    assert_eq!(
        w.control
            .publish_legal("terms", "Terms v2", "# Terms\nBe nicer.")
            .await
            .unwrap(),
        2
    );
    assert!(matches!(
        w.control.require_legal(&actor).await,
        Err(ControlError::LegalAcceptanceRequired { ref document }) if document == "terms"
    ));
    let e = w
        .control
        .accept_legal(&actor, "terms", 1)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "legal_release_changed");
    for (doc, n) in [
        ("terms", 3),
        ("terms", 0),
        ("acceptable-use", 1),
        ("nope", 1),
    ] {
        let e = w.control.accept_legal(&actor, doc, n).await.unwrap_err();
        assert_eq!(e.code().as_str(), "legal_not_found", "{doc} {n}");
    }
    let status = w.control.legal_status(&actor).await.unwrap();
    let summary: Vec<(&str, i64, bool)> = status
        .iter()
        .map(|s| (s.document.as_str(), s.release, s.accepted))
        .collect();
    assert_eq!(summary, [("terms", 2, false), ("privacy", 1, true)]);

    w.control.accept_legal(&actor, "terms", 2).await.unwrap();
    w.control.require_legal(&actor).await.unwrap();

    let old = w.control.legal_release("terms", 1).await.unwrap();
    assert_eq!(old.body, "# Terms\nBe nice.");
    for (doc, n) in [("terms", 3), ("nope", 1)] {
        let e = w.control.legal_release(doc, n).await.unwrap_err();
        assert_eq!(e.code().as_str(), "legal_not_found");
    }
    // Acceptances are kept as an audit trail.
    assert_eq!(
        w.control
            .store()
            .legal_acceptances(actor.user_id)
            .await
            .unwrap(),
        [
            ("privacy".to_owned(), 1),
            ("terms".to_owned(), 1),
            ("terms".to_owned(), 2)
        ]
    );
}

fn signed(id: &str, at: i64, body: &[u8]) -> EmailWebhookHeaders {
    EmailWebhookHeaders {
        id: id.to_owned(),
        timestamp: at.to_string(),
        signature: sign_email_webhook(WEBHOOK_SECRET, id, at, body).unwrap(),
    }
}

async fn email_webhook_suppresses_bounced_addresses_and_refuses_bad_deliveries(db: TestDb) {
    let w = world(db).await;
    let now = w.clock.now().timestamp();
    let store = w.control.store().clone();
    let bounce = br#"{"type":"email.bounced","data":{"email":"Bounce@Example.com"}}"#;

    let refused = |r: Result<(), ControlError>| {
        let e = r.unwrap_err();
        assert_eq!(e.code().as_str(), "invalid_email_webhook", "{e}");
    };
    // Bad signature (another secret; a tampered body), stale and future timestamps.
    let mut h = signed("msg_1", now, bounce);
    h.signature = sign_email_webhook("whsec_c2VjcmV0", "msg_1", now, bounce).unwrap();
    refused(w.control.receive_email_event(&h, bounce).await);
    let h = signed("msg_1", now, bounce);
    refused(
        w.control
            .receive_email_event(
                &h,
                br#"{"type":"email.bounced","data":{"email":"x@y.com"}}"#,
            )
            .await,
    );
    refused(
        w.control
            .receive_email_event(&signed("msg_1", now - 301, bounce), bounce)
            .await,
    );
    refused(
        w.control
            .receive_email_event(&signed("msg_1", now + 301, bounce), bounce)
            .await,
    );
    let mut h = signed("msg_1", now, bounce);
    h.timestamp = "soon".to_owned();
    refused(w.control.receive_email_event(&h, bounce).await);
    // Malformed payloads, correctly signed.
    for body in [
        &b"not json"[..],
        br#"{"type":"email.bounced"}"#,
        br#"{"type":"email.bounced","data":{"email":"nope"}}"#,
    ] {
        refused(
            w.control
                .receive_email_event(&signed("msg_2", now, body), body)
                .await,
        );
    }
    assert!(
        !store
            .is_email_suppressed("bounce@example.com")
            .await
            .unwrap()
    );

    // A good one, then its replay.
    let h = signed("msg_1", now - 299, bounce);
    w.control.receive_email_event(&h, bounce).await.unwrap();
    assert!(
        store
            .is_email_suppressed("bounce@example.com")
            .await
            .unwrap()
    );
    refused(w.control.receive_email_event(&h, bounce).await);

    // Several signatures (secret rotation): any match suffices. Other event types are ignored.
    let other = br#"{"type":"email.delivered","data":{"email":"fine@example.com"}}"#;
    let mut h = signed("msg_3", now, other);
    h.signature = format!("v1,AAAA {} v2,zzz", h.signature);
    w.control.receive_email_event(&h, other).await.unwrap();
    assert!(!store.is_email_suppressed("fine@example.com").await.unwrap());

    // A suppressed address receives nothing.
    let purpose = MailPurpose::SignInLink {
        client: corral_control::ClientAddress::unknown(),
    };
    w.control
        .send_mail(purpose, "bounce@example.com", "hello", "text")
        .await
        .unwrap();
    w.control
        .send_mail(purpose, "fine@example.com", "hello", "text")
        .await
        .unwrap();
    let sent: Vec<String> = w.outbox.take().into_iter().map(|m| m.to).collect();
    assert_eq!(sent, ["fine@example.com"]);
}

async fn sign_in_links_are_mailed_only_to_known_unsuppressed_addresses(db: TestDb) {
    let w = world(db).await;
    w.control.invite_user("known@example.com").await.unwrap();
    w.control.invite_user("gone@example.com").await.unwrap();
    let body = br#"{"type":"email.complained","data":{"email":"gone@example.com"}}"#;
    let now = w.clock.now().timestamp();
    w.control
        .receive_email_event(&signed("msg_c", now, body), body)
        .await
        .unwrap();

    for email in [
        "known@example.com",
        "unknown@example.com",
        "gone@example.com",
    ] {
        w.control.request_sign_in(email, client(1)).await.unwrap();
    }
    let mails = w.outbox.take();
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert_eq!(mails[0].to, "known@example.com");
    let link = mails[0]
        .text
        .split_whitespace()
        .find(|w| w.starts_with("https://"))
        .unwrap();
    let (actor, _) = w
        .control
        .sign_in_with_token(&token_of(link), client(1))
        .await
        .unwrap();
    assert_eq!(actor.email, "known@example.com");

    // Beyond three links to one address asked for from one client at once (then one every 5
    // minutes), requests are silently not sent.
    for _ in 0..7 {
        w.control
            .request_sign_in("known@example.com", client(2))
            .await
            .unwrap();
    }
    assert_eq!(w.outbox.take().len(), 3);
    w.clock.advance(Duration::from_secs(300));
    w.control
        .request_sign_in("known@example.com", client(2))
        .await
        .unwrap();
    assert_eq!(w.outbox.take().len(), 1);
}

async fn invited_address_gets_a_user_when_its_link_is_used(db: TestDb) {
    use diesel_async::RunQueryDsl as _;
    let w = world(db).await;
    let (owner, _) = signed_in(&w, "owner@example.com").await;
    let me = w.control.me(&owner).await.unwrap();
    // An invitation row as the tenancy use cases write it.
    let now = w.clock.now().timestamp_micros();
    let insert = format!(
        "INSERT INTO invitations (id, account_id, email, role, token_hash, invited_by, \
         created_at, expires_at) VALUES ('inv_01jaaaaaaaaaaaaaaaaaaaaaaa', '{}', \
         'new@example.com', 'member', {}, '{}', {now}, {})",
        me.personal_account_id,
        match w.control.store().database().backend() {
            corral_registry::Backend::Sqlite => "x'00'",
            corral_registry::Backend::Postgres => "'\\x00'::bytea",
        },
        owner.user_id,
        now + 3_600_000_000,
    );
    let mut conn = w.control.store().database().connection().await.unwrap();
    corral_registry::with_conn!(&mut conn, |c| diesel::sql_query(insert.clone())
        .execute(c)
        .await
        .unwrap());
    drop(conn);

    w.control
        .request_sign_in("new@example.com", client(1))
        .await
        .unwrap();
    let mails = w.outbox.take();
    assert_eq!(mails.len(), 1);
    let link = mails[0]
        .text
        .split_whitespace()
        .find(|w| w.starts_with("https://"))
        .unwrap();
    let (actor, _) = w
        .control
        .sign_in_with_token(&token_of(link), client(1))
        .await
        .unwrap();
    let me = w.control.me(&actor).await.unwrap();
    assert_eq!(me.email, "new@example.com");
    assert_eq!(me.accounts.len(), 1);
    assert_eq!(me.accounts[0].account_id, me.personal_account_id);
}

async fn me_lists_the_personal_account_and_audit_records_identity_events(db: TestDb) {
    let w = world(db).await;
    let (actor, _) = signed_in(&w, "me@example.com").await;
    let me = w.control.me(&actor).await.unwrap();
    assert_eq!(me.email, "me@example.com");
    assert!(!me.has_password);
    assert_eq!(me.accounts.len(), 1);
    assert_eq!(me.accounts[0].role, Role::Owner);
    assert_eq!(me.accounts[0].name, "me@example.com");

    w.control
        .set_password(&actor, None, "a long enough password")
        .await
        .unwrap();
    w.control.publish_legal("terms", "T", "body").await.unwrap();
    w.control.accept_legal(&actor, "terms", 1).await.unwrap();
    w.control.sign_out_everywhere(&actor).await.unwrap();
    let mut actions: Vec<String> = w
        .control
        .store()
        .audit_events(me.personal_account_id, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    actions.sort();
    assert_eq!(
        actions,
        [
            "legal.accept",
            "user.create",
            "user.password_change",
            "user.sign_in",
            "user.sign_out_everywhere"
        ]
    );
}

async fn no_token_or_password_is_stored(db: TestDb) {
    let w = world(db).await;
    let link = w.control.invite_user("secret@example.com").await.unwrap();
    let token = token_of(&link);
    let (actor, cookie) = w
        .control
        .sign_in_with_token(&token, client(1))
        .await
        .unwrap();
    let password = "a very secret password";
    w.control
        .set_password(&actor, None, password)
        .await
        .unwrap();
    let unused = token_of(&w.control.invite_user("secret@example.com").await.unwrap());
    let csrf = w.control.csrf_token(&cookie);

    let dump = dump_all_rows(w.control.store().database()).await;
    assert!(
        dump.contains("secret@example.com"),
        "the dump covers our tables"
    );
    for secret in [token.as_str(), &unused, &cookie, &csrf, password] {
        assert!(!dump.contains(secret), "a secret is stored");
        assert!(
            !dump.contains(&hex(secret.as_bytes())),
            "a secret is stored (hex)"
        );
    }
    assert!(
        dump.contains("$argon2id$"),
        "the password is stored as argon2id"
    );
}

async fn concurrent_uses_of_one_sign_in_link_yield_one_session(db: TestDb) {
    let w = world(db).await;
    let token = token_of(&w.control.invite_user("race@example.com").await.unwrap());
    let attempts = (0..6).map(|_| {
        let (control, token) = (w.control.clone(), token.clone());
        tokio::spawn(async move { control.sign_in_with_token(&token, None).await })
    });
    let mut ok = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(_) => ok += 1,
            Err(ControlError::Unauthenticated { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(ok, 1);
}

async fn password_change_signs_out_every_other_session(db: TestDb) {
    let w = world(db).await;
    let (here, here_cookie) = signed_in(&w, "change@example.com").await;
    let (_, elsewhere) = signed_in(&w, "change@example.com").await;
    w.control
        .set_password(&here, None, "a brand new password")
        .await
        .unwrap();
    assert_eq!(
        w.control.authenticate_session(&here_cookie).await.unwrap(),
        here
    );
    assert!(w.control.authenticate_session(&elsewhere).await.is_err());
}

async fn unreachable_store_is_legal_unavailable_for_legal_operations(db: TestDb) {
    // One connection, a short wait: holding it makes the store unreachable.
    let mut config = db.config();
    config.max_connections = 1;
    config.wait_timeout = Duration::from_millis(200);
    let w = world_with(db, config).await;
    let (actor, _) = signed_in(&w, "outage@example.com").await;
    w.control.publish_legal("terms", "T", "body").await.unwrap();

    let held = w.control.store().database().connection().await.unwrap();
    let status = w.control.legal_status(&actor).await.unwrap_err();
    assert_eq!(status.code().as_str(), "legal_unavailable");
    let gate = w.control.require_legal(&actor).await.unwrap_err();
    assert_eq!(gate.code().as_str(), "legal_unavailable");
    let accept = w
        .control
        .accept_legal(&actor, "terms", 1)
        .await
        .unwrap_err();
    assert_eq!(accept.code().as_str(), "legal_unavailable");
    // Other operations answer the store's own code.
    let me = w.control.me(&actor).await.unwrap_err();
    assert_eq!(me.code().as_str(), "sandbox_registry_unavailable");
    drop(held);
    w.control.accept_legal(&actor, "terms", 1).await.unwrap();
}

/// A loopback SMTP server that accepts one mail and hands back its DATA.
async fn one_mail_smtp_server() -> (u16, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read).lines();
        write.write_all(b"220 test ESMTP\r\n").await.unwrap();
        let mut data = String::new();
        let mut in_data = false;
        while let Some(line) = lines.next_line().await.unwrap() {
            if in_data {
                if line == "." {
                    in_data = false;
                    write.write_all(b"250 queued\r\n").await.unwrap();
                } else {
                    data.push_str(&line);
                    data.push('\n');
                }
                continue;
            }
            let verb = line
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_uppercase();
            let reply: &[u8] = match verb.as_str() {
                "EHLO" | "HELO" => b"250 test\r\n",
                "DATA" => {
                    in_data = true;
                    b"354 go ahead\r\n"
                }
                "QUIT" => {
                    write.write_all(b"221 bye\r\n").await.unwrap();
                    break;
                }
                _ => b"250 ok\r\n",
            };
            write.write_all(reply).await.unwrap();
        }
        data
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_mailer_delivers_plain_text_over_plain_smtp() {
    let (port, server) = one_mail_smtp_server().await;
    let mailer = SmtpMailer::new(&SmtpConfig {
        host: "127.0.0.1".to_owned(),
        port,
        security: SmtpSecurity::Plain,
        username: None,
        password: None,
        from: "Corral <corral@example.com>".to_owned(),
        timeout: Duration::from_secs(5),
    })
    .unwrap();
    mailer
        .send(&Mail {
            to: "ada@example.com".to_owned(),
            subject: "Your Corral sign-in link".to_owned(),
            text: "Sign in: https://corral.example.com/console/sign-in/verify?token=abc".to_owned(),
        })
        .await
        .unwrap();
    let data = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
    assert!(data.contains("Subject: Your Corral sign-in link"), "{data}");
    assert!(data.contains("To: ada@example.com"), "{data}");
    assert!(data.contains("verify?token=abc"), "{data}");

    // Nobody listening: a clean error, not a hang or a panic.
    let closed = SmtpMailer::new(&SmtpConfig {
        host: "127.0.0.1".to_owned(),
        port,
        security: SmtpSecurity::Plain,
        username: None,
        password: None,
        from: "corral@example.com".to_owned(),
        timeout: Duration::from_secs(2),
    })
    .unwrap();
    let mail = Mail {
        to: "ada@example.com".to_owned(),
        subject: "s".to_owned(),
        text: "t".to_owned(),
    };
    assert!(closed.send(&mail).await.is_err());
}
