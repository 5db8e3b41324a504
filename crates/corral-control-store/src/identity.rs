//! Users, sessions and sign-in tokens.
//!
//! Session ids and sign-in tokens arrive here only as SHA-256 hashes; passwords only as
//! argon2id PHC strings. Creating a user creates its personal account and owner membership in
//! the same transaction, so a user never exists without one.

use corral_domain::Timestamp;
use corral_registry::RegistryError;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::error::{Result, StoreError};
use crate::model::{AccountId, AccountKind, Role, UserId};
use crate::schema::{accounts, invitations, memberships, sessions, sign_in_tokens, users};
use crate::{ControlStore, from_micros, to_micros};

/// Runs `$body` (yielding `Result<T, RegistryError>`) in a write transaction, detached under
/// the operation timeout: `BEGIN IMMEDIATE` on SQLite (the write lock is taken up front, so the
/// busy timeout applies and no reader-to-writer upgrade fails), an ordinary transaction on
/// PostgreSQL. The same as the registry's.
macro_rules! write_tx {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                match &mut conn {
                    corral_registry::PooledConnection::Sqlite(c0) => {
                        c0.immediate_transaction(async |$c| $body).await
                    }
                    corral_registry::PooledConnection::Postgres(c0) => {
                        use diesel_async::AsyncConnection as _;
                        c0.transaction(async |$c| $body).await
                    }
                }
            })
            .await
    }};
}
pub(crate) use write_tx;

/// Runs `$body` on a pooled connection of either backend, detached under the operation
/// timeout.
macro_rules! read {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                corral_registry::with_conn!(&mut conn, |$c| $body)
            })
            .await
    }};
}
pub(crate) use read;

/// A user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its id.
    pub id: UserId,
    /// Verified, lower-cased email.
    pub email: String,
    /// The argon2id PHC string, if the user set a password. Never log it.
    pub password_hash: Option<String>,
    /// The account created with the user.
    pub personal_account_id: AccountId,
    /// When the user was created.
    pub created_at: Timestamp,
}

/// A session, as stored (the token itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// SHA-256 of the cookie's token.
    pub id_hash: Vec<u8>,
    /// Whose.
    pub user_id: UserId,
    /// When it was created (the sign-in).
    pub created_at: Timestamp,
    /// When it was last used (updated at most about once a minute).
    pub last_seen_at: Timestamp,
    /// The absolute expiry.
    pub expires_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

/// One of a user's memberships, with the account's name and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAccountRole {
    /// The account.
    pub account_id: AccountId,
    /// Its name.
    pub name: String,
    /// Personal or organization.
    pub kind: AccountKind,
    /// The user's role in it.
    pub role: Role,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = users)]
struct UserRow {
    id: String,
    email: String,
    password_hash: Option<String>,
    personal_account_id: String,
    created_at: i64,
    updated_at: i64,
}

impl UserRow {
    fn into_user(self) -> Result<User> {
        let bad = |what: &str| StoreError::Internal {
            message: format!("stored user has a malformed {what}"),
        };
        Ok(User {
            id: self.id.parse().map_err(|_| bad("id"))?,
            email: self.email,
            password_hash: self.password_hash,
            personal_account_id: self
                .personal_account_id
                .parse()
                .map_err(|_| bad("personal account id"))?,
            created_at: from_micros(self.created_at)?,
        })
    }
}

#[derive(Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sessions)]
struct SessionRow {
    id_hash: Vec<u8>,
    user_id: String,
    created_at: i64,
    last_seen_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
}

impl SessionRow {
    fn into_session(self) -> Result<Session> {
        Ok(Session {
            id_hash: self.id_hash,
            user_id: self.user_id.parse().map_err(|_| StoreError::Internal {
                message: "stored session has a malformed user id".to_owned(),
            })?,
            created_at: from_micros(self.created_at)?,
            last_seen_at: from_micros(self.last_seen_at)?,
            expires_at: from_micros(self.expires_at)?,
            revoked_at: self.revoked_at.map(from_micros).transpose()?,
        })
    }
}

