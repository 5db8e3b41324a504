//! Extractors for what every handler repeats: the authenticated caller, the provider context
//! headers a route takes, a JSON body under the route's limit, and the list query. Each one
//! also describes itself to the OpenAPI document (`IntoParams`), from the same constants it
//! parses with, so what is documented is what is enforced.

use std::future::{Ready, ready};
use std::marker::PhantomData;

use actix_web::dev::Payload;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, web};
use corral_domain::{ProviderContext, limits};
use corral_provider::SecretString;
use corral_service::error::ServiceError;
use corral_service::{Caller, InlineAccess};
use futures::StreamExt as _;
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{Required, Schema};

use crate::reply::{Failure, fail};
use crate::state::AppState;

/// A header value: printable ASCII without leading or trailing spaces, at least one
/// character. (HTTP strips the surrounding spaces anyway; tabs and other bytes are refused.)
pub const HEADER_VALUE_PATTERN: &str = "^[!-~]([ -~]*[!-~])?$";

/// Whether `v` matches [`HEADER_VALUE_PATTERN`].
fn header_value_ok(v: &[u8]) -> bool {
    let printable = |b: &u8| (0x20..=0x7e).contains(b);
    match (v.first(), v.last()) {
        (Some(first), Some(last)) => *first != b' ' && *last != b' ' && v.iter().all(printable),
        _ => false,
    }
}

/// The value of header `name`, when present; refused unless it matches
/// [`HEADER_VALUE_PATTERN`].
pub fn header_text<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, ServiceError> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    if !header_value_ok(v.as_bytes()) {
        return Err(ServiceError::invalid(format!(
            "header {name} must be 1 or more printable ASCII characters without leading or trailing spaces"
        )));
    }
    // Printable ASCII is valid UTF-8.
    Ok(v.to_str().ok())
}

/// One documented request header.
pub struct HeaderDoc {
    /// The header's name.
    pub name: &'static str,
    /// What it means, for the document.
    pub description: &'static str,
}

const CREDENTIAL: HeaderDoc = HeaderDoc {
    name: "X-Provider-Credential",
    description: "Inline provider credential; overrides the project's profile. Never stored, logged or echoed.",
};
const WORKSPACE: HeaderDoc = HeaderDoc {
    name: "X-Provider-Workspace",
    description: "Inline provider workspace (Blaxel); overrides the recorded or profile context.",
};
const BRIDGE_URL: HeaderDoc = HeaderDoc {
    name: "X-Provider-Bridge-Url",
    description: "Inline customer-owned bridge URL (Cloudflare, Modal, Deno). Create, get and delete only: refused on exec and files.",
};
const TEAM_ID: HeaderDoc = HeaderDoc {
    name: "X-Provider-Team-Id",
    description: "Inline team id (Vercel). Create, get and delete only: refused on exec and files.",
};
const PROJECT_ID: HeaderDoc = HeaderDoc {
    name: "X-Provider-Project-Id",
    description: "Inline project id (Vercel). Create, get and delete only: refused on exec and files.",
};
const IDEMPOTENCY_KEY: HeaderDoc = HeaderDoc {
    name: "Idempotency-Key",
    description: "Caller-generated key of the logical create, scoped to the project and kept 24 h: the same request again replays the stored answer byte for byte.",
};

fn header_param(h: &HeaderDoc, max_length: Option<usize>) -> Parameter {
    ParameterBuilder::new()
        .name(h.name)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(h.description))
        .schema(Some(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(max_length)
                .pattern(Some(HEADER_VALUE_PATTERN))
                .build(),
        )))
        .build()
}

/// Which provider context headers a route takes (the spec's header table).
pub trait ContextHeaders {
    /// The headers taken, besides the credential.
    const TAKEN: &'static [&'static HeaderDoc];
    /// The context headers refused (sent to a route that does not take them).
    const REFUSED: &'static [&'static HeaderDoc];
}

/// Create, get and delete: every `X-Provider-*` header.
pub struct AllContext;
impl ContextHeaders for AllContext {
    const TAKEN: &'static [&'static HeaderDoc] = &[&WORKSPACE, &BRIDGE_URL, &TEAM_ID, &PROJECT_ID];
    const REFUSED: &'static [&'static HeaderDoc] = &[];
}

/// Exec and files: `X-Provider-Workspace` only; the rest of the context is the one recorded
/// when the sandbox was created. The others are refused with `invalid_request` rather than
/// ignored: a caller who sends one expects it to matter, and there it cannot.
pub struct WorkspaceOnly;
impl ContextHeaders for WorkspaceOnly {
    const TAKEN: &'static [&'static HeaderDoc] = &[&WORKSPACE];
    const REFUSED: &'static [&'static HeaderDoc] = &[&BRIDGE_URL, &TEAM_ID, &PROJECT_ID];
}

