//! The agent against a fake web whose volume report endpoint can be held:
//! heartbeats go on while a report hangs, no second report starts beside
//! it, a report carries the generation of the current registration, and a
//! superseded worker stops without waiting for the report under way; the
//! registration says whether the worker allows privileged containers.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use hangar_api::{Heartbeat, HeartbeatAccepted, Registered, VolumeReport, VolumeReportAnswer};
use hangar_core::pressure::Thresholds;
use hangar_volumes::DriverKind;
use hangar_worker::health::HealthConfig;
use hangar_worker::{AgentCommand, AgentExit, WorkerConfig};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What the fake web saw, in order.
#[derive(Default)]
struct Seen {
    registrations: i64,
    /// `allow_privileged` of each registration.
    allow_privileged: Vec<bool>,
    /// The generation of each heartbeat.
    heartbeats: Vec<i64>,
    /// The generation of each report that reached the handler.
    reports: Vec<i64>,
    /// Reports the handler answered.
    reports_done: usize,
    /// Reports in the handler now, and the most ever at once.
    in_flight: usize,
    max_in_flight: usize,
    /// Heartbeats seen when the first held report arrived.
    heartbeats_when_held: Option<usize>,
    /// The next heartbeat is answered with this code (409).
    refuse_next_heartbeat: Option<&'static str>,
}

/// What web saw, sent to the test at every change: the test awaits the
/// change it wants instead of polling.
type Watched = Arc<watch::Sender<Seen>>;

#[derive(Clone)]
struct FakeWeb {
    seen: Watched,
    /// While false, every report waits in the handler.
    reports_open: watch::Receiver<bool>,
}

async fn register_with(
    State(web): State<FakeWeb>,
    Json(reg): Json<hangar_api::RegisterWorker>,
) -> Json<Registered> {
    let mut generation = 0;
    web.seen.send_modify(|seen| {
        seen.registrations += 1;
        seen.allow_privileged.push(reg.allow_privileged);
        generation = seen.registrations;
    });
    Json(Registered {
        generation,
        kind: hangar_api::RegistrationKind::New,
        heartbeat_interval_ms: Some(20),
        heartbeat_ttl_ms: 60_000,
        token: format!("token-{generation}"),
    })
}

async fn heartbeat(State(web): State<FakeWeb>, Json(hb): Json<Heartbeat>) -> Response {
    let mut refuse = None;
    web.seen.send_modify(|seen| {
        seen.heartbeats.push(hb.generation);
        refuse = seen.refuse_next_heartbeat.take();
    });
    if let Some(code) = refuse {
        let body = serde_json::json!({"error": {"code": code, "message": "told by the test"}});
        return (StatusCode::CONFLICT, Json(body)).into_response();
    }
    Json(HeartbeatAccepted {
        state: hangar_api::WorkerState::Running,
    })
    .into_response()
}

async fn report(State(web): State<FakeWeb>, Json(r): Json<VolumeReport>) -> Response {
    let held = !*web.reports_open.borrow();
    web.seen.send_modify(|seen| {
        seen.reports.push(r.generation);
        seen.in_flight += 1;
        seen.max_in_flight = seen.max_in_flight.max(seen.in_flight);
        if held && seen.heartbeats_when_held.is_none() {
            seen.heartbeats_when_held = Some(seen.heartbeats.len());
        }
    });
    // Undone when the worker drops the request, too.
    struct Leave(Watched);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.send_modify(|seen| seen.in_flight -= 1);
        }
    }
    let _leave = Leave(web.seen.clone());
    let mut open = web.reports_open.clone();
    if open.wait_for(|o| *o).await.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    web.seen.send_modify(|seen| seen.reports_done += 1);
    Json(VolumeReportAnswer {
        destroy: vec![],
        destroy_containers: vec![],
    })
    .into_response()
}

struct Fixture {
    seen: Watched,
    open_reports: watch::Sender<bool>,
    agent: tokio::task::JoinHandle<anyhow::Result<AgentExit>>,
    shutdown: CancellationToken,
    _commands: mpsc::Sender<AgentCommand>,
    _dir: tempfile::TempDir,
}

async fn start(reports_open: bool) -> Fixture {
    start_with(reports_open, false).await
}

