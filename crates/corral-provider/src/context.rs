use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_domain::ProviderContext;
use secrecy::SecretString;

/// Everything a provider call needs beyond its arguments.
///
/// `Debug` never shows the credential (it is a [`SecretString`]).
#[derive(Clone)]
pub struct CallContext {
    credential: Option<SecretString>,
    context: ProviderContext,
    deadline: Option<Instant>,
    pinned_addrs: Option<Arc<[SocketAddr]>>,
    project: Option<Arc<str>>,
    deployment: Option<Arc<str>>,
}

impl CallContext {
    /// A context with a credential, routing context and no deadline.
    pub fn new(credential: Option<SecretString>, context: ProviderContext) -> Self {
        Self {
            credential,
            context,
            deadline: None,
            pinned_addrs: None,
            project: None,
            deployment: None,
        }
    }

    /// A context for providers that need no credential (`local`).
    pub fn anonymous() -> Self {
        Self::new(None, ProviderContext::default())
    }

    /// The same context with a deadline `within` from now.
    pub fn with_timeout(mut self, within: Duration) -> Self {
        self.deadline = Some(Instant::now() + within);
        self
    }

    /// The same context with an absolute deadline.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The same context naming the Corral project the call is made for (`prj_…`): what an
    /// adapter counts per project (local's per-project capacity) or tags resources with.
    pub fn with_project(mut self, project: impl Into<Arc<str>>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// The Corral project the call is made for, when the caller said.
    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    /// The same context naming this Corral deployment (one id shared by every replica over one
    /// registry): creates tag their resource with it so the orphan reaper can tell this
    /// deployment's sandboxes from others' on a shared provider account.
    pub fn with_deployment(mut self, deployment: impl Into<Arc<str>>) -> Self {
        self.deployment = Some(deployment.into());
        self
    }

    /// The Corral deployment the call is made for, when the caller said.
    pub fn deployment(&self) -> Option<&str> {
        self.deployment.as_deref()
    }

    /// The provider credential, if any. Expose it only to build the provider request.
    pub fn credential(&self) -> Option<&SecretString> {
        self.credential.as_ref()
    }

    /// The same context with the socket addresses its bridge URL may be reached at: the
    /// addresses the server's guard resolved and vetted. A bridge client connects to these
    /// and no others (no second DNS lookup).
    pub fn with_pinned_addrs(mut self, addrs: Vec<SocketAddr>) -> Self {
        self.pinned_addrs = Some(addrs.into());
        self
    }

    /// The vetted socket addresses of the context's bridge URL, when the server checked it
    /// (`None`: the URL, if any, was not vetted here, e.g. it is the operator's own).
    pub fn pinned_addrs(&self) -> Option<&[SocketAddr]> {
        self.pinned_addrs.as_deref()
    }

    /// The credential, or `MissingCredential` for `provider`.
    pub fn require_credential(
        &self,
        provider: corral_domain::Provider,
    ) -> crate::Result<&SecretString> {
        self.credential
            .as_ref()
            .ok_or(crate::ProviderError::MissingCredential { provider })
    }

    /// The non-secret routing context.
    pub fn context(&self) -> &ProviderContext {
        &self.context
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left before the deadline (`None`: no deadline; zero: already passed).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// `limit`, shortened to the time left before the deadline.
    pub fn bounded(&self, limit: Duration) -> Duration {
        self.remaining().map_or(limit, |left| left.min(limit))
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field(
                "credential",
                &self.credential.as_ref().map(|_| "[redacted]"),
            )
            .field("context", &self.context)
            .field("deadline", &self.deadline)
            .field("pinned_addrs", &self.pinned_addrs)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_credential() {
        let ctx = CallContext::new(
            Some(SecretString::from("canary-secret-4242")),
            ProviderContext::default(),
        );
        let shown = format!("{ctx:?}");
        assert!(!shown.contains("canary-secret-4242"), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn pinned_addresses_are_absent_until_set_and_survive_a_deadline() {
        let ctx = CallContext::anonymous();
        assert!(ctx.pinned_addrs().is_none());
        let addr: std::net::SocketAddr = "203.0.113.7:443".parse().unwrap();
        let ctx = ctx
            .with_pinned_addrs(vec![addr])
            .with_timeout(Duration::from_secs(5));
        assert_eq!(ctx.pinned_addrs(), Some(&[addr][..]));
    }

    #[test]
    fn bounded_never_exceeds_the_deadline() {
        let ctx = CallContext::anonymous().with_timeout(Duration::from_millis(50));
        assert!(ctx.bounded(Duration::from_secs(10)) <= Duration::from_millis(50));
        assert_eq!(
            CallContext::anonymous().bounded(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
