//! Provider profiles: a project's credential per provider, sealed under the master key,
//! and the record of its last verification.

use corral_domain::Provider;
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;
use ulid::Ulid;

use crate::db::{run, to_micros, write_tx};
use crate::error::{RegistryError, Result, db_error};
use crate::model::{ProfileInput, ProfileWithCredential, ProjectId, ProviderProfile, Verification};
use crate::rows::{ProfileRow, VerificationRow};
use crate::schema::{profile_verifications, provider_profiles};

use super::Registry;

/// The associated data that binds a stored credential to its row.
fn credential_aad(project: ProjectId, provider: Provider, profile_id: &str) -> Vec<u8> {
    format!("corral/profile-credential/v1\0{project}\0{provider}\0{profile_id}").into_bytes()
}

fn json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| RegistryError::Internal {
        message: format!("cannot serialize: {e}"),
    })
}

impl Registry {
    /// Stores or replaces the project's profile for `provider`. The credential is encrypted
    /// with XChaCha20-Poly1305 under a subkey of the master key, its associated data binding
    /// project id, provider and profile id. Every put gives the profile a fresh id, so
    /// verifications recorded for an earlier credential no longer apply.
    pub async fn put_profile(
        &self,
        project: ProjectId,
        provider: Provider,
        input: ProfileInput,
    ) -> Result<ProviderProfile> {
        let profile_id = Ulid::generate().to_string().to_ascii_lowercase();
        let credential = input
            .credential
            .as_ref()
            .map(|secret| {
                self.key
                    .seal(&credential_aad(project, provider, &profile_id), secret)
            })
            .transpose()?;
        let now = to_micros(self.db.now());
        let row = ProfileRow {
            id: profile_id,
            project_id: project.to_string(),
            provider: provider.as_str().to_owned(),
            context: json(&input.context)?,
            settings: json(&input.settings)?,
            credential,
            created_at: now,
            updated_at: now,
        };
        let stored: Result<ProfileRow> = write_tx!(self, |c| {
            diesel::insert_into(provider_profiles::table)
                .values(&row)
                .on_conflict((provider_profiles::project_id, provider_profiles::provider))
                .do_update()
                .set((
                    provider_profiles::id.eq(excluded(provider_profiles::id)),
                    provider_profiles::context.eq(excluded(provider_profiles::context)),
                    provider_profiles::settings.eq(excluded(provider_profiles::settings)),
                    provider_profiles::credential.eq(excluded(provider_profiles::credential)),
                    provider_profiles::updated_at.eq(excluded(provider_profiles::updated_at)),
                ))
                .execute(c)
                .await?;
            // Verifications of replaced credentials are unreachable now; drop them.
            diesel::delete(
                profile_verifications::table.filter(
                    profile_verifications::profile_id
                        .ne_all(provider_profiles::table.select(provider_profiles::id)),
                ),
            )
            .execute(c)
            .await?;
            Ok::<_, RegistryError>(
                provider_profiles::table
                    .filter(provider_profiles::id.eq(&row.id))
                    .select(ProfileRow::as_select())
                    .first(c)
                    .await?,
            )
        });
        // Forgotten after the write, whatever came of it: this process sees the change at once.
        self.profiles.forget(&(project, provider));
        self.profile_view(stored?, Vec::new())
    }

    fn profile_view(
        &self,
        row: ProfileRow,
        verifications: Vec<VerificationRow>,
    ) -> Result<ProviderProfile> {
        let mut verifications = verifications
            .into_iter()
            .map(VerificationRow::into_verification)
            .collect::<Result<Vec<_>>>()?;
        verifications.sort_by(|a, b| a.operation.cmp(&b.operation));
        Ok(ProviderProfile {
            project_id: crate::rows::parse_project_id(&row.project_id)?,
            provider: row.provider()?,
            context: row.context()?,
            settings: row.settings()?,
            has_credential: row.credential.is_some(),
            verifications,
            created_at: crate::db::from_micros(row.created_at)?,
            updated_at: crate::db::from_micros(row.updated_at)?,
        })
    }

    async fn profile_rows(
        &self,
        project: ProjectId,
        provider: Option<Provider>,
    ) -> Result<Vec<(ProfileRow, Vec<VerificationRow>)>> {
        let project = project.to_string();
        let provider = provider.map(Provider::as_str);
        let (profiles, verifications): (Vec<ProfileRow>, Vec<VerificationRow>) = run!(self, |c| {
            let mut query = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .select(ProfileRow::as_select())
                .order(provider_profiles::provider.asc())
                .into_boxed();
            if let Some(provider) = provider {
                query = query.filter(provider_profiles::provider.eq(provider));
            }
            let profiles: Vec<ProfileRow> = query.load(c).await.map_err(db_error)?;
            let ids: Vec<&str> = profiles.iter().map(|p| p.id.as_str()).collect();
            let verifications: Vec<VerificationRow> = profile_verifications::table
                .filter(profile_verifications::profile_id.eq_any(ids))
                .select(VerificationRow::as_select())
                .load(c)
                .await
                .map_err(db_error)?;
            Ok((profiles, verifications))
        })?;
        let mut verifications = verifications;
        Ok(profiles
            .into_iter()
            .map(|p| {
                let (mine, rest): (Vec<_>, Vec<_>) =
                    verifications.drain(..).partition(|v| v.profile_id == p.id);
                verifications = rest;
                (p, mine)
            })
            .collect())
    }

