//! Corral without the server: the registry, the idempotency store, the `local` provider and
//! the use cases, driven from plain Rust. Run it with
//! `cargo run -p corral-example-embedded`.
#![allow(clippy::print_stdout)] // An example reports on stdout.

use std::collections::BTreeMap;
use std::sync::Arc;

use corral_domain::{
    CreateSandboxRequest, Provider, ReadFileInput, RunCommandInput, WriteFileInput,
};
use corral_idempotency::{IdempotencyConfig, IdempotencyStore};
use corral_provider::{ExposeSecret as _, SandboxProvider};
use corral_provider_local::{LocalConfig, LocalProvider};
use corral_registry::{Database, DatabaseConfig, MasterKey, Registry};
use corral_service::{InlineAccess, Service, ServiceConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A program that runs `local` sandboxes is also their init: when started as one, it is
    // that and nothing else (checked before any thread exists).
    corral_provider_local::run_init_if_requested();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("corral.db").display());
    let db = Database::connect(DatabaseConfig::new(url)).await?;
    let registry = Registry::new(db.clone(), MasterKey::generate()?);
    let store = IdempotencyStore::new(db, IdempotencyConfig::default());

    let mut config = LocalConfig::new(dir.path().join("sandboxes"));
    config.init = Some(corral_provider_local::InitProgram::current_exe()?);
    let local = LocalProvider::new(config)?;
    if let Some(why) = local.unavailable_reason() {
        println!("the local provider cannot run here: {why}");
        return Ok(());
    }
    let mut providers: BTreeMap<Provider, Arc<dyn SandboxProvider>> = BTreeMap::new();
    providers.insert(Provider::Local, Arc::new(local));
    let service = Service::new(providers, registry.clone(), store, ServiceConfig::default());

    let project = registry.create_project("example").await?;
    let key = registry.issue_api_key(project.id).await?;
    let caller = service
        .authenticate(Some(&format!("Bearer {}", key.key.expose_secret())))
        .await?;

    let request = CreateSandboxRequest::standard(Provider::Local, None, None);
    let created = service
        .create(&caller, InlineAccess::default(), Some("example-1"), request)
        .await?;
    let sandbox: corral_domain::Sandbox = serde_json_from(&created.body)?;
    let id = sandbox.id.to_string();
    println!("created {id} ({})", sandbox.status);

    let write = WriteFileInput {
        path: "/workspace/hello.txt".into(),
        content: "hello from an embedded Corral\n".into(),
        encoding: None,
    };
    service
        .write_file(&caller, InlineAccess::default(), &id, write)
        .await?;
    let ran = service
        .exec(
            &caller,
            InlineAccess::default(),
            &id,
            RunCommandInput {
                command: "cat /workspace/hello.txt; uname -s".into(),
                ..RunCommandInput::default()
            },
        )
        .await?;
    print!("{}", ran.stdout);
    let read = service
        .read_file(
            &caller,
            InlineAccess::default(),
            &id,
            ReadFileInput {
                path: "/workspace/hello.txt".into(),
                encoding: None,
            },
        )
        .await?;
    assert_eq!(read.content, "hello from an embedded Corral\n");
    let page = service.list(&caller, None, None).await?;
    println!("{} sandbox(es) in the registry", page.items.len());
    let gone = service
        .delete(&caller, InlineAccess::default(), &id)
        .await?;
    println!("deleted: status {}", gone.status);
    Ok(())
}

/// The create answer is the exact JSON body the HTTP API would send.
fn serde_json_from(body: &str) -> Result<corral_domain::Sandbox, Box<dyn std::error::Error>> {
    Ok(serde_json::from_str(body)?)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_example_runs_without_the_server() {
        super::run().await.unwrap();
    }
}
