//! Fresh databases for the store's own unit tests, which reach the pool
//! with raw SQL (`hangar-testkit` serves the integration tests; it links
//! another copy of this crate, so its stores do not fit here).

use sqlx::Connection;

use crate::{Store, WorkerInfo};

/// A new, empty database on the cluster `HANGAR_TEST_POSTGRES_URL` names.
pub(crate) async fn postgres_store() -> Store {
    let admin = std::env::var("HANGAR_TEST_POSTGRES_URL").expect(
        "HANGAR_TEST_POSTGRES_URL is not set: run the suite with scripts/test, which starts a throwaway cluster",
    );
    let name = format!(
        "hangar_unit_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Store::open(&format!("{base}/{name}")).await.unwrap()
}

/// A new SQLite database in memory.
pub(crate) async fn sqlite_store() -> Store {
    Store::open("sqlite::memory:").await.unwrap()
}

/// A plain linux worker named `name`, as the store's unit tests register
/// one.
pub(crate) fn worker_info(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: "i".into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    }
}
