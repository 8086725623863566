//! Workers that register with their pod's service-account token
//! (`--kubernetes-worker-account`), checked by the API server's
//! TokenReview — here a small fake API server on loopback, as the
//! worker's pod-status tests use. A pod registers under its own name only,
//! as its account's team's worker or a shared one; tokens the API server
//! does not vouch for, for another audience, not bound to a pod, or of an
//! account not admitted are refused, and each refusal registers nothing.
//! On SQLite and PostgreSQL alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hangar_client::{Client, ClientError};
use hangar_core::tenancy::pod_admission::AdmittedAccount;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_web::TokenReviewConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{registration, TestWeb};

/// Web's own token for the API server.
const WEB_TOKEN: &str = "web-service-account-token";

/// A token's review: `(authenticated, user, pods, audiences)`.
type Canned = (bool, &'static str, Vec<&'static str>, Vec<&'static str>);

/// What the fake answers, and how many reviews it was asked for.
#[derive(Clone, Default)]
struct Fake {
    reviews: Arc<Mutex<HashMap<String, Canned>>>,
    /// `Some(status)`: every review is answered with it.
    broken: Arc<Mutex<Option<u16>>>,
    asked: Arc<Mutex<usize>>,
}

async fn token_review(
    State(fake): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    *fake.asked.lock().unwrap() += 1;
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {WEB_TOKEN}"))
    {
        return (AxumStatus::UNAUTHORIZED, "{\"kind\":\"Status\"}").into_response();
    }
    if let Some(status) = *fake.broken.lock().unwrap() {
        return (AxumStatus::from_u16(status).unwrap(), "{}").into_response();
    }
    assert_eq!(body["spec"]["audiences"], json!(["hangar"]), "{body}");
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    let status = match fake.reviews.lock().unwrap().get(token) {
        Some((authenticated, user, pods, audiences)) => json!({
            "authenticated": authenticated, "audiences": audiences,
            "user": {"username": user, "extra": {"authentication.kubernetes.io/pod-name": pods}},
        }),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    (
        AxumStatus::CREATED,
        Json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status})),
    )
        .into_response()
}

/// A service-account token's shape (three base64url parts); `n` tells
/// them apart.
fn jwt(n: &str) -> String {
    format!("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ{n}.c2lnbmF0dXJl")
}

async fn start(store: Store) -> (TestWeb, Fake, tempfile::TempDir) {
    let fake = Fake::default();
    let app = Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(token_review),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{WEB_TOKEN}\n")).unwrap();
    let t = TestWeb::start_with(store, |c| {
        c.token_review = Some(TokenReviewConfig {
            api_base: api,
            token_file,
            ca_file: None,
            audience: "hangar".into(),
            accounts: vec![
                AdmittedAccount::parse("ci:shared-workers").unwrap(),
                AdmittedAccount::parse("ci:team-a-workers:a").unwrap(),
            ],
        })
    })
    .await;
    let mut reviews = fake.reviews.lock().unwrap();
    let shared = "system:serviceaccount:ci:shared-workers";
    for (n, canned) in [
        ("pod-0", (true, shared, vec!["pod-0"], vec!["hangar"])),
        (
            "team-a",
            (
                true,
                "system:serviceaccount:ci:team-a-workers",
                vec!["a-0"],
                vec!["hangar"],
            ),
        ),
        (
            "api-audience",
            (
                true,
                shared,
                vec!["pod-1"],
                vec!["https://kubernetes.default.svc"],
            ),
        ),
        ("unbound", (true, shared, vec![], vec!["hangar"])),
        (
            "stranger",
            (
                true,
                "system:serviceaccount:ci:default",
                vec!["pod-2"],
                vec!["hangar"],
            ),
        ),
        ("revoked", (false, shared, vec!["pod-3"], vec!["hangar"])),
    ] {
        reviews.insert(jwt(n), canned);
    }
    drop(reviews);
    (t, fake, dir)
}

fn client(t: &TestWeb, token: &str) -> Client {
    Client::new(&t.url, token, Duration::from_secs(10)).unwrap()
}

/// Registers `name` (of `team`) with `token`: the refusal's status and
/// message, or `None` when registered.
async fn try_register(
    t: &TestWeb,
    token: &str,
    name: &str,
    team: Option<&str>,
) -> Option<(StatusCode, String)> {
    let mut reg = registration(name, &format!("{name}-disk"));
    reg.team = team.map(String::from);
    match client(t, token).register(&reg).await {
        Ok(_) => None,
        Err(ClientError::Api {
            status, message, ..
        }) => Some((status, message)),
        Err(e) => panic!("{name}: {e}"),
    }
}

