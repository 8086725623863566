//! Who may do what to a worker, tried as an attacker would: forged calls
//! with another worker's or the fleet's credential, registrations that try
//! to take a live worker's name, a worker that names a URL to learn web's
//! secrets, and a database that is not the one the fleet knew. Each refusal
//! is checked to have changed nothing. On SQLite and PostgreSQL alike.

use std::sync::{Arc, Mutex};

use crate::common::{api_code, registration, TestWeb, ADMIN, API_TOKEN, TTL, WORKER_KEY};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use hangar_api::{CreateVolume, Heartbeat, RegisterWorker, VolumeReport};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use tokio_util::sync::CancellationToken;

fn heartbeat(generation: i64) -> Heartbeat {
    Heartbeat {
        generation,
        containers: 0,
        volumes: 0,
        condition: None,
    }
}

fn create(worker: &str) -> CreateVolume {
    CreateVolume {
        worker: worker.into(),
        strategy: hangar_api::Strategy::Empty,
        parent: None,
        import_path: None,
        owner_kind: hangar_api::OwnerKind::TaskCache,
        owner_id: None,
    }
}

/// A real worker volume API in-process, serving with `token`; stopping it
/// is how a test kills the worker process.
struct LiveApi {
    url: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl LiveApi {
    async fn start(token: &str) -> LiveApi {
        let dir = tempfile::tempdir().unwrap();
        let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            VolumeApi::new(manager, token, Limits::default()),
            stop.clone(),
        ));
        LiveApi {
            url,
            stop,
            _dir: dir,
        }
    }

    fn registration(&self, name: &str, identity: &str, token: &str) -> RegisterWorker {
        let mut reg = registration(name, identity);
        reg.api_url = Some(self.url.clone());
        reg.api_token = Some(token.into());
        reg
    }
}

async fn another_workers_credential_opens_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    let api = LiveApi::start(API_TOKEN).await;
    let (g1, _) = t
        .register_with(&api.registration("w1", "id-1", API_TOKEN))
        .await;
    let g2 = t.register("w2", "id-2").await;
    t.admin.create_volume(&create("w1")).await.unwrap();
    let before = t.snapshot().await;
    let volumes_before = t.admin.volumes(None).await.unwrap();
    let w2 = t.as_worker("w2");

    // w2's own credential, used on w1's routes, with w1's or its own generation.
    for generation in [g1, g2] {
        let err = w2
            .heartbeat("w1", &heartbeat(generation))
            .await
            .unwrap_err();
        assert_ne!(api_code(err).0, StatusCode::OK);
    }
    let stranger = VolumeReport {
        generation: g1,
        handles: vec!["stranger".into()],
        containers: Some(vec![]),
    };
    let err = w2.report_volumes("w1", &stranger).await.unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::UNAUTHORIZED);
    assert!(w2.land("w1").await.is_err());
    assert!(w2.retire("w1").await.is_err());

    // The fleet key admits a worker and does nothing else.
    for err in [
        t.worker.heartbeat("w1", &heartbeat(g1)).await.unwrap_err(),
        t.worker.report_volumes("w1", &stranger).await.unwrap_err(),
        t.worker.land("w1").await.unwrap_err(),
    ] {
        assert_eq!(api_code(err), (StatusCode::FORBIDDEN, "forbidden".into()));
    }
    // A made-up token of the worker's shape is refused too.
    let forged = t.worker.with_token(&format!("{g1}.{}", "a".repeat(64)));
    let err = forged.heartbeat("w1", &heartbeat(g1)).await.unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::UNAUTHORIZED);

    assert_eq!(t.snapshot().await, before);
    assert_eq!(t.admin.volumes(None).await.unwrap(), volumes_before);
    t.stop().await;
}

