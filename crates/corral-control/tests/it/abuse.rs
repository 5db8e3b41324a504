//! The control plane under hostile load (issue 22): sign-in bursts against the throttle and
//! the hashing pool, targeted lockouts, mail floods, and request and creation rates. Bursts
//! are bounded and seeded; each asserts how many argon2 verifications ran and how far the
//! process's memory moved.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use corral_control::{
    Actor, Control, ControlConfig, ControlError, CreateInvitation, CreateOrganization,
    HashingConfig, INVITATION_SUBJECT, Mail, MailError, Mailer, ProjectName, RenameAccount,
};
use corral_control_store::{AccountId, ControlStore, Role};
use corral_errors::ErrorCode;
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_registry::testing::TestDb;
use corral_registry::{Clock, ManualClock, MasterKey, Registry};
use corral_service::{Service, ServiceConfig};

use crate::both_backends;

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
    world_with(db, ControlConfig::default()).await
}

async fn world_with(db: TestDb, config: ControlConfig) -> World {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c: Arc<dyn Clock> = clock.clone();
    let database = db.connect_with(db.config(), c).await;
    let registry = Registry::new(database.clone(), MasterKey::generate().unwrap());
    let idempotency = IdempotencyStore::new(database.clone(), IdempotencyConfig::default());
    let service = Service::new(
        BTreeMap::new(),
        registry.clone(),
        idempotency,
        ServiceConfig::default(),
    );
    let config = ControlConfig {
        public_url: "https://corral.example.com".to_owned(),
        ..config
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

both_backends!(
    a_burst_of_wrong_passwords_for_one_email_from_one_address_costs_five_verifications,
    password_hashing_runs_on_its_own_bounded_pool_and_memory_comes_back,
    password_changes_share_the_pool_and_the_bound,
    wrong_passwords_from_one_address_never_lock_the_real_user_out_elsewhere,
    guesses_from_many_addresses_slow_the_account_but_not_its_known_addresses_nor_links,
    link_requests_by_others_never_leave_the_owner_without_a_working_link,
    invitations_are_limited_per_organization_inviter_and_recipient_and_leave_nothing_when_refused,
    nothing_the_sender_chose_reaches_a_subject_and_names_are_neutralised_in_bodies,
    a_password_change_needs_the_current_password_or_a_fresh_sign_in,
    requests_and_creations_are_rate_limited_per_user,
);

/// A small seeded generator (xorshift64*): the bursts' order and waits are the same on every
/// run of a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A field of `/proc/self/status` in KiB (each nextest test is a process of its own).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn client(n: u32) -> Option<IpAddr> {
    let [_, a, b, c] = n.to_be_bytes();
    Some(IpAddr::from([10, a, b, c]))
}

fn token_of(link: &str) -> String {
    link.split_once("?token=").expect("a link").1.to_owned()
}

/// The link in the newest mail to `to`.
fn newest_link(mails: &[Mail], to: &str) -> Option<String> {
    mails.iter().rev().find(|m| m.to == to).map(|m| {
        m.text
            .split_whitespace()
            .find(|w| w.starts_with("https://"))
            .unwrap()
            .to_owned()
    })
}

/// A user with a password, signed in (by link) once from `client(1)`.
async fn user_with_password(w: &World, email: &str, password: &str) -> Actor {
    let link = w.control.invite_user(email).await.unwrap();
    let (actor, _) = w
        .control
        .sign_in_with_token(&token_of(&link), client(1))
        .await
        .unwrap();
    w.control
        .set_password(&actor, None, password)
        .await
        .unwrap();
    actor
}

#[track_caller]
fn retry_after(r: Result<impl std::fmt::Debug, ControlError>) -> u64 {
    match r {
        Err(ControlError::Throttled { retry_after, .. }) => retry_after,
        other => panic!("expected rate_limited, got {other:?}"),
    }
}

const MIB: u64 = 1024;

/// Finding 1: the check and the recording of a failure were separate steps around an awaited
/// verification, so a burst of N concurrent wrong passwords ran N argon2 verifications (19 MiB
/// each, on the blocking pool SQLite shares). Now each attempt reserves its place before
/// verifying: 200 concurrent attempts for one email from one address run exactly 5.
async fn a_burst_of_wrong_passwords_for_one_email_from_one_address_costs_five_verifications(
    db: TestDb,
) {
    let w = world(db).await;
    user_with_password(&w, "victim@example.com", "the right password").await;
    let before = w.control.hashing_stats();
    let hwm_before = status_kib("VmHWM");
    let mut rng = Rng(0x5eed_0001);
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let control = w.control.clone();
            let yields = rng.next() % 8;
            tokio::spawn(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                control
                    .sign_in_with_password(
                        "victim@example.com",
                        &format!("guess {n:04}"),
                        client(7),
                    )
                    .await
            })
        })
        .collect();
    let mut codes = BTreeMap::new();
    for t in tasks {
        let code = t.await.unwrap().unwrap_err().code();
        *codes.entry(code.as_str()).or_insert(0) += 1;
    }
    let after = w.control.hashing_stats();
    assert_eq!(
        codes,
        BTreeMap::from([("authentication_error", 5), ("rate_limited", 195)])
    );
    assert_eq!(after.verifications - before.verifications, 5, "{after:?}");
    assert!(after.peak_running <= 2, "{after:?}");
    let grew = status_kib("VmHWM").saturating_sub(hwm_before);
    assert!(grew < 64 * MIB, "peak memory grew by {grew} KiB");
}

