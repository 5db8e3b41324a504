//! One function per parser of untrusted text. Each takes bytes, asserts the parser's
//! invariants (a failed assertion is a finding) and returns an outcome signature the driver
//! uses to keep inputs that reach something new.
//!
//! Text parsers get the input as UTF-8 (lossily: a header or path reaches them as `&str`);
//! stream parsers get the bytes, split into chunks at positions derived from the input itself
//! so that every split is tried across runs.

use std::net::IpAddr;
use std::time::Duration;

use corral_domain::{OperationId, Provider, SandboxId};
use corral_idempotency::IdempotencyKey;
use corral_provider::ProviderError;
use corral_provider::net::is_public;
use corral_provider_bridge::exec::ExecStream;
use corral_provider_http::sse::{SseEvent, SseParser};
use corral_provider_http::{TrustedHosts, Url};
use corral_registry::{API_KEY_PREFIX, ListCursor, RegistryError, api_key_id};
use corral_service::bearer_key;
use corral_service::bridge::BridgeGuard;
use corral_service::error::ServiceError;

/// A fuzz target.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Its name (also its corpus directory).
    pub name: &'static str,
    /// What it checks, in a line.
    pub about: &'static str,
    /// Runs one input; panics on a broken invariant; returns an outcome signature.
    pub run: fn(&[u8]) -> u64,
    /// Tokens the mutator inserts.
    pub dictionary: &'static [&'static [u8]],
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "sandbox_id",
        about: "SandboxId/OperationId FromStr and serde: accepted ids print back unchanged",
        run: sandbox_id,
        dictionary: &[
            b"sbx_",
            b"op_",
            b"local_",
            b"e2b_",
            b"cloudflare_",
            b"_",
            b"7zzzzzzzzzzzzzzzzzzzzzzzzz",
            b"01hzy0000000000000000000000",
            b"8",
            b"i",
            b"l",
            b"o",
            b"u",
            b"U",
        ],
    },
    Target {
        name: "list_cursor",
        about: "ListCursor::parse: accepted cursors have the documented form and round-trip",
        run: list_cursor,
        dictionary: &[
            b"_",
            b"sbx_local_",
            b"sbx_",
            b"1700000000000000",
            b"999999999999999999",
            b"0",
            b"-",
            b"01hzy0000000000000000000000",
            b"+",
            b" ",
        ],
    },
    Target {
        name: "idempotency_key",
        about: "IdempotencyKey::parse: accepted exactly when 1-255 bytes of printable ASCII",
        run: idempotency_key,
        dictionary: &[
            b" ",
            b"~",
            b"\x7f",
            b"\x1f",
            b"\xc3\xa9",
            b"\t",
            b"\r\n",
            b"\0",
        ],
    },
    Target {
        name: "api_key",
        about: "API key shape and checksum: accepted keys are 80 characters of the form, any edit is refused",
        run: api_key,
        dictionary: &[
            b"crl_", b"_", b"0", b"z", b"i", b"l", b"o", b"u", b"Z", b"Bearer ",
        ],
    },
    Target {
        name: "authorization",
        about: "Authorization header reader: a trimmed non-empty key after `Bearer`, else missing_api_key",
        run: authorization,
        dictionary: &[
            b"Bearer",
            b"bearer ",
            b"BEARER",
            b" ",
            b"\t",
            b"crl_",
            b"Basic ",
            b"\xc2\xa0",
        ],
    },
    Target {
        name: "bridge_url",
        about: "X-Provider-Bridge-Url guard: nothing that passes breaks a rule; literals get is_public's verdict",
        run: bridge_url,
        dictionary: &[
            b"http://",
            b"https://",
            b"file://",
            b"@",
            b":",
            b"[",
            b"]",
            b"::ffff:",
            b"0x7f",
            b"0177",
            b"127.0.0.1",
            b"169.254.169.254",
            b"2130706433",
            b"localhost",
            b"metadata.google.internal",
            b".",
            b"%2e",
            b"%40",
            b"\\",
            b"#",
            b"?",
            b"2002:",
            b"64:ff9b::",
            b"\xef\xbc\x8e",
        ],
    },
    Target {
        name: "trusted_url",
        about: "TrustedHosts::check of provider-named URLs: only the suffix over https or the exact origin pass",
        run: trusted_url,
        dictionary: &[
            b"https://",
            b"http://",
            b"e2b.app",
            b".e2b.app",
            b"xe2b.app",
            b"127.0.0.1:4567",
            b"@",
            b":",
            b"/",
            b"%2e",
            b"[::1]",
            b"E2B.APP",
            b".",
        ],
    },
    Target {
        name: "sse",
        about: "SseParser: any chunking gives the same events; held bytes stay bounded",
        run: sse,
        dictionary: &[
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"data:",
            b"data: ",
            b"event: ",
            b"id: ",
            b":",
            b"\xef\xbb\xbf",
            b"retry: 1\n",
        ],
    },
    Target {
        name: "exec_stream",
        about: "Bridge exec answer: never panics, never an exit without an exit event, output capped",
        run: exec_stream,
        dictionary: &[
            b"event: exit\n",
            b"event: stdout\n",
            b"event: stderr\n",
            b"event: error\n",
            b"data: {\"exit_code\":0}\n",
            b"data: {\"error\":\"x\",\"code\":\"exec_timeout\"}\n",
            b"data: aGVsbG8=\n",
            b"\n\n",
            b"\r\n",
            b"data: ",
            b"==",
        ],
    },
];

