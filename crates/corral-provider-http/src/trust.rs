//! Trust in the addresses a provider's answers name: the data-plane URLs an adapter learns from
//! the provider (E2B's envd `domain`, Daytona's `toolboxProxyUrl`, Together's `agent.url`).
//!
//! A provider answer is data, not configuration. If it could name any address, whoever controls
//! or spoofs that answer could make Corral send a credential (the account's key, or a sandbox's
//! own token) to a host of their choosing, or reach the operator's own network. So every such
//! URL passes [`TrustedHosts::check`] before use ([`TrustedUrl`] is the proof), and is
//! requested only through the client [`crate::ProviderHttp::with_trusted_hosts`] builds, whose
//! DNS resolver is the guarded one defined here:
//!
//! - a **host suffix** entry (`e2b.app`) trusts that host and its subdomains, over **https**
//!   only, at **public** addresses only. The name is resolved once, by the client's resolver,
//!   every address it answers is checked, and the connection goes to exactly those addresses:
//!   there is no second lookup, so a DNS answer cannot change between the check and the
//!   connection;
//! - an **origin** entry (`http://127.0.0.1:4567`) trusts exactly that scheme, host and port, at
//!   whatever address it has: for fakes and self-hosted deployments. Entries come only from the
//!   operator's configuration of the adapter (its `trusted_hosts`), never from a provider.
//!
//! Each adapter's default entries are its provider's production domains.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use corral_domain::Provider;
use corral_provider::net::{is_public, kind};
use corral_provider::{ProviderError, Result};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use snafu::Snafu;
use url::{Host, Url};

/// One `trusted_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// This host and its subdomains, https only, public addresses only.
    Suffix(String),
    /// Exactly this scheme, host and port, at any address.
    Origin {
        scheme: String,
        host: String,
        port: u16,
    },
}

/// What the resolver accepts for a host name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddressRule {
    /// The operator named the host in an origin entry: any address.
    Any,
    /// The host is under a trusted suffix: public addresses only.
    PublicOnly,
}

/// The hosts a provider may name for its data plane (see the module docs).
#[derive(Debug, Clone)]
pub struct TrustedHosts {
    provider: Provider,
    entries: Arc<[Entry]>,
}

/// A URL that passed [`TrustedHosts::check`]. Joining a path or adding a query keeps its
/// origin, so what is derived from it stays trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedUrl(Url);

impl TrustedUrl {
    /// The URL.
    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// This URL + `path` (see [`crate::join`]); same origin.
    pub fn join(&self, path: &str) -> TrustedUrl {
        TrustedUrl(crate::join(&self.0, path))
    }

    /// This URL with `pairs` appended to its query (see [`crate::with_query`]); same origin.
    pub fn with_query(&self, pairs: &[(&str, &str)]) -> TrustedUrl {
        TrustedUrl(crate::with_query(self.0.clone(), pairs))
    }
}

