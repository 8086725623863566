//! The write probe, a SQLite file deleted or replaced under a running store,
//! and the marker that keeps web from silently starting an empty database.

use std::path::Path;
use std::time::Duration;

use hangar_store::{Store, StoreError};
use hangar_testkit::on_both_databases;
use sqlx::Connection;

const T0: i64 = 1_700_000_000_000;
const PROBE: Duration = Duration::from_secs(5);

fn url_of(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn marker_of(path: &Path) -> std::path::PathBuf {
    path.with_file_name(format!(
        "{}.id",
        path.file_name().unwrap().to_str().unwrap()
    ))
}

/// Removes a SQLite database with its WAL and shared-memory files.
fn remove_database(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", path.display());
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("remove {p}: {e}"),
        }
    }
}

fn lost_reason(result: Result<(), StoreError>) -> String {
    match result {
        Err(StoreError::Lost(reason)) => reason,
        other => panic!("expected the database to be lost, got {other:?}"),
    }
}

async fn a_healthy_database_takes_the_probe_again_and_again(store: Store) {
    for i in 0..3 {
        store.probe(T0 + i, PROBE).await.unwrap();
    }
    store.check_file().unwrap();
    assert_eq!(store.lost(), None);
}

on_both_databases!(a_healthy_database_takes_the_probe_again_and_again);

#[tokio::test]
async fn a_deleted_sqlite_file_is_lost_for_good_and_takes_no_more_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    store.probe(T0, PROBE).await.unwrap();
    store
        .create_build("before", None, "[]", "{}", T0)
        .await
        .unwrap();

    remove_database(&path);
    let reason = lost_reason(store.check_file());
    assert!(reason.contains("deleted"), "{reason}");
    assert!(lost_reason(store.probe(T0 + 1, PROBE).await).contains("deleted"));
    // Every later write fails: nothing goes into the unlinked file.
    assert!(store
        .create_build("after", None, "[]", "{}", T0 + 2)
        .await
        .is_err());
    // Lost stays lost, even when a file appears at the path again.
    std::fs::write(&path, b"").unwrap();
    assert!(lost_reason(store.check_file()).contains("deleted"));
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing written to the new file"
    );
}

#[tokio::test]
async fn a_sqlite_file_replaced_under_the_store_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let other = dir.path().join("other.db");
    Store::open(&url_of(&other)).await.unwrap().close().await;
    let store = Store::open(&url_of(&path)).await.unwrap();
    store.probe(T0, PROBE).await.unwrap();
    std::fs::rename(&other, &path).unwrap();
    let reason = lost_reason(store.probe(T0 + 1, PROBE).await);
    assert!(reason.contains("replaced"), "{reason}");
    assert!(store.list_builds(10).await.is_err());
}

#[tokio::test]
async fn a_sqlite_file_answering_with_another_id_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    let id = store.database_id().await.unwrap();
    // Same file, other content: as if another database were copied over it.
    let mut conn = sqlx::SqliteConnection::connect(&url_of(&path))
        .await
        .unwrap();
    sqlx::query("UPDATE database_identity SET id = 'ffffffffffffffffffffffffffffffff'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let reason = lost_reason(store.probe(T0, PROBE).await);
    assert!(
        reason.contains(&id) && reason.contains("ffffffff"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_postgres_database_answering_with_another_id_is_lost() {
    let (store, url) = hangar_testkit::postgres_store_with_url().await;
    store.probe(T0, PROBE).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE database_identity SET id = 'ffffffffffffffffffffffffffffffff'")
        .execute(&mut conn)
        .await
        .unwrap();
    let reason = lost_reason(store.probe(T0 + 1, PROBE).await);
    assert!(reason.contains("ffffffff"), "{reason}");
    assert!(store.list_builds(10).await.is_err(), "the pool is closed");
}

#[tokio::test]
async fn a_read_only_sqlite_database_fails_the_probe_but_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    store
        .create_build("kept", None, "[]", "{}", T0)
        .await
        .unwrap();
    store.close().await;
    let store = Store::open(&format!("{}?mode=ro", url_of(&path)))
        .await
        .unwrap();
    let err = store.probe(T0, PROBE).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Database(_)),
        "a write error, not a lost database: {err:?}"
    );
    assert!(err.to_string().contains("readonly"), "{err}");
    assert_eq!(store.lost(), None);
    // Reads still work, and the write failed rather than vanished.
    assert_eq!(store.list_builds(10).await.unwrap().len(), 1);
    assert!(store
        .create_build("refused", None, "[]", "{}", T0)
        .await
        .is_err());
    assert_eq!(store.list_builds(10).await.unwrap().len(), 1);
}

