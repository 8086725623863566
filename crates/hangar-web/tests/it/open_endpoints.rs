//! What web answers without a token: `/api/v1/info` (load balancers and
//! probes) and `/metrics` (scrapers) unless `metrics_require_token` is set,
//! and then only the admin token reads the metrics; and the reads of an
//! exposed pipeline (a private one reads as missing). Nothing else is open.
//! On SQLite and PostgreSQL alike.

use crate::common::{TestWeb, ADMIN, WORKER_KEY};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

async fn get(t: &TestWeb, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req = t.raw.get(format!("{}{path}", t.url));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

async fn info_and_metrics_are_open_by_default_and_nothing_else_is(store: Store) {
    let t = TestWeb::start(store).await;
    assert_eq!(get(&t, "/api/v1/info", None).await.0, StatusCode::OK);
    let (status, metrics) = get(&t, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.contains("workers"), "{metrics}");
    // Everything else needs a login; a pipeline's reads answer as for a
    // pipeline that is not there (only an exposed one is public), and the
    // team's listing is empty.
    for (path, status) in [
        ("/api/v1/workers", StatusCode::UNAUTHORIZED),
        ("/api/v1/builds", StatusCode::UNAUTHORIZED),
        ("/api/v1/volumes", StatusCode::UNAUTHORIZED),
        ("/api/v1/events", StatusCode::UNAUTHORIZED),
        ("/api/v1/teams", StatusCode::UNAUTHORIZED),
        ("/api/v1/user", StatusCode::UNAUTHORIZED),
        (
            "/api/v1/teams/main/pipelines/p/config",
            StatusCode::UNAUTHORIZED,
        ),
        ("/api/v1/teams/main/pipelines/p/jobs", StatusCode::NOT_FOUND),
        (
            "/api/v1/teams/main/pipelines/p/resources/r/versions",
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(get(&t, path, None).await.0, status, "{path}");
    }
    let (status, listed) = get(&t, "/api/v1/teams/main/pipelines", None).await;
    assert_eq!((status, listed.as_str()), (StatusCode::OK, "[]"));
    t.stop().await;
}

async fn metrics_can_require_the_admin_token(store: Store) {
    let t = TestWeb::start_with(store, |c| c.metrics_require_token = true).await;
    // (token, status)
    let cases = [
        (None, StatusCode::UNAUTHORIZED),
        (Some("not-the-token-at-all"), StatusCode::UNAUTHORIZED),
        (Some(WORKER_KEY), StatusCode::FORBIDDEN),
        (Some(ADMIN), StatusCode::OK),
    ];
    for (token, status) in cases {
        let (got, body) = get(&t, "/metrics", token).await;
        assert_eq!(got, status, "{token:?}: {body}");
        if status == StatusCode::OK {
            assert!(body.contains("workers"), "{body}");
        } else {
            let err: hangar_api::ErrorBody = serde_json::from_str(&body).unwrap();
            assert!(!body.contains("# TYPE"), "{body}");
            assert!(matches!(
                err.error.code.as_str(),
                "unauthorized" | "forbidden"
            ));
        }
    }
    // Probes still work without a token.
    assert_eq!(get(&t, "/api/v1/info", None).await.0, StatusCode::OK);
    t.stop().await;
}

on_both_databases!(
    info_and_metrics_are_open_by_default_and_nothing_else_is,
    metrics_can_require_the_admin_token,
);
