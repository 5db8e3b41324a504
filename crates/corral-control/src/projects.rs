//! Projects of an account, their API keys, and the read-only view of their sandboxes.
//!
//! A project is a registry project plus a `project_accounts` row, inserted in one
//! transaction. Project names stay unique across the whole registry (the sandbox API and the
//! CLI name projects without an account), so a name taken by any account, or by a CLI-made
//! project, is `control_plane_conflict`.

use corral_control_store::{AccountId, ProjectOwnership, Role};
use corral_domain::{Sandbox, SandboxPage, Timestamp};
use corral_registry::{ApiKeyInfo, ApiKeyOptions, ProjectId};
use corral_service::{Caller, InlineAccess};
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};

use crate::accounts::{needs, validate_name};
use crate::error::Result;
use crate::{Actor, Control, ControlError};

/// Longest project name, in characters (the registry's limit).
pub const MAX_PROJECT_NAME: usize = 255;

/// A project of an account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ProjectView {
    /// `prj_<ulid>`.
    pub id: String,
    /// Its name, unique across the server.
    pub name: String,
    /// The owning account (`acc_<ulid>`).
    pub account_id: String,
    /// When it was created.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When its deletion (or its account's) was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub deleting_at: Option<Timestamp>,
}

/// `POST /accounts/{account}/projects` and `PATCH /projects/{project}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ProjectName {
    /// 1–255 characters, no control characters, unused on this server.
    pub name: String,
}

/// Longest API key name, in characters.
pub const MAX_KEY_NAME: usize = 64;
/// How far ahead a key's expiry may be.
pub const MAX_KEY_LIFETIME_DAYS: i64 = 2 * 366;

/// What a new API key is issued with (`POST /projects/{project}/keys`, all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOptions {
    /// A name shown in lists: trimmed; a blank name is no name; at most [`MAX_KEY_NAME`]
    /// characters, no control characters.
    pub name: Option<String>,
    /// When the key stops authenticating: in the future, at most
    /// [`MAX_KEY_LIFETIME_DAYS`] days ahead; `None` for never.
    pub expires_at: Option<Timestamp>,
}

/// The optional JSON body of `POST /projects/{project}/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct NewKey {
    /// A name shown in lists: trimmed, at most 64 characters, no control characters; a blank
    /// name is no name.
    #[serde(default)]
    #[cfg_attr(
        feature = "utoipa",
        schema(max_length = 64, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")
    )]
    pub name: Option<String>,
    /// When the key stops authenticating (RFC 3339): in the future and at most two years
    /// ahead. Absent: never.
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<String>,
}

impl TryFrom<NewKey> for KeyOptions {
    type Error = ControlError;

    /// Parses the expiry; the rest is checked by [`Control::create_key`].
    fn try_from(body: NewKey) -> Result<Self> {
        let expires_at = body
            .expires_at
            .map(|raw| {
                chrono::DateTime::parse_from_rfc3339(raw.trim())
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .map_err(|_| {
                        ControlError::invalid(
                            "`expiresAt` must be an RFC 3339 date-time, like 2027-01-31T00:00:00Z",
                        )
                    })
            })
            .transpose()?;
        Ok(Self {
            name: body.name,
            expires_at,
        })
    }
}

impl KeyOptions {
    /// Options whose expiry is `days` days after `now` (`None`: never), for the forms and the
    /// CLI that ask for a lifetime rather than a date.
    #[must_use]
    pub fn lifetime(name: Option<String>, days: Option<u32>, now: Timestamp) -> Self {
        Self {
            name,
            expires_at: days.map(|d| now + chrono::Duration::days(i64::from(d))),
        }
    }