/// The inline provider access of a request: `X-Provider-Credential` and the context headers
/// the route `C` takes.
pub struct Inline<C: ContextHeaders> {
    /// The credential and context.
    pub access: InlineAccess,
    _route: PhantomData<C>,
}

impl<C: ContextHeaders> Inline<C> {
    fn parse(h: &HeaderMap) -> Result<InlineAccess, ServiceError> {
        if let Some(refused) = C::REFUSED.iter().find(|d| h.contains_key(d.name)) {
            return Err(ServiceError::invalid(format!(
                "header {} is taken only by create, get and delete; exec and files use the context recorded when the sandbox was created",
                refused.name
            )));
        }
        let taken = |d: &HeaderDoc| -> Result<Option<String>, ServiceError> {
            if C::TAKEN.iter().any(|t| t.name == d.name) {
                Ok(header_text(h, d.name)?.map(str::to_owned))
            } else {
                Ok(None)
            }
        };
        Ok(InlineAccess {
            credential: header_text(h, CREDENTIAL.name)?.map(SecretString::from),
            context: ProviderContext {
                workspace: taken(&WORKSPACE)?,
                team_id: taken(&TEAM_ID)?,
                project_id: taken(&PROJECT_ID)?,
                bridge_url: taken(&BRIDGE_URL)?,
            },
        })
    }
}

impl<C: ContextHeaders> FromRequest for Inline<C> {
    type Error = Failure;
    type Future = Ready<Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            Self::parse(req.headers())
                .map(|access| Inline {
                    access,
                    _route: PhantomData,
                })
                .map_err(fail(req)),
        )
    }
}

impl<C: ContextHeaders> IntoParams for Inline<C> {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        std::iter::once(&CREDENTIAL)
            .chain(C::TAKEN.iter().copied())
            .map(|h| header_param(h, None))
            .collect()
    }
}

/// `Idempotency-Key` (create only): 1 to 255 printable ASCII characters.
pub struct IdempotencyKey(pub Option<String>);

impl FromRequest for IdempotencyKey {
    type Error = Failure;
    type Future = Ready<Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let key = match header_text(req.headers(), IDEMPOTENCY_KEY.name) {
            Ok(k) => Ok(IdempotencyKey(k.map(str::to_owned))),
            Err(_) => Err(ServiceError::InvalidIdempotencyKey {
                message: format!(
                    "Idempotency-Key must be 1 to {} printable ASCII characters",
                    limits::MAX_IDEMPOTENCY_KEY_LEN
                ),
            }),
        };
        ready(key.map_err(fail(req)))
    }
}

impl IntoParams for IdempotencyKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![header_param(
            &IDEMPOTENCY_KEY,
            Some(limits::MAX_IDEMPOTENCY_KEY_LEN),
        )]
    }
}

/// The caller the bearer API key authenticates, and that key's public id (the part after
/// `crl_`, never the secret), for the audit log.
pub struct Authenticated(pub Caller, pub String);

impl FromRequest for Authenticated {
    type Error = Failure;
    type Future = LocalBoxFuture<'static, Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
                return Err(fail(&req)(ServiceError::internal(
                    "the server has no state",
                )));
            };
            let service = &state.service;
            // Failed authentications are throttled per source address: the peer's, or the
            // client a trusted proxy names (a forwarded-for header from anyone else is the
            // client's to forge).
            let source = crate::edge::client_address(&req)
                .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
            service.check_source(&source).map_err(fail(&req))?;
            let auth = req
                .headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap_or(""));
            let caller = match service.authenticate(auth).await {
                Ok(caller) => caller,
                Err(e) => {
                    if e.code() == corral_errors::ErrorCode::AuthenticationError {
                        service.authentication_failed(&source);
                    }
                    return Err(fail(&req)(e));
                }
            };
            // The key's public id (`crl_<id>_<secret>`), for the per-key rate.
            let key_id = auth
                .and_then(|a| a.trim().split_once(' '))
                .and_then(|(_, key)| key.trim().split('_').nth(1))
                .unwrap_or("unknown")
                .to_owned();
            match service.admit(&caller, &key_id) {
                Ok(admission) => {
                    req.extensions_mut().insert(admission);
                    Ok(Authenticated(caller, key_id))
                }
                Err((e, admission)) => {
                    req.extensions_mut().insert(admission);
                    Err(fail(&req)(e))
                }
            }
        })
    }
}

