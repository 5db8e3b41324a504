//! OpenAPI schemas of the wire types whose rules a derive cannot say (feature `utoipa`).
//!
//! Ids carry their canonical pattern; request bodies carry exactly the rules their
//! `validate`/`decode` methods enforce, so a body the document calls valid is never refused
//! for its shape, and one it calls invalid is. `CreateSandboxRequest` is a `oneOf` with a
//! `discriminator` on `provider`, one variant per provider, each with exactly the fields that
//! provider accepts (from its advertised capabilities: [`create_request_schemas`]).

use std::borrow::Cow;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AdditionalProperties, Discriminator, Object, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::{PartialSchema, ToSchema};

use crate::capabilities::{ImageMode, ProviderCapabilities, TimeoutMode};
use crate::command::{MAX_TAG_BYTES, SignalInput, StartCommandInput, StdinInput};
use crate::create::{CreateSandboxRequest, MAX_IMAGE_LEN};
use crate::exec::RunCommandInput;
use crate::files::{ReadFileInput, WriteFileInput};
use crate::id::{
    CommandId, OperationId, SandboxId, SnapshotId, ULID_PATTERN, sandbox_id_pattern,
    snapshot_id_pattern,
};
use crate::provider::Provider;

/// A string without NUL, at least one character: paths, `cwd`, `command`.
const NO_NUL_NON_EMPTY: &str = "^[^\\u0000]+$";
/// An absolute path without NUL (`cwd`).
const ABSOLUTE_PATH: &str = "^/[^\\u0000]*$";
/// A string without NUL (environment values).
const NO_NUL: &str = "^[^\\u0000]*$";
/// An environment variable name.
const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Canonical padded standard base64 (RFC 4648), as the decoder accepts it: the unused bits
/// of the last character before the padding are zero.
const BASE64: &str =
    "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";
/// An image: printable characters (no control character), not only whitespace.
const IMAGE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$";

fn string(pattern: &str, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
}

fn closed(b: ObjectBuilder) -> ObjectBuilder {
    b.schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

fn nullable(b: ObjectBuilder, ty: Type) -> ObjectBuilder {
    b.schema_type(utoipa::openapi::schema::SchemaType::from_iter([
        ty,
        Type::Null,
    ]))
}

impl PartialSchema for SandboxId {
    fn schema() -> RefOr<Schema> {
        string(
            &sandbox_id_pattern(),
            "Opaque project-scoped sandbox id: `sbx_<provider>_<ulid>`, the ULID in lowercase Crockford base32.",
        )
        .into()
    }
}
impl ToSchema for SandboxId {}

impl PartialSchema for SnapshotId {
    fn schema() -> RefOr<Schema> {
        string(
            &snapshot_id_pattern(),
            "Opaque project-scoped snapshot id: `snp_<provider>_<ulid>`, the ULID in lowercase Crockford base32.",
        )
        .into()
    }
}
impl ToSchema for SnapshotId {}

impl PartialSchema for OperationId {
    fn schema() -> RefOr<Schema> {
        string(
            &format!("^op_{ULID_PATTERN}$"),
            "The logical create operation (`op_<ulid>`), for reconciliation.",
        )
        .into()
    }
}
impl ToSchema for OperationId {}

impl PartialSchema for CommandId {
    fn schema() -> RefOr<Schema> {
        string(
            &format!("^cmd_{ULID_PATTERN}$"),
            "Opaque project-scoped command id: `cmd_<ulid>`.",
        )
        .into()
    }
}
impl ToSchema for CommandId {}

fn encoding_ref() -> RefOr<Schema> {
    RefOr::Ref(utoipa::openapi::Ref::from_schema_name("FileEncoding"))
}

impl PartialSchema for RunCommandInput {
    fn schema() -> RefOr<Schema> {
        closed(ObjectBuilder::new())
            .description(Some("Run a command in the sandbox (`sh -c` semantics)."))
            .property(
                "command",
                string(
                    NO_NUL_NON_EMPTY,
                    "The command; at most 64 KiB of UTF-8 (beyond: payload_too_large).",
                ),
            )
            .required("command")
            .property(
                "cwd",
                nullable(
                    string(
                        ABSOLUTE_PATH,
                        "Absolute working directory (where the provider's supportsCwd); at most 4096 bytes.",
                    ),
                    Type::String,
                ),
            )
            .property(
                "env",
                nullable(ObjectBuilder::new(), Type::Object)
                    .description(Some(
                        "Environment variables (where the provider's supportsEnv); names and values together at most 64 KiB.",
                    ))
                    .property_names(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some(ENV_NAME)),
                    ))
                    .additional_properties(Some(ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some(NO_NUL)))),
            )
            .into()
    }
}
impl ToSchema for RunCommandInput {}

