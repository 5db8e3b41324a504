//! A project's provider connections: readiness, connect or update a profile (an empty
//! credential field keeps the stored one), deep verification and disconnect.

use std::str::FromStr;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use corral_control::{ControlError, ProfileView, ProjectId, PutProfile, VerificationView};
use corral_domain::{Provider, ProviderContext};
use corral_web::AppState;
use secrecy::SecretString;

use super::ctx::{
    Page, ago, control, failed, failure_page, get_ctx, parse, post_ctx, project_chrome, sentence,
    try_page, when,
};
use crate::form::Form;
use crate::pages::{self, paths};
use crate::respond::{html, not_found, redirect};
use crate::view::{self, CardState, CheckOutcome, Flash};

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
    // Connected providers first, then the ones this server runs, then the rest (`local`
    // too: shown like the others when this server runs it or the project connected it).
    let mut providers: Vec<Provider> = Provider::ALL.into_iter().collect();
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
                // Every provider but `local` needs one, the bridge kinds included (the token
                // the deployed bridge checks).
                needs_credential: p != Provider::Local,
                bridge: p.is_bridge(),
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
                state: card_state(p, enabled.contains(&p), profile),
                tested: profile
                    .and_then(|x| x.verifications.iter().map(|v| v.checked_at).max())
                    .map(|t| (ago(t), when(t))),
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

/// What the verification service prefixes to the reason of a failure that proves nothing
/// about the credential (`corral_service::verify`): an operation not reached because an
/// earlier one failed, or one that failed for a passing reason (rate limit, outage, timeout).
const NOT_REACHED: &str = "not reached: ";
const INCONCLUSIVE: &str = "inconclusive: ";

fn outcome(v: &VerificationView) -> CheckOutcome {
    match (v.ok, v.reason.as_deref()) {
        (true, _) => CheckOutcome::Passed,
        (false, Some(r)) if r.starts_with(NOT_REACHED) => CheckOutcome::NotReached,
        (false, Some(r)) if r.starts_with(INCONCLUSIVE) => CheckOutcome::Inconclusive,
        (false, _) => CheckOutcome::Failed,
    }
}

