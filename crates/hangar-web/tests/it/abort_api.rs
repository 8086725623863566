//! `PUT /api/v1/builds/{id}/abort`, on SQLite and PostgreSQL alike.

use crate::common::{TestWeb, ADMIN};
use hangar_api::builds::CreateBuild;
use hangar_client::ClientError;
use hangar_core::build::BuildStatus;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::json;

async fn a_pending_build_is_aborted_and_stays_so(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let build = t
        .admin
        .create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some("b".into()),
            plan: json!([{"task": "t", "config": {"platform": "linux", "run": {"path": "true"}}}]),
            artifacts: Default::default(),
            team: None,
        })
        .await
        .unwrap();
    // Without credentials: refused, nothing changes.
    let anonymous = t
        .raw
        .put(format!("{}/api/v1/builds/{}/abort", t.url, build.id))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        t.admin.build(build.id).await.unwrap().status,
        BuildStatus::Pending
    );

    let aborted = t.admin.abort_build(build.id).await.unwrap();
    assert_eq!(aborted.status, BuildStatus::Aborted);
    let events = t.admin.build_events(build.id, 0, 0).await.unwrap();
    let lines: Vec<&str> = events.events.iter().map(|e| e.payload.as_str()).collect();
    assert_eq!(lines, ["aborted"]);
    // Again: the same build, as it ended.
    let again = t.admin.abort_build(build.id).await.unwrap();
    assert_eq!(
        (again.status, again.finished_at),
        (BuildStatus::Aborted, aborted.finished_at)
    );

    match t.admin.abort_build(424242).await {
        Err(ClientError::Api { status, .. }) => assert_eq!(status, StatusCode::NOT_FOUND),
        other => panic!("expected 404, got {other:?}"),
    }
    let bad_id = t
        .raw
        .put(format!("{}/api/v1/builds/x/abort", t.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_id.status(), StatusCode::BAD_REQUEST);
    t.stop().await;
}

on_both_databases!(a_pending_build_is_aborted_and_stays_so);