async fn a_stale_credential_is_told_to_stop_without_the_current_generation(store: Store) {
    let t = TestWeb::start(store).await;
    let (old, zombie) = t.register_with(&registration("w1", "id-a")).await;
    t.advance(TTL);
    let (current, _) = t.register_with(&registration("w1", "id-a")).await;
    let err = zombie.heartbeat("w1", &heartbeat(old)).await.unwrap_err();
    let message = err.to_string();
    assert!(!message.contains(&current.to_string()), "{message}");
    assert_eq!(api_code(err), (StatusCode::CONFLICT, "superseded".into()));
    t.stop().await;
}

async fn who_landed_a_worker_is_recorded_truthfully(store: Store) {
    let t = TestWeb::start(store).await;
    let g = t.register("w1", "id-1").await;
    t.register("w2", "id-2").await;
    t.as_worker("w1").land("w1").await.unwrap();
    t.admin.land("w2").await.unwrap();
    let cause = |name: &'static str| {
        let admin = t.admin.clone();
        async move { admin.events(Some(name), 1).await.unwrap()[0].cause.clone() }
    };
    let w1 = cause("w1").await;
    let w2 = cause("w2").await;
    assert!(
        w1.contains(&format!("the worker itself (generation {g})")),
        "{w1}"
    );
    assert!(w2.contains("an operator"), "{w2}");
    t.stop().await;
}

async fn a_live_worker_cannot_be_taken_over(store: Store) {
    let t = TestWeb::start(store).await;
    let api = LiveApi::start(API_TOKEN).await;
    let (g, real) = t
        .register_with(&api.registration("w1", "real-identity", API_TOKEN))
        .await;
    let volume = t.admin.create_volume(&create("w1")).await.unwrap();
    t.advance(1_000);
    // The worker as listed, but for its newest event (the refusal's).
    let listed = || async {
        let mut w = t.admin.worker("w1").await.unwrap();
        w.last_event = None;
        w
    };
    let before = listed().await;

    // An impostor with a made-up state identity and API of its own.
    let impostor_api = LiveApi::start("impostor-token-0123456789abcdef0123").await;
    let impostor = impostor_api.registration(
        "w1",
        "made-up-identity",
        "impostor-token-0123456789abcdef0123",
    );
    for _ in 0..2 {
        let err = t.worker.register(&impostor).await.unwrap_err();
        assert_eq!(
            api_code(err),
            (StatusCode::CONFLICT, "takeover_refused".into())
        );
    }
    // The live worker, its generation, its volumes: untouched, and it goes on.
    assert_eq!(listed().await, before);
    assert_eq!(
        t.admin
            .volume(&volume.handle)
            .await
            .unwrap()
            .state
            .to_string(),
        "created"
    );
    assert_eq!(
        real.heartbeat("w1", &heartbeat(g))
            .await
            .unwrap()
            .state
            .to_string(),
        "running"
    );
    // The refusal is an event that names the caller.
    let event = &t.admin.events(Some("w1"), 1).await.unwrap()[0];
    assert_eq!(
        (event.kind.as_str(), event.generation),
        ("takeover-refused", g)
    );
    assert!(event.cause.contains("127.0.0.1:"), "{}", event.cause);
    assert!(event.cause.contains(&impostor_api.url), "{}", event.cause);

    // The real process itself may register again (after a self-landing).
    let again = t
        .worker
        .register(&api.registration("w1", "real-identity", API_TOKEN))
        .await
        .unwrap();
    assert_eq!(again.kind.to_string(), "state-kept");
    t.stop().await;
}

async fn a_dead_workers_name_is_taken_at_once(store: Store) {
    let t = TestWeb::start(store).await;
    let api = LiveApi::start(API_TOKEN).await;
    t.register_with(&api.registration("w1", "old-identity", API_TOKEN))
        .await;
    let volume = t.admin.create_volume(&create("w1")).await.unwrap();
    // The pod is killed (its process and API gone) and comes back wiped,
    // well within the TTL: no waiting.
    api.stop.cancel();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    t.advance(1_000);
    let successor = LiveApi::start("successor-token-0123456789abcdef01").await;
    let reg = t
        .worker
        .register(&successor.registration(
            "w1",
            "new-identity",
            "successor-token-0123456789abcdef01",
        ))
        .await
        .unwrap();
    assert_eq!(reg.kind.to_string(), "state-lost");
    let err = t.admin.volume(&volume.handle).await.unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::NOT_FOUND);
    t.stop().await;
}

