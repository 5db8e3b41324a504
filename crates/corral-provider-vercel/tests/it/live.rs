use corral_domain::{CreateSandboxRequest, OperationId, Provider, ProviderContext, SandboxStatus};
use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider, SecretString};
use corral_provider_vercel::{VercelConfig, VercelProvider};

#[tokio::test]
async fn live_create_exec_files_delete_when_a_token_is_given() {
    let (Ok(token), Ok(team), Ok(project)) = (
        std::env::var("CORRAL_LIVE_VERCEL_TOKEN"),
        std::env::var("CORRAL_LIVE_VERCEL_TEAM_ID"),
        std::env::var("CORRAL_LIVE_VERCEL_PROJECT_ID"),
    ) else {
        println!(
            "skipped: set CORRAL_LIVE_VERCEL_TOKEN, CORRAL_LIVE_VERCEL_TEAM_ID and \
             CORRAL_LIVE_VERCEL_PROJECT_ID to run against the real Vercel Sandbox API"
        );
        return;
    };
    let vercel = VercelProvider::new(VercelConfig::default()).unwrap();
    let ctx = CallContext::new(
        Some(SecretString::from(token)),
        ProviderContext {
            team_id: Some(team),
            project_id: Some(project),
            ..ProviderContext::default()
        },
    );
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Vercel, None, Some(300)),
        timeout_seconds: Some(300),
    };
    let created = vercel.create(&ctx, &spec).await.unwrap();
    let mut status = created.status;
    for _ in 0..60 {
        if status == SandboxStatus::Running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        status = vercel.get(&ctx, &created.native_id).await.unwrap().status;
    }
    let out = vercel
        .exec(
            &ctx,
            &created.native_id,
            &ExecSpec::new("echo live; echo err >&2"),
        )
        .await;
    let write = vercel
        .write_file(
            &ctx,
            &created.native_id,
            "/tmp/corral-live.txt",
            b"bytes\x00\xff",
        )
        .await;
    let read = vercel
        .read_file(&ctx, &created.native_id, "/tmp/corral-live.txt", 1024)
        .await;
    vercel.delete(&ctx, &created.native_id).await.unwrap();
    let out = out.unwrap();
    assert_eq!(out.stdout, b"live\n");
    assert_eq!(out.stderr, b"err\n");
    write.unwrap();
    assert_eq!(read.unwrap(), b"bytes\x00\xff");
}
