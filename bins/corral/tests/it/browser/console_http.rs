//! The console's bugs from issue 26, pinned without a browser: each test requests the pages
//! over HTTP from the real server (the [`Journey`] world) and asserts on the HTML.

use super::{Journey, session_from};

/// A client that shows redirects instead of following them.
pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A form post from this origin.
pub(super) async fn post_form(
    http: &reqwest::Client,
    j: &Journey,
    path: &str,
    cookie: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut req = http
        .post(j.url(path))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &j.base)
        .body(body.to_owned());
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.unwrap()
}

/// A signed-in user who accepted the terms: the session cookie and the actor.
pub(super) async fn signed_in(
    j: &Journey,
    http: &reqwest::Client,
    email: &str,
) -> (String, corral_control::Actor) {
    let link = j.control.invite_user(email).await.unwrap();
    let token = link.split("token=").nth(1).unwrap().to_owned();
    let signed = post_form(
        http,
        j,
        "/console/sign-in/verify",
        None,
        &format!("token={token}"),
    )
    .await;
    let token = session_from(&signed);
    let actor = j.control.authenticate_session(&token).await.unwrap();
    for s in j.control.legal_status(&actor).await.unwrap() {
        j.control
            .accept_legal(&actor, &s.document, s.release)
            .await
            .unwrap();
    }
    (format!("corral_session={token}"), actor)
}

pub(super) async fn start() -> Journey {
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    j
}

/// Bugs 1 and 2: a wrong password answers the sign-in page with a message and the email still
/// in both forms; once throttled, the page says so in words (minutes, and the emailed link as
/// the way around), never raw seconds.
#[actix_web::test]
async fn console_wrong_password_keeps_the_email_and_throttling_is_said_in_words() {
    let j = start().await;
    let http = client();
    let (_, actor) = signed_in(&j, &http, "ada@example.test").await;
    j.control
        .set_password(&actor, None, "correct horse battery staple")
        .await
        .unwrap();

    let wrong = || {
        post_form(
            &http,
            &j,
            "/console/sign-in/password",
            None,
            "email=ada%40example.test&password=wrong+password+entirely",
        )
    };
    let first = wrong().await;
    assert_eq!(first.status(), 401);
    let body = first.text().await.unwrap();
    assert!(
        body.contains("role=\"alert\"") && body.contains("That email and password do not match"),
        "{body}"
    );
    assert!(
        body.contains("id=\"pw-email\"") && body.matches("value=\"ada@example.test\"").count() == 2,
        "the email typed is kept: {body}"
    );

    // The standard throttle: a few free failures for one (account, address), then a wait.
    let mut throttled = None;
    for _ in 0..10 {
        let r = wrong().await;
        if r.status() == 429 {
            throttled = Some(r);
            break;
        }
        assert_eq!(r.status(), 401);
    }
    let throttled = throttled.expect("the throttle refuses after a few failures");
    assert!(throttled.headers().contains_key("retry-after"));
    let body = throttled.text().await.unwrap();
    assert!(
        body.contains("Too many attempts — try again in about ")
            && body.contains("or sign in with an emailed link"),
        "{body}"
    );
    let said = body
        .split("role=\"alert\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap();
    assert!(
        !said.contains("second")
            && !said
                .chars()
                .any(|c| c.is_ascii_digit() && said.contains(&format!("{c} s"))),
        "never raw seconds: {said}"
    );
    assert!(body.contains("value=\"ada@example.test\""), "{body}");
}

/// A project of the user's personal account: (account id, project id).
pub(super) async fn project(
    j: &Journey,
    actor: &corral_control::Actor,
    name: &str,
) -> (String, String) {
    let me = j.control.me(actor).await.unwrap();
    let p = j
        .control
        .create_project(
            actor,
            me.personal_account_id,
            corral_control::ProjectName {
                name: name.to_owned(),
            },
        )
        .await
        .unwrap();
    (p.account_id.to_string(), p.id.to_string())
}

/// Follows a 303 the way a browser would: the session cookie and the flash cookie it set.
pub(super) async fn follow(
    http: &reqwest::Client,
    j: &Journey,
    resp: reqwest::Response,
    cookie: &str,
) -> String {
    assert_eq!(resp.status(), 303, "{:?}", resp.headers());
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let flash = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("corral_flash="))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned);
    let cookie = match flash {
        Some(f) => format!("{cookie}; {f}"),
        None => cookie.to_owned(),
    };
    let page = http
        .get(j.url(&location))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200, "{location}");
    page.text().await.unwrap()
}

