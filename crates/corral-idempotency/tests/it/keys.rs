use corral_idempotency::{Fingerprint, IdempotencyError, IdempotencyKey};
use serde_json::json;

#[test]
fn keys_of_1_to_255_printable_ascii_characters_are_accepted_and_others_are_typed_errors() {
    assert_eq!(IdempotencyKey::parse("a").unwrap().as_str(), "a");
    assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
    assert!(IdempotencyKey::parse(" ~!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}").is_ok());
    for bad in [
        String::new(),
        "k".repeat(256),
        "tab\there".to_owned(),
        "new\nline".to_owned(),
        "caf\u{e9}".to_owned(),
        "nul\0".to_owned(),
        "del\x7f".to_owned(),
    ] {
        let err = IdempotencyKey::parse(&bad).unwrap_err();
        assert!(
            matches!(err, IdempotencyError::InvalidKey { .. }),
            "{bad:?}"
        );
        assert!(!err.is_retryable());
    }
}

#[test]
fn fingerprints_ignore_json_key_order_and_whitespace_but_not_meaning() {
    let a: serde_json::Value =
        serde_json::from_str(r#"{"provider":"e2b","image":{"name":"x","tag":"1"},"n":[1,2]}"#)
            .unwrap();
    let b: serde_json::Value = serde_json::from_str(
        "{ \"n\" : [1, 2],\n \"image\": {\"tag\":\"1\", \"name\":\"x\"}, \"provider\":\"e2b\" }",
    )
    .unwrap();
    let headers = [
        ("X-Provider", "e2b"),
        ("x-provider-bridge-url", "https://b"),
    ];
    let swapped = [
        ("x-provider-bridge-url", "https://b"),
        ("x-provider", "e2b"),
    ];
    let fp = |body: &serde_json::Value, h: &[(&str, &str)]| {
        Fingerprint::compute("POST", "/v1/sandboxes", Some(body), h)
    };
    assert_eq!(fp(&a, &headers), fp(&b, &swapped));
    assert_ne!(fp(&a, &headers), fp(&json!({"provider": "e2b"}), &headers));
    assert_ne!(fp(&a, &headers), fp(&a, &[("x-provider", "daytona")]));
    assert_ne!(
        fp(&a, &headers),
        Fingerprint::compute("POST", "/v1/sandboxes/{id}/exec", Some(&a), &headers)
    );
    assert_ne!(
        fp(&a, &headers),
        Fingerprint::compute("PUT", "/v1/sandboxes", Some(&a), &headers)
    );
    // Credentials never influence (or enter) the fingerprint.
    let mut with_secret = headers.to_vec();
    with_secret.push(("X-Provider-Credential", "secret-1"));
    with_secret.push(("Authorization", "Bearer crl_x"));
    assert_eq!(fp(&a, &headers), fp(&a, &with_secret));
    // Field boundaries are unambiguous.
    assert_ne!(
        Fingerprint::compute("POST", "/ab", None, &[("c", "d")]),
        Fingerprint::compute("POST", "/a", None, &[("bc", "d")])
    );
    // `1` and `1.0` are different JSON; a body and no body differ.
    assert_ne!(fp(&json!({"n": 1}), &[]), fp(&json!({"n": 1.0}), &[]));
    assert_ne!(
        Fingerprint::compute("POST", "/r", None, &[]),
        Fingerprint::compute("POST", "/r", Some(&json!(null)), &[])
    );
}

#[test]
fn canonical_json_sorts_keys_and_drops_whitespace() {
    let mut out = String::new();
    corral_idempotency::canonical_json(
        &json!({"b": [1, {"d": true, "c": null}], "a": "x\"y"}),
        &mut out,
    );
    assert_eq!(out, r#"{"a":"x\"y","b":[1,{"c":null,"d":true}]}"#);
}