/// Finding 1: verifications run on a pool of their own (2 threads by default), never on the
/// blocking pool; a request waits at most the queue wait for a thread, then `rate_limited`;
/// a refused request is no failure of the user's (it is refunded to the throttle); and the
/// memory taken returns once the burst is over.
async fn password_hashing_runs_on_its_own_bounded_pool_and_memory_comes_back(db: TestDb) {
    let w = world_with(
        db,
        ControlConfig {
            hashing: HashingConfig {
                threads: 2,
                queue_wait: Duration::from_millis(150),
                max_waiting: 16,
            },
            ..ControlConfig::default()
        },
    )
    .await;
    user_with_password(&w, "many@example.com", "the right password").await;
    // Warm up: the decoy hash and one verification of each kind.
    let _ = w
        .control
        .sign_in_with_password("nobody@example.com", "whatever it is", client(2))
        .await;
    let before = w.control.hashing_stats();
    let rss_before = status_kib("VmRSS");
    let hwm_before = status_kib("VmHWM");
    // 120 attempts for 120 emails from 120 addresses: the throttle allows every one, so only
    // the pool bounds them.
    let mut rng = Rng(0x5eed_0002);
    let tasks: Vec<_> = (0..120)
        .map(|n| {
            let control = w.control.clone();
            let yields = rng.next() % 4;
            tokio::spawn(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                control
                    .sign_in_with_password(
                        &format!("u{n}@example.com"),
                        "wrong password",
                        client(100 + n),
                    )
                    .await
            })
        })
        .collect();
    let (mut refused, mut wrong) = (Vec::new(), 0);
    for (n, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Err(ControlError::Throttled { retry_after, .. }) => {
                assert_eq!(retry_after, 1);
                refused.push(n as u32);
            }
            Err(ControlError::Unauthenticated { .. }) => wrong += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    let after = w.control.hashing_stats();
    assert_eq!(after.verifications - before.verifications, wrong);
    assert_eq!(after.refused - before.refused, refused.len() as u64);
    assert!(
        !refused.is_empty() && wrong > 0,
        "refused {refused:?}, verified {wrong}"
    );
    assert!(after.peak_running <= 2, "{after:?}");
    let peak = status_kib("VmHWM").saturating_sub(hwm_before);
    assert!(peak < 64 * MIB, "peak memory grew by {peak} KiB");
    let left = status_kib("VmRSS").saturating_sub(rss_before);
    assert!(
        left < 16 * MIB,
        "memory still held after the burst: {left} KiB"
    );
    // A refusal is no failure: it was given back to the throttle, so that email and address
    // still have all five free attempts.
    let n = refused[0];
    for _ in 0..5 {
        let r = w
            .control
            .sign_in_with_password(
                &format!("u{n}@example.com"),
                "wrong password",
                client(100 + n),
            )
            .await;
        assert!(
            matches!(r, Err(ControlError::Unauthenticated { .. })),
            "{r:?}"
        );
    }
}

