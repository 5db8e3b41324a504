//! The configuration: the file, the environment and the flags resolved into `Settings`
//! (`corral::config`), each section's defaults and checks.

use std::path::PathBuf;
use std::time::Duration;

use corral::config::*;
use corral_domain::Provider;
use corral_web::request_log::{RequestLogConfig, RequestLogMode};

fn parse(text: &str) -> Result<Settings, ConfigError> {
    let fc: FileConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
    resolve(fc, &Overrides::default(), &Provider::ALL)
}

#[test]
fn defaults_run_the_embedded_default() {
    let s = parse("").unwrap();
    assert_eq!(s.listen, "127.0.0.1:8080");
    assert_eq!(s.data_dir, PathBuf::from(".corral"));
    assert_eq!(s.database_url, "sqlite://.corral/corral.db");
    assert_eq!(s.exec_deadline, Duration::from_secs(300));
    assert!(s.enabled.contains(&Provider::Local));
    assert_eq!(s.control.public_url, "http://127.0.0.1:8080");
    assert!(s.control.smtp.is_none() && s.control.email_webhook_secret.is_none());
}

#[test]
fn mcp_origins_start_with_the_public_urls_and_are_checked() {
    let s = parse("").unwrap();
    assert_eq!(s.mcp_allowed_origins, ["http://127.0.0.1:8080"]);
    let s = parse(
        "[control]\npublic_url = \"https://Corral.example.com:443/x\"\n[mcp]\nallowed_origins = [\"http://localhost:6274\", \"https://corral.example.com\"]",
    )
    .unwrap();
    assert_eq!(
        s.mcp_allowed_origins,
        ["https://corral.example.com", "http://localhost:6274"]
    );
    assert!(parse("[mcp]\nallowed_origins = [\"https://a.example/path\"]").is_err());
    assert!(parse("[mcp]\nallowed_origins = [\"*\"]").is_err());
    assert!(parse("[mcp]\nallowed = []").is_err());
}

#[test]
fn control_section_is_read_and_checked() {
    let s = parse("listen = \"0.0.0.0:9\"").unwrap();
    assert_eq!(s.control.public_url, "http://127.0.0.1:9");
    let s = parse(
        "[control]\npublic_url = \"https://corral.example.com/\"\nsession_idle_seconds = 60\n[control.smtp]\nhost = \"127.0.0.1\"\nport = 2525\npassword = \"hunter2-hunter2\"\nfrom = \"c@example.com\"",
    )
    .unwrap();
    assert_eq!(s.control.public_url, "https://corral.example.com");
    assert_eq!(s.control.session_idle, Duration::from_secs(60));
    let smtp = s.control.smtp.unwrap();
    assert_eq!((smtp.host.as_str(), smtp.port), ("127.0.0.1", Some(2525)));
    assert!(!format!("{smtp:?}").contains("hunter2"));
    assert!(parse("[control]\npublic_url = \"ftp://x\"").is_err());
    assert!(parse("[control]\npublic_url = \"not a url\"").is_err());
    assert!(parse("[control]\nsession_idle_seconds = 0").is_err());
    assert_eq!(s.control.password_hashing_threads, 2);
    let threads = parse("[control]\npassword_hashing_threads = 4").unwrap();
    assert_eq!(threads.control.password_hashing_threads, 4);
    assert!(parse("[control]\npassword_hashing_threads = 0").is_err());
    assert!(parse("[control]\npublik_url = \"http://x\"").is_err());
    assert!(parse("[control.smtp]\nhost = \"h\"\nfrom = \"f@x\"\nsecurity = \"ssl\"").is_err());
}