/// Runs `sql` on the test cluster's admin database.
async fn admin(sql: &str) {
    let url = std::env::var(hangar_testkit::POSTGRES_URL_VAR).unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
}

#[tokio::test]
async fn a_renamed_postgres_database_fails_the_probe_until_it_is_back() {
    let (store, url) = hangar_testkit::postgres_store_with_url().await;
    let name = url.rsplit('/').next().unwrap().to_string();
    store.probe(T0, PROBE).await.unwrap();
    // Cut every connection and rename the database: reconnecting fails.
    admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    ))
    .await;
    admin(&format!("ALTER DATABASE {name} RENAME TO {name}_away")).await;
    let err = store.probe(T0 + 1, PROBE).await.unwrap_err();
    assert!(!matches!(err, StoreError::Lost(_)), "{err:?}");
    let err = store.probe(T0 + 2, PROBE).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(store.lost(), None);
    admin(&format!("ALTER DATABASE {name}_away RENAME TO {name}")).await;
    store.probe(T0 + 3, PROBE).await.unwrap();
}

#[tokio::test]
async fn web_writes_a_marker_and_reopens_the_same_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open_checked(&url_of(&path), false).await.unwrap();
    let id = store.database_id().await.unwrap();
    store.close().await;
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        id
    );
    let store = Store::open_checked(&url_of(&path), false).await.unwrap();
    assert_eq!(store.database_id().await.unwrap(), id);
}

#[tokio::test]
async fn a_missing_database_with_a_marker_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open_checked(&url_of(&path), false).await.unwrap();
    let id = store.database_id().await.unwrap();
    store.close().await;
    remove_database(&path);

    let err = Store::open_checked(&url_of(&path), false)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Lost(_)), "{err:?}");
    assert!(text.contains("missing") && text.contains(&id), "{text}");
    assert!(text.contains("--accept-new-database"), "{text}");
    assert!(!path.exists(), "no empty database was created");
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        id
    );

    // Deliberately: a new database, and the marker names it.
    let store = Store::open_checked(&url_of(&path), true).await.unwrap();
    let new_id = store.database_id().await.unwrap();
    assert_ne!(new_id, id);
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        new_id
    );
    store.close().await;
    Store::open_checked(&url_of(&path), false)
        .await
        .unwrap()
        .close()
        .await;
}

#[tokio::test]
async fn another_database_at_the_path_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let other = dir.path().join("other.db");
    let store = Store::open_checked(&url_of(&path), false).await.unwrap();
    let id = store.database_id().await.unwrap();
    store.close().await;
    let store = Store::open(&url_of(&other)).await.unwrap();
    let other_id = store.database_id().await.unwrap();
    store
        .create_build("other", None, "[]", "{}", T0)
        .await
        .unwrap();
    store.close().await;
    remove_database(&path);
    std::fs::rename(&other, &path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();

    let err = Store::open_checked(&url_of(&path), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&id) && err.contains(&other_id), "{err}");
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        id,
        "the marker is unchanged"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);

    let store = Store::open_checked(&url_of(&path), true).await.unwrap();
    assert_eq!(store.list_builds(10).await.unwrap().len(), 1);
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        other_id
    );
}

#[tokio::test]
async fn an_unreadable_marker_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    Store::open_checked(&url_of(&path), false)
        .await
        .unwrap()
        .close()
        .await;
    std::fs::write(marker_of(&path), "not an id\n").unwrap();
    let err = Store::open_checked(&url_of(&path), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("unreadable"), "{err}");
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap(),
        "not an id\n"
    );
    Store::open_checked(&url_of(&path), true)
        .await
        .unwrap()
        .close()
        .await;
}

#[tokio::test]
async fn a_database_from_before_markers_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    let id = store.database_id().await.unwrap();
    store.close().await;
    assert!(!marker_of(&path).exists());
    Store::open_checked(&url_of(&path), false)
        .await
        .unwrap()
        .close()
        .await;
    assert_eq!(
        std::fs::read_to_string(marker_of(&path)).unwrap().trim(),
        id
    );
}