async fn a_pod_registers_under_its_own_name_only(store: Store) {
    let (t, fake, _dir) = start(store).await;
    let before = t.web.store().list_workers().await.unwrap();
    let refusals = [
        (
            jwt("pod-0"),
            "pod-9",
            None,
            StatusCode::FORBIDDEN,
            "registers worker pod-0 only",
        ),
        (
            jwt("pod-0"),
            "pod-0",
            Some("a"),
            StatusCode::FORBIDDEN,
            "as a shared worker",
        ),
        (
            jwt("team-a"),
            "a-0",
            None,
            StatusCode::FORBIDDEN,
            "workers of team a only",
        ),
        (
            jwt("api-audience"),
            "pod-1",
            None,
            StatusCode::UNAUTHORIZED,
            "invalid credentials",
        ),
        (
            jwt("unbound"),
            "pod-1",
            None,
            StatusCode::FORBIDDEN,
            "not bound to a pod",
        ),
        (
            jwt("stranger"),
            "pod-2",
            None,
            StatusCode::FORBIDDEN,
            "may not register workers",
        ),
        (
            jwt("revoked"),
            "pod-3",
            None,
            StatusCode::UNAUTHORIZED,
            "invalid credentials",
        ),
        (
            jwt("unknown"),
            "pod-4",
            None,
            StatusCode::UNAUTHORIZED,
            "invalid credentials",
        ),
    ];
    for (token, name, team, status, why) in refusals {
        let (s, message) = try_register(&t, &token, name, team)
            .await
            .unwrap_or_else(|| panic!("{name} registered"));
        assert_eq!(s, status, "{name}: {message}");
        assert!(message.contains(why), "{name}: {message}");
    }
    assert_eq!(
        t.web.store().list_workers().await.unwrap(),
        before,
        "nothing registered"
    );
    // A token that is not a JWT is never sent to the API server.
    let asked = *fake.asked.lock().unwrap();
    let (s, _) = try_register(&t, "not-a-service-account-token", "pod-5", None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(*fake.asked.lock().unwrap(), asked);
    // The pods' own registrations.
    assert_eq!(try_register(&t, &jwt("pod-0"), "pod-0", None).await, None);
    assert_eq!(
        try_register(&t, &jwt("team-a"), "a-0", Some("a")).await,
        None
    );
    let workers = t.web.store().list_workers().await.unwrap();
    let teams: Vec<(&str, Option<&str>)> = workers
        .iter()
        .map(|w| (w.info.name.as_str(), w.info.team.as_deref()))
        .collect();
    assert_eq!(teams, [("a-0", Some("a")), ("pod-0", None)]);
    // The token registers, and opens nothing else.
    let res = t
        .raw
        .get(format!("{}/api/v1/workers", t.url))
        .bearer_auth(jwt("pod-0"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    t.stop().await;
}

async fn an_api_server_that_cannot_answer_registers_nothing(store: Store) {
    let (t, fake, _dir) = start(store).await;
    for (status, why) in [(500, "HTTP 500"), (403, "system:auth-delegator")] {
        *fake.broken.lock().unwrap() = Some(status);
        let (s, message) = try_register(&t, &jwt("pod-0"), "pod-0", None)
            .await
            .unwrap();
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{message}");
        assert!(message.contains(why), "{message}");
    }
    assert!(t.web.store().list_workers().await.unwrap().is_empty());
    // Wrong tokens are throttled per address before the API server is
    // asked again: a stranger cannot make web flood it.
    *fake.broken.lock().unwrap() = None;
    let mut limited = false;
    for i in 0..25 {
        if let Some((s, _)) = try_register(&t, &jwt(&format!("guess{i}")), "pod-0", None).await {
            if s == StatusCode::TOO_MANY_REQUESTS {
                limited = true;
                break;
            }
        }
    }
    assert!(limited, "25 wrong tokens were never limited");
    let asked = *fake.asked.lock().unwrap();
    let (s, _) = try_register(&t, &jwt("pod-0"), "pod-0", None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        *fake.asked.lock().unwrap(),
        asked,
        "not asked while limited"
    );
    assert!(t.web.store().list_workers().await.unwrap().is_empty());
    t.stop().await;
}

on_both_databases!(
    a_pod_registers_under_its_own_name_only,
    an_api_server_that_cannot_answer_registers_nothing,
);
