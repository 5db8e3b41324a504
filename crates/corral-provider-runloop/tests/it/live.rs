use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider, SecretString};
use corral_provider_runloop::{RunloopConfig, RunloopProvider};

#[tokio::test]
async fn live_create_exec_delete_when_a_key_is_given() {
    let Ok(key) = std::env::var("CORRAL_LIVE_RUNLOOP_API_KEY") else {
        println!("skipped: set CORRAL_LIVE_RUNLOOP_API_KEY to run against the real Runloop API");
        return;
    };
    let runloop = RunloopProvider::new(RunloopConfig::default()).unwrap();
    let ctx = CallContext::new(Some(SecretString::from(key)), ProviderContext::default());
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Runloop, None, Some(600)),
        timeout_seconds: Some(600),
    };
    let created = runloop.create(&ctx, &spec).await.unwrap();
    let mut status = created.status;
    for _ in 0..120 {
        if status == corral_domain::SandboxStatus::Running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        status = runloop.get(&ctx, &created.native_id).await.unwrap().status;
    }
    let mut exec = ExecSpec::new("echo live");
    exec.cwd = Some("/tmp".into());
    let out = runloop.exec(&ctx, &created.native_id, &exec).await;
    runloop.delete(&ctx, &created.native_id).await.unwrap();
    assert_eq!(out.unwrap().stdout, b"live\n");
}
