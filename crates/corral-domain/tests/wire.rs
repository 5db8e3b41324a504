//! Wire-format tests: every type round-trips through JSON with the spec's exact field names,
//! and requests reject unknown fields naming the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

use std::collections::BTreeMap;

use corral_domain::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

/// Serializes `value`, checks its top-level keys, and checks it deserializes back equal.
fn round_trip<T>(value: &T, want_keys: &[&str])
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(value).unwrap();
    let mut want: Vec<String> = want_keys.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    assert_eq!(keys(&json), want, "{json}");
    let back: T = serde_json::from_value(json).unwrap();
    assert_eq!(&back, value);
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn metadata() -> SandboxMetadata {
    SandboxMetadata {
        native_provider_id: Some("native-1".into()),
        operation_id: OperationId::new(),
        credential_source: CredentialSource::Inline,
        workspace: None,
        team_id: Some("team_1".into()),
        project_id: Some("prj_1".into()),
        bridge_url: None,
    }
}

fn caps(provider: Provider) -> ProviderCapabilities {
    ProviderCapabilities {
        lifecycle: Default::default(),
        provider,
        display_name: "Test".into(),
        pricing: PricingEvidence {
            summary: "$0.01 per vCPU-hour".into(),
            source_url: "https://example.com/pricing".into(),
            read_on: "2026-11-22".into(),
            rates: Vec::new(),
            size: None,
        },
        image_mode: ImageMode::Template,
        timeout_mode: TimeoutMode::Seconds,
        timeout_default_seconds: Some(300),
        timeout_maximum_seconds: Some(3600),
        timeout_granularity_seconds: Some(60),
        supports_cwd: true,
        supports_env: false,
        output_streams: OutputStreams::Separate,
        supports_persistent_resume: true,
        supports_explicit_stop: false,
        supports_snapshots: false,
        supports_restore: false,
        supports_delete: true,
        images: Vec::new(),
        commands: corral_domain::CommandCapabilities::emulated(),
    }
}

#[test]
fn sandbox_uses_spec_field_names() {
    let sandbox = Sandbox {
        auto_resume: false,
        idle_stop_seconds: None,
        snapshot_id: None,
        id: SandboxId::new(Provider::E2b),
        provider: Provider::E2b,
        status: SandboxStatus::Creating,
        metadata: metadata(),
        status_observed_at: Some(ts("2026-11-22T10:00:00Z")),
        deleted_at: None,
    };
    round_trip(
        &sandbox,
        &["id", "provider", "status", "metadata", "statusObservedAt"],
    );
    let json = serde_json::to_value(&sandbox).unwrap();
    assert_eq!(json["status"], "creating");
    assert_eq!(json["statusObservedAt"], "2026-11-22T10:00:00.000Z");
    assert_eq!(
        keys(&json["metadata"]),
        [
            "credentialSource",
            "nativeProviderId",
            "operationId",
            "projectId",
            "teamId"
        ]
    );
}

#[test]
fn list_item_and_page_use_spec_field_names_and_null_cursor() {
    let item = SandboxListItem {
        auto_resume: false,
        idle_stop_seconds: None,
        snapshot_id: None,
        id: SandboxId::new(Provider::Local),
        provider: Provider::Local,
        status: SandboxStatus::Deleted,
        metadata: metadata(),
        created_at: ts("2026-11-22T10:00:00Z"),
        updated_at: ts("2026-11-22T10:05:00Z"),
        status_observed_at: ts("2026-11-22T10:05:00Z"),
        deleted_at: Some(ts("2026-11-22T10:05:00Z")),
    };
    round_trip(
        &item,
        &[
            "id",
            "provider",
            "status",
            "metadata",
            "createdAt",
            "updatedAt",
            "statusObservedAt",
            "deletedAt",
        ],
    );
    let page = SandboxPage {
        items: vec![item],
        next_cursor: None,
    };
    round_trip(&page, &["items", "nextCursor"]);
    assert_eq!(
        serde_json::to_value(&page).unwrap()["nextCursor"],
        Value::Null
    );
}