async fn a_new_process_at_the_old_address_is_not_the_old_one(store: Store) {
    let t = TestWeb::start(store).await;
    // Same address, new process, new token: the probe with the old token is
    // refused there, so the old incarnation is gone.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut old = registration("w1", "id-a");
    old.api_url = Some(url.clone());
    old.api_token = Some(API_TOKEN.into());
    t.register_with(&old).await;
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let listener = tokio::net::TcpListener::bind(url.trim_start_matches("http://"))
        .await
        .unwrap();
    let new_token = "restarted-process-token-0123456789ab";
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        VolumeApi::new(manager, new_token, Limits::default()),
        stop.clone(),
    ));
    let mut new = registration("w1", "id-a");
    new.api_url = Some(url);
    new.api_token = Some(new_token.into());
    let reg = t.worker.register(&new).await.unwrap();
    assert_eq!(reg.kind.to_string(), "state-kept");
    stop.cancel();
    t.stop().await;
}

/// A live worker kept busy (its API accepts and never answers, as under a
/// flood of idle sockets) still heartbeats: its name is not taken, the
/// refusal says why, nothing changes; once its heartbeats lapse it is.
async fn a_worker_whose_api_is_silent_keeps_its_name_until_its_ttl(store: Store) {
    let t = TestWeb::start(store).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            open.push(s);
        }
    });
    let mut old = registration("w1", "id-a");
    old.api_url = Some(url);
    old.api_token = Some(API_TOKEN.into());
    let (g, _) = t.register_with(&old).await;
    t.advance(TTL / 2);
    let err = t
        .worker
        .register(&registration("w1", "id-b"))
        .await
        .unwrap_err();
    let (status, code) = api_code(err);
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "takeover_refused")
    );
    let before = t.admin.worker("w1").await.unwrap();
    assert_eq!(before.generation, g);
    assert_eq!(before.state.to_string(), "running");
    let events = t.admin.events(Some("w1"), 100).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.cause.contains("neither answered nor refused")),
        "{events:?}"
    );
    t.advance(TTL);
    let reg = t
        .worker
        .register(&registration("w1", "id-b"))
        .await
        .unwrap();
    assert_eq!(reg.kind.to_string(), "state-lost");
    held.abort();
    t.stop().await;
}

async fn a_silent_worker_without_an_api_is_taken_only_after_its_ttl(store: Store) {
    let t = TestWeb::start(store).await;
    let g = t.register("w1", "id-a").await;
    t.advance(TTL - 1);
    let err = t
        .worker
        .register(&registration("w1", "id-b"))
        .await
        .unwrap_err();
    assert_eq!(
        api_code(err),
        (StatusCode::CONFLICT, "takeover_refused".into())
    );
    assert_eq!(t.admin.worker("w1").await.unwrap().generation, g);
    t.advance(1);
    let reg = t
        .worker
        .register(&registration("w1", "id-b"))
        .await
        .unwrap();
    assert_eq!(reg.kind.to_string(), "state-lost");
    t.stop().await;
}

