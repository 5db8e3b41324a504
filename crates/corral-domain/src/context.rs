use serde::{Deserialize, Serialize};

/// Non-secret routing context for a provider call: from a stored profile or the inline
/// `X-Provider-*` headers (which override the profile field by field).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderContext {
    /// Provider workspace (Blaxel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Team identifier (Vercel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    /// Project identifier (Vercel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Customer-owned bridge URL (Cloudflare, Modal, Deno).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_url: Option<String>,
}

impl ProviderContext {
    /// `self` with every field that `overrides` sets replaced.
    pub fn overridden_by(mut self, overrides: &ProviderContext) -> Self {
        let pick = |base: &mut Option<String>, over: &Option<String>| {
            if over.is_some() {
                base.clone_from(over);
            }
        };
        pick(&mut self.workspace, &overrides.workspace);
        pick(&mut self.team_id, &overrides.team_id);
        pick(&mut self.project_id, &overrides.project_id);
        pick(&mut self.bridge_url, &overrides.bridge_url);
        self
    }
}

/// Where the provider credential of a call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum CredentialSource {
    /// The project's stored provider profile.
    Profile,
    /// The request's `X-Provider-Credential` header.
    Inline,
    /// The provider needs no credential (`local`).
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_fields_override_profile_fields_one_by_one() {
        let profile = ProviderContext {
            workspace: Some("ws".into()),
            team_id: Some("team".into()),
            ..Default::default()
        };
        let inline = ProviderContext {
            team_id: Some("other-team".into()),
            project_id: Some("prj".into()),
            ..Default::default()
        };
        let merged = profile.overridden_by(&inline);
        assert_eq!(merged.workspace.as_deref(), Some("ws"));
        assert_eq!(merged.team_id.as_deref(), Some("other-team"));
        assert_eq!(merged.project_id.as_deref(), Some("prj"));
        assert_eq!(merged.bridge_url, None);
    }
}