/// Signature of a verdict: which target branch, plus a detail hash.
fn sig(branch: u64, detail: &[u8]) -> u64 {
    branch.wrapping_mul(0x9e37_79b9).wrapping_add(fnv1a(detail))
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn sandbox_id(data: &[u8]) -> u64 {
    let s = text(data);
    let json = serde_json::Value::String(s.clone()).to_string();
    let by_serde = serde_json::from_str::<SandboxId>(&json).ok();
    let out = match s.parse::<SandboxId>() {
        Ok(id) => {
            assert_eq!(
                id.to_string(),
                s,
                "an accepted sandbox id prints back unchanged"
            );
            assert_eq!(by_serde, Some(id), "serde accepts what FromStr accepts");
            assert!(
                s.starts_with("sbx_") && s.len() <= 4 + 10 + 1 + 26,
                "an accepted id has the form"
            );
            sig(1, id.provider().as_str().as_bytes())
        }
        Err(e) => {
            assert!(by_serde.is_none(), "serde refuses what FromStr refuses");
            sig(2, e.to_string().as_bytes())
        }
    };
    match s.parse::<OperationId>() {
        Ok(op) => {
            assert_eq!(op.to_string(), s, "an accepted operation id prints back");
            sig(3, b"op")
        }
        Err(e) => out ^ sig(4, e.to_string().as_bytes()),
    }
}

fn list_cursor(data: &[u8]) -> u64 {
    let s = text(data);
    match ListCursor::parse(&s) {
        Ok(cursor) => {
            let (created, id) = s.split_once('_').unwrap_or_default();
            assert!(
                (1..=18).contains(&created.len()) && created.bytes().all(|b| b.is_ascii_digit()),
                "an accepted cursor starts with 1-18 digits: {s:?}"
            );
            assert_eq!(cursor.id.to_string(), id, "the id part is canonical");
            assert_eq!(
                ListCursor::parse(&cursor.to_string()).ok(),
                Some(cursor),
                "round trip"
            );
            sig(1, &[created.len() as u8])
        }
        Err(e) => {
            assert!(matches!(e, RegistryError::InvalidCursor), "{e:?}");
            sig(2, &[s.split('_').count().min(255) as u8])
        }
    }
}

fn idempotency_key(data: &[u8]) -> u64 {
    let s = text(data);
    let allowed = (1..=255).contains(&s.len()) && s.bytes().all(|b| (b' '..=b'~').contains(&b));
    match IdempotencyKey::parse(&s) {
        Ok(key) => {
            assert!(allowed, "accepted outside the grammar: {s:?}");
            assert_eq!(key.as_str(), s);
            sig(1, &[(s.len() / 64) as u8])
        }
        Err(e) => {
            assert!(!allowed, "refused inside the grammar: {s:?}");
            sig(2, e.to_string().as_bytes())
        }
    }
}

fn api_key(data: &[u8]) -> u64 {
    let s = text(data);
    let header = format!("Bearer {s}");
    let via_header = bearer_key(Some(&header)).ok().and_then(api_key_id);
    match api_key_id(&s) {
        Some(id) => {
            assert_eq!(s.len(), 80, "an accepted key is 80 characters");
            assert!(s.starts_with(API_KEY_PREFIX));
            assert_eq!(
                &s[4..20],
                id,
                "the key id is the 16 characters after the prefix"
            );
            assert_eq!(via_header, Some(id), "the same key read from a header");
            // Any one-character edit is refused (CRC-32 catches every burst of 5 bits).
            let i = (fnv1a(data) % 80) as usize;
            let mut edited = s.clone().into_bytes();
            edited[i] = if edited[i] == b'0' { b'1' } else { b'0' };
            let edited = String::from_utf8_lossy(&edited).into_owned();
            assert_eq!(
                api_key_id(&edited),
                None,
                "an edited key is refused: {edited}"
            );
            sig(1, b"")
        }
        None => sig(
            2,
            &[s.len().min(255) as u8, u8::from(s.starts_with("crl_"))],
        ),
    }
}

fn authorization(data: &[u8]) -> u64 {
    let s = text(data);
    match bearer_key(Some(&s)) {
        Ok(key) => {
            assert!(
                !key.is_empty() && key == key.trim(),
                "a trimmed non-empty key"
            );
            assert!(s.contains(key));
            let head = s.trim_start().get(..7).unwrap_or_default();
            assert!(
                head.eq_ignore_ascii_case("bearer "),
                "read after `Bearer `: {s:?}"
            );
            sig(1, &[u8::from(api_key_id(key).is_some())])
        }
        Err(e) => {
            assert_eq!(e.code().as_str(), "missing_api_key", "{e:?}");
            sig(2, e.to_string().as_bytes())
        }
    }
}

fn bridge_url(data: &[u8]) -> u64 {
    let s = text(data);
    let open = BridgeGuard::new(&[]);
    let allowing = BridgeGuard::new(&["127.0.0.1:9000".to_owned(), "localhost".to_owned()]);
    let mut out = 0;
    for (n, guard) in [(0u64, &open), (1, &allowing)] {
        out ^= match guard.parse(&s) {
            Ok(target) => {
                let url = target.url.clone();
                assert!(matches!(url.scheme(), "http" | "https"), "{s:?}");
                assert!(
                    url.username().is_empty() && url.password().is_none(),
                    "{s:?}"
                );
                assert_eq!(Some(target.port), url.port_or_known_default());
                let host = url.host_str().unwrap_or_default().to_owned();
                assert!(!host.is_empty(), "a host: {s:?}");
                match target.literal {
                    Some(ip) => {
                        let allowed = target.allowed;
                        let vetted = guard.vet(target, vec![ip]);
                        let want = allowed || is_public(ip);
                        assert_eq!(vetted.is_ok(), want, "{s:?} ({ip})");
                        if let Ok(v) = vetted {
                            assert_eq!(v.pinned.len(), 1);
                            assert_eq!(v.pinned[0].ip(), ip);
                            assert_eq!(Some(v.pinned[0].port()), url.port_or_known_default());
                            if !allowed {
                                assert!(is_public(v.pinned[0].ip()));
                            }
                        }
                        sig(
                            10 + n,
                            &[u8::from(want), u8::from(matches!(ip, IpAddr::V6(_)))],
                        )
                    }
                    None => {
                        let bare = host.trim_end_matches('.');
                        if n == 0 {
                            assert!(
                                bare != "localhost" && !bare.ends_with(".localhost"),
                                "a loopback name passed: {s:?}"
                            );
                        }
                        // A name still has to resolve to public addresses: an empty answer
                        // and a private one are refused.
                        let private = guard.vet(target.clone(), vec![IpAddr::from([10, 0, 0, 1])]);
                        assert_eq!(private.is_ok(), target.allowed);
                        assert!(guard.vet(target, Vec::new()).is_err());
                        sig(20 + n, b"name")
                    }
                }
            }
            Err(e) => {
                assert!(matches!(e, ServiceError::InvalidRequest { .. }), "{e:?}");
                assert_eq!(e.code().as_str(), "invalid_request");
                sig(
                    30 + n,
                    e.to_string()
                        .split(':')
                        .next_back()
                        .unwrap_or_default()
                        .as_bytes(),
                )
            }
        };
    }
    out
}

fn trusted_url(data: &[u8]) -> u64 {
    let s = text(data);
    let Ok(url) = Url::parse(&s) else {
        return sig(1, b"");
    };
    let entries = ["e2b.app".to_owned(), "http://127.0.0.1:4567".to_owned()];
    let Ok(trusted) = TrustedHosts::parse(Provider::E2b, &entries) else {
        panic!("the fixed entries parse");
    };
    match trusted.check("domain", url.clone()) {
        Ok(ok) => {
            let u = ok.as_url();
            assert_eq!(u, &url);
            assert!(u.username().is_empty() && u.password().is_none(), "{s:?}");
            // A trailing dot is the absolute spelling of the same name.
            let host = u.host_str().unwrap_or_default().trim_end_matches('.');
            let origin = u.scheme() == "http" && host == "127.0.0.1" && u.port() == Some(4567);
            let under = host == "e2b.app" || host.ends_with(".e2b.app");
            assert!(
                origin || (u.scheme() == "https" && under),
                "trusted outside the entries: {s:?}"
            );
            sig(2, &[u8::from(origin)])
        }
        Err(e) => {
            assert!(matches!(e, ProviderError::Protocol { .. }), "{e:?}");
            sig(3, &[u8::from(matches!(url.scheme(), "http" | "https"))])
        }
    }
}

/// Chunk boundaries derived from the input, so each run tries another split.
fn cuts(data: &[u8]) -> Vec<usize> {
    let mut h = fnv1a(data);
    let mut cuts: Vec<usize> = (0..(h % 6))
        .map(|_| {
            h = h.rotate_left(13).wrapping_mul(0x0100_0000_01b3);
            (h % (data.len() as u64 + 1)) as usize
        })
        .collect();
    cuts.sort_unstable();
    cuts
}

fn chunks<'a>(data: &'a [u8], cuts: &[usize]) -> impl Iterator<Item = &'a [u8]> {
    let mut from = 0;
    cuts.iter().copied().chain([data.len()]).map(move |cut| {
        let piece = &data[from..cut];
        from = cut;
        piece
    })
}

