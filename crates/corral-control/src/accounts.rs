//! Accounts, members, invitations, ownership transfer and the audit log.
//!
//! Decisions the design leaves open (recorded in `docs/control-plane.md`):
//! - organization names are not unique, except that one user cannot own two live
//!   organizations of the same name (`control_plane_conflict`): the likely double submit;
//! - a personal account may be renamed (its immutability is about ownership and membership);
//! - an invitation is accepted only by a signed-in user whose email is the invited one;
//!   another user's attempt is `control_plane_conflict` (the token is valid, the request
//!   conflicts with it), like a used invitation or an existing membership;
//! - an unknown, revoked or expired invitation token is `invalid_request` "no such invitation".

use corral_control_store::{
    Account, AccountId, AccountKind, AuditEvent, Invitation, InvitationId, Member, NewAuditEvent,
    NewInvitation, Role, UserId,
};
use corral_domain::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::mail::MailPurpose;
use crate::{Actor, Control, ControlError};

/// Longest account name, in characters.
pub const MAX_ACCOUNT_NAME: usize = 100;
/// Most audit events one read returns.
pub const MAX_AUDIT_LIMIT: u32 = 500;

/// An account as its member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AccountView {
    /// `acc_<ulid>`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// `personal` or `organization`.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "organization"))]
    pub kind: AccountKind,
    /// The caller's role in it: `owner`, `admin` or `member`.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "owner"))]
    pub role: Role,
    /// Send it back when renaming; a stale one is `control_plane_conflict`.
    pub version: i64,
    /// When it was created.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When its deletion was requested (it is being deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub deleting_at: Option<Timestamp>,
}

impl AccountView {
    fn new(account: Account, role: Role) -> Self {
        Self {
            id: account.id.to_string(),
            name: account.name,
            kind: account.kind,
            role,
            version: account.version,
            created_at: account.created_at,
            deleting_at: account.deleting_at,
        }
    }
}

/// `POST /accounts`: a new organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CreateOrganization {
    /// 1–100 characters, no control characters.
    pub name: String,
}

/// `PATCH /accounts/{account}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RenameAccount {
    /// The new name.
    pub name: String,
    /// The version read; a stale one is `control_plane_conflict`.
    pub version: i64,
}

/// A member of an account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct MemberView {
    /// `usr_<ulid>`.
    pub user_id: String,
    /// Their email.
    pub email: String,
    /// Their role.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "admin"))]
    pub role: Role,
    /// When they joined.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub joined_at: Timestamp,
}

impl From<Member> for MemberView {
    fn from(m: Member) -> Self {
        Self {
            user_id: m.user_id.to_string(),
            email: m.email,
            role: m.role,
            joined_at: m.joined_at,
        }
    }
}

/// `PATCH /accounts/{account}/members/{user}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChangeRole {
    /// The new role.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "admin"))]
    pub role: Role,
}

/// `POST /accounts/{account}/ownership-transfer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TransferOwnership {
    /// The member (`usr_<ulid>`) who becomes an owner; the caller becomes an admin.
    pub user_id: String,
}

/// A pending invitation (never its token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct InvitationView {
    /// `inv_<ulid>`.
    pub id: String,
    /// The account to join.
    pub account_id: String,
    /// The invited email.
    pub email: String,
    /// The role on acceptance.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "member"))]
    pub role: Role,
    /// Who invited (`usr_<ulid>`).
    pub invited_by: String,
    /// When it was sent.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it stops working.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub expires_at: Timestamp,
}

/// What an invitation offers, shown to the invited user before they accept it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvitationPreview {
    /// The organization's name.
    pub account_name: String,
    /// Who invited (absent if that user no longer exists).
    pub inviter_email: Option<String>,
    /// The role on acceptance.
    pub role: Role,
}

impl From<Invitation> for InvitationView {
    fn from(i: Invitation) -> Self {
        Self {
            id: i.id.to_string(),
            account_id: i.account_id.to_string(),
            email: i.email,
            role: i.role,
            invited_by: i.invited_by.to_string(),
            created_at: i.created_at,
            expires_at: i.expires_at,
        }
    }
}

/// `POST /accounts/{account}/invitations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CreateInvitation {
    /// Who to invite.
    pub email: String,
    /// Their role on acceptance (`admin` or `member`; owners are made by transfer or role
    /// change).
    #[cfg_attr(feature = "utoipa", schema(value_type = String, example = "member"))]
    pub role: Role,
}

