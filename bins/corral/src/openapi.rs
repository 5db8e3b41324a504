//! The OpenAPI document, generated from this code with utoipa and served at
//! `/v1/openapi.json`; `docs/openapi.json` is a committed copy (a test keeps them equal;
//! regenerate with `cargo run -p corral -- openapi > docs/openapi.json`).
//!
//! The schema types below mirror `corral-domain`'s wire types field for field (the domain crate
//! stays serde-only); the HTTP tests deserialize real responses into the domain types, so a
//! drift shows up as a failing test there and a diff here.
#![allow(dead_code)] // Schema mirrors and path stubs exist only to be described.

use std::collections::BTreeMap;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// Provider identifier.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
enum Provider {
    E2b,
    Daytona,
    Vercel,
    Runloop,
    Together,
    Morph,
    Blaxel,
    Sprites,
    Fly,
    Cloudflare,
    Modal,
    Deno,
    Local,
}

/// Normalized lifecycle status.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum SandboxStatus {
    Creating,
    Running,
    Paused,
    Stopped,
    Failed,
    Expired,
    Deleted,
}

/// Where the provider credential came from.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum CredentialSource {
    Profile,
    Inline,
    None,
}

/// Provenance of a sandbox; never a secret.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct SandboxMetadata {
    /// The provider-native id (absent while a create is unconfirmed).
    native_provider_id: Option<String>,
    /// The logical create operation (`op_<ulid>`), for reconciliation.
    operation_id: String,
    credential_source: CredentialSource,
    workspace: Option<String>,
    team_id: Option<String>,
    project_id: Option<String>,
    bridge_url: Option<String>,
}

/// A sandbox (create, get and delete responses).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct Sandbox {
    /// `sbx_<provider>_<ulid>`.
    id: String,
    provider: Provider,
    status: SandboxStatus,
    metadata: SandboxMetadata,
    #[schema(format = DateTime)]
    status_observed_at: Option<String>,
    /// Tombstones only.
    #[schema(format = DateTime)]
    deleted_at: Option<String>,
}

/// One registry record.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct SandboxListItem {
    id: String,
    provider: Provider,
    status: SandboxStatus,
    metadata: SandboxMetadata,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
    #[schema(format = DateTime)]
    status_observed_at: String,
    /// `null` unless deleted.
    #[schema(format = DateTime)]
    deleted_at: Option<String>,
}

/// A page of the registry, newest first.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct SandboxPage {
    items: Vec<SandboxListItem>,
    /// `null` on the last page.
    next_cursor: Option<String>,
}

/// Create request: discriminated by `provider`. Every variant takes `image` and `timeout`
/// (validated against the provider's capabilities); `fly` also takes `app` and `region`.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct CreateSandboxRequest {
    provider: Provider,
    image: Option<String>,
    /// Lifetime in seconds (timeoutMode seconds only).
    #[schema(minimum = 1)]
    timeout: Option<u64>,
    /// `fly` only.
    app: Option<String>,
    /// `fly` only.
    region: Option<String>,
}

/// Run a command.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct RunCommandInput {
    /// At most 64 KiB.
    command: String,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
}

/// A command's result.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct CommandResult {
    sandbox_id: String,
    stdout: String,
    stderr: String,
    exit_code: i32,
    /// A stream was cut at 1 MiB.
    truncated: bool,
}

/// File content encoding.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
enum FileEncoding {
    Utf8,
    Base64,
}

/// Read a file.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct ReadFileInput {
    path: String,
    encoding: Option<FileEncoding>,
}

/// A file's content.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct ReadFileResult {
    sandbox_id: String,
    path: String,
    content: String,
    encoding: FileEncoding,
}

/// Write a file (at most 1 MiB decoded; the parent directory must exist).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct WriteFileInput {
    path: String,
    content: String,
    encoding: Option<FileEncoding>,
}

/// A write's result.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct WriteFileResult {
    sandbox_id: String,
    path: String,
    bytes_written: u64,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum ImageMode {
    Template,
    Container,
    Blueprint,
    Fixed,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum TimeoutMode {
    Seconds,
    ProviderManaged,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
enum OutputStreams {
    Separate,
    Combined,
}

/// Official pricing evidence.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct PricingEvidence {
    summary: String,
    source_url: String,
    /// `YYYY-MM-DD`.
    read_on: String,
}

/// What a provider can do.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct ProviderCapabilities {
    provider: Provider,
    display_name: String,
    pricing: PricingEvidence,
    image_mode: ImageMode,
    timeout_mode: TimeoutMode,
    #[schema(minimum = 1)]
    timeout_default_seconds: Option<u64>,
    #[schema(minimum = 1)]
    timeout_maximum_seconds: Option<u64>,
    #[schema(minimum = 1)]
    timeout_granularity_seconds: Option<u64>,
    supports_cwd: bool,
    supports_env: bool,
    output_streams: OutputStreams,
    supports_persistent_resume: bool,
    supports_explicit_stop: bool,
    supports_snapshots: bool,
    supports_restore: bool,
    supports_delete: bool,
}

