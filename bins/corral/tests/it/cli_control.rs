//! The operator's control-plane commands through the real binary: `corral user invite` and
//! `corral legal publish`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn corral(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("CORRAL_PUBLIC_URL")
        .env_remove("CORRAL_DATABASE_URL")
        .env_remove("CORRAL_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn user_invite_prints_a_single_use_link_and_stores_only_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = corral(
        &data,
        &[
            "user",
            "invite",
            "--email",
            " First@Example.com",
            "--public-url",
            "https://corral.example.com",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let link = stdout.trim();
    let token = link
        .strip_prefix("https://corral.example.com/console/sign-in/verify?token=")
        .unwrap_or_else(|| panic!("unexpected link {link}"));
    assert_eq!(token.len(), 43, "a 256-bit base64url token");

    // Again for the same user: a fresh link, the same user.
    let again = corral(&data, &["user", "invite", "--email", "first@example.com"]);
    assert!(again.status.success());
    let second = String::from_utf8(again.stdout).unwrap();
    assert!(second.starts_with("http://127.0.0.1:"), "{second}");
    assert!(!second.contains(token));

    let bad = corral(&data, &["user", "invite", "--email", "not-an-email"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an email"));

    // The database file and, should it remain, its write-ahead log.
    let mut db = Vec::new();
    for file in ["corral.db", "corral.db-wal"] {
        db.extend(std::fs::read(data.join(file)).unwrap_or_default());
    }
    let db = String::from_utf8_lossy(&db);
    assert!(db.contains("first@example.com"));
    assert!(
        !db.contains(token),
        "the sign-in token is stored as a hash only"
    );
}

#[test]
fn legal_publish_numbers_releases_per_document() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let body = dir.path().join("terms.md");
    std::fs::write(&body, "# Terms\n\nBe kind.\n").unwrap();
    let body = body.to_str().unwrap();
    let publish = |document: &str| {
        corral(
            &data,
            &[
                "legal",
                "publish",
                "--document",
                document,
                "--title",
                "Terms",
                "--file",
                body,
            ],
        )
    };
    for (document, release) in [("terms", 1), ("terms", 2), ("privacy", 1)] {
        let out = publish(document);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            json,
            serde_json::json!({ "document": document, "release": release })
        );
    }
    let out = publish("cookies");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("acceptable-use"));
}