    /// The project's profile for `provider` with its credential decrypted, or `None`.
    /// [`RegistryError::CredentialUndecryptable`] if the ciphertext does not authenticate.
    ///
    /// A found profile is served from a cache for the registry's cache TTL; changes made
    /// through this registry (or a clone) apply at once, changes made by another process within
    /// the TTL, and a profile created anywhere is seen at once (absence is not cached).
    pub async fn profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Option<ProfileWithCredential>> {
        let now = self.db.now();
        match self.profiles.get(&(project, provider), now) {
            Ok(cached) => Ok(cached),
            Err(generation) => {
                let loaded = self.load_profile(project, provider).await?;
                // Absence is not cached: connecting a profile (say with the CLI) right after a
                // request failed for the lack of one must work on the next request.
                if let Some(found) = &loaded {
                    self.profiles
                        .insert((project, provider), Some(found.clone()), now, generation);
                }
                Ok(loaded)
            }
        }
    }

    async fn load_profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Option<ProfileWithCredential>> {
        let Some((row, verifications)) = self
            .profile_rows(project, Some(provider))
            .await?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let credential = row
            .credential
            .as_deref()
            .map(|sealed| {
                self.key
                    .open(&credential_aad(project, provider, &row.id), sealed)
            })
            .transpose()?;
        Ok(Some(ProfileWithCredential {
            profile: self.profile_view(row, verifications)?,
            credential,
        }))
    }

    /// The project's profiles (non-secret view), by provider.
    pub async fn list_profiles(&self, project: ProjectId) -> Result<Vec<ProviderProfile>> {
        self.profile_rows(project, None)
            .await?
            .into_iter()
            .map(|(row, verifications)| self.profile_view(row, verifications))
            .collect()
    }

    /// Records the result of a deep verification, replacing the previous one for the same
    /// operation. [`RegistryError::NotFound`] when the profile does not exist.
    pub async fn record_verification(
        &self,
        project: ProjectId,
        provider: Provider,
        verification: Verification,
    ) -> Result<()> {
        let cached = (project, provider);
        let project = project.to_string();
        let provider = provider.as_str();
        let recorded = run!(self, |c| {
            let id: Option<String> = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .filter(provider_profiles::provider.eq(provider))
                .select(provider_profiles::id)
                .first(c)
                .await
                .optional()
                .map_err(db_error)?;
            let Some(id) = id else {
                return Err(RegistryError::NotFound {
                    what: "provider profile",
                });
            };
            let row = VerificationRow {
                profile_id: id,
                operation: verification.operation.clone(),
                ok: verification.ok,
                reason: verification.reason.clone(),
                remediation: verification.remediation.clone(),
                checked_at: to_micros(verification.checked_at),
            };
            diesel::insert_into(profile_verifications::table)
                .values(&row)
                .on_conflict((
                    profile_verifications::profile_id,
                    profile_verifications::operation,
                ))
                .do_update()
                .set((
                    profile_verifications::ok.eq(excluded(profile_verifications::ok)),
                    profile_verifications::reason.eq(excluded(profile_verifications::reason)),
                    profile_verifications::remediation
                        .eq(excluded(profile_verifications::remediation)),
                    profile_verifications::checked_at
                        .eq(excluded(profile_verifications::checked_at)),
                ))
                .execute(c)
                .await
                .map_err(db_error)?;
            Ok(())
        });
        self.profiles.forget(&cached);
        recorded
    }

    /// Deletes the project's profile for `provider`; `false` when there was none.
    pub async fn delete_profile(&self, project: ProjectId, provider: Provider) -> Result<bool> {
        let cached = (project, provider);
        let project = project.to_string();
        let provider = provider.as_str();
        let deleted: Result<usize> = write_tx!(self, |c| {
            let ids: Vec<String> = provider_profiles::table
                .filter(provider_profiles::project_id.eq(&project))
                .filter(provider_profiles::provider.eq(provider))
                .select(provider_profiles::id)
                .load(c)
                .await?;
            diesel::delete(
                profile_verifications::table.filter(profile_verifications::profile_id.eq_any(&ids)),
            )
            .execute(c)
            .await?;
            Ok::<_, RegistryError>(
                diesel::delete(provider_profiles::table.filter(provider_profiles::id.eq_any(&ids)))
                    .execute(c)
                    .await?,
            )
        });
        self.profiles.forget(&cached);
        Ok(deleted? > 0)
    }
}