/// Finding 1, for password changes: hashing a new password (and verifying the current one)
/// goes through the same pool and the same bound.
async fn password_changes_share_the_pool_and_the_bound(db: TestDb) {
    let w = world_with(
        db,
        ControlConfig {
            hashing: HashingConfig {
                threads: 1,
                queue_wait: Duration::from_millis(100),
                max_waiting: 4,
            },
            ..ControlConfig::default()
        },
    )
    .await;
    let mut actors = Vec::new();
    for n in 0..24 {
        let link = w
            .control
            .invite_user(&format!("c{n}@example.com"))
            .await
            .unwrap();
        let (actor, _) = w
            .control
            .sign_in_with_token(&token_of(&link), client(n))
            .await
            .unwrap();
        actors.push(actor);
    }
    let before = w.control.hashing_stats();
    let tasks: Vec<_> = actors
        .into_iter()
        .map(|actor| {
            let control = w.control.clone();
            tokio::spawn(async move {
                control
                    .set_password(&actor, None, "a long new password")
                    .await
            })
        })
        .collect();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => {}
            Err(ControlError::Throttled { .. }) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let after = w.control.hashing_stats();
    assert!(refused > 0, "a full pool refuses password changes too");
    assert_eq!(after.hashes - before.hashes, 24 - refused);
    assert_eq!(after.peak_running, 1);
}

/// Finding 2: five wrong passwords for a known email from one address locked the real user
/// out from every address for 15 minutes. Now they delay only that (account, address) pair,
/// progressively (30 s, then 60 s, …), and the real user signs in from elsewhere at once.
async fn wrong_passwords_from_one_address_never_lock_the_real_user_out_elsewhere(db: TestDb) {
    let w = world(db).await;
    user_with_password(&w, "victim@example.com", "the right password").await;
    let attacker = client(666);
    for _ in 0..5 {
        let r = w
            .control
            .sign_in_with_password("victim@example.com", "a guess at it", attacker)
            .await;
        assert!(
            matches!(r, Err(ControlError::Unauthenticated { .. })),
            "{r:?}"
        );
    }
    // The attacker waits 30 s, then 60 s, then 120 s between guesses...
    let mut waits = Vec::new();
    for _ in 0..3 {
        let wait = retry_after(
            w.control
                .sign_in_with_password("victim@example.com", "a guess at it", attacker)
                .await,
        );
        waits.push(wait);
        w.clock.advance(Duration::from_secs(wait));
        let r = w
            .control
            .sign_in_with_password("victim@example.com", "a guess at it", attacker)
            .await;
        assert!(
            matches!(r, Err(ControlError::Unauthenticated { .. })),
            "{r:?}"
        );
    }
    assert_eq!(waits, [30, 60, 120]);
    // ...while the real user, from a new address, is never held up.
    w.control
        .sign_in_with_password("victim@example.com", "the right password", client(2))
        .await
        .unwrap();
    // Nor from the attacker's address by link.
    let link = w.control.invite_user("victim@example.com").await.unwrap();
    w.control
        .sign_in_with_token(&token_of(&link), attacker)
        .await
        .unwrap();
}

