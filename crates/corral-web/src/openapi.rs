//! The OpenAPI document, derived from the code: paths and parameters from the handlers'
//! `#[utoipa::path]` and the extractors (collected by registering the same services the
//! router runs, [`crate::api::api`]), schemas from `corral-domain`'s own types (feature
//! `utoipa`), the error envelope from the v3 code table, and the create union from the
//! capabilities of the configured providers.
//!
//! Served at `/v1/openapi.json` for the providers this server has; `docs/openapi.json` is the
//! document for every provider compiled in (a test of the server keeps it equal to
//! [`document_json`] of every compiled-in provider's capabilities; regenerate with
//! `cargo xtask openapi`).

use actix_web::App;
use corral_domain::ProviderCapabilities;
use corral_errors::ErrorCode;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{Modify, OpenApi as _};
use utoipa_actix_web::AppExt as _;

struct Components;

impl Modify for Components {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "projectKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The project API key: `Authorization: Bearer <API key>`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            crate::session::SESSION_SCHEME,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::session::SESSION_COOKIE,
                "The session cookie set by a sign-in (`HttpOnly; SameSite=Lax`). State-changing requests also need the header `X-CSRF-Token` (from `GET /v1/control/me`) and, when the browser sends `Origin` or `Referer`, this server's public URL there.",
            ))),
        );
        components
            .schemas
            .insert("ErrorEnvelope".to_owned(), error_envelope());
    }
}

/// `{"error": {...}}` with the code set of `corral-errors`.
fn error_envelope() -> RefOr<Schema> {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let error = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("The normalized error, safe to expose (code set v3)."))
        .property(
            "code",
            string().enum_values(Some(codes)).description(Some(
                "Stable code; clients handle the code, not the message.",
            )),
        )
        .required("code")
        .property("message", string())
        .required("message")
        .property("retryable", ObjectBuilder::new().schema_type(Type::Boolean))
        .required("retryable")
        .property(
            "requestId",
            string().description(Some("As in the `X-Request-Id` header.")),
        )
        .required("requestId")
        .property(
            "operation",
            string().description(Some("`provider_operation_unavailable` only.")),
        )
        .property(
            "reason",
            string().description(Some("`provider_operation_unavailable` only.")),
        )
        .property(
            "remediation",
            string().description(Some("`provider_operation_unavailable` only.")),
        )
        .property(
            "operationId",
            string().description(Some(
                "`idempotency_outcome_unknown` and `sandbox_create_outcome_unknown` only.",
            )),
        )
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("Every failure."))
        .property("error", error)
        .required("error")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .into()
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "Corral sandbox orchestration API", version = "0.8.0",
        description = "Provider-neutral control API for persistent sandboxes. Errors use code set v3; decisions the spec leaves open are in docs/api.md."),
    modifiers(&Components),
    security(("projectKey" = [])),
    servers((url = "/", description = "The server this document is served from (`GET /openapi.json`); clients are given its base URL.")),
    tags((name = "sandboxes", description = "Sandboxes on any configured provider: created idempotently, listed from the registry (tombstones included), read with a live status, used through exec and files, deleted (docs/api.md)."),
        (name = "providers", description = "The configured providers and their capabilities: what a create may ask of each, which signals and streams its commands have."),
        (name = "commands", description = "Commands as durable jobs: started at once, followed with resumable output (Server-Sent Events whose ids resume exactly), fed through stdin and signalled, on every provider (docs/commands.md)."),
        (name = "lifecycle", description = "Stop and resume, snapshots, restores and forks, where each provider's capabilities say it can (docs/lifecycle.md)."),
        (name = "events", description = "Lifecycle events of a project's sandboxes and commands, read by cursor or followed as Server-Sent Events that resume with `Last-Event-ID` (docs/operations.md)."),
        (name = "usage", description = "Estimated running time and cost per provider and UTC day, and per sandbox: estimates from the recorded lifecycle and the providers' published rates, never a bill (docs/operations.md)."),
        (name = "control-plane", description = "Accounts, organizations, projects, API keys, provider profiles and legal releases for people in a browser: authenticated by the session cookie, never by an API key (docs/control-plane.md)."),
        (name = "webhook-endpoints", description = "Webhook endpoints that receive the project's lifecycle events, signed as Standard Webhooks, with their deliveries (docs/operations.md)."),
        (name = "webhooks", description = "Events from services Corral uses (the email service's delivery events), signed as Standard Webhooks.")),
)]
struct Base;