/// Why the guarded resolver refused a name; found again in the connect error's causes by
/// [`crate::map_send_error`], which makes it a `Protocol` error (not "unavailable").
#[derive(Debug, Snafu)]
pub(crate) enum GuardError {
    /// The name is not among the trusted hosts (a URL that skipped the check).
    #[snafu(display("`{host}` is not a trusted host"))]
    Untrusted { host: String },
    /// The name resolved to an address that is not public.
    #[snafu(display("`{host}` resolves to a non-public address ({kind})"))]
    NonPublic { host: String, kind: &'static str },
    /// The name did not resolve.
    #[snafu(display("`{host}` does not resolve"))]
    NoAddress { host: String },
}

impl TrustedHosts {
    /// Parses `entries` as written in an adapter's `trusted_hosts`: a host suffix
    /// (`e2b.app`: that host and its subdomains, https, public addresses) or an origin
    /// (`http://127.0.0.1:4567`: exactly that scheme, host and port). A malformed entry is an
    /// `InvalidRequest`, so a bad configuration fails at start-up.
    pub fn parse(provider: Provider, entries: &[String]) -> Result<Self> {
        let invalid = |entry: &str, why: &str| ProviderError::InvalidRequest {
            provider,
            message: format!("trusted_hosts entry `{entry}` is invalid: {why}"),
        };
        let mut parsed = Vec::with_capacity(entries.len());
        for raw in entries {
            let entry = raw.trim();
            if entry.contains("://") {
                let url = Url::parse(entry).map_err(|_| invalid(entry, "not a URL"))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(invalid(entry, "an origin must be http or https"));
                }
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(invalid(entry, "an origin carries no userinfo"));
                }
                if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
                    return Err(invalid(entry, "an origin has no path, query or fragment"));
                }
                let (Some(host), Some(port)) = (host_text(&url), url.port_or_known_default())
                else {
                    return Err(invalid(entry, "an origin needs a host"));
                };
                parsed.push(Entry::Origin {
                    scheme: url.scheme().to_owned(),
                    host,
                    port,
                });
            } else {
                let suffix = entry.trim_matches('.').to_ascii_lowercase();
                if !is_host_name(&suffix) {
                    return Err(invalid(
                        entry,
                        "a host suffix is a DNS name (an address or a port belongs in an origin \
                         entry such as `http://127.0.0.1:8080`)",
                    ));
                }
                parsed.push(Entry::Suffix(suffix));
            }
        }
        Ok(Self {
            provider,
            entries: parsed.into(),
        })
    }

    /// Whether `url` may be used, for `what` (the field that named it, e.g.
    /// `toolboxProxyUrl`). A refusal is a `Protocol` error (the provider answered something
    /// Corral will not trust) and a warning naming the host, never the rest of the URL.
    pub fn check(&self, what: &str, url: Url) -> Result<TrustedUrl> {
        let host = host_text(&url);
        let refuse = |why: &str| {
            let shown = host.as_deref().unwrap_or("(none)");
            tracing::warn!(
                provider = %self.provider,
                host = shown,
                field = what,
                reason = why,
                "refused a URL named by the provider"
            );
            ProviderError::Protocol {
                provider: self.provider,
                message: format!(
                    "the provider's {what} names host `{shown}`, which Corral does not trust: \
                     {why}"
                ),
            }
        };
        let scheme = url.scheme();
        if !matches!(scheme, "http" | "https") {
            return Err(refuse("only http(s) URLs are used"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refuse("the URL carries userinfo"));
        }
        let (Some(host_name), Some(port)) = (host.as_deref(), url.port_or_known_default()) else {
            return Err(refuse("the URL has no host"));
        };
        let is_domain = matches!(url.host(), Some(Host::Domain(_)));
        let mut suffix_match = false;
        for entry in self.entries.iter() {
            match entry {
                Entry::Origin {
                    scheme: s,
                    host: h,
                    port: p,
                } if s == scheme && h == host_name && *p == port => {
                    return Ok(TrustedUrl(url));
                }
                Entry::Suffix(s) if is_domain && under(host_name, s) => suffix_match = true,
                _ => {}
            }
        }
        if suffix_match && scheme == "https" {
            return Ok(TrustedUrl(url));
        }
        Err(refuse(if suffix_match {
            "only https is used for the provider's hosts"
        } else {
            "it is not among the adapter's trusted_hosts (an operator can add it there)"
        }))
    }

    /// What the resolver accepts for `host` (`None`: refuse to resolve it).
    fn address_rule(&self, host: &str) -> Option<AddressRule> {
        let mut rule = None;
        for entry in self.entries.iter() {
            match entry {
                Entry::Origin { host: h, .. } if h == host => return Some(AddressRule::Any),
                Entry::Suffix(s) if under(host, s) => rule = Some(AddressRule::PublicOnly),
                _ => {}
            }
        }
        rule
    }

    /// The guarded resolver for a client that requests [`TrustedUrl`]s.
    pub(crate) fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver {
            trusted: self.clone(),
        })
    }
}

