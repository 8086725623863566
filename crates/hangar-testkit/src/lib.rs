//! Test support shared by the store, web and end-to-end suites: fresh
//! databases of both kinds, and a macro that runs one test on each.
//!
//! PostgreSQL comes from `HANGAR_TEST_POSTGRES_URL` (an admin URL of a
//! throwaway cluster; `scripts/test` starts one). Without it the PostgreSQL
//! half of every suite fails with a message saying so: it never skips.

use hangar_core::volumes::{plan_report, ReportPlan, VolumeRow};
use hangar_store::{Store, WorkerInfo};

#[cfg(feature = "browser")]
pub mod browser;
#[cfg(feature = "openbao")]
pub mod openbao;
pub mod raw;

pub const POSTGRES_URL_VAR: &str = "HANGAR_TEST_POSTGRES_URL";

/// A plain Linux worker named `name`, its state identity derived from the
/// name, with no tags, types, containers or volumes.
pub fn worker_info(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: format!("{name}-identity"),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    }
}

/// `plan` with each list sorted: the planner's order follows the rows'.
pub fn sorted_plan(mut plan: ReportPlan) -> ReportPlan {
    for list in [
        &mut plan.mark_missing,
        &mut plan.clear_missing,
        &mut plan.destroy_on_worker,
        &mut plan.delete_rows,
    ] {
        list.sort();
    }
    plan
}

/// What the report planner makes of `worker`'s rows as they are now, for
/// `listed` (sorted as [`sorted_plan`]): what any report, read or quiet,
/// must answer.
pub async fn planned_report(store: &Store, worker: &str, listed: &[String]) -> ReportPlan {
    let rows: Vec<VolumeRow> = store
        .list_volumes(Some(worker))
        .await
        .expect("list the worker's volumes")
        .into_iter()
        .map(|v| VolumeRow {
            handle: v.handle,
            state: v.state,
            parent: v.parent,
            missing_since: v.missing_since,
            // Test stores judge every row (no grace: `Store::young_volume_ms`).
            young: false,
        })
        .collect();
    sorted_plan(plan_report(&rows, listed))
}

/// A fresh in-memory SQLite store with every migration applied.
pub async fn sqlite_store() -> Store {
    Store::open("sqlite::memory:")
        .await
        .expect("open an in-memory sqlite store")
}

/// A fresh PostgreSQL database, created for this test alone, with every
/// migration applied. Returns the store and its URL (for tests that start a
/// server on it).
pub async fn postgres_store_with_url() -> (Store, String) {
    let url = postgres_database_url().await;
    let store = Store::open(&url)
        .await
        .unwrap_or_else(|e| panic!("open postgres store at {url}: {e}"));
    (store, url)
}

pub async fn postgres_store() -> Store {
    postgres_store_with_url().await.0
}

/// A fresh SQLite file database in `dir` (for tests that restart web on it).
pub fn sqlite_file_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}", dir.join("hangar.db").display())
}

/// Creates an empty database on the test cluster and returns its URL.
pub async fn postgres_database_url() -> String {
    use sqlx::Connection;
    let admin = std::env::var(POSTGRES_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_URL_VAR} is not set: the PostgreSQL half of this suite cannot run. \
             Run the suite with scripts/test, which starts a throwaway cluster, or set \
             {POSTGRES_URL_VAR} to the admin URL of one"
        )
    });
    let name = format!("hangar_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("connect to the test cluster at {admin}: {e}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    format!("{base}/{name}")
}

/// Runs one statement on the test cluster as its admin.
async fn postgres_admin(sql: &str) {
    use sqlx::Connection;
    let admin = std::env::var(POSTGRES_URL_VAR).unwrap_or_else(|_| {
        panic!("{POSTGRES_URL_VAR} is not set: run the suite with scripts/test")
    });
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("connect to the test cluster at {admin}: {e}"));
    sqlx::query(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Ends every connection to one database of the test cluster (a test
/// making the database go away under web).
pub async fn postgres_terminate_connections(database: &str) {
    postgres_admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
    ))
    .await
}

/// Renames a database of the test cluster.
pub async fn postgres_rename_database(from: &str, to: &str) {
    postgres_admin(&format!("ALTER DATABASE {from} RENAME TO {to}")).await
}

/// Defines each listed `async fn name(store: Store)` test twice, once per
/// database: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_both_databases {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::sqlite_store().await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::postgres_store().await).await
                }
            )*
        }
    };
}
