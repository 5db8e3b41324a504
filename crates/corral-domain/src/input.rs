use std::fmt;

/// Why a request body is refused before any provider is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputError {
    /// The field violates the contract or the provider's advertised capabilities
    /// (becomes `invalid_request`).
    Invalid {
        /// The offending field, as named on the wire.
        field: &'static str,
        /// What is wrong, naming the provider where the provider's capabilities decided.
        message: String,
    },
    /// The field exceeds its size limit (becomes `payload_too_large`).
    TooLarge {
        /// The offending field.
        field: &'static str,
        /// The limit, in bytes.
        limit: usize,
    },
    /// File content does not decode in its declared encoding (becomes `invalid_file_content`).
    BadContent {
        /// What is wrong with it.
        message: String,
    },
    /// The field asks for an operation the provider's capabilities say it lacks (becomes
    /// `capability_unsupported`).
    Unsupported {
        /// The offending field.
        field: &'static str,
        /// Which capability is missing, naming the provider.
        message: String,
    },
    /// The field names a resource of another provider, or one the provider cannot combine
    /// with the rest of the request (becomes `provider_invalid_request`).
    ProviderMismatch {
        /// The offending field.
        field: &'static str,
        /// What does not match.
        message: String,
    },
}

impl InputError {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        InputError::Invalid {
            field,
            message: message.into(),
        }
    }
}

impl InputError {
    pub(crate) fn unsupported(field: &'static str, message: impl Into<String>) -> Self {
        InputError::Unsupported {
            field,
            message: message.into(),
        }
    }

    pub(crate) fn provider_mismatch(field: &'static str, message: impl Into<String>) -> Self {
        InputError::ProviderMismatch {
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Invalid { message, .. } => f.write_str(message),
            InputError::TooLarge { field, limit } => {
                write!(f, "`{field}` exceeds the limit of {limit} bytes")
            }
            InputError::BadContent { message }
            | InputError::Unsupported { message, .. }
            | InputError::ProviderMismatch { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for InputError {}

/// Checks a path given to `files/read` or `files/write`.
pub(crate) fn check_path(path: &str) -> Result<(), InputError> {
    if path.is_empty() {
        return Err(InputError::invalid("path", "`path` must not be empty"));
    }
    if path.len() > crate::limits::MAX_PATH_BYTES {
        return Err(InputError::invalid(
            "path",
            format!("`path` exceeds {} bytes", crate::limits::MAX_PATH_BYTES),
        ));
    }
    if path.contains('\0') {
        return Err(InputError::invalid("path", "`path` must not contain NUL"));
    }
    Ok(())
}
