//! What distinguishes the `cloudflare` kind: its id and capabilities on the same contract.

use corral_domain::{
    CreateSandboxRequest, ImageMode, OperationId, Provider, SandboxStatus, TimeoutMode,
};
use corral_provider::{Adapter, CreateSpec, ExecSpec, SandboxProvider};
use corral_provider_cloudflare::CloudflareProvider;
use corral_provider_cloudflare::fake::Fake;

#[test]
fn the_kind_is_cloudflare_with_image_and_lifetime_set_in_the_bridge() {
    let p = CloudflareProvider::from_config(Default::default()).unwrap();
    let caps = p.capabilities();
    assert_eq!(p.provider(), Provider::Cloudflare);
    assert_eq!(caps.provider, Provider::Cloudflare);
    assert_eq!(caps.image_mode, ImageMode::Fixed);
    assert_eq!(caps.timeout_mode, TimeoutMode::ProviderManaged);
    assert_eq!(
        caps.pricing.source_url,
        "https://developers.cloudflare.com/containers/pricing/"
    );
    assert!(!caps.supports_persistent_resume);
}

#[tokio::test]
async fn a_bridge_with_only_the_worker_routes_serves_this_kind_but_cannot_find_lost_creates() {
    let fake = Fake::start_plain().await;
    let p = CloudflareProvider::from_config(fake.config()).unwrap();
    let ctx = fake.context();
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Cloudflare, None, None),
        timeout_seconds: None,
    };
    let created = p.create(&ctx, &spec).await.unwrap();
    assert_eq!(
        p.get(&ctx, &created.native_id).await.unwrap().status,
        SandboxStatus::Running
    );
    let out = p
        .exec(&ctx, &created.native_id, &ExecSpec::new("echo hi; exit 4"))
        .await
        .unwrap();
    assert_eq!((out.stdout.as_slice(), out.exit_code), (&b"hi\n"[..], 4));
    let err = p
        .find_by_operation_id(&ctx, &spec.operation_id)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            corral_provider::ProviderError::Unsupported {
                provider: Provider::Cloudflare,
                ..
            }
        ),
        "{err:?}"
    );
}
