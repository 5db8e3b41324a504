//! Address rules shared by every place that connects to a host someone else named: the bridge
//! URL guard (a caller's `X-Provider-Bridge-Url`) and the trusted hosts of provider-named URLs.
//! One copy, so the two can never disagree about what is public.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A short name for the kind of non-public address `ip` is, for refusal messages.
pub fn kind(ip: IpAddr) -> &'static str {
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

/// Whether `ip` is an ordinary public unicast address: what a server-side request to a
/// caller- or provider-named host may reach without the operator's say-so.
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
    // 6to4 (2002::/16) embeds an IPv4 address in bits 16..48.
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return is_public_v4(v4);
    }
    // Only global unicast (2000::/3) is public; everything below it (::/8 with its IPv4-
    // compatible and IPv4-translated `::ffff:0:a.b.c.d` forms, 64:ff9b:1::/48 local NAT64,
    // 100::/64 discard) and above it (unique local fc00::/7, link-local fe80::/10, site-local
    // fec0::/10, multicast ff00::/8) is not.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        && !(s[0] == 0x2001 && s[1] == 0) // Teredo: tunnels to an IPv4 address
        && !(s[0] == 0x2001 && s[1] == 2 && s[2] == 0) // 2001:2::/48 benchmarking
        && !(s[0] == 0x3fff && s[1] < 0x1000) // 3fff::/20 documentation
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
    fn ipv6_forms_that_embed_a_private_ipv4_or_are_not_global_unicast_are_refused() {
        for bad in [
            "::ffff:0:127.0.0.1",                   // IPv4-translated loopback
            "::ffff:0:169.254.169.254",             // IPv4-translated metadata
            "2002:7f00:1::1",                       // 6to4 of 127.0.0.1
            "2002:a9fe:a9fe::1",                    // 6to4 of 169.254.169.254
            "64:ff9b:1::a9fe:a9fe",                 // local-use NAT64 of the metadata address
            "2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo
            "100::1",                               // discard-only
            "3fff::1",                              // documentation
            "ff02::1",
            "fec0::1",
        ] {
            let ip: IpAddr = bad.parse().unwrap();
            assert!(!is_public(ip), "{bad}");
        }
        for good in [
            "2a00:1450:4001:82a::200e",
            "2002:808:808::1",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }
}