#[test]
fn http_section_defaults_from_the_descriptor_limit_and_is_checked() {
    let at = |text: &str, nofile| http(&toml::from_str(text).unwrap(), nofile);
    let d = at("", 1024).unwrap();
    assert_eq!(
        (d.max_connections, d.max_connections_per_address),
        (512, 32)
    );
    assert_eq!(d.unauthenticated_body, Duration::from_secs(10));
    assert!(d.trusted_proxies.is_empty());
    let c = at(
        "max_connections = 100
unauthenticated_body_seconds = 3
trusted_proxies = [\"10.0.0.0/8\", \"::1\"]",
        1024,
    )
    .unwrap();
    assert_eq!(
        (c.max_connections, c.max_connections_per_address),
        (100, 32)
    );
    assert_eq!(c.unauthenticated_body, Duration::from_secs(3));
    assert_eq!(c.trusted_proxies.len(), 2);
    assert_eq!(
        at("max_connections = 10", 1024)
            .unwrap()
            .max_connections_per_address,
        10
    );
    for bad in [
        "max_connections = 1024",
        "max_connections = 0",
        "max_connections = 10\nmax_connections_per_address = 11",
        "unauthenticated_body_seconds = 0",
        "trusted_proxies = [\"lb.internal\"]",
    ] {
        assert!(at(bad, 1024).is_err(), "{bad}");
    }
    assert!(
        parse("[http]\nmax_connection = 5").is_err(),
        "unknown keys are refused"
    );
}

#[test]
fn request_log_defaults_to_sampled_and_its_keys_are_checked() {
    let at = |text: &str| http(&toml::from_str(text).unwrap(), 1024);
    let d = at("").unwrap().request_log;
    assert_eq!(d, RequestLogConfig::default());
    assert_eq!(
        (d.mode, d.sample_one_in, d.slow),
        (RequestLogMode::Sampled, 100, Duration::from_secs(5))
    );
    let c = at("request_log = \"all\"\nrequest_log_sample = 7\nslow_request_ms = 250")
        .unwrap()
        .request_log;
    assert_eq!(
        (c.mode, c.sample_one_in, c.slow),
        (RequestLogMode::All, 7, Duration::from_millis(250))
    );
    assert_eq!(
        at("request_log = \"off\"").unwrap().request_log.mode,
        RequestLogMode::Off
    );
    for bad in [
        "request_log = \"every\"",
        "request_log_sample = 0",
        "slow_request_ms = 0",
    ] {
        assert!(at(bad).is_err(), "{bad}");
    }
}

#[test]
fn flags_override_the_file() {
    let fc: FileConfig = toml::from_str("listen = \"0.0.0.0:1\"\ndata_dir = \"/a\"").unwrap();
    let s = resolve(
        fc,
        &Overrides {
            listen: Some("127.0.0.1:2".into()),
            data_dir: None,
            database_url: Some("postgres://db/corral".into()),
        },
        &Provider::ALL,
    )
    .unwrap();
    assert_eq!(s.listen, "127.0.0.1:2");
    assert_eq!(s.data_dir, PathBuf::from("/a"));
    assert_eq!(s.database_url, "postgres://db/corral");
}

#[test]
fn unknown_keys_providers_and_sections_are_refused() {
    assert!(parse("lisen = \"x\"").is_err());
    assert!(parse("[providers]\nenabled = [\"aws\"]").is_err());
    assert!(parse("[providers.aws]\nbase_url = \"http://x\"").is_err());
    assert!(parse("[providers.local]\nroot = \"/x\"").is_err());
    let s = parse("[providers]\nenabled = [\"local\", \"e2b\"]\n[providers.e2b]\nbase_url = \"http://127.0.0.1:9\"\n[bridge]\nallow = [\"b.example:443\"]\n[limits]\nexec_deadline_seconds = 5").unwrap();
    assert_eq!(s.enabled, [Provider::Local, Provider::E2b]);
    assert_eq!(
        s.providers["e2b"]["base_url"].as_str(),
        Some("http://127.0.0.1:9")
    );
    assert_eq!(s.bridge_allow, ["b.example:443"]);
    assert_eq!(s.exec_deadline, Duration::from_secs(5));
}

#[test]
fn only_the_providers_built_in_may_be_enabled_or_configured_and_they_are_the_default() {
    let built_in = [Provider::Local, Provider::Morph];
    let resolve_with = |text: &str| {
        let fc: FileConfig = toml::from_str(text).unwrap();
        resolve(fc, &Overrides::default(), &built_in)
    };
    assert_eq!(resolve_with("").unwrap().enabled, built_in);
    let err = resolve_with("[providers]\nenabled = [\"e2b\"]").unwrap_err();
    assert!(err.0.contains("not built into this binary"), "{err}");
    assert!(resolve_with("[providers.e2b]\nbase_url = \"http://x\"").is_err());
    assert!(resolve_with("[providers.morph]\nbase_url = \"http://x\"").is_ok());
}

#[test]
fn exec_caps_default_to_32_per_project_and_256_per_server_and_0_switches_one_off() {
    use corral_service::limiter::ExecConcurrency;
    let s = parse("").unwrap();
    assert_eq!(s.exec_concurrency, ExecConcurrency::standard());
    assert_eq!(
        (s.exec_concurrency.per_project, s.exec_concurrency.total),
        (Some(32), Some(256))
    );
    let s =
        parse("[limits]\nmax_concurrent_execs_per_project = 4\nmax_concurrent_execs = 0").unwrap();
    assert_eq!(
        s.exec_concurrency,
        ExecConcurrency {
            per_project: Some(4),
            total: None
        }
    );
    assert!(parse("[limits]\nmax_concurrent_execs = -1").is_err());
    let s = parse("[local]\nexec_threads = 3\nexec_queue_wait_seconds = 1").unwrap();
    assert_eq!(
        (s.local.exec_threads, s.local.exec_queue_wait_seconds),
        (Some(3), Some(1))
    );
    assert!(parse("[local]\nexec_threads = 0").is_err());
}

#[test]
fn local_images_networking_and_capacity_are_read_and_checked() {
    let s = parse(
        "[local]\nnetwork = true\nnetwork_allow = [\"10.1.0.0/16\"]\ndns_upstream = \"1.1.1.1\"\n\
         [local.images]\ntools = { dir = \"/srv/tools\" }\ndebian = { oci = \"/srv/oci\", tag = \"12\" }\n\
         [local.capacity]\nsandboxes_per_project = 4\nproject_memory_mib = 2048",
    )
    .unwrap();
    assert_eq!(s.local.network, Some(true));
    let images = s.local.images.unwrap();
    assert_eq!(images["debian"].tag.as_deref(), Some("12"));
    assert_eq!(s.local.capacity.unwrap().sandboxes_per_project, Some(4));
    assert!(parse("[local.images]\nx = { dir = \"/a\", oci = \"/b\" }").is_err());
    assert!(parse("[local.images]\nx = {}").is_err());
    assert!(parse("[local]\nnetwork_allow = [\"10.1.0.0/33\"]").is_err());
    assert!(parse("[local]\ndns_upstream = \"resolver\"").is_err());
    assert!(parse("[local.capacity]\nunknown = 1").is_err());
}

/// The unguarded host network is not offered by a server (its tenants would share the host's
/// loopback): `allow_network = true` is refused at start and points at guarded networking.
#[test]
fn the_unguarded_host_network_is_refused_with_the_guarded_mode_named() {
    let err = parse("[local]\nallow_network = true\n").unwrap_err();
    assert!(err.0.contains("network_allow"), "{}", err.0);
    assert!(err.0.contains("loopback"), "{}", err.0);
    // Saying `false` is harmless.
    let s = parse("[local]\nallow_network = false\n").unwrap();
    assert_eq!(s.local.allow_network, Some(false));
}
