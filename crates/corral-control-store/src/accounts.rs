//! Accounts, memberships, invitations and which account owns which registry project.
//!
//! Every rule that must hold under concurrency is checked inside the write transaction that
//! would break it: an organization keeps an owner, a personal account keeps its one member, a
//! stale `version` is refused, nothing changes in an account being deleted. On PostgreSQL the
//! transaction first locks the account's row (`SELECT … FOR UPDATE`), so two demotions of the
//! last two owners run one after the other and the second sees the first; on SQLite
//! `BEGIN IMMEDIATE` already serializes every writer.

use corral_domain::Timestamp;
use corral_registry::schema::projects;
use corral_registry::{PooledConnection, ProjectId, RegistryError, with_conn};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::error::{Result, StoreError};
use crate::model::{AccountId, AccountKind, InvitationId, Role, UserId};
use crate::schema::{accounts, invitations, memberships, project_accounts, users};
use crate::{ControlStore, from_micros, to_micros};

/// An account, personal or organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Its id.
    pub id: AccountId,
    /// Its display name.
    pub name: String,
    /// Personal or organization.
    pub kind: AccountKind,
    /// Bumped on every change of the account or its memberships (optimistic locking).
    pub version: i64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When its deletion was requested.
    pub deleting_at: Option<Timestamp>,
    /// When its deletion finished.
    pub deleted_at: Option<Timestamp>,
}

/// A member of an account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The user.
    pub user_id: UserId,
    /// Their email.
    pub email: String,
    /// Their role.
    pub role: Role,
    /// When they joined.
    pub joined_at: Timestamp,
}

/// An invitation to join an account (never its token; only the token's hash is stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitation {
    /// Its id.
    pub id: InvitationId,
    /// The account to join.
    pub account_id: AccountId,
    /// The invited, lower-cased email.
    pub email: String,
    /// The role on acceptance.
    pub role: Role,
    /// Who invited.
    pub invited_by: UserId,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// When it was accepted.
    pub accepted_at: Option<Timestamp>,
    /// When it was revoked.
    pub revoked_at: Option<Timestamp>,
}

/// An invitation to store.
#[derive(Debug, Clone)]
pub struct NewInvitation {
    /// The account to join.
    pub account_id: AccountId,
    /// The invited, lower-cased email.
    pub email: String,
    /// The role on acceptance.
    pub role: Role,
    /// SHA-256 of the token mailed to the invitee.
    pub token_hash: Vec<u8>,
    /// Who invites.
    pub invited_by: UserId,
    /// When it stops working.
    pub expires_at: Timestamp,
}

/// Which account owns a registry project, and where its deletion stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectOwnership {
    /// The registry project.
    pub project_id: ProjectId,
    /// The owning account.
    pub account_id: AccountId,
    /// When its deletion was requested (its own, not its account's).
    pub deleting_at: Option<Timestamp>,
    /// When its deletion finished.
    pub deleted_at: Option<Timestamp>,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = accounts)]
struct AccountRow {
    id: String,
    name: String,
    kind: String,
    version: i64,
    created_at: i64,
    updated_at: i64,
    deleting_at: Option<i64>,
    deleted_at: Option<i64>,
}

fn internal(what: &str) -> StoreError {
    StoreError::Internal {
        message: format!("stored {what} is malformed"),
    }
}

fn opt_time(us: Option<i64>) -> Result<Option<Timestamp>> {
    us.map(from_micros).transpose()
}

impl AccountRow {
    fn into_account(self) -> Result<Account> {
        Ok(Account {
            id: self.id.parse().map_err(|_| internal("account id"))?,
            name: self.name,
            kind: AccountKind::parse(&self.kind).ok_or_else(|| internal("account kind"))?,
            version: self.version,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
            deleting_at: opt_time(self.deleting_at)?,
            deleted_at: opt_time(self.deleted_at)?,
        })
    }
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = invitations)]
struct InvitationRow {
    id: String,
    account_id: String,
    email: String,
    role: String,
    token_hash: Vec<u8>,
    invited_by: String,
    created_at: i64,
    expires_at: i64,
    accepted_at: Option<i64>,
    revoked_at: Option<i64>,
}

