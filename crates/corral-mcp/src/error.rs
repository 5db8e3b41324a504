//! [`ToolError`]: a failed tool call as the agent reads it, the one error type of the tools
//! and of every [`crate::Backend`].

use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult};
use serde::Serialize;
use serde_json::json;

/// A failed tool call, as the agent reads it: the v3 code, the message, the request id and
/// whether the same call may succeed later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolError {
    /// The v3 code (`sandbox_not_found`, `rate_limited`, …), or `invalid_request` for input
    /// the tool refused before any call, or `provider_unavailable` when the server could not
    /// be reached.
    pub code: String,
    /// For people.
    pub message: String,
    /// The server's request id, to quote to its operator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Whether the same call may succeed later.
    pub retryable: bool,
}

impl ToolError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: corral_errors::ErrorCode::InvalidRequest.as_str().to_owned(),
            message: message.into(),
            request_id: None,
            retryable: false,
        }
    }
}

impl From<corral_client::Error> for ToolError {
    fn from(e: corral_client::Error) -> Self {
        let code = e.code().unwrap_or(match e {
            // Unreachable server: the nearest v3 meaning, and worth retrying.
            corral_client::Error::Transport { .. } => corral_errors::ErrorCode::ProviderUnavailable,
            _ => corral_errors::ErrorCode::InternalError,
        });
        Self {
            code: code.as_str().to_owned(),
            message: e.to_string(),
            request_id: e.request_id().map(str::to_owned),
            retryable: e.is_retryable(),
        }
    }
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, rmcp::ErrorData> {
        Ok(CallToolResult::structured_error(json!({ "error": self })).into())
    }
}
