//! Property tests of the two parsers the service applies to raw header text: the
//! `Authorization: Bearer` reader and the `X-Provider-Bridge-Url` guard. For the guard, every
//! spelling the URL parser accepts of an arbitrary address (dotted, one-part decimal, hex,
//! octal, short forms, IPv6 with or without an embedded IPv4) gets the verdict of the address
//! itself, and nothing the guard accepts escapes its rules. No lookups: IP literals only.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use corral_provider::net::is_public;
use corral_service::bearer_key;
use corral_service::bridge::BridgeGuard;
use corral_service::error::ServiceError;
use proptest::prelude::*;

/// Spellings of `a` that a WHATWG URL parser reads as the same IPv4 address.
fn ipv4_spellings(a: Ipv4Addr) -> Vec<String> {
    let n = u32::from(a);
    let [b0, b1, b2, b3] = a.octets();
    vec![
        a.to_string(),
        n.to_string(),
        format!("0x{n:x}"),
        format!("0{n:o}"),
        format!("0x{b0:x}.0x{b1:X}.0{b2:o}.{b3}"),
        format!("{b0}.{}", n & 0x00ff_ffff),
        format!("{b0}.{b1}.{}", n & 0xffff),
        format!("{a}."),
        format!("[::ffff:{a}]"),
        format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
    ]
}

fn guard_verdict(guard: &BridgeGuard, url: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    let target = guard.parse(url).map_err(|e| e.to_string())?;
    let ip = target.literal.ok_or("not a literal")?;
    guard
        .vet(target, vec![ip])
        .map(|v| v.pinned)
        .map_err(|e| e.to_string())
}

