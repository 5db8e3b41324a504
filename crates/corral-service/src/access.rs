//! Provider access for one call: the credential (inline or the project's profile), the
//! merged non-secret context, and the bridge URL guard.

use corral_domain::{CredentialSource, Provider, ProviderContext, SandboxMetadata};
use corral_provider::CallContext;
use corral_registry::RegistryError;

use crate::bridge::check_bridge_credential;
use crate::error::ServiceError;
use crate::{Caller, InlineAccess, Service};

/// The context stored on a sandbox's record at create time.
pub(crate) fn recorded_context(m: &SandboxMetadata) -> ProviderContext {
    ProviderContext {
        workspace: m.workspace.clone(),
        team_id: m.team_id.clone(),
        project_id: m.project_id.clone(),
        bridge_url: m.bridge_url.clone(),
    }
}

/// What a provider call runs with.
pub(crate) struct Access {
    pub(crate) ctx: CallContext,
    pub(crate) source: CredentialSource,
    pub(crate) context: ProviderContext,
}

impl Service {
    /// Resolves the credential and context for `operation` on `provider`.
    ///
    /// Inline credential first (never stored); else the project's profile
    /// (`provider_profile_not_found` when there is none; `provider_operation_unavailable` when
    /// its last deep verification says the credential cannot do `operation`).
    ///
    /// The context starts from `recorded` — the context stored on the sandbox's record when it
    /// was created, for every call on an existing sandbox — or, for a create, from the
    /// profile's; inline context headers then override it field by field.
    pub(crate) async fn access(
        &self,
        caller: &Caller,
        provider: Provider,
        inline: InlineAccess,
        recorded: Option<&ProviderContext>,
        operation: &str,
    ) -> Result<Access, ServiceError> {
        self.access_for(caller, provider, inline, recorded, Some(operation))
            .await
    }

    /// [`Service::access`], refusing for `refuse_if_failed` only (`None`: the deep
    /// verification itself, which must run whatever the last one found).
    pub(crate) async fn access_for(
        &self,
        caller: &Caller,
        provider: Provider,
        inline: InlineAccess,
        recorded: Option<&ProviderContext>,
        refuse_if_failed: Option<&str>,
    ) -> Result<Access, ServiceError> {
        if provider == Provider::Local {
            // The embedded provider needs no account.
            return Ok(Access {
                ctx: CallContext::anonymous()
                    .with_project(caller.project_id().to_string())
                    .with_deployment(self.deployment().await?),
                source: CredentialSource::None,
                context: ProviderContext::default(),
            });
        }
        let profile = match self
            .inner
            .registry
            .profile(caller.project_id(), provider)
            .await
        {
            Ok(p) => p,
            // A credential that does not decrypt (wrong master key, tampered row) means the
            // profile cannot be loaded, like an unreachable database.
            Err(RegistryError::Unavailable { .. } | RegistryError::CredentialUndecryptable) => {
                return Err(ServiceError::ProfilesUnavailable);
            }
            Err(e) => {
                tracing::error!(error = %e, %provider, "cannot load the provider profile");
                return Err(ServiceError::internal(
                    "the stored provider profile cannot be used",
                ));
            }
        };
        let profile_context = profile
            .as_ref()
            .map(|p| p.profile.context.clone())
            .unwrap_or_default();
        let (credential, source) = match (inline.credential, profile) {
            (Some(c), _) => (Some(c), CredentialSource::Inline),
            (None, None) => return Err(ServiceError::ProfileNotFound { provider }),
            (None, Some(p)) => {
                // Only what the credential was proved unable to do: an operation the last
                // verification did not reach, or that failed for a passing reason (rate
                // limit, outage), says nothing about the credential.
                if let Some(operation) = refuse_if_failed
                    && let Some(v) = p.profile.verifications.iter().find(|v| {
                        v.operation == operation && !v.ok && !crate::verify::proves_nothing(v)
                    })
                {
                    return Err(ServiceError::OperationUnavailable {
                        provider,
                        operation: operation.to_owned(),
                        reason: v
                            .reason
                            .clone()
                            .unwrap_or_else(|| "the last verification failed".into()),
                        remediation: v.remediation.clone().unwrap_or_else(|| {
                            "update the provider profile with a credential that has this permission".into()
                        }),
                    });
                }
                (p.credential, CredentialSource::Profile)
            }
        };
        let context = recorded
            .unwrap_or(&profile_context)
            .clone()
            .overridden_by(&inline.context);
        let mut ctx = CallContext::new(credential, context.clone())
            .with_project(caller.project_id().to_string())
            .with_deployment(self.deployment().await?);
        if provider.is_bridge() {
            // The effective URL, whether sent now or recorded from an earlier request, is the
            // caller's unless it is the profile's own.
            check_bridge_credential(
                source,
                profile_context.bridge_url.as_deref(),
                context.bridge_url.as_deref(),
            )?;
            if let Some(url) = &context.bridge_url {
                // The adapter connects to the vetted addresses only: no second lookup.
                let vetted = self.inner.bridge.check(url).await?;
                ctx = ctx.with_pinned_addrs(vetted.pinned);
            }
        }
        Ok(Access {
            ctx,
            source,
            context,
        })
    }
}
