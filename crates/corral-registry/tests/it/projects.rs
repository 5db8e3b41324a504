use corral_registry::RegistryError;
use corral_registry::testing::TestDb;

use crate::{on_both_backends, registry};

on_both_backends!(projects:
    projects_are_created_found_by_id_and_name_and_names_are_unique,
    migrations_run_once_when_several_replicas_start_together,
);

pub(crate) async fn projects_are_created_found_by_id_and_name_and_names_are_unique(db: &TestDb) {
    let reg = registry(db).await;
    let alpha = reg.create_project("alpha").await.unwrap();
    let beta = reg.create_project("beta").await.unwrap();
    assert_eq!(reg.project(alpha.id).await.unwrap(), alpha);
    assert_eq!(reg.project_by_name("beta").await.unwrap(), beta);
    assert!(matches!(
        reg.create_project("alpha").await,
        Err(RegistryError::Conflict { .. })
    ));
    assert!(matches!(
        reg.create_project("").await,
        Err(RegistryError::InvalidInput { .. })
    ));
    assert!(matches!(
        reg.project_by_name("gamma").await,
        Err(RegistryError::NotFound { .. })
    ));
    let names: Vec<String> = reg
        .list_projects()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(
        alpha
            .id
            .to_string()
            .parse::<corral_registry::ProjectId>()
            .unwrap(),
        alpha.id
    );
}

pub(crate) async fn migrations_run_once_when_several_replicas_start_together(db: &TestDb) {
    let starts = (0..4).map(|_| async { corral_registry::Database::connect(db.config()).await });
    let dbs = futures::future::join_all(starts).await;
    for started in &dbs {
        assert!(started.is_ok(), "a replica failed to start: {started:?}");
    }
    let first = dbs.into_iter().next().unwrap().unwrap();
    first.migrate().await.unwrap();
    first.ping().await.unwrap();
    let reg =
        corral_registry::Registry::new(first, corral_registry::MasterKey::generate().unwrap());
    reg.create_project("after-concurrent-migrations")
        .await
        .unwrap();
}