/// Body limits, per route.
pub trait BodyLimit {
    /// The largest body accepted, in bytes; beyond it `payload_too_large`.
    const BYTES: usize;
    /// Whether the route takes no credential, so its body gets the short deadline of
    /// [`crate::edge::unauthenticated_body`] instead of [`BODY_TOTAL`].
    const UNAUTHENTICATED: bool = false;
}

/// 64 KiB: create and file reads.
pub struct Small;
impl BodyLimit for Small {
    const BYTES: usize = 64 * 1024;
}

/// 64 KiB within the unauthenticated deadline: the sign-in routes.
pub struct Unauthenticated;
impl BodyLimit for Unauthenticated {
    const BYTES: usize = 64 * 1024;
    const UNAUTHENTICATED: bool = true;
}

/// 512 KiB: exec (the command and the environment, 64 KiB each, plus JSON escaping).
pub struct ExecBody;
impl BodyLimit for ExecBody {
    const BYTES: usize = 512 * 1024;
}

/// 7 MiB: `files/write` (1 MiB of decoded content may arrive as ~1.4 MiB of base64, or as up
/// to 6 MiB of JSON-escaped text; the decoded limit is enforced by the service).
pub struct WriteBody;
impl BodyLimit for WriteBody {
    const BYTES: usize = 7 * 1024 * 1024;
}

/// A JSON body of at most `L::BYTES`, parsed into `T`. A wrong `Content-Type` is
/// `invalid_request` (a missing one is accepted); a larger body is `payload_too_large`.
pub struct Json<T, L: BodyLimit>(pub T, PhantomData<L>);

impl<T: DeserializeOwned + 'static, L: BodyLimit + 'static> FromRequest for Json<T, L> {
    type Error = Failure;
    type Future = LocalBoxFuture<'static, Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        let total = if L::UNAUTHENTICATED {
            crate::edge::unauthenticated_body(&req)
        } else {
            BODY_TOTAL
        };
        Box::pin(async move {
            read_json_within::<T>(&req, &mut payload, L::BYTES, total)
                .await
                .map(|v| Json(v, PhantomData))
                .map_err(fail(&req))
        })
    }
}

/// A JSON body of at most `L::BYTES` that may be absent: an empty body (or `null`) is
/// `T::default()` (a snapshot without a name, a fork of one copy).
pub struct OptionalJson<T, L: BodyLimit>(pub T, PhantomData<L>);

impl<T: DeserializeOwned + Default + 'static, L: BodyLimit + 'static> FromRequest
    for OptionalJson<T, L>
{
    type Error = Failure;
    type Future = LocalBoxFuture<'static, Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let parsed = async {
                // Only an object (or nothing): serde would also read a struct from an array.
                match read_optional_json::<serde_json::Value>(&req, &mut payload, L::BYTES).await? {
                    None => Ok(T::default()),
                    Some(v @ serde_json::Value::Object(_)) => serde_json::from_value(v)
                        .map_err(|e| ServiceError::invalid(format!("invalid JSON body: {e}"))),
                    Some(_) => Err(ServiceError::invalid("the JSON body must be an object")),
                }
            };
            parsed
                .await
                .map(|v| OptionalJson(v, PhantomData))
                .map_err(fail(&req))
        })
    }
}

/// A client that stops sending its body would hold a connection (and, for a slow trickle, a
/// worker's attention) indefinitely: the body must keep arriving, a chunk at least every
/// `BODY_IDLE`, and be complete within `BODY_TOTAL` (on unauthenticated routes, within the
/// shorter [`crate::edge::unauthenticated_body`]).
pub const BODY_IDLE: std::time::Duration = std::time::Duration::from_secs(10);
/// See [`BODY_IDLE`].
pub const BODY_TOTAL: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) async fn read_json<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> Result<T, ServiceError> {
    read_json_within(req, payload, limit, BODY_TOTAL).await
}

/// [`read_json`] for an optional body: an empty one (whatever its `Content-Type`) or `null`
/// is `None`.
pub(crate) async fn read_optional_json<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> Result<Option<T>, ServiceError> {
    let body = read_body(req, payload, limit, BODY_TOTAL).await?;
    if body.is_empty() {
        return Ok(None);
    }
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ServiceError::invalid(
                "Content-Type must be application/json",
            ));
        }
    }
    // A JSON `null` is no body too (the document allows it).
    serde_json::from_slice::<Option<T>>(&body)
        .map_err(|e| ServiceError::invalid(format!("invalid JSON body: {e}")))
}

