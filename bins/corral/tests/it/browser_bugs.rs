//! Issue 26's console bugs, walked through by a person in a real browser (headless Chromium
//! over WebDriver, against the server on a loopback socket). Each assertion is on what the
//! page shows and fails against the bug as the issue describes it; `browser/console_http.rs`
//! pins the same fixes over HTTP. Screenshots land in `target/console-screenshots/bugs/`.

use crate::browser::{
    Journey, browser_or_skip, screenshot_dir, sign_in_and_make_a_local_sandbox,
    sign_in_by_emailed_link, sign_in_link, webdriver,
};

const ADA: &str = "ada@example.test";
const GRACE: &str = "grace@example.test";
const PASSWORD: &str = "correct horse battery staple";

/// What is typed in the input `css` now.
async fn value(b: &webdriver::Session, css: &str) -> String {
    b.find(css)
        .await
        .property("value")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether every number in `said` counts minutes or hours: never a raw number of seconds.
fn numbers_are_minutes_or_hours(said: &str) -> bool {
    let mut rest = said;
    while let Some(at) = rest.find(|c: char| c.is_ascii_digit()) {
        rest = rest[at..].trim_start_matches(|c: char| c.is_ascii_digit());
        if !(rest.starts_with(" minute") || rest.starts_with(" hour")) {
            return false;
        }
    }
    true
}

/// Bugs 1, 2, 5 (the `default` project) and 7 (`/`, Markdown terms), as a person meets them
/// signing in: `/` leads to the sign-in page; a wrong password says so and keeps the email
/// typed; the throttle speaks in minutes and points at the emailed link, which works; the
/// terms are rendered from Markdown; the `default` project made at first start is in the first
/// invited user's account.
#[actix_web::test]
async fn console_sign_in_bugs_of_issue_26_are_fixed_in_chromium() {
    if !browser_or_skip("console_sign_in_bugs_of_issue_26_are_fixed_in_chromium") {
        return;
    }
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal(
            "terms",
            "Terms of Service",
            "Be **kind** to the [sandboxes](https://example.com/sandboxes).\n\n- one rule\n- another rule\n",
        )
        .await
        .unwrap();
    // `corral serve`'s first start: the `default` project, outside any account.
    let default = j
        .control
        .registry()
        .create_project(corral_control::DEFAULT_PROJECT)
        .await
        .unwrap();
    // `corral user invite`: the first user, who sets a password from another device.
    let link = j.control.invite_user(ADA).await.unwrap();
    let (actor, _) = j
        .control
        .sign_in_with_token(
            link.split("token=").nth(1).unwrap(),
            corral_control::ClientAddress::unknown(),
        )
        .await
        .unwrap();
    j.control
        .set_password(&actor, None, PASSWORD)
        .await
        .unwrap();

    let shots = screenshot_dir().join("bugs");
    let driver = webdriver::Driver::start(&shots.join("chromedriver-sign-in.log")).await;
    let b = driver.session().await;

    // Bug 7: `/` in a browser leads to the console (here its sign-in), not a JSON 404.
    b.goto(&j.url("/")).await;
    assert!(
        b.url().await.ends_with("/console/sign-in"),
        "{}: {}",
        b.url().await,
        b.source().await
    );
    assert_eq!(b.title().await, "Sign in · Corral");

    // Bug 1: a wrong password says so, and the email typed stays in both forms.
    b.find("#pw-email").await.type_text(ADA).await;
    b.find("#password")
        .await
        .type_text("not the password at all")
        .await;
    b.find("form[action='/console/sign-in/password'] button")
        .await
        .submit()
        .await;
    let said = b.find("[role=alert]").await.text().await;
    assert!(
        said.contains("That email and password do not match"),
        "{said}"
    );
    assert_eq!(value(&b, "#pw-email").await, ADA, "the email is kept");
    assert_eq!(value(&b, "#email").await, ADA, "and offered for a link");
    assert_eq!(value(&b, "#password").await, "", "never the password");
    b.screenshot(&shots, "01-wrong-password").await;

    // Bug 2: more wrong passwords (the email left as the page keeps it) until the throttle
    // answers; it says how long in minutes and offers the emailed link.
    let mut throttled = None;
    for _ in 0..10 {
        assert_eq!(value(&b, "#pw-email").await, ADA);
        b.find("#password")
            .await
            .type_text("still not the password")
            .await;
        b.find("form[action='/console/sign-in/password'] button")
            .await
            .submit()
            .await;
        let said = b.find("[role=alert]").await.text().await;
        if said.starts_with("Too many attempts") {
            throttled = Some(said);
            break;
        }
        assert!(said.contains("do not match"), "{said}");
    }
    let said = throttled.expect("the throttle answers after a few wrong passwords");
    assert!(
        said.starts_with("Too many attempts — try again in about ")
            && (said.contains(" minute") || said.contains(" hour"))
            && said.contains("or sign in with an emailed link"),
        "{said}"
    );
    assert!(
        !said.contains("second") && !said.contains("Retry-After"),
        "{said}"
    );
    assert!(numbers_are_minutes_or_hours(&said), "never seconds: {said}");
    assert_eq!(value(&b, "#email").await, ADA);
    b.screenshot(&shots, "02-throttled").await;

    // The way around: the emailed link, from the form the page filled in.
    b.find("form[action='/console/sign-in/email'] button")
        .await
        .submit()
        .await;
    assert!(b.text().await.contains("Check your email"));
    let mail = j
        .smtp
        .wait_for_containing(ADA, "/console/sign-in/verify?token=")
        .await;
    b.goto(&sign_in_link(&mail)).await;
    b.find("#confirm-sign-in").await.submit().await;

    // Bug 7: the terms are rendered from Markdown, not shown as its source.
    assert!(
        b.url().await.ends_with("/console/legal"),
        "{}",
        b.url().await
    );
    assert_eq!(
        b.find(".legal-doc .prose strong").await.text().await,
        "kind"
    );
    assert_eq!(
        b.count(".legal-doc .prose a[href='https://example.com/sandboxes']")
            .await,
        1
    );
    assert_eq!(b.count(".legal-doc .prose li").await, 2);
    let terms = b.find(".legal-doc .prose").await.text().await;
    assert!(
        !terms.contains("**") && !terms.contains("]("),
        "no Markdown source: {terms}"
    );
    b.screenshot(&shots, "03-terms-markdown").await;
    b.find("#accept-terms").await.submit().await;

    // Bug 5: the `default` project is in the first user's account, and opens.
    assert!(
        b.url().await.contains("/console/accounts/acc_"),
        "{}",
        b.url().await
    );
    let link = format!("a[href$='/projects/{}']", default.id);
    assert_eq!(b.find(&link).await.text().await, "default");
    b.screenshot(&shots, "04-default-project").await;
    b.find(&link).await.submit().await;
    assert_eq!(b.find("h1").await.text().await, "default");
    b.quit().await;
}

/// The facts of a sandbox page (`dl.facts`): term → description.
const FACTS: &str = r#"
    const out = {};
    for (const dt of document.querySelectorAll('dl.facts dt')) {
        const dd = dt.nextElementSibling;
        out[dt.textContent.trim()] = dd ? dd.textContent.trim() : '';
    }
    return out;
"#;

/// The rows of the members page's People table: who, and the actions offered on them.
const MEMBERS: &str = r#"
    return Array.from(document.querySelector('table').querySelectorAll('tbody tr')).map(tr => ({
        who: tr.cells[0].textContent.trim(),
        role: tr.cells[1].textContent.trim(),
        change: tr.querySelectorAll("form[action$='/role'] select").length,
        remove: tr.querySelectorAll("form[action$='/remove']").length,
        transfer: tr.querySelectorAll("form[action$='/transfer']").length,
    }));
"#;

/// The row of `email` in [`MEMBERS`]' answer.
fn member<'a>(rows: &'a serde_json::Value, email: &str) -> &'a serde_json::Value {
    rows.as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["who"].as_str().is_some_and(|w| w.starts_with(email)))
        })
        .unwrap_or_else(|| panic!("no row for {email}: {rows}"))
}

