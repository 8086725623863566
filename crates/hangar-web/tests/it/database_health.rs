//! `/info` answers from a real write, and a lost database answers no
//! request with 2xx: a read-only SQLite file, a renamed PostgreSQL database,
//! a SQLite file deleted under a running web.

use std::path::Path;

use crate::common::{api_code, TestWeb, ADMIN};
use hangar_api::builds::CreateBuild;
use hangar_api::Info;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

fn url_of(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn info(t: &TestWeb) -> (StatusCode, Info) {
    let r = t
        .raw
        .get(format!("{}/api/v1/info", t.url))
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

async fn metric(t: &TestWeb, name: &str) -> String {
    let text = t.metrics().await;
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .to_string()
}

fn build() -> CreateBuild {
    serde_json::from_value(serde_json::json!({ "plan": [
        {"task": "t", "config": {"platform": "linux", "run": {"path": "true"}}}
    ]}))
    .unwrap()
}

/// Posts a build, returns the status and the error code (if any).
async fn post_build(t: &TestWeb) -> (StatusCode, Option<String>) {
    match t.admin.create_build(&build()).await {
        Ok(_) => (StatusCode::CREATED, None),
        Err(e) => {
            let (status, code) = api_code(e);
            (status, Some(code))
        }
    }
}

async fn info_answers_200_from_a_write_probe(store: Store) {
    let t = TestWeb::start(store).await;
    let (status, body) = info(&t).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.database.reachable && !body.database.lost);
    assert_eq!(body.database.error, None);
    assert_eq!(
        metric(&t, "hangar_database_reachable").await,
        "hangar_database_reachable 1"
    );
    assert_eq!(
        metric(&t, "hangar_database_lost").await,
        "hangar_database_lost 0"
    );
    assert_eq!(post_build(&t).await, (StatusCode::CREATED, None));
    t.stop().await;
}

on_both_databases!(info_answers_200_from_a_write_probe);

#[tokio::test]
async fn a_read_only_sqlite_database_makes_info_503_and_takes_no_build() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    store
        .create_build("kept", None, "[]", "{}", 1)
        .await
        .unwrap();
    store.close().await;
    // It opens and answers reads, as a file SQLite fell back to reading only.
    let store = Store::open(&format!("{}?mode=ro", url_of(&path)))
        .await
        .unwrap();
    let t = TestWeb::start(store).await;

    let (status, body) = info(&t).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!body.database.reachable && !body.database.lost);
    let error = body.database.error.unwrap();
    assert!(error.contains("readonly"), "{error}");
    assert_eq!(
        metric(&t, "hangar_database_reachable").await,
        "hangar_database_reachable 0"
    );

    let (status, code) = post_build(&t).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code.as_deref(), Some(hangar_api::codes::UNAVAILABLE));
    let builds = t.admin.builds(50).await.unwrap();
    assert_eq!(builds.len(), 1, "nothing was added: {builds:?}");
    t.stop().await;
}

#[tokio::test]
async fn a_renamed_postgres_database_makes_info_503_until_it_is_back() {
    let (store, url) = hangar_testkit::postgres_store_with_url().await;
    let name = url.rsplit('/').next().unwrap().to_string();
    let t = TestWeb::start(store).await;
    assert_eq!(info(&t).await.0, StatusCode::OK);

    hangar_testkit::postgres_terminate_connections(&name).await;
    hangar_testkit::postgres_rename_database(&name, &format!("{name}_away")).await;
    let (status, body) = info(&t).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!body.database.reachable && !body.database.lost);
    assert!(body.database.error.is_some());
    let (status, _) = post_build(&t).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    hangar_testkit::postgres_rename_database(&format!("{name}_away"), &name).await;
    let (status, body) = info(&t).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert!(
        t.admin.builds(50).await.unwrap().is_empty(),
        "the refused build is not there"
    );
    t.stop().await;
}

#[tokio::test]
async fn a_deleted_sqlite_file_is_lost_and_no_request_answers_2xx() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hangar.db");
    let store = Store::open(&url_of(&path)).await.unwrap();
    let t = TestWeb::start(store).await;
    assert_eq!(post_build(&t).await, (StatusCode::CREATED, None));

    // Keep the inode reachable under another name, to look inside later;
    // for web the path is gone, as after `rm`.
    let kept = dir.path().join("kept.db");
    std::fs::hard_link(&path, &kept).unwrap();
    std::fs::remove_file(&path).unwrap();

    let lost = Some(hangar_api::codes::DATABASE_LOST.to_string());
    assert_eq!(
        post_build(&t).await,
        (StatusCode::SERVICE_UNAVAILABLE, lost.clone())
    );
    let (status, body) = info(&t).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.database.lost && !body.database.reachable);
    assert!(body.database.error.unwrap().contains("deleted"));
    assert_eq!(
        metric(&t, "hangar_database_lost").await,
        "hangar_database_lost 1"
    );
    // Reads are refused too (they would show a database nobody will see).
    let (status, code) = api_code(t.admin.builds(50).await.unwrap_err());
    assert_eq!(
        (status, Some(code)),
        (StatusCode::SERVICE_UNAVAILABLE, lost.clone())
    );
    let raw = t
        .raw
        .post(format!("{}/api/v1/volumes", t.url))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!path.exists(), "web did not recreate the file");
    t.web.store().close().await;
    t.stop().await;

    // The old database (with its WAL, which SQLite keeps beside the path
    // it opened) holds the one build acknowledged before: nothing refused
    // was written into it.
    let wal = dir.path().join("hangar.db-wal");
    if wal.exists() {
        std::fs::copy(&wal, dir.path().join("kept.db-wal")).unwrap();
    }
    let old = Store::open(&url_of(&kept)).await.unwrap();
    assert_eq!(old.list_builds(50).await.unwrap().len(), 1);
}
