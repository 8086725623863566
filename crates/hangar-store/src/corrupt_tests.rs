//! A value the store cannot read back, written behind its back with raw
//! SQL, comes out of the public API as `StoreError::Corrupt` naming the
//! table, the row and the column, on both databases.

use hangar_core::volumes::{OwnerKind, Strategy};

use crate::test_db::{postgres_store, sqlite_store, worker_info};
use crate::{NewVolume, Store, StoreError, WorkerInfo};

const T0: i64 = 1_700_000_000_000;

async fn worker_with_a_volume(store: &Store) {
    store
        .register_worker(
            &WorkerInfo {
                tags: vec!["t".into()],
                ..worker_info("w1")
            },
            T0,
        )
        .await
        .unwrap();
    store
        .create_volume_row(
            &NewVolume {
                handle: "v1".into(),
                worker: "w1".into(),
                parent: None,
                owner_kind: OwnerKind::Container,
                owner_id: None,
                strategy: Strategy::Empty,
            },
            T0,
        )
        .await
        .unwrap();
}

async fn raw(store: &Store, sql: &str) {
    sqlx::query(sql).execute(&store.pool).await.unwrap();
}

fn corrupt_message<T: std::fmt::Debug>(read: Result<T, StoreError>) -> String {
    match read {
        Err(StoreError::Corrupt(message)) => message,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

async fn an_unknown_enum_word_is_corrupt_naming_table_row_and_column(store: Store) {
    worker_with_a_volume(&store).await;
    raw(
        &store,
        "UPDATE volumes SET state = 'melted' WHERE handle = 'v1'",
    )
    .await;
    let message = corrupt_message(store.get_volume("v1").await);
    assert!(
        message.contains("volumes row handle \"v1\", column state") && message.contains("melted"),
        "{message}"
    );
    let message = corrupt_message(store.list_volumes(None).await);
    assert!(message.contains("column state"), "{message}");

    raw(
        &store,
        "UPDATE workers SET state = 'dozing' WHERE name = 'w1'",
    )
    .await;
    let message = corrupt_message(store.get_worker("w1").await);
    assert!(
        message.contains("workers row name \"w1\", column state") && message.contains("dozing"),
        "{message}"
    );
}

async fn malformed_json_is_corrupt_naming_table_row_and_column(store: Store) {
    worker_with_a_volume(&store).await;
    raw(
        &store,
        "UPDATE workers SET tags = '[\"t\",' WHERE name = 'w1'",
    )
    .await;
    let message = corrupt_message(store.get_worker("w1").await);
    assert!(
        message.contains("workers row name \"w1\", column tags"),
        "{message}"
    );
    let message = corrupt_message(store.list_workers().await);
    assert!(message.contains("column tags"), "{message}");
}

#[tokio::test]
async fn sqlite_an_unknown_enum_word_is_corrupt_naming_table_row_and_column() {
    an_unknown_enum_word_is_corrupt_naming_table_row_and_column(sqlite_store().await).await
}

#[tokio::test]
async fn postgres_an_unknown_enum_word_is_corrupt_naming_table_row_and_column() {
    an_unknown_enum_word_is_corrupt_naming_table_row_and_column(postgres_store().await).await
}

#[tokio::test]
async fn sqlite_malformed_json_is_corrupt_naming_table_row_and_column() {
    malformed_json_is_corrupt_naming_table_row_and_column(sqlite_store().await).await
}

#[tokio::test]
async fn postgres_malformed_json_is_corrupt_naming_table_row_and_column() {
    malformed_json_is_corrupt_naming_table_row_and_column(postgres_store().await).await
}
