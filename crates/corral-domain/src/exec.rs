use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::capabilities::ProviderCapabilities;
use crate::id::SandboxId;
use crate::input::InputError;
use crate::limits::MAX_COMMAND_BYTES;

/// `POST /v1/sandboxes/{id}/exec` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCommandInput {
    /// The command, run with `sh -c` semantics.
    pub command: String,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables for the command (string values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl RunCommandInput {
    /// Checks the command against the limits and the provider's capabilities.
    pub fn validate(&self, caps: &ProviderCapabilities) -> Result<(), InputError> {
        let provider = caps.provider;
        // Empty is refused; whitespace alone is a valid (if idle) shell command.
        if self.command.is_empty() {
            return Err(InputError::invalid(
                "command",
                "`command` must not be empty",
            ));
        }
        if self.command.len() > MAX_COMMAND_BYTES {
            return Err(InputError::TooLarge {
                field: "command",
                limit: MAX_COMMAND_BYTES,
            });
        }
        if self.command.contains('\0') {
            return Err(InputError::invalid(
                "command",
                "`command` must not contain NUL",
            ));
        }
        if let Some(cwd) = &self.cwd {
            if !caps.supports_cwd {
                return Err(InputError::invalid(
                    "cwd",
                    format!("`cwd` is not supported by provider `{provider}`"),
                ));
            }
            crate::input::check_path(cwd)
                .ok()
                .filter(|()| cwd.starts_with('/'))
                .ok_or_else(|| {
                    InputError::invalid("cwd", "`cwd` must be an absolute path without NUL")
                })?;
        }
        if let Some(env) = &self.env {
            if !caps.supports_env && !env.is_empty() {
                return Err(InputError::invalid(
                    "env",
                    format!("`env` is not supported by provider `{provider}`"),
                ));
            }
            let env_bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
            if env_bytes > MAX_COMMAND_BYTES {
                return Err(InputError::TooLarge {
                    field: "env",
                    limit: MAX_COMMAND_BYTES,
                });
            }
            for (k, v) in env {
                let name_ok = !k.is_empty()
                    && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !k.as_bytes()[0].is_ascii_digit();
                if !name_ok {
                    return Err(InputError::invalid(
                        "env",
                        format!("`env` name {k:?} must match [A-Za-z_][A-Za-z0-9_]*"),
                    ));
                }
                if v.contains('\0') {
                    return Err(InputError::invalid(
                        "env",
                        format!("`env` value of {k} must not contain NUL"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `exec` result. With `outputStreams: combined`, everything is in `stdout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CommandResult {
    /// The sandbox the command ran in.
    pub sandbox_id: SandboxId,
    /// Captured standard output (lossy UTF-8).
    pub stdout: String,
    /// Captured standard error (lossy UTF-8; empty when output is combined).
    pub stderr: String,
    /// Exit code; `128 + n` when the command was killed by signal `n`.
    pub exit_code: i32,
    /// Whether either stream was cut at the per-stream output limit.
    pub truncated: bool,
}