/// The markup of one provider card (from its `id` to the next card).
fn card<'a>(body: &'a str, provider: &str) -> &'a str {
    let start = body
        .find(&format!("id=\"provider-{provider}\""))
        .unwrap_or_else(|| panic!("no {provider} card: {body}"));
    let rest = &body[start..];
    let end = rest[1..]
        .find("id=\"provider-")
        .map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// Bug 3: after a test in which every operation failed or was not reached, the card says not
/// ready (as the JSON API does), with when the test ran; operations not reached are marked
/// so, not as failures.
#[actix_web::test]
async fn console_provider_card_takes_readiness_from_the_last_test_with_its_time() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "cards").await;
    let csrf = j
        .control
        .csrf_token(cookie.trim_start_matches("corral_session="));
    let providers = format!("/console/accounts/{acc}/projects/{prj}/providers");

    // Connected with a credential the provider rejects.
    let put = post_form(
        &http,
        &j,
        &format!("{providers}/e2b"),
        Some(&cookie),
        &format!("csrf={csrf}&credential=e2b_wrong_key"),
    )
    .await;
    let body = follow(&http, &j, put, &cookie).await;
    assert!(
        card(&body, "e2b").contains("data-state=\"not-tested\""),
        "connected, not yet tested: {}",
        card(&body, "e2b")
    );
    assert!(!card(&body, "e2b").contains("data-state=\"ready\""));

    let tested = post_form(
        &http,
        &j,
        &format!("{providers}/e2b/test"),
        Some(&cookie),
        &format!("csrf={csrf}"),
    )
    .await;
    let body = follow(&http, &j, tested, &cookie).await;
    let e2b = card(&body, "e2b");
    assert!(e2b.contains("data-state=\"failing\""), "{e2b}");
    assert!(!e2b.contains("data-state=\"ready\""), "{e2b}");
    assert!(e2b.contains("Last tested"), "when the test ran: {e2b}");
    assert!(e2b.contains("<time"), "{e2b}");
    assert!(
        e2b.contains("class=\"fail\" data-operation=\"create\""),
        "{e2b}"
    );
    for op in ["exec", "write_file", "read_file", "get", "delete"] {
        assert!(
            e2b.contains(&format!("class=\"not-reached\" data-operation=\"{op}\"")),
            "{op} was not reached, which is not a failure: {e2b}"
        );
    }
    // The JSON API agrees: not ready.
    let pid = prj.parse().unwrap();
    let profile = j
        .control
        .list_profiles(&actor, pid)
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.provider == corral_domain::Provider::E2b)
        .unwrap();
    assert!(!profile.readiness.ready);
}