/// Finding 2, distributed: guesses from many addresses (four each, under every per-address
/// rule) slow the account down for addresses it has not signed in from, by a delay that
/// doubles up to 2 minutes — never a lock; an address the user signed in from within 30 days
/// is not slowed, and an emailed link always works.
async fn guesses_from_many_addresses_slow_the_account_but_not_its_known_addresses_nor_links(
    db: TestDb,
) {
    let w = world(db).await;
    user_with_password(&w, "victim@example.com", "the right password").await;
    let home = client(1);
    w.control
        .sign_in_with_password("victim@example.com", "the right password", home)
        .await
        .unwrap();
    let mut wrong = 0;
    let mut delayed = 0;
    for n in 0..40 {
        match w
            .control
            .sign_in_with_password("victim@example.com", "a guess at it", client(1000 + n))
            .await
        {
            Err(ControlError::Unauthenticated { .. }) => wrong += 1,
            Err(ControlError::Throttled { retry_after, .. }) => {
                assert!(retry_after <= 120, "{retry_after}");
                delayed += 1;
                w.clock.advance(Duration::from_secs(retry_after));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        wrong >= 10 && delayed > 0,
        "wrong {wrong}, delayed {delayed}"
    );
    // From home: at once.
    w.control
        .sign_in_with_password("victim@example.com", "the right password", home)
        .await
        .unwrap();
    // From a new address: at most 2 minutes, then in.
    let new = client(2);
    match w
        .control
        .sign_in_with_password("victim@example.com", "the right password", new)
        .await
    {
        Ok(_) => {}
        Err(ControlError::Throttled { retry_after, .. }) => {
            assert!(retry_after <= 120);
            w.clock.advance(Duration::from_secs(retry_after));
            w.control
                .sign_in_with_password("victim@example.com", "the right password", new)
                .await
                .unwrap();
        }
        Err(e) => panic!("unexpected {e}"),
    }
    // By link, from anywhere, at once.
    w.outbox.take();
    w.control
        .request_sign_in("victim@example.com", client(3))
        .await
        .unwrap();
    let link = newest_link(&w.outbox.take(), "victim@example.com").expect("a link was mailed");
    w.control
        .sign_in_with_token(&token_of(&link), client(3))
        .await
        .unwrap();
}

/// Finding 2, links: five requests for someone's email stopped their links for 15 minutes.
/// Now links are limited per (recipient, requesting address) — a stranger asking from their
/// address never holds up the owner's requests — and per recipient with a refill (5
/// minutes) shorter than a link's lifetime (15), so whatever strangers request, from however
/// many addresses, the owner's newest mail holds a link that works.
async fn link_requests_by_others_never_leave_the_owner_without_a_working_link(db: TestDb) {
    let w = world(db).await;
    w.control.invite_user("owner@example.com").await.unwrap();
    // One stranger, one address, fifty requests: three links mailed, the rest not.
    for _ in 0..50 {
        w.control
            .request_sign_in("owner@example.com", client(666))
            .await
            .unwrap();
    }
    let flood = w.outbox.take().len();
    // The owner asks from home: mailed at once, and it works.
    w.control
        .request_sign_in("owner@example.com", client(1))
        .await
        .unwrap();
    let link = newest_link(&w.outbox.take(), "owner@example.com")
        .expect("the owner's request is mailed at once");
    assert_eq!(flood, 3, "the stranger's requests mailed at most three");
    w.control
        .sign_in_with_token(&token_of(&link), client(1))
        .await
        .unwrap();

    // Two hours of strangers asking every 20 s from fifty rotating addresses; the owner asks
    // now and then (at least 6 minutes apart) and uses the newest link a minute later.
    let mut rng = Rng(0x5eed_0003);
    let mut mailbox: Vec<Mail> = Vec::new();
    let mut uses = 0;
    let mut last_use = w.clock.now();
    for tick in 0..360u32 {
        w.control
            .request_sign_in("owner@example.com", client(5000 + tick % 50))
            .await
            .unwrap();
        mailbox.extend(w.outbox.take());
        let now = w.clock.now();
        if now - last_use >= chrono::TimeDelta::minutes(6) && rng.next().is_multiple_of(6) {
            w.control
                .request_sign_in("owner@example.com", client(1))
                .await
                .unwrap();
            mailbox.extend(w.outbox.take());
            w.clock.advance(Duration::from_secs(60));
            let link = newest_link(&mailbox, "owner@example.com").expect("a link");
            let r = w
                .control
                .sign_in_with_token(&token_of(&link), client(1))
                .await;
            assert!(
                r.is_ok(),
                "tick {tick}: the owner's newest link failed: {r:?}"
            );
            last_use = w.clock.now();
            uses += 1;
        }
        w.clock.advance(Duration::from_secs(20));
    }
    assert!(uses >= 5, "{uses}");
    // The flood was bounded: 10 at once, then one per 5 minutes (about 24 in two hours).
    assert!(mailbox.len() <= 10 + 2 * 12 + 2, "{} mails", mailbox.len());
}

async fn organization(w: &World, owner: &Actor, name: &str) -> AccountId {
    w.control
        .create_organization(owner, CreateOrganization { name: name.into() })
        .await
        .unwrap()
        .id
        .parse()
        .unwrap()
}

fn invitation(email: String) -> CreateInvitation {
    CreateInvitation {
        email,
        role: Role::Member,
    }
}

/// Finding 5: one admin sent 55 invitations in a second to outside addresses. Now an
/// organization sends 10 at once then 20 an hour, an inviter 20 at once (across their
/// organizations), an address receives 3 at once; a refused invitation is neither stored nor
/// mailed.
async fn invitations_are_limited_per_organization_inviter_and_recipient_and_leave_nothing_when_refused(
    db: TestDb,
) {
    let w = world(db).await;
    let owner = user_with_password(&w, "spammer@example.com", "the right password").await;
    let acc = organization(&w, &owner, "Spam").await;
    let tasks: Vec<_> = (0..55)
        .map(|n| {
            let (control, owner) = (w.control.clone(), owner.clone());
            tokio::spawn(async move {
                control
                    .invite(
                        &owner,
                        acc,
                        invitation(format!("target{n}@elsewhere.example")),
                    )
                    .await
            })
        })
        .collect();
    let (mut sent, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => sent += 1,
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::RateLimited, "{e}");
                assert!(
                    e.retry_after_seconds()
                        .is_some_and(|s| (1..=180).contains(&s))
                );
                refused += 1;
            }
        }
    }
    assert_eq!((sent, refused), (10, 45));
    assert_eq!(w.outbox.take().len(), 10);
    assert_eq!(
        w.control.list_invitations(&owner, acc).await.unwrap().len(),
        10
    );
    // Three minutes later, one more.
    w.clock.advance(Duration::from_secs(180));
    w.control
        .invite(&owner, acc, invitation("late@elsewhere.example".into()))
        .await
        .unwrap();
    assert!(
        w.control
            .invite(&owner, acc, invitation("later@elsewhere.example".into()))
            .await
            .is_err()
    );
    // Another organization of the same inviter: the inviter's own 20 are nearly spent.
    let other = organization(&w, &owner, "Spam 2").await;
    let mut more = 0;
    while w
        .control
        .invite(
            &owner,
            other,
            invitation(format!("x{more}@elsewhere.example")),
        )
        .await
        .is_ok()
    {
        more += 1;
    }
    assert_eq!(
        more, 10,
        "20 per inviter, 11 spent, one refilled in the 3 minutes"
    );
    // One address, invited by four different organizations: the fourth waits.
    w.outbox.take();
    let mut codes = Vec::new();
    for n in 0..4 {
        let admin =
            user_with_password(&w, &format!("admin{n}@example.com"), "the right password").await;
        let acc = organization(&w, &admin, &format!("Org {n}")).await;
        codes.push(
            w.control
                .invite(&admin, acc, invitation("popular@example.com".into()))
                .await
                .map(|_| ())
                .map_err(|e| e.code()),
        );
    }
    assert_eq!(codes, [Ok(()), Ok(()), Ok(()), Err(ErrorCode::RateLimited)]);
    assert_eq!(w.outbox.take().len(), 3);
}