/// Bugs 3, 4, 5 (`local`), 6 and 7 (keys, owners, invitations), as a person meets them in a
/// project and an organization: the sandbox page says when it was made; reloading "Create
/// key" makes no other key; `local` has its card; a failed test is not "ready" and says when
/// it ran; a bridge card takes its key and refuses `http://`; a failed create says why; the
/// invitation names organization, inviter and role; an admin is offered nothing on the owner.
#[actix_web::test]
async fn console_project_bugs_of_issue_26_are_fixed_in_chromium() {
    if !browser_or_skip("console_project_bugs_of_issue_26_are_fixed_in_chromium") {
        return;
    }
    let j = Journey::start(corral_registry::testing::TestDb::sqlite()).await;
    j.control
        .publish_legal("terms", "Terms", "Text.")
        .await
        .unwrap();
    let shots = screenshot_dir().join("bugs");
    let driver = webdriver::Driver::start(&shots.join("chromedriver-project.log")).await;
    let b = driver.session().await;
    let made = sign_in_and_make_a_local_sandbox(&j, &b, ADA).await;
    let project = made.page[..made.page.find("/sandboxes/").unwrap()].to_owned();

    // Bug 6: the sandbox page says when it was created (a date and time, minutes ago at most).
    b.goto(&made.page).await;
    let facts = b.execute(FACTS).await;
    let created = facts["Created"]
        .as_str()
        .unwrap_or_else(|| panic!("no Created: {facts}"));
    let at = chrono::NaiveDateTime::parse_from_str(
        created.get(..16).unwrap_or(created),
        "%Y-%m-%d %H:%M",
    )
    .unwrap_or_else(|e| panic!("{created}: {e}"))
    .and_utc();
    let off = (chrono::Utc::now() - at).num_seconds().abs();
    assert!(off < 300, "created {created}, {off} s from now");
    b.screenshot(&shots, "10-sandbox-created").await;

    // Bug 7: reloading the page "Create key" answered (the browser posts the form again)
    // makes no other key and says so; the key is not shown again.
    b.goto(&format!("{project}/keys")).await;
    let rows = "table tbody tr";
    let before = b.count(rows).await;
    assert_eq!(before, 1, "the key that made the sandbox");
    b.find("#create-key").await.submit().await;
    let key = b.find("#new-key").await.text().await;
    assert_eq!(b.count(rows).await, 2);
    b.refresh().await;
    let text = b.text().await;
    assert!(text.contains("reloading made no other"), "{text}");
    assert!(!b.source().await.contains(&key), "shown only once");
    assert_eq!(b.count(rows).await, 2, "no key was added by the reload");
    b.screenshot(&shots, "11-key-reloaded").await;

    b.goto(&format!("{project}/providers")).await;
    // Bug 5: `local` has its card.
    let local = b.find("#provider-local").await.text().await;
    assert!(local.contains("no account or credential needed"), "{local}");
    assert_eq!(b.count("#provider-local input[name=credential]").await, 0);
    // Ready without a profile (it needs none), not "not connected" beside a running sandbox.
    assert_eq!(
        b.count("#provider-local [data-state=built-in]").await,
        1,
        "{local}"
    );

    // Bug 3: E2B connected with a credential it refuses, then tested: the card says not
    // ready, with when the test ran; what the failure kept from running is not a failure.
    b.find("#e2b-credential")
        .await
        .type_text("e2b_not_the_fakes_key")
        .await;
    b.find("#provider-e2b form.stack button[type=submit]")
        .await
        .submit()
        .await;
    assert!(b.text().await.contains("E2B connected."));
    let badge = "#provider-e2b .card-head [data-state]";
    assert_eq!(b.find(badge).await.text().await, "connected · not tested");
    // Bug 6: a create the provider refused (before any test could warn of it) has a page
    // that says why, in the API's words.
    let refused = reqwest::Client::new()
        .post(j.url("/v1/sandboxes"))
        .bearer_auth(&made.key)
        .json(&serde_json::json!({"provider": "e2b"}))
        .send()
        .await
        .unwrap();
    assert!(!refused.status().is_success());
    let answer: serde_json::Value = refused.json().await.unwrap();
    let (code, message) = (
        answer["error"]["code"].as_str().unwrap().to_owned(),
        answer["error"]["message"].as_str().unwrap().to_owned(),
    );
    b.goto(&format!("{project}?status=failed")).await;
    let failed = b.find("tr[data-sandbox] a").await.property("href").await;
    b.goto(failed.as_str().unwrap()).await;
    let why = b.find("#create-failed").await.text().await;
    assert!(why.contains(&code) && why.contains(&message), "{why}");
    b.screenshot(&shots, "12-create-failed").await;

    // Bug 3, continued: the test.
    b.goto(&format!("{project}/providers")).await;
    b.find("#test-e2b").await.submit().await;
    b.find("ul.checks[data-provider=e2b]").await;
    assert_eq!(b.find(badge).await.text().await, "not ready: test failed");
    assert_eq!(b.count("#provider-e2b [data-state=ready]").await, 0);
    let tested = b.find("#provider-e2b p.tested").await.text().await;
    assert!(tested.starts_with("Last tested "), "{tested}");
    assert_eq!(b.count("#provider-e2b p.tested time").await, 1);
    let checks = "ul.checks[data-provider=e2b] li";
    assert_eq!(
        b.count(&format!("{checks}.fail[data-operation=create]"))
            .await,
        1
    );
    assert_eq!(b.count(&format!("{checks}.fail")).await, 1);
    assert_eq!(b.count(&format!("{checks}.not-reached")).await, 5);
    assert_eq!(b.count(&format!("{checks}.pass")).await, 0);
    b.screenshot(&shots, "13-e2b-failing").await;

    // Bug 4: a bridge kind's card asks for its key with the bridge URL; an http:// URL is
    // refused with words that say https, and nothing is connected.
    let cf = "#provider-cloudflare";
    assert_eq!(
        b.find(&format!("{cf} label[for=cloudflare-credential]"))
            .await
            .text()
            .await,
        "Bridge key"
    );
    b.find("#cloudflare-credential")
        .await
        .type_text("bridge-key")
        .await;
    b.find("#cloudflare-bridgeUrl")
        .await
        .type_text("http://bridge.example.com")
        .await;
    let providers_url = b.url().await;
    b.find(&format!("{cf} form.stack button[type=submit]"))
        .await
        .click()
        .await;
    // Chromium refuses the form itself (its pattern) and shows the field's title as the reason.
    let refusal = b
        .execute(
            "const e = document.getElementById('cloudflare-bridgeUrl');
             return { mismatch: e.validity.patternMismatch, title: e.title };",
        )
        .await;
    b.screenshot(&shots, "14-bridge-http-refused").await;
    assert_eq!(refusal["mismatch"], true, "{refusal}");
    assert!(
        refusal["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("The bridge URL must start with https://")),
        "{refusal}"
    );
    assert_eq!(b.url().await, providers_url);
    assert_eq!(
        b.find(&format!("{cf} .card-head [data-state]"))
            .await
            .text()
            .await,
        "not connected"
    );
    // With https:// and the key it is connected whole: nothing missing.
    b.find("#cloudflare-bridgeUrl")
        .await
        .type_text("https://bridge.example.com")
        .await;
    b.find(&format!("{cf} form.stack button[type=submit]"))
        .await
        .submit()
        .await;
    assert!(
        b.text().await.contains("Cloudflare connected."),
        "{}",
        b.text().await
    );
    assert_eq!(
        b.find(&format!("{cf} .card-head [data-state]"))
            .await
            .text()
            .await,
        "connected · not tested"
    );
    b.screenshot(&shots, "15-bridge-connected").await;

    // Bug 7: an organization; Grace invited as an admin.
    b.goto(&j.url("/console/accounts/new")).await;
    b.find("#org-name").await.type_text("Acme Robotics").await;
    b.find("form[action='/console/accounts'] button")
        .await
        .submit()
        .await;
    let org = b.url().await;
    b.goto(&format!("{org}/members")).await;
    b.find("#invite-email").await.type_text(GRACE).await;
    b.find("#invite-role option[value=admin]")
        .await
        .click()
        .await;
    b.find("form[action$='/invitations'] button")
        .await
        .submit()
        .await;
    assert!(
        b.text()
            .await
            .contains("Invitation sent to grace@example.test.")
    );
    let invitation = j
        .smtp
        .wait_for_containing(GRACE, "/console/invitations/accept?token=")
        .await;
    let b2 = driver.session().await;
    b2.goto(&sign_in_link(&invitation)).await;
    sign_in_by_emailed_link(&j, &b2, GRACE).await;
    b2.find("#accept-terms").await.submit().await;
    // The invitation page names the organization, the inviter and the role.
    let offer = b2.find("#invitation-offer").await.text().await;
    assert!(
        offer.contains("ada@example.test invited you to join Acme Robotics")
            && offer.contains("as an admin"),
        "{offer}"
    );
    b2.screenshot(&shots, "16-invitation-named").await;
    b2.find("#accept-invitation").await.submit().await;

    // The admin is offered nothing on the owner: no role change, no removal, no transfer.
    b2.goto(&format!("{org}/members")).await;
    let rows = b2.execute(MEMBERS).await;
    let owner = member(&rows, ADA);
    assert_eq!(owner["role"], "owner", "{rows}");
    assert_eq!(
        (&owner["change"], &owner["remove"], &owner["transfer"]),
        (&0.into(), &0.into(), &0.into()),
        "{rows}"
    );
    assert_eq!(b2.count("#invite-email").await, 1, "Grace is an admin here");
    b2.screenshot(&shots, "17-admin-sees-owner").await;
    b2.quit().await;
    // The owner is offered those actions on Grace (so their absence above is the fix).
    b.goto(&format!("{org}/members")).await;
    let rows = b.execute(MEMBERS).await;
    let admin = member(&rows, GRACE);
    assert_eq!(
        (&admin["change"], &admin["remove"], &admin["transfer"]),
        (&1.into(), &1.into(), &1.into()),
        "{rows}"
    );
    b.quit().await;
}
