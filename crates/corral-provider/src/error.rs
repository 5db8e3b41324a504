use std::time::Duration;

use corral_domain::Provider;
use snafu::Snafu;

/// Result of a provider call.
pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// What went wrong in a provider call, by meaning.
///
/// The service maps each variant to exactly one public error code. Messages may quote the
/// provider (trimmed by the adapter) but never carry a credential.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub))]
pub enum ProviderError {
    /// No credential was supplied for a provider that needs one.
    #[snafu(display("no credential was supplied for provider `{provider}`"))]
    MissingCredential {
        /// The provider.
        provider: Provider,
    },

    /// A required piece of non-secret context (team id, workspace, bridge URL…) is missing.
    #[snafu(display(
        "provider `{provider}` needs `{field}` (X-Provider-* header or profile setting)"
    ))]
    MissingContext {
        /// The provider.
        provider: Provider,
        /// The missing context field, as named in the API (`teamId`, `workspace`, …).
        field: &'static str,
    },

    /// The provider rejected the credential (401/403).
    #[snafu(display("provider `{provider}` rejected the credential: {message}"))]
    Unauthorized {
        /// The provider.
        provider: Provider,
        /// The provider's explanation, trimmed.
        message: String,
    },

    /// The provider rejected the request itself (400/409/422: image, timeout, command…).
    #[snafu(display("provider `{provider}` rejected the request: {message}"))]
    InvalidRequest {
        /// The provider.
        provider: Provider,
        /// The provider's explanation, trimmed.
        message: String,
    },

    /// The provider does not know the sandbox (or another resource the call needed).
    #[snafu(display("provider `{provider}` has no {resource}"))]
    NotFound {
        /// The provider.
        provider: Provider,
        /// What was not found, e.g. `sandbox abc123`.
        resource: String,
    },

    /// The provider rate-limited the call (429); it was not applied.
    #[snafu(display("provider `{provider}` rate-limited the request"))]
    RateLimited {
        /// The provider.
        provider: Provider,
        /// The provider's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },

    /// A capacity or quota the provider (or Corral's embedded runtime) enforces is used up:
    /// nothing was made; it may succeed once capacity is freed.
    #[snafu(display("provider `{provider}` is out of capacity: {message}"))]
    CapacityExceeded {
        /// The provider.
        provider: Provider,
        /// Which capacity, and how much is in use (never a secret).
        message: String,
    },

    /// The provider could not be reached or refused service before accepting the request
    /// (connection refused, DNS failure, connect timeout, 503): it was not applied.
    #[snafu(display("provider `{provider}` is unavailable: {message}"))]
    Unavailable {
        /// The provider.
        provider: Provider,
        /// What happened.
        message: String,
        /// The provider's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },

    /// The request was sent but no complete answer came back in time: it may have been applied.
    #[snafu(display("provider `{provider}` did not answer in time after the request was sent"))]
    TimedOutAfterSend {
        /// The provider.
        provider: Provider,
    },

    /// The provider answered with a server error (500, 502, 504): it may have been applied.
    #[snafu(display("provider `{provider}` failed with HTTP {status}: {message}"))]
    ServerError {
        /// The provider.
        provider: Provider,
        /// The HTTP status.
        status: u16,
        /// The provider's explanation, trimmed.
        message: String,
    },

    /// The provider's answer could not be understood (malformed, truncated or oversized body, or
    /// a broken stream): the request may have been applied.
    #[snafu(display("provider `{provider}` sent an answer Corral cannot use: {message}"))]
    Protocol {
        /// The provider.
        provider: Provider,
        /// What was wrong with it.
        message: String,
    },

    /// The provider failed in a way no other variant describes (an unexpected 4xx).
    #[snafu(display("provider `{provider}` failed with HTTP {status}: {message}"))]
    Unexpected {
        /// The provider.
        provider: Provider,
        /// The HTTP status.
        status: u16,
        /// The provider's explanation, trimmed.
        message: String,
    },

    /// The command ran past its deadline and was killed.
    #[snafu(display("the command did not finish within {}s", after.as_secs()))]
    CommandTimedOut {
        /// The deadline it ran past.
        after: Duration,
    },

    /// The file does not exist.
    #[snafu(display("file `{path}` does not exist"))]
    FileNotFound {
        /// The path.
        path: String,
    },

    /// The parent directory of a file to write does not exist.
    #[snafu(display("the parent directory of `{path}` does not exist"))]
    ParentMissing {
        /// The path.
        path: String,
    },

    /// The file is larger than the read limit.
    #[snafu(display("file `{path}` is larger than {limit} bytes"))]
    FileTooLarge {
        /// The path.
        path: String,
        /// The limit.
        limit: usize,
    },

    /// The path is refused: it escapes the sandbox, crosses a symlink that does, or is not a
    /// regular file.
    #[snafu(display("file `{path}` cannot be used: {reason}"))]
    FileRefused {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },

    /// Another file failure reported by the provider.
    #[snafu(display("file operation on `{path}` failed: {message}"))]
    FileOperation {
        /// The path.
        path: String,
        /// What the provider said, trimmed.
        message: String,
    },

    /// The provider cannot perform this operation at all.
    #[snafu(display("provider `{provider}` cannot {operation}: {reason}"))]
    Unsupported {
        /// The provider.
        provider: Provider,
        /// The operation, e.g. `"find_by_operation_id"`.
        operation: &'static str,
        /// Why.
        reason: String,
    },
}

impl ProviderError {
    /// Whether the provider may have applied the request although the call failed.
    ///
    /// For a create this is the difference between a clean failure (the idempotency claim can
    /// be released) and `sandbox_create_outcome_unknown` (reconcile by operation id).
    pub fn may_have_been_applied(&self) -> bool {
        matches!(
            self,
            ProviderError::TimedOutAfterSend { .. }
                | ProviderError::ServerError { .. }
                | ProviderError::Protocol { .. }
        )
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::CapacityExceeded { .. }
                | ProviderError::Unavailable { .. }
                | ProviderError::TimedOutAfterSend { .. }
                | ProviderError::ServerError { .. }
        )
    }

    /// The same error with every occurrence of `secret` in its messages replaced by
    /// `[redacted]`: a provider that echoes the credential in an error body must not carry it
    /// into Corral's logs or error responses. Secrets shorter than 4 bytes are left alone
    /// (they would match innocent text, and are not credentials).
    pub fn redact(mut self, secret: &str) -> Self {
        if secret.len() < 4 {
            return self;
        }
        let scrub = |m: &mut String| {
            if m.contains(secret) {
                *m = m.replace(secret, "[redacted]");
            }
        };
        match &mut self {
            ProviderError::Unauthorized { message, .. }
            | ProviderError::InvalidRequest { message, .. }
            | ProviderError::Unavailable { message, .. }
            | ProviderError::CapacityExceeded { message, .. }
            | ProviderError::ServerError { message, .. }
            | ProviderError::Protocol { message, .. }
            | ProviderError::Unexpected { message, .. }
            | ProviderError::FileOperation { message, .. } => scrub(message),
            ProviderError::NotFound { resource, .. } => scrub(resource),
            ProviderError::FileRefused { reason, .. }
            | ProviderError::Unsupported { reason, .. } => scrub(reason),
            ProviderError::MissingCredential { .. }
            | ProviderError::MissingContext { .. }
            | ProviderError::RateLimited { .. }
            | ProviderError::TimedOutAfterSend { .. }
            | ProviderError::CommandTimedOut { .. }
            | ProviderError::FileNotFound { .. }
            | ProviderError::ParentMissing { .. }
            | ProviderError::FileTooLarge { .. } => {}
        }
        self
    }

    /// Reads an error from a file endpoint as a file error about `path`: the provider's 404 is
    /// the file missing (not the sandbox), a 4xx refusal is the path refused, a server error
    /// is the file operation failing; anything else is kept.
    pub fn for_file(self, path: &str) -> Self {
        let path = path.to_owned();
        match self {
            ProviderError::NotFound { .. } => ProviderError::FileNotFound { path },
            ProviderError::InvalidRequest { message, .. } => ProviderError::FileRefused {
                path,
                reason: message,
            },
            ProviderError::ServerError { message, .. } => {
                ProviderError::FileOperation { path, message }
            }
            other => other,
        }
    }

    /// The provider's `Retry-After`, where it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. }
            | ProviderError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Trims a provider message for inclusion in an error: at most `max` characters, control
/// characters replaced, so a huge or binary body cannot flood logs or error responses.
pub fn excerpt(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sent_requests_may_have_been_applied() {
        let p = Provider::E2b;
        assert!(ProviderError::TimedOutAfterSend { provider: p }.may_have_been_applied());
        assert!(
            ProviderError::Protocol {
                provider: p,
                message: String::new()
            }
            .may_have_been_applied()
        );
        assert!(
            ProviderError::ServerError {
                provider: p,
                status: 500,
                message: String::new()
            }
            .may_have_been_applied()
        );
        assert!(
            !ProviderError::Unavailable {
                provider: p,
                message: String::new(),
                retry_after: None
            }
            .may_have_been_applied()
        );
        assert!(
            !ProviderError::RateLimited {
                provider: p,
                retry_after: None
            }
            .may_have_been_applied()
        );
        assert!(
            !ProviderError::Unauthorized {
                provider: p,
                message: String::new()
            }
            .may_have_been_applied()
        );
    }

    #[test]
    fn redact_scrubs_the_secret_from_every_message() {
        let secret = "sk-canary-4242";
        let e = ProviderError::Unauthorized {
            provider: Provider::E2b,
            message: format!("key {secret} is invalid ({secret})"),
        }
        .redact(secret);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert!(shown.contains("key [redacted] is invalid"), "{shown}");
        let short = ProviderError::InvalidRequest {
            provider: Provider::E2b,
            message: "abc".into(),
        }
        .redact("ab");
        assert_eq!(
            short.to_string(),
            "provider `e2b` rejected the request: abc"
        );
    }

    #[test]
    fn errors_of_file_endpoints_become_file_errors() {
        let p = Provider::E2b;
        let nf = ProviderError::NotFound {
            provider: p,
            resource: "/files".into(),
        }
        .for_file("/a");
        assert!(matches!(nf, ProviderError::FileNotFound { ref path } if path == "/a"));
        let bad = ProviderError::InvalidRequest {
            provider: p,
            message: "is a dir".into(),
        }
        .for_file("/a");
        assert!(
            matches!(bad, ProviderError::FileRefused { ref reason, .. } if reason == "is a dir")
        );
        let five = ProviderError::ServerError {
            provider: p,
            status: 500,
            message: "io".into(),
        }
        .for_file("/a");
        assert!(
            matches!(five, ProviderError::FileOperation { ref message, .. } if message == "io")
        );
        let kept = ProviderError::RateLimited {
            provider: p,
            retry_after: None,
        }
        .for_file("/a");
        assert!(matches!(kept, ProviderError::RateLimited { .. }));
    }

    #[test]
    fn excerpt_caps_length_and_strips_control_characters() {
        assert_eq!(excerpt("a\nb", 10), "a b");
        assert_eq!(excerpt(&"x".repeat(50), 5), "xxxxx…");
    }
}
