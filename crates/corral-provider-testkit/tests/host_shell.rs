//! The suite checks itself: it passes against the host-shell double, whose files go through the
//! port's files-through-exec helper (with 4 KiB commands, so chunking is exercised).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers report by panicking.

use corral_provider::{CallContext, SandboxProvider};
use corral_provider_testkit::Conformance;
use corral_provider_testkit::host_shell::HostShellProvider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_against_the_host_shell_double() {
    let provider = HostShellProvider::new();
    Conformance::new(&provider).run_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_via_exec_round_trips_a_full_mebibyte_in_chunks() {
    let provider = HostShellProvider::new();
    let suite = Conformance::new(&provider);
    let (id, _) = suite.create_running().await;
    let ctx = CallContext::anonymous();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin").to_string_lossy().into_owned();
    let content: Vec<u8> = (0..corral_domain::limits::MAX_WRITE_BYTES)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    provider
        .write_file(&ctx, &id, &path, &content)
        .await
        .unwrap();
    let back = provider
        .read_file(&ctx, &id, &path, content.len())
        .await
        .unwrap();
    assert_eq!(back.len(), content.len());
    assert!(back == content);
    // Paths with quotes and spaces are quoted, not interpreted.
    let odd = dir
        .path()
        .join("it's a $file")
        .to_string_lossy()
        .into_owned();
    provider.write_file(&ctx, &id, &odd, b"odd").await.unwrap();
    assert_eq!(
        provider.read_file(&ctx, &id, &odd, 10).await.unwrap(),
        b"odd"
    );
}
