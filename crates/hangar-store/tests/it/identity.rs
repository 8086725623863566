//! The database's own id, on SQLite and PostgreSQL alike.

use hangar_store::Store;
use hangar_testkit::on_both_databases;

async fn database_id_is_32_hex_digits_and_stable(store: Store) {
    let id = store.database_id().await.unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(
        id.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{id}"
    );
    assert_eq!(store.database_id().await.unwrap(), id);
}

on_both_databases!(database_id_is_32_hex_digits_and_stable);

#[tokio::test]
async fn two_databases_get_different_ids() {
    let a = hangar_testkit::sqlite_store()
        .await
        .database_id()
        .await
        .unwrap();
    let b = hangar_testkit::sqlite_store()
        .await
        .database_id()
        .await
        .unwrap();
    assert_ne!(a, b);
}

#[tokio::test]
async fn a_reopened_sqlite_file_keeps_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let url = hangar_testkit::sqlite_file_url(dir.path());
    let store = Store::open(&url).await.unwrap();
    let id = store.database_id().await.unwrap();
    store.close().await;
    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.database_id().await.unwrap(), id);
}

#[tokio::test]
async fn sqlite_syncs_every_commit_unless_the_url_says_normal() {
    let dir = tempfile::tempdir().unwrap();
    let url = hangar_testkit::sqlite_file_url(dir.path());
    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.sqlite_synchronous().await.unwrap(), Some(2), "FULL");
    store.close().await;
    let store = Store::open(&format!("{url}?synchronous=normal"))
        .await
        .unwrap();
    assert_eq!(store.sqlite_synchronous().await.unwrap(), Some(1), "NORMAL");
    store.close().await;
    let store = Store::open(&format!("{url}?mode=rw&synchronous=FULL"))
        .await
        .unwrap();
    assert_eq!(store.sqlite_synchronous().await.unwrap(), Some(2));
    store.close().await;
    let err = Store::open(&format!("{url}?synchronous=off"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("use full or normal"), "{err}");
}