/// [`read_json`], the whole body within `total`.
async fn read_json_within<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
    total: std::time::Duration,
) -> Result<T, ServiceError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ServiceError::invalid(
                "Content-Type must be application/json",
            ));
        }
    }
    let body = read_body(req, payload, limit, total).await?;
    if body.is_empty() {
        return Err(ServiceError::invalid("a JSON request body is required"));
    }
    serde_json::from_slice(&body)
        .map_err(|e| ServiceError::invalid(format!("invalid JSON body: {e}")))
}

/// The whole body, at most `limit` bytes (else `payload_too_large`), arriving a chunk at
/// least every [`BODY_IDLE`] and complete within `total` (else `request_timeout`).
///
/// # Errors
/// As above, or `invalid_request` when the body cannot be read.
pub async fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
    total: std::time::Duration,
) -> Result<web::BytesMut, ServiceError> {
    let too_large = || ServiceError::PayloadTooLarge {
        message: format!("the request body exceeds {limit} bytes"),
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > limit
    {
        return Err(too_large());
    }
    let idle = BODY_IDLE.min(total);
    let mut body = web::BytesMut::new();
    let deadline = tokio::time::Instant::now() + total;
    loop {
        let wait = deadline.min(tokio::time::Instant::now() + idle);
        let Ok(next) = tokio::time::timeout_at(wait, payload.next()).await else {
            return Err(ServiceError::RequestTimeout {
                message: format!(
                    "the request body stalled (no data for {} s, or not complete within {} s)",
                    idle.as_secs(),
                    total.as_secs()
                ),
            });
        };
        let Some(chunk) = next else { break };
        let chunk =
            chunk.map_err(|e| ServiceError::invalid(format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `GET /v1/sandboxes` query: `cursor` and `limit`; any other parameter is refused.
pub struct ListQuery {
    /// The previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListQuery {
    cursor: Option<String>,
    limit: Option<String>,
}

impl FromRequest for ListQuery {
    type Error = Failure;
    type Future = Ready<Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let parsed = web::Query::<RawListQuery>::from_query(req.query_string())
            .map_err(|e| ServiceError::invalid(format!("invalid query: {e}")))
            .and_then(|q| {
                let q = q.into_inner();
                let limit = match q.limit {
                    None => None,
                    Some(l) => Some(
                        l.parse::<u32>()
                            .ok()
                            .filter(|l| (1..=limits::MAX_PAGE_LIMIT).contains(l))
                            .ok_or_else(|| {
                                ServiceError::invalid(format!(
                                    "`limit` must be an integer from 1 to {}",
                                    limits::MAX_PAGE_LIMIT
                                ))
                            })?,
                    ),
                };
                Ok(ListQuery {
                    cursor: q.cursor,
                    limit,
                })
            });
        ready(parsed.map_err(fail(req)))
    }
}

impl IntoParams for ListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        list_params(corral_registry::cursor_pattern())
    }
}

/// [`ListQuery`] for the snapshot registry, whose cursors name snapshots.
pub struct SnapshotListQuery(pub ListQuery);

impl FromRequest for SnapshotListQuery {
    type Error = Failure;
    type Future = Ready<Result<Self, Failure>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        match ListQuery::from_request(req, payload).into_inner() {
            Ok(q) => ready(Ok(SnapshotListQuery(q))),
            Err(e) => ready(Err(e)),
        }
    }
}

impl IntoParams for SnapshotListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        list_params(corral_registry::snapshot_cursor_pattern())
    }
}

/// `cursor` (of the given pattern) and `limit`.
fn list_params(cursor_pattern: String) -> Vec<Parameter> {
    {
        vec![
            ParameterBuilder::new()
                .name("cursor")
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(
                    "Opaque: the `nextCursor` of the previous page. A cursor of another form is `invalid_request`.",
                ))
                .schema(Some(Schema::Object(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some(cursor_pattern))
                        .build(),
                )))
                .build(),
            ParameterBuilder::new()
                .name("limit")
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some("Maximum records returned; default 50."))
                .schema(Some(Schema::Object(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1.0))
                        .maximum(Some(f64::from(limits::MAX_PAGE_LIMIT)))
                        .default(Some(serde_json::json!(limits::DEFAULT_PAGE_LIMIT)))
                        .build(),
                )))
                .build(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_checked_as_the_document_says() {
        for ok in ["a", "a b", "~!", "key-1"] {
            assert!(header_value_ok(ok.as_bytes()), "{ok:?}");
        }
        for bad in ["", " ", " a", "a ", "a\tb", "é"] {
            assert!(!header_value_ok(bad.as_bytes()), "{bad:?}");
        }
    }
}
