//! Usage and cost estimates over HTTP: `GET /v1/usage` (the project's rollup per provider
//! and UTC day) and `GET /v1/sandboxes/{id}/usage` (one sandbox so far). One
//! `corral-service` call per request.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, get, web};
use corral_domain::{SandboxId, SandboxUsage, UsageReport};
use corral_errors::ErrorCode;
use utoipa::IntoParams;

use crate::commands::query;
use crate::doc::{ANY, errors};
use crate::extract::Authenticated;
use crate::reply::{Reply, fail, json_ok};
use crate::state::AppState;

errors!(UsageErrors: ANY);
errors!(SandboxUsageErrors: ANY, &[ErrorCode::InvalidSandboxId, ErrorCode::SandboxNotFound]);

/// `GET /v1/usage` query.
#[derive(serde::Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct UsageQuery {
    /// Start of the range (inclusive): a date `YYYY-MM-DD` (its UTC midnight; an RFC 3339
    /// timestamp is accepted too). Default: UTC midnight six days before `to`'s day. A range
    /// longer than 93 days is cut to the 93 days before `to`; a `from` not before `to` gives
    /// an empty range. The answer's `from` and `to` say what was read.
    #[param(value_type = Option<String>, format = Date)]
    from: Option<String>,
    /// End of the range (exclusive), as `from`; later than now is read as now. Default: now.
    #[param(value_type = Option<String>, format = Date)]
    to: Option<String>,
}

/// Estimated usage of the project per provider and UTC day.
///
/// **Estimates, not a bill.** Running time is the time Corral recorded each sandbox as
/// `running` in its lifecycle events (from a running status until the next other status —
/// paused, stopped, failed, expired, deleted — or now), split at UTC midnight; the cost is
/// that time priced with the provider's published per-unit rates for the size its pricing
/// evidence documents. Rates that could not be applied (storage, creations, a resource of
/// unknown size) are listed in `notEstimated`; each row carries the evidence (rates with
/// their source URL and the date they were read). Usage older than the event retention is
/// not known.
#[utoipa::path(
    operation_id = "getUsage", tag = "usage",
    params(UsageQuery),
    responses(
        (status = 200, description = "One row per provider and UTC day with running time.", body = UsageReport),
        UsageErrors,
    ))]
#[get("/v1/usage")]
pub(crate) async fn get_usage(
    req: HttpRequest,
    caller: Authenticated,
    state: web::Data<AppState>,
) -> Reply {
    let q: UsageQuery = query(&req).map_err(fail(&req))?;
    let report = state
        .service
        .usage(&caller.0, q.from.as_deref(), q.to.as_deref())
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &report))
}

/// Estimated usage of one sandbox so far (deleted ones included), computed as for
/// `GET /v1/usage` over the sandbox's whole recorded lifecycle. **An estimate, not a bill.**
#[utoipa::path(
    operation_id = "getSandboxUsage", tag = "usage",
    params(("id" = SandboxId, Path, description = "The opaque sandbox id from create.")),
    responses(
        (status = 200, description = "The sandbox's running time and estimated cost so far.", body = SandboxUsage),
        SandboxUsageErrors,
    ))]
#[get("/v1/sandboxes/{id}/usage")]
pub(crate) async fn get_sandbox_usage(
    req: HttpRequest,
    caller: Authenticated,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> Reply {
    let usage = state
        .service
        .sandbox_usage(&caller.0, &id)
        .await
        .map_err(fail(&req))?;
    Ok(json_ok(StatusCode::OK, &usage))
}