/// Bug 4: a bridge kind can be connected whole from its card: a field for its key, an
/// https-only bridge URL, and the test's refusal in the form's words (no `X-Provider-*`
/// header the user never sent).
#[actix_web::test]
async fn console_bridge_card_takes_a_key_and_an_https_url_and_speaks_of_fields() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "bridges").await;
    let csrf = j
        .control
        .csrf_token(cookie.trim_start_matches("corral_session="));
    let providers = format!("/console/accounts/{acc}/projects/{prj}/providers");
    let page = http
        .get(j.url(&providers))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let body = page.text().await.unwrap();
    let cf = card(&body, "cloudflare");
    assert!(
        cf.contains("id=\"cloudflare-credential\"") && cf.contains("name=\"credential\""),
        "a field for the bridge's key: {cf}"
    );
    assert!(
        cf.contains("<label for=\"cloudflare-credential\">"),
        "labelled: {cf}"
    );
    assert!(cf.contains("id=\"cloudflare-bridgeUrl\""), "{cf}");

    let pid = prj.parse().unwrap();
    let stored = || async {
        j.control
            .list_profiles(&actor, pid)
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.provider == corral_domain::Provider::Cloudflare)
    };
    // http:// is refused, and nothing is stored.
    let plain = post_form(
        &http,
        &j,
        &format!("{providers}/cloudflare"),
        Some(&cookie),
        &format!("csrf={csrf}&credential=bridge-key&bridgeUrl=http%3A%2F%2Fbridge.example.com"),
    )
    .await;
    let body = follow(&http, &j, plain, &cookie).await;
    assert!(
        body.contains("The bridge URL must start with https://"),
        "{body}"
    );
    assert!(stored().await.is_none(), "an http bridge URL is not stored");

    // Key and https URL: complete (nothing missing, the credential included).
    let put = post_form(
        &http,
        &j,
        &format!("{providers}/cloudflare"),
        Some(&cookie),
        &format!("csrf={csrf}&credential=bridge-key&bridgeUrl=https%3A%2F%2F127.0.0.1%3A9"),
    )
    .await;
    let body = follow(&http, &j, put, &cookie).await;
    assert!(body.contains("Cloudflare connected."), "{body}");
    let profile = stored().await.expect("stored");
    assert!(profile.has_credential);
    assert!(
        profile.readiness.missing.is_empty(),
        "{:?}",
        profile.readiness
    );
    assert!(!card(&body, "cloudflare").contains("incomplete"));

    // The test is refused (a loopback bridge is not public): said in the form's words.
    let tested = post_form(
        &http,
        &j,
        &format!("{providers}/cloudflare/test"),
        Some(&cookie),
        &format!("csrf={csrf}"),
    )
    .await;
    let body = follow(&http, &j, tested, &cookie).await;
    assert!(body.contains("role=\"alert\""), "{body}");
    assert!(body.contains("bridge URL"), "{body}");
    assert!(
        !body.contains("X-Provider"),
        "no header the user never sent: {body}"
    );
}

/// Bug 7: reloading the answer to "Create key" (which posts the same form again) creates no
/// second key and says so; the next "Create key" from a fresh page still works.
#[actix_web::test]
async fn console_reloading_create_key_makes_no_second_key() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "keys").await;
    let csrf = j
        .control
        .csrf_token(cookie.trim_start_matches("corral_session="));
    let keys = format!("/console/accounts/{acc}/projects/{prj}/keys");
    let latest = |body: &str| {
        let at = body
            .find("name=\"latest\" value=\"")
            .unwrap_or_else(|| panic!("the create form carries `latest`: {body}"));
        body[at + 21..].split('"').next().unwrap().to_owned()
    };
    let page = http
        .get(j.url(&keys))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let form = format!("csrf={csrf}&latest={}", latest(&page));
    let created = post_form(&http, &j, &keys, Some(&cookie), &form).await;
    assert_eq!(created.status(), 200);
    let shown = created.text().await.unwrap();
    assert!(shown.contains("id=\"new-key\""), "{shown}");

    // The browser's reload: the same form again.
    let again = post_form(&http, &j, &keys, Some(&cookie), &form).await;
    assert_eq!(again.status(), 303, "a reload is redirected, not obeyed");
    let body = follow(&http, &j, again, &cookie).await;
    assert!(body.contains("reloading made no other"), "{body}");
    assert!(
        !body.contains("id=\"new-key\""),
        "the key is shown only once"
    );
    let pid = prj.parse().unwrap();
    assert_eq!(j.control.list_keys(&actor, pid).await.unwrap().len(), 1);

    // A fresh page's button makes the next key.
    let next = post_form(
        &http,
        &j,
        &keys,
        Some(&cookie),
        &format!("csrf={csrf}&latest={}", latest(&shown)),
    )
    .await;
    assert_eq!(next.status(), 200);
    assert_eq!(j.control.list_keys(&actor, pid).await.unwrap().len(), 2);
}