fn sse(data: &[u8]) -> u64 {
    let mut whole = SseParser::new();
    let at_once = whole.push(data);
    let mut split = SseParser::new();
    let mut in_chunks: Vec<SseEvent> = Vec::new();
    for piece in chunks(data, &cuts(data)) {
        in_chunks.extend(split.push(piece));
    }
    let mut bytewise = SseParser::new();
    let one_by_one: Vec<SseEvent> = data.iter().flat_map(|b| bytewise.push(&[*b])).collect();
    assert_eq!(in_chunks, at_once, "chunking changed the events");
    assert_eq!(one_by_one, at_once, "byte-by-byte changed the events");
    for p in [&whole, &split, &bytewise] {
        assert_eq!(p.pending(), whole.pending());
        assert_eq!(p.buffered(), whole.buffered());
        assert!(p.pending() <= data.len());
        // Lossy decoding turns one invalid byte into a 3-byte replacement character.
        assert!(p.buffered() <= 3 * data.len());
    }
    let total: usize = at_once.iter().map(|e| e.data.len() + e.event.len()).sum();
    assert!(total <= 3 * data.len() + 7 * at_once.len());
    sig(
        at_once.len().min(16) as u64,
        &[u8::from(whole.pending() > 0)],
    )
}

fn exec_stream(data: &[u8]) -> u64 {
    const CAP: usize = 32;
    let mut stream = ExecStream::new(Provider::Cloudflare, Duration::from_secs(1), CAP);
    let mut pushed = Ok(false);
    for piece in chunks(data, &cuts(data)) {
        pushed = stream.push(piece);
        if pushed.is_err() {
            break;
        }
    }
    let done = matches!(pushed, Ok(true));
    match (pushed, stream.finish()) {
        (Ok(_), Ok(out)) => {
            assert!(done, "finished without the stream saying it was done");
            let text = String::from_utf8_lossy(data);
            assert!(
                text.contains("exit"),
                "an exit code without an exit event: {text:?}"
            );
            assert!(out.stdout.len() <= CAP && out.stderr.len() <= CAP);
            sig(1, &[u8::from(out.truncated), (out.exit_code & 0xff) as u8])
        }
        (Ok(_), Err(e)) | (Err(e), _) => {
            let kind = match e {
                ProviderError::Protocol { .. } => 2,
                ProviderError::CommandTimedOut { .. } => 3,
                ProviderError::ServerError { .. } => 4,
                _ => 5,
            };
            sig(kind, &[u8::from(done)])
        }
    }
}

/// FNV-1a, for naming artifacts and hashing outcomes.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