    /// The options as they are stored: the name trimmed (a blank one is none) and at most
    /// [`MAX_KEY_NAME`] characters without control characters; the expiry after `now` and
    /// at most [`MAX_KEY_LIFETIME_DAYS`] days ahead. Anything else is `invalid_request`.
    pub fn checked(self, now: Timestamp) -> Result<Self> {
        Ok(Self {
            name: key_name(self.name)?,
            expires_at: key_expiry(self.expires_at, now)?,
        })
    }
}

/// The checked name: trimmed, blank as none.
fn key_name(name: Option<String>) -> Result<Option<String>> {
    let Some(name) = name else { return Ok(None) };
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    if trimmed.chars().count() > MAX_KEY_NAME || trimmed.chars().any(char::is_control) {
        return Err(ControlError::invalid(format!(
            "`name` must be at most {MAX_KEY_NAME} characters without control characters"
        )));
    }
    Ok(Some(trimmed.to_owned()))
}

/// The checked expiry: after `now`, at most [`MAX_KEY_LIFETIME_DAYS`] days ahead.
fn key_expiry(at: Option<Timestamp>, now: Timestamp) -> Result<Option<Timestamp>> {
    let Some(at) = at else { return Ok(None) };
    if at <= now {
        return Err(ControlError::invalid("`expiresAt` must be in the future"));
    }
    if at > now + chrono::Duration::days(MAX_KEY_LIFETIME_DAYS) {
        return Err(ControlError::invalid(format!(
            "`expiresAt` must be at most {MAX_KEY_LIFETIME_DAYS} days ahead"
        )));
    }
    Ok(Some(at))
}

/// An API key (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct KeyView {
    /// The key's public id (between `crl_` and the next `_`).
    pub key_id: String,
    /// Its name, if it was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was issued.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it stops (or stopped) authenticating; absent if never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<Timestamp>,
    /// Whether it has expired (an expired key is refused like an unknown one).
    #[serde(default)]
    pub expired: bool,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub revoked_at: Option<Timestamp>,
    /// When it last authenticated a request, to within a minute; absent if never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = DateTime))]
    pub last_used_at: Option<Timestamp>,
}

impl KeyView {
    /// The view of a stored key as of `now` (which decides [`KeyView::expired`]).
    #[must_use]
    pub fn at(k: ApiKeyInfo, now: Timestamp) -> Self {
        Self {
            expired: k.is_expired(now),
            key_id: k.key_id,
            name: k.name,
            created_at: k.created_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            last_used_at: k.last_used_at,
        }
    }
}

/// A freshly issued key: the only answer that carries the full key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CreatedKey {
    /// The stored part.
    #[serde(flatten)]
    pub info: KeyView,
    /// The full key, `crl_<keyid>_<secret>`: shown once, never stored or logged.
    pub key: String,
}

impl std::fmt::Debug for CreatedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedKey")
            .field("info", &self.info)
            .field("key", &"[redacted]")
            .finish()
    }
}

fn no_such(what: &str) -> ControlError {
    ControlError::invalid(format!("no such {what}"))
}

impl Control {
    /// The project's ownership after the membership and role checks: "no such project" for
    /// a missing, deleted, CLI-made or other account's project.
    pub(crate) async fn project_role(
        &self,
        actor: &Actor,
        project: ProjectId,
        needed: Role,
    ) -> Result<ProjectOwnership> {
        let owned = self
            .store()
            .project_ownership(project)
            .await?
            .filter(|o| o.deleted_at.is_none())
            .ok_or_else(|| no_such("project"))?;
        let (_, role) = self
            .store()
            .membership(owned.account_id, actor.user_id)
            .await?
            .ok_or_else(|| no_such("project"))?;
        if !role.at_least(needed) {
            return Err(needs(needed));
        }
        Ok(owned)
    }

    /// For a mutation of `project`: the legal gate, the checks of
    /// [`Control::project_role`], then `account_deleting` while it or its account is being
    /// deleted.
    pub(crate) async fn project_for_change(
        &self,
        actor: &Actor,
        project: ProjectId,
        needed: Role,
    ) -> Result<ProjectOwnership> {
        self.require_legal(actor).await?;
        self.project_role(actor, project, needed).await?;
        match self.store().check_project_writable(project).await {
            Ok(owned) => Ok(owned),
            Err(e) => Err(not_found_as_project(e.into())),
        }
    }

