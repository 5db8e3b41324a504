//! Property tests of what the idempotency layer reads from a request: the `Idempotency-Key`
//! grammar (1–255 bytes of printable ASCII, docs/api.md) and the request fingerprint's
//! indifference to spelling (header case and order, secret headers; a body's key order is
//! gone once parsed, as serde_json's maps are sorted, and the canonical text is a fixed point).

use corral_idempotency::{Fingerprint, IdempotencyError, IdempotencyKey, canonical_json};
use proptest::prelude::*;
use serde_json::Value;

/// The grammar, written independently of the parser.
fn allowed(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| (b' '..=b'~').contains(&b))
}

fn near_the_grammar() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,300}",
        "[ -~]{250,260}",
        "[ -~]{0,20}[\\x00-\\x1f\\x7f\u{80}-\u{ff}\u{2028}][ -~]{0,20}",
        "\\PC{0,64}",
        any::<String>(),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("\\PC{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn a_key_is_accepted_exactly_when_the_grammar_allows_it(key in near_the_grammar()) {
        match IdempotencyKey::parse(&key) {
            Ok(parsed) => {
                prop_assert!(allowed(&key), "{:?}", key);
                prop_assert_eq!(parsed.as_str(), key.as_str());
                prop_assert_eq!(parsed.to_string(), key.clone());
                prop_assert_eq!(IdempotencyKey::parse(parsed.as_str()).unwrap(), parsed.clone());
                let _ = format!("{parsed:?}");
            }
            Err(e) => {
                prop_assert!(!allowed(&key), "{:?} refused: {}", key, e);
                let invalid_key = matches!(e, IdempotencyError::InvalidKey { .. });
                prop_assert!(invalid_key);
            }
        }
    }

    #[test]
    fn the_fingerprint_ignores_header_case_and_order_and_secret_headers(
        body in json(),
        headers in proptest::collection::vec(("x-[a-z]{1,6}", "[ -~]{0,12}"), 0..4),
        secret in "[ -~]{1,12}",
    ) {
        let pairs: Vec<(&str, &str)> =
            headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let base = Fingerprint::compute("post", "/v1/sandboxes", Some(&body), &pairs);
        let upper: Vec<(String, &str)> =
            headers.iter().rev().map(|(n, v)| (n.to_ascii_uppercase(), v.as_str())).collect();
        let mut respelled: Vec<(&str, &str)> =
            upper.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        respelled.push(("Authorization", &secret));
        respelled.push(("X-Provider-Credential", &secret));
        let same = Fingerprint::compute("POST", "/v1/sandboxes", Some(&body), &respelled);
        prop_assert_eq!(base, same);
        // What does matter changes it.
        prop_assert_ne!(base, Fingerprint::compute("POST", "/v1/sandboxes", None, &pairs));
        prop_assert_ne!(base, Fingerprint::compute("POST", "/v1/other", Some(&body), &pairs));
    }

    #[test]
    fn canonical_json_is_json_of_the_same_value_and_a_fixed_point(body in json()) {
        let mut text = String::new();
        canonical_json(&body, &mut text);
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &body);
        let mut again = String::new();
        canonical_json(&back, &mut again);
        prop_assert_eq!(again, text);
    }
}