/// Every configured provider.
#[derive(ToSchema)]
struct ProviderCatalog {
    providers: Vec<ProviderCapabilities>,
}

/// The normalized error (code set v3).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
struct Error {
    /// A v3 code, e.g. `sandbox_not_found`.
    code: String,
    message: String,
    retryable: bool,
    /// Same as the `X-Request-Id` header.
    request_id: String,
    /// `provider_operation_unavailable` only.
    operation: Option<String>,
    /// `provider_operation_unavailable` only.
    reason: Option<String>,
    /// `provider_operation_unavailable` only.
    remediation: Option<String>,
    /// `idempotency_outcome_unknown` and `sandbox_create_outcome_unknown` only.
    operation_id: Option<String>,
}

/// Every failure.
#[derive(ToSchema)]
struct ErrorEnvelope {
    error: Error,
}

#[utoipa::path(post, path = "/v1/sandboxes", operation_id = "createSandbox", tag = "sandboxes",
    request_body = CreateSandboxRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "1–255 printable ASCII; kept 24 h"),
        ("X-Provider-Credential" = Option<String>, Header, description = "Inline provider credential; never stored"),
        ("X-Provider-Workspace" = Option<String>, Header),
        ("X-Provider-Bridge-Url" = Option<String>, Header),
        ("X-Provider-Team-Id" = Option<String>, Header),
        ("X-Provider-Project-Id" = Option<String>, Header),
    ),
    responses(
        (status = 201, description = "Created", body = Sandbox),
        (status = 200, description = "Replay (header Idempotent-Replayed: true)", body = Sandbox),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn create_sandbox() {}

#[utoipa::path(get, path = "/v1/sandboxes", operation_id = "listSandboxes", tag = "sandboxes",
    params(
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page"),
        ("limit" = Option<u32>, Query, description = "1–200, default 50", minimum = 1, maximum = 200),
    ),
    responses(
        (status = 200, description = "A page, newest first", body = SandboxPage),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn list_sandboxes() {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", operation_id = "getSandbox", tag = "sandboxes",
    params(("id" = String, Path), ("X-Provider-Credential" = Option<String>, Header),
        ("X-Provider-Workspace" = Option<String>, Header), ("X-Provider-Bridge-Url" = Option<String>, Header),
        ("X-Provider-Team-Id" = Option<String>, Header), ("X-Provider-Project-Id" = Option<String>, Header)),
    responses(
        (status = 200, description = "Current state", body = Sandbox),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn get_sandbox() {}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", operation_id = "deleteSandbox", tag = "sandboxes",
    params(("id" = String, Path), ("X-Provider-Credential" = Option<String>, Header),
        ("X-Provider-Workspace" = Option<String>, Header), ("X-Provider-Bridge-Url" = Option<String>, Header),
        ("X-Provider-Team-Id" = Option<String>, Header), ("X-Provider-Project-Id" = Option<String>, Header)),
    responses(
        (status = 200, description = "The tombstone (status deleted)", body = Sandbox),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn delete_sandbox() {}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", operation_id = "runSandboxCommand", tag = "sandboxes",
    request_body = RunCommandInput,
    params(("id" = String, Path), ("X-Provider-Credential" = Option<String>, Header),
        ("X-Provider-Workspace" = Option<String>, Header)),
    responses(
        (status = 200, description = "The command's result", body = CommandResult),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn run_command() {}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/read", operation_id = "readSandboxFile", tag = "sandboxes",
    request_body = ReadFileInput,
    params(("id" = String, Path), ("X-Provider-Credential" = Option<String>, Header),
        ("X-Provider-Workspace" = Option<String>, Header)),
    responses(
        (status = 200, description = "The file", body = ReadFileResult),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn read_file() {}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/write", operation_id = "writeSandboxFile", tag = "sandboxes",
    request_body = WriteFileInput,
    params(("id" = String, Path), ("X-Provider-Credential" = Option<String>, Header),
        ("X-Provider-Workspace" = Option<String>, Header)),
    responses(
        (status = 200, description = "Written", body = WriteFileResult),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
        (status = "5XX", description = "Error", body = ErrorEnvelope),
    ))]
fn write_file() {}

#[utoipa::path(get, path = "/v1/providers", operation_id = "listProviders", tag = "providers",
    responses(
        (status = 200, description = "Every configured provider", body = ProviderCatalog),
        (status = "4XX", description = "Error", body = ErrorEnvelope),
    ))]
fn list_providers() {}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "projectKey",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Corral sandbox orchestration API", version = "0.8.0",
        description = "Provider-neutral control API for persistent sandboxes. Errors use code set v3; see docs/api.md."),
    paths(create_sandbox, list_sandboxes, get_sandbox, delete_sandbox, run_command, read_file, write_file, list_providers),
    components(schemas(ErrorEnvelope)),
    modifiers(&BearerAuth),
    security(("projectKey" = [])),
)]
struct ApiDoc;

/// The OpenAPI document as pretty JSON with a trailing newline.
pub fn document_json() -> String {
    let doc = ApiDoc::openapi();
    let mut text = doc
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
