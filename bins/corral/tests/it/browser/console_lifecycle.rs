//! The sandbox lifecycle in the console (issue 32), over HTTP from the real server with a
//! `local` sandbox (which stops, resumes, snapshots and restores): stop and resume from the
//! sandbox page and from the list (audited), a resent snapshot or fork form acting once, a
//! fork's copies linked and listed, members offered nothing and refused, and the project's
//! snapshots page listing and deleting.

use super::Journey;
use super::console_http::{client, follow, post_form, signed_in, start};
use super::console_work::{Workbench, get, page_text, workbench};

/// The ids in a sandbox page's path: (account, project, sandbox).
fn ids(w: &Workbench) -> (String, String, String) {
    let parts: Vec<&str> = w.page.split('/').collect();
    // /console/accounts/{acc}/projects/{prj}/sandboxes/{sbx}
    (
        parts[3].to_owned(),
        parts[5].to_owned(),
        parts[7].to_owned(),
    )
}

/// Posts `fields` (and the CSRF field) to `path` as the workbench's user.
async fn post(
    http: &reqwest::Client,
    j: &Journey,
    w: &Workbench,
    path: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("csrf", &w.csrf)
        .extend_pairs(fields)
        .finish();
    post_form(http, j, path, Some(&w.cookie), &body).await
}

/// The value of the hidden `key` field of the form posting to `action`.
fn form_key(page: &str, action: &str) -> String {
    let at = page
        .find(&format!("action=\"{action}\""))
        .unwrap_or_else(|| panic!("no form to {action}: {page}"));
    let rest = &page[at..];
    let key = rest.find("name=\"key\" value=\"").unwrap() + "name=\"key\" value=\"".len();
    rest[key..key + rest[key..].find('"').unwrap()].to_owned()
}

/// The sandbox's status badge on its page.
fn status_of(page: &str) -> &str {
    let at = page.find("id=\"sandbox-status\"").unwrap();
    let rest = &page[at..];
    let badge = rest.find("<span class=\"badge").unwrap();
    let open = badge + rest[badge..].find('>').unwrap() + 1;
    &rest[open..open + rest[open..].find('<').unwrap()]
}

async fn project_snapshots(
    j: &Journey,
    w: &Workbench,
    actor: &corral_control::Actor,
) -> Vec<corral_domain::Snapshot> {
    let (_, prj, sbx) = ids(w);
    j.control
        .list_snapshots(actor, prj.parse().unwrap(), None, Some(100))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.sandbox_id.to_string() == sbx)
        .collect()
}

/// Stop from the sandbox page: its status is `stopped`, the run form gives way to the words
/// and a Resume, a command sent anyway is refused in words, the audit log has `sandbox.stop`;
/// Resume from the list's row brings it back to `running` (and the list offers Stop again).
#[actix_web::test]
async fn console_stops_and_resumes_a_sandbox_from_its_page_and_the_list() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let (acc, prj, sbx) = ids(&w);

    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(page.contains("id=\"lifecycle\""), "{page}");
    assert!(
        page.contains("id=\"lifecycle-stop\"") && !page.contains("id=\"lifecycle-resume\""),
        "{page}"
    );
    let stopped = post(&http, &j, &w, &format!("{}/stop", w.page), &[]).await;
    let page = follow(&http, &j, stopped, &w.cookie).await;
    assert!(page.contains(&format!("Stopped {sbx}.")), "{page}");
    assert_eq!(status_of(&page), "stopped", "{page}");
    assert!(
        page.contains("id=\"sandbox-stopped\"") && page.contains("id=\"commands-resume\""),
        "the run form says it is stopped and offers Resume: {page}"
    );
    assert!(!page.contains("id=\"run-command\""), "{page}");
    assert!(page.contains("id=\"lifecycle-resume\""), "{page}");

    // A command sent anyway (an old page) is refused in words, with the way out.
    let refused = post(
        &http,
        &j,
        &w,
        &format!("{}/commands", w.page),
        &[("command", "true")],
    )
    .await;
    let back = follow(&http, &j, refused, &w.cookie).await;
    assert!(
        back.contains("This sandbox is stopped, so it cannot run a command. Resume it first"),
        "{back}"
    );

    let audit = page_text(
        &http,
        &j,
        &format!("/console/accounts/{acc}/audit"),
        &w.cookie,
    )
    .await;
    assert!(audit.contains("<code>sandbox.stop</code>"), "{audit}");

    // The list: the stopped row offers Resume, which comes back to the list.
    let list = format!("/console/accounts/{acc}/projects/{prj}");
    let body = page_text(&http, &j, &list, &w.cookie).await;
    let row = &body[body.find(&format!("data-sandbox=\"{sbx}\"")).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("data-action=\"resume\""), "{row}");
    let resumed = post(
        &http,
        &j,
        &w,
        &format!("{}/resume", w.page),
        &[("from", "list")],
    )
    .await;
    assert_eq!(resumed.headers()["location"], list.as_str());
    let body = follow(&http, &j, resumed, &w.cookie).await;
    assert!(
        body.contains(&format!("Resumed {sbx}: it is running.")),
        "{body}"
    );
    let row = &body[body.find(&format!("data-sandbox=\"{sbx}\"")).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains("data-action=\"stop\"") && row.contains(">running<"),
        "{row}"
    );
    let audit = page_text(
        &http,
        &j,
        &format!("/console/accounts/{acc}/audit"),
        &w.cookie,
    )
    .await;
    assert!(audit.contains("<code>sandbox.resume</code>"), "{audit}");
    // Running again: commands run.
    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(page.contains("id=\"run-command\""), "{page}");
}