impl InvitationRow {
    fn into_invitation(self) -> Result<Invitation> {
        Ok(Invitation {
            id: self.id.parse().map_err(|_| internal("invitation id"))?,
            account_id: self
                .account_id
                .parse()
                .map_err(|_| internal("account id"))?,
            email: self.email,
            role: parse_role(&self.role)?,
            invited_by: self.invited_by.parse().map_err(|_| internal("user id"))?,
            created_at: from_micros(self.created_at)?,
            expires_at: from_micros(self.expires_at)?,
            accepted_at: opt_time(self.accepted_at)?,
            revoked_at: opt_time(self.revoked_at)?,
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = project_accounts)]
struct OwnershipRow {
    project_id: String,
    account_id: String,
    deleting_at: Option<i64>,
    deleted_at: Option<i64>,
}

impl OwnershipRow {
    fn into_ownership(self) -> Result<ProjectOwnership> {
        Ok(ProjectOwnership {
            project_id: self
                .project_id
                .parse()
                .map_err(|_| internal("project id"))?,
            account_id: self
                .account_id
                .parse()
                .map_err(|_| internal("account id"))?,
            deleting_at: opt_time(self.deleting_at)?,
            deleted_at: opt_time(self.deleted_at)?,
        })
    }
}

fn parse_role(s: &str) -> Result<Role> {
    Role::parse(s).ok_or_else(|| internal("role"))
}

/// Runs `$body` (yielding `Result<T, StoreError>`) on a pooled connection of either backend,
/// detached under the database's operation timeout.
macro_rules! read {
    ($self:ident, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                let outcome: Result<_> = with_conn!(&mut conn, |$c| $body);
                Ok::<_, RegistryError>(outcome)
            })
            .await
            .map_err(StoreError::from)
            .and_then(|r| r)
    }};
}

/// Runs `$body` (yielding `Result<T, StoreError>`; an `Err` rolls back) in a write
/// transaction: `BEGIN IMMEDIATE` on SQLite, and on PostgreSQL an ordinary transaction that
/// first locks the row of the account `$lock` names (an `Option<String>`), if any.
macro_rules! write_tx {
    ($self:ident, lock = $lock:expr, |$c:ident| $body:expr) => {{
        let db = $self.db.clone();
        let lock: Option<String> = $lock;
        $self
            .db
            .detached(async move {
                let mut conn = db.connection().await?;
                let outcome: Result<_> = match &mut conn {
                    PooledConnection::Sqlite(c0) => {
                        c0.immediate_transaction(async |$c| $body).await
                    }
                    PooledConnection::Postgres(c0) => {
                        use diesel_async::AsyncConnection as _;
                        c0.transaction(async |$c| {
                            if let Some(id) = &lock {
                                accounts::table
                                    .filter(accounts::id.eq(id))
                                    .select(accounts::id)
                                    .for_update()
                                    .first::<String>($c)
                                    .await
                                    .optional()?;
                            }
                            $body
                        })
                        .await
                    }
                };
                Ok::<_, RegistryError>(outcome)
            })
            .await
            .map_err(StoreError::from)
            .and_then(|r| r)
    }};
}

/// Loads the account `$id` (a `&str`) inside a transaction: `NotFound` when missing or
/// deleted, `AccountDeleting` while its deletion runs.
macro_rules! writable_account {
    ($c:ident, $id:expr) => {{
        let row: Option<AccountRow> = accounts::table
            .filter(accounts::id.eq($id))
            .select(AccountRow::as_select())
            .first($c)
            .await
            .optional()?;
        match row {
            None => return Err(StoreError::NotFound { what: "account" }),
            Some(r) if r.deleted_at.is_some() => {
                return Err(StoreError::NotFound { what: "account" });
            }
            Some(r) if r.deleting_at.is_some() => return Err(StoreError::AccountDeleting),
            Some(r) => r,
        }
    }};
}

/// Bumps the account's version (every change of it or its memberships).
macro_rules! bump_version {
    ($c:ident, $id:expr, $now:expr) => {
        diesel::update(accounts::table.filter(accounts::id.eq($id)))
            .set((
                accounts::version.eq(accounts::version + 1),
                accounts::updated_at.eq($now),
            ))
            .execute($c)
            .await?
    };
}

/// The role of `$user` in `$account` inside a transaction, if a member.
macro_rules! role_in {
    ($c:ident, $account:expr, $user:expr) => {{
        let role: Option<String> = memberships::table
            .filter(memberships::account_id.eq($account))
            .filter(memberships::user_id.eq($user))
            .select(memberships::role)
            .first($c)
            .await
            .optional()?;
        role.map(|r| parse_role(&r)).transpose()?
    }};
}

/// How many owners `$account` has, inside a transaction.
macro_rules! owner_count {
    ($c:ident, $account:expr) => {{
        let n: i64 = memberships::table
            .filter(memberships::account_id.eq($account))
            .filter(memberships::role.eq(Role::Owner.as_str()))
            .count()
            .get_result($c)
            .await?;
        n
    }};
}

/// Whether `$project` (a `&str`) may change: `NotFound` when it has no account or was
/// deleted, `AccountDeleting` while it or its account is being deleted.
macro_rules! writable_project {
    ($c:ident, $project:expr) => {{
        let row: Option<OwnershipRow> = project_accounts::table
            .filter(project_accounts::project_id.eq($project))
            .select(OwnershipRow::as_select())
            .first($c)
            .await
            .optional()?;
        let row = match row {
            None => return Err(StoreError::NotFound { what: "project" }),
            Some(r) if r.deleted_at.is_some() => {
                return Err(StoreError::NotFound { what: "project" });
            }
            Some(r) if r.deleting_at.is_some() => return Err(StoreError::AccountDeleting),
            Some(r) => r,
        };
        writable_account!($c, &row.account_id);
        row
    }};
}

