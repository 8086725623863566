//! The Kubernetes backend against a fake API server (axum, in the test)
//! that serves secrets and records every request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hangar_core::vars::interpolate_with;
use hangar_creds::cache::Cache;
use hangar_creds::kube::KubeSecrets;
use hangar_creds::{Credentials, CredsError, Manager};
use serde_json::{json, Value};

/// What the fake answers for `namespace/name`: a status and a body.
type Answers = BTreeMap<String, (StatusCode, String)>;

#[derive(Clone, Default)]
struct Fake {
    answers: Arc<Mutex<Answers>>,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn secret(
    State(fake): State<Fake>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    fake.seen
        .lock()
        .unwrap()
        .push(format!("{ns}/{name} {auth}"));
    match fake.answers.lock().unwrap().get(&format!("{ns}/{name}")) {
        Some((status, body)) => (*status, body.clone()),
        None => (
            StatusCode::NOT_FOUND,
            r#"{"kind":"Status","message":"secrets not found"}"#.to_string(),
        ),
    }
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn secret_body(pairs: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, Value> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(b64(v))))
        .collect();
    json!({"kind": "Secret", "data": data}).to_string()
}

struct Setup {
    fake: Fake,
    creds: Credentials,
    _dir: tempfile::TempDir,
}

async fn setup(prefix: &str, answers: &[(&str, StatusCode, String)], cache: Cache) -> Setup {
    let fake = Fake::default();
    for (key, status, body) in answers {
        fake.answers
            .lock()
            .unwrap()
            .insert(key.to_string(), (*status, body.clone()));
    }
    let app = Router::new()
        .route("/api/v1/namespaces/{ns}/secrets/{name}", get(secret))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k3n\n").unwrap();
    let kube = KubeSecrets::new(&format!("http://{addr}"), &token, None, prefix).unwrap();
    Setup {
        fake,
        creds: Credentials::new(Manager::Kubernetes(kube), cache),
        _dir: dir,
    }
}

fn seen(s: &Setup) -> Vec<String> {
    s.fake.seen.lock().unwrap().clone()
}

#[tokio::test]
async fn pipeline_secret_first_then_team_secret_in_the_prefixed_namespace() {
    let s = setup(
        "ci-",
        &[
            (
                "ci-main/deploy.token",
                StatusCode::OK,
                secret_body(&[("value", "pipe-token")]),
            ),
            (
                "ci-main/token",
                StatusCode::OK,
                secret_body(&[("value", "team-token")]),
            ),
            (
                "ci-main/db",
                StatusCode::OK,
                secret_body(&[("user", "admin"), ("password", "pw")]),
            ),
        ],
        Cache::off(),
    )
    .await;
    let template =
        json!({"t": "((token))", "u": "((db.user)):((db.password))", "n": "((nowhere))"});
    let resolved = s
        .creds
        .resolve(&template, "main", Some("deploy"))
        .await
        .unwrap();
    assert_eq!(
        seen(&s),
        [
            "ci-main/deploy.db Bearer t0k3n",
            "ci-main/db Bearer t0k3n",
            "ci-main/deploy.nowhere Bearer t0k3n",
            "ci-main/nowhere Bearer t0k3n",
            "ci-main/deploy.token Bearer t0k3n",
        ]
    );
    let err = interpolate_with(&template, &resolved).unwrap_err();
    assert_eq!(err.to_string(), "undefined vars: nowhere");
    let mut secrets = resolved.secret_values();
    secrets.sort();
    assert_eq!(secrets, ["admin", "pipe-token", "pw"]);

    // Without a pipeline: the team's secret only.
    s.fake.seen.lock().unwrap().clear();
    let resolved = s
        .creds
        .resolve(&json!("((token))"), "main", None)
        .await
        .unwrap();
    assert_eq!(seen(&s), ["ci-main/token Bearer t0k3n"]);
    assert_eq!(
        interpolate_with(&json!("((token))"), &resolved).unwrap(),
        json!("team-token")
    );
}

