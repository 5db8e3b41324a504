//! A project's provider profiles: what they lack before they can serve (readiness), the
//! stored deep-verification results, and connecting, replacing, removing and testing them.

use corral_control_store::Role;
use corral_domain::{Provider, ProviderContext, Timestamp};
use corral_registry::{ProfileInput, ProjectId, ProviderProfile, RegistryError, Verification};
use corral_service::error::ServiceError;
use secrecy::SecretString;
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::Result;
use crate::{Actor, Control, ControlError};

/// Largest accepted `settings` object, serialized, in bytes.
pub const MAX_SETTINGS_BYTES: usize = 16 * 1024;
/// Longest accepted context field or credential, in bytes.
pub const MAX_FIELD_BYTES: usize = 8 * 1024;

/// What a profile lacks before it can serve requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// Nothing is missing and no stored verification failed.
    pub ready: bool,
    /// What is missing: `provider` (this server does not configure the provider),
    /// `credential`, or a context field (`teamId`, `projectId`, `workspace`, `bridgeUrl` —
    /// the latter unless the operator configured a bridge of their own).
    pub missing: Vec<String>,
    /// Operations whose last deep verification failed.
    pub failing_operations: Vec<String>,
}

/// The last deep verification of one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct VerificationView {
    /// The operation, as `Service::verify_profile` names it (`create`, `get`, `exec`,
    /// `write_file`, `read_file`, `delete`).
    pub operation: String,
    /// Whether the credential can do it.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// When it was checked.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub checked_at: Timestamp,
}

impl From<Verification> for VerificationView {
    fn from(v: Verification) -> Self {
        Self {
            operation: v.operation,
            ok: v.ok,
            reason: v.reason,
            remediation: v.remediation,
            checked_at: v.checked_at,
        }
    }
}

/// A stored profile (never its credential).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ProfileView {
    /// The provider.
    pub provider: Provider,
    /// Non-secret routing context.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub context: ProviderContext,
    /// Non-secret settings.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Whether a credential is stored.
    pub has_credential: bool,
    /// What it lacks.
    pub readiness: Readiness,
    /// The last deep verification, per operation (cleared when the profile is replaced).
    pub verifications: Vec<VerificationView>,
    /// When it was first stored.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it last changed.
    #[cfg_attr(feature = "utoipa", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
}

/// `PUT /projects/{project}/profiles/{provider}`: replaces the whole profile (and clears
/// its verifications).
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PutProfile {
    /// The provider credential, encrypted at rest and never shown again; absent for a
    /// provider that needs none.
    #[serde(default, deserialize_with = "secret")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, format = Password))]
    pub credential: Option<SecretString>,
    /// Non-secret routing context.
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub context: ProviderContext,
    /// Non-secret settings (never a secret).
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub settings: serde_json::Map<String, serde_json::Value>,
}

impl std::fmt::Debug for PutProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutProfile")
            .field(
                "credential",
                &self.credential.as_ref().map(|_| "[redacted]"),
            )
            .field("context", &self.context)
            .field("settings", &self.settings)
            .finish()
    }
}

fn secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(SecretString::from))
}

/// The context fields `provider` needs before it can serve (from the adapters: Vercel's
/// scope, Blaxel's workspace, a bridge's URL).
pub fn required_context(provider: Provider) -> &'static [&'static str] {
    match provider {
        Provider::Vercel => &["teamId", "projectId"],
        Provider::Blaxel => &["workspace"],
        p if p.is_bridge() => &["bridgeUrl"],
        _ => &[],
    }
}

/// What `profile` lacks on a server configuring `configured` providers.
pub fn readiness(profile: &ProviderProfile, configured: &[Provider]) -> Readiness {
    let provider = profile.provider;
    let mut missing = Vec::new();
    if !configured.contains(&provider) {
        missing.push("provider".to_owned());
    }
    if provider != Provider::Local && !profile.has_credential {
        missing.push("credential".to_owned());
    }
    let c = &profile.context;
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
    for field in required_context(provider) {
        let present = match *field {
            "teamId" => set(&c.team_id),
            "projectId" => set(&c.project_id),
            "workspace" => set(&c.workspace),
            "bridgeUrl" => set(&c.bridge_url),
            _ => true,
        };
        if !present {
            missing.push((*field).to_owned());
        }
    }
    let failing_operations: Vec<String> = profile
        .verifications
        .iter()
        .filter(|v| !v.ok)
        .map(|v| v.operation.clone())
        .collect();
    Readiness {
        ready: missing.is_empty() && failing_operations.is_empty(),
        missing,
        failing_operations,
    }
}

