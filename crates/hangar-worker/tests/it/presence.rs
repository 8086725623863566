//! The agent's presence against a fake web: it is opened with the
//! registration's own token, opened again when web ends it (a web node
//! that stops), and ended with a goodbye when the agent stops.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use hangar_api::{Heartbeat, HeartbeatAccepted, Registered};
use hangar_core::pressure::Thresholds;
use hangar_volumes::DriverKind;
use hangar_worker::health::HealthConfig;
use hangar_worker::WorkerConfig;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What the fake web saw of presences.
#[derive(Default, Clone, Debug)]
struct Seen {
    /// The bearer token of each presence opened.
    opened: Vec<String>,
    /// What each presence's body said before it ended, in the order they
    /// ended, and whether it ended cleanly.
    ended: Vec<(String, bool)>,
}

#[derive(Clone)]
struct FakeWeb {
    seen: Arc<watch::Sender<Seen>>,
    /// Cancelled to end the presence now held (as a stopping web does).
    end_presence: Arc<std::sync::Mutex<CancellationToken>>,
}

async fn register() -> Json<Registered> {
    Json(Registered {
        generation: 1,
        kind: hangar_api::RegistrationKind::New,
        heartbeat_interval_ms: Some(50),
        heartbeat_ttl_ms: 60_000,
        token: "token-1".into(),
    })
}

async fn heartbeat(Json(_): Json<Heartbeat>) -> Json<HeartbeatAccepted> {
    Json(HeartbeatAccepted {
        state: hangar_api::WorkerState::Running,
    })
}

async fn presence(State(web): State<FakeWeb>, headers: HeaderMap, body: Body) -> Body {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim_start_matches("Bearer ")
        .to_string();
    // The token that ends it is in place before the test hears of it.
    let end = CancellationToken::new();
    *web.end_presence.lock().unwrap() = end.clone();
    web.seen.send_modify(|s| s.opened.push(token));
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(2);
    let _ = tx.try_send(Ok(Bytes::from_static(b"held\n")));
    let seen = web.seen.clone();
    tokio::spawn(async move {
        let mut frames = body.into_data_stream();
        let mut said = Vec::new();
        let clean = loop {
            tokio::select! {
                _ = end.cancelled() => {
                    let _ = tx.send(Ok(Bytes::from_static(b"web-stopping\n"))).await;
                    break true;
                }
                frame = frames.next() => match frame {
                    Some(Ok(b)) => said.extend_from_slice(&b),
                    Some(Err(_)) => break false,
                    None => break true,
                },
            }
        };
        let said = String::from_utf8_lossy(&said).into_owned();
        seen.send_modify(|s| s.ended.push((said, clean)));
    });
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|x| (x, rx))
    }))
}

async fn until(seen: &watch::Sender<Seen>, what: &str, done: impl Fn(&Seen) -> bool) -> Seen {
    let mut changes = seen.subscribe();
    let waited = tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|s| done(s))).await;
    match waited {
        Ok(Ok(s)) => s.clone(),
        _ => panic!("{what}: not within 10 s; web saw {:?}", *seen.borrow()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_presence_is_held_again_when_web_ends_it_and_ends_with_a_goodbye() {
    let web = FakeWeb {
        seen: Arc::new(watch::Sender::new(Seen::default())),
        end_presence: Arc::default(),
    };
    let app = Router::new()
        .route("/api/v1/workers", post(register))
        .route("/api/v1/workers/{name}/heartbeat", put(heartbeat))
        .route("/api/v1/workers/{name}/presence", post(presence))
        .with_state(web.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let never = Thresholds {
        soft: 10.0,
        hard: 20.0,
        hysteresis: 0.0,
    };
    let config = WorkerConfig {
        name: "w1".into(),
        work_dir: dir.path().to_path_buf(),
        web_url: url,
        worker_key: "fleet-key".into(),
        worker_key_file: None,
        http_limits: hangar_http::Limits::worker(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        ephemeral: false,
        heartbeat_interval: Duration::from_millis(50),
        resource_types_dir: None,
        volume_driver: Some(DriverKind::Naive),
        api_bind: "127.0.0.1:0".into(),
        api_url: None,
        report_interval: Duration::from_secs(3600),
        health: HealthConfig {
            memory_limit: Some(1 << 40),
            memory_thresholds: never,
            disk_thresholds: never,
            check_interval: Duration::from_secs(3600),
            web_timeout: Duration::from_secs(3600),
            default_container_memory: None,
        },
        task_user: hangar_worker::containers::DEFAULT_TASK_IDS,
        allow_import_dirs: vec![],
        allow_resource_dirs: vec![],
        allow_privileged: false,
        task_network: Default::default(),
        process_sandbox: false,
        pids_limit: None,
    };
    let (_commands, rx) = mpsc::channel(4);
    let shutdown = CancellationToken::new();
    let agent = tokio::spawn(hangar_worker::run(config, rx, shutdown.clone()));

    // Held under the registration's own token, not the fleet's key.
    let seen = until(&web.seen, "a presence", |s| !s.opened.is_empty()).await;
    assert_eq!(seen.opened, ["token-1"]);
    // Web ends it (a web node stopping): the worker holds it again.
    web.end_presence.lock().unwrap().cancel();
    let seen = until(&web.seen, "a second presence", |s| s.opened.len() == 2).await;
    assert_eq!(seen.ended, [(String::new(), true)]);
    // The agent stops: it says goodbye and ends the body.
    shutdown.cancel();
    let seen = until(&web.seen, "the goodbye", |s| s.ended.len() == 2).await;
    assert_eq!(seen.ended[1], ("goodbye".to_string(), true));
    agent.await.unwrap().unwrap();
}