/// A card's readiness: what the profile lacks first, then what its last test said (as the
/// JSON API's `readiness.ready`, which is false after any failed operation).
fn card_state(provider: Provider, enabled: bool, profile: Option<&ProfileView>) -> CardState {
    let Some(profile) = profile else {
        return match (enabled, provider) {
            (false, _) => CardState::NotEnabled,
            (true, Provider::Local) => CardState::BuiltIn,
            (true, _) => CardState::NotConnected,
        };
    };
    if !enabled {
        return CardState::NotEnabled;
    }
    if !profile.readiness.missing.is_empty() {
        return CardState::Incomplete;
    }
    let outcomes: Vec<CheckOutcome> = profile.verifications.iter().map(outcome).collect();
    if outcomes.is_empty() {
        CardState::NotTested
    } else if outcomes.contains(&CheckOutcome::Failed) {
        CardState::Failing
    } else if outcomes.iter().all(|o| *o == CheckOutcome::Passed) && profile.readiness.ready {
        CardState::Ready
    } else {
        CardState::Inconclusive
    }
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
            outcome: outcome(v),
            reason: v.reason.as_deref().map(in_form_words),
            remediation: v.remediation.as_deref().map(in_form_words),
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

/// A service message in the words of this form: the console user stored a profile and sent
/// no `X-Provider-*` header, so a message naming one (written for API callers) names the
/// profile's field instead.
fn in_form_words(message: &str) -> String {
    const REWRITES: [(&str, &str); 9] = [
        (
            "send X-Provider-Credential or connect a profile",
            "store its credential in this project's connection",
        ),
        (
            "connect one or send X-Provider-Credential",
            "connect it on this page",
        ),
        (" (X-Provider-* header or profile setting)", ""),
        ("X-Provider-Credential", "the credential"),
        ("X-Provider-Bridge-Url", "the bridge URL"),
        ("X-Provider-Team-Id", "the team id"),
        ("X-Provider-Project-Id", "the project id"),
        ("X-Provider-Workspace", "the workspace"),
        ("X-Provider-*", "the connection's settings"),
    ];
    let mut out = message.to_owned();
    for (from, to) in REWRITES {
        out = out.replace(from, to);
    }
    // "… (header the bridge URL)" after the rewrite above: the header is gone, say nothing.
    for field in [
        "the credential",
        "the bridge URL",
        "the team id",
        "the project id",
        "the workspace",
        "the connection's settings",
    ] {
        out = out.replace(&format!(" (header {field})"), "");
    }
    out
}

/// A failed provider form: back to the providers tab, in the form's words.
fn failed_here(back: &str, e: &ControlError) -> Page {
    match e {
        ControlError::Service { .. } | ControlError::Invalid { .. } => redirect(
            back,
            Some(Flash::error(sentence(&in_form_words(&e.to_string())))),
        ),
        _ => failed(back, e),
    }
}

/// A bridge URL the console accepts: `https` only (the bridge carries the credential).
fn check_bridge_url(raw: &str) -> Result<(), ControlError> {
    match url::Url::parse(raw.trim()) {
        Ok(u) if u.scheme() == "https" && u.host_str().is_some() => Ok(()),
        Ok(u) if u.scheme() == "http" => Err(ControlError::invalid(
            "the bridge URL must start with https:// (the bridge receives the credential)",
        )),
        _ => Err(ControlError::invalid(
            "the bridge URL must be an https:// address, such as https://corral-bridge.example.workers.dev",
        )),
    }
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
    if let Some(url) = text("bridgeUrl")
        && let Err(e) = check_bridge_url(&url)
    {
        return failed_here(&back, &e);
    }
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
        Err(e) => failed_here(&back, &e),
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
            let count =
                |o: CheckOutcome| p.verifications.iter().filter(|v| outcome(v) == o).count();
            let (failed_ops, unsure) = (
                count(CheckOutcome::Failed),
                count(CheckOutcome::Inconclusive) + count(CheckOutcome::NotReached),
            );
            let all = p.verifications.len();
            let name = label(provider);
            let flash = if failed_ops > 0 {
                Flash::error(format!(
                    "{name}: {failed_ops} of {all} operations failed. See the results below."
                ))
            } else if unsure > 0 {
                Flash::info(format!(
                    "{name}: the test was inconclusive for {unsure} of {all} operations (nothing failed for certain). Run it again later."
                ))
            } else {
                Flash::ok(format!("{name}: every operation passed."))
            };
            redirect(&back, Some(flash))
        }
        Err(e) => failed_here(&back, &e),
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

#[cfg(test)]
mod tests {
    use super::{CardState, Provider, card_state, check_bridge_url, in_form_words};

    #[test]
    fn local_needs_no_profile_to_be_ready_where_the_server_runs_it() {
        assert_eq!(card_state(Provider::Local, true, None), CardState::BuiltIn);
        assert_eq!(
            card_state(Provider::Local, false, None),
            CardState::NotEnabled
        );
        assert_eq!(
            card_state(Provider::E2b, true, None),
            CardState::NotConnected
        );
    }

    #[test]
    fn messages_for_api_callers_name_the_form_fields_not_headers() {
        let cases = [
            "provider `cloudflare` needs a credential: send X-Provider-Credential or connect a profile",
            "provider `modal` needs `bridgeUrl` (X-Provider-* header or profile setting) (header X-Provider-Bridge-Url)",
            "X-Provider-Bridge-Url `https://b.example` is refused: its host does not resolve",
            "the project has no provider profile for `deno`; connect one or send X-Provider-Credential",
        ];
        for c in cases {
            let words = in_form_words(c);
            assert!(!words.contains("X-Provider"), "{c} → {words}");
            assert!(!words.contains("header"), "{c} → {words}");
        }
        assert_eq!(
            in_form_words(cases[2]),
            "the bridge URL `https://b.example` is refused: its host does not resolve"
        );
    }

    #[test]
    fn bridge_urls_are_https_only() {
        assert!(check_bridge_url("https://bridge.example.workers.dev").is_ok());
        assert!(check_bridge_url(" https://bridge.example.com/base ").is_ok());
        for bad in [
            "http://bridge.example.com",
            "ftp://x",
            "bridge.example.com",
            "",
            "https://",
        ] {
            assert!(check_bridge_url(bad).is_err(), "{bad}");
        }
    }
}