/// What a fake worker API saw: each request's path and Authorization.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An HTTP server that records what it is sent and answers every request
/// with `answer` (a redirect to `location`, when given).
async fn recorder(location: Option<String>) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let record = record.clone();
        let location = location.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            record.lock().unwrap().push((uri.path().to_string(), auth));
            match location {
                Some(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
                None => StatusCode::IM_A_TEAPOT.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

async fn a_fake_api_url_learns_only_its_own_token_and_redirects_are_not_followed(store: Store) {
    let t = TestWeb::start(store).await;
    let (elsewhere, seen_elsewhere) = recorder(None).await;
    let (fake, seen) = recorder(Some(format!("{elsewhere}/volumes"))).await;
    let own = "the-impostors-own-token-0123456789";
    let mut reg = registration("evil", "id");
    reg.api_url = Some(fake);
    reg.api_token = Some(own.into());
    t.register_with(&reg).await;
    assert!(t.admin.create_volume(&create("evil")).await.is_err());

    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "web never called the fake API");
    for (path, auth) in &seen {
        assert_eq!(
            auth.as_deref(),
            Some(format!("Bearer {own}").as_str()),
            "{path}"
        );
        let auth = auth.as_deref().unwrap_or("");
        assert!(
            !auth.contains(WORKER_KEY) && !auth.contains(ADMIN),
            "{auth}"
        );
    }
    assert!(seen_elsewhere.lock().unwrap().is_empty());
    t.stop().await;
}

async fn api_urls_that_would_change_where_the_token_goes_are_refused(store: Store) {
    let t = TestWeb::start(store).await;
    for url in [
        "http://user:pass@127.0.0.1:1",
        "http://127.0.0.1:1/?x=1",
        "http://127.0.0.1:1/#frag",
        "ftp://127.0.0.1:1",
        "http://",
        "not a url",
    ] {
        let mut reg = registration("w1", "id");
        reg.api_url = Some(url.into());
        reg.api_token = Some(API_TOKEN.into());
        let err = t.worker.register(&reg).await.unwrap_err();
        assert_eq!(api_code(err).0, StatusCode::BAD_REQUEST, "{url}");
    }
    let mut no_token = registration("w1", "id");
    no_token.api_url = Some("http://127.0.0.1:1".into());
    let mut weak = no_token.clone();
    weak.api_token = Some("short".into());
    let mut token_only = registration("w1", "id");
    token_only.api_token = Some(API_TOKEN.into());
    for reg in [no_token, weak, token_only] {
        let err = t.worker.register(&reg).await.unwrap_err();
        assert_eq!(api_code(err).0, StatusCode::BAD_REQUEST, "{reg:?}");
    }
    assert!(t.admin.workers().await.unwrap().is_empty());
    t.stop().await;
}

async fn a_generation_the_database_never_issued_is_refused(store: Store) {
    let t = TestWeb::start(store).await;
    // A worker that was given generation 1000 by the database the fleet knew
    // meets an empty one.
    let mut reg = registration("w1", "id-a");
    reg.last_generation = Some(1000);
    let err = t.worker.register(&reg).await.unwrap_err();
    assert_eq!(
        api_code(err),
        (StatusCode::SERVICE_UNAVAILABLE, "database_mismatch".into())
    );
    assert!(t.admin.workers().await.unwrap().is_empty());
    assert!(t.admin.events(None, 10).await.unwrap().is_empty());
    // Numbers it did issue are fine.
    let g = t.register("w2", "id-b").await;
    let mut known = registration("w3", "id-c");
    known.last_generation = Some(g);
    assert!(t.worker.register(&known).await.unwrap().generation > g);
    t.stop().await;
}

async fn an_adopted_database_numbers_above_what_workers_were_given(store: Store) {
    let t = TestWeb::start_with(store, |c| c.accept_new_database = true).await;
    let mut reg = registration("w1", "id-a");
    reg.last_generation = Some(1000);
    assert_eq!(t.worker.register(&reg).await.unwrap().generation, 1001);
    assert_eq!(t.register("w2", "id-b").await, 1002);
    t.stop().await;
}

on_both_databases!(
    another_workers_credential_opens_nothing,
    a_stale_credential_is_told_to_stop_without_the_current_generation,
    who_landed_a_worker_is_recorded_truthfully,
    a_live_worker_cannot_be_taken_over,
    a_dead_workers_name_is_taken_at_once,
    a_new_process_at_the_old_address_is_not_the_old_one,
    a_silent_worker_without_an_api_is_taken_only_after_its_ttl,
    a_worker_whose_api_is_silent_keeps_its_name_until_its_ttl,
    a_fake_api_url_learns_only_its_own_token_and_redirects_are_not_followed,
    api_urls_that_would_change_where_the_token_goes_are_refused,
    a_generation_the_database_never_issued_is_refused,
    an_adopted_database_numbers_above_what_workers_were_given,
);