impl ControlStore {
    /// The user with `email` (already normalized), creating it with its personal account
    /// (named after the email) and owner membership if missing. Returns the user and whether
    /// it was created now.
    pub async fn ensure_user(&self, email: &str) -> Result<(User, bool)> {
        let email = email.to_owned();
        let now = to_micros(self.db.now());
        let user_id = UserId::new().to_string();
        let account_id = AccountId::new().to_string();
        let (row, created): (UserRow, bool) = write_tx!(self, |c| {
            let existing = users::table
                .filter(users::email.eq(&email))
                .select(UserRow::as_select())
                .first(c)
                .await
                .optional()?;
            if let Some(row) = existing {
                return Ok::<_, RegistryError>((row, false));
            }
            diesel::insert_into(accounts::table)
                .values((
                    accounts::id.eq(&account_id),
                    accounts::name.eq(&email),
                    accounts::kind.eq(AccountKind::Personal.as_str()),
                    accounts::version.eq(1_i64),
                    accounts::created_at.eq(now),
                    accounts::updated_at.eq(now),
                ))
                .execute(c)
                .await?;
            let row = UserRow {
                id: user_id.clone(),
                email: email.clone(),
                password_hash: None,
                personal_account_id: account_id.clone(),
                created_at: now,
                updated_at: now,
            };
            diesel::insert_into(users::table)
                .values(&row)
                .execute(c)
                .await?;
            diesel::insert_into(memberships::table)
                .values((
                    memberships::account_id.eq(&account_id),
                    memberships::user_id.eq(&user_id),
                    memberships::role.eq(Role::Owner.as_str()),
                    memberships::created_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok((row, true))
        })?;
        Ok((row.into_user()?, created))
    }

    /// The user with `email` (already normalized), if any.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>> {
        let email = email.to_owned();
        let row: Option<UserRow> = read!(self, |c| users::table
            .filter(users::email.eq(&email))
            .select(UserRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(corral_registry::db_error))?;
        row.map(UserRow::into_user).transpose()
    }

    /// The user `id`, if it exists.
    pub async fn user_by_id(&self, id: UserId) -> Result<Option<User>> {
        let id = id.to_string();
        let row: Option<UserRow> = read!(self, |c| users::table
            .filter(users::id.eq(&id))
            .select(UserRow::as_select())
            .first(c)
            .await
            .optional()
            .map_err(corral_registry::db_error))?;
        row.map(UserRow::into_user).transpose()
    }

    /// Replaces the user's password hash (an argon2id PHC string).
    pub async fn set_password_hash(&self, user: UserId, password_hash: &str) -> Result<()> {
        let (id, hash, now) = (user.to_string(), password_hash.to_owned(), self.db.now());
        let now = to_micros(now);
        let n = read!(self, |c| diesel::update(
            users::table.filter(users::id.eq(&id))
        )
        .set((users::password_hash.eq(&hash), users::updated_at.eq(now)))
        .execute(c)
        .await
        .map_err(corral_registry::db_error))?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "user" });
        }
        Ok(())
    }

    /// Whether an invitation to `email` is pending (neither accepted, revoked nor expired).
    pub async fn email_has_pending_invitation(&self, email: &str) -> Result<bool> {
        let (email, now) = (email.to_owned(), to_micros(self.db.now()));
        let n: i64 = read!(self, |c| invitations::table
            .filter(invitations::email.eq(&email))
            .filter(invitations::accepted_at.is_null())
            .filter(invitations::revoked_at.is_null())
            .filter(invitations::expires_at.gt(now))
            .count()
            .get_result(c)
            .await
            .map_err(corral_registry::db_error))?;
        Ok(n > 0)
    }

    /// Every account the user is a member of, with the user's role, by name.
    pub async fn user_account_roles(&self, user: UserId) -> Result<Vec<UserAccountRole>> {
        let id = user.to_string();
        let rows: Vec<(String, String, String, String)> = read!(self, |c| memberships::table
            .inner_join(accounts::table)
            .filter(memberships::user_id.eq(&id))
            .filter(accounts::deleted_at.is_null())
            .order((accounts::name.asc(), accounts::id.asc()))
            .select((
                accounts::id,
                accounts::name,
                accounts::kind,
                memberships::role
            ))
            .load(c)
            .await
            .map_err(corral_registry::db_error))?;
        rows.into_iter()
            .map(|(id, name, kind, role)| {
                let bad = |what: &str| StoreError::Internal {
                    message: format!("stored membership has a malformed {what}"),
                };
                Ok(UserAccountRole {
                    account_id: id.parse().map_err(|_| bad("account id"))?,
                    name,
                    kind: AccountKind::parse(&kind).ok_or_else(|| bad("account kind"))?,
                    role: Role::parse(&role).ok_or_else(|| bad("role"))?,
                })
            })
            .collect()
    }

    /// Stores a sign-in token's hash for `email`, valid until `expires_at`.
    pub async fn insert_sign_in_token(
        &self,
        token_hash: &[u8],
        email: &str,
        expires_at: Timestamp,
    ) -> Result<()> {
        let (hash, email) = (token_hash.to_vec(), email.to_owned());
        let (now, expires) = (to_micros(self.db.now()), to_micros(expires_at));
        read!(self, |c| diesel::insert_into(sign_in_tokens::table)
            .values((
                sign_in_tokens::token_hash.eq(&hash),
                sign_in_tokens::email.eq(&email),
                sign_in_tokens::created_at.eq(now),
                sign_in_tokens::expires_at.eq(expires),
            ))
            .execute(c)
            .await
            .map_err(corral_registry::db_error))?;
        Ok(())
    }

    /// Uses the sign-in token with this hash: marks it used and returns its email, or `None`
    /// when it is unknown, used or expired. Single use holds under concurrency: the update
    /// only matches an unused row.
    pub async fn consume_sign_in_token(&self, token_hash: &[u8]) -> Result<Option<String>> {
        let hash = token_hash.to_vec();
        let now = to_micros(self.db.now());
        let email: Option<String> = write_tx!(self, |c| {
            let n = diesel::update(
                sign_in_tokens::table
                    .filter(sign_in_tokens::token_hash.eq(&hash))
                    .filter(sign_in_tokens::used_at.is_null())
                    .filter(sign_in_tokens::expires_at.gt(now)),
            )
            .set(sign_in_tokens::used_at.eq(now))
            .execute(c)
            .await?;
            if n == 0 {
                return Ok::<_, RegistryError>(None);
            }
            // Expired tokens are useless: drop them while here.
            diesel::delete(sign_in_tokens::table.filter(sign_in_tokens::expires_at.le(now)))
                .execute(c)
                .await?;
            Ok(Some(
                sign_in_tokens::table
                    .filter(sign_in_tokens::token_hash.eq(&hash))
                    .select(sign_in_tokens::email)
                    .first(c)
                    .await?,
            ))
        })?;
        Ok(email)
    }

    /// Stores a new session of `user` (by its token's hash), expiring at `expires_at`.
    pub async fn create_session(
        &self,
        id_hash: &[u8],
        user: UserId,
        expires_at: Timestamp,
    ) -> Result<Session> {
        let now = to_micros(self.db.now());
        let row = SessionRow {
            id_hash: id_hash.to_vec(),
            user_id: user.to_string(),
            created_at: now,
            last_seen_at: now,
            expires_at: to_micros(expires_at),
            revoked_at: None,
        };
        let insert = row.clone();
        write_tx!(self, |c| {
            // The user's sessions past their absolute expiry are dead for good: drop them
            // here, so sessions do not pile up without a sweeper.
            diesel::delete(
                sessions::table
                    .filter(sessions::user_id.eq(&insert.user_id))
                    .filter(sessions::expires_at.le(now)),
            )
            .execute(c)
            .await?;
            diesel::insert_into(sessions::table)
                .values(&insert)
                .execute(c)
                .await?;
            Ok::<_, RegistryError>(())
        })?;
        row.into_session()
    }

    /// The session with this hash and its user, if both exist (revoked or expired ones too:
    /// the caller judges).
    pub async fn session_with_user(&self, id_hash: &[u8]) -> Result<Option<(Session, User)>> {
        let hash = id_hash.to_vec();
        let row: Option<(SessionRow, UserRow)> = read!(self, |c| sessions::table
            .inner_join(users::table)
            .filter(sessions::id_hash.eq(&hash))
            .select((SessionRow::as_select(), UserRow::as_select()))
            .first(c)
            .await
            .optional()
            .map_err(corral_registry::db_error))?;
        row.map(|(s, u)| Ok((s.into_session()?, u.into_user()?)))
            .transpose()
    }

    /// Records that the session was used at `at`.
    pub async fn touch_session(&self, id_hash: &[u8], at: Timestamp) -> Result<()> {
        let (hash, at) = (id_hash.to_vec(), to_micros(at));
        read!(self, |c| diesel::update(
            sessions::table
                .filter(sessions::id_hash.eq(&hash))
                .filter(sessions::last_seen_at.lt(at))
        )
        .set(sessions::last_seen_at.eq(at))
        .execute(c)
        .await
        .map_err(corral_registry::db_error))?;
        Ok(())
    }

    /// Revokes one session (no effect if it is already revoked or unknown).
    pub async fn revoke_session(&self, id_hash: &[u8]) -> Result<()> {
        let (hash, now) = (id_hash.to_vec(), to_micros(self.db.now()));
        read!(self, |c| diesel::update(
            sessions::table
                .filter(sessions::id_hash.eq(&hash))
                .filter(sessions::revoked_at.is_null())
        )
        .set(sessions::revoked_at.eq(now))
        .execute(c)
        .await
        .map_err(corral_registry::db_error))?;
        Ok(())
    }

    /// Revokes every session of `user` except the one hashed `keep` (if given); returns how
    /// many were revoked now.
    pub async fn revoke_user_sessions(&self, user: UserId, keep: Option<&[u8]>) -> Result<usize> {
        let (id, now) = (user.to_string(), to_micros(self.db.now()));
        let keep = keep.map(<[u8]>::to_vec).unwrap_or_default();
        let n = read!(self, |c| diesel::update(
            sessions::table
                .filter(sessions::user_id.eq(&id))
                .filter(sessions::revoked_at.is_null())
                .filter(sessions::id_hash.ne(&keep))
        )
        .set(sessions::revoked_at.eq(now))
        .execute(c)
        .await
        .map_err(corral_registry::db_error))?;
        Ok(n)
    }
}
