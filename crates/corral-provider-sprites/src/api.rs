//! Fly Sprites' wire types, named as the Sprites API's OpenAPI description names them
//! (`CreateSpriteRequest`, `SpriteResponse`), and the exec WebSocket's frames as its protocol
//! documents them.

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/sprites`.
#[derive(Debug, Clone, Serialize)]
pub struct CreateSpriteRequest {
    /// Unique name in the organization.
    pub name: String,
}

/// A sprite as the API reports it (`SpriteResponse`, the fields Corral reads).
#[derive(Debug, Clone, Deserialize)]
pub struct SpriteResponse {
    /// The name (Corral's native id).
    pub name: String,
    /// `cold`, `warm` or `running`.
    pub status: String,
}

/// The first byte of a binary exec frame: which stream its payload belongs to.
pub mod stream {
    /// Client to sprite: standard input.
    pub const STDIN: u8 = 0;
    /// Sprite to client: standard output.
    pub const STDOUT: u8 = 1;
    /// Sprite to client: standard error.
    pub const STDERR: u8 = 2;
    /// Sprite to client: the exit code, one byte.
    pub const EXIT: u8 = 3;
    /// Client to sprite: end of standard input.
    pub const STDIN_EOF: u8 = 4;
}

/// A JSON text message on the exec WebSocket (`session_info`, `exit`, port notices, …).
#[derive(Debug, Clone, Deserialize)]
pub struct TextMessage {
    /// The message type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The exit code (`exit`).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The exec session's id (`session_info`), for the kill endpoint.
    #[serde(default)]
    pub session_id: Option<u64>,
}

/// One element of `GET /v1/sprites/{name}/exec` (List Exec Sessions; the fields Corral reads).
#[derive(Debug, Clone, Deserialize)]
pub struct ExecSession {
    /// The session id (the process's pid).
    pub id: u64,
    /// The command line (the argv, joined).
    #[serde(default)]
    pub command: String,
    /// Whether it still runs.
    #[serde(default)]
    pub is_active: bool,
}
