//! The console in a real browser: headless Chromium driven through chromedriver (WebDriver),
//! against the server on a loopback socket. Screenshots of every page land in
//! `target/console-screenshots/` for review.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). Without them the
//! tests fail under `CI=true` and print SKIPPED otherwise: never a silent pass. The
//! accessibility check also needs the pinned npm `axe-core` that `.ci/run` installs under
//! `target/axe` (or `$CORRAL_AXE_JS`), with the same rule when it is missing.

mod console_http;
mod console_lifecycle;
mod console_work;
pub(crate) mod smtp;
pub(crate) mod webdriver;

use std::path::PathBuf;

use corral_web::AppState;

use crate::support::World;

/// Where screenshots go: `<target>/console-screenshots`.
pub(crate) fn screenshot_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(&tmp).join("console-screenshots")
}

/// Whether the browser tests can run here; panics under CI when they cannot.
pub(crate) fn browser_or_skip(test: &str) -> bool {
    if webdriver::available() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: {} or {} is missing; .ci/run installs Debian's chromium and chromium-driver",
        webdriver::chromium(),
        webdriver::chromedriver()
    );
    eprintln!("SKIPPED {test}: chromium or chromedriver is not installed");
    false
}

/// Serves `state` on a loopback socket already bound (so its URL could be configured before).
fn serve_on(listener: std::net::TcpListener, state: AppState) {
    let server = actix_web::HttpServer::new(move || corral::server::app(state.clone()))
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
    actix_web::rt::spawn(server);
}

fn loopback() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    (listener, base)
}

