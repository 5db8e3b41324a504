//! Legal releases: the operator publishes numbered releases of `terms`, `privacy` and
//! `acceptable-use`; a user must accept the current release of every published document
//! before any other control-plane mutation ([`Control::require_legal`]).
//!
//! Every store failure here is `legal_unavailable`, so a client can tell "the legal texts
//! cannot be read now" from other outages.

use corral_control_store::{LegalAcceptOutcome, LegalRelease, NewAuditEvent, StoreError};
use corral_domain::Timestamp;

use crate::error::{ControlError, Result};
use crate::{Actor, Control};

/// The legal documents, in the order they are shown.
pub const LEGAL_DOCUMENTS: [&str; 3] = ["terms", "privacy", "acceptable-use"];

/// The largest release body accepted (1 MiB).
const MAX_BODY_BYTES: usize = 1 << 20;

/// One document's current release and whether the user accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegalStatus {
    /// The document.
    pub document: String,
    /// Its current release number.
    pub release: i64,
    /// The current release's title.
    pub title: String,
    /// When the current release was published.
    pub published_at: Timestamp,
    /// Whether the user accepted this (current) release.
    pub accepted: bool,
}

fn unavailable(e: StoreError) -> ControlError {
    tracing::warn!(error = %e, "legal releases unavailable");
    ControlError::LegalUnavailable
}

impl Control {
    /// `legal_acceptance_required` unless the user accepted the current release of every
    /// published document (none published: `Ok`). Every control-plane mutation except
    /// sign-in, sign-out, password change and legal acceptance calls this first.
    pub async fn require_legal(&self, actor: &Actor) -> Result<()> {
        if let Some(missing) = self
            .legal_status(actor)
            .await?
            .into_iter()
            .find(|s| !s.accepted)
        {
            return Err(ControlError::LegalAcceptanceRequired {
                document: missing.document,
            });
        }
        Ok(())
    }

    /// The current release of each published document, and whether `actor` accepted it.
    pub async fn legal_status(&self, actor: &Actor) -> Result<Vec<LegalStatus>> {
        let current = self
            .store()
            .current_legal_releases()
            .await
            .map_err(unavailable)?;
        if current.is_empty() {
            return Ok(Vec::new());
        }
        let accepted = self
            .store()
            .legal_acceptances(actor.user_id)
            .await
            .map_err(unavailable)?;
        let mut status: Vec<LegalStatus> = current
            .into_iter()
            .map(|r| LegalStatus {
                accepted: accepted
                    .iter()
                    .any(|(d, n)| *d == r.document && *n == r.release),
                document: r.document,
                release: r.release,
                title: r.title,
                published_at: r.published_at,
            })
            .collect();
        status.sort_by_key(|s| {
            LEGAL_DOCUMENTS
                .iter()
                .position(|d| *d == s.document)
                .unwrap_or(LEGAL_DOCUMENTS.len())
        });
        Ok(status)
    }

    /// Release `release` of `document` (`legal_not_found` if there is none).
    pub async fn legal_release(&self, document: &str, release: i64) -> Result<LegalRelease> {
        if !LEGAL_DOCUMENTS.contains(&document) {
            return Err(ControlError::LegalNotFound);
        }
        self.store()
            .legal_release(document, release)
            .await
            .map_err(unavailable)?
            .ok_or(ControlError::LegalNotFound)
    }

    /// Records that `actor` accepted `release` of `document` after reviewing it:
    /// `legal_release_changed` if a newer release is current, `legal_not_found` if there is
    /// no such release. Accepting the current release again is harmless.
    pub async fn accept_legal(&self, actor: &Actor, document: &str, release: i64) -> Result<()> {
        if !LEGAL_DOCUMENTS.contains(&document) {
            return Err(ControlError::LegalNotFound);
        }
        match self
            .store()
            .accept_legal_release(actor.user_id, document, release)
            .await
            .map_err(unavailable)?
        {
            LegalAcceptOutcome::Accepted => {}
            LegalAcceptOutcome::NotFound => return Err(ControlError::LegalNotFound),
            LegalAcceptOutcome::Changed { current } => {
                return Err(ControlError::LegalReleaseChanged {
                    document: document.to_owned(),
                    reviewed: release,
                    current,
                });
            }
        }
        self.user_audit(
            actor.user_id,
            "legal.accept",
            serde_json::json!({ "document": document, "release": release }),
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    /// Publishes the next release of `document` (the operator's CLI); returns its number.
    /// From then on every user must accept it before changing anything.
    pub async fn publish_legal(&self, document: &str, title: &str, body: &str) -> Result<i64> {
        if !LEGAL_DOCUMENTS.contains(&document) {
            return Err(ControlError::invalid(format!(
                "the document is one of {}",
                LEGAL_DOCUMENTS.join(", ")
            )));
        }
        let title = title.trim();
        if title.is_empty() || title.chars().count() > 200 || title.chars().any(char::is_control) {
            return Err(ControlError::invalid(
                "a title is 1–200 characters without control characters",
            ));
        }
        if body.trim().is_empty() || body.len() > MAX_BODY_BYTES {
            return Err(ControlError::invalid(
                "a release body is not empty and at most 1 MiB",
            ));
        }
        let release = self
            .store()
            .publish_legal_release(document, title, body)
            .await
            .map_err(unavailable)?;
        self.store()
            .record_audit(NewAuditEvent {
                account_id: None,
                actor: None,
                action: "legal.publish".to_owned(),
                target: format!("{document}/{release}"),
                detail: serde_json::json!({ "document": document, "release": release }),
            })
            .await
            .map_err(unavailable)?;
        Ok(release)
    }
}
