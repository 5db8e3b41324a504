//! TEMPORARY stand-in for `Service::verify_profile`, which the verification work (branch
//! `cp-verify`) adds to corral-service. An inherent method wins over a trait method, so the
//! call site compiles unchanged once it lands; then delete this file, its `mod` line and the
//! `use` in `profiles.rs`.

use corral_domain::Provider;
use corral_registry::{ProjectId, Verification};
use corral_service::Service;
use corral_service::error::ServiceError;

/// `Service::verify_profile` until it exists.
pub(crate) trait VerifyProfileStub {
    /// Answers `internal_error`: deep verification is not built into this server yet.
    async fn verify_profile(
        &self,
        project: ProjectId,
        provider: Provider,
    ) -> Result<Vec<Verification>, ServiceError>;
}

impl VerifyProfileStub for Service {
    async fn verify_profile(
        &self,
        _project: ProjectId,
        _provider: Provider,
    ) -> Result<Vec<Verification>, ServiceError> {
        Err(ServiceError::internal(
            "deep verification is not available on this server yet",
        ))
    }
}
