//! Users and sign-in: by emailed link (single use, [`ControlConfig::sign_in_token_ttl`]) or by
//! password (argon2id), with failed attempts throttled per email and per client address.
//!
//! Who may get a sign-in link: a known user, or an address with a pending invitation — the
//! latter's user (and personal account) is created when the link is used, after which it
//! accepts the invitation like anyone else. Everyone else gets nothing, and the caller is not
//! told which case applied.
//!
//! [`ControlConfig::sign_in_token_ttl`]: crate::ControlConfig::sign_in_token_ttl

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock, PoisonError};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use corral_control_store::{AccountId, NewAuditEvent, User, UserAccountRole, UserId};
use corral_domain::Timestamp;

use crate::error::{ControlError, Result};
use crate::session::{delta, random_token, token_hash};
use crate::{Actor, Control};

/// Failed sign-ins allowed per email and per client address within [`THROTTLE_WINDOW`].
pub(crate) const MAX_FAILURES: usize = 5;
/// The throttling window.
pub(crate) const THROTTLE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(15);
/// Beyond this many tracked keys, keys with no failure in the window are dropped.
const THROTTLE_PRUNE_AT: usize = 10_000;
/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password accepted (hashing cost grows with length).
const MAX_PASSWORD_BYTES: usize = 1024;

/// The signed-in user's profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// The user.
    pub user_id: UserId,
    /// Their email.
    pub email: String,
    /// Whether they set a password (else they sign in by email link only).
    pub has_password: bool,
    /// Their personal account.
    pub personal_account_id: AccountId,
    /// Every account they belong to, with their role, by name.
    pub accounts: Vec<UserAccountRole>,
    /// When the user was created.
    pub created_at: Timestamp,
}

/// Trims and lower-cases an email address and checks that it looks like one (one `@`, a
/// non-empty local part, a dotted domain, no spaces, control or quoting characters).
pub fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let bad = || ControlError::invalid("that is not an email address");
    if email.len() > 254 {
        return Err(bad());
    }
    let (local, domain) = email.split_once('@').ok_or_else(bad)?;
    let forbidden = |c: char| c.is_whitespace() || c.is_control() || "<>()[]\\,;:\"@".contains(c);
    if local.is_empty()
        || local.len() > 64
        || local.chars().any(forbidden)
        || domain.chars().any(forbidden)
        || !domain.contains('.')
        || domain.starts_with(['.', '-'])
        || domain.ends_with(['.', '-'])
        || domain.contains("..")
    {
        return Err(bad());
    }
    Ok(email)
}

/// Failed attempts by key (`email:…`, `client:…`), in memory: a restart forgets them, which
/// costs an attacker nothing they could not get by waiting, and keeps the database out of the
/// hot path of an attack.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    failures: Mutex<HashMap<String, Vec<Timestamp>>>,
}

impl Throttle {
    /// `rate_limited` if any key has [`MAX_FAILURES`] failures in the window.
    pub(crate) fn check(&self, keys: &[String], now: Timestamp) -> Result<()> {
        let map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let mut wait = chrono::TimeDelta::zero();
        for key in keys {
            let Some(times) = map.get(key) else { continue };
            let recent: Vec<&Timestamp> = times
                .iter()
                .filter(|t| **t + THROTTLE_WINDOW > now)
                .collect();
            if recent.len() >= MAX_FAILURES {
                // Free again when enough of the recent failures leave the window.
                let nth = recent.len() - MAX_FAILURES;
                if let Some(t) = recent.get(nth) {
                    wait = wait.max(**t + THROTTLE_WINDOW - now);
                }
            }
        }
        if wait > chrono::TimeDelta::zero() {
            // Whole seconds, rounded up: retrying after `retry_after` must succeed.
            let secs = u64::try_from((wait.num_milliseconds() + 999) / 1000).unwrap_or(1);
            return Err(ControlError::Throttled { retry_after: secs });
        }
        Ok(())
    }

    /// Records a failure under every key.
    pub(crate) fn fail(&self, keys: &[String], now: Timestamp) {
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= THROTTLE_PRUNE_AT {
            map.retain(|_, times| times.iter().any(|t| *t + THROTTLE_WINDOW > now));
        }
        for key in keys {
            let times = map.entry(key.clone()).or_default();
            times.retain(|t| *t + THROTTLE_WINDOW > now);
            times.push(now);
        }
    }

