//! A project's provider connections: readiness, connect or update a profile (an empty
//! credential field keeps the stored one), deep verification and disconnect.

use std::str::FromStr;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use corral_control::{ControlError, ProfileView, ProjectId, PutProfile};
use corral_domain::{Provider, ProviderContext};
use corral_web::AppState;
use secrecy::SecretString;

use super::ctx::{
    Page, ago, control, failed, failure_page, get_ctx, parse, post_ctx, project_chrome, try_page,
};
use crate::form::Form;
use crate::pages::{self, paths};
use crate::respond::{html, not_found, redirect};
use crate::view::{self, Flash};

// --- provider profiles ---------------------------------------------------------------------------

/// The context fields of a provider's form: (form name, label, hint, wire name).
fn context_fields(provider: Provider) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    for field in corral_control::required_context(provider) {
        out.push(match *field {
            "workspace" => ("workspace", "Workspace", "Your provider workspace's name."),
            "teamId" => ("teamId", "Team id", "The team that owns the sandboxes."),
            "projectId" => ("projectId", "Project id", "The provider project to bill."),
            "bridgeUrl" => (
                "bridgeUrl",
                "Bridge URL",
                "The https URL of the Corral bridge you deployed in your account.",
            ),
            other => (other, other, ""),
        });
    }
    if provider == Provider::Fly {
        out.push(("app", "Fly app", "The Fly app the machines run in."));
    }
    out
}

fn context_value(profile: Option<&ProfileView>, name: &str) -> String {
    let Some(p) = profile else {
        return String::new();
    };
    let c = &p.context;
    match name {
        "workspace" => c.workspace.clone(),
        "teamId" => c.team_id.clone(),
        "projectId" => c.project_id.clone(),
        "bridgeUrl" => c.bridge_url.clone(),
        other => p
            .settings
            .get(other)
            .and_then(|v| v.as_str())
            .map(str::to_owned),
    }
    .unwrap_or_default()
}

/// The display name of a provider.
fn label(p: Provider) -> &'static str {
    match p {
        Provider::Local => "Local",
        Provider::E2b => "E2B",
        Provider::Daytona => "Daytona",
        Provider::Vercel => "Vercel Sandbox",
        Provider::Runloop => "Runloop",
        Provider::Together => "Together",
        Provider::Morph => "Morph Cloud",
        Provider::Blaxel => "Blaxel",
        Provider::Fly => "Fly Machines",
        Provider::Sprites => "Sprites",
        Provider::Cloudflare => "Cloudflare",
        Provider::Modal => "Modal",
        Provider::Deno => "Deno Deploy",
    }
}

/// `GET …/projects/{project}/providers`.
pub(crate) async fn providers_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let control = control(&state);
    let (chrome, project, pid) =
        try_page!(project_chrome(&req, control, &ctx, &path.0, &path.1).await);
    let profiles = match control.list_profiles(&ctx.signed.actor, pid).await {
        Ok(p) => p,
        Err(e) => return failure_page(&req, &e),
    };
    let enabled = control.service().provider_ids();
    // Connected providers first, then the ones this server runs, then the rest.
    let mut providers: Vec<Provider> = Provider::ALL
        .into_iter()
        .filter(|p| *p != Provider::Local)
        .collect();
    providers.sort_by_key(|p| {
        (
            !profiles.iter().any(|x| x.provider == *p),
            !enabled.contains(p),
        )
    });
    let cards = providers
        .into_iter()
        .map(|p| {
            let profile = profiles.iter().find(|x| x.provider == p);
            view::ProviderCard {
                provider: p.as_str().to_owned(),
                label: label(p).to_owned(),
                enabled: enabled.contains(&p),
                connected: profile.is_some(),
                has_credential: profile.is_some_and(|x| x.has_credential),
                needs_credential: !p.is_bridge(),
                fields: context_fields(p)
                    .into_iter()
                    .map(|(name, label, hint)| view::ContextField {
                        name,
                        label,
                        hint,
                        value: context_value(profile, name),
                    })
                    .collect(),
                missing: profile
                    .map(|x| x.readiness.missing.clone())
                    .unwrap_or_default(),
                checks: profile.map(checks).unwrap_or_default(),
            }
        })
        .collect();
    html(
        &req,
        StatusCode::OK,
        pages::providers(&view::ProvidersPage {
            chrome,
            project,
            cards,
        }),
    )
}