impl ControlStore {
    // --- accounts -----------------------------------------------------------------------------

    /// The accounts `user` belongs to (deleted ones excluded), with their role, oldest first.
    pub async fn accounts_of(&self, user: UserId) -> Result<Vec<(Account, Role)>> {
        let user = user.to_string();
        let rows: Vec<(AccountRow, String)> = read!(self, |c| {
            Ok(memberships::table
                .inner_join(accounts::table)
                .filter(memberships::user_id.eq(&user))
                .filter(accounts::deleted_at.is_null())
                .order((accounts::created_at.asc(), accounts::id.asc()))
                .select((AccountRow::as_select(), memberships::role))
                .load(c)
                .await?)
        })?;
        rows.into_iter()
            .map(|(a, r)| Ok((a.into_account()?, parse_role(&r)?)))
            .collect()
    }

    /// The account and `user`'s role in it, or `None` when the account does not exist, was
    /// deleted, or `user` is not a member: the three are one answer to the caller.
    pub async fn membership(
        &self,
        account: AccountId,
        user: UserId,
    ) -> Result<Option<(Account, Role)>> {
        let (account, user) = (account.to_string(), user.to_string());
        let row: Option<(AccountRow, String)> = read!(self, |c| {
            Ok(memberships::table
                .inner_join(accounts::table)
                .filter(memberships::account_id.eq(&account))
                .filter(memberships::user_id.eq(&user))
                .filter(accounts::deleted_at.is_null())
                .select((AccountRow::as_select(), memberships::role))
                .first(c)
                .await
                .optional()?)
        })?;
        row.map(|(a, r)| Ok((a.into_account()?, parse_role(&r)?)))
            .transpose()
    }

    /// The account with this id (deleted ones included), if any.
    pub async fn account(&self, account: AccountId) -> Result<Option<Account>> {
        let account = account.to_string();
        let row: Option<AccountRow> = read!(self, |c| {
            Ok(accounts::table
                .filter(accounts::id.eq(&account))
                .select(AccountRow::as_select())
                .first(c)
                .await
                .optional()?)
        })?;
        row.map(AccountRow::into_account).transpose()
    }

