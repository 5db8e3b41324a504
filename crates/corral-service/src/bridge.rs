//! The `X-Provider-Bridge-Url` guard (DESIGN.md §5): a caller-supplied URL is a server-side
//! request forgery vector, so it is parsed strictly, resolved, and refused when any address it
//! resolves to is loopback, private, link-local (cloud metadata), unique-local, multicast or
//! unspecified — unless the operator allow-listed its host. A stored credential is never sent
//! to a caller-supplied URL.
//!
//! The check resolves the host once and returns the addresses it vetted
//! ([`VettedBridgeUrl::pinned`]). A client must connect to those addresses and no others
//! (with reqwest: `ClientBuilder::resolve_to_addrs(host, pinned)`), and must not follow
//! redirects: resolving the name again at connect time would let a DNS server answer a
//! public address to the check and `127.0.0.1` to the connection (DNS rebinding), and a
//! redirect is a new, unchecked URL.

use std::net::{IpAddr, SocketAddr};

use corral_domain::CredentialSource;
use corral_provider::net::{is_public, kind};
use url::{Host, Url};

use crate::error::ServiceError;

/// Checks bridge URLs against the operator's allow-list and the address rules.
#[derive(Debug, Clone)]
pub struct BridgeGuard {
    /// Lowercase `host` or `host:port` entries that skip the address rules.
    allow: Vec<String>,
    /// What refusals call the URL (`X-Provider-Bridge-Url`, `the webhook url`).
    what: &'static str,
}

/// A bridge URL that passed [`BridgeGuard::check`], with the addresses that were vetted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VettedBridgeUrl {
    /// The parsed URL.
    pub url: Url,
    /// The socket addresses the check resolved (and found public, unless the host is
    /// allow-listed): connect to these only. Never empty.
    pub pinned: Vec<SocketAddr>,
}

/// Host names that name this machine or a cloud metadata service whatever DNS says
/// (RFC 6761 `localhost`; GCP, Azure and Alibaba metadata names), refused before any lookup.
fn reserved_name(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host == "localhost"
        || host.ends_with(".localhost")
        || host == "metadata"
        || host == "metadata.google.internal"
        || host == "metadata.azure.internal"
        || host.ends_with(".metadata.google.internal")
}

fn refused(url_hint: &str, why: &str) -> ServiceError {
    ServiceError::InvalidRequest {
        message: format!("{url_hint} is refused: {why}"),
    }
}

impl Default for BridgeGuard {
    fn default() -> Self {
        Self::new(&[])
    }
}

impl BridgeGuard {
    /// A guard with `allow` (entries `host` or `host:port`, case-insensitive).
    pub fn new(allow: &[String]) -> Self {
        Self::named(allow, "X-Provider-Bridge-Url")
    }

    /// A guard with `allow` whose refusals call the URL `what` (the same rules guard every
    /// URL a caller chooses for the server to reach: bridges, webhook endpoints).
    pub fn named(allow: &[String], what: &'static str) -> Self {
        Self {
            allow: allow
                .iter()
                .map(|a| a.trim().to_ascii_lowercase())
                .collect(),
            what,
        }
    }

    fn allowed(&self, host: &str, port: u16) -> bool {
        let with_port = format!("{host}:{port}");
        self.allow.iter().any(|a| *a == host || *a == with_port)
    }

    /// Parses, resolves and checks `raw`; the URL and the addresses to connect to when every
    /// rule passes.
    ///
    /// Rules: `http` or `https` only, no userinfo, a host that resolves; then either the host
    /// (or `host:port`) is allow-listed, or it is not a reserved name (`localhost`, metadata
    /// services) and every address it resolves to is public. The host is resolved once, here,
    /// allow-listed or not. The same as [`BridgeGuard::parse`], a lookup of a host name, then
    /// [`BridgeGuard::vet`].
    pub async fn check(&self, raw: &str) -> Result<VettedBridgeUrl, ServiceError> {
        let target = self.parse(raw)?;
        let addrs: Vec<IpAddr> = match (target.literal, target.url.host_str()) {
            (Some(ip), _) => vec![ip],
            (None, Some(name)) => tokio::net::lookup_host((name, target.port))
                .await
                .map_err(|_| refused(&target.shown, "its host does not resolve"))?
                .map(|sa| sa.ip())
                .collect(),
            (None, None) => return Err(refused(&target.shown, "it has no host")),
        };
        self.vet(target, addrs)
    }

