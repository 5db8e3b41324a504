//! The console in a real browser: headless Chromium driven through chromedriver (WebDriver),
//! against the server on a loopback socket. Screenshots of every page land in
//! `target/console-screenshots/` for review.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). Without them the
//! tests fail under `CI=true` and print SKIPPED otherwise: never a silent pass.

mod smtp;
mod webdriver;

use std::path::PathBuf;

use corral::http::AppState;

use crate::support::World;

/// Where screenshots go: `<target>/console-screenshots`.
fn screenshot_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(&tmp).join("console-screenshots")
}

/// Whether the browser tests can run here; panics under CI when they cannot.
fn browser_or_skip(test: &str) -> bool {
    if webdriver::available() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: {} or {} is missing; .ci/run installs Debian's chromium and chromium-driver",
        webdriver::CHROMIUM,
        webdriver::CHROMEDRIVER
    );
    eprintln!("SKIPPED {test}: chromium or chromedriver is not installed");
    false
}

/// Serves `state` on a loopback socket already bound (so its URL could be configured before).
fn serve_on(listener: std::net::TcpListener, state: AppState) {
    let server = actix_web::HttpServer::new(move || corral::http::app(state.clone()))
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
    let resp = reqwest::get(format!("{base}/console/sign-in")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["cache-control"], "no-store");
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let css = reqwest::get(format!("{base}/console/assets/console.css")).await.unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");

    let dir = screenshot_dir();
    let driver = webdriver::Driver::start(&dir.join("chromedriver-static.log")).await;
    let browser = driver.session().await;
    browser.goto(&format!("{base}/console/sign-in")).await;
    assert_eq!(browser.title().await, "Sign in · Corral");
    // The stylesheet applied (CSP let it through): the primary button is the accent colour.
    let button = browser.find("form[action='/console/sign-in/email'] button").await;
    assert_eq!(button.text().await, "Email me a sign-in link");
    assert_eq!(button.css("background-color").await, "rgba(15, 118, 110, 1)");
    browser.screenshot(&dir, "00-sign-in").await;
    browser.resize(390, 844).await;
    browser.screenshot(&dir, "00-sign-in-phone").await;
    // An unknown console page is an HTML 404, not the API's JSON envelope.
    browser.goto(&format!("{base}/console/nope")).await;
    assert!(browser.text().await.contains("Page not found"));
    browser.quit().await;
}