    /// Re-checks, after a key or profile was written, that `project` was not meanwhile put up
    /// for deletion: the worker lists keys and profiles after the deletion started, so what
    /// this check lets through is seen by it, and what it catches the caller undoes.
    pub(crate) async fn still_writable(&self, project: ProjectId) -> Result<()> {
        self.store()
            .check_project_writable(project)
            .await
            .map(|_| ())
            .map_err(|e| not_found_as_project(e.into()))
    }

    async fn project_view(&self, owned: &ProjectOwnership) -> Result<ProjectView> {
        let project = self
            .registry()
            .project(owned.project_id)
            .await
            .map_err(|e| not_found_as_project(e.into()))?;
        let deleting_at = match owned.deleting_at {
            Some(t) => Some(t),
            None => self
                .store()
                .account(owned.account_id)
                .await?
                .and_then(|a| a.deleting_at),
        };
        Ok(ProjectView {
            id: project.id.to_string(),
            name: project.name,
            account_id: owned.account_id.to_string(),
            created_at: project.created_at,
            deleting_at,
        })
    }

    /// `GET /accounts/{account}/projects` (member): projects not yet deleted, by id.
    pub async fn list_projects(
        &self,
        actor: &Actor,
        account: AccountId,
    ) -> Result<Vec<ProjectView>> {
        self.account_role(actor, account, Role::Member).await?;
        let mut views = Vec::new();
        for owned in self.store().account_projects(account).await? {
            views.push(self.project_view(&owned).await?);
        }
        Ok(views)
    }

    /// `POST /accounts/{account}/projects` (admin): a registry project owned by the account.
    pub async fn create_project(
        &self,
        actor: &Actor,
        account: AccountId,
        request: ProjectName,
    ) -> Result<ProjectView> {
        self.require_legal(actor).await?;
        self.account_role(actor, account, Role::Admin).await?;
        let name = validate_name(&request.name, MAX_PROJECT_NAME)?;
        self.admit_creation(actor)?;
        let (project, created_at) = self
            .store()
            .create_account_project(account, &name)
            .await
            .map_err(|e| match ControlError::from(e) {
                ControlError::Invalid { message } if message.starts_with("no such ") => {
                    no_such("account")
                }
                other => other,
            })?;
        self.audit(
            actor,
            account,
            "project.create",
            project.to_string(),
            serde_json::json!({ "name": name }),
        )
        .await?;
        Ok(ProjectView {
            id: project.to_string(),
            name,
            account_id: account.to_string(),
            created_at,
            deleting_at: None,
        })
    }