/// `POST /invitations/accept`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AcceptInvitation {
    /// The token from the invitation link.
    pub token: String,
}

impl std::fmt::Debug for AcceptInvitation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcceptInvitation")
            .field("token", &"[redacted]")
            .finish()
    }
}

/// One audit-log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AuditEventView {
    /// `aud_<ulid>`.
    pub id: String,
    /// Who (`usr_<ulid>`); absent for the operator, background work and API keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The API key that acted (its public id, the part after `crl_`), for sandbox creates and
    /// deletes made through the sandbox API; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_api_key: Option<String>,
    /// What, e.g. `project.create`.
    pub action: String,
    /// To what, e.g. a project id.
    pub target: String,
    /// Non-secret details.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub detail: serde_json::Value,
    /// When.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
}

impl From<AuditEvent> for AuditEventView {
    fn from(e: AuditEvent) -> Self {
        // Only server code writes a detail, and only an API-key actor's event (no user) has an
        // `apiKeyId` in it (see `Control::audit_api_sandbox`).
        let actor_api_key = match e.actor {
            Some(_) => None,
            None => e
                .detail
                .get("apiKeyId")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
        };
        Self {
            id: e.id.to_string(),
            actor: e.actor.map(|a| a.to_string()),
            actor_api_key,
            action: e.action,
            target: e.target,
            detail: e.detail,
            created_at: e.created_at,
        }
    }
}

/// The subject of every invitation: nothing a user chose goes into a subject line.
pub const INVITATION_SUBJECT: &str = "You are invited to an organization on Corral";

/// The longest organization name quoted in a mail, in characters (longer is cut, with `…`).
const MAX_NAME_IN_MAIL: usize = 60;

/// A name chosen by a user, made safe to quote in a mail body: format characters (bidi
/// overrides, zero-width) dropped, at most [`MAX_NAME_IN_MAIL`] characters, and every `.`,
/// `:`, `/` and `@` between two non-blank characters bracketed (`example[.]com`), so no
/// mail client turns it into a link or an address.
pub fn neutralise(name: &str) -> String {
    let visible: Vec<char> = name
        .chars()
        .filter(|c| !c.is_control() && !is_format(*c))
        .collect();
    let cut = visible.len() > MAX_NAME_IN_MAIL;
    let visible = &visible[..visible.len().min(MAX_NAME_IN_MAIL)];
    let mut out = String::with_capacity(visible.len() + 8);
    for (i, c) in visible.iter().enumerate() {
        let inside = i > 0
            && visible.get(i + 1).is_some_and(|n| !n.is_whitespace())
            && !visible[i - 1].is_whitespace();
        if inside && matches!(c, '.' | ':' | '/' | '@') {
            out.push('[');
            out.push(*c);
            out.push(']');
        } else {
            out.push(*c);
        }
    }
    if cut {
        out.push('…');
    }
    out
}

/// Unicode format characters (category Cf) that change how text reads without being seen:
/// bidi controls, zero-width characters, the BOM, soft hyphen.
fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `invalid_request` "this needs the <role> role in the account".
pub(crate) fn needs(role: Role) -> ControlError {
    ControlError::invalid(format!("this needs the {role} role in the account"))
}

fn no_such(what: &str) -> ControlError {
    ControlError::invalid(format!("no such {what}"))
}

/// Maps the store's "not found" to the route's answer, whatever the store called it.
fn not_found_as(what: &'static str) -> impl Fn(ControlError) -> ControlError {
    move |e| match e {
        ControlError::Invalid { message } if message.starts_with("no such ") => no_such(what),
        other => other,
    }
}

pub(crate) fn validate_name(name: &str, max: usize) -> Result<String> {
    let trimmed = name.trim();
    if trimmed.is_empty() || trimmed.chars().count() > max || trimmed.chars().any(char::is_control)
    {
        return Err(ControlError::invalid(format!(
            "`name` must be 1–{max} characters without control characters"
        )));
    }
    Ok(trimmed.to_owned())
}

