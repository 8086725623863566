//! One error shape for every refusal, axum's own included: a path parameter
//! that does not parse, a method a route lacks, a body over the limit (each
//! 413 naming the limit of its route). On SQLite and PostgreSQL alike.

use crate::common::{TestWeb, ADMIN, WORKER_KEY};
use hangar_api::ErrorBody;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

/// The answer is JSON in the shape; returns its status, code and message.
async fn shape(resp: reqwest::Response) -> (StatusCode, String, String) {
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = resp.text().await.unwrap();
    assert!(
        content_type.starts_with("application/json"),
        "{status} as {content_type:?}: {text}"
    );
    let body: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, body.error.code, body.error.message)
}

async fn a_bad_path_parameter_and_a_missing_method_answer_in_the_error_shape(store: Store) {
    let t = TestWeb::start(store).await;
    let before = t.snapshot().await;
    for path in ["/api/v1/builds/abc", "/api/v1/builds/1.5/events"] {
        let resp = t
            .raw
            .get(format!("{}{path}", t.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        let (status, code, message) = shape(resp).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{path}"
        );
        assert!(message.contains("parse"), "{path}: {message}");
    }
    let resp = t
        .raw
        .delete(format!("{}/api/v1/info", t.url))
        .send()
        .await
        .unwrap();
    let allow = resp.headers().get("allow").cloned();
    let (status, code, _) = shape(resp).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    assert!(allow.is_some(), "the 405 keeps its allow header");
    let resp = t
        .raw
        // Under the API; outside it a path that names nothing is the
        // dashboard's page (`dashboard.rs`).
        .get(format!("{}/api/v1/no/such/route", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(shape(resp).await.1, "not_found");
    assert_eq!(t.snapshot().await, before);
    t.stop().await;
}

async fn each_413_names_the_limit_of_its_route(store: Store) {
    let t = TestWeb::start(store).await;
    // A report is a worker's own call: its registration's token.
    let w1 = t
        .worker
        .register(&crate::common::registration("w1", "w1"))
        .await
        .unwrap()
        .token;
    let before = t.snapshot().await;
    // (method, path, credential, limit)
    let cases = [
        (
            "POST",
            "/api/v1/workers",
            WORKER_KEY,
            hangar_api::MAX_JSON_BODY,
        ),
        (
            "POST",
            "/api/v1/builds",
            ADMIN,
            hangar_api::builds::MAX_PLAN_BODY,
        ),
        (
            "PUT",
            "/api/v1/workers/w1/volumes",
            w1.as_str(),
            hangar_api::MAX_REPORT_BODY,
        ),
    ];
    for (method, path, credential, limit) in cases {
        let body = format!("{{\"x\": \"{}\"}}", "v".repeat(limit));
        let resp = t
            .raw
            .request(method.parse().unwrap(), format!("{}{path}", t.url))
            .bearer_auth(credential)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, code, message) = shape(resp).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            "{path}"
        );
        assert!(
            message.contains(&format!("limit of {limit} bytes")),
            "{path}: {message}"
        );
    }
    // Within the plan limit but over the default one: not refused for size.
    let body = format!(
        "{{\"x\": \"{}\"}}",
        "v".repeat(hangar_api::MAX_JSON_BODY * 2)
    );
    let resp = t
        .raw
        .post(format!("{}/api/v1/builds", t.url))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, _, message) = shape(resp).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
    assert_eq!(t.snapshot().await, before);
    t.stop().await;
}

on_both_databases!(
    a_bad_path_parameter_and_a_missing_method_answer_in_the_error_shape,
    each_413_names_the_limit_of_its_route,
);
