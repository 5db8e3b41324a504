//! Users and sign-in: by emailed link (single use, [`ControlConfig::sign_in_token_ttl`]) or by
//! password (argon2id, on the hashing pool), with failures throttled as `crate::throttle`
//! describes.
//!
//! Who may get a sign-in link: a known user, or an address with a pending invitation — the
//! latter's user (and personal account) is created when the link is used, after which it
//! accepts the invitation like anyone else. Everyone else gets nothing, and the caller is not
//! told which case applied.
//!
//! [`ControlConfig::sign_in_token_ttl`]: crate::ControlConfig::sign_in_token_ttl

use corral_control_store::{AccountId, NewAuditEvent, User, UserAccountRole, UserId};
use corral_domain::Timestamp;
use secrecy::SecretString;

use crate::error::{ControlError, Result};
use crate::limits::Policy;
use crate::mail::MailPurpose;
use crate::session::{delta, random_token, token_hash};
use crate::throttle::{ClientAddress, Key};
use crate::{Actor, Control};

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

fn bad_link() -> ControlError {
    ControlError::unauthenticated("this sign-in link is invalid, already used or expired")
}

/// The name of the project `corral serve` makes at its first start on SQLite.
pub const DEFAULT_PROJECT: &str = "default";

fn bad_password() -> ControlError {
    ControlError::unauthenticated("wrong email or password")
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
            // The project `corral serve` made at its first start belongs to no account, so no
            // console page could show it while its name stayed taken: the first user the
            // operator invites (who got its key printed at that start) receives it in their
            // personal account. Later users find it owned and get nothing.
            if let Some(project) = self
                .store()
                .adopt_unowned_project(user.personal_account_id, DEFAULT_PROJECT)
                .await?
            {
                self.store()
                    .record_audit(NewAuditEvent {
                        account_id: Some(user.personal_account_id),
                        actor: None,
                        action: "project.adopt".to_owned(),
                        target: project.to_string(),
                        detail: serde_json::json!({ "by": "cli", "name": DEFAULT_PROJECT }),
                    })
                    .await?;
            }
        }
        self.sign_in_link(&email).await
    }

    /// Mails a sign-in link to `email` if it belongs to a user or has a pending invitation
    /// (and is not suppressed). Always `Ok` for a well-formed address, so the answer says
    /// nothing about who has an account. Silently not sent past the limits: requests per
    /// client address (counted for every address asked for), links per recipient and
    /// requesting address (a stranger's requests do not hold up the owner's), and links per
    /// recipient — each refilled faster than a link expires, so when a request is refused a
    /// link mailed to that address still works: requests by someone else never keep its
    /// owner out.
    pub async fn request_sign_in(
        &self,
        email: &str,
        client: impl Into<ClientAddress>,
    ) -> Result<()> {
        let email = normalize_email(email)?;
        let client = client.into();
        let now = self.store().now();
        let per_address = self.config().limits.sign_in_links_per_address;
        if let Err(e) = self.buckets().take_all(
            &[(Policy::LinksAddress, &client.to_string(), per_address)],
            now,
        ) {
            tracing::info!(client = %client, error = %e, "sign-in link not sent: too many requests from this address");
            return Ok(());
        }
        let known = self.store().user_by_email(&email).await?.is_some()
            || self.store().email_has_pending_invitation(&email).await?;
        if !known {
            return Ok(());
        }
        if let Err(e) = self.admit_mail(MailPurpose::SignInLink { client }, &email) {
            tracing::info!(error = %e, "sign-in link not sent: the last one mailed still works");
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
            .deliver(&email, "Your Corral sign-in link", &text)
            .await
        {
            tracing::warn!(error = %e, "sign-in link not mailed");
        }
        Ok(())
    }

    /// Signs in with the token of a sign-in link (single use): returns the actor and the
    /// session cookie's token. A bad, used or expired token is `authentication_error`; so is
    /// one whose invitation was revoked before the user existed. Bad tokens are throttled
    /// per client address only: password failures never stop a link from working.
    pub async fn sign_in_with_token(
        &self,
        token: &str,
        client: impl Into<ClientAddress>,
    ) -> Result<(Actor, String)> {
        let client = client.into();
        let now = self.store().now();
        let attempt = self.throttle().reserve(vec![Key::Links(client)], now)?;
        let email = if token.is_empty() || token.len() > 128 {
            None
        } else {
            match self.store().consume_sign_in_token(&token_hash(token)).await {
                Ok(found) => found,
                Err(e) => {
                    attempt.refund();
                    return Err(e.into());
                }
            }
        };
        let Some(email) = email else {
            // Dropped: counted as a failure.
            return Err(bad_link());
        };
        attempt.succeeded(&[]);
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
    /// in about the same time. The attempt is reserved with the throttle before the password
    /// is verified (so concurrent attempts cannot outrun it) and verified on the hashing
    /// pool; refused by either: `rate_limited` with `Retry-After`.
    pub async fn sign_in_with_password(
        &self,
        email: &str,
        password: &str,
        client: impl Into<ClientAddress>,
    ) -> Result<(Actor, String)> {
        let email = normalize_email(email).map_err(|_| bad_password())?;
        let client = client.into();
        let now = self.store().now();
        let mut keys = vec![Key::Pair(email.clone(), client), Key::Address(client)];
        if !self.throttle().is_known(&email, client, now) {
            keys.push(Key::Account(email.clone()));
        }
        let attempt = self.throttle().reserve(keys, now)?;
        if password.len() > MAX_PASSWORD_BYTES {
            return Err(bad_password());
        }
        let user = match self.store().user_by_email(&email).await {
            Ok(user) => user,
            Err(e) => {
                attempt.refund();
                return Err(e.into());
            }
        };
        let phc = user.as_ref().and_then(|u| u.password_hash.clone());
        let secret = SecretString::from(password.to_owned());
        let matches = match self.passwords().verify(secret, phc).await {
            Ok(m) => m,
            Err(e) => {
                // Busy, or the pool failed: no guess was made.
                attempt.refund();
                return Err(e);
            }
        };
        match user {
            Some(user) if matches => {
                attempt.signed_in(&email, client);
                self.start_session(&user).await
            }
            // Dropped: counted as a failure under every key.
            _ => Err(bad_password()),
        }
    }

    /// Sets the signed-in user's password (at least [`MIN_PASSWORD_CHARS`] characters) and
    /// signs out every other session of the user (whoever knew the old password, or held an
    /// old session, is out).
    ///
    /// The user proves it is them: with `current_password` (throttled per user, verified on
    /// the hashing pool), or — a first password, or a forgotten one — with a session signed
    /// in within [`ControlConfig::reauthentication_window`] (for instance by an emailed link).
    /// Neither: `invalid_request`, saying which.
    ///
    /// [`ControlConfig::reauthentication_window`]: crate::ControlConfig::reauthentication_window
    pub async fn set_password(
        &self,
        actor: &Actor,
        current_password: Option<&str>,
        new_password: &str,
    ) -> Result<()> {
        if new_password.chars().count() < MIN_PASSWORD_CHARS
            || new_password.len() > MAX_PASSWORD_BYTES
        {
            return Err(ControlError::invalid(format!(
                "a password is at least {MIN_PASSWORD_CHARS} characters and at most \
                 {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        match current_password {
            Some(current) => self.check_current_password(actor, current).await?,
            None => self.check_fresh_session(actor).await?,
        }
        let secret = SecretString::from(new_password.to_owned());
        let phc = self.passwords().hash(secret).await?;
        self.store().set_password_hash(actor.user_id, &phc).await?;
        self.store()
            .revoke_user_sessions(actor.user_id, Some(&actor.session_hash))
            .await?;
        self.user_audit(actor.user_id, "user.password_change", serde_json::json!({}))
            .await?;
        Ok(())
    }

    async fn check_current_password(&self, actor: &Actor, current: &str) -> Result<()> {
        let wrong = || ControlError::invalid("the current password is wrong");
        let now = self.store().now();
        let key = Key::Reauth(actor.user_id.to_string());
        let attempt = self.throttle().reserve(vec![key.clone()], now)?;
        if current.len() > MAX_PASSWORD_BYTES {
            return Err(wrong());
        }
        let phc = match self.store().user_by_id(actor.user_id).await {
            Ok(user) => user.and_then(|u| u.password_hash),
            Err(e) => {
                attempt.refund();
                return Err(e.into());
            }
        };
        let secret = SecretString::from(current.to_owned());
        match self.passwords().verify(secret, phc).await {
            Ok(true) => {
                attempt.succeeded(&[key]);
                Ok(())
            }
            // A user without a password has none to give: as wrong (and as slow).
            Ok(false) => Err(wrong()),
            Err(e) => {
                attempt.refund();
                Err(e)
            }
        }
    }

    async fn check_fresh_session(&self, actor: &Actor) -> Result<()> {
        let window = delta(self.config().reauthentication_window);
        let signed_in_at = self
            .store()
            .session_with_user(&actor.session_hash)
            .await?
            .map(|(session, _)| session.created_at);
        match signed_in_at {
            Some(at) if at + window > self.store().now() => Ok(()),
            _ => Err(ControlError::invalid(format!(
                "give the current password (`currentPassword`), or sign in again (an emailed \
                 link will do) and set the password within {} minutes",
                self.config().reauthentication_window.as_secs() / 60
            ))),
        }
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
}
