//! The `X-Provider-Bridge-Url` guard (DESIGN.md §5): a caller-supplied URL is a server-side
//! request forgery vector, so it is parsed strictly, resolved, and refused when any address it
//! resolves to is loopback, private, link-local (cloud metadata), unique-local, multicast or
//! unspecified — unless the operator allow-listed its host. A stored credential is never sent
//! to a caller-supplied URL.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use corral_domain::CredentialSource;
use url::{Host, Url};

use crate::error::ServiceError;

/// Checks bridge URLs against the operator's allow-list and the address rules.
#[derive(Debug, Clone, Default)]
pub struct BridgeGuard {
    /// Lowercase `host` or `host:port` entries that skip the address rules.
    allow: Vec<String>,
}

fn refused(url_hint: &str, why: &str) -> ServiceError {
    ServiceError::InvalidRequest {
        message: format!("X-Provider-Bridge-Url {url_hint} is refused: {why}"),
    }
}

impl BridgeGuard {
    /// A guard with `allow` (entries `host` or `host:port`, case-insensitive).
    pub fn new(allow: &[String]) -> Self {
        Self {
            allow: allow
                .iter()
                .map(|a| a.trim().to_ascii_lowercase())
                .collect(),
        }
    }

    fn allowed(&self, host: &str, port: u16) -> bool {
        let with_port = format!("{host}:{port}");
        self.allow.iter().any(|a| *a == host || *a == with_port)
    }

    /// Parses, resolves and checks `raw`; the URL to use when every rule passes.
    ///
    /// Rules: `http` or `https` only, no userinfo, a host; then either the host (or
    /// `host:port`) is allow-listed, or every address it resolves to is public.
    pub async fn check(&self, raw: &str) -> Result<Url, ServiceError> {
        let url = Url::parse(raw.trim()).map_err(|_| refused("", "it is not a valid URL"))?;
        let shown = format!("`{}`", url.origin().ascii_serialization());
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
        let host_text = match &host {
            Host::Domain(d) => d.to_ascii_lowercase(),
            Host::Ipv4(a) => a.to_string(),
            Host::Ipv6(a) => format!("[{a}]"),
        };
        if self.allowed(&host_text, port) {
            return Ok(url);
        }
        let addrs: Vec<IpAddr> = match host {
            Host::Ipv4(a) => vec![IpAddr::V4(a)],
            Host::Ipv6(a) => vec![IpAddr::V6(a)],
            Host::Domain(d) => tokio::net::lookup_host((d, port))
                .await
                .map_err(|_| refused(&shown, "its host does not resolve"))?
                .map(|sa| sa.ip())
                .collect(),
        };
        if addrs.is_empty() {
            return Err(refused(&shown, "its host does not resolve"));
        }
        if let Some(bad) = addrs.iter().find(|ip| !is_public(**ip)) {
            return Err(refused(
                &shown,
                &format!(
                    "it resolves to a non-public address ({}); an operator can allow-list it",
                    kind(*bad)
                ),
            ));
        }
        Ok(url)
    }
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

fn kind(ip: IpAddr) -> &'static str {
    if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_multicast() {
        "multicast"
    } else {
        "private or link-local"
    }
}

/// Whether `ip` is an ordinary public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => is_public_v4(a),
        IpAddr::V6(a) => is_public_v6(a),
    }
}

fn is_public_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    !(a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, carrier-grade NAT
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24, IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15, benchmarking
        || o[0] >= 240)
}

fn is_public_v6(a: Ipv6Addr) -> bool {
    if let Some(v4) = a.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = a.segments();
    // NAT64 (64:ff9b::/96) embeds an IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return is_public_v4(v4);
    }
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7 (incl. fd00:ec2::254 metadata)
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[0..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated) and friends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_ranges_are_refused() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
        ] {
            let ip: IpAddr = bad.parse().unwrap();
            assert!(!is_public(ip), "{bad}");
        }
        for good in ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
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