/// Profile storage failures: an unreachable store or an undecryptable credential is
/// `provider_profiles_unavailable`.
fn profile_error(e: RegistryError) -> ControlError {
    match e {
        RegistryError::Unavailable { .. } | RegistryError::CredentialUndecryptable => {
            ServiceError::ProfilesUnavailable.into()
        }
        other => other.into(),
    }
}

fn check_len(what: &str, v: Option<&str>) -> Result<()> {
    if v.is_some_and(|s| s.len() > MAX_FIELD_BYTES || s.chars().any(char::is_control)) {
        return Err(ControlError::invalid(format!(
            "`{what}` is at most {MAX_FIELD_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

impl Control {
    fn profile_view(&self, p: ProviderProfile) -> ProfileView {
        let readiness = readiness(&p, &self.service().provider_ids());
        ProfileView {
            provider: p.provider,
            context: p.context,
            settings: p.settings,
            has_credential: p.has_credential,
            readiness,
            verifications: p.verifications.into_iter().map(Into::into).collect(),
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }

    /// `GET /projects/{project}/profiles` (member): by provider.
    pub async fn list_profiles(
        &self,
        actor: &Actor,
        project: ProjectId,
    ) -> Result<Vec<ProfileView>> {
        self.project_role(actor, project, Role::Member).await?;
        Ok(self
            .registry()
            .list_profiles(project)
            .await
            .map_err(profile_error)?
            .into_iter()
            .map(|p| self.profile_view(p))
            .collect())
    }

    /// `PUT /projects/{project}/profiles/{provider}` (admin): stores or replaces the profile,
    /// clearing its verifications.
    pub async fn put_profile(
        &self,
        actor: &Actor,
        project: ProjectId,
        provider: Provider,
        request: PutProfile,
    ) -> Result<ProfileView> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        if !self.service().provider_ids().contains(&provider) {
            return Err(ControlError::invalid(format!(
                "provider `{provider}` is not configured on this server"
            )));
        }
        {
            use secrecy::ExposeSecret as _;
            let c = &request.context;
            check_len(
                "credential",
                request.credential.as_ref().map(|s| s.expose_secret()),
            )?;
            check_len("context.workspace", c.workspace.as_deref())?;
            check_len("context.teamId", c.team_id.as_deref())?;
            check_len("context.projectId", c.project_id.as_deref())?;
            check_len("context.bridgeUrl", c.bridge_url.as_deref())?;
            if request
                .credential
                .as_ref()
                .is_some_and(|s| s.expose_secret().trim().is_empty())
            {
                return Err(ControlError::invalid("`credential` is empty"));
            }
        }
        let settings_len = serde_json::to_string(&request.settings)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if settings_len > MAX_SETTINGS_BYTES {
            return Err(ControlError::invalid(format!(
                "`settings` is at most {MAX_SETTINGS_BYTES} bytes"
            )));
        }
        let has_credential = request.credential.is_some();
        let stored = self
            .registry()
            .put_profile(
                project,
                provider,
                ProfileInput {
                    context: request.context,
                    settings: request.settings,
                    credential: request.credential,
                },
            )
            .await
            .map_err(profile_error)?;
        if let Err(e) = self.still_writable(project).await {
            self.registry()
                .delete_profile(project, provider)
                .await
                .map_err(profile_error)?;
            return Err(e);
        }
        self.audit(
            actor,
            owned.account_id,
            "profile.put",
            project.to_string(),
            serde_json::json!({ "provider": provider, "credential": has_credential }),
        )
        .await?;
        Ok(self.profile_view(stored))
    }

    /// `DELETE /projects/{project}/profiles/{provider}` (admin): erases the profile and its
    /// credential; none stored is `provider_profile_not_found`.
    pub async fn delete_profile(
        &self,
        actor: &Actor,
        project: ProjectId,
        provider: Provider,
    ) -> Result<()> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        let deleted = self
            .registry()
            .delete_profile(project, provider)
            .await
            .map_err(profile_error)?;
        if !deleted {
            return Err(ServiceError::ProfileNotFound { provider }.into());
        }
        self.audit(
            actor,
            owned.account_id,
            "profile.delete",
            project.to_string(),
            serde_json::json!({ "provider": provider }),
        )
        .await
    }

    /// `POST /projects/{project}/profiles/{provider}/test` (admin): runs the deep
    /// verification with the stored profile and answers the profile with its new results.
    pub async fn test_profile(
        &self,
        actor: &Actor,
        project: ProjectId,
        provider: Provider,
    ) -> Result<ProfileView> {
        let owned = self.project_for_change(actor, project, Role::Admin).await?;
        self.admit_profile_test(project)?;
        let results = self.service().verify_profile(project, provider).await?;
        let passed = results.iter().filter(|v| v.ok).count();
        self.audit(
            actor,
            owned.account_id,
            "profile.test",
            project.to_string(),
            serde_json::json!({
                "provider": provider,
                "passed": passed,
                "failed": results.len() - passed,
            }),
        )
        .await?;
        let profile = self
            .registry()
            .list_profiles(project)
            .await
            .map_err(profile_error)?
            .into_iter()
            .find(|p| p.provider == provider)
            .ok_or(ServiceError::ProfileNotFound { provider })?;
        Ok(self.profile_view(profile))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(
        provider: Provider,
        has_credential: bool,
        context: ProviderContext,
    ) -> ProviderProfile {
        ProviderProfile {
            project_id: ProjectId::new(),
            provider,
            context,
            settings: serde_json::Map::new(),
            has_credential,
            verifications: Vec::new(),
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn readiness_names_the_missing_credential_and_context_fields() {
        let all = Provider::ALL;
        let vercel = readiness(
            &profile(Provider::Vercel, false, ProviderContext::default()),
            &all,
        );
        assert_eq!(vercel.missing, vec!["credential", "teamId", "projectId"]);
        assert!(!vercel.ready);
        let scoped = ProviderContext {
            team_id: Some("team_1".into()),
            project_id: Some("  ".into()),
            ..ProviderContext::default()
        };
        let vercel = readiness(&profile(Provider::Vercel, true, scoped), &all);
        assert_eq!(
            vercel.missing,
            vec!["projectId"],
            "a blank field is missing"
        );
        let blaxel = readiness(
            &profile(Provider::Blaxel, true, ProviderContext::default()),
            &all,
        );
        assert_eq!(blaxel.missing, vec!["workspace"]);
        let modal = readiness(
            &profile(Provider::Modal, true, ProviderContext::default()),
            &all,
        );
        assert_eq!(modal.missing, vec!["bridgeUrl"]);
        let local = readiness(
            &profile(Provider::Local, false, ProviderContext::default()),
            &all,
        );
        assert!(local.ready, "the embedded provider needs no credential");
        let e2b = readiness(
            &profile(Provider::E2b, true, ProviderContext::default()),
            &[],
        );
        assert_eq!(e2b.missing, vec!["provider"]);
    }

    #[test]
    fn a_failed_verification_makes_a_complete_profile_not_ready() {
        let mut p = profile(Provider::E2b, true, ProviderContext::default());
        p.verifications = vec![
            Verification {
                operation: "create".into(),
                ok: true,
                reason: None,
                remediation: None,
                checked_at: chrono::Utc::now(),
            },
            Verification {
                operation: "exec".into(),
                ok: false,
                reason: Some("forbidden".into()),
                remediation: None,
                checked_at: chrono::Utc::now(),
            },
        ];
        let r = readiness(&p, &[Provider::E2b]);
        assert!(r.missing.is_empty());
        assert_eq!(r.failing_operations, vec!["exec"]);
        assert!(!r.ready);
    }

    #[test]
    fn put_profile_debug_never_shows_the_credential() {
        let put: PutProfile =
            serde_json::from_str(r#"{"credential":"s3cret","context":{"teamId":"t"}}"#).unwrap();
        let shown = format!("{put:?}");
        assert!(!shown.contains("s3cret"));
        assert!(shown.contains("[redacted]"));
        assert!(serde_json::from_str::<PutProfile>(r#"{"credentials":"x"}"#).is_err());
    }
}
