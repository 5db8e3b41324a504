//! Sessions and CSRF tokens.
//!
//! A session is a random 256-bit token (base64url, 43 characters) in the `corral_session`
//! cookie; only its SHA-256 is stored. It expires after [`ControlConfig::session_idle`] without
//! use and [`ControlConfig::session_absolute`] after sign-in, whichever comes first.
//!
//! The CSRF token of a session is HMAC-SHA256, keyed by the session token, of a fixed label,
//! base64url: the browser's own pages can read it (from `GET /v1/control/me` or a rendered
//! form), another site cannot, and the database (which holds only the session's hash) cannot
//! produce it. Checking the `Origin`/`Referer` header is the web layer's job, since only it
//! sees the request; it must do that in addition to [`Control::check_csrf`].
//!
//! [`ControlConfig::session_idle`]: crate::ControlConfig::session_idle
//! [`ControlConfig::session_absolute`]: crate::ControlConfig::session_absolute

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use corral_control_store::{NewAuditEvent, StoreError, User, UserId};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::error::{ControlError, Result};
use crate::{Actor, Control};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "corral_session";

/// The label the CSRF token is computed over (versioned, so the scheme can change).
const CSRF_LABEL: &[u8] = b"corral/csrf/v1";

/// `last_seen_at` is written at most this often per session (reads stay reads).
const TOUCH_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// The longest token accepted from outside (ours are 43 characters); longer input is refused
/// before hashing.
const MAX_TOKEN_LEN: usize = 128;

/// A fresh random 256-bit token, base64url without padding.
pub(crate) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ControlError::internal(format!("the operating system's random source failed: {e}"))
    })?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// SHA-256 of a token: the only form in which tokens are stored.
pub(crate) fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// `d` as a chrono delta (saturating; configured durations are far below the limit).
pub(crate) fn delta(d: std::time::Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

fn signed_out() -> ControlError {
    ControlError::unauthenticated("sign in first: no session, or the session has expired")
}

impl Control {
    /// The signed-in user behind the session cookie's token: refused
    /// (`authentication_error`) when unknown, revoked, idle longer than the idle window or
    /// older than the absolute lifetime; `rate_limited` past the user's request rate
    /// ([`ControlLimits::requests_per_user`]). Records use at most once a minute.
    ///
    /// [`ControlLimits::requests_per_user`]: crate::ControlLimits::requests_per_user
    pub async fn authenticate_session(&self, cookie_token: &str) -> Result<Actor> {
        if cookie_token.is_empty() || cookie_token.len() > MAX_TOKEN_LEN {
            return Err(signed_out());
        }
        let hash = token_hash(cookie_token);
        let Some((session, user)) = self.store().session_with_user(&hash).await? else {
            return Err(signed_out());
        };
        let now = self.store().now();
        let idle = delta(self.config().session_idle);
        if session.revoked_at.is_some()
            || now >= session.expires_at
            || now >= session.last_seen_at + idle
        {
            return Err(signed_out());
        }
        // Counted once the session is known to be good, so nobody else can spend a user's
        // requests.
        self.admit_request(user.id)?;
        if now - session.last_seen_at >= TOUCH_EVERY {
            self.store().touch_session(&hash, now).await?;
        }
        Ok(Actor {
            user_id: user.id,
            email: user.email,
            session_hash: hash,
        })
    }

    /// Starts a session for `user`; returns the actor and the cookie's token (give it to the
    /// browser, never store or log it).
    pub(crate) async fn start_session(&self, user: &User) -> Result<(Actor, String)> {
        let token = random_token()?;
        let hash = token_hash(&token);
        let expires = self.store().now() + delta(self.config().session_absolute);
        self.store().create_session(&hash, user.id, expires).await?;
        self.user_audit(user.id, "user.sign_in", serde_json::json!({}))
            .await?;
        Ok((
            Actor {
                user_id: user.id,
                email: user.email.clone(),
                session_hash: hash,
            },
            token,
        ))
    }

    /// The CSRF token of the session whose cookie holds `cookie_token`.
    pub fn csrf_token(&self, cookie_token: &str) -> String {
        URL_SAFE_NO_PAD.encode(csrf_mac(cookie_token))
    }

    /// Checks a presented CSRF token (header `X-CSRF-Token` or form field `csrf`) against the
    /// session's, in constant time; a mismatch is `authentication_error`. The web layer also
    /// checks `Origin`/`Referer`.
    pub fn check_csrf(&self, cookie_token: &str, presented: &str) -> Result<()> {
        let expected = csrf_mac(cookie_token);
        let presented = URL_SAFE_NO_PAD
            .decode(presented.as_bytes())
            .unwrap_or_default();
        if !expected.is_empty()
            && presented.len() == expected.len()
            && bool::from(presented.ct_eq(&expected))
        {
            Ok(())
        } else {
            Err(ControlError::unauthenticated(
                "missing or invalid CSRF token",
            ))
        }
    }

    /// Signs out of this session.
    pub async fn sign_out(&self, actor: &Actor) -> Result<()> {
        self.store().revoke_session(&actor.session_hash).await?;
        Ok(())
    }

    /// Signs out of every session of the user (this one included).
    pub async fn sign_out_everywhere(&self, actor: &Actor) -> Result<()> {
        let revoked = self
            .store()
            .revoke_user_sessions(actor.user_id, None)
            .await?;
        self.user_audit(
            actor.user_id,
            "user.sign_out_everywhere",
            serde_json::json!({ "sessions": revoked }),
        )
        .await?;
        Ok(())
    }

    /// Records an audit event about the user's own identity (sign-in, password, legal) in
    /// their personal account's log, where they (its owner) can read it.
    pub(crate) async fn user_audit(
        &self,
        user: UserId,
        action: &str,
        detail: serde_json::Value,
    ) -> std::result::Result<(), StoreError> {
        let account_id = self
            .store()
            .user_by_id(user)
            .await?
            .map(|u| u.personal_account_id);
        self.store()
            .record_audit(NewAuditEvent {
                account_id,
                actor: Some(user),
                action: action.to_owned(),
                target: user.to_string(),
                detail,
            })
            .await?;
        Ok(())
    }
}

fn csrf_mac(cookie_token: &str) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail; an empty MAC would never match.
    match Hmac::<Sha256>::new_from_slice(cookie_token.as_bytes()) {
        Ok(mut mac) => {
            mac.update(CSRF_LABEL);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}