/// Finding 5: the subject carried the organization's name, chosen by the sender. Now the
/// subject is fixed, and the body quotes the name cut to 60 characters, without invisible
/// format characters, with `.`, `:`, `/` and `@` bracketed so that no mail client links it.
async fn nothing_the_sender_chose_reaches_a_subject_and_names_are_neutralised_in_bodies(
    db: TestDb,
) {
    let w = world(db).await;
    let owner = user_with_password(&w, "owner@example.com", "the right password").await;
    let name = "WIN \u{202e}$1000 now: visit http://evil.example/claim or mail me@evil.example \
                before it is too late";
    let acc = organization(&w, &owner, name).await;
    w.control
        .invite(&owner, acc, invitation("mark@example.com".into()))
        .await
        .unwrap();
    let mails = w.outbox.take();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].subject, INVITATION_SUBJECT);
    let body = &mails[0].text;
    for bad in ["http://", "evil.example", "me@evil", "\u{202e}", "too late"] {
        assert!(!body.contains(bad), "the body carries {bad:?}: {body}");
    }
    assert!(
        body.contains("http[:][/][/]evil[.]example[/]claim"),
        "{body}"
    );
    assert!(body.contains('…'), "the name is cut: {body}");
    // Renaming cannot smuggle it in either.
    let view = w
        .control
        .rename_account(
            &owner,
            acc,
            RenameAccount {
                name: "Join now at corral-prizes.example".into(),
                version: 1,
            },
        )
        .await
        .unwrap();
    assert_eq!(view.version, 2);
    w.control
        .invite(&owner, acc, invitation("second@example.com".into()))
        .await
        .unwrap();
    let mail = w.outbox.take().remove(0);
    assert_eq!(mail.subject, INVITATION_SUBJECT);
    assert!(
        mail.text.contains("corral-prizes[.]example"),
        "{}",
        mail.text
    );
}