    /// The rules that need no lookup: a valid `http` or `https` URL without userinfo, with a
    /// host and a port, whose host is not a reserved name unless allow-listed.
    pub fn parse(&self, raw: &str) -> Result<BridgeTarget, ServiceError> {
        let url =
            Url::parse(raw.trim()).map_err(|_| refused(self.what, "it is not a valid URL"))?;
        let shown = format!("{} `{}`", self.what, url.origin().ascii_serialization());
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused(&shown, "only http and https are accepted"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refused(&shown, "it must not carry userinfo"));
        }
        let port = url
            .port_or_known_default()
            .ok_or_else(|| refused(&shown, "it has no port"))?;
        let host = url
            .host()
            .ok_or_else(|| refused(&shown, "it has no host"))?;
        let (host_text, literal) = match &host {
            Host::Domain(d) => (d.to_ascii_lowercase(), None),
            Host::Ipv4(a) => (a.to_string(), Some(IpAddr::V4(*a))),
            Host::Ipv6(a) => (format!("[{a}]"), Some(IpAddr::V6(*a))),
        };
        let allowed = self.allowed(&host_text, port);
        if !allowed && literal.is_none() && reserved_name(&host_text) {
            return Err(refused(
                &shown,
                "its host names this machine or a metadata service; an operator can allow-list it",
            ));
        }
        Ok(BridgeTarget {
            url,
            port,
            literal,
            allowed,
            shown,
        })
    }

    /// The address rules over what `target`'s host resolved to: at least one address, and
    /// every one public unless the host is allow-listed; the addresses become the pins.
    pub fn vet(
        &self,
        target: BridgeTarget,
        addrs: Vec<IpAddr>,
    ) -> Result<VettedBridgeUrl, ServiceError> {
        if addrs.is_empty() {
            return Err(refused(&target.shown, "its host does not resolve"));
        }
        // An allow-listed host skips the address rules, not the pinning: the client still
        // connects only to what was resolved here.
        if !target.allowed
            && let Some(bad) = addrs.iter().find(|ip| !is_public(**ip))
        {
            return Err(refused(
                &target.shown,
                &format!(
                    "it resolves to a non-public address ({}); an operator can allow-list it",
                    kind(*bad)
                ),
            ));
        }
        let pinned = addrs
            .into_iter()
            .map(|ip| SocketAddr::new(ip, target.port))
            .collect();
        Ok(VettedBridgeUrl {
            url: target.url,
            pinned,
        })
    }
}

/// A bridge URL that passed the rules needing no lookup ([`BridgeGuard::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeTarget {
    /// The parsed URL.
    pub url: Url,
    /// Its port, explicit or the scheme's default.
    pub port: u16,
    /// The address, when the host is an IP literal (no lookup); `None` for a name.
    pub literal: Option<IpAddr>,
    /// Whether the operator allow-listed the host or `host:port`.
    pub allowed: bool,
    /// The origin as refusal messages show it.
    shown: String,
}

