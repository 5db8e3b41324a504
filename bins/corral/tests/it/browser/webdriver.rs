//! A minimal W3C WebDriver client over reqwest (WebDriver is HTTP + JSON): start chromedriver,
//! open a headless Chromium session, navigate, find, type, click, read, screenshot.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The W3C key under which an element reference travels.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The browser: `$CORRAL_CHROMIUM`, else where Debian's package puts it.
pub(crate) fn chromium() -> String {
    std::env::var("CORRAL_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

/// Its driver: `$CORRAL_CHROMEDRIVER`, else where Debian's package puts it.
pub(crate) fn chromedriver() -> String {
    std::env::var("CORRAL_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".to_owned())
}

/// Whether both are installed.
pub(crate) fn available() -> bool {
    Path::new(&chromium()).exists() && Path::new(&chromedriver()).exists()
}

/// A running chromedriver; killed on drop.
pub(crate) struct Driver {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts chromedriver on a free loopback port and waits until it is ready.
    pub(crate) async fn start(log: &Path) -> Self {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            // Loopback only: never through a proxy from the environment.
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = driver
                .http
                .get(format!("{}/status", driver.base))
                .send()
                .await
            {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                if v["value"]["ready"] == true {
                    return driver;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A new headless Chromium session with a laptop-sized window.
    pub(crate) async fn session(&self) -> Session {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1366,900", "--hide-scrollbars", "--force-device-scale-factor=1"]
            }
        }}});
        let v = call(
            &self.http,
            reqwest::Method::POST,
            &format!("{}/session", self.base),
            Some(caps),
        )
        .await;
        let id = v["sessionId"].as_str().expect("a session id").to_owned();
        Session {
            http: self.http.clone(),
            base: format!("{}/session/{id}", self.base),
        }
    }
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method.clone(), url);
    if let Some(b) = body {
        req = req.json(&b);
    } else if method == reqwest::Method::POST {
        req = req.json(&json!({}));
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("webdriver {url}: {e}"));
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(
        status.is_success(),
        "webdriver {method} {url}: {status} {v}"
    );
    v["value"].clone()
}

/// One browser session; ended on drop is not possible (async), so call [`Session::quit`].
pub(crate) struct Session {
    http: reqwest::Client,
    base: String,
}

/// An element found on the page.
pub(crate) struct Element<'a> {
    session: &'a Session,
    id: String,
}

impl Session {
    async fn post(&self, path: &str, body: Value) -> Value {
        call(
            &self.http,
            reqwest::Method::POST,
            &format!("{}{path}", self.base),
            Some(body),
        )
        .await
    }

    async fn get(&self, path: &str) -> Value {
        call(
            &self.http,
            reqwest::Method::GET,
            &format!("{}{path}", self.base),
            None,
        )
        .await
    }

    /// Navigates to `url` and waits for the load.
    pub(crate) async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Reloads the page as the browser's reload button does (a page that answered a form post
    /// is posted again), and waits for the load.
    pub(crate) async fn refresh(&self) {
        self.post("/refresh", json!({})).await;
    }

    /// The current URL.
    pub(crate) async fn url(&self) -> String {
        self.get("/url")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page source.
    pub(crate) async fn source(&self) -> String {
        self.get("/source")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page title.
    pub(crate) async fn title(&self) -> String {
        self.get("/title")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The first element matching a CSS selector, waiting up to 10 s for it to appear.
    pub(crate) async fn find(&self, css: &str) -> Element<'_> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let resp = self
                .http
                .post(format!("{}/element", self.base))
                .json(&json!({"using": "css selector", "value": css}))
                .send()
                .await
                .unwrap();
            let ok = resp.status().is_success();
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            if ok {
                let id = v["value"][ELEMENT].as_str().unwrap().to_owned();
                return Element { session: self, id };
            }
            assert!(
                Instant::now() < deadline,
                "no element `{css}` on {}: {v}\n{}",
                self.url().await,
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many elements match a CSS selector now.
    pub(crate) async fn count(&self, css: &str) -> usize {
        let v = self
            .post("/elements", json!({"using": "css selector", "value": css}))
            .await;
        v.as_array().map_or(0, Vec::len)
    }

    /// The visible text of the whole page.
    pub(crate) async fn text(&self) -> String {
        self.find("body").await.text().await
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub(crate) async fn execute(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// Runs `script` asynchronously: it ends by calling `arguments[arguments.length - 1]`
    /// with the value (waits up to `timeout`).
    pub(crate) async fn execute_async(&self, script: &str, timeout: Duration) -> Value {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.post("/timeouts", json!({"script": ms})).await;
        self.post("/execute/async", json!({"script": script, "args": []}))
            .await
    }

    /// Resizes the window (e.g. to a phone's width).
    pub(crate) async fn resize(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height}))
            .await;
    }

    /// The browser's cookies as WebDriver reports them (name, httpOnly, sameSite …).
    pub(crate) async fn cookies(&self) -> Vec<Value> {
        self.get("/cookie")
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Saves a PNG of the viewport to `dir/<name>.png` and returns its path.
    pub(crate) async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let b64 = self.get("/screenshot").await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Ends the session (closes the browser).
    pub(crate) async fn quit(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}

impl Element<'_> {
    /// Types `text` into the element.
    pub(crate) async fn type_text(&self, text: &str) -> &Self {
        self.session
            .post(&format!("/element/{}/clear", self.id), json!({}))
            .await;
        self.session
            .post(
                &format!("/element/{}/value", self.id),
                json!({"text": text}),
            )
            .await;
        self
    }

    /// Clicks the element (a submit button submits and the browser loads the answer).
    pub(crate) async fn click(&self) {
        self.session
            .post(&format!("/element/{}/click", self.id), json!({}))
            .await;
    }

    /// Clicks a submit button and waits (up to 10 s) for the page it was on to be replaced by
    /// the answer: the element goes stale, then the new document finishes loading.
    pub(crate) async fn submit(&self) {
        self.click().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let resp = self
                .session
                .http
                .get(format!("{}/element/{}/name", self.session.base, self.id))
                .send()
                .await
                .unwrap();
            if !resp.status().is_success() {
                break; // stale: the old document is gone
            }
            assert!(Instant::now() < deadline, "the form was not submitted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        loop {
            let state = self
                .session
                .post(
                    "/execute/sync",
                    json!({"script": "return document.readyState", "args": []}),
                )
                .await;
            if state == "complete" {
                return;
            }
            assert!(Instant::now() < deadline, "the answer did not load");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its visible text.
    pub(crate) async fn text(&self) -> String {
        self.session
            .get(&format!("/element/{}/text", self.id))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// A DOM property (`value` of an input: what is typed in it now).
    pub(crate) async fn property(&self, name: &str) -> Value {
        self.session
            .get(&format!("/element/{}/property/{name}", self.id))
            .await
    }

    /// A computed CSS property (`background-color` …).
    pub(crate) async fn css(&self, property: &str) -> String {
        self.session
            .get(&format!("/element/{}/css/{property}", self.id))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}
