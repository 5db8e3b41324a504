//! Get, list, delete, exec and files against the contract, provider calls counted.

use corral_domain::{
    CreateSandboxRequest, FileEncoding, Provider, ReadFileInput, RunCommandInput, Sandbox,
    WriteFileInput,
};
use corral_errors::ErrorCode;
use corral_provider::{CallContext, SandboxProvider as _};
use corral_service::InlineAccess;

use crate::support::World;

async fn created(w: &World) -> Sandbox {
    let caller = w.caller().await;
    let c = w
        .service
        .create(
            &caller,
            InlineAccess::default(),
            None,
            CreateSandboxRequest::standard(Provider::Local, None, None),
        )
        .await
        .unwrap();
    serde_json::from_str(&c.body).unwrap()
}

fn run(command: &str) -> RunCommandInput {
    serde_json::from_value(serde_json::json!({ "command": command })).unwrap()
}

fn read(path: &str) -> ReadFileInput {
    serde_json::from_value(serde_json::json!({ "path": path })).unwrap()
}

fn write(path: &str, content: &str) -> WriteFileInput {
    serde_json::from_value(serde_json::json!({ "path": path, "content": content })).unwrap()
}

#[tokio::test]
async fn a_tombstone_is_returned_by_get_and_delete_and_refuses_exec_and_files_without_calls() {
    let w = World::new().await;
    let sbx = created(&w).await;
    let id = sbx.id.to_string();
    let caller = w.caller().await;
    let tomb = w
        .service
        .delete(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(tomb.status.as_str(), "deleted");
    let calls = w.double.total();
    let again = w
        .service
        .delete(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(
        again, tomb,
        "delete of a tombstone answers the same tombstone"
    );
    let got = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(got, tomb);
    let e = w
        .service
        .exec(&caller, InlineAccess::default(), &id, run("true"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
    let e = w
        .service
        .read_file(&caller, InlineAccess::default(), &id, read("/etc/hostname"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
    let e = w
        .service
        .write_file(&caller, InlineAccess::default(), &id, write("x", "y"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
    assert_eq!(w.double.total(), calls, "no provider call after the delete");
}

#[tokio::test]
async fn a_sandbox_the_provider_lost_is_recorded_expired_and_then_not_found_for_exec() {
    let w = World::new().await;
    let sbx = created(&w).await;
    let id = sbx.id.to_string();
    let native = sbx.metadata.native_provider_id.clone().unwrap();
    w.double
        .delete(&CallContext::anonymous(), &native)
        .await
        .unwrap();
    let caller = w.caller().await;
    let got = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(got.status.as_str(), "expired");
    let page = w.service.list(&caller, None, None).await.unwrap();
    assert_eq!(page.items[0].status.as_str(), "expired", "recorded");
    let gets = w.double.count("get");
    let again = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(again.status.as_str(), "expired");
    assert_eq!(
        w.double.count("get"),
        gets,
        "expired is final: no provider call"
    );
    let e = w
        .service
        .exec(&caller, InlineAccess::default(), &id, run("true"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
    // Delete still records the tombstone.
    let tomb = w
        .service
        .delete(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(tomb.status.as_str(), "deleted");
}

#[tokio::test]
async fn exec_on_a_sandbox_the_provider_lost_is_not_found_and_recorded_expired() {
    let w = World::new().await;
    let sbx = created(&w).await;
    let id = sbx.id.to_string();
    let native = sbx.metadata.native_provider_id.clone().unwrap();
    w.double
        .delete(&CallContext::anonymous(), &native)
        .await
        .unwrap();
    let caller = w.caller().await;
    let e = w
        .service
        .write_file(&caller, InlineAccess::default(), &id, write("a.txt", "hi"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::SandboxNotFound);
    let page = w.service.list(&caller, None, None).await.unwrap();
    assert_eq!(page.items[0].status.as_str(), "expired");
}

#[tokio::test]
async fn list_never_calls_a_provider() {
    let w = World::new().await;
    for _ in 0..3 {
        created(&w).await;
    }
    let caller = w.caller().await;
    let calls = w.double.total();
    let page = w.service.list(&caller, None, Some(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let cursor = page.next_cursor.clone().unwrap();
    let rest = w
        .service
        .list(&caller, Some(&cursor), Some(2))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert!(rest.next_cursor.is_none());
    assert_eq!(w.double.total(), calls);
}

#[tokio::test]
async fn exec_and_files_round_trip_on_a_live_sandbox() {
    let w = World::new().await;
    let id = created(&w).await.id.to_string();
    let caller = w.caller().await;
    let svc = &w.service;
    let none = InlineAccess::default;
    svc.write_file(&caller, none(), &id, write("a.txt", "hello"))
        .await
        .unwrap();
    let r = svc
        .read_file(&caller, none(), &id, read("a.txt"))
        .await
        .unwrap();
    assert_eq!(
        (r.content.as_str(), r.encoding),
        ("hello", FileEncoding::Utf8)
    );
    let out = svc
        .exec(&caller, none(), &id, run("cat a.txt"))
        .await
        .unwrap();
    assert_eq!((out.stdout.as_str(), out.exit_code), ("hello", 0));
}

/// A get that sees the recorded status again writes it (moving `statusObservedAt`) at most
/// once a second; the registry still tells the observation's age.
#[tokio::test]
async fn an_unchanged_status_is_written_again_only_once_its_observation_is_a_second_old() {
    use crate::support::Setup;
    let w = World::with(Setup {
        manual_clock: true,
        ..Setup::default()
    })
    .await;
    let sbx = created(&w).await;
    let id = sbx.id.to_string();
    let caller = w.caller().await;
    let observed = |w: &World| {
        let id = sbx.id;
        let project = caller.project_id();
        let registry = w.registry.clone();
        async move {
            registry
                .sandbox(project, id)
                .await
                .unwrap()
                .unwrap()
                .status_observed_at
        }
    };
    let first = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    let t1 = observed(&w).await;
    assert_eq!(first.status_observed_at, Some(t1));

    w.clock.advance(std::time::Duration::from_millis(600));
    let second = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    assert_eq!(second.status, first.status);
    assert_eq!(
        observed(&w).await,
        t1,
        "not written again within the second"
    );
    assert_eq!(second.status_observed_at, Some(t1));

    w.clock.advance(std::time::Duration::from_millis(500));
    let third = w
        .service
        .get(&caller, InlineAccess::default(), &id)
        .await
        .unwrap();
    let t3 = observed(&w).await;
    assert!(t3 > t1, "written again after a second: {t1} then {t3}");
    assert_eq!(third.status_observed_at, Some(t3));
    assert_eq!(
        w.double.count("get"),
        3,
        "every get still asks the provider"
    );
}
