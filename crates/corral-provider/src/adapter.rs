//! What makes a [`SandboxProvider`] pluggable: its id, its configuration and how it is built
//! from it. The server's registration list is one line per adapter over this trait, and the
//! test harness builds adapters through it.

use std::fmt::Debug;

use corral_domain::Provider;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Result, SandboxProvider};

/// An adapter crate's provider type.
pub trait Adapter: SandboxProvider + Sized {
    /// The provider this adapter speaks to.
    const PROVIDER: Provider;

    /// Everything an operator can set for this adapter, read straight from the server's
    /// `[providers.<id>]` table. `Default` is the provider's real endpoints; implementations
    /// use `#[serde(default, deny_unknown_fields)]` so a key meant for another provider is an
    /// error at start-up. `Serialize` writes it back as such a table (tests point the server
    /// at a fake that way).
    type Config: DeserializeOwned + Serialize + Default + Clone + Debug + Send + Sync + 'static;

    /// Builds the adapter (fails only on a configuration it cannot use, e.g. a bad base URL).
    fn from_config(config: Self::Config) -> Result<Self>;
}