    /// Forgets the failures under `key` (after a successful sign-in for that email).
    pub(crate) fn clear(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

fn throttle_keys(email: Option<&str>, client: Option<IpAddr>) -> Vec<String> {
    let mut keys = Vec::with_capacity(2);
    if let Some(email) = email {
        keys.push(format!("email:{email}"));
    }
    if let Some(client) = client {
        keys.push(format!("client:{client}"));
    }
    keys
}

fn bad_link() -> ControlError {
    ControlError::unauthenticated("this sign-in link is invalid, already used or expired")
}

fn bad_password() -> ControlError {
    ControlError::unauthenticated("wrong email or password")
}

/// An argon2id PHC string of `password` with a fresh random salt (default parameters:
/// 19 MiB, 2 passes, 1 lane — OWASP's recommendation).
fn hash_password(password: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| {
        ControlError::internal(format!("the operating system's random source failed: {e}"))
    })?;
    let salt = SaltString::encode_b64(&salt)
        .map_err(|e| ControlError::internal(format!("password salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| ControlError::internal(format!("password hashing failed: {e}")))
}

/// Whether `password` matches the PHC string `phc` (false for a malformed one).
fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash to verify against when the user is unknown or has no password, so that case takes
/// as long as a wrong password (no user enumeration by timing).
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("corral decoy password").unwrap_or_default())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ControlError::internal(format!("password hashing task failed: {e}")))
}

impl Control {
    /// The link `<public_url>/console/sign-in/verify?token=…` for a fresh sign-in token of
    /// `email` (stored as a hash).
    async fn sign_in_link(&self, email: &str) -> Result<String> {
        let token = random_token()?;
        let expires = self.store().now() + delta(self.config().sign_in_token_ttl);
        self.store()
            .insert_sign_in_token(&token_hash(&token), email, expires)
            .await?;
        Ok(format!(
            "{}/console/sign-in/verify?token={token}",
            self.config().public_url.trim_end_matches('/')
        ))
    }

    /// The operator's bootstrap (`corral user invite`): creates the user and their personal
    /// account if missing and returns a sign-in link for them.
    pub async fn invite_user(&self, email: &str) -> Result<String> {
        let email = normalize_email(email)?;
        let (user, created) = self.store().ensure_user(&email).await?;
        if created {
            self.store()
                .record_audit(NewAuditEvent {
                    account_id: Some(user.personal_account_id),
                    actor: None,
                    action: "user.create".to_owned(),
                    target: user.id.to_string(),
                    detail: serde_json::json!({ "by": "cli" }),
                })
                .await?;
        }
        self.sign_in_link(&email).await
    }

    /// Mails a sign-in link to `email` if it belongs to a user or has a pending invitation
    /// (and is not suppressed). Always `Ok` for a well-formed address, so the answer says
    /// nothing about who has an account; beyond 5 links per email or client address in 15
    /// minutes, none is sent.
    pub async fn request_sign_in(&self, email: &str, client: Option<IpAddr>) -> Result<()> {
        let email = normalize_email(email)?;
        let now = self.store().now();
        let keys: Vec<String> = throttle_keys(Some(&email), client)
            .into_iter()
            .map(|k| format!("link:{k}"))
            .collect();
        if self.throttle().check(&keys, now).is_err() {
            tracing::info!("sign-in link not sent: too many requests for this email or client");
            return Ok(());
        }
        self.throttle().fail(&keys, now);
        let known = self.store().user_by_email(&email).await?.is_some()
            || self.store().email_has_pending_invitation(&email).await?;
        if !known {
            return Ok(());
        }
        let link = self.sign_in_link(&email).await?;
        let text = format!(
            "Sign in to Corral with this link (it works once, for {} minutes):\n\n{link}\n\n\
             If you did not ask for it, ignore this mail.\n",
            self.config().sign_in_token_ttl.as_secs() / 60
        );
        // A failure to mail must look like success (it only happens for known addresses).
        if let Err(e) = self
            .send_mail(&email, "Your Corral sign-in link", &text)
            .await
        {
            tracing::warn!(error = %e, "sign-in link not mailed");
        }
        Ok(())
    }

    /// Signs in with the token of a sign-in link (single use): returns the actor and the
    /// session cookie's token. A bad, used or expired token is `authentication_error`; so is
    /// one whose invitation was revoked before the user existed.
    pub async fn sign_in_with_token(
        &self,
        token: &str,
        client: Option<IpAddr>,
    ) -> Result<(Actor, String)> {
        let keys = throttle_keys(None, client);
        let now = self.store().now();
        self.throttle().check(&keys, now)?;
        let email = if token.is_empty() || token.len() > 128 {
            None
        } else {
            self.store()
                .consume_sign_in_token(&token_hash(token))
                .await?
        };
        let Some(email) = email else {
            self.throttle().fail(&keys, now);
            return Err(bad_link());
        };
        let user = match self.store().user_by_email(&email).await? {
            Some(user) => user,
            None if self.store().email_has_pending_invitation(&email).await? => {
                let (user, _) = self.store().ensure_user(&email).await?;
                self.store()
                    .record_audit(NewAuditEvent {
                        account_id: Some(user.personal_account_id),
                        actor: Some(user.id),
                        action: "user.create".to_owned(),
                        target: user.id.to_string(),
                        detail: serde_json::json!({ "by": "invitation" }),
                    })
                    .await?;
                user
            }
            None => return Err(bad_link()),
        };
        self.start_session(&user).await
    }