/// Issue #26: the create form takes a name and a lifetime; the table shows them, newest
/// first; a lifetime the form does not offer is refused with a message and no key.
#[actix_web::test]
async fn console_keys_have_names_and_lifetimes() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "named").await;
    let csrf = j
        .control
        .csrf_token(cookie.trim_start_matches("corral_session="));
    let keys = format!("/console/accounts/{acc}/projects/{prj}/keys");
    let pid = prj.parse().unwrap();
    let page = |http: &reqwest::Client| {
        let req = http.get(j.url(&keys)).header("cookie", &cookie);
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    let form = page(&http).await;
    assert!(
        form.contains("name=\"name\"") && form.contains("name=\"expires\""),
        "{form}"
    );
    assert!(
        form.contains("value=\"90\"") && form.contains("value=\"never\""),
        "{form}"
    );

    // A named key expiring in 90 days, then an unnamed one that never expires.
    let created = post_form(
        &http,
        &j,
        &keys,
        Some(&cookie),
        &format!("csrf={csrf}&name=deploy+%3Cbot%3E&expires=90"),
    )
    .await;
    assert_eq!(created.status(), 200);
    assert!(created.text().await.unwrap().contains("id=\"new-key\""));
    let second = post_form(
        &http,
        &j,
        &keys,
        Some(&cookie),
        &format!("csrf={csrf}&name=&expires=never"),
    )
    .await;
    assert_eq!(second.status(), 200);
    let listed = j.control.list_keys(&actor, pid).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        (listed[0].name.as_deref(), listed[0].expires_at),
        (None, None)
    );
    assert_eq!(listed[1].name.as_deref(), Some("deploy <bot>"));
    let days = (listed[1].expires_at.unwrap() - chrono::Utc::now()).num_hours();
    assert!((89 * 24..=90 * 24).contains(&days), "{days} h");

    // The table: the name (escaped) and the expiry date, the newest key first.
    let table = page(&http).await;
    let expiry = listed[1].expires_at.unwrap().format("%Y-%m-%d").to_string();
    assert!(table.contains("deploy &lt;bot&gt;"), "{table}");
    assert!(table.contains(&expiry), "{table}");
    let newest = table.find(&format!("crl_{}_", listed[0].key_id)).unwrap();
    let older = table.find(&format!("crl_{}_", listed[1].key_id)).unwrap();
    assert!(newest < older, "newest first");

    // A lifetime not on the list: redirected back with the reason, nothing issued.
    let bad = post_form(
        &http,
        &j,
        &keys,
        Some(&cookie),
        &format!("csrf={csrf}&expires=5000"),
    )
    .await;
    assert_eq!(bad.status(), 303);
    let body = follow(&http, &j, bad, &cookie).await;
    assert!(
        body.contains("Choose when the key expires from the list."),
        "{body}"
    );
    assert_eq!(j.control.list_keys(&actor, pid).await.unwrap().len(), 2);
}

