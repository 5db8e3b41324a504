//! The shared fault suite against the Runloop fake.

use corral_provider_http::reqwest::Method;
use corral_provider_runloop::fake;
use corral_provider_testkit::fake::FakeServer;
use corral_provider_testkit::faults::FaultSuite;

use crate::{ctx, provider_with};

fn suite(server: &FakeServer) -> FaultSuite<'_> {
    FaultSuite::new(server, server.base_url(), provider_with)
        .with_context(ctx())
        .create_call(Method::POST, "/v1/devboxes")
        .get_call(Method::GET, "/v1/devboxes/")
        .unknown_id("dbx_nope")
        .wrong_credential("ak_wrong")
}

corral_provider_testkit::fault_suite_tests!(world: fake::start, suite: suite);