/// Finding 7: a password change did not ask for the current password, so a stolen session
/// could take the account for good. Now it needs the current password, or a session signed
/// in within 10 minutes (a first password, or a forgotten one after an emailed link); wrong
/// current passwords are throttled per user.
async fn a_password_change_needs_the_current_password_or_a_fresh_sign_in(db: TestDb) {
    let w = world(db).await;
    let actor = user_with_password(&w, "pw@example.com", "the first password").await;
    // Eleven minutes later, the same session (say, a stolen one).
    w.clock.advance(Duration::from_secs(11 * 60));
    let needs = |r: Result<(), ControlError>| match r {
        Err(ControlError::Invalid { message }) => message,
        other => panic!("expected invalid_request, got {other:?}"),
    };
    let m = needs(
        w.control
            .set_password(&actor, None, "taken over for good")
            .await,
    );
    assert!(m.contains("currentPassword"), "{m}");
    let m = needs(
        w.control
            .set_password(&actor, Some("not the password"), "taken over for good")
            .await,
    );
    assert_eq!(m, "the current password is wrong");
    // Guessing the current password through a session is throttled like sign-in.
    for _ in 0..4 {
        let _ = w
            .control
            .set_password(&actor, Some("not the password"), "taken over for good")
            .await;
    }
    assert_eq!(
        retry_after(
            w.control
                .set_password(&actor, Some("the first password"), "a second password")
                .await
        ),
        30
    );
    w.clock.advance(Duration::from_secs(30));
    w.control
        .set_password(&actor, Some("the first password"), "a second password")
        .await
        .unwrap();
    w.control
        .sign_in_with_password("pw@example.com", "a second password", client(1))
        .await
        .unwrap();
    // Forgotten: an emailed link, then a new password without the old one.
    let link = w.control.invite_user("pw@example.com").await.unwrap();
    let (fresh, _) = w
        .control
        .sign_in_with_token(&token_of(&link), client(1))
        .await
        .unwrap();
    w.control
        .set_password(&fresh, None, "a third password!")
        .await
        .unwrap();
    w.control
        .sign_in_with_password("pw@example.com", "a third password!", client(1))
        .await
        .unwrap();
}

/// Finding 7: the control plane had no request rates (hundreds of organizations and projects
/// a second). Now each user has a request bucket (20/s, bursts of 100) checked on every
/// session, and a creation bucket (20 at once, then one every 10 s) for organizations,
/// projects and API keys; other users are not affected.
async fn requests_and_creations_are_rate_limited_per_user(db: TestDb) {
    let w = world(db).await;
    let link = w.control.invite_user("busy@example.com").await.unwrap();
    let (busy, cookie) = w
        .control
        .sign_in_with_token(&token_of(&link), client(1))
        .await
        .unwrap();
    w.control
        .publish_legal("terms", "Terms", "Be nice.")
        .await
        .unwrap();
    w.control.accept_legal(&busy, "terms", 1).await.unwrap();
    let link = w.control.invite_user("calm@example.com").await.unwrap();
    let (calm, calm_cookie) = w
        .control
        .sign_in_with_token(&token_of(&link), client(2))
        .await
        .unwrap();
    w.control.accept_legal(&calm, "terms", 1).await.unwrap();

    for _ in 0..100 {
        w.control.authenticate_session(&cookie).await.unwrap();
    }
    let wait = retry_after(w.control.authenticate_session(&cookie).await);
    assert_eq!(wait, 1);
    w.control.authenticate_session(&calm_cookie).await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    w.control.authenticate_session(&cookie).await.unwrap();

    // Creations: 20 organizations and projects together, then one every 10 s.
    let tasks: Vec<_> = (0..60)
        .map(|n| {
            let (control, busy) = (w.control.clone(), busy.clone());
            tokio::spawn(async move {
                control
                    .create_organization(
                        &busy,
                        CreateOrganization {
                            name: format!("Org {n}"),
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut made = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(view) => made.push(view.id.parse::<AccountId>().unwrap()),
            Err(e) => assert_eq!(e.code(), ErrorCode::RateLimited, "{e}"),
        }
    }
    assert_eq!(made.len(), 20);
    let wait = retry_after(
        w.control
            .create_project(&busy, made[0], ProjectName { name: "p".into() })
            .await,
    );
    assert_eq!(wait, 10);
    w.clock.advance(Duration::from_secs(10));
    w.control
        .create_project(&busy, made[0], ProjectName { name: "p".into() })
        .await
        .unwrap();
    // Someone else creates as usual.
    w.control
        .create_organization(
            &calm,
            CreateOrganization {
                name: "Calm".into(),
            },
        )
        .await
        .unwrap();
}