/// The document for a server whose providers have `catalog` (empty: every provider, with
/// the generic create variants only).
pub fn document(catalog: &[ProviderCapabilities]) -> OpenApi {
    let (_app, mut doc) = App::new()
        .into_utoipa_app()
        .openapi(Base::openapi())
        .configure(crate::api::api)
        .split_for_parts();
    if !catalog.is_empty() {
        let schemas = &mut doc.components.get_or_insert_with(Default::default).schemas;
        for (name, schema) in corral_domain::openapi::create_request_schemas(catalog) {
            schemas.insert(name, schema);
        }
    }
    doc
}

/// The operations that take the id a create (or its replay) answers with: OpenAPI links, so a
/// client or a stateful tester can follow create → get/exec/files/delete.
const ON_CREATED: [(&str, &str); 6] = [
    ("GetSandbox", "getSandbox"),
    ("StartCommand", "startCommand"),
    ("RunSandboxCommand", "runSandboxCommand"),
    ("WriteSandboxFile", "writeSandboxFile"),
    ("ReadSandboxFile", "readSandboxFile"),
    ("DeleteSandbox", "deleteSandbox"),
];

/// The operations that take the command id a start answers with.
const ON_STARTED: [(&str, &str); 4] = [
    ("GetCommand", "getCommand"),
    ("GetCommandOutput", "getCommandOutput"),
    ("WriteCommandStdin", "writeCommandStdin"),
    ("SignalCommand", "signalCommand"),
];

/// Adds the links at the JSON level: utoipa 5.5 serializes `Link` with snake_case keys
/// (`operation_id`), which no OpenAPI tool reads.
fn add_links(doc: &mut serde_json::Value) {
    let started = &mut doc["paths"]["/v1/sandboxes/{id}/commands"]["post"]["responses"];
    for status in ["200", "201"] {
        let Some(response) = started.get_mut(status).and_then(|r| r.as_object_mut()) else {
            continue;
        };
        let links: serde_json::Map<String, serde_json::Value> = ON_STARTED
            .iter()
            .map(|(name, operation_id)| {
                (
                    (*name).to_owned(),
                    serde_json::json!({
                        "operationId": operation_id,
                        "parameters": {"id": "$request.path.id", "cmd": "$response.body#/id"},
                    }),
                )
            })
            .collect();
        response.insert("links".to_owned(), serde_json::Value::Object(links));
    }
    let responses = &mut doc["paths"]["/v1/sandboxes"]["post"]["responses"];
    for status in ["200", "201"] {
        let Some(response) = responses.get_mut(status).and_then(|r| r.as_object_mut()) else {
            continue;
        };
        let links: serde_json::Map<String, serde_json::Value> = ON_CREATED
            .iter()
            .map(|(name, operation_id)| {
                (
                    (*name).to_owned(),
                    serde_json::json!({
                        "operationId": operation_id,
                        "parameters": {"id": "$response.body#/id"},
                    }),
                )
            })
            .collect();
        response.insert("links".to_owned(), serde_json::Value::Object(links));
    }
}

/// Unions whose variants differ only by an optional `encoding` (absent means `utf8`): a body
/// without it matches more than one variant, so they are `anyOf`, not `oneOf` (Redocly's
/// `no-illogical-composition-keywords`). Making `encoding` required would change the wire.
const OVERLAPPING_UNIONS: [&str; 2] = ["StdinInput", "WriteFileInput"];

/// What Redocly's recommended lint asks of the document beyond what utoipa writes: the
/// overlapping unions as `anyOf`, and no schema components that nothing references (utoipa
/// registers the item types of generic wrappers such as `Items<MemberView>`, which it
/// inlines).
fn lint_clean(doc: &mut serde_json::Value) {
    let schemas = &mut doc["components"]["schemas"];
    for name in OVERLAPPING_UNIONS {
        if let Some(schema) = schemas.get_mut(name).and_then(|s| s.as_object_mut())
            && let Some(variants) = schema.remove("oneOf")
        {
            schema.insert("anyOf".to_owned(), variants);
        }
    }
    // Removing one unused component may leave another unused: repeat until none is.
    loop {
        let text = doc.to_string();
        let Some(schemas) = doc["components"]["schemas"].as_object_mut() else {
            return;
        };
        let unused: Vec<String> = schemas
            .keys()
            .filter(|name| !text.contains(&format!("\"#/components/schemas/{name}\"")))
            .cloned()
            .collect();
        if unused.is_empty() {
            return;
        }
        for name in unused {
            schemas.remove(&name);
        }
    }
}

/// [`document`] as pretty JSON with a trailing newline.
pub fn document_json(catalog: &[ProviderCapabilities]) -> String {
    let mut value = match serde_json::to_value(document(catalog)) {
        Ok(v) => v,
        Err(e) => return format!("{{\"error\": \"{e}\"}}\n"),
    };
    add_links(&mut value);
    lint_clean(&mut value);
    let mut text =
        serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
