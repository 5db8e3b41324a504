//! A project's settings and API keys: create, rename, delete; create a key (shown once) and
//! revoke one.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use chrono::Utc;
use corral_control::{AccountId, ControlError, KeyOptions, KeyView, ProjectId, ProjectName};
use corral_web::AppState;

use super::ctx::{
    Ctx, Page, ago, control, failed, failure_page, get_ctx, parse, post_ctx, project_chrome,
    try_page, when,
};
use crate::form::Form;
use crate::pages::{self, paths};
use crate::respond::{html, redirect};
use crate::view::{self, Flash};

// --- projects ------------------------------------------------------------------------------------

/// `POST /console/accounts/{account}/projects`.
pub(crate) async fn create_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let id: AccountId = try_page!(parse(&req, &path));
    let name = form.get("name").unwrap_or_default().to_owned();
    match control(&state)
        .create_project(&ctx.signed.actor, id, ProjectName { name })
        .await
    {
        Ok(p) => redirect(
            &paths::keys(&path, &p.id),
            Some(Flash::ok(format!(
                "Created project {}. Next: create an API key and connect a provider.",
                p.name
            ))),
        ),
        Err(e) => failed(&paths::account(&path), &e),
    }
}

/// `POST …/projects/{project}/rename`.
pub(crate) async fn rename_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::settings(&path.0, &path.1);
    let name = form.get("name").unwrap_or_default().to_owned();
    match control(&state)
        .rename_project(&ctx.signed.actor, pid, ProjectName { name })
        .await
    {
        Ok(_) => redirect(&back, Some(Flash::ok("Renamed."))),
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/delete`.
pub(crate) async fn delete_project(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    match control(&state).delete_project(&ctx.signed.actor, pid).await {
        Ok(p) => redirect(
            &paths::account(&path.0),
            Some(Flash::ok(format!("{} is being deleted.", p.name))),
        ),
        Err(e) => failed(&paths::settings(&path.0, &path.1), &e),
    }
}

/// `GET …/projects/{project}/settings`.
pub(crate) async fn settings_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    let (chrome, project, _) =
        try_page!(project_chrome(&req, control(&state), &ctx, &path.0, &path.1).await);
    html(
        &req,
        StatusCode::OK,
        pages::project_settings(&view::ProjectSettingsPage { chrome, project }),
    )
}

// --- keys ----------------------------------------------------------------------------------------

async fn keys_response(
    req: &HttpRequest,
    state: &AppState,
    ctx: &Ctx,
    path: &(String, String),
    new_key: Option<String>,
) -> Page {
    let control = control(state);
    let (chrome, project, pid) =
        try_page!(project_chrome(req, control, ctx, &path.0, &path.1).await);
    let keys = match control.list_keys(&ctx.signed.actor, pid).await {
        Ok(k) => k,
        Err(e) => return failure_page(req, &e),
    };
    let latest = newest_key(&keys);
    let mut keys: Vec<_> = keys
        .into_iter()
        .map(|k| view::KeyRow {
            prefix: format!("crl_{}_…", k.key_id),
            key_id: k.key_id,
            name: k.name.unwrap_or_default(),
            created: ago(k.created_at),
            expires: k.expires_at.map_or_else(|| "never".to_owned(), when),
            expired: k.expired,
            last_used: k.last_used_at.map_or_else(|| "never".to_owned(), ago),
            revoked: k.revoked_at.map(when),
        })
        .collect();
    // Active keys first, then newest first (the order the list comes in; the sort is stable).
    keys.sort_by_key(|k| k.revoked.is_some() || k.expired);
    let page = view::KeysPage {
        chrome,
        project,
        keys,
        new_key,
        latest,
    };
    html(req, StatusCode::OK, pages::keys(&page))
}

/// The id of the newest key (`none` without keys).
fn newest_key(keys: &[KeyView]) -> String {
    keys.iter()
        .max_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.key_id.cmp(&b.key_id))
        })
        .map_or_else(|| "none".to_owned(), |k| k.key_id.clone())
}

/// The form's `expires` choice: a number of days [`view::KEY_LIFETIMES`] offers, or none (absent,
/// empty or `never`).
fn key_lifetime(raw: Option<&str>) -> Result<Option<u32>, ControlError> {
    match raw.map(str::trim) {
        None | Some("" | "never") => Ok(None),
        Some(days) => days
            .parse::<u32>()
            .ok()
            .filter(|d| view::KEY_LIFETIMES.contains(d))
            .map(Some)
            .ok_or_else(|| ControlError::invalid("choose when the key expires from the list")),
    }
}

/// `GET …/projects/{project}/keys`.
pub(crate) async fn keys_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Page {
    let ctx = get_ctx!(state, req);
    keys_response(&req, &state, &ctx, &path, None).await
}

/// `POST …/projects/{project}/keys`: the answer shows the new key once (`no-store`; no
/// redirect, so the key never travels in a cookie or a URL).
pub(crate) async fn create_key(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::keys(&path.0, &path.1);
    // A reload of the creation answer posts the same form again: the newest key is no longer
    // the one the form saw, so nothing is created (the key was shown once, as always).
    if let Some(seen) = form.get("latest") {
        match control(&state).list_keys(&ctx.signed.actor, pid).await {
            Ok(keys) if newest_key(&keys) != seen => {
                return redirect(
                    &back,
                    Some(Flash::info(
                        "A key was already created from this form, so reloading made no other. \
                         It is shown only once: if you did not copy it, revoke it and create a new one.",
                    )),
                );
            }
            Ok(_) => {}
            Err(e) => return failed(&back, &e),
        }
    }
    let days = match key_lifetime(form.get("expires")) {
        Ok(days) => days,
        Err(e) => return failed(&back, &e),
    };
    let options = KeyOptions::lifetime(form.get("name").map(str::to_owned), days, Utc::now());
    match control(&state)
        .create_key(&ctx.signed.actor, pid, options)
        .await
    {
        Ok(created) => keys_response(&req, &state, &ctx, &path, Some(created.key)).await,
        Err(e) => failed(&back, &e),
    }
}

/// `POST …/projects/{project}/keys/{key}/revoke`.
pub(crate) async fn revoke_key(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Page {
    let form = Form::parse(&body);
    let ctx = post_ctx!(state, req, form);
    let pid: ProjectId = try_page!(parse(&req, &path.1));
    let back = paths::keys(&path.0, &path.1);
    match control(&state)
        .revoke_key(&ctx.signed.actor, pid, &path.2)
        .await
    {
        Ok(_) => redirect(
            &back,
            Some(Flash::ok("Key revoked. It stops working at once.")),
        ),
        Err(e) => failed(&back, &e),
    }
}