#[tokio::test]
async fn refusals_and_bad_secrets_are_errors_not_absences() {
    let huge = secret_body(&[("value", &"x".repeat(2 * 1024 * 1024))]);
    let s = setup(
        "concourse-",
        &[
            ("concourse-main/forbidden", StatusCode::FORBIDDEN, r#"{"kind":"Status","message":"secrets \"forbidden\" is forbidden: User cannot get"}"#.into()),
            ("concourse-main/broken", StatusCode::INTERNAL_SERVER_ERROR, "boom\n\u{1b}[31m".into()),
            ("concourse-main/notb64", StatusCode::OK, r#"{"data":{"value":"!!!"}}"#.into()),
            ("concourse-main/binary", StatusCode::OK, format!(r#"{{"data":{{"value":"{}"}}}}"#, "/w==")),
            ("concourse-main/notjson", StatusCode::OK, "<html>".into()),
            ("concourse-main/huge", StatusCode::OK, huge),
            ("concourse-main/fields", StatusCode::OK, secret_body(&[("user", "u")])),
        ],
        Cache::off(),
    )
    .await;
    let cases: &[(&str, &str)] = &[
        ("((forbidden))", "var forbidden: secret concourse-main/forbidden: the API server refused (HTTP 403): secrets \"forbidden\" is forbidden: User cannot get; web's service account needs `get` on secrets in namespace concourse-main"),
        ("((broken))", "var broken: secret concourse-main/broken: the API server answered HTTP 500: boom[31m"),
        ("((notb64))", "var notb64: secret concourse-main/notb64: key \"value\" is not base64: Invalid symbol 33, offset 0."),
        ("((binary))", "var binary: secret concourse-main/binary: key \"value\" is not UTF-8 text (binary secrets cannot be vars)"),
        ("((huge))", "var huge: secret concourse-main/huge: the secret object is larger than 2097152 bytes"),
        ("((Bad_Name))", "var \"Bad_Name\": secret name \"Bad_Name\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')"),
    ];
    for (template, want) in cases {
        let err = s
            .creds
            .resolve(&json!(template), "main", None)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), *want, "{template}");
    }
    let err = s
        .creds
        .resolve(&json!("((notjson))"), "main", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CredsError::Backend(m) if m.starts_with("var notjson: secret concourse-main/notjson: not a secret object: ")),
        "{err}"
    );
    // A missing field is the interpolation's error, with the others.
    let t = json!(["((fields.password))", "((fields.user))"]);
    let r = s.creds.resolve(&t, "main", None).await.unwrap();
    assert_eq!(
        interpolate_with(&t, &r).unwrap_err().to_string(),
        "missing field 'password' in var: fields.password"
    );
    // The invalid name never reached the server.
    assert!(!seen(&s).iter().any(|r| r.contains("Bad_Name")));
}

#[tokio::test]
async fn an_unreachable_server_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let kube = KubeSecrets::new(&format!("http://{addr}"), &token, None, "concourse-").unwrap();
    let creds = Credentials::new(Manager::Kubernetes(kube), Cache::off());
    let err = creds
        .resolve(&json!("((x))"), "main", None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "var x: secret concourse-main/x: cannot reach the Kubernetes API server: "
        ),
        "{err}"
    );
    assert!(KubeSecrets::new("ftp://x", &token, None, "p-").is_err());
    std::fs::write(&token, "").unwrap();
    assert!(KubeSecrets::new("http://x", &token, None, "p-").is_err());
}

// On tokio's paused clock: the server's five seconds and the client's
// 200 ms pass as soon as nothing else can run, so the test waits for
// neither and cannot be late on a slow machine.
#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_answer_in_time_is_an_error() {
    let app = Router::new().route(
        "/api/v1/namespaces/{ns}/secrets/{name}",
        get(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            "late"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    let kube = KubeSecrets::new(&format!("http://{addr}"), &token, None, "concourse-")
        .unwrap()
        .with_timeout(std::time::Duration::from_millis(200));
    let creds = Credentials::new(
        Manager::Kubernetes(kube),
        Cache::new(std::time::Duration::from_secs(60)),
    );
    let started = std::time::Instant::now();
    let err = creds
        .resolve(&json!("((slow))"), "main", None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "var slow: secret concourse-main/slow: the Kubernetes API server did not answer within 200ms"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    // An error is never cached: asked again, it fails again (not "absent").
    assert!(creds
        .resolve(&json!("((slow))"), "main", None)
        .await
        .is_err());
}

#[tokio::test]
async fn the_cache_answers_again_without_asking() {
    let s = setup(
        "concourse-",
        &[(
            "concourse-main/token",
            StatusCode::OK,
            secret_body(&[("value", "v1")]),
        )],
        Cache::new(std::time::Duration::from_secs(60)),
    )
    .await;
    for _ in 0..3 {
        let r = s
            .creds
            .resolve(&json!("((token))"), "main", None)
            .await
            .unwrap();
        assert_eq!(
            interpolate_with(&json!("((token))"), &r).unwrap(),
            json!("v1")
        );
    }
    assert_eq!(seen(&s).len(), 1);
}

#[test]
fn in_cluster_reads_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    let env = |k: &str| match k {
        "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("6443".to_string()),
        _ => None,
    };
    let k = KubeSecrets::in_cluster(env, dir.path(), "concourse-").unwrap();
    assert_eq!(k.api_base(), "https://[fd00::1]:6443");
    let err = KubeSecrets::in_cluster(|_| None, dir.path(), "concourse-")
        .err()
        .unwrap();
    assert!(err
        .to_string()
        .contains("KUBERNETES_SERVICE_HOST is not set"));
}
