//! The worker's reading of why its previous container ended, against a small
//! fake Kubernetes API server (plain HTTP on loopback).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hangar_worker::kube::{previous_exit, KubeError, PodRef};

const TOKEN: &str = "sa-token-123";

/// What the fake answers for the pod, and what it saw.
#[derive(Clone)]
struct Fake {
    answer: Arc<Mutex<(u16, String)>>,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn pod(
    State(fake): State<Fake>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    fake.seen.lock().unwrap().push(format!("{ns}/{name}"));
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {TOKEN}") {
        return (
            StatusCode::UNAUTHORIZED,
            "{\"kind\":\"Status\",\"message\":\"Unauthorized\"}",
        )
            .into_response();
    }
    let (status, body) = fake.answer.lock().unwrap().clone();
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

async fn start() -> (String, Fake) {
    let fake = Fake {
        answer: Arc::new(Mutex::new((200, "{}".into()))),
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/api/v1/namespaces/{ns}/pods/{name}", get(pod))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), fake)
}

fn pod_json(last_state: &str) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"hangar-worker-0","namespace":"ci"}},
        "status":{{"phase":"Running","containerStatuses":[
          {{"name":"worker","ready":true,"restartCount":1,"state":{{"running":{{"startedAt":"2025-05-01T10:00:05Z"}}}},
            "lastState":{last_state}}}]}}}}"#
    )
}

fn pod_ref(base: &str, sa: &std::path::Path) -> PodRef {
    PodRef {
        api_base: base.to_string(),
        sa_dir: sa.to_path_buf(),
        namespace: "ci".into(),
        pod: "hangar-worker-0".into(),
        container: "worker".into(),
    }
}

/// What a case should give: a cause, none, or an error of a kind.
#[derive(Debug)]
enum Want {
    Cause(&'static str),
    Nothing,
    NotFound,
    Forbidden(&'static str),
    Malformed,
}

#[tokio::test]
async fn previous_exits_are_read_from_the_pod_status() {
    let (base, fake) = start().await;
    let sa = tempfile::tempdir().unwrap();
    std::fs::write(sa.path().join("token"), format!("{TOKEN}\n")).unwrap();
    // A CA file is ignored for plain http (the fake); it must not break the call.
    std::fs::write(sa.path().join("ca.crt"), "not a certificate").unwrap();

    let cases: Vec<(&str, u16, String, Want)> = vec![
        (
            "OOMKilled",
            200,
            pod_json(
                r#"{"terminated":{"exitCode":137,"reason":"OOMKilled","startedAt":"2025-05-01T09:00:00Z","finishedAt":"2025-05-01T10:00:00Z","containerID":"containerd://abc"}}"#,
            ),
            Want::Cause("OOMKilled (exit 137) at 2025-05-01T10:00:00Z"),
        ),
        (
            "Error exit 137",
            200,
            pod_json(
                r#"{"terminated":{"exitCode":137,"reason":"Error","finishedAt":"2025-05-01T11:00:00Z"}}"#,
            ),
            Want::Cause("Error (exit 137) at 2025-05-01T11:00:00Z"),
        ),
        ("no lastState", 200, pod_json("{}"), Want::Nothing),
        (
            "pod not found",
            404,
            r#"{"kind":"Status","status":"Failure","message":"pods \"hangar-worker-0\" not found","reason":"NotFound","code":404}"#.into(),
            Want::NotFound,
        ),
        (
            "forbidden",
            403,
            r#"{"kind":"Status","status":"Failure","message":"pods \"hangar-worker-0\" is forbidden: User \"system:serviceaccount:ci:default\" cannot get resource \"pods\"","reason":"Forbidden","code":403}"#.into(),
            Want::Forbidden("cannot get resource"),
        ),
        (
            "malformed JSON",
            200,
            r#"{"status":{"containerStatuses":[{"name":"worker","#.into(),
            Want::Malformed,
        ),
        (
            "wrong shape",
            200,
            r#"{"status":{"containerStatuses":[{"name":"worker","lastState":{"terminated":{"exitCode":"x"}}}]}}"#.into(),
            Want::Malformed,
        ),
    ];

    for (name, status, body, want) in cases {
        *fake.answer.lock().unwrap() = (status, body);
        let got = previous_exit(&pod_ref(&base, sa.path()), Duration::from_secs(5)).await;
        match (&want, &got) {
            (Want::Cause(c), Ok(Some(g))) => assert_eq!(g, c, "case {name}"),
            (Want::Nothing, Ok(None)) => {}
            (Want::NotFound, Err(KubeError::NotFound { pod, namespace })) => {
                assert_eq!(
                    (pod.as_str(), namespace.as_str()),
                    ("hangar-worker-0", "ci")
                )
            }
            (
                Want::Forbidden(m),
                Err(KubeError::Forbidden {
                    status, message, ..
                }),
            ) => {
                assert_eq!(*status, 403, "case {name}");
                assert!(message.contains(m), "case {name}: {message}");
            }
            (Want::Malformed, Err(KubeError::Malformed(_))) => {}
            _ => panic!("case {name}: wanted {want:?}, got {got:?}"),
        }
    }
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 7);
    assert!(seen.iter().all(|s| s == "ci/hangar-worker-0"), "{seen:?}");
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_an_unreachable_server_is_an_http_error() {
    let (base, _fake) = start().await;
    let sa = tempfile::tempdir().unwrap();
    std::fs::write(sa.path().join("token"), "wrong").unwrap();
    let got = previous_exit(&pod_ref(&base, sa.path()), Duration::from_secs(5)).await;
    assert!(
        matches!(&got, Err(KubeError::Forbidden { status: 401, message, .. }) if message == "Unauthorized"),
        "{got:?}"
    );

    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let got = previous_exit(
        &pod_ref(&format!("http://{addr}"), sa.path()),
        Duration::from_secs(2),
    )
    .await;
    assert!(matches!(got, Err(KubeError::Http(_))), "{got:?}");

    // No token file at all.
    let empty = tempfile::tempdir().unwrap();
    let got = previous_exit(&pod_ref(&base, empty.path()), Duration::from_secs(2)).await;
    assert!(matches!(got, Err(KubeError::Io { .. })), "{got:?}");
}