/// The snapshot form sent twice with the key of its page takes one snapshot; a new page's
/// key takes another. A fork of 2 names both copies (linked) and both are listed; its form
/// resent makes no more. The snapshots page lists them with their sandbox and deletes one
/// behind the confirmation, leaving a tombstone.
#[actix_web::test]
async fn console_snapshots_and_forks_once_per_form_and_the_snapshots_page_deletes() {
    let j = start().await;
    let http = client();
    let w = workbench(&j, &http, "ada@example.test").await;
    let (acc, prj, sbx) = ids(&w);
    let actor = j
        .control
        .authenticate_session(w.cookie.trim_start_matches("corral_session="))
        .await
        .unwrap();

    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    let snap_action = format!("{}/snapshots", w.page);
    let key = form_key(&page, &snap_action);
    for _ in 0..2 {
        let taken = post(
            &http,
            &j,
            &w,
            &snap_action,
            &[("key", &key), ("name", "before <upgrade>")],
        )
        .await;
        let back = follow(&http, &j, taken, &w.cookie).await;
        assert!(
            back.contains("Took snapshot snp_local_")
                || back.contains("Taking snapshot snp_local_"),
            "{back}"
        );
    }
    let snaps = project_snapshots(&j, &w, &actor).await;
    assert_eq!(
        snaps.len(),
        1,
        "a resent form takes one snapshot: {snaps:?}"
    );
    let page = page_text(&http, &j, &w.page, &w.cookie).await;
    assert!(
        page.contains(&format!("data-snapshot=\"{}\"", snaps[0].id))
            && page.contains("before &lt;upgrade&gt;"),
        "the sandbox's own snapshots, escaped: {page}"
    );
    let other = form_key(&page, &snap_action);
    assert_ne!(other, key, "each page makes a new key");
    let taken = post(&http, &j, &w, &snap_action, &[("key", &other)]).await;
    follow(&http, &j, taken, &w.cookie).await;
    assert_eq!(project_snapshots(&j, &w, &actor).await.len(), 2);

    // Fork ×2, sent twice with one key: two copies, linked in the flash.
    let fork_action = format!("{}/fork", w.page);
    let key = form_key(&page, &fork_action);
    let bad = post(
        &http,
        &j,
        &w,
        &fork_action,
        &[("key", &key), ("count", "11")],
    )
    .await;
    let back = follow(&http, &j, bad, &w.cookie).await;
    assert!(back.contains("Choose from 1 to 10 copies."), "{back}");
    let mut copies = Vec::new();
    for _ in 0..2 {
        let forked = post(
            &http,
            &j,
            &w,
            &fork_action,
            &[("key", &key), ("count", "2")],
        )
        .await;
        let back = follow(&http, &j, forked, &w.cookie).await;
        assert!(
            back.contains(&format!("Forked {sbx} into 2 copies")),
            "{back}"
        );
        // The flash's links (the flash comes before the page's own sandbox links).
        let flash = &back[back.find("class=\"flash ok\"").unwrap()..];
        let flash = &flash[..flash.find("</div>").unwrap()];
        let prefix = format!("href=\"/console/accounts/{acc}/projects/{prj}/sandboxes/");
        let linked: Vec<String> = flash
            .match_indices(&prefix)
            .map(|(at, _)| {
                let id = &flash[at + prefix.len()..];
                id[..id.find('"').unwrap()].to_owned()
            })
            .collect();
        assert_eq!(linked.len(), 2, "the copies are linked: {back}");
        if copies.is_empty() {
            copies = linked;
        } else {
            assert_eq!(copies, linked, "the resent form answers the same copies");
        }
    }
    let list = page_text(
        &http,
        &j,
        &format!("/console/accounts/{acc}/projects/{prj}"),
        &w.cookie,
    )
    .await;
    for c in &copies {
        assert!(
            list.contains(&format!("data-sandbox=\"{c}\"")),
            "{c}: {list}"
        );
    }
    assert_eq!(
        list.matches("data-sandbox=\"sbx_local_").count(),
        3,
        "the sandbox and two copies, no more: {list}"
    );

    // The snapshots page: every snapshot (the two taken and the fork's), newest first,
    // with its sandbox linked; delete one behind the confirmation.
    let snapshots = format!("/console/accounts/{acc}/projects/{prj}/snapshots");
    let body = page_text(&http, &j, &snapshots, &w.cookie).await;
    assert!(body.contains("aria-current=\"page\">Snapshots"), "{body}");
    assert_eq!(
        body.matches("data-snapshot=\"snp_local_").count(),
        3,
        "{body}"
    );
    assert!(body.contains(&format!("href=\"{}\"", w.page)), "{body}");
    let victim = snaps[0].id.to_string();
    let delete = format!("{snapshots}/{victim}/delete");
    let forged = post_form(&http, &j, &delete, Some(&w.cookie), "").await;
    assert_eq!(forged.status(), 403);
    let deleted = post(&http, &j, &w, &delete, &[]).await;
    let body = follow(&http, &j, deleted, &w.cookie).await;
    assert!(
        body.contains(&format!("Deleted snapshot {victim} at local.")),
        "{body}"
    );
    let row = &body[body.find(&format!("data-snapshot=\"{victim}\"")).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains("data-status=\"deleted\"") && !row.contains("/delete\""),
        "a tombstone, with nothing to delete: {row}"
    );
    let audit = page_text(
        &http,
        &j,
        &format!("/console/accounts/{acc}/audit"),
        &w.cookie,
    )
    .await;
    for action in ["snapshot.create", "sandbox.fork", "snapshot.delete"] {
        assert!(
            audit.contains(&format!("<code>{action}</code>")),
            "{action}: {audit}"
        );
    }
}