#[test]
fn timestamps_have_one_spelling_with_milliseconds() {
    let at = |s: &str| Sandbox {
        auto_resume: false,
        idle_stop_seconds: None,
        snapshot_id: None,
        id: SandboxId::new(Provider::Local),
        provider: Provider::Local,
        status: SandboxStatus::Running,
        metadata: metadata(),
        status_observed_at: Some(ts(s)),
        deleted_at: None,
    };
    for (given, wire) in [
        ("2026-11-22T10:00:00.123456789Z", "2026-11-22T10:00:00.123Z"),
        ("2026-11-22T10:00:00+02:00", "2026-11-22T08:00:00.000Z"),
    ] {
        let json = serde_json::to_value(at(given)).unwrap();
        assert_eq!(json["statusObservedAt"], wire);
    }
}

#[test]
fn exec_types_use_spec_field_names() {
    let input = RunCommandInput {
        command: "echo hi".into(),
        cwd: Some("/workspace".into()),
        env: Some(BTreeMap::from([("A".into(), "1".into())])),
    };
    round_trip(&input, &["command", "cwd", "env"]);
    let result = CommandResult {
        sandbox_id: SandboxId::new(Provider::Local),
        stdout: "hi\n".into(),
        stderr: String::new(),
        exit_code: 0,
        truncated: false,
    };
    round_trip(
        &result,
        &["sandboxId", "stdout", "stderr", "exitCode", "truncated"],
    );
}

#[test]
fn file_types_use_spec_field_names() {
    let id = SandboxId::new(Provider::Local);
    round_trip(
        &ReadFileInput {
            path: "/a".into(),
            encoding: Some(FileEncoding::Base64),
        },
        &["path", "encoding"],
    );
    round_trip(
        &ReadFileResult {
            sandbox_id: id,
            path: "/a".into(),
            content: "x".into(),
            encoding: FileEncoding::Utf8,
        },
        &["sandboxId", "path", "content", "encoding"],
    );
    round_trip(
        &WriteFileInput {
            path: "/a".into(),
            content: "eA==".into(),
            encoding: Some(FileEncoding::Base64),
        },
        &["path", "content", "encoding"],
    );
    round_trip(
        &WriteFileResult {
            sandbox_id: id,
            path: "/a".into(),
            bytes_written: 1,
        },
        &["sandboxId", "path", "bytesWritten"],
    );
    assert_eq!(serde_json::to_value(FileEncoding::Utf8).unwrap(), "utf8");
    assert_eq!(
        serde_json::to_value(FileEncoding::Base64).unwrap(),
        "base64"
    );
    let read: ReadFileInput = serde_json::from_value(json!({"path": "/a"})).unwrap();
    assert_eq!(read.encoding.unwrap_or_default(), FileEncoding::Utf8);
}