    /// `PATCH /projects/{project}` (admin).
    pub async fn rename_project(
        &self,
        actor: &Actor,
        project: ProjectId,
        request: ProjectName,
    ) -> Result<ProjectView> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let name = validate_name(&request.name, MAX_PROJECT_NAME)?;
        self.registry()
            .rename_project(project, &name)
            .await
            .map_err(|e| match ControlError::from(e) {
                ControlError::Conflict { .. } => ControlError::Conflict {
                    message: "a project with this name exists".to_owned(),
                },
                other => not_found_as_project(other),
            })?;
        self.audit(
            actor,
            owned.account_id,
            "project.rename",
            project.to_string(),
            serde_json::json!({ "name": name }),
        )
        .await?;
        self.project_view(&owned).await
    }

    /// `DELETE /projects/{project}` (admin): starts deleting the project; the deletion worker
    /// deletes its sandboxes, revokes its keys and erases its profiles. Answer 202.
    pub async fn delete_project(&self, actor: &Actor, project: ProjectId) -> Result<ProjectView> {
        self.project_for_change(actor, project, Role::Admin).await?;
        let owned = self
            .store()
            .start_project_deletion(project)
            .await
            .map_err(|e| not_found_as_project(e.into()))?;
        self.audit(
            actor,
            owned.account_id,
            "project.delete",
            project.to_string(),
            serde_json::json!({}),
        )
        .await?;
        self.project_view(&owned).await
    }

    /// `GET /projects/{project}/keys` (admin): revoked and expired ones included, newest
    /// first.
    pub async fn list_keys(&self, actor: &Actor, project: ProjectId) -> Result<Vec<KeyView>> {
        self.project_role(actor, project, Role::Admin).await?;
        let now = self.registry().database().now();
        Ok(self
            .registry()
            .list_api_keys(project)
            .await?
            .into_iter()
            .map(|k| KeyView::at(k, now))
            .collect())
    }

    /// `POST /projects/{project}/keys` (admin): a new key, optionally named and expiring,
    /// returned in full this once. A bad name or expiry is `invalid_request`.
    pub async fn create_key(
        &self,
        actor: &Actor,
        project: ProjectId,
        options: KeyOptions,
    ) -> Result<CreatedKey> {
        let now = self.registry().database().now();
        let KeyOptions { name, expires_at } = options.checked(now)?;
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        self.admit_creation(actor)?;
        let issued = self
            .registry()
            .issue_api_key_with(project, ApiKeyOptions { name, expires_at })
            .await?;
        if let Err(e) = self.still_writable(project).await {
            self.registry().revoke_api_key(&issued.info.key_id).await?;
            return Err(e);
        }
        self.audit(
            actor,
            owned.account_id,
            "key.create",
            project.to_string(),
            serde_json::json!({
                "keyId": issued.info.key_id,
                "name": issued.info.name,
                "expiresAt": issued.info.expires_at,
            }),
        )
        .await?;
        Ok(CreatedKey {
            key: issued.key.expose_secret().to_owned(),
            info: KeyView::at(issued.info, now),
        })
    }

    /// `DELETE /projects/{project}/keys/{key}` (admin): revokes one of the project's keys
    /// (idempotent); another project's key is "no such key".
    pub async fn revoke_key(
        &self,
        actor: &Actor,
        project: ProjectId,
        key_id: &str,
    ) -> Result<KeyView> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let ours = self
            .registry()
            .list_api_keys(project)
            .await?
            .into_iter()
            .any(|k| k.key_id == key_id);
        if !ours {
            return Err(no_such("key"));
        }
        let revoked = self.registry().revoke_api_key(key_id).await?;
        self.audit(
            actor,
            owned.account_id,
            "key.revoke",
            project.to_string(),
            serde_json::json!({ "keyId": key_id }),
        )
        .await?;
        Ok(KeyView::at(revoked, self.registry().database().now()))
    }

    /// `GET /projects/{project}/sandboxes` (member): one page of the registry, newest first,
    /// tombstones included; never calls a provider.
    pub async fn list_sandboxes(
        &self,
        actor: &Actor,
        project: ProjectId,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SandboxPage> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .list(&Caller::trusted(project), cursor, limit)
            .await?)
    }

    /// `GET /projects/{project}/sandboxes/{sandbox}` (member): the sandbox API's get (which
    /// refreshes a live sandbox's status at its provider with the project's profile).
    pub async fn get_sandbox(
        &self,
        actor: &Actor,
        project: ProjectId,
        id: &str,
    ) -> Result<Sandbox> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .service()
            .get(&Caller::trusted(project), InlineAccess::default(), id)
            .await?)
    }
}

/// Any "no such …" from a lower layer, for a project route, is "no such project".
fn not_found_as_project(e: ControlError) -> ControlError {
    match e {
        ControlError::Invalid { message } if message.starts_with("no such ") => no_such("project"),
        other => other,
    }
}