#[actix_web::test]
async fn console_sign_in_page_renders_with_its_security_headers_in_chromium() {
    if !browser_or_skip("console_sign_in_page_renders_with_its_security_headers_in_chromium") {
        return;
    }
    let world = World::new().await;
    let (listener, base) = loopback();
    serve_on(listener, world.state.clone());

    // The headers a browser relies on.
    let resp = reqwest::get(format!("{base}/console/sign-in"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["cache-control"], "no-store");
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let css = reqwest::get(format!("{base}/console/assets/console.css"))
        .await
        .unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");

    let dir = screenshot_dir();
    let driver = webdriver::Driver::start(&dir.join("chromedriver-static.log")).await;
    let browser = driver.session().await;
    browser.goto(&format!("{base}/console/sign-in")).await;
    assert_eq!(browser.title().await, "Sign in · Corral");
    // The stylesheet applied (CSP let it through): the primary button is the accent colour.
    let button = browser
        .find("form[action='/console/sign-in/email'] button")
        .await;
    assert_eq!(button.text().await, "Email me a sign-in link");
    assert_eq!(
        button.css("background-color").await,
        "rgba(15, 118, 110, 1)"
    );
    browser.screenshot(&dir, "00-sign-in").await;
    browser.resize(390, 844).await;
    browser.screenshot(&dir, "00-sign-in-phone").await;
    // An unknown console page is an HTML 404, not the API's JSON envelope.
    browser.goto(&format!("{base}/console/nope")).await;
    assert!(browser.text().await.contains("Page not found"));
    browser.quit().await;
}

/// A server with the control plane: SQLite in a temp dir, `local` and E2B (pointed at its
/// loopback fake), mail through SMTP to the loopback listener, public URL = the socket's.
pub(crate) struct Journey {
    _db: corral_registry::testing::TestDb,
    _dir: tempfile::TempDir,
    pub(crate) base: String,
    pub(crate) control: corral_control::Control,
    e2b: corral_provider_e2b::fake::Fake,
    pub(crate) smtp: smtp::Smtp,
}

impl Journey {
    pub(crate) async fn start(test_db: corral_registry::testing::TestDb) -> Self {
        use std::collections::BTreeMap;
        use std::sync::Arc;

        use corral_domain::Provider;
        use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
        use corral_provider::{Adapter as _, SandboxProvider};
        use corral_registry::{MasterKey, Registry};
        use corral_service::{Service, ServiceConfig};

        let dir = tempfile::tempdir().unwrap();
        let db = test_db.connect().await;
        let registry = Registry::new(
            db.clone(),
            MasterKey::load_or_create(&dir.path().join("master.key")).unwrap(),
        );
        let e2b = corral_provider_e2b::fake::Fake::start().await;
        let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
        providers.insert(Provider::Local, crate::support::local(dir.path()));
        providers.insert(
            Provider::E2b,
            Arc::new(corral_provider_e2b::E2bProvider::from_config(e2b.config()).unwrap()),
        );
        // A bridge kind, with no bridge of the operator's: each profile names its own.
        providers.insert(
            Provider::Cloudflare,
            Arc::new(
                corral_provider_cloudflare::CloudflareProvider::from_config(Default::default())
                    .unwrap(),
            ),
        );
        let idempotency = IdempotencyStore::new(db.clone(), IdempotencyConfig::default());
        let service = Service::new(
            providers,
            registry.clone(),
            idempotency,
            ServiceConfig::default(),
        );
        let smtp = smtp::Smtp::start().await;
        let mailer = corral_control::SmtpMailer::new(&corral_control::SmtpConfig {
            host: "127.0.0.1".to_owned(),
            port: smtp.port,
            security: corral_control::SmtpSecurity::Plain,
            username: None,
            password: None,
            from: "Corral <corral@example.test>".to_owned(),
            timeout: std::time::Duration::from_secs(10),
        })
        .unwrap();
        let (listener, base) = loopback();
        let control = corral_control::Control::new(
            corral_control_store::ControlStore::new(db),
            registry,
            service.clone(),
            corral_control::ControlConfig {
                public_url: base.clone(),
                ..Default::default()
            },
        )
        .with_mailer(Arc::new(mailer));
        let state = AppState {
            service,
            metrics: Arc::new(corral_web::request_metrics()),
            build: corral::server::build_info(),
            e2b: None,
            control: control.clone(),
        };
        serve_on(listener, state);
        Journey {
            _db: test_db,
            _dir: dir,
            base,
            control,
            e2b,
            smtp,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// The sign-in link in a captured mail.
pub(crate) fn sign_in_link(mail: &smtp::Message) -> String {
    let body = smtp::decoded_body(&mail.data);
    let start = body
        .find("http://")
        .unwrap_or_else(|| panic!("no link in the mail: {body}"));
    body[start..].split_whitespace().next().unwrap().to_owned()
}

/// On the sign-in page: asks for a link for `email`, then follows the one mailed and confirms
/// it (the link alone signs nobody in).
pub(crate) async fn sign_in_by_emailed_link(j: &Journey, b: &webdriver::Session, email: &str) {
    b.find("#email").await.type_text(email).await;
    b.find("form[action='/console/sign-in/email'] button")
        .await
        .submit()
        .await;
    let mail = j
        .smtp
        .wait_for_containing(email, "/console/sign-in/verify?token=")
        .await;
    b.goto(&sign_in_link(&mail)).await;
    b.find("#confirm-sign-in").await.submit().await;
}

/// The issue's done-when, in a real browser: invite → sign in through the emailed link →
/// accept terms → organization → project → key → E2B profile connected and tested → a
/// sandbox created with the key over the public API, seen in the console, deleted, seen as a
/// tombstone. A screenshot of every page lands in `target/console-screenshots/`.
#[actix_web::test]
async fn console_journey_from_invitation_to_tombstone_in_chromium_on_sqlite() {
    if !browser_or_skip("console_journey_from_invitation_to_tombstone_in_chromium_on_sqlite") {
        return;
    }
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    journey(j, screenshot_dir()).await;
}

#[actix_web::test]
async fn console_journey_from_invitation_to_tombstone_in_chromium_on_postgresql() {
    let test = "console_journey_from_invitation_to_tombstone_in_chromium_on_postgresql";
    if !browser_or_skip(test) {
        return;
    }
    let Some(db) = corral_registry::testing::TestDb::postgres(test).await else {
        return;
    };
    let j = Journey::start(db).await;
    journey(j, screenshot_dir().join("postgresql")).await;
}

async fn journey(j: Journey, shots: PathBuf) {
    let email = "ada@example.test";
    j.control
        .publish_legal("terms", "Terms of Service", "Be kind to the sandboxes.")
        .await
        .unwrap();
    j.control
        .publish_legal(
            "privacy",
            "Privacy Notice",
            "We keep what the service needs.",
        )
        .await
        .unwrap();
    // The operator's bootstrap (what `corral user invite` does).
    j.control.invite_user(email).await.unwrap();

    let driver = webdriver::Driver::start(&shots.join("chromedriver-journey.log")).await;
    let b = driver.session().await;

    // Sign in through the emailed link.
    b.goto(&j.url("/console")).await;
    assert!(
        b.url().await.ends_with("/console/sign-in"),
        "{}",
        b.url().await
    );
    b.find("#email").await.type_text(email).await;
    b.find("form[action='/console/sign-in/email'] button")
        .await
        .submit()
        .await;
    let text = b.text().await;
    assert!(
        text.contains("Check your email"),
        "{}: {text}",
        b.url().await
    );
    b.screenshot(&shots, "01-check-email").await;
    let mail = j.smtp.wait_for(email).await;
    let link = sign_in_link(&mail);
    assert!(
        link.starts_with(&j.url("/console/sign-in/verify?token=")),
        "{link}"
    );
    b.goto(&link).await;
    // The link only shows a confirmation (login CSRF): no session until the button.
    assert!(
        !b.cookies()
            .await
            .iter()
            .any(|c| c["name"] == "corral_session"),
        "following the link alone signs nobody in"
    );
    b.find("#confirm-sign-in").await.submit().await;

    // The session cookie: HttpOnly, SameSite=Lax.
    let cookies = b.cookies().await;
    let session = cookies
        .iter()
        .find(|c| c["name"] == "corral_session")
        .expect("a session cookie");
    assert_eq!(session["httpOnly"], true);
    assert_eq!(session["sameSite"], "Lax");

    // Terms first.
    assert!(
        b.url().await.ends_with("/console/legal"),
        "{}",
        b.url().await
    );
    let text = b.text().await;
    assert!(
        text.contains("Terms of Service") && text.contains("Privacy Notice"),
        "{text}"
    );
    b.screenshot(&shots, "02-terms").await;
    b.find("#accept-terms").await.submit().await;

    // The personal account.
    assert!(
        b.url().await.contains("/console/accounts/acc_"),
        "{}",
        b.url().await
    );
    assert!(b.text().await.contains("Your personal account."));
    b.screenshot(&shots, "03-personal-account").await;

    // An organization.
    b.goto(&j.url("/console/accounts/new")).await;
    b.find("#org-name").await.type_text("Acme Robotics").await;
    b.screenshot(&shots, "04-new-organization").await;
    b.find("form[action='/console/accounts'] button")
        .await
        .submit()
        .await;
    let org_url = b.url().await;
    assert!(
        b.text().await.contains("Created Acme Robotics."),
        "{}",
        b.text().await
    );

    // A project: lands on its keys tab.
    b.find("#project-name").await.type_text("agents-prod").await;
    b.find("form[action$='/projects'] button")
        .await
        .submit()
        .await;
    assert!(b.url().await.ends_with("/keys"), "{}", b.url().await);
    assert!(b.text().await.contains("Created project agents-prod."));
    b.screenshot(&shots, "05-project-keys-empty").await;

    // A key, shown once.
    b.find("#create-key").await.submit().await;
    let key = b.find("#new-key").await.text().await;
    assert!(key.starts_with("crl_"), "{key}");
    b.screenshot(&shots, "06-key-shown-once").await;
    let keys_url = b.url().await;
    b.goto(&keys_url).await;
    assert!(
        !b.source().await.contains(&key),
        "the key is shown only once"
    );
    assert_eq!(b.count("#new-key").await, 0);
    let project_url = keys_url.trim_end_matches("/keys").to_owned();

    // Connect E2B to its fake and test it.
    b.goto(&format!("{project_url}/providers")).await;
    b.find("#e2b-credential")
        .await
        .type_text(corral_provider_e2b::fake::API_KEY)
        .await;
    b.find("#provider-e2b form.stack button[type=submit]")
        .await
        .submit()
        .await;
    assert!(
        b.text().await.contains("E2B connected."),
        "{}",
        b.text().await
    );
    assert!(
        !b.source()
            .await
            .contains(corral_provider_e2b::fake::API_KEY),
        "the provider credential never comes back"
    );
    b.find("#test-e2b").await.submit().await;
    b.find("ul.checks[data-provider=e2b]").await;
    let passed = b.count("ul.checks[data-provider=e2b] li.pass").await;
    let failed = b.count("ul.checks[data-provider=e2b] li.fail").await;
    assert!(
        passed == 6 && failed == 0,
        "{passed} passed, {failed} failed: {}",
        b.text().await
    );
    for op in ["create", "exec", "write_file", "read_file", "get", "delete"] {
        assert_eq!(
            b.count(&format!(
                "ul.checks[data-provider=e2b] li.pass[data-operation={op}]"
            ))
            .await,
            1,
            "{op} passed"
        );
    }
    b.screenshot(&shots, "07-providers-tested").await;

    // A sandbox over the public API, with the key from the page.
    let api = reqwest::Client::new();
    let created: serde_json::Value = api
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "e2b"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    b.goto(&project_url).await;
    let row = format!("tr[data-sandbox='{id}']");
    b.find(&row).await;
    assert_eq!(b.count(&format!("{row}.is-tombstone")).await, 0);
    b.screenshot(&shots, "08-sandboxes").await;
    b.goto(&format!("{project_url}/sandboxes/{id}")).await;
    assert!(b.text().await.contains(&id));
    b.screenshot(&shots, "09-sandbox").await;

    // Deleted over the API: a tombstone in the console.
    let deleted = api
        .delete(j.url(&format!("/v1/sandboxes/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert!(
        deleted.status().is_success(),
        "{}",
        deleted.text().await.unwrap()
    );
    b.goto(&project_url).await;
    b.find(&format!("{row}.is-tombstone")).await;
    assert!(b.find(&row).await.text().await.contains("deleted"));
    b.screenshot(&shots, "10-sandboxes-tombstone").await;

    // Invite a teammate as a member; they accept in their own browser.
    let teammate = "lin@example.test";
    b.goto(&format!("{org_url}/members")).await;
    assert!(b.text().await.contains(email));
    b.find("#invite-email").await.type_text(teammate).await;
    b.find("form[action$='/invitations'] button")
        .await
        .submit()
        .await;
    assert!(
        b.text()
            .await
            .contains("Invitation sent to lin@example.test."),
        "{}",
        b.text().await
    );
    b.screenshot(&shots, "11-members").await;
    let invitation = j
        .smtp
        .wait_for_containing(teammate, "/console/invitations/accept?token=")
        .await;
    let b2 = driver.session().await;
    b2.goto(&sign_in_link(&invitation)).await;
    assert!(
        b2.url().await.ends_with("/console/sign-in"),
        "{}",
        b2.url().await
    );
    assert!(
        b2.text()
            .await
            .contains("Sign in with the invited email address")
    );
    sign_in_by_emailed_link(&j, &b2, teammate).await;
    b2.find("#accept-terms").await.submit().await;
    assert!(
        b2.url().await.ends_with("/console/invitations"),
        "{}",
        b2.url().await
    );
    assert!(
        !b2.source().await.contains("token"),
        "the invitation token stays in its cookie"
    );
    b2.screenshot(&shots, "11b-invitation").await;
    b2.find("#accept-invitation").await.submit().await;
    assert_eq!(b2.url().await, org_url);
    assert!(
        b2.text().await.contains("Welcome to Acme Robotics."),
        "{}",
        b2.text().await
    );
    // A member sees the project but not its keys, and cannot connect providers.
    b2.goto(&format!("{project_url}/providers")).await;
    assert_eq!(b2.count("a[href$='/keys']").await, 0);
    assert_eq!(b2.count("#e2b-credential").await, 0);
    assert_eq!(b2.count("#test-e2b").await, 0);
    assert_eq!(b2.count("ul.checks[data-provider=e2b] li.pass").await, 6);
    b2.screenshot(&shots, "11c-member-providers").await;
    b2.quit().await;
    b.goto(&format!("{org_url}/audit")).await;
    let audit = b.text().await;
    assert!(
        audit.contains("key.create") || audit.contains("project.create"),
        "{audit}"
    );
    b.screenshot(&shots, "12-audit").await;

    // A password, then sign out and back in with it.
    b.goto(&j.url("/console/profile")).await;
    b.find("#new-password")
        .await
        .type_text("correct horse battery staple")
        .await;
    b.find("form[action='/console/profile/password'] button")
        .await
        .submit()
        .await;
    assert!(
        b.text().await.contains("Password saved."),
        "{}",
        b.text().await
    );
    b.screenshot(&shots, "15-profile").await;
    b.find("header details.menu.right summary")
        .await
        .click()
        .await;
    b.find("form[action='/console/sign-out'] button")
        .await
        .submit()
        .await;
    assert!(
        b.url().await.ends_with("/console/sign-in"),
        "{}",
        b.url().await
    );
    assert!(b.text().await.contains("You are signed out."));
    b.goto(&org_url).await;
    assert!(
        b.url().await.ends_with("/console/sign-in"),
        "signed out for real"
    );
    b.find("#pw-email").await.type_text(email).await;
    b.find("#password")
        .await
        .type_text("correct horse battery staple")
        .await;
    b.find("form[action='/console/sign-in/password'] button")
        .await
        .submit()
        .await;
    assert!(
        b.url().await.contains("/console/accounts/acc_"),
        "{}",
        b.url().await
    );

    // A phone: every table fits its width, no column cut off (issue 26, bug 8).
    b.resize(390, 844).await;
    b.goto(&project_url).await;
    b.screenshot(&shots, "13-sandboxes-phone").await;
    assert!(
        b.count("table").await > 0,
        "the sandbox table: {}",
        b.text().await
    );
    let cut = columns_cut_off(&b).await;
    assert!(cut.is_empty(), "sandboxes at 390 px: {cut:?}");
    b.goto(&format!("{org_url}/audit")).await;
    b.screenshot(&shots, "13b-audit-phone").await;
    assert!(
        b.count("table").await > 0,
        "the audit log: {}",
        b.text().await
    );
    let cut = columns_cut_off(&b).await;
    assert!(cut.is_empty(), "audit log at 390 px: {cut:?}");
    b.goto(&format!("{project_url}/keys")).await;
    let cut = columns_cut_off(&b).await;
    assert!(cut.is_empty(), "keys at 390 px: {cut:?}");
    b.goto(&format!("{project_url}/providers")).await;
    b.screenshot(&shots, "14-providers-phone").await;

    // Rename the project, then delete it (asynchronously: its sandboxes, keys and profile go).
    b.resize(1366, 900).await;
    b.goto(&format!("{project_url}/settings")).await;
    b.find("#rename").await.type_text("agents-staging").await;
    b.find("form[action$='/rename'] button")
        .await
        .submit()
        .await;
    assert!(b.text().await.contains("Renamed."), "{}", b.text().await);
    assert_eq!(b.find("h1").await.text().await, "agents-staging");
    b.screenshot(&shots, "16-project-settings").await;
    b.find("form[action$='/delete'] details summary")
        .await
        .click()
        .await;
    b.find("form[action$='/delete'] button.danger")
        .await
        .submit()
        .await;
    assert_eq!(b.url().await, org_url);
    assert!(
        b.text().await.contains("agents-staging is being deleted."),
        "{}",
        b.text().await
    );
    b.quit().await;
    // The fake saw the verification's probe and the API's sandbox, with the stored credential.
    assert!(!j.e2b.server().log().all().is_empty());
}

/// What on the page is cut off at the window's width: the page scrolling sideways, a
/// table's box ending past the viewport, or a shown column ending past its table's box.
async fn columns_cut_off(b: &webdriver::Session) -> Vec<String> {
    let script = r#"
        const out = [];
        const vw = document.documentElement.clientWidth;
        if (document.documentElement.scrollWidth > vw + 1) {
            out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + vw);
        }
        for (const t of document.querySelectorAll('table')) {
            const box = (t.closest('.table-wrap') || t.parentElement).getBoundingClientRect();
            if (box.right > vw + 1) out.push('a table box ends at ' + box.right + ' > ' + vw);
            // Every shown cell ends inside the table's box (a header row visually hidden
            // by a stacked layout is not shown).
            for (const cell of t.querySelectorAll('th, td')) {
                if (getComputedStyle(cell).display === 'none') continue;
                const head = cell.closest('thead');
                if (head && getComputedStyle(head).position === 'absolute') continue;
                const r = cell.getBoundingClientRect();
                if (r.right > box.right + 1) {
                    const name = cell.tagName === 'TH' ? 'column' : 'cell';
                    out.push(name + ' "' + cell.textContent.trim().slice(0, 40) + '" ends at ' + r.right + ' > ' + box.right);
                }
            }
        }
        return out;
    "#;
    b.execute(script)
        .await
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The session cookie's token from a `Set-Cookie` answer.
fn session_from(resp: &reqwest::Response) -> String {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("corral_session="))
        .and_then(|v| v.split(';').next())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("no session cookie in {:?}", resp.headers()))
        .to_owned()
}

/// Without a browser: every console POST needs the session's CSRF field and, when the
/// browser names one, this server's origin; failing either changes nothing. Another
/// account's page is the 404 page; a bad sign-in link goes back to sign-in.
#[actix_web::test]
async fn console_forms_need_the_csrf_field_and_this_origin() {
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let confirm = |token: String, origin: String| {
        http.post(j.url("/console/sign-in/verify"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .body(format!("token={token}"))
            .send()
    };
    let bad = confirm("nope".to_owned(), j.base.clone()).await.unwrap();
    assert_eq!(bad.status(), 303);
    assert_eq!(bad.headers()["location"], "/console/sign-in");
    let markup = http
        .get(j.url("/console/sign-in/verify?token=%3Cscript%3E"))
        .send()
        .await
        .unwrap();
    assert_eq!(markup.status(), 303, "what cannot be a token is not echoed");

    // Login CSRF (issue 22, finding 6): the emailed link only renders a confirmation; it sets
    // no cookie and leaves the token unused (a mail scanner's prefetch changes nothing).
    let link = j.control.invite_user("grace@example.test").await.unwrap();
    let token_of_link = link.split("token=").nth(1).unwrap().to_owned();
    for _ in 0..2 {
        let page = http.get(&link).send().await.unwrap();
        assert_eq!(page.status(), 200);
        assert!(page.headers().get("set-cookie").is_none());
        let body = page.text().await.unwrap();
        assert!(
            body.contains("id=\"confirm-sign-in\"")
                && body.contains("action=\"/console/sign-in/verify\""),
            "{body}"
        );
    }
    // A foreign page posting the token (the attacker's own, to sign the victim in) is refused
    // and consumes nothing; so is a browser saying the post is cross-site without an Origin.
    let foreign = confirm(token_of_link.clone(), "http://evil.example".to_owned())
        .await
        .unwrap();
    assert_eq!(foreign.status(), 303);
    assert_eq!(foreign.headers()["location"], "/console/sign-in");
    assert!(
        foreign
            .headers()
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap().starts_with("corral_session="))
    );
    let cross = http
        .post(j.url("/console/sign-in/verify"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "cross-site")
        .body(format!("token={token_of_link}"))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 303);
    assert!(
        cross
            .headers()
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap().starts_with("corral_session="))
    );
    // The same-origin confirmation signs in, once.
    let signed = confirm(token_of_link.clone(), j.base.clone())
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    let replayed = confirm(token_of_link.clone(), j.base.clone())
        .await
        .unwrap();
    assert_eq!(
        replayed.headers()["location"],
        "/console/sign-in",
        "the token works once"
    );
    let set_cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"),
        "{set_cookie}"
    );
    let token = session_from(&signed);
    let cookie = format!("corral_session={token}");
    let csrf = j.control.csrf_token(&token);
    let post = |path: &str, body: String, origin: Option<&str>| {
        let mut req = http
            .post(j.url(path))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let accepted = post(
        "/console/legal/accept",
        format!("csrf={csrf}&release=terms%3A1"),
        Some(&j.base),
    )
    .await
    .unwrap();
    assert_eq!(accepted.status(), 303);

    let count = || async {
        let actor = j.control.authenticate_session(&token).await.unwrap();
        j.control.list_accounts(&actor).await.unwrap().len()
    };
    assert_eq!(count().await, 1, "the personal account");

    // No CSRF field.
    let refused = post("/console/accounts", "name=Evil".to_owned(), Some(&j.base))
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("could not be verified")
    );
    // A wrong one.
    let refused = post(
        "/console/accounts",
        "name=Evil&csrf=forged".to_owned(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 403);
    // The right one from another site.
    let refused = post(
        "/console/accounts",
        format!("name=Evil&csrf={csrf}"),
        Some("http://evil.example"),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(count().await, 1, "nothing was created");

    // The right one from here.
    let made = post(
        "/console/accounts",
        format!("name=Analytical+Engines&csrf={csrf}"),
        Some(&j.base),
    )
    .await
    .unwrap();
    assert_eq!(made.status(), 303);
    let org = made.headers()["location"].to_str().unwrap().to_owned();
    assert!(org.starts_with("/console/accounts/acc_"), "{org}");
    assert_eq!(count().await, 2);

    // The page shows the CSRF field but never the session token.
    let page = http
        .get(j.url(&org))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let body = page.text().await.unwrap();
    assert!(body.contains("Analytical Engines") && body.contains(&csrf));
    assert!(
        !body.contains(&token),
        "the session token never reaches HTML"
    );

    // Someone else's account looks like nothing at all.
    let other = j.control.invite_user("mallory@example.test").await.unwrap();
    let other_token = session_from(
        &confirm(
            other.split("token=").nth(1).unwrap().to_owned(),
            j.base.clone(),
        )
        .await
        .unwrap(),
    );
    let theirs = http
        .get(j.url(&org))
        .header("cookie", format!("corral_session={other_token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);
    assert!(theirs.text().await.unwrap().contains("Page not found"));

    // Signed out: pages send you to sign in.
    let anonymous = http.get(j.url(&org)).send().await.unwrap();
    assert_eq!(anonymous.status(), 303);
    assert_eq!(anonymous.headers()["location"], "/console/sign-in");
}

/// Issue 22, finding 7: a sandbox created with an inline credential, in a project with no
/// stored profile for its provider, still has a page: the registry's record and, in words,
/// that the provider could not be asked (before, the page answered 503).
#[actix_web::test]
async fn a_sandbox_made_with_an_inline_credential_has_a_page_without_a_stored_profile() {
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let link = j.control.invite_user("ada@example.test").await.unwrap();
    let signed = http
        .post(j.url("/console/sign-in/verify"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &j.base)
        .body(format!("token={}", link.split("token=").nth(1).unwrap()))
        .send()
        .await
        .unwrap();
    let token = session_from(&signed);
    let actor = j.control.authenticate_session(&token).await.unwrap();
    j.control.accept_legal(&actor, "terms", 1).await.unwrap();
    let me = j.control.me(&actor).await.unwrap();
    let project = j
        .control
        .create_project(
            &actor,
            me.personal_account_id,
            corral_control::ProjectName {
                name: "inline".to_owned(),
            },
        )
        .await
        .unwrap();
    let pid = project.id.parse().unwrap();
    let key = j
        .control
        .create_key(&actor, pid, Default::default())
        .await
        .unwrap()
        .key;

    let created = http
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .header("x-provider-credential", corral_provider_e2b::fake::API_KEY)
        .json(&serde_json::json!({"provider": "e2b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{:?}", created.text().await);
    let created: serde_json::Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();

    let page = http
        .get(j.url(&format!(
            "/console/accounts/{}/projects/{}/sandboxes/{id}",
            project.account_id, project.id
        )))
        .header("cookie", format!("corral_session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let body = page.text().await.unwrap();
    assert!(body.contains(&id), "{body}");
    assert!(body.contains("id=\"provider-not-asked\""), "{body}");
    assert!(
        body.contains("No e2b credential is stored in this project"),
        "{body}"
    );
    assert!(
        !body.contains(corral_provider_e2b::fake::API_KEY),
        "the inline credential is never shown"
    );
}

/// The sandbox page as a place to work (issue 26), in Chromium at desktop and phone widths:
/// a command started from the form streams its output into its page while it runs (the
/// state still "running"), and after a reload the page shows the output so far and the
/// stream finishes it with exit code 0; the sandbox page's status follows a delete made over
/// the API. Screenshots land in `target/console-screenshots/work/`.
#[actix_web::test]
async fn console_command_streams_into_the_page_and_survives_a_reload_in_chromium() {
    if !browser_or_skip("console_command_streams_into_the_page_and_survives_a_reload_in_chromium") {
        return;
    }
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let shots = screenshot_dir().join("work");
    let driver = webdriver::Driver::start(&shots.join("chromedriver-work.log")).await;
    let b = driver.session().await;
    let made = sign_in_and_make_a_local_sandbox(&j, &b, "ada@example.test").await;
    let page = made.page.clone();

    for (width, height, tag) in [(1366, 900, "desktop"), (390, 844, "phone")] {
        b.resize(width, height).await;
        b.goto(&page).await;
        b.find("#run-command")
            .await
            .type_text("for i in 1 2 3; do echo line$i; sleep 1; done")
            .await;
        b.find("#run").await.submit().await;
        let command_url = b.url().await;
        assert!(command_url.contains("/commands/cmd_"), "{command_url}");
        // Live: a line is in the page while the command still runs.
        let seen = wait_for(&b, "line1 in the output while running", |s| {
            s["output"].as_str().unwrap_or_default().contains("line1")
        })
        .await;
        assert_eq!(seen["state"], "running", "{seen}");
        assert_eq!(seen["ended"], "—", "no end time while it runs: {seen}");
        assert_eq!(
            seen["following"], "true",
            "the script follows the stream: {seen}"
        );
        b.screenshot(&shots, &format!("20-command-running-{tag}"))
            .await;
        // Reload: the output so far is there at once, and a still-running command keeps
        // streaming to its exit.
        b.goto(&command_url).await;
        let first = b.find("#output").await.text().await;
        assert!(
            first.contains("line1"),
            "the output so far after a reload: {first}"
        );
        let done = wait_for(&b, "the exit", |s| s["exit"] == "0").await;
        assert_eq!(
            done["output"].as_str().unwrap().trim_end(),
            "line1\nline2\nline3",
            "{done}"
        );
        assert_eq!(done["state"], "exited", "{done}");
        // The end time is filled in without a reload (it was "—" while running).
        let ended = wait_for(&b, "the end time", |s| {
            s["ended"]
                .as_str()
                .is_some_and(|t| !t.is_empty() && t != "—")
        })
        .await;
        assert_eq!(ended["exit"], "0", "{ended}");
        b.screenshot(&shots, &format!("21-command-done-{tag}"))
            .await;
        let cut = columns_cut_off(&b).await;
        assert!(cut.is_empty(), "command page at {width} px: {cut:?}");
        // The sandbox page lists it with its exit code; nothing is cut off at this width.
        b.goto(&page).await;
        let history = b.find("#command-history tbody tr").await.text().await;
        assert!(
            history.contains("exited") && history.contains('0'),
            "{history}"
        );
        b.screenshot(&shots, &format!("22-sandbox-{tag}")).await;
        let cut = columns_cut_off(&b).await;
        assert!(cut.is_empty(), "sandbox page at {width} px: {cut:?}");
    }
    // The status is kept live: a delete made over the API shows on the open page.
    b.resize(1366, 900).await;
    b.goto(&page).await;
    b.find("#sandbox-status[data-watching='true']").await;
    let gone = reqwest::Client::new()
        .delete(j.url(&format!("/v1/sandboxes/{}", made.id)))
        .bearer_auth(&made.key)
        .send()
        .await
        .unwrap();
    assert!(gone.status().is_success());
    b.find("#sandbox-status[data-status='deleted']").await;
    let news = b.find("#status-news").await.text().await;
    assert!(news.contains("was deleted"), "{news}");
    b.screenshot(&shots, "23-sandbox-deleted-live").await;
    b.quit().await;
}

/// A `local` sandbox made over the API for a user signed in in the browser.
pub(crate) struct Made {
    /// Its console page.
    pub(crate) page: String,
    pub(crate) id: String,
    /// The API key that made it.
    pub(crate) key: String,
}

/// Signs `email` in through the browser (the operator's invitation link, the confirmation,
/// the terms), makes a project, a key and a `local` sandbox with it over the API.
pub(crate) async fn sign_in_and_make_a_local_sandbox(
    j: &Journey,
    b: &webdriver::Session,
    email: &str,
) -> Made {
    let link = j.control.invite_user(email).await.unwrap();
    b.goto(&link).await;
    b.find("#confirm-sign-in").await.submit().await;
    b.find("#accept-terms").await.submit().await;
    let token = b
        .cookies()
        .await
        .iter()
        .find(|c| c["name"] == "corral_session")
        .and_then(|c| c["value"].as_str().map(str::to_owned))
        .expect("signed in");
    let actor = j.control.authenticate_session(&token).await.unwrap();
    let me = j.control.me(&actor).await.unwrap();
    let p = j
        .control
        .create_project(
            &actor,
            me.personal_account_id,
            corral_control::ProjectName {
                name: "work".to_owned(),
            },
        )
        .await
        .unwrap();
    let key = j
        .control
        .create_key(&actor, p.id.parse().unwrap(), Default::default())
        .await
        .unwrap()
        .key;
    let created: serde_json::Value = reqwest::Client::new()
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"provider": "local"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("a sandbox").to_owned();
    Made {
        page: j.url(&format!(
            "/console/accounts/{}/projects/{}/sandboxes/{id}",
            p.account_id, p.id
        )),
        id,
        key,
    }
}

/// The command page as the script leaves it: output text, state badge, exit code, end time,
/// and whether the script follows the stream.
const COMMAND_STATE: &str = r#"
    const out = document.getElementById('output');
    const state = document.querySelector('#command-state [data-state]');
    const exit = document.getElementById('exit-code');
    const ended = document.getElementById('command-ended');
    return {
        ended: ended ? ended.textContent.trim() : '',
        output: out ? out.textContent : '',
        state: state ? state.getAttribute('data-state') : '',
        exit: exit ? exit.textContent.trim() : '',
        following: out ? out.getAttribute('data-following') : null,
    };
"#;

/// Polls the command page (up to 30 s) until `done` holds for its state; that state.
async fn wait_for(
    b: &webdriver::Session,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let s = b.execute(COMMAND_STATE).await;
        if done(&s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited for {what}: {s}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Where the pinned axe-core (`.ci/run` installs it from npm) is: `$CORRAL_AXE_JS`, else
/// `<target>/axe/node_modules/axe-core/axe.min.js`.
fn axe_js() -> PathBuf {
    std::env::var_os("CORRAL_AXE_JS").map_or_else(
        || {
            let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            tmp.parent()
                .unwrap_or(&tmp)
                .join("axe/node_modules/axe-core/axe.min.js")
        },
        PathBuf::from,
    )
}

/// The serious and critical violations axe-core finds on the current page, one line each.
async fn axe_violations(b: &webdriver::Session, axe: &str) -> Vec<String> {
    b.execute(axe).await;
    let found = b
        .execute_async(
            r#"
            const done = arguments[arguments.length - 1];
            axe.run(document, { resultTypes: ['violations'] })
                .then(r => done(r.violations
                    .filter(v => v.impact === 'serious' || v.impact === 'critical')
                    .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at '
                        + v.nodes.map(n => n.target.join(' ')).join(', '))))
                .catch(e => done(['axe failed: ' + e]));
            "#,
            std::time::Duration::from_secs(60),
        )
        .await;
    found
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The console passes axe-core's automated accessibility check with no serious or critical
/// violation: the sign-in page and every signed-in page kind (sandbox list, sandbox, command,
/// file, keys, providers, settings, account, members, audit log, profile), at desktop and
/// phone widths.
#[actix_web::test]
async fn console_pages_have_no_serious_accessibility_violation_in_chromium() {
    let test = "console_pages_have_no_serious_accessibility_violation_in_chromium";
    if !browser_or_skip(test) {
        return;
    }
    let axe_path = axe_js();
    let Ok(axe) = std::fs::read_to_string(&axe_path) else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "{test}: {} is missing; .ci/run installs the pinned axe-core from npm",
            axe_path.display()
        );
        eprintln!(
            "SKIPPED {test}: axe-core is not installed at {}",
            axe_path.display()
        );
        return;
    };
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let shots = screenshot_dir().join("axe");
    let driver = webdriver::Driver::start(&shots.join("chromedriver-axe.log")).await;
    let b = driver.session().await;
    b.goto(&j.url("/console/sign-in")).await;
    let mut found = Vec::new();
    found.extend(
        axe_violations(&b, &axe)
            .await
            .into_iter()
            .map(|v| format!("sign-in: {v}")),
    );
    let page = sign_in_and_make_a_local_sandbox(&j, &b, "ada@example.test")
        .await
        .page;
    b.goto(&page).await;
    b.find("#run-command").await.type_text("echo hello").await;
    b.find("#run").await.submit().await;
    let command_url = b.url().await;
    wait_for(&b, "the exit", |s| s["exit"] == "0").await;
    // A snapshot, so the sandbox's snapshots card and the snapshots tab have a row.
    b.goto(&page).await;
    b.find("#take-snapshot").await.submit().await;
    for (width, height) in [(1366, 900), (390, 844)] {
        b.resize(width, height).await;
        let list = page[..page.find("/sandboxes/").unwrap()].to_owned();
        let account = list[..list.find("/projects/").unwrap()].to_owned();
        let pages = [
            ("sandbox list", list.clone()),
            ("sandbox", page.clone()),
            ("snapshots", format!("{list}/snapshots")),
            ("command", command_url.clone()),
            ("file", format!("{page}/files?path=%2Fetc%2Fhostname")),
            ("keys", format!("{list}/keys")),
            ("providers", format!("{list}/providers")),
            ("project settings", format!("{list}/settings")),
            ("account", account.clone()),
            ("members", format!("{account}/members")),
            ("audit log", format!("{account}/audit")),
            ("profile", j.url("/console/profile")),
        ];
        for (name, url) in &pages {
            b.goto(url).await;
            found.extend(
                axe_violations(&b, &axe)
                    .await
                    .into_iter()
                    .map(|v| format!("{name} at {width} px: {v}")),
            );
        }
    }
    b.quit().await;
    assert!(found.is_empty(), "{found:#?}");
}

/// Issue 32 in a real browser: on a `local` sandbox's page, Stop (the run form gives way to
/// the words and a Resume), Resume from there, then Take snapshot and see it on the page and
/// the snapshots tab; the list's row button and the snapshots tab fit a phone's width.
/// Screenshots land in `target/console-screenshots/lifecycle/`.
#[actix_web::test]
async fn console_stops_resumes_and_snapshots_a_sandbox_in_chromium() {
    if !browser_or_skip("console_stops_resumes_and_snapshots_a_sandbox_in_chromium") {
        return;
    }
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let shots = screenshot_dir().join("lifecycle");
    let driver = webdriver::Driver::start(&shots.join("chromedriver-lifecycle.log")).await;
    let b = driver.session().await;
    let page = sign_in_and_make_a_local_sandbox(&j, &b, "ada@example.test")
        .await
        .page;
    b.goto(&page).await;
    b.screenshot(&shots, "30-lifecycle-card").await;
    b.find("#lifecycle-stop").await.submit().await;
    let text = b.text().await;
    assert!(text.contains("Stopped sbx_local_"), "{text}");
    assert!(
        text.contains("nothing runs in it until it is resumed"),
        "{text}"
    );
    assert_eq!(
        b.find("#sandbox-status .badge").await.text().await,
        "stopped"
    );
    b.screenshot(&shots, "31-stopped").await;
    b.find("#commands-resume").await.submit().await;
    assert!(b.text().await.contains("it is running."));
    assert_eq!(
        b.find("#sandbox-status .badge").await.text().await,
        "running"
    );
    b.find("#snapshot-name")
        .await
        .type_text("first <try>")
        .await;
    b.find("#take-snapshot").await.submit().await;
    let text = b.text().await;
    assert!(text.contains("snapshot snp_local_"), "{text}");
    assert!(
        b.find("#sandbox-snapshots")
            .await
            .text()
            .await
            .contains("first <try>"),
        "the name, as text"
    );
    b.screenshot(&shots, "32-snapshot-taken").await;
    let list = page[..page.find("/sandboxes/").unwrap()].to_owned();
    for (width, height, tag) in [(1366, 900, "desktop"), (390, 844, "phone")] {
        b.resize(width, height).await;
        for (name, url) in [
            ("list", list.clone()),
            ("snapshots", format!("{list}/snapshots")),
        ] {
            b.goto(&url).await;
            let cut = columns_cut_off(&b).await;
            assert!(cut.is_empty(), "{name} at {width} px: {cut:#?}");
            b.screenshot(&shots, &format!("33-{name}-{tag}")).await;
        }
    }
    b.quit().await;
}