#[test]
fn capabilities_have_all_fourteen_spec_fields_plus_name_pricing_commands_and_lifecycle() {
    let c = caps(Provider::E2b);
    round_trip(
        &c,
        &[
            "provider",
            "imageMode",
            "timeoutMode",
            "timeoutDefaultSeconds",
            "timeoutMaximumSeconds",
            "timeoutGranularitySeconds",
            "supportsCwd",
            "supportsEnv",
            "outputStreams",
            "supportsPersistentResume",
            "supportsExplicitStop",
            "supportsSnapshots",
            "supportsRestore",
            "supportsDelete",
            "displayName",
            "pricing",
            "commands",
            "lifecycle",
        ],
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(
        keys(&json["pricing"]),
        ["rates", "readOn", "sourceUrl", "summary"]
    );
    assert_eq!(
        keys(&json["commands"]),
        ["binaryOutput", "emulated", "resume", "signals", "stdin"]
    );
    assert_eq!(json["imageMode"], "template");
    assert_eq!(json["timeoutMode"], "seconds");
    assert_eq!(json["outputStreams"], "separate");
    round_trip(&ProviderCatalog { providers: vec![c] }, &["providers"]);
    for (mode, wire) in [
        (ImageMode::Template, "template"),
        (ImageMode::Container, "container"),
        (ImageMode::Blueprint, "blueprint"),
        (ImageMode::Fixed, "fixed"),
    ] {
        assert_eq!(serde_json::to_value(mode).unwrap(), wire);
    }
    assert_eq!(
        serde_json::to_value(TimeoutMode::ProviderManaged).unwrap(),
        "provider_managed"
    );
    assert_eq!(
        serde_json::to_value(OutputStreams::Combined).unwrap(),
        "combined"
    );
}

#[test]
fn capability_invariants_are_checked() {
    assert_eq!(caps(Provider::E2b).check(), Ok(()));
    let mut c = caps(Provider::E2b);
    c.timeout_default_seconds = Some(90);
    assert!(c.check().is_err(), "default off the granularity");
    let mut c = caps(Provider::E2b);
    c.timeout_mode = TimeoutMode::ProviderManaged;
    assert!(c.check().is_err(), "bounds on a provider-managed lifetime");
    let mut c = caps(Provider::E2b);
    c.timeout_granularity_seconds = Some(0);
    assert!(c.check().is_err());
    let mut c = caps(Provider::E2b);
    c.pricing.read_on = "22/11/2026".into();
    assert!(c.check().is_err());
}

#[test]
fn pricing_rates_are_checked_and_refuse_unknown_fields() {
    let good = PricingRate::new(
        RateUnit::VcpuSecond,
        "0.000014",
        "USD",
        "pay as you go",
        "https://example.com/pricing",
        "2026-11-27",
    );
    let mut c = caps(Provider::E2b);
    c.pricing.rates = vec![good.clone()];
    assert_eq!(c.check(), Ok(()));
    type Spoil = fn(&mut PricingRate);
    let bad: [(&str, Spoil); 6] = [
        ("rate as a float", |r| r.rate = "1e-5".into()),
        ("negative rate", |r| r.rate = "-0.1".into()),
        ("currency", |r| r.currency = "usd".into()),
        ("plan", |r| r.plan = " ".into()),
        ("http source", |r| {
            r.source_url = "http://example.com".into()
        }),
        ("date", |r| r.read_on = "2026-11".into()),
    ];
    for (what, spoil) in bad {
        let mut c = caps(Provider::E2b);
        let mut r = good.clone();
        spoil(&mut r);
        c.pricing.rates = vec![r];
        assert!(c.check().is_err(), "{what} was accepted");
    }
    let json = serde_json::to_value(&good).unwrap();
    assert_eq!(json["unit"], "vcpu_second");
    assert_eq!(json["rate"], "0.000014");
    let mut extra = json.clone();
    extra["perHour"] = serde_json::json!("0.05");
    assert!(serde_json::from_value::<PricingRate>(extra).is_err());
    let back: PricingRate = serde_json::from_value(json).unwrap();
    assert_eq!(back, good);
}

#[test]
fn create_request_is_a_union_discriminated_by_provider() {
    for p in Provider::ALL {
        let req = CreateSandboxRequest::standard(p, Some("img".into()), Some(60));
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["provider"], p.as_str());
        assert_eq!(json["image"], "img");
        assert_eq!(json["timeout"], 60);
        let back: CreateSandboxRequest = serde_json::from_value(json).unwrap();
        assert_eq!(back, req);
        assert_eq!(back.provider(), p);
    }
    let fly: CreateSandboxRequest = serde_json::from_value(
        json!({"provider": "fly", "image": "nginx", "app": "my-app", "region": "iad"}),
    )
    .unwrap();
    assert_eq!(
        fly,
        CreateSandboxRequest::Fly(FlyCreate {
            snapshot: None,
            auto_resume: None,
            idle_stop_seconds: None,
            image: Some("nginx".into()),
            timeout: None,
            app: Some("my-app".into()),
            region: Some("iad".into()),
        })
    );
    let bare: CreateSandboxRequest =
        serde_json::from_value(json!({"provider": "sprites"})).unwrap();
    assert_eq!(bare.image(), None);
    assert_eq!(bare.timeout(), None);
}

