//! Bearer-token auth: a token service and a gate in front of a real
//! registry (Debian's `docker-registry`), answering as Docker Hub does: a
//! `WWW-Authenticate: Bearer realm=…,service=…` challenge, a token for basic
//! credentials from the realm, and the registry's answers to requests that
//! carry it.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hangar_images::testing::{
    config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
};
use hangar_images::{fetch, resolve, ImageError, Platform, Source};

const TOKEN: &str = "token-for-ci";

#[derive(Clone)]
struct Gate {
    upstream: String,
    realm: String,
    http: reqwest::Client,
    /// The scopes asked of the token service.
    scopes: Arc<Mutex<Vec<String>>>,
}

fn challenge(gate: &Gate) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            "www-authenticate",
            format!("Bearer realm=\"{}\",service=\"hangar-test\"", gate.realm),
        )],
        "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"authentication required\"}]}",
    )
        .into_response()
}

async fn token(State(gate): State<Gate>, headers: HeaderMap, req: Request) -> Response {
    // "ci:s3cret", base64.
    let good = "Basic Y2k6czNjcmV0";
    let query = req.uri().query().unwrap_or("").to_string();
    gate.scopes.lock().unwrap().push(query);
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(good) {
        return (StatusCode::UNAUTHORIZED, "bad credentials").into_response();
    }
    axum::Json(serde_json::json!({"token": TOKEN})).into_response()
}

async fn forward(State(gate): State<Gate>, req: Request) -> Response {
    let bearer = format!("Bearer {TOKEN}");
    if req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        != Some(bearer.as_str())
    {
        return challenge(&gate);
    }
    let url = format!("http://{}{}", gate.upstream, req.uri());
    let mut upstream = gate.http.request(req.method().clone(), url);
    if let Some(accept) = req.headers().get("accept") {
        upstream = upstream.header("accept", accept.clone());
    }
    let answer = upstream.send().await.expect("upstream");
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "transfer-encoding" && name != "connection" {
            response = response.header(name.as_str(), value.as_bytes());
        }
    }
    let body = answer.bytes().await.expect("upstream body");
    response.body(Body::from(body)).unwrap()
}

#[tokio::test]
async fn docker_registry_behind_a_bearer_token_service() {
    let registry = Registry::start().await;
    let image = TestImage {
        config: config_json(&["T=1"], "", "amd64"),
        layers: vec![TestLayer::new(
            TarBuilder::new().file("behind-token", b"yes").finish(),
            Compression::Gzip,
        )],
        docker: false,
    };
    let (pushed, _) = registry.push_image("org/app", Some("latest"), &image).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Gate {
        upstream: registry.addr.clone(),
        realm: format!("http://{addr}/token"),
        http: reqwest::Client::new(),
        scopes: Arc::default(),
    };
    let app = Router::new()
        .route("/token", get(token))
        .fallback(forward)
        .with_state(gate.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut source = Source {
        repository: format!("{addr}/org/app"),
        tag: "latest".into(),
        insecure: true,
        username: Some("ci".into()),
        password: Some("s3cret".into()),
        ..Source::default()
    };
    assert_eq!(resolve(&source).await.expect("resolve"), pushed);
    let dest = tempfile::tempdir().unwrap();
    fetch(&source, &pushed, &Platform::host(), dest.path(), |_| {})
        .await
        .expect("fetch");
    assert_eq!(
        std::fs::read(dest.path().join("rootfs/behind-token")).unwrap(),
        b"yes"
    );
    let scopes = gate.scopes.lock().unwrap().clone();
    assert!(!scopes.is_empty(), "the token service was asked");
    assert!(
        scopes
            .iter()
            .all(|q| q.contains("scope=repository%3Aorg%2Fapp%3Apull")
                && q.contains("service=hangar-test")),
        "{scopes:?}"
    );

    // Credentials the token service refuses: the configuration's fault.
    source.password = Some("wrong".into());
    let err = resolve(&source).await.unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err:?}");
    assert!(!err.is_infrastructure());
    server.abort();
}