/// Bug 7: `/` leads a browser to the console; an API client still gets the JSON 404.
#[actix_web::test]
async fn console_root_leads_a_browser_to_the_console() {
    let j = start().await;
    let http = client();
    let browser = http
        .get(j.url("/"))
        .header(
            "accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(browser.status(), 303);
    assert_eq!(browser.headers()["location"], "/console");
    let api = http
        .get(j.url("/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    assert!(
        api.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

/// Bug 7: the invitation page names the organization, the inviter and the role.
#[actix_web::test]
async fn console_invitation_page_names_organization_inviter_and_role() {
    let j = start().await;
    let http = client();
    let (_, ada) = signed_in(&j, &http, "ada@example.test").await;
    let org = j
        .control
        .create_organization(
            &ada,
            corral_control::CreateOrganization {
                name: "Analytical Engines".to_owned(),
            },
        )
        .await
        .unwrap();
    let (grace_cookie, _) = signed_in(&j, &http, "grace@example.test").await;
    j.control
        .invite(
            &ada,
            org.id.parse().unwrap(),
            corral_control::CreateInvitation {
                email: "grace@example.test".to_owned(),
                role: corral_control::Role::Admin,
            },
        )
        .await
        .unwrap();
    let mail = j
        .smtp
        .wait_for_containing("grace@example.test", "invitations/accept")
        .await;
    let link = super::sign_in_link(&mail);
    let landed = http.get(&link).send().await.unwrap();
    let invitation = landed
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("corral_invitation="))
        .and_then(|v| v.split(';').next())
        .expect("the invitation cookie")
        .to_owned();
    let page = http
        .get(j.url("/console/invitations"))
        .header("cookie", format!("{grace_cookie}; {invitation}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let body = page.text().await.unwrap();
    assert!(body.contains("id=\"invitation-offer\""), "{body}");
    assert!(
        body.contains("ada@example.test")
            && body.contains("Analytical Engines")
            && body.contains("<strong>admin</strong>"),
        "{body}"
    );
    assert!(!body.contains("Someone invited you"), "{body}");
}

/// Bug 5: `local` has its card on the Providers page when this server runs it.
#[actix_web::test]
async fn console_providers_page_shows_local() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "local").await;
    let body = http
        .get(j.url(&format!("/console/accounts/{acc}/projects/{prj}/providers")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let local = card(&body, "local");
    assert!(local.contains("no account or credential needed"), "{local}");
    assert!(
        !local.contains("name=\"credential\""),
        "local needs no credential: {local}"
    );
}

/// Bug 6: a sandbox's page says when it was created.
#[actix_web::test]
async fn console_sandbox_page_shows_when_it_was_created() {
    let j = start().await;
    let http = client();
    let (cookie, actor) = signed_in(&j, &http, "ada@example.test").await;
    let (acc, prj) = project(&j, &actor, "made").await;
    let pid = prj.parse().unwrap();
    j.control
        .put_profile(
            &actor,
            pid,
            corral_domain::Provider::E2b,
            corral_control::PutProfile {
                credential: Some(corral_provider_e2b::fake::API_KEY.to_owned().into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let key = j
        .control
        .create_key(&actor, pid, Default::default())
        .await
        .unwrap()
        .key;
    let created: serde_json::Value = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "e2b"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let body = http
        .get(j.url(&format!(
            "/console/accounts/{acc}/projects/{prj}/sandboxes/{id}"
        )))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let year = chrono::Utc::now().format("%Y-").to_string();
    let at = body
        .find("<dt>Created</dt>")
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        body[at..].starts_with(&format!("<dt>Created</dt><dd>{year}")),
        "a date, not just an age: {}",
        &body[at..at + 80]
    );
    assert!(body.contains("<dt>Updated</dt>"), "{body}");
}

/// Bug 5: the `default` project `corral serve` makes at its first start (outside any account)
/// is given to the first user the operator invites, so it shows in their console; a later
/// user does not get it.
#[actix_web::test]
async fn console_shows_the_default_project_to_the_first_invited_user() {
    let j = start().await;
    let default = j
        .control
        .registry()
        .create_project(corral_control::DEFAULT_PROJECT)
        .await
        .unwrap();
    let http = client();
    let (cookie, ada) = signed_in(&j, &http, "ada@example.test").await;
    let me = j.control.me(&ada).await.unwrap();
    let page = http
        .get(j.url(&format!("/console/accounts/{}", me.personal_account_id)))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!("projects/{}\"", default.id)) && page.contains(">default<"),
        "{page}"
    );
    let (_, grace) = signed_in(&j, &http, "grace@example.test").await;
    let theirs = j.control.me(&grace).await.unwrap();
    assert!(
        j.control
            .list_projects(&grace, theirs.personal_account_id)
            .await
            .unwrap()
            .is_empty(),
        "only the first user receives it"
    );
}