/// A member reads the lifecycle (the snapshots, the snapshots page) but is offered no form;
/// a post without the CSRF field is 403, and one with it is refused by the use case, in
/// words, changing nothing.
#[actix_web::test]
async fn console_members_get_no_lifecycle_forms_and_cannot_stop_or_snapshot() {
    let j = start().await;
    let http = client();
    let (_, ada) = signed_in(&j, &http, "ada@example.test").await;
    let org = j
        .control
        .create_organization(
            &ada,
            corral_control::CreateOrganization {
                name: "Engines".to_owned(),
            },
        )
        .await
        .unwrap();
    let p = j
        .control
        .create_project(
            &ada,
            org.id.parse().unwrap(),
            corral_control::ProjectName {
                name: "shared".to_owned(),
            },
        )
        .await
        .unwrap();
    let key = j
        .control
        .create_key(&ada, p.id.parse().unwrap(), Default::default())
        .await
        .unwrap()
        .key;
    let made: serde_json::Value = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "local"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sandbox = made["id"].as_str().unwrap().to_owned();
    let (lin_cookie, lin) = signed_in(&j, &http, "lin@example.test").await;
    j.control
        .invite(
            &ada,
            org.id.parse().unwrap(),
            corral_control::CreateInvitation {
                email: "lin@example.test".to_owned(),
                role: corral_control::Role::Member,
            },
        )
        .await
        .unwrap();
    let mail = j
        .smtp
        .wait_for_containing("lin@example.test", "invitations/accept")
        .await;
    let link = super::sign_in_link(&mail);
    let token = link.split("token=").nth(1).unwrap().to_owned();
    j.control
        .accept_invitation(&lin, corral_control::AcceptInvitation { token })
        .await
        .unwrap();
    let project = format!("/console/accounts/{}/projects/{}", org.id, p.id);
    let page = format!("{project}/sandboxes/{sandbox}");
    let body = get(&http, &j, &page, &lin_cookie)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        body.contains("id=\"sandbox-snapshots\""),
        "members read them: {body}"
    );
    assert!(!body.contains("id=\"lifecycle\""), "{body}");
    for what in ["stop", "resume", "snapshots", "fork"] {
        let form = format!("action=\"{page}/{what}\"");
        assert!(!body.contains(&form), "no {form} for a member: {body}");
    }
    let list = get(&http, &j, &project, &lin_cookie)
        .await
        .text()
        .await
        .unwrap();
    assert!(!list.contains("data-action="), "no row actions: {list}");
    let snapshots = get(&http, &j, &format!("{project}/snapshots"), &lin_cookie).await;
    assert_eq!(snapshots.status(), 200);

    let forged = post_form(&http, &j, &format!("{page}/stop"), Some(&lin_cookie), "").await;
    assert_eq!(forged.status(), 403, "no CSRF field");
    let csrf = j
        .control
        .csrf_token(lin_cookie.trim_start_matches("corral_session="));
    for (what, extra) in [
        ("stop", ""),
        ("snapshots", "&key=k1"),
        ("fork", "&key=k2&count=1"),
    ] {
        let refused = post_form(
            &http,
            &j,
            &format!("{page}/{what}"),
            Some(&lin_cookie),
            &format!("csrf={csrf}{extra}"),
        )
        .await;
        let back = follow(&http, &j, refused, &lin_cookie).await;
        assert!(back.contains("role=\"alert\""), "{what}: said why: {back}");
    }
    let s = j
        .control
        .get_sandbox(&ada, p.id.parse().unwrap(), &sandbox)
        .await
        .unwrap();
    assert_eq!(s.status, corral_domain::SandboxStatus::Running);
    let snaps = j
        .control
        .list_snapshots(&ada, p.id.parse().unwrap(), None, None)
        .await
        .unwrap();
    assert!(snaps.items.is_empty(), "{snaps:?}");
}
