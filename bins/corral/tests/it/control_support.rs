//! Signing in over HTTP for the control-plane tests: a [`Browser`] holds a session cookie and
//! its CSRF token and builds requests the way a browser on the console's origin would.

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::TestRequest;
use serde_json::{Value, json};

use crate::support::{Resp, World, send};

/// The public URL the test worlds run with (`ControlConfig::default()`).
pub(crate) const ORIGIN: &str = "http://127.0.0.1:8080";

/// A signed-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Browser {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
    pub(crate) user_id: String,
}

/// The `corral_session` value a response set, if any.
pub(crate) fn set_session_cookie(r: &Resp) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("corral_session="))
        .map(str::to_owned)
}

/// The token of a sign-in link (`…/console/sign-in/verify?token=…`).
pub(crate) fn link_token(link: &str) -> String {
    link.split("token=")
        .nth(1)
        .expect("the link carries a token")
        .to_owned()
}

/// Creates (or finds) the user `email` and signs them in through `POST /sign-in/token`.
pub(crate) async fn sign_in<S, B>(app: &S, w: &World, email: &str) -> Browser
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: MessageBody,
{
    let link = w.state.control.invite_user(email).await.unwrap();
    let r = send(
        app,
        TestRequest::post()
            .uri("/v1/control/sign-in/token")
            .insert_header(("Origin", ORIGIN))
            .set_json(json!({"token": link_token(&link)})),
    )
    .await;
    let body = r.expect_ok(200).clone();
    let set = set_session_cookie(&r).expect("sign-in sets the session cookie");
    let cookie = set
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("corral_session=")
        .to_owned();
    Browser {
        cookie,
        csrf: body["csrfToken"].as_str().unwrap().to_owned(),
        user_id: body["userId"].as_str().unwrap().to_owned(),
    }
}

impl Browser {
    fn with_cookie(&self, req: TestRequest) -> TestRequest {
        req.insert_header(("Cookie", format!("corral_session={}", self.cookie)))
    }

    /// A read.
    pub(crate) fn get(&self, path: &str) -> TestRequest {
        self.with_cookie(TestRequest::get().uri(path))
    }

    /// A state-changing request with the CSRF token and the console's origin.
    pub(crate) fn send(&self, method: &str, path: &str, body: Option<Value>) -> TestRequest {
        let req = match method {
            "POST" => TestRequest::post(),
            "PUT" => TestRequest::put(),
            "PATCH" => TestRequest::patch(),
            "DELETE" => TestRequest::delete(),
            other => panic!("not a state-changing method: {other}"),
        };
        let req = self
            .with_cookie(req.uri(path))
            .insert_header(("X-CSRF-Token", self.csrf.clone()))
            .insert_header(("Origin", ORIGIN));
        match body {
            Some(b) => req.set_json(b),
            None => req,
        }
    }

    pub(crate) fn post(&self, path: &str, body: Value) -> TestRequest {
        self.send("POST", path, Some(body))
    }

    pub(crate) fn patch(&self, path: &str, body: Value) -> TestRequest {
        self.send("PATCH", path, Some(body))
    }

    pub(crate) fn put(&self, path: &str, body: Value) -> TestRequest {
        self.send("PUT", path, Some(body))
    }

    pub(crate) fn delete(&self, path: &str) -> TestRequest {
        self.send("DELETE", path, None)
    }
}

/// A mailer that keeps every mail, for reading the links the control plane sends.
#[derive(Debug, Default)]
pub(crate) struct Outbox(std::sync::Mutex<Vec<corral_control::Mail>>);

#[async_trait::async_trait]
impl corral_control::Mailer for Outbox {
    async fn send(&self, mail: &corral_control::Mail) -> Result<(), corral_control::MailError> {
        self.0.lock().unwrap().push(mail.clone());
        Ok(())
    }
}

impl Outbox {
    /// The token of the last link mailed to `to`.
    pub(crate) fn last_token(&self, to: &str) -> String {
        let mails = self.0.lock().unwrap();
        let mail = mails
            .iter()
            .rev()
            .find(|m| m.to == to)
            .unwrap_or_else(|| panic!("no mail to {to}"));
        let token = link_token(&mail.text);
        token
            .split(|c: char| c.is_whitespace())
            .next()
            .unwrap()
            .to_owned()
    }
}

/// Gives the world's control plane an [`Outbox`] as its mailer.
pub(crate) fn with_outbox(w: &mut World) -> std::sync::Arc<Outbox> {
    let outbox = std::sync::Arc::new(Outbox::default());
    w.state.control = w.state.control.clone().with_mailer(outbox.clone());
    outbox
}