async fn start_with(reports_open: bool, allow_privileged: bool) -> Fixture {
    let seen: Watched = Arc::new(watch::Sender::new(Seen::default()));
    let (open_reports, reports_open_rx) = watch::channel(reports_open);
    let web = FakeWeb {
        seen: seen.clone(),
        reports_open: reports_open_rx,
    };
    let app = Router::new()
        .route("/api/v1/workers", post(register_with))
        .route("/api/v1/workers/{name}/heartbeat", put(heartbeat))
        .route("/api/v1/workers/{name}/volumes", put(report))
        .with_state(web);
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
        heartbeat_interval: Duration::from_millis(20),
        resource_types_dir: None,
        volume_driver: Some(DriverKind::Naive),
        api_bind: "127.0.0.1:0".into(),
        api_url: None,
        // Far shorter than a held report: a second report would start
        // many times over if the agent let it.
        report_interval: Duration::from_millis(10),
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
        allow_privileged,
        task_network: Default::default(),
        process_sandbox: true,
        pids_limit: Some(hangar_worker::containers::DEFAULT_PIDS_LIMIT),
    };
    let (commands, rx) = mpsc::channel(4);
    let shutdown = CancellationToken::new();
    let agent = tokio::spawn(hangar_worker::run(config, rx, shutdown.clone()));
    Fixture {
        seen,
        open_reports,
        agent,
        shutdown,
        _commands: commands,
        _dir: dir,
    }
}

/// Waits (at most 8 s, less than the client's 10 s timeout, so a held
/// report is still held) until `done` holds of what web saw, woken by each
/// change.
async fn until(seen: &Watched, done: impl Fn(&Seen) -> bool) -> bool {
    let mut changes = seen.subscribe();
    tokio::time::timeout(Duration::from_secs(8), changes.wait_for(|s| done(s)))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_on_while_a_report_hangs_and_reports_follow_the_registration() {
    let f = start(false).await;
    assert!(
        until(&f.seen, |s| s.heartbeats_when_held.is_some()).await,
        "no report reached web"
    );
    // Twenty heartbeats land while the first report is held in web.
    let landed = until(&f.seen, |s| {
        s.heartbeats.len() >= s.heartbeats_when_held.unwrap() + 20
    })
    .await;
    {
        let s = f.seen.borrow();
        let held_at = s.heartbeats_when_held.unwrap();
        assert!(
            landed,
            "only {} heartbeats landed while the report was held",
            s.heartbeats.len() - held_at
        );
        assert_eq!(s.reports_done, 0, "the held report was answered");
        assert_eq!(
            (s.reports.len(), s.max_in_flight),
            (1, 1),
            "a second report started beside the held one"
        );
        assert_eq!(s.reports, vec![1]);
    }

    // Let reports through: they come again, one at a time.
    f.open_reports.send_replace(true);
    assert!(until(&f.seen, |s| s.reports_done >= 3).await);

    // Web asks the worker to register again: reports go on with the new
    // generation.
    f.seen
        .send_modify(|s| s.refuse_next_heartbeat = Some("reregister"));
    // (The first report and the first heartbeat of the new registration
    // race; both must come.)
    assert!(
        until(&f.seen, |s| s.reports.last() == Some(&2)
            && s.heartbeats.last() == Some(&2))
        .await,
        "no report and heartbeat with the new generation"
    );
    {
        let s = f.seen.borrow();
        assert_eq!(s.registrations, 2);
        assert_eq!(s.max_in_flight, 1, "two reports ran at once");
        assert_eq!(s.heartbeats.last(), Some(&2));
    }

    f.shutdown.cancel();
    let exit = f.agent.await.unwrap().unwrap();
    assert_eq!(exit, AgentExit::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_worker_stops_without_waiting_for_the_report_under_way() {
    let f = start(false).await;
    assert!(
        until(&f.seen, |s| s.heartbeats_when_held.is_some()).await,
        "no report reached web"
    );
    f.seen
        .send_modify(|s| s.refuse_next_heartbeat = Some("superseded"));
    // The held report is never let through: the agent must drop it. (Were
    // it awaited, the agent would end only with the client's 10 s timeout.)
    let exit = tokio::time::timeout(Duration::from_secs(8), f.agent)
        .await
        .expect("the agent waited for the held report")
        .unwrap()
        .unwrap();
    assert!(matches!(exit, AgentExit::Superseded(_)), "{exit:?}");
    let s = f.seen.borrow();
    assert_eq!(s.reports_done, 0);
    assert_eq!(s.reports.len(), 1);
}

/// `--allow-privileged` is advertised with every registration, and only
/// when given: web places privileged steps by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registration_says_whether_privileged_containers_are_allowed() {
    for allow in [false, true] {
        let f = start_with(true, allow).await;
        assert!(until(&f.seen, |s| s.registrations >= 1).await);
        f.seen
            .send_modify(|s| s.refuse_next_heartbeat = Some("reregister"));
        assert!(until(&f.seen, |s| s.registrations >= 2).await);
        assert_eq!(
            f.seen.borrow().allow_privileged[..2],
            [allow, allow],
            "--allow-privileged {allow}"
        );
        f.shutdown.cancel();
        assert_eq!(f.agent.await.unwrap().unwrap(), AgentExit::Stopped);
    }
}
