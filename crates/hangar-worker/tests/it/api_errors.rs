//! The worker's API answers every refusal in the one error shape, axum's
//! own rejections included (a path parameter that is not UTF-8, a query
//! that does not deserialize, a missing method, an unknown route), and each
//! 413 names the limit of the route that refused; nothing changes.

use std::sync::Arc;
use std::time::Duration;

use hangar_api::ErrorBody;
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::ContainerManager;
use hangar_worker::resources_api::{ResourceRunner, MAX_ACTION_BODY};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

struct Worker {
    _dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    url: String,
    http: reqwest::Client,
    _stop: tokio_util::sync::DropGuard,
}

async fn start() -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let containers =
        Arc::new(ContainerManager::open(&dir.path().join("containers"), volumes.clone()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api = VolumeApi::new(volumes.clone(), KEY, Limits::default())
        .with_containers(containers)
        .with_resources(ResourceRunner::new(
            None,
            volumes.clone(),
            ActionDirs::open(&dir.path().join(ACTIONS_DIR)).unwrap(),
            KEY,
            Duration::from_secs(10),
        ));
    tokio::spawn(serve(listener, api, stop.clone()));
    Worker {
        _dir: dir,
        volumes,
        url,
        http: reqwest::Client::new(),
        _stop: stop.drop_guard(),
    }
}

/// The answer is JSON in the shape: its status, code and message.
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

#[tokio::test]
async fn bad_path_parameters_queries_and_methods_answer_in_the_error_shape() {
    let w = start().await;
    // (method, path, status, code)
    let cases = [
        (
            "GET",
            "/volumes/%FF",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/containers/%FF%FE/logs",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/containers/c1/wait?timeout_ms=soon",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/volumes/v1/stream-out?colour=blue",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "DELETE",
            "/volumes",
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        ("GET", "/no/such/route", StatusCode::NOT_FOUND, "not_found"),
    ];
    for (method, path, status, code) in cases {
        let resp = w
            .http
            .request(method.parse().unwrap(), format!("{}{path}", w.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        let (got_status, got_code, message) = shape(resp).await;
        assert_eq!(
            (got_status, got_code.as_str()),
            (status, code),
            "{method} {path}: {message}"
        );
        assert!(!message.is_empty(), "{method} {path}");
    }
    // Without the key, the key is what is refused, in the same shape.
    let resp = w
        .http
        .get(format!("{}/volumes/%FF", w.url))
        .send()
        .await
        .unwrap();
    assert_eq!(shape(resp).await.1, "unauthorized");
    assert!(w.volumes.list().unwrap().is_empty());
}

#[tokio::test]
async fn each_413_names_the_limit_of_its_route_and_nothing_is_made() {
    let w = start().await;
    // (path, limit)
    let cases = [
        ("/volumes", hangar_api::MAX_JSON_BODY),
        ("/containers", hangar_api::MAX_JSON_BODY),
        ("/resource-actions", MAX_ACTION_BODY),
    ];
    for (path, limit) in cases {
        let body = format!("{{\"handle\": \"{}\"}}", "v".repeat(limit));
        let resp = w
            .http
            .post(format!("{}{path}", w.url))
            .bearer_auth(KEY)
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
    assert!(w.volumes.list().unwrap().is_empty());
}