impl PartialSchema for StartCommandInput {
    fn schema() -> RefOr<Schema> {
        // The command fields are exec's; the job's own fields follow.
        let RefOr::T(Schema::Object(run)) = RunCommandInput::schema() else {
            return RunCommandInput::schema();
        };
        let mut b: ObjectBuilder = run.into();
        b = b
            .description(Some(
                "Start a command as a durable job (`sh -c` semantics); it keeps running whatever happens to the request.",
            ))
            .property(
                "stdin",
                nullable(ObjectBuilder::new(), Type::Boolean).description(Some(
                    "Open a stdin channel (where the provider's commands.stdin); default false.",
                )),
            )
            .property(
                "timeoutSeconds",
                nullable(ObjectBuilder::new(), Type::Integer)
                    .minimum(Some(1.0))
                    .maximum(Some(crate::limits::DEFAULT_MAX_COMMAND_TIMEOUT_SECONDS as f64))
                    .description(Some(
                        "Seconds until Corral kills it (`timed_out`); default and maximum: the server's `[commands] max_timeout_seconds` (86400 unless configured).",
                    )),
            )
            .property(
                "tag",
                nullable(
                    string(
                        &format!("^[ -~]{{1,{MAX_TAG_BYTES}}}$"),
                        "A label of the caller's choosing: 1 to 64 printable ASCII characters.",
                    ),
                    Type::String,
                ),
            );
        b.into()
    }
}
impl ToSchema for StartCommandInput {}

impl PartialSchema for StdinInput {
    fn schema() -> RefOr<Schema> {
        let common = |b: ObjectBuilder| {
            b.property(
                "offset",
                nullable(ObjectBuilder::new(), Type::Integer)
                    .minimum(Some(0.0))
                    // JSON's exactly representable integers: no command takes more stdin.
                    .maximum(Some(9_007_199_254_740_991.0))
                    .description(Some(
                        "The stdin offset `data` starts at (the command's `stdinBytes` when the data was made): bytes before the accepted count are not written again. Absent: append.",
                    )),
            )
            .property(
                "close",
                nullable(ObjectBuilder::new(), Type::Boolean)
                    .description(Some("Close stdin after writing; default false.")),
            )
        };
        // Titles name the classes client generators make: these must not collide with
        // WriteFileInput's `utf8`/`base64` variants (openapi-python-client then drops one).
        let utf8 = common(
            closed(ObjectBuilder::new())
                .title(Some("stdinUtf8"))
                .property(
                    "data",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .description(Some("UTF-8 text; at most 1 MiB encoded.")),
                )
                .property(
                    "encoding",
                    nullable(ObjectBuilder::new(), Type::String)
                        .enum_values(Some([Some("utf8"), None]))
                        .description(Some("`utf8` or absent (the default).")),
                ),
        );
        let base64 = common(
            closed(ObjectBuilder::new())
                .title(Some("stdinBase64"))
                .property(
                    "data",
                    string(
                        BASE64,
                        "Standard padded base64 (RFC 4648); at most 1 MiB decoded.",
                    ),
                )
                .property(
                    "encoding",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some(["base64"])),
                )
                .required("encoding"),
        );
        OneOfBuilder::new()
            .description(Some(
                "Write to a command's stdin (at most 1 MiB decoded per write), optionally closing it.",
            ))
            .item(utf8)
            .item(base64)
            .into()
    }
}
impl ToSchema for StdinInput {}

impl PartialSchema for SignalInput {
    fn schema() -> RefOr<Schema> {
        closed(ObjectBuilder::new())
            .description(Some(
                "Send a signal to a running command (one the provider's commands.signals lists).",
            ))
            .property("signal", crate::capabilities::Signal::schema())
            .required("signal")
            .into()
    }
}
impl ToSchema for SignalInput {}