    /// Creates an organization with `creator` as its owner. An organization of the same name
    /// that `creator` already owns is a [`StoreError::Conflict`]; [`StoreError::NotFound`]
    /// ("user") when `creator` does not exist.
    pub async fn create_organization(&self, creator: UserId, name: &str) -> Result<Account> {
        // Two creations by one user are serialized on their personal account's row (on
        // PostgreSQL; SQLite serializes every writer), so a double submit cannot make two.
        let user = creator.to_string();
        let personal: Option<String> = read!(self, |c| {
            Ok(users::table
                .filter(users::id.eq(&user))
                .select(users::personal_account_id)
                .first(c)
                .await
                .optional()?)
        })?;
        let personal = personal.ok_or(StoreError::NotFound { what: "user" })?;
        let now = to_micros(self.db.now());
        let row = AccountRow {
            id: AccountId::new().to_string(),
            name: name.to_owned(),
            kind: AccountKind::Organization.as_str().to_owned(),
            version: 1,
            created_at: now,
            updated_at: now,
            deleting_at: None,
            deleted_at: None,
        };
        let creator = creator.to_string();
        let created: AccountRow = write_tx!(self, lock = Some(personal), |c| {
            let same: i64 = memberships::table
                .inner_join(accounts::table)
                .filter(memberships::user_id.eq(&creator))
                .filter(memberships::role.eq(Role::Owner.as_str()))
                .filter(accounts::kind.eq(AccountKind::Organization.as_str()))
                .filter(accounts::deleted_at.is_null())
                .filter(accounts::name.eq(&row.name))
                .count()
                .get_result(c)
                .await?;
            if same > 0 {
                return Err(StoreError::Conflict {
                    what: "you already own an organization with this name",
                });
            }
            diesel::insert_into(accounts::table)
                .values(&row)
                .execute(c)
                .await?;
            diesel::insert_into(memberships::table)
                .values((
                    memberships::account_id.eq(&row.id),
                    memberships::user_id.eq(&creator),
                    memberships::role.eq(Role::Owner.as_str()),
                    memberships::created_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok(accounts::table
                .filter(accounts::id.eq(&row.id))
                .select(AccountRow::as_select())
                .first(c)
                .await?)
        })?;
        created.into_account()
    }

    /// Renames an account if its version is still `expected_version` (else
    /// [`StoreError::Conflict`]), bumping the version.
    pub async fn rename_account(
        &self,
        account: AccountId,
        name: &str,
        expected_version: i64,
    ) -> Result<Account> {
        let id = account.to_string();
        let name = name.to_owned();
        let now = to_micros(self.db.now());
        let updated: AccountRow = write_tx!(self, lock = Some(id.clone()), |c| {
            let current = writable_account!(c, &id);
            if current.version != expected_version {
                return Err(StoreError::Conflict {
                    what: "the account changed since you read it (stale version); reload and retry",
                });
            }
            diesel::update(accounts::table.filter(accounts::id.eq(&id)))
                .set((
                    accounts::name.eq(&name),
                    accounts::version.eq(accounts::version + 1),
                    accounts::updated_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok(accounts::table
                .filter(accounts::id.eq(&id))
                .select(AccountRow::as_select())
                .first(c)
                .await?)
        })?;
        updated.into_account()
    }

    /// Starts deleting an organization: sets `deleting_at` (the deletion worker does the
    /// rest). A personal account is [`StoreError::PersonalAccountImmutable`]; one already
    /// being deleted is [`StoreError::AccountDeleting`].
    pub async fn start_account_deletion(&self, account: AccountId) -> Result<Account> {
        let id = account.to_string();
        let now = to_micros(self.db.now());
        let updated: AccountRow = write_tx!(self, lock = Some(id.clone()), |c| {
            let current = writable_account!(c, &id);
            if current.kind == AccountKind::Personal.as_str() {
                return Err(StoreError::PersonalAccountImmutable);
            }
            diesel::update(accounts::table.filter(accounts::id.eq(&id)))
                .set((
                    accounts::deleting_at.eq(Some(now)),
                    accounts::version.eq(accounts::version + 1),
                    accounts::updated_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok(accounts::table
                .filter(accounts::id.eq(&id))
                .select(AccountRow::as_select())
                .first(c)
                .await?)
        })?;
        updated.into_account()
    }

    // --- members -----------------------------------------------------------------------------

    /// The account's members, owners first, then by when they joined.
    pub async fn members(&self, account: AccountId) -> Result<Vec<Member>> {
        let account = account.to_string();
        let rows: Vec<(String, String, String, i64)> = read!(self, |c| {
            Ok(memberships::table
                .inner_join(users::table)
                .filter(memberships::account_id.eq(&account))
                .order((memberships::created_at.asc(), memberships::user_id.asc()))
                .select((
                    memberships::user_id,
                    users::email,
                    memberships::role,
                    memberships::created_at,
                ))
                .load(c)
                .await?)
        })?;
        let mut members = rows
            .into_iter()
            .map(|(user, email, role, joined)| {
                Ok(Member {
                    user_id: user.parse().map_err(|_| internal("user id"))?,
                    email,
                    role: parse_role(&role)?,
                    joined_at: from_micros(joined)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Stable: owners, admins, members, each by joining time.
        members.sort_by_key(|m| match m.role {
            Role::Owner => 0,
            Role::Admin => 1,
            Role::Member => 2,
        });
        Ok(members)
    }

    /// Sets `user`'s role in an organization. [`StoreError::NotFound`] ("member") when they
    /// are not a member; [`StoreError::LastOwner`] when it would demote the last owner.
    pub async fn set_role(&self, account: AccountId, user: UserId, role: Role) -> Result<()> {
        let (id, user) = (account.to_string(), user.to_string());
        let now = to_micros(self.db.now());
        write_tx!(self, lock = Some(id.clone()), |c| {
            let current = writable_account!(c, &id);
            if current.kind == AccountKind::Personal.as_str() {
                return Err(StoreError::PersonalAccountImmutable);
            }
            let Some(old) = role_in!(c, &id, &user) else {
                return Err(StoreError::NotFound { what: "member" });
            };
            if old == Role::Owner && role != Role::Owner && owner_count!(c, &id) <= 1 {
                return Err(StoreError::LastOwner);
            }
            diesel::update(
                memberships::table
                    .filter(memberships::account_id.eq(&id))
                    .filter(memberships::user_id.eq(&user)),
            )
            .set(memberships::role.eq(role.as_str()))
            .execute(c)
            .await?;
            bump_version!(c, &id, now);
            Ok(())
        })
    }

    /// Removes `user` from an organization. [`StoreError::NotFound`] ("member") when not a
    /// member; [`StoreError::LastOwner`] when they are its last owner.
    pub async fn remove_member(&self, account: AccountId, user: UserId) -> Result<()> {
        let (id, user) = (account.to_string(), user.to_string());
        let now = to_micros(self.db.now());
        write_tx!(self, lock = Some(id.clone()), |c| {
            let current = writable_account!(c, &id);
            if current.kind == AccountKind::Personal.as_str() {
                return Err(StoreError::PersonalAccountImmutable);
            }
            let Some(old) = role_in!(c, &id, &user) else {
                return Err(StoreError::NotFound { what: "member" });
            };
            if old == Role::Owner && owner_count!(c, &id) <= 1 {
                return Err(StoreError::LastOwner);
            }
            diesel::delete(
                memberships::table
                    .filter(memberships::account_id.eq(&id))
                    .filter(memberships::user_id.eq(&user)),
            )
            .execute(c)
            .await?;
            bump_version!(c, &id, now);
            Ok(())
        })
    }

    /// Makes `to` an owner and `from` (who must be an owner) an admin, in one transaction.
    /// [`StoreError::NotFound`] ("member") when `to` is not a member.
    pub async fn transfer_ownership(
        &self,
        account: AccountId,
        from: UserId,
        to: UserId,
    ) -> Result<()> {
        let (id, from, to) = (account.to_string(), from.to_string(), to.to_string());
        let now = to_micros(self.db.now());
        write_tx!(self, lock = Some(id.clone()), |c| {
            let current = writable_account!(c, &id);
            if current.kind == AccountKind::Personal.as_str() {
                return Err(StoreError::PersonalAccountImmutable);
            }
            if role_in!(c, &id, &from) != Some(Role::Owner) {
                return Err(StoreError::Conflict {
                    what: "you are no longer an owner of this account",
                });
            }
            if role_in!(c, &id, &to).is_none() {
                return Err(StoreError::NotFound { what: "member" });
            }
            for (user, role) in [(&to, Role::Owner), (&from, Role::Admin)] {
                diesel::update(
                    memberships::table
                        .filter(memberships::account_id.eq(&id))
                        .filter(memberships::user_id.eq(user)),
                )
                .set(memberships::role.eq(role.as_str()))
                .execute(c)
                .await?;
            }
            bump_version!(c, &id, now);
            Ok(())
        })
    }

    // --- invitations -------------------------------------------------------------------------

    /// Stores an invitation. [`StoreError::Conflict`] when a pending invitation for the same
    /// email exists or the email is already a member's.
    pub async fn create_invitation(&self, new: NewInvitation) -> Result<Invitation> {
        let now = self.db.now();
        let row = InvitationRow {
            id: InvitationId::new().to_string(),
            account_id: new.account_id.to_string(),
            email: new.email,
            role: new.role.as_str().to_owned(),
            token_hash: new.token_hash,
            invited_by: new.invited_by.to_string(),
            created_at: to_micros(now),
            expires_at: to_micros(new.expires_at),
            accepted_at: None,
            revoked_at: None,
        };
        let now = to_micros(now);
        let stored: InvitationRow = write_tx!(self, lock = Some(row.account_id.clone()), |c| {
            let current = writable_account!(c, &row.account_id);
            if current.kind == AccountKind::Personal.as_str() {
                return Err(StoreError::PersonalAccountImmutable);
            }
            let pending: i64 = invitations::table
                .filter(invitations::account_id.eq(&row.account_id))
                .filter(invitations::email.eq(&row.email))
                .filter(invitations::accepted_at.is_null())
                .filter(invitations::revoked_at.is_null())
                .filter(invitations::expires_at.gt(now))
                .count()
                .get_result(c)
                .await?;
            if pending > 0 {
                return Err(StoreError::Conflict {
                    what: "a pending invitation for this email exists",
                });
            }
            let member: i64 = memberships::table
                .inner_join(users::table)
                .filter(memberships::account_id.eq(&row.account_id))
                .filter(users::email.eq(&row.email))
                .count()
                .get_result(c)
                .await?;
            if member > 0 {
                return Err(StoreError::Conflict {
                    what: "this email is already a member's",
                });
            }
            diesel::insert_into(invitations::table)
                .values(&row)
                .execute(c)
                .await?;
            Ok(invitations::table
                .filter(invitations::id.eq(&row.id))
                .select(InvitationRow::as_select())
                .first(c)
                .await?)
        })?;
        stored.into_invitation()
    }

    /// The pending invitation (not accepted, revoked or expired) whose token hashes to
    /// `token_hash`, if any.
    pub async fn pending_invitation_by_token(
        &self,
        token_hash: &[u8],
    ) -> Result<Option<Invitation>> {
        let hash = token_hash.to_vec();
        let now = to_micros(self.db.now());
        let row: Option<InvitationRow> = read!(self, |c| {
            Ok(invitations::table
                .filter(invitations::token_hash.eq(&hash))
                .filter(invitations::accepted_at.is_null())
                .filter(invitations::revoked_at.is_null())
                .filter(invitations::expires_at.gt(now))
                .select(InvitationRow::as_select())
                .first(c)
                .await
                .optional()?)
        })?;
        row.map(InvitationRow::into_invitation).transpose()
    }

    /// The account's pending invitations (not accepted, revoked or expired), oldest first.
    pub async fn pending_invitations(&self, account: AccountId) -> Result<Vec<Invitation>> {
        let account = account.to_string();
        let now = to_micros(self.db.now());
        let rows: Vec<InvitationRow> = read!(self, |c| {
            Ok(invitations::table
                .filter(invitations::account_id.eq(&account))
                .filter(invitations::accepted_at.is_null())
                .filter(invitations::revoked_at.is_null())
                .filter(invitations::expires_at.gt(now))
                .order((invitations::created_at.asc(), invitations::id.asc()))
                .select(InvitationRow::as_select())
                .load(c)
                .await?)
        })?;
        rows.into_iter()
            .map(InvitationRow::into_invitation)
            .collect()
    }

    /// Revokes a pending invitation of `account`. [`StoreError::NotFound`] ("invitation")
    /// when there is no such pending invitation in this account.
    pub async fn revoke_invitation(
        &self,
        account: AccountId,
        invitation: InvitationId,
    ) -> Result<Invitation> {
        let (id, inv) = (account.to_string(), invitation.to_string());
        let now = to_micros(self.db.now());
        let row: InvitationRow = write_tx!(self, lock = Some(id.clone()), |c| {
            writable_account!(c, &id);
            let n = diesel::update(
                invitations::table
                    .filter(invitations::id.eq(&inv))
                    .filter(invitations::account_id.eq(&id))
                    .filter(invitations::accepted_at.is_null())
                    .filter(invitations::revoked_at.is_null())
                    .filter(invitations::expires_at.gt(now)),
            )
            .set(invitations::revoked_at.eq(Some(now)))
            .execute(c)
            .await?;
            if n == 0 {
                return Err(StoreError::NotFound { what: "invitation" });
            }
            Ok(invitations::table
                .filter(invitations::id.eq(&inv))
                .select(InvitationRow::as_select())
                .first(c)
                .await?)
        })?;
        row.into_invitation()
    }

    /// Accepts the invitation whose token hashes to `token_hash` for `user` (whose email is
    /// `email`), making them a member, once.
    ///
    /// Unknown, revoked or expired → [`StoreError::NotFound`] ("invitation"); for another
    /// email → [`StoreError::Conflict`]; used already, or `user` already a member →
    /// [`StoreError::Conflict`]; the account being deleted → [`StoreError::AccountDeleting`].
    pub async fn accept_invitation(
        &self,
        token_hash: &[u8],
        user: UserId,
        email: &str,
    ) -> Result<Invitation> {
        let hash = token_hash.to_vec();
        let (user, email) = (user.to_string(), email.to_owned());
        let now = to_micros(self.db.now());
        let row: InvitationRow = write_tx!(self, lock = None, |c| {
            let found: Option<InvitationRow> = invitations::table
                .filter(invitations::token_hash.eq(&hash))
                .select(InvitationRow::as_select())
                .first(c)
                .await
                .optional()?;
            let Some(inv) = found else {
                return Err(StoreError::NotFound { what: "invitation" });
            };
            if inv.revoked_at.is_some() || inv.expires_at <= now {
                return Err(StoreError::NotFound { what: "invitation" });
            }
            if inv.accepted_at.is_some() {
                return Err(StoreError::Conflict {
                    what: "this invitation has already been used",
                });
            }
            if inv.email != email {
                return Err(StoreError::Conflict {
                    what: "this invitation was sent to another email address",
                });
            }
            writable_account!(c, &inv.account_id);
            if role_in!(c, &inv.account_id, &user).is_some() {
                return Err(StoreError::Conflict {
                    what: "you are already a member of this account",
                });
            }
            // Single use even against a concurrent acceptance: only one update can match.
            let n = diesel::update(
                invitations::table
                    .filter(invitations::id.eq(&inv.id))
                    .filter(invitations::accepted_at.is_null()),
            )
            .set(invitations::accepted_at.eq(Some(now)))
            .execute(c)
            .await?;
            if n == 0 {
                return Err(StoreError::Conflict {
                    what: "this invitation has already been used",
                });
            }
            diesel::insert_into(memberships::table)
                .values((
                    memberships::account_id.eq(&inv.account_id),
                    memberships::user_id.eq(&user),
                    memberships::role.eq(&inv.role),
                    memberships::created_at.eq(now),
                ))
                .execute(c)
                .await?;
            bump_version!(c, &inv.account_id, now);
            Ok(invitations::table
                .filter(invitations::id.eq(&inv.id))
                .select(InvitationRow::as_select())
                .first(c)
                .await?)
        })?;
        row.into_invitation()
    }

    // --- projects ----------------------------------------------------------------------------

    /// Creates a registry project named `name` owned by `account`, both rows in one
    /// transaction (nothing is half-made). The name is unique across the registry
    /// ([`StoreError::Conflict`]); the caller validates its form.
    pub async fn create_account_project(
        &self,
        account: AccountId,
        name: &str,
    ) -> Result<(ProjectId, Timestamp)> {
        let id = account.to_string();
        let project = ProjectId::new();
        let (pid, name) = (project.to_string(), name.to_owned());
        let now = self.db.now();
        let micros = to_micros(now);
        write_tx!(self, lock = Some(id.clone()), |c| {
            writable_account!(c, &id);
            diesel::insert_into(projects::table)
                .values((
                    projects::id.eq(&pid),
                    projects::name.eq(&name),
                    projects::created_at.eq(micros),
                ))
                .execute(c)
                .await
                .map_err(|e| match corral_registry::db_error(e) {
                    RegistryError::Conflict { .. } => StoreError::Conflict {
                        what: "a project with this name exists",
                    },
                    other => other.into(),
                })?;
            diesel::insert_into(project_accounts::table)
                .values((
                    project_accounts::project_id.eq(&pid),
                    project_accounts::account_id.eq(&id),
                ))
                .execute(c)
                .await?;
            bump_version!(c, &id, micros);
            Ok(())
        })?;
        Ok((project, now))
    }

    /// Gives `account` the project named `name` if no account owns it (the `default` project
    /// `corral serve` makes at its first start, outside any account): its id, or `None` when
    /// there is no such unowned project.
    pub async fn adopt_unowned_project(
        &self,
        account: AccountId,
        name: &str,
    ) -> Result<Option<ProjectId>> {
        let id = account.to_string();
        let name = name.to_owned();
        let micros = to_micros(self.db.now());
        let adopted: Option<String> = write_tx!(self, lock = Some(id.clone()), |c| {
            writable_account!(c, &id);
            // Names are unique: at most one project has it.
            let found: Option<String> = projects::table
                .filter(projects::name.eq(&name))
                .select(projects::id)
                .first(c)
                .await
                .optional()?;
            let Some(pid) = found else {
                return Ok(None);
            };
            let owned: Option<String> = project_accounts::table
                .filter(project_accounts::project_id.eq(&pid))
                .select(project_accounts::project_id)
                .first(c)
                .await
                .optional()?;
            if owned.is_some() {
                return Ok(None);
            }
            diesel::insert_into(project_accounts::table)
                .values((
                    project_accounts::project_id.eq(&pid),
                    project_accounts::account_id.eq(&id),
                ))
                .execute(c)
                .await?;
            bump_version!(c, &id, micros);
            Ok(Some(pid))
        })?;
        adopted
            .map(|p| p.parse().map_err(|_| internal("project id")))
            .transpose()
    }

    /// Which account owns `project` (none for CLI-made projects).
    pub async fn project_ownership(&self, project: ProjectId) -> Result<Option<ProjectOwnership>> {
        let project = project.to_string();
        let row: Option<OwnershipRow> = read!(self, |c| {
            Ok(project_accounts::table
                .filter(project_accounts::project_id.eq(&project))
                .select(OwnershipRow::as_select())
                .first(c)
                .await
                .optional()?)
        })?;
        row.map(OwnershipRow::into_ownership).transpose()
    }

    /// The account's projects not yet deleted, oldest first by id.
    pub async fn account_projects(&self, account: AccountId) -> Result<Vec<ProjectOwnership>> {
        let account = account.to_string();
        let rows: Vec<OwnershipRow> = read!(self, |c| {
            Ok(project_accounts::table
                .filter(project_accounts::account_id.eq(&account))
                .filter(project_accounts::deleted_at.is_null())
                .order(project_accounts::project_id.asc())
                .select(OwnershipRow::as_select())
                .load(c)
                .await?)
        })?;
        rows.into_iter().map(OwnershipRow::into_ownership).collect()
    }

    /// [`StoreError::AccountDeleting`] while `project` or its account is being deleted;
    /// [`StoreError::NotFound`] when it has no account or was deleted. Read in a write
    /// transaction so that it waits for a deletion being started.
    pub async fn check_project_writable(&self, project: ProjectId) -> Result<ProjectOwnership> {
        let project = project.to_string();
        let row: OwnershipRow = write_tx!(self, lock = None, |c| {
            Ok(writable_project!(c, &project))
        })?;
        row.into_ownership()
    }

    /// Starts deleting a project (the deletion worker does the rest).
    pub async fn start_project_deletion(&self, project: ProjectId) -> Result<ProjectOwnership> {
        let project = project.to_string();
        let now = to_micros(self.db.now());
        let row: OwnershipRow = write_tx!(self, lock = None, |c| {
            let row = writable_project!(c, &project);
            diesel::update(
                project_accounts::table.filter(project_accounts::project_id.eq(&project)),
            )
            .set(project_accounts::deleting_at.eq(Some(now)))
            .execute(c)
            .await?;
            bump_version!(c, &row.account_id, now);
            Ok(project_accounts::table
                .filter(project_accounts::project_id.eq(&project))
                .select(OwnershipRow::as_select())
                .first(c)
                .await?)
        })?;
        row.into_ownership()
    }

    // --- deletion ----------------------------------------------------------------------------

    /// Accounts whose deletion was requested and has not finished.
    pub async fn accounts_being_deleted(&self) -> Result<Vec<Account>> {
        let rows: Vec<AccountRow> = read!(self, |c| {
            Ok(accounts::table
                .filter(accounts::deleting_at.is_not_null())
                .filter(accounts::deleted_at.is_null())
                .order(accounts::deleting_at.asc())
                .select(AccountRow::as_select())
                .load(c)
                .await?)
        })?;
        rows.into_iter().map(AccountRow::into_account).collect()
    }

    /// Projects not yet deleted whose own deletion, or their account's, was requested.
    pub async fn projects_being_deleted(&self) -> Result<Vec<ProjectOwnership>> {
        let rows: Vec<OwnershipRow> = read!(self, |c| {
            Ok(project_accounts::table
                .inner_join(accounts::table)
                .filter(project_accounts::deleted_at.is_null())
                .filter(
                    project_accounts::deleting_at
                        .is_not_null()
                        .or(accounts::deleting_at.is_not_null()),
                )
                .order(project_accounts::project_id.asc())
                .select(OwnershipRow::as_select())
                .load(c)
                .await?)
        })?;
        rows.into_iter().map(OwnershipRow::into_ownership).collect()
    }

    /// Marks a project's deletion finished (idempotent: a finished one keeps its time).
    pub async fn finish_project_deletion(&self, project: ProjectId) -> Result<()> {
        let project = project.to_string();
        let now = to_micros(self.db.now());
        read!(self, |c| {
            diesel::update(
                project_accounts::table
                    .filter(project_accounts::project_id.eq(&project))
                    .filter(project_accounts::deleted_at.is_null()),
            )
            .set(project_accounts::deleted_at.eq(Some(now)))
            .execute(c)
            .await?;
            Ok(())
        })
    }

    /// Finishes an account's deletion once every project of it is deleted: removes its
    /// memberships, revokes its pending invitations and sets `deleted_at`, in one
    /// transaction. [`StoreError::Conflict`] while a project is not yet deleted.
    pub async fn finish_account_deletion(&self, account: AccountId) -> Result<()> {
        let id = account.to_string();
        let now = to_micros(self.db.now());
        write_tx!(self, lock = Some(id.clone()), |c| {
            let open: i64 = project_accounts::table
                .filter(project_accounts::account_id.eq(&id))
                .filter(project_accounts::deleted_at.is_null())
                .count()
                .get_result(c)
                .await?;
            if open > 0 {
                return Err(StoreError::Conflict {
                    what: "the account still has projects being deleted",
                });
            }
            diesel::delete(memberships::table.filter(memberships::account_id.eq(&id)))
                .execute(c)
                .await?;
            diesel::update(
                invitations::table
                    .filter(invitations::account_id.eq(&id))
                    .filter(invitations::accepted_at.is_null())
                    .filter(invitations::revoked_at.is_null()),
            )
            .set(invitations::revoked_at.eq(Some(now)))
            .execute(c)
            .await?;
            diesel::update(
                accounts::table
                    .filter(accounts::id.eq(&id))
                    .filter(accounts::deleted_at.is_null()),
            )
            .set((
                accounts::deleted_at.eq(Some(now)),
                accounts::updated_at.eq(now),
            ))
            .execute(c)
            .await?;
            Ok(())
        })
    }

    // --- test support ------------------------------------------------------------------------

    /// Test support: a user with `email` and their personal account (named after the email),
    /// inserted directly.
    #[cfg(feature = "testing")]
    pub async fn insert_test_user(&self, email: &str) -> Result<(UserId, AccountId)> {
        let user = UserId::new();
        let account = AccountId::new();
        let (u, a, email) = (user.to_string(), account.to_string(), email.to_owned());
        let now = to_micros(self.db.now());
        write_tx!(self, lock = None, |c| {
            diesel::insert_into(accounts::table)
                .values(&AccountRow {
                    id: a.clone(),
                    name: email.clone(),
                    kind: AccountKind::Personal.as_str().to_owned(),
                    version: 1,
                    created_at: now,
                    updated_at: now,
                    deleting_at: None,
                    deleted_at: None,
                })
                .execute(c)
                .await?;
            diesel::insert_into(users::table)
                .values((
                    users::id.eq(&u),
                    users::email.eq(&email),
                    users::personal_account_id.eq(&a),
                    users::created_at.eq(now),
                    users::updated_at.eq(now),
                ))
                .execute(c)
                .await?;
            diesel::insert_into(memberships::table)
                .values((
                    memberships::account_id.eq(&a),
                    memberships::user_id.eq(&u),
                    memberships::role.eq(Role::Owner.as_str()),
                    memberships::created_at.eq(now),
                ))
                .execute(c)
                .await?;
            Ok(())
        })?;
        Ok((user, account))
    }
}
