//! Helpers the adapters' own tests share: a create spec, an adapter pointed at its fake, a
//! keyed call context, and a command's events read to their end.

use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, OutputStream, Provider, ProviderContext};
use corral_provider::{
    Adapter, CallContext, CommandEvent, CommandEvents, CreateSpec, SecretString,
};
use corral_provider_http::HttpConfig;
use futures::StreamExt as _;

use crate::harness::Harness;

/// How long [`drain`] waits for the next event.
const EVENT_WITHIN: Duration = Duration::from_secs(30);

/// A create of `provider`'s standard request with `image` and lifetime `timeout` (seconds),
/// under a fresh operation id.
pub fn spec(provider: Provider, image: Option<&str>, timeout: Option<u64>) -> CreateSpec {
    CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(provider, image.map(Into::into), timeout),
        timeout_seconds: timeout,
    }
}

/// A fresh fake, the adapter pointed at it (bare, without the contract wrapper) and a context
/// the fake accepts.
pub async fn setup<H: Harness>() -> (H, H::Adapter, CallContext) {
    let fake = H::start().await;
    let config = fake.config_at(&fake.base_url(), HttpConfig::default());
    let provider = H::Adapter::from_config(config)
        .unwrap_or_else(|e| panic!("{}: the adapter cannot be built: {e}", H::Adapter::PROVIDER));
    let ctx = fake.context();
    (fake, provider, ctx)
}

/// A context with `credential` and no routing context.
pub fn ctx(credential: &str) -> CallContext {
    CallContext::new(
        Some(SecretString::from(credential)),
        ProviderContext::default(),
    )
}

/// Every event of `events` until the stream ends, each within 30 seconds; a failed event
/// fails the test.
pub async fn drain(mut events: CommandEvents<'_>) -> Vec<CommandEvent> {
    let mut all = Vec::new();
    while let Some(event) = tokio::time::timeout(EVENT_WITHIN, events.next())
        .await
        .unwrap_or_else(|_| panic!("no event within {EVENT_WITHIN:?}; so far {all:?}"))
    {
        all.push(event.unwrap_or_else(|e| panic!("the command's stream failed: {e}")));
    }
    all
}

/// The bytes of `stream` in `events`, in order.
pub fn output_of(events: &[CommandEvent], stream: OutputStream) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e {
            CommandEvent::Output {
                stream: s, data, ..
            } if *s == stream => Some(data.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}