fn path_property() -> ObjectBuilder {
    string(
        NO_NUL_NON_EMPTY,
        "File path inside the sandbox; at most 4096 bytes.",
    )
}

impl PartialSchema for ReadFileInput {
    fn schema() -> RefOr<Schema> {
        closed(ObjectBuilder::new())
            .description(Some("Read a file (at most 8 MiB)."))
            .property("path", path_property())
            .required("path")
            .property(
                "encoding",
                OneOfBuilder::new()
                    .item(encoding_ref())
                    .item(ObjectBuilder::new().schema_type(Type::Null))
                    .description(Some("Encoding of the returned content; default `utf8`.")),
            )
            .into()
    }
}
impl ToSchema for ReadFileInput {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            crate::FileEncoding::name().into(),
            crate::FileEncoding::schema(),
        ));
    }
}

impl PartialSchema for WriteFileInput {
    fn schema() -> RefOr<Schema> {
        // Which content is valid depends on `encoding`: one variant per encoding.
        let utf8 = closed(ObjectBuilder::new())
            .title(Some("utf8"))
            .property("path", path_property())
            .required("path")
            .property(
                "content",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("UTF-8 text; at most 1 MiB encoded.")),
            )
            .required("content")
            .property(
                "encoding",
                nullable(ObjectBuilder::new(), Type::String)
                    .enum_values(Some([Some("utf8"), None]))
                    .description(Some("`utf8` or absent (the default).")),
            );
        let base64 = closed(ObjectBuilder::new())
            .title(Some("base64"))
            .property("path", path_property())
            .required("path")
            .property(
                "content",
                string(
                    BASE64,
                    "Standard padded base64 (RFC 4648); at most 1 MiB decoded.",
                ),
            )
            .required("content")
            .property(
                "encoding",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["base64"])),
            )
            .required("encoding");
        OneOfBuilder::new()
            .description(Some(
                "Write a file (at most 1 MiB of decoded content; the parent directory must exist).",
            ))
            .item(utf8)
            .item(base64)
            .into()
    }
}
impl ToSchema for WriteFileInput {}

/// The name of the create variant of `provider`, e.g. `CreateSandboxRequestE2b`.
pub fn create_variant_name(provider: Provider) -> String {
    let id = provider.as_str();
    let mut chars = id.chars();
    let capitalized: String = chars
        .next()
        .map(|c| c.to_ascii_uppercase())
        .into_iter()
        .chain(chars)
        .collect();
    format!("CreateSandboxRequest{capitalized}")
}