/// Refuses to send a stored (profile) credential to a bridge URL the caller supplied inline
/// unless it is the profile's own bridge URL.
pub fn check_bridge_credential(
    source: CredentialSource,
    profile_bridge_url: Option<&str>,
    inline_bridge_url: Option<&str>,
) -> Result<(), ServiceError> {
    match (source, inline_bridge_url) {
        (CredentialSource::Profile, Some(inline)) if Some(inline) != profile_bridge_url => {
            Err(ServiceError::InvalidRequest {
                message: "X-Provider-Bridge-Url differs from the profile's bridge URL: a stored credential is never sent to a caller-supplied URL; send X-Provider-Credential with it".into(),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn localhost_subdomains_and_metadata_names_are_refused_before_any_lookup() {
        let guard = BridgeGuard::new(&[]);
        for url in [
            "http://foo.localhost:8080/",
            "http://LOCALHOST./",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://metadata/",
        ] {
            let e = guard.check(url).await.expect_err(url);
            assert!(
                e.to_string().contains("this machine or a metadata service"),
                "{url}: {e}"
            );
        }
    }

    #[tokio::test]
    async fn the_check_returns_the_addresses_it_vetted_for_the_client_to_pin() {
        let guard = BridgeGuard::new(&[]);
        let vetted = guard.check("https://1.1.1.1:8443/bridge").await.unwrap();
        assert_eq!(vetted.url.as_str(), "https://1.1.1.1:8443/bridge");
        assert_eq!(vetted.pinned, vec!["1.1.1.1:8443".parse().unwrap()]);
        let vetted = guard.check("http://[2606:4700:4700::1111]/").await.unwrap();
        assert_eq!(
            vetted.pinned,
            vec!["[2606:4700:4700::1111]:80".parse().unwrap()]
        );
        // An allow-listed host skips the address rules but is still pinned.
        let allowed = BridgeGuard::new(&["127.0.0.1:9000".to_owned(), "localhost".to_owned()]);
        let vetted = allowed.check("http://127.0.0.1:9000/").await.unwrap();
        assert_eq!(vetted.pinned, vec!["127.0.0.1:9000".parse().unwrap()]);
        let vetted = allowed.check("http://localhost:9001/").await.unwrap();
        assert!(!vetted.pinned.is_empty());
        assert!(
            vetted
                .pinned
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 9001)
        );
    }

    /// Refuses `url` with `invalid_request` and a message naming the header and `why`.
    async fn assert_refused(guard: &BridgeGuard, url: &str, why: &str) {
        let e = guard.check(url).await.expect_err(url);
        assert_eq!(e.code().as_str(), "invalid_request", "{url}");
        let message = e.to_string();
        assert!(
            message.contains("X-Provider-Bridge-Url") && message.contains(why),
            "{url}: {message}"
        );
    }

    #[tokio::test]
    async fn every_spelling_of_a_loopback_or_metadata_ipv4_address_is_refused() {
        let guard = BridgeGuard::new(&[]);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",          // decimal
            "http://0x7f000001/",          // hex, one part
            "http://0x7f.0x0.0x0.0x1/",    // hex, dotted
            "http://0x7f.1/",              // hex, two parts
            "http://0177.0.0.1/",          // octal
            "http://017700000001/",        // octal, one part
            "http://127.1/",               // short form
            "http://127.0.0.1./",          // trailing dot
            "http://0/",                   // 0.0.0.0
            "http://2852039166/",          // 169.254.169.254 in decimal
            "http://0xa9fea9fe/",          // 169.254.169.254 in hex
            "http://0251.0376.0251.0376/", // 169.254.169.254 in octal
            "http://012.1/",               // 10.0.0.1 in octal and short
        ] {
            assert_refused(&guard, url, "non-public address").await;
        }
    }

    #[tokio::test]
    async fn ipv6_spellings_of_private_ipv4_addresses_are_refused() {
        let guard = BridgeGuard::new(&[]);
        for url in [
            "http://[::1]/",
            "http://[0:0:0:0:0:0:0:1]/",
            "http://[::ffff:127.0.0.1]/", // IPv4-mapped
            "http://[::ffff:7f00:1]/",    // IPv4-mapped, hex
            "http://[::ffff:169.254.169.254]/",
            "http://[::127.0.0.1]/",       // IPv4-compatible
            "http://[2002:7f00:1::]/",     // 6to4 of 127.0.0.1
            "http://[2002:a9fe:a9fe::1]/", // 6to4 of the metadata address
            "http://[2002:c0a8:101::1]/",  // 6to4 of 192.168.1.1
            "http://[64:ff9b::7f00:1]/",   // NAT64 of 127.0.0.1
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/", // AWS's IPv6 metadata address
        ] {
            assert_refused(&guard, url, "non-public address").await;
        }
    }

    #[tokio::test]
    async fn userinfo_tricks_are_refused_or_resolve_to_the_real_host() {
        let guard = BridgeGuard::new(&[]);
        for url in [
            "http://user@1.1.1.1/",
            "http://user:pass@1.1.1.1/",
            "http://bridge.example.com@127.0.0.1/",
            "http://1.1.1.1:443@127.0.0.1/",
            "http://%31.1.1.1@127.0.0.1/",
        ] {
            assert_refused(&guard, url, "userinfo").await;
        }
        // An empty userinfo is dropped by the parser, and what looks like userinfo after `#`,
        // `?`, `/` or `\\` is not: the host is the loopback address either way.
        for url in [
            "http://:@127.0.0.1/",
            "http://127.0.0.1#@bridge.example.com/",
            "http://127.0.0.1?@bridge.example.com/",
            "http://127.0.0.1/@bridge.example.com",
            "http://127.0.0.1\\@bridge.example.com/",
        ] {
            assert_refused(&guard, url, "non-public address").await;
        }
    }

    #[tokio::test]
    async fn names_that_resolve_to_loopback_are_refused() {
        let guard = BridgeGuard::new(&[]);
        // `localhost` and its spellings are refused before any lookup.
        for url in [
            "http://localhost/",
            "http://LocalHost./",
            "http://a.b.localhost/",
        ] {
            assert_refused(&guard, url, "this machine").await;
        }
        // Any other name the resolver maps to loopback (here: from /etc/hosts) is refused
        // by its address.
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let names: Vec<String> = hosts
            .lines()
            .map(|l| l.split('#').next().unwrap_or_default())
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let ip: IpAddr = words.next()?.parse().ok()?;
                ip.is_loopback()
                    .then(|| words.map(str::to_owned).collect::<Vec<_>>())
            })
            .flatten()
            .filter(|n| !reserved_name(&n.to_ascii_lowercase()))
            .collect();
        if names.is_empty() {
            eprintln!(
                "/etc/hosts names loopback only as localhost: the by-address case is not run"
            );
        }
        for name in names {
            assert_refused(&guard, &format!("http://{name}:8080/"), "loopback").await;
        }
    }

    #[tokio::test]
    async fn other_schemes_and_malformed_urls_are_refused() {
        let guard = BridgeGuard::new(&[]);
        assert_refused(&guard, "file:///etc/passwd", "only http and https").await;
        assert_refused(&guard, "gopher://1.1.1.1/", "only http and https").await;
        assert_refused(&guard, "not a url", "not a valid URL").await;
        assert_refused(&guard, "http://[::1/", "not a valid URL").await;
        assert_refused(&guard, "http://256.0.0.1/", "not a valid URL").await;
    }

    #[test]
    fn profile_credentials_never_go_to_a_caller_supplied_url() {
        let err = check_bridge_credential(
            CredentialSource::Profile,
            Some("https://bridge.example.com"),
            Some("https://evil.example.com"),
        );
        assert!(err.is_err());
        assert!(
            check_bridge_credential(CredentialSource::Inline, None, Some("https://x.example"))
                .is_ok()
        );
        assert!(
            check_bridge_credential(
                CredentialSource::Profile,
                Some("https://bridge.example.com"),
                None
            )
            .is_ok()
        );
    }
}
