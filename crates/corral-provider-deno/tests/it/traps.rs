//! What distinguishes the `deno` kind: its id and capabilities on the same contract.

use corral_domain::{ImageMode, Provider, TimeoutMode};
use corral_provider::{Adapter, SandboxProvider};
use corral_provider_deno::DenoProvider;
use corral_provider_deno::fake::Fake;

#[test]
fn the_kind_is_deno_with_image_and_lifetime_set_in_the_bridge() {
    let p = DenoProvider::from_config(Default::default()).unwrap();
    let caps = p.capabilities();
    assert_eq!(p.provider(), Provider::Deno);
    assert_eq!(caps.provider, Provider::Deno);
    assert_eq!(caps.image_mode, ImageMode::Fixed);
    assert_eq!(caps.timeout_mode, TimeoutMode::ProviderManaged);
    assert_eq!(caps.pricing.source_url, "https://deno.com/deploy/pricing");
    assert!(!caps.supports_persistent_resume);
}

#[tokio::test]
async fn a_bridge_with_only_the_worker_routes_serves_this_kind_but_cannot_find_lost_creates() {
    Fake::check_plain_bridge_serves_the_kind_but_cannot_find_lost_creates().await;
}

#[tokio::test]
async fn a_bridge_with_only_the_worker_routes_runs_commands_through_the_exec_wrapper() {
    Fake::check_plain_bridge_runs_commands_through_the_exec_wrapper().await;
}

#[tokio::test]
async fn a_command_with_stdin_on_a_bridge_whose_processes_take_none_goes_through_the_exec_wrapper()
{
    Fake::check_stdin_refused_by_the_bridge_goes_through_the_exec_wrapper().await;
}

#[test]
fn commands_are_the_bridges_processes_with_stdin_every_signal_and_offsets() {
    let p = DenoProvider::from_config(Default::default()).unwrap();
    let caps = &p.capabilities().commands;
    assert!(caps.stdin && !caps.emulated);
    assert_eq!(caps.signals, corral_domain::Signal::ALL);
    assert_eq!(caps.resume, corral_domain::CommandResume::ProviderOffset);
}

#[tokio::test]
async fn a_bridge_without_the_lifecycle_extension_answers_unsupported_naming_it() {
    Fake::check_bridge_without_the_lifecycle_extension_answers_unsupported().await;
}

#[test]
fn no_lifecycle_operation_is_advertised() {
    let p = DenoProvider::from_config(Default::default()).unwrap();
    let caps = p.capabilities();
    assert!(!caps.supports_explicit_stop && !caps.supports_snapshots && !caps.supports_restore);
}