/// The create variant of one provider: exactly the fields its capabilities let it accept.
fn create_variant(caps: &ProviderCapabilities) -> Object {
    let p = caps.provider;
    let mut b = closed(ObjectBuilder::new())
        .description(Some(format!(
            "Create a sandbox on `{p}` ({}).",
            caps.display_name
        )))
        .property(
            "provider",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([p.as_str()])),
        )
        .required("provider");
    if !p.is_bridge() && caps.image_mode != ImageMode::Fixed {
        b = b.property(
            "image",
            nullable(ObjectBuilder::new(), Type::String)
                .pattern(Some(IMAGE))
                .min_length(Some(1))
                .max_length(Some(MAX_IMAGE_LEN))
                .description(Some(format!(
                    "Runtime image or template (imageMode {}).",
                    match caps.image_mode {
                        ImageMode::Template => "template",
                        ImageMode::Container => "container",
                        ImageMode::Blueprint => "blueprint",
                        ImageMode::Fixed => "fixed",
                    }
                ))),
        );
    }
    if !p.is_bridge() && caps.timeout_mode == TimeoutMode::Seconds {
        let g = caps.timeout_granularity_seconds.unwrap_or(1).max(1);
        b = b.property(
            "timeout",
            nullable(ObjectBuilder::new(), Type::Integer)
                .minimum(Some(g as f64))
                .maximum(caps.timeout_maximum_seconds.map(|m| m as f64))
                .multiple_of((g > 1).then_some(g as f64))
                .description(Some(match caps.timeout_default_seconds {
                    Some(d) => format!("Lifetime in seconds; default {d}."),
                    None => "Lifetime in seconds; without it the sandbox persists until deleted."
                        .to_owned(),
                })),
        );
    }
    if p == Provider::Local {
        b = b.property(
            "network",
            nullable(ObjectBuilder::new(), Type::Boolean).description(Some(
                "A guarded network of the sandbox's own (the outside world; never the host's loopback, link-local or private ranges); refused where the operator allows none. Default false.",
            )),
        );
    }
    if caps.supports_restore {
        b = b.property(
            "snapshot",
            nullable(
                string(
                    &snapshot_id_pattern(),
                    "Restore: the new sandbox's filesystem is this snapshot's (one of this provider's; `image` must be absent).",
                ),
                Type::String,
            ),
        );
    }
    if caps.supports_explicit_stop {
        b = b
            .property(
                "autoResume",
                nullable(ObjectBuilder::new(), Type::Boolean).description(Some(
                    "Calls on the stopped sandbox resume it first instead of answering `sandbox_stopped`. Default false.",
                )),
            )
            .property(
                "idleStopSeconds",
                nullable(ObjectBuilder::new(), Type::Integer)
                    .minimum(Some(crate::limits::MIN_IDLE_STOP_SECONDS as f64))
                    .maximum(Some(crate::limits::MAX_IDLE_STOP_SECONDS as f64))
                    .description(Some(
                        "Stop the sandbox after this many seconds without command, exec or file activity (reason `idle`).",
                    )),
            );
    }
    if p == Provider::Fly {
        for (field, what) in [
            ("app", "The Fly app; falls back to the profile's setting."),
            (
                "region",
                "The Fly region, e.g. `iad`; the provider picks one when absent.",
            ),
        ] {
            b = b.property(
                field,
                nullable(ObjectBuilder::new(), Type::String).description(Some(what)),
            );
        }
    }
    b.build()
}

/// The union of the create variants of `providers`, discriminated by `provider`.
fn create_union(providers: &[Provider]) -> RefOr<Schema> {
    let mut union = OneOfBuilder::new().description(Some(
        "A union discriminated by `provider`: one variant per configured provider, each with exactly the fields that provider accepts.",
    ));
    let mut mapping = std::collections::BTreeMap::new();
    for p in providers {
        let name = create_variant_name(*p);
        union = union.item(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(&name)));
        mapping.insert(
            p.as_str().to_owned(),
            format!("#/components/schemas/{name}"),
        );
    }
    let mut discriminator = Discriminator::new("provider");
    discriminator.mapping = mapping;
    union.discriminator(Some(discriminator)).into()
}

/// `CreateSandboxRequest` and its variants for the providers `catalog` describes, named for
/// `components.schemas`.
pub fn create_request_schemas(catalog: &[ProviderCapabilities]) -> Vec<(String, RefOr<Schema>)> {
    let providers: Vec<Provider> = catalog.iter().map(|c| c.provider).collect();
    let mut out = vec![(
        CreateSandboxRequest::name().into_owned(),
        create_union(&providers),
    )];
    for caps in catalog {
        out.push((
            create_variant_name(caps.provider),
            RefOr::T(Schema::Object(create_variant(caps))),
        ));
    }
    out
}

impl PartialSchema for CreateSandboxRequest {
    /// The union over every provider; a server replaces it (and adds the variants) with
    /// [`create_request_schemas`] of the providers it has configured.
    fn schema() -> RefOr<Schema> {
        create_union(&Provider::ALL)
    }
}
impl ToSchema for CreateSandboxRequest {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("CreateSandboxRequest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_id_pattern_names_every_provider() {
        let pattern = sandbox_id_pattern();
        for p in Provider::ALL {
            assert!(
                pattern.contains(&format!("|{}|", p.as_str()))
                    || pattern.contains(&format!("({}|", p.as_str()))
                    || pattern.contains(&format!("|{})", p.as_str())),
                "{p}"
            );
        }
    }

    #[test]
    fn variants_are_named_after_their_provider() {
        assert_eq!(
            create_variant_name(Provider::E2b),
            "CreateSandboxRequestE2b"
        );
        assert_eq!(
            create_variant_name(Provider::Local),
            "CreateSandboxRequestLocal"
        );
    }
}