/// Resolves only trusted names, each once, refusing non-public answers for suffix-trusted
/// ones; the client connects to exactly what it returns.
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    trusted: TrustedHosts,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let rule = self.trusted.address_rule(&host);
        let provider = self.trusted.provider;
        Box::pin(async move {
            let Some(rule) = rule else {
                return Err(Box::new(GuardError::Untrusted { host }) as _);
            };
            // Port 0: the connector sets the URL's port on every address.
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|_| Box::new(GuardError::NoAddress { host: host.clone() }))?
                .collect();
            if addrs.is_empty() {
                return Err(Box::new(GuardError::NoAddress { host }) as _);
            }
            if rule == AddressRule::PublicOnly
                && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip()))
            {
                let kind = kind(bad.ip());
                tracing::warn!(
                    provider = %provider,
                    host = host.as_str(),
                    kind,
                    "refused to connect: a trusted provider host resolved to a non-public address"
                );
                return Err(Box::new(GuardError::NonPublic { host, kind }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Whether `host` is `suffix` or a subdomain of it.
fn under(host: &str, suffix: &str) -> bool {
    host == suffix
        || host
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// The URL's host as entries are compared: a lowercase name without a trailing dot, an IPv4
/// address, or a bracketed IPv6 address.
fn host_text(url: &Url) -> Option<String> {
    Some(match url.host()? {
        Host::Domain(d) => d.trim_end_matches('.').to_ascii_lowercase(),
        Host::Ipv4(a) => a.to_string(),
        Host::Ipv6(a) => format!("[{a}]"),
    })
}

/// Whether `s` is a plain DNS host name: dot-separated labels of ASCII letters, digits and
/// inner hyphens (1–63 characters each, 253 in all), not an IP address. No scheme, port,
/// path, userinfo or address literal can pass.
pub fn is_host_name(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(label_ok)
        && s.parse::<IpAddr>().is_err()
        // A last label of digits only reads as an IPv4 address to URL parsers (`1.2.3.4`,
        // `0x7f.1`, `2130706433`).
        && !s
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x"))
}

/// The guard's refusal among `e`'s causes, if the connection failed because of it.
pub(crate) fn guard_refusal<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a GuardError> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(refusal) = c.downcast_ref::<GuardError>() {
            return Some(refusal);
        }
        cur = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(entries: &[&str]) -> TrustedHosts {
        let entries: Vec<String> = entries.iter().map(|s| (*s).to_owned()).collect();
        TrustedHosts::parse(Provider::E2b, &entries).unwrap()
    }

    fn ok(t: &TrustedHosts, url: &str) -> bool {
        t.check("test URL", Url::parse(url).unwrap()).is_ok()
    }

    #[test]
    fn a_suffix_trusts_its_host_and_subdomains_over_https_only() {
        let t = hosts(&["e2b.app"]);
        assert!(ok(&t, "https://e2b.app/"));
        assert!(ok(&t, "https://49983-abc.e2b.app/x"));
        assert!(ok(&t, "https://49983-abc.E2B.app./x"));
        assert!(!ok(&t, "http://49983-abc.e2b.app/"), "plain http");
        assert!(!ok(&t, "https://evil-e2b.app/"), "not a subdomain");
        assert!(!ok(&t, "https://e2b.app.evil.com/"), "suffix in the middle");
        assert!(!ok(&t, "https://user:pw@x.e2b.app/"), "userinfo");
        assert!(!ok(&t, "https://127.0.0.1/"), "address literal");
        assert!(!ok(&t, "https://[::1]/"), "address literal");
        assert!(!ok(&t, "https://localhost/"));
        assert!(!ok(&t, "ftp://x.e2b.app/"));
    }

    #[test]
    fn an_origin_trusts_exactly_its_scheme_host_and_port() {
        let t = hosts(&["http://127.0.0.1:4567"]);
        assert!(ok(&t, "http://127.0.0.1:4567/agent/x"));
        assert!(!ok(&t, "http://127.0.0.1:4568/"));
        assert!(!ok(&t, "https://127.0.0.1:4567/"));
        assert!(!ok(&t, "http://localhost:4567/"));
        let t = hosts(&["https://toolbox.internal.example"]);
        assert!(ok(&t, "https://toolbox.internal.example:443/t"));
        assert!(!ok(&t, "https://a.toolbox.internal.example/"));
    }

    #[test]
    fn malformed_entries_are_refused_at_start_up() {
        for bad in [
            "",
            "127.0.0.1",
            "::1",
            "e2b.app:443",
            "*.e2b.app",
            "e2b.app/x",
            "ftp://e2b.app",
            "http://u@e2b.app",
            "http://e2b.app/path",
            "10.0.0.1",
            "1.2",
        ] {
            assert!(
                TrustedHosts::parse(Provider::E2b, &[bad.to_owned()]).is_err(),
                "{bad}"
            );
        }
        assert!(TrustedHosts::parse(Provider::E2b, &[".e2b.app".to_owned()]).is_ok());
    }

    #[test]
    fn a_refusal_is_a_protocol_error_naming_the_host_only() {
        let t = hosts(&["e2b.app"]);
        let url = Url::parse("http://rogue.example:99/p?token=abc").unwrap();
        let err = t.check("agent.url", url).unwrap_err();
        let shown = err.to_string();
        assert!(matches!(err, ProviderError::Protocol { .. }), "{err:?}");
        assert!(shown.contains("rogue.example"), "{shown}");
        assert!(!shown.contains("token=abc"), "{shown}");
    }

    /// A writer for a test subscriber, keeping what it is given.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_refusal_is_logged_naming_the_host_and_nothing_of_the_url_beyond_it() {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let t = hosts(&["daytona.io"]);
        let url = Url::parse("http://tok-4242secret@rogue.example:9/p?key=sk-CANARY").unwrap();
        tracing::subscriber::with_default(subscriber, || {
            assert!(t.check("toolboxProxyUrl", url).is_err());
        });
        let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains("WARN"), "{logged}");
        assert!(logged.contains("rogue.example"), "{logged}");
        assert!(logged.contains("toolboxProxyUrl"), "{logged}");
        for secret in ["4242secret", "sk-CANARY", "/p"] {
            assert!(!logged.contains(secret), "{logged}");
        }
    }

    #[test]
    fn host_names_exclude_addresses_ports_and_paths() {
        for good in ["e2b.app", "eu.e2b.app", "a-b.example", "x1.example"] {
            assert!(is_host_name(good), "{good}");
        }
        for bad in [
            "",
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "[::1]",
            "e2b.app:443",
            "http://e2b.app",
            "e2b.app/x",
            "u@e2b.app",
            "-a.example",
            "a..example",
            "a example",
        ] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }

    #[test]
    fn non_public_ranges_are_not_public() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }
}