fn url_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("http://"),
        Just("https://"),
        Just("file://"),
        Just("@"),
        Just(":"),
        Just("/"),
        Just("\\"),
        Just("#"),
        Just("?"),
        Just("["),
        Just("]"),
        Just("."),
        Just("%2e"),
        Just("0x7f"),
        Just("127"),
        Just("1"),
        Just("0"),
        Just("::"),
        Just("ffff"),
        Just("localhost"),
        Just("metadata"),
        Just("user"),
        Just(" "),
        Just("\t"),
        Just("\u{ff0e}"),
    ];
    prop_oneof![
        proptest::collection::vec(token, 0..16).prop_map(|t| t.concat()),
        "\\PC{0,40}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_spelling_of_an_ipv4_address_gets_that_addresses_verdict(
        n in any::<u32>(),
        port in proptest::option::of(1u16..),
        https in any::<bool>(),
    ) {
        let a = Ipv4Addr::from(n);
        let guard = BridgeGuard::new(&[]);
        let scheme = if https { "https" } else { "http" };
        let port_text = port.map(|p| format!(":{p}")).unwrap_or_default();
        let want_port = port.unwrap_or(if https { 443 } else { 80 });
        for host in ipv4_spellings(a) {
            let url = format!("{scheme}://{host}{port_text}/bridge");
            let verdict = guard_verdict(&guard, &url);
            if is_public(IpAddr::V4(a)) {
                let pinned = verdict.map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
                prop_assert_eq!(pinned.len(), 1);
                prop_assert_eq!(pinned[0].port(), want_port);
                // A mapped IPv6 spelling is pinned as written; it names the same host.
                let pinned_v4 = match pinned[0].ip() {
                    IpAddr::V4(v4) => v4,
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().unwrap(),
                };
                prop_assert_eq!(pinned_v4, a, "{}", url);
            } else {
                let message = verdict.expect_err(&url);
                prop_assert!(message.contains("non-public address"), "{}: {}", url, message);
            }
        }
    }

    #[test]
    fn an_ipv6_literal_gets_its_addresses_verdict(n in any::<u128>(), v4 in any::<u32>(), form in 0u8..4) {
        let a = match form {
            0 => Ipv6Addr::from(n),
            1 => Ipv4Addr::from(v4).to_ipv6_mapped(),
            2 => Ipv6Addr::from((0x2002u128 << 112) | (u128::from(v4) << 80) | (n & 0xffff_ffff)),
            _ => Ipv6Addr::from((0x0064_ff9bu128 << 96) | u128::from(v4)),
        };
        let url = format!("http://[{a}]:8080/");
        let verdict = guard_verdict(&BridgeGuard::new(&[]), &url);
        prop_assert_eq!(verdict.is_ok(), is_public(IpAddr::V6(a)), "{}: {:?}", url, verdict);
    }

    #[test]
    fn an_allow_listed_literal_is_accepted_and_pinned_whatever_its_address(n in any::<u32>(), port in 1u16..) {
        let a = Ipv4Addr::from(n);
        let guard = BridgeGuard::new(&[format!("{a}:{port}")]);
        let pinned = guard_verdict(&guard, &format!("http://{n}:{port}/")).unwrap();
        prop_assert_eq!(pinned, vec![std::net::SocketAddr::new(IpAddr::V4(a), port)]);
        // Another port of the same host is not allow-listed.
        let other = port.wrapping_add(1).max(1);
        if other != port {
            let verdict = guard_verdict(&guard, &format!("http://{a}:{other}/"));
            prop_assert_eq!(verdict.is_ok(), is_public(IpAddr::V4(a)));
        }
    }

    #[test]
    fn arbitrary_text_never_panics_and_whatever_passes_keeps_the_rules(raw in url_text()) {
        let guard = BridgeGuard::new(&[]);
        match guard.parse(&raw) {
            Ok(target) => {
                prop_assert!(matches!(target.url.scheme(), "http" | "https"));
                prop_assert!(target.url.username().is_empty() && target.url.password().is_none());
                prop_assert!(target.url.host_str().is_some());
                prop_assert_eq!(Some(target.port), target.url.port_or_known_default());
                if let Some(ip) = target.literal {
                    let public = is_public(ip);
                    prop_assert_eq!(guard.vet(target, vec![ip]).is_ok(), public);
                } else {
                    let host = target.url.host_str().unwrap().trim_end_matches('.');
                    prop_assert!(host != "localhost" && !host.ends_with(".localhost"), "{}", raw);
                }
            }
            Err(e) => {
                let invalid_request = matches!(e, ServiceError::InvalidRequest { .. });
                prop_assert!(invalid_request, "{:?}", e);
            }
        }
    }

    #[test]
    fn reserved_names_are_refused_in_any_case_with_a_trailing_dot_or_as_a_parent(
        name in prop_oneof![
            Just("localhost"),
            Just("metadata"),
            Just("metadata.google.internal"),
            Just("metadata.azure.internal"),
        ],
        sub in proptest::option::of("[a-z0-9]{1,8}"),
        upper in proptest::collection::vec(any::<bool>(), 32),
        dot in any::<bool>(),
    ) {
        let mut host = match (&sub, name) {
            (Some(s), "localhost" | "metadata.google.internal") => format!("{s}.{name}"),
            _ => name.to_owned(),
        };
        host = host
            .chars()
            .zip(upper.iter().cycle())
            .map(|(c, &u)| if u { c.to_ascii_uppercase() } else { c })
            .collect();
        if dot {
            host.push('.');
        }
        let url = format!("http://{host}:8080/");
        let e = BridgeGuard::new(&[]).parse(&url).unwrap_err();
        prop_assert!(e.to_string().contains("metadata service"), "{}: {}", url, e);
    }

    #[test]
    fn a_bearer_key_is_read_whatever_the_scheme_case_and_surrounding_space(
        key in "[!-~][ -~]{0,40}[!-~]|[!-~]",
        scheme_case in proptest::collection::vec(any::<bool>(), 6),
        before in " {0,3}",
        between in " {1,3}",
        after in " {0,3}",
    ) {
        let scheme: String = "bearer"
            .chars()
            .zip(&scheme_case)
            .map(|(c, &u)| if u { c.to_ascii_uppercase() } else { c })
            .collect();
        let header = format!("{before}{scheme}{between}{key}{after}");
        prop_assert_eq!(bearer_key(Some(&header)).unwrap(), key.as_str());
    }

    #[test]
    fn any_authorization_text_is_a_trimmed_key_or_missing_api_key(header in "\\PC{0,60}|[Bb]earer[ \t]{0,3}\\PC{0,20}") {
        match bearer_key(Some(&header)) {
            Ok(key) => {
                prop_assert!(!key.is_empty());
                prop_assert_eq!(key, key.trim());
                prop_assert!(header.contains(key));
                prop_assert!(header.trim_start().get(..7).is_some_and(|s| s.eq_ignore_ascii_case("bearer ")));
            }
            Err(e) => {
                prop_assert_eq!(e.code().as_str(), "missing_api_key");
            }
        }
    }
}