#[test]
fn unknown_fields_are_rejected_naming_the_field() {
    let cases = [
        (json!({"provider": "e2b", "imagee": "x"}), "imagee"),
        (json!({"provider": "e2b", "app": "x"}), "app"),
        (json!({"provider": "fly", "colour": "x"}), "colour"),
    ];
    for (body, field) in cases {
        let err = serde_json::from_value::<CreateSandboxRequest>(body)
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{err}");
    }
    let err = serde_json::from_value::<CreateSandboxRequest>(json!({"provider": "aws"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("aws"), "{err}");
    let err = serde_json::from_value::<RunCommandInput>(json!({"command": "x", "shell": "bash"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("shell"), "{err}");
    let err =
        serde_json::from_value::<WriteFileInput>(json!({"path": "/a", "content": "", "mode": 1}))
            .unwrap_err()
            .to_string();
    assert!(err.contains("mode"), "{err}");
    let err = serde_json::from_value::<ReadFileInput>(json!({"path": "/a", "encoding": "utf16"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("utf16"), "{err}");
}

fn invalid_field(r: Result<(), InputError>) -> &'static str {
    match r {
        Err(InputError::Invalid { field, .. }) => field,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn create_validation_follows_capabilities_and_names_field_and_provider() {
    let c = caps(Provider::E2b);
    let ok = CreateSandboxRequest::standard(Provider::E2b, Some("base".into()), Some(120));
    assert_eq!(ok.validate(&c), Ok(()));
    assert_eq!(ok.effective_timeout(&c), Some(120));
    assert_eq!(
        CreateSandboxRequest::standard(Provider::E2b, None, None).effective_timeout(&c),
        Some(300)
    );

    for (timeout, why) in [(0, "at least"), (3660, "maximum"), (90, "multiple")] {
        let r = CreateSandboxRequest::standard(Provider::E2b, None, Some(timeout)).validate(&c);
        let Err(InputError::Invalid { field, message }) = r else {
            panic!("{r:?}")
        };
        assert_eq!(field, "timeout");
        assert!(
            message.contains(why) && message.contains("e2b"),
            "{message}"
        );
    }
    assert_eq!(
        invalid_field(
            CreateSandboxRequest::standard(Provider::E2b, Some(" ".into()), None).validate(&c)
        ),
        "image"
    );

    let mut fixed = caps(Provider::Local);
    fixed.image_mode = ImageMode::Fixed;
    assert_eq!(
        invalid_field(
            CreateSandboxRequest::standard(Provider::Local, Some("x".into()), None)
                .validate(&fixed)
        ),
        "image"
    );

    let mut managed = caps(Provider::Sprites);
    managed.timeout_mode = TimeoutMode::ProviderManaged;
    assert_eq!(
        invalid_field(
            CreateSandboxRequest::standard(Provider::Sprites, None, Some(60)).validate(&managed)
        ),
        "timeout"
    );

    let bridge = caps(Provider::Modal);
    assert_eq!(
        invalid_field(
            CreateSandboxRequest::standard(Provider::Modal, Some("x".into()), None)
                .validate(&bridge)
        ),
        "image"
    );
    assert_eq!(
        invalid_field(CreateSandboxRequest::standard(Provider::E2b, None, None).validate(&bridge)),
        "provider"
    );
}

#[test]
fn exec_validation_enforces_limits_and_capabilities() {
    let c = caps(Provider::E2b); // cwd yes, env no
    let mut input = RunCommandInput {
        command: "ls".into(),
        cwd: Some("/tmp".into()),
        env: None,
    };
    assert_eq!(input.validate(&c), Ok(()));
    input.env = Some(BTreeMap::from([("A".into(), "1".into())]));
    assert_eq!(invalid_field(input.validate(&c)), "env");

    let mut c2 = caps(Provider::E2b);
    c2.supports_env = true;
    for bad in ["", "1A", "A-B", "A=B"] {
        input.env = Some(BTreeMap::from([(bad.into(), "1".into())]));
        assert_eq!(invalid_field(input.validate(&c2)), "env", "{bad:?}");
    }
    let empty = RunCommandInput {
        command: String::new(),
        ..Default::default()
    };
    assert_eq!(invalid_field(empty.validate(&c)), "command");
    // Whitespace alone is a (idle) shell command, as the document's pattern says.
    let blank = RunCommandInput {
        command: "  ".into(),
        ..Default::default()
    };
    assert!(blank.validate(&c).is_ok());
    let huge = RunCommandInput {
        command: "x".repeat(limits::MAX_COMMAND_BYTES + 1),
        ..Default::default()
    };
    assert_eq!(
        huge.validate(&c),
        Err(InputError::TooLarge {
            field: "command",
            limit: limits::MAX_COMMAND_BYTES
        })
    );
    let exact = RunCommandInput {
        command: "x".repeat(limits::MAX_COMMAND_BYTES),
        ..Default::default()
    };
    assert_eq!(exact.validate(&c), Ok(()));
}

#[test]
fn write_content_decodes_and_enforces_one_mebibyte_exactly() {
    let w = |content: String, encoding| WriteFileInput {
        path: "/a".into(),
        content,
        encoding,
    };
    assert_eq!(
        w("héllo".into(), None).decode().unwrap(),
        "héllo".as_bytes()
    );
    assert_eq!(
        w("AAEC/w==".into(), Some(FileEncoding::Base64))
            .decode()
            .unwrap(),
        [0, 1, 2, 255]
    );
    assert!(matches!(
        w("not base64!".into(), Some(FileEncoding::Base64)).decode(),
        Err(InputError::BadContent { .. })
    ));
    let exact = "a".repeat(limits::MAX_WRITE_BYTES);
    assert_eq!(
        w(exact, None).decode().unwrap().len(),
        limits::MAX_WRITE_BYTES
    );
    let over = "a".repeat(limits::MAX_WRITE_BYTES + 1);
    assert_eq!(
        w(over, None).decode(),
        Err(InputError::TooLarge {
            field: "content",
            limit: limits::MAX_WRITE_BYTES
        })
    );
    use base64::Engine as _;
    let b64 = |n| base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
    assert_eq!(
        w(b64(limits::MAX_WRITE_BYTES), Some(FileEncoding::Base64))
            .decode()
            .unwrap()
            .len(),
        limits::MAX_WRITE_BYTES
    );
    assert!(matches!(
        w(b64(limits::MAX_WRITE_BYTES + 1), Some(FileEncoding::Base64)).decode(),
        Err(InputError::TooLarge { .. })
    ));
    let no_path = WriteFileInput {
        path: String::new(),
        content: "x".into(),
        encoding: None,
    };
    assert_eq!(invalid_field(no_path.decode().map(drop)), "path");
}

#[test]
fn read_result_encodes_or_reports_non_utf8() {
    let id = SandboxId::new(Provider::Local);
    let r =
        ReadFileResult::encode(id, "/a".into(), vec![0xff, 0x00], FileEncoding::Base64).unwrap();
    assert_eq!(r.content, "/wA=");
    assert!(ReadFileResult::encode(id, "/a".into(), vec![0xff], FileEncoding::Utf8).is_none());
    let r = ReadFileResult::encode(id, "/a".into(), b"hi".to_vec(), FileEncoding::Utf8).unwrap();
    assert_eq!(r.content, "hi");
}

#[test]
fn cwd_must_be_absolute_as_the_document_says() {
    let c = caps(Provider::E2b);
    for (cwd, ok) in [
        ("/tmp", true),
        ("/", true),
        ("tmp", false),
        ("", false),
        ("/a\0b", false),
    ] {
        let input = RunCommandInput {
            command: "ls".into(),
            cwd: Some(cwd.into()),
            ..Default::default()
        };
        assert_eq!(input.validate(&c).is_ok(), ok, "{cwd:?}");
        if !ok {
            assert_eq!(invalid_field(input.validate(&c)), "cwd");
        }
    }
}

#[test]
fn a_timeout_is_any_json_integer_including_a_zero_fraction() {
    let parse = |v: serde_json::Value| serde_json::from_value::<CreateSandboxRequest>(v);
    for (body, timeout) in [
        (json!({"provider": "local", "timeout": 60}), Some(60)),
        (json!({"provider": "local", "timeout": 60.0}), Some(60)),
        (json!({"provider": "local", "timeout": null}), None),
        (json!({"provider": "local"}), None),
    ] {
        assert_eq!(parse(body.clone()).unwrap().timeout(), timeout, "{body}");
    }
    for body in [
        json!({"provider": "local", "timeout": 60.5}),
        json!({"provider": "local", "timeout": -1}),
        json!({"provider": "local", "timeout": "60"}),
    ] {
        assert!(parse(body.clone()).is_err(), "{body}");
    }
}