impl Control {
    /// The account and the caller's role in it, or "no such account" — the same answer for
    /// a missing account and one the caller is not a member of.
    pub(crate) async fn account_role(
        &self,
        actor: &Actor,
        account: AccountId,
        needed: Role,
    ) -> Result<(Account, Role)> {
        let (found, role) = self
            .store()
            .membership(account, actor.user_id)
            .await?
            .ok_or_else(|| no_such("account"))?;
        if !role.at_least(needed) {
            return Err(needs(needed));
        }
        Ok((found, role))
    }

    /// Records an audit event of `actor` in `account`. The change is made already, so a
    /// failure to record is logged and answered as an internal error.
    pub(crate) async fn audit(
        &self,
        actor: &Actor,
        account: AccountId,
        action: &str,
        target: String,
        detail: serde_json::Value,
    ) -> Result<()> {
        self.store()
            .record_audit(NewAuditEvent {
                account_id: Some(account),
                actor: Some(actor.user_id),
                action: action.to_owned(),
                target,
                detail,
            })
            .await?;
        Ok(())
    }

    /// `GET /accounts`: the caller's accounts, oldest first.
    pub async fn list_accounts(&self, actor: &Actor) -> Result<Vec<AccountView>> {
        Ok(self
            .store()
            .accounts_of(actor.user_id)
            .await?
            .into_iter()
            .map(|(a, r)| AccountView::new(a, r))
            .collect())
    }

    /// `POST /accounts`: a new organization, the caller its owner.
    pub async fn create_organization(
        &self,
        actor: &Actor,
        request: CreateOrganization,
    ) -> Result<AccountView> {
        self.require_legal(actor).await?;
        let name = validate_name(&request.name, MAX_ACCOUNT_NAME)?;
        self.admit_creation(actor)?;
        let account = self
            .store()
            .create_organization(actor.user_id, &name)
            .await?;
        self.audit(
            actor,
            account.id,
            "account.create",
            account.id.to_string(),
            serde_json::json!({ "name": account.name }),
        )
        .await?;
        Ok(AccountView::new(account, Role::Owner))
    }