/// A profile's verification results in the order the test runs them (the store sorts them by
/// name).
fn checks(profile: &ProfileView) -> Vec<view::CheckRow> {
    const ORDER: [&str; 6] = ["create", "exec", "write_file", "read_file", "get", "delete"];
    let mut rows: Vec<view::CheckRow> = profile
        .verifications
        .iter()
        .map(|v| view::CheckRow {
            operation: v.operation.clone(),
            ok: v.ok,
            reason: v.reason.clone(),
            remediation: v.remediation.clone(),
            checked: ago(v.checked_at),
        })
        .collect();
    rows.sort_by_key(|r| {
        ORDER
            .iter()
            .position(|o| *o == r.operation)
            .unwrap_or(ORDER.len())
    });
    rows
}

fn provider_of(req: &HttpRequest, s: &str) -> Result<Provider, Page> {
    Provider::from_str(s).map_err(|_| not_found(req))
}

/// `POST …/projects/{project}/providers/{provider}`: connects or updates. An empty
/// credential field keeps the stored credential.
pub(crate) async fn put_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    let control = control(&state);
    let mut credential = form
        .get("credential")
        .map(|c| SecretString::from(c.to_owned()));
    let existing = control
        .list_profiles(&ctx.signed.actor, pid)
        .await
        .ok()
        .and_then(|ps| ps.into_iter().find(|p| p.provider == provider));
    if credential.is_none() && existing.as_ref().is_some_and(|p| p.has_credential) {
        // Keep the stored credential: read it back only to store it again, never to show it.
        match control.registry().profile(pid, provider).await {
            Ok(Some(with)) => credential = with.credential,
            Ok(None) => {}
            Err(e) => return failed(&back, &ControlError::from(e)),
        }
    }
    let text = |name: &str| form.get(name).map(str::to_owned);
    let context = ProviderContext {
        workspace: text("workspace"),
        team_id: text("teamId"),
        project_id: text("projectId"),
        bridge_url: text("bridgeUrl"),
    };
    let mut settings = serde_json::Map::new();
    if let Some(app) = text("app") {
        settings.insert("app".to_owned(), serde_json::Value::String(app));
    }
    let request = PutProfile {
        credential,
        context,
        settings,
    };
    match control
        .put_profile(&ctx.signed.actor, pid, provider, request)
        .await
    {
        Ok(_) => redirect(
            &back,
            Some(Flash::ok(format!(
                "{} connected. Run a test to check what the credential can do.",
                label(provider)
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/providers/{provider}/test`: deep verification.
pub(crate) async fn test_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    match control(&state)
        .test_profile(&ctx.signed.actor, pid, provider)
        .await
    {
        Ok(p) => {
            let failed_ops = p.verifications.iter().filter(|v| !v.ok).count();
            let flash = if failed_ops == 0 {
                Flash::ok(format!("{}: every operation passed.", label(provider)))
            } else {
                Flash::error(format!(
                    "{}: {failed_ops} of {} operations failed. See the results below.",
                    label(provider),
                    p.verifications.len()
                ))
            };
            redirect(&back, Some(flash))
        }
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/providers/{provider}/disconnect`.
pub(crate) async fn delete_profile(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let provider = try_page!(provider_of(&req, &path.2));
    let back = paths::providers(&path.0, &path.1);
    match control(&state)
        .delete_profile(&ctx.signed.actor, pid, provider)
        .await
    {
        Ok(()) => redirect(
            &back,
            Some(Flash::ok(format!(
                "{} disconnected; its credential is erased.",
                label(provider)
            ))),
        ),
        Err(e) => failed(&back, &e),
    }
}
