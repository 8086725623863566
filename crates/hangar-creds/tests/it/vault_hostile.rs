//! The Vault backend against a server that is not Vault: a body too large,
//! one that is not JSON, JSON of the wrong shape. Each is an error naming
//! the var, never "not found" nor an unbounded read.

use axum::http::StatusCode;
use axum::routing::any;
use axum::Router;
use hangar_creds::cache::Cache;
use hangar_creds::vault::{Auth, VaultConfig, VaultSecrets};
use hangar_creds::{Credentials, CredsError, Manager};
use serde_json::json;

type Answer = (StatusCode, String);

/// A server answering Vault's mount question with `mount` and every other
/// request with `read`.
async fn hostile(mount: Answer, read: Answer) -> Credentials {
    let app = Router::new()
        .route(
            "/v1/sys/internal/ui/mounts/{*path}",
            any(move || {
                let mount = mount.clone();
                async move { mount }
            }),
        )
        .fallback(any(move || {
            let read = read.clone();
            async move { read }
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let vault = VaultSecrets::start(VaultConfig::new(
        &format!("http://{addr}"),
        Auth::Token("t".into()),
    ))
    .unwrap();
    Credentials::new(Manager::Vault(vault), Cache::off())
}

async fn error_with(mount: Answer, read: Answer) -> String {
    let c = hostile(mount, read).await;
    match c.resolve(&json!("((x))"), "main", None).await {
        Err(CredsError::Backend(m)) => m,
        other => panic!("not a Backend error: {other:?}"),
    }
}

/// The error when every request is answered with `status` and `body`.
async fn error(status: StatusCode, body: String) -> String {
    error_with((status, body.clone()), (status, body)).await
}

fn mount(version: &str) -> Answer {
    let body = json!({"data": {"path": "concourse/", "options": {"version": version}}});
    (StatusCode::OK, body.to_string())
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let huge = format!(
        r#"{{"data":{{"value":"{}"}}}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        error(StatusCode::OK, huge).await,
        "var x: Vault path concourse/main/x: asking for its mount: Vault's answer is larger \
         than 1048576 bytes"
    );
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_an_error() {
    let err = error(StatusCode::OK, "<html>".into()).await;
    assert!(
        err.starts_with(
            "var x: Vault path concourse/main/x: Vault's answer about its mount is not a mount: "
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_mount_answer_naming_another_mount_or_a_secret_without_data_is_an_error() {
    let other_mount = json!({"data": {"path": "elsewhere/", "options": {"version": "2"}}});
    assert_eq!(
        error(StatusCode::OK, other_mount.to_string()).await,
        "var x: Vault path concourse/main/x: Vault says the path is in mount \"elsewhere/\", \
         which does not hold it"
    );
    let cases = [
        (
            "1",
            json!({"data": "text"}),
            "Vault's answer has no data map",
        ),
        ("1", json!({"x": 1}), "Vault's answer has no data map"),
        (
            "2",
            json!({"data": {"data": ["a"]}}),
            "Vault's KV v2 answer has a data that is not a map",
        ),
    ];
    for (version, read, why) in cases {
        assert_eq!(
            error_with(mount(version), (StatusCode::OK, read.to_string())).await,
            format!("var x: Vault path concourse/main/x: {why}")
        );
    }
    // A read too large after a good mount answer.
    let huge = format!(
        r#"{{"data":{{"value":"{}"}}}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        error_with(mount("1"), (StatusCode::OK, huge)).await,
        "var x: Vault path concourse/main/x: Vault's answer is larger than 1048576 bytes"
    );
}

#[tokio::test]
async fn a_server_error_is_an_error_with_vaults_message_without_control_characters() {
    assert_eq!(
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"errors":["sealed\u001b[31m"]}"#.into()
        )
        .await,
        "var x: Vault path concourse/main/x: asking for its mount: Vault answered HTTP 500: \
         sealed[31m"
    );
}