    /// `PATCH /accounts/{account}`: renames (admin; personal accounts too).
    pub async fn rename_account(
        &self,
        actor: &Actor,
        account: AccountId,
        request: RenameAccount,
    ) -> Result<AccountView> {
        self.require_legal(actor).await?;
        let (_, role) = self.account_role(actor, account, Role::Admin).await?;
        let name = validate_name(&request.name, MAX_ACCOUNT_NAME)?;
        let renamed = self
            .store()
            .rename_account(account, &name, request.version)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("account"))?;
        self.audit(
            actor,
            account,
            "account.rename",
            account.to_string(),
            serde_json::json!({ "name": renamed.name }),
        )
        .await?;
        Ok(AccountView::new(renamed, role))
    }

    /// `DELETE /accounts/{account}`: starts deleting an organization (owner); the deletion
    /// worker finishes it. Answer 202 with the account, `deletingAt` set.
    pub async fn delete_account(&self, actor: &Actor, account: AccountId) -> Result<AccountView> {
        self.require_legal(actor).await?;
        let (_, role) = self.account_role(actor, account, Role::Owner).await?;
        let deleting = self
            .store()
            .start_account_deletion(account)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("account"))?;
        self.audit(
            actor,
            account,
            "account.delete",
            account.to_string(),
            serde_json::json!({}),
        )
        .await?;
        Ok(AccountView::new(deleting, role))
    }

    /// `GET /accounts/{account}/members` (member).
    pub async fn list_members(&self, actor: &Actor, account: AccountId) -> Result<Vec<MemberView>> {
        self.account_role(actor, account, Role::Member).await?;
        Ok(self
            .store()
            .members(account)
            .await?
            .into_iter()
            .map(MemberView::from)
            .collect())
    }

    /// `PATCH /accounts/{account}/members/{user}`: an owner may set any role; an admin may
    /// move others between `member` and `admin` (never touching an owner).
    pub async fn change_role(
        &self,
        actor: &Actor,
        account: AccountId,
        user: UserId,
        request: ChangeRole,
    ) -> Result<()> {
        self.require_legal(actor).await?;
        let (found, role) = self.account_role(actor, account, Role::Admin).await?;
        if found.kind == AccountKind::Personal {
            return Err(ControlError::PersonalAccountImmutable);
        }
        let target = self
            .store()
            .members(account)
            .await?
            .into_iter()
            .find(|m| m.user_id == user)
            .ok_or_else(|| no_such("member"))?;
        if role != Role::Owner && (request.role == Role::Owner || target.role == Role::Owner) {
            return Err(needs(Role::Owner));
        }
        self.store()
            .set_role(account, user, request.role)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("member"))?;
        self.audit(
            actor,
            account,
            "member.role",
            user.to_string(),
            serde_json::json!({ "from": target.role, "to": request.role }),
        )
        .await
    }

    /// `DELETE /accounts/{account}/members/{user}`: removes a member (admin; an owner to
    /// remove an owner), or leaves (any member, for themself).
    pub async fn remove_member(
        &self,
        actor: &Actor,
        account: AccountId,
        user: UserId,
    ) -> Result<()> {
        self.require_legal(actor).await?;
        let leaving = user == actor.user_id;
        let needed = if leaving { Role::Member } else { Role::Admin };
        let (found, role) = self.account_role(actor, account, needed).await?;
        if found.kind == AccountKind::Personal {
            return Err(ControlError::PersonalAccountImmutable);
        }
        if !leaving {
            let target = self
                .store()
                .members(account)
                .await?
                .into_iter()
                .find(|m| m.user_id == user)
                .ok_or_else(|| no_such("member"))?;
            if target.role == Role::Owner && role != Role::Owner {
                return Err(needs(Role::Owner));
            }
        }
        self.store()
            .remove_member(account, user)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("member"))?;
        let action = if leaving {
            "member.leave"
        } else {
            "member.remove"
        };
        self.audit(
            actor,
            account,
            action,
            user.to_string(),
            serde_json::json!({}),
        )
        .await
    }

    /// `POST /accounts/{account}/ownership-transfer` (owner): `to` becomes an owner, the
    /// caller an admin, in one transaction.
    pub async fn transfer_ownership(
        &self,
        actor: &Actor,
        account: AccountId,
        request: TransferOwnership,
    ) -> Result<()> {
        self.require_legal(actor).await?;
        let (found, _) = self.account_role(actor, account, Role::Owner).await?;
        if found.kind == AccountKind::Personal {
            return Err(ControlError::PersonalAccountImmutable);
        }
        let to: UserId = request.user_id.parse().map_err(|_| no_such("member"))?;
        if to == actor.user_id {
            return Err(ControlError::invalid(
                "ownership can only be transferred to another member",
            ));
        }
        self.store()
            .transfer_ownership(account, actor.user_id, to)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("member"))?;
        self.audit(
            actor,
            account,
            "account.transfer_ownership",
            to.to_string(),
            serde_json::json!({ "from": actor.user_id.to_string() }),
        )
        .await
    }

    /// `GET /accounts/{account}/invitations` (admin): the pending ones.
    pub async fn list_invitations(
        &self,
        actor: &Actor,
        account: AccountId,
    ) -> Result<Vec<InvitationView>> {
        self.account_role(actor, account, Role::Admin).await?;
        Ok(self
            .store()
            .pending_invitations(account)
            .await?
            .into_iter()
            .map(InvitationView::from)
            .collect())
    }

    /// `POST /accounts/{account}/invitations` (admin; an owner to invite an owner): stores
    /// the invitation (its token only as a SHA-256 hash) and mails the link
    /// `<public_url>/console/invitations/accept?token=…`.
    pub async fn invite(
        &self,
        actor: &Actor,
        account: AccountId,
        request: CreateInvitation,
    ) -> Result<InvitationView> {
        self.require_legal(actor).await?;
        let (found, role) = self.account_role(actor, account, Role::Admin).await?;
        if found.kind == AccountKind::Personal {
            return Err(ControlError::PersonalAccountImmutable);
        }
        if request.role == Role::Owner && role != Role::Owner {
            return Err(needs(Role::Owner));
        }
        let email = crate::identity::normalize_email(&request.email)?;
        // Limits first, so a refused invitation leaves nothing behind.
        self.admit_mail(
            MailPurpose::Invitation {
                account,
                inviter: actor.user_id,
            },
            &email,
        )?;
        let (token, token_hash) = crate::token::new_token()?;
        let ttl = chrono::Duration::from_std(self.config().invitation_ttl)
            .map_err(|_| ControlError::internal("the invitation lifetime is out of range"))?;
        let invitation = self
            .store()
            .create_invitation(NewInvitation {
                account_id: account,
                email: email.clone(),
                role: request.role,
                token_hash,
                invited_by: actor.user_id,
                expires_at: self.store().now() + ttl,
            })
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("account"))?;
        self.audit(
            actor,
            account,
            "invitation.create",
            invitation.id.to_string(),
            serde_json::json!({ "email": email, "role": request.role }),
        )
        .await?;
        let link = format!(
            "{}/console/invitations/accept?token={token}",
            self.config().public_url.trim_end_matches('/')
        );
        // The subject is fixed; the organization's name, which its admins chose, appears only
        // in the body, quoted and neutralised so that no mail client makes a link of it.
        let body = format!(
            "{} invited you to join the organization \"{}\" on Corral as {}.\n\nAccept within {} days, signed in as {email}:\n{link}\n\nIf you did not expect this, ignore this mail.\n",
            actor.email,
            neutralise(&found.name),
            request.role,
            self.config().invitation_ttl.as_secs() / 86_400,
        );
        self.deliver(&email, INVITATION_SUBJECT, &body).await?;
        Ok(invitation.into())
    }

    /// `DELETE /accounts/{account}/invitations/{invitation}` (admin).
    pub async fn revoke_invitation(
        &self,
        actor: &Actor,
        account: AccountId,
        invitation: InvitationId,
    ) -> Result<()> {
        self.require_legal(actor).await?;
        self.account_role(actor, account, Role::Admin).await?;
        self.store()
            .revoke_invitation(account, invitation)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("invitation"))?;
        self.audit(
            actor,
            account,
            "invitation.revoke",
            invitation.to_string(),
            serde_json::json!({}),
        )
        .await
    }

    /// What an invitation link offers the signed-in user, before they accept it: the
    /// organization, who invited them and the role. `None` when the token names no pending
    /// invitation for this user's email (the accept answers why).
    pub async fn invitation_preview(
        &self,
        actor: &Actor,
        token: &str,
    ) -> Result<Option<InvitationPreview>> {
        let Some(hash) = crate::token::hash_token(token) else {
            return Ok(None);
        };
        let Some(inv) = self.store().pending_invitation_by_token(&hash).await? else {
            return Ok(None);
        };
        if inv.email != actor.email {
            return Ok(None);
        }
        let Some(account) = self.store().account(inv.account_id).await? else {
            return Ok(None);
        };
        let inviter = self
            .store()
            .user_by_id(inv.invited_by)
            .await?
            .map(|u| u.email);
        Ok(Some(InvitationPreview {
            account_name: account.name,
            inviter_email: inviter,
            role: inv.role,
        }))
    }

    /// `POST /invitations/accept`: the signed-in user joins the account the token invites
    /// to, once, if the invitation was sent to their email (else `control_plane_conflict`).
    pub async fn accept_invitation(
        &self,
        actor: &Actor,
        request: AcceptInvitation,
    ) -> Result<AccountView> {
        self.require_legal(actor).await?;
        let hash = crate::token::hash_token(&request.token).ok_or_else(|| no_such("invitation"))?;
        let invitation = self
            .store()
            .accept_invitation(&hash, actor.user_id, &actor.email)
            .await
            .map_err(ControlError::from)
            .map_err(not_found_as("invitation"))?;
        self.audit(
            actor,
            invitation.account_id,
            "invitation.accept",
            invitation.id.to_string(),
            serde_json::json!({ "role": invitation.role }),
        )
        .await?;
        let (account, role) = self
            .store()
            .membership(invitation.account_id, actor.user_id)
            .await?
            .ok_or_else(|| no_such("account"))?;
        Ok(AccountView::new(account, role))
    }

    /// `GET /accounts/{account}/audit` (owner): the newest `limit` events (1–500, default
    /// 100), newest first.
    pub async fn audit_log(
        &self,
        actor: &Actor,
        account: AccountId,
        limit: Option<u32>,
    ) -> Result<Vec<AuditEventView>> {
        let limit = limit.unwrap_or(100);
        if !(1..=MAX_AUDIT_LIMIT).contains(&limit) {
            return Err(ControlError::invalid(format!(
                "`limit` must be from 1 to {MAX_AUDIT_LIMIT}"
            )));
        }
        self.account_role(actor, account, Role::Owner).await?;
        Ok(self
            .store()
            .audit_events(account, i64::from(limit))
            .await?
            .into_iter()
            .map(AuditEventView::from)
            .collect())
    }
}
