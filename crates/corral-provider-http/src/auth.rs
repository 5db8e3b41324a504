//! How a provider wants its credential presented, chosen once per adapter.

use corral_provider::{ExposeSecret as _, SecretString};
use reqwest::{Client, Method, RequestBuilder};
use url::Url;

/// Where a credential goes on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <credential>` (Daytona, Vercel, Runloop, Together, Morph, …).
    Bearer,
    /// A named header carrying the bare credential (E2B's `X-API-Key`, envd's
    /// `X-Access-Token`).
    Header(&'static str),
    /// A query parameter carrying the credential, for APIs that take it nowhere else.
    Query(&'static str),
}

impl Auth {
    /// A `method` request to `url` on `client` with `secret` presented this way.
    pub fn request(
        self,
        client: &Client,
        method: Method,
        mut url: Url,
        secret: &SecretString,
    ) -> RequestBuilder {
        match self {
            Auth::Bearer => client
                .request(method, url)
                .bearer_auth(secret.expose_secret()),
            Auth::Header(name) => {
                let req = client.request(method, url);
                match reqwest::header::HeaderValue::from_str(secret.expose_secret()) {
                    // Sensitive: kept out of `Debug` output and in the redaction set of the
                    // request's error messages (as `bearer_auth` marks its value).
                    Ok(mut value) => {
                        value.set_sensitive(true);
                        req.header(name, value)
                    }
                    // Not a valid header value: the builder reports it when the request is
                    // sent, without echoing the value.
                    Err(_) => req.header(name, secret.expose_secret()),
                }
            }
            Auth::Query(name) => {
                url.query_pairs_mut()
                    .append_pair(name, secret.expose_secret());
                client.request(method, url)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_puts_the_credential_in_its_place() {
        let client = Client::new();
        let url = Url::parse("http://127.0.0.1:9/x?a=1").unwrap();
        let secret = SecretString::from("s3cret");
        let build = |auth: Auth| {
            auth.request(&client, Method::GET, url.clone(), &secret)
                .build()
                .unwrap()
        };
        let bearer = build(Auth::Bearer);
        assert_eq!(bearer.headers()["authorization"], "Bearer s3cret");
        let header = build(Auth::Header("X-API-Key"));
        assert_eq!(header.headers()["x-api-key"], "s3cret");
        assert!(header.headers()["x-api-key"].is_sensitive());
        assert!(header.headers().get("authorization").is_none());
        let query = build(Auth::Query("token"));
        assert_eq!(query.url().query(), Some("a=1&token=s3cret"));
        assert!(query.headers().is_empty());
    }
}