    /// Signs in with email and password. Wrong email and wrong password get the same answer
    /// in about the same time; after 5 failures in 15 minutes per email or client address,
    /// `rate_limited`.
    pub async fn sign_in_with_password(
        &self,
        email: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<(Actor, String)> {
        let email = normalize_email(email).map_err(|_| bad_password())?;
        let keys = throttle_keys(Some(&email), client);
        let now = self.store().now();
        self.throttle().check(&keys, now)?;
        let user = self.store().user_by_email(&email).await?;
        let phc = user
            .as_ref()
            .and_then(|u| u.password_hash.clone())
            .unwrap_or_else(|| decoy_hash().to_owned());
        let password = password.to_owned();
        let matches = password.len() <= MAX_PASSWORD_BYTES
            && blocking(move || verify_password(&password, &phc)).await?;
        match user {
            Some(user) if matches && user.password_hash.is_some() => {
                self.throttle().clear(&format!("email:{email}"));
                self.start_session(&user).await
            }
            _ => {
                self.throttle().fail(&keys, now);
                Err(bad_password())
            }
        }
    }

    /// Sets the signed-in user's password (at least [`MIN_PASSWORD_CHARS`] characters) and
    /// signs out every other session of the user (whoever knew the old password, or held an
    /// old session, is out).
    pub async fn set_password(&self, actor: &Actor, new_password: &str) -> Result<()> {
        if new_password.chars().count() < MIN_PASSWORD_CHARS
            || new_password.len() > MAX_PASSWORD_BYTES
        {
            return Err(ControlError::invalid(format!(
                "a password is at least {MIN_PASSWORD_CHARS} characters and at most \
                 {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        let password = new_password.to_owned();
        let phc = blocking(move || hash_password(&password)).await??;
        self.store().set_password_hash(actor.user_id, &phc).await?;
        self.store()
            .revoke_user_sessions(actor.user_id, Some(&actor.session_hash))
            .await?;
        self.user_audit(actor.user_id, "user.password_change", serde_json::json!({}))
            .await?;
        Ok(())
    }

    /// The signed-in user's profile and accounts.
    pub async fn me(&self, actor: &Actor) -> Result<Me> {
        let Some(user): Option<User> = self.store().user_by_id(actor.user_id).await? else {
            return Err(ControlError::unauthenticated("sign in first"));
        };
        let accounts = self.store().user_account_roles(user.id).await?;
        Ok(Me {
            user_id: user.id,
            email: user.email,
            has_password: user.password_hash.is_some(),
            personal_account_id: user.personal_account_id,
            accounts,
            created_at: user.created_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_trimmed_lower_cased_and_checked() {
        assert_eq!(
            normalize_email("  Ada.Lovelace+x@Example.COM\n").unwrap(),
            "ada.lovelace+x@example.com"
        );
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@",
            "ada@localhost",
            "ada@@example.com",
            "a da@example.com",
            "ada@example..com",
            "ada@.example.com",
            "<ada@example.com>",
            "ada@example.com\u{0}",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad:?}");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(normalize_email(&long).is_err());
    }

    #[test]
    fn throttle_counts_failures_per_key_within_the_window() {
        let throttle = Throttle::default();
        let t0 = chrono::Utc::now();
        let keys = throttle_keys(Some("a@example.com"), None);
        for _ in 0..MAX_FAILURES - 1 {
            throttle.fail(&keys, t0);
        }
        assert!(throttle.check(&keys, t0).is_ok());
        throttle.fail(&keys, t0 + chrono::TimeDelta::seconds(60));
        let Err(ControlError::Throttled { retry_after }) = throttle.check(&keys, t0) else {
            panic!("expected throttling");
        };
        // Free again once the oldest failure leaves the window: 15 minutes after t0.
        assert_eq!(retry_after, 15 * 60);
        let other = throttle_keys(Some("b@example.com"), None);
        assert!(throttle.check(&other, t0).is_ok());
        assert!(throttle.check(&keys, t0 + THROTTLE_WINDOW).is_ok());
        throttle.fail(&keys, t0);
        throttle.clear("email:a@example.com");
        assert!(throttle.check(&keys, t0).is_ok());
    }

    #[test]
    fn passwords_hash_to_argon2id_and_verify() {
        let phc = hash_password("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &phc));
        assert!(!verify_password("correct horse batterY", &phc));
        assert!(!verify_password(
            "correct horse battery",
            "not a phc string"
        ));
        assert_ne!(
            phc,
            hash_password("correct horse battery").unwrap(),
            "salted"
        );
    }
}
