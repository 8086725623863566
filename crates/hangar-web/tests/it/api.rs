//! The web API served in-process on port 0, driven by the real client, on
//! SQLite and PostgreSQL alike. Time is a manual clock.

use crate::common::{api_code, registration, TestWeb, ADMIN, TTL, WORKER_KEY};
use hangar_api::Heartbeat;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

async fn info_answers_without_credentials(store: Store) {
    let t = TestWeb::start(store).await;
    let backend = t.web.store().backend().as_str();
    let resp = t
        .raw
        .get(format!("{}/api/v1/info", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let info: hangar_api::Info = resp.json().await.unwrap();
    assert!(info.database.reachable);
    assert_eq!(info.database.backend, backend);
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    t.stop().await;
}

async fn a_worker_registers_heartbeats_and_is_listed(store: Store) {
    let t = TestWeb::start(store).await;
    let reg = t
        .worker
        .register(&registration("w1", "id-a"))
        .await
        .unwrap();
    assert_eq!(
        (
            reg.kind.as_str(),
            reg.heartbeat_ttl_ms,
            reg.heartbeat_interval_ms
        ),
        ("new", TTL, Some(5_000))
    );
    t.advance(5_000);
    let hb = Heartbeat {
        generation: reg.generation,
        containers: 2,
        volumes: 5,
        condition: None,
    };
    let w1 = t.worker.with_token(&reg.token);
    assert_eq!(
        w1.heartbeat("w1", &hb).await.unwrap().state.to_string(),
        "running"
    );
    let w = t.admin.worker("w1").await.unwrap();
    assert_eq!(
        (w.state.as_str(), w.generation, w.containers, w.volumes),
        ("running", reg.generation, 2, 5)
    );
    assert_eq!(w.state_identity, "id-a");
    assert_eq!(w.last_event.unwrap().kind.to_string(), "registered");
    t.stop().await;
}

/// `allow_privileged` of a registration (`--allow-privileged`) is what
/// `hangar workers` shows, and what the next registration says replaces it.
async fn allow_privileged_round_trips_through_registration(store: Store) {
    let t = TestWeb::start(store).await;
    let mut root = registration("root", "id-a");
    root.allow_privileged = true;
    t.worker.register(&root).await.unwrap();
    t.worker
        .register(&registration("plain", "id-b"))
        .await
        .unwrap();
    let shown = |workers: Vec<hangar_api::Worker>| -> Vec<(String, bool)> {
        workers
            .into_iter()
            .map(|w| (w.name, w.allow_privileged))
            .collect()
    };
    assert_eq!(
        shown(t.admin.workers().await.unwrap()),
        [("plain".to_string(), false), ("root".to_string(), true)]
    );
    assert!(t.admin.worker("root").await.unwrap().allow_privileged);
    // Restarted without the flag (the old process silent for a whole TTL,
    // so its name may be taken): it allows nothing any more.
    t.advance(TTL);
    t.worker
        .register(&registration("root", "id-a"))
        .await
        .unwrap();
    assert!(!t.admin.worker("root").await.unwrap().allow_privileged);
    // A listed worker always says it, true or false.
    let raw: serde_json::Value = t
        .raw
        .get(format!("{}/api/v1/workers/root", t.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["allow_privileged"], serde_json::json!(false));
    t.stop().await;
}

async fn the_lifecycle_runs_through_the_api_in_virtual_time(store: Store) {
    let t = TestWeb::start(store).await;
    let g1 = t.register("w1", "id-a").await;
    let g2 = t.register("w2", "id-b").await;
    // w2 keeps heartbeating, w1 goes quiet.
    for _ in 0..4 {
        t.advance(5_000);
        t.as_worker("w2")
            .heartbeat(
                "w2",
                &Heartbeat {
                    generation: g2,
                    containers: 0,
                    volumes: 0,
                    condition: None,
                },
            )
            .await
            .unwrap();
        t.lifecycle().await;
    }
    let w1 = t.admin.worker("w1").await.unwrap();
    assert_eq!(w1.state.to_string(), "stalled");
    assert_eq!(
        t.admin.worker("w2").await.unwrap().state.to_string(),
        "running"
    );
    // The stalled worker's old generation must register again.
    let err = t
        .as_worker("w1")
        .heartbeat(
            "w1",
            &Heartbeat {
                generation: g1,
                containers: 0,
                volumes: 0,
                condition: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(err), (StatusCode::CONFLICT, "reregister".into()));
    // Prune it, then retire w2: it goes once its work is done.
    assert_eq!(
        t.admin.prune("w1").await.unwrap().state.to_string(),
        "removed"
    );
    assert_eq!(
        t.admin.retire("w2").await.unwrap().state.to_string(),
        "retiring"
    );
    t.lifecycle().await;
    let names: Vec<_> = t
        .admin
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert!(names.is_empty(), "{names:?}");
    let kinds: Vec<_> = t
        .admin
        .events(None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.worker, e.kind.to_string()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("w2".to_string(), "retired".to_string()),
            ("w2".into(), "retiring".into()),
            ("w1".into(), "pruned".into()),
            ("w1".into(), "stalled".into()),
            ("w2".into(), "registered".into()),
            ("w1".into(), "registered".into()),
        ]
    );
    t.stop().await;
}

async fn a_superseded_worker_is_told_to_stop(store: Store) {
    let t = TestWeb::start(store).await;
    let (old, zombie) = t.register_with(&registration("w1", "id-a")).await;
    // Silent for a whole TTL (paused, partitioned): its name may be taken.
    t.advance(TTL);
    let new = t.register("w1", "id-b").await;
    let err = zombie
        .heartbeat(
            "w1",
            &Heartbeat {
                generation: old,
                containers: 0,
                volumes: 0,
                condition: None,
            },
        )
        .await
        .unwrap_err();
    assert!(!err.to_string().contains(&new.to_string()), "{err}");
    assert_eq!(api_code(err), (StatusCode::CONFLICT, "superseded".into()));
    let w = t.admin.worker("w1").await.unwrap();
    assert_eq!(
        (w.restarts, w.last_event.unwrap().kind.as_str()),
        (1, "restarted-state-lost")
    );
    t.stop().await;
}

async fn pruning_a_running_worker_is_a_clear_conflict(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("w1", "id-a").await;
    let before = t.snapshot().await;
    let err = t.admin.prune("w1").await.unwrap_err();
    assert!(err.to_string().contains("it is running"), "{err}");
    assert_eq!(api_code(err), (StatusCode::CONFLICT, "conflict".into()));
    assert_eq!(t.snapshot().await, before);
    let err = t.admin.prune("nobody").await.unwrap_err();
    assert_eq!(api_code(err), (StatusCode::NOT_FOUND, "not_found".into()));
    t.stop().await;
}

async fn prune_all_stalled_removes_only_stalled_workers(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("a", "1").await;
    t.register("b", "2").await;
    t.advance(TTL + 1);
    t.lifecycle().await;
    t.register("b", "2").await; // b came back
    assert_eq!(t.admin.prune_stalled().await.unwrap().pruned, ["a"]);
    let names: Vec<_> = t
        .admin
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert_eq!(names, ["b"]);
    t.stop().await;
}

async fn requests_without_valid_credentials_get_401_and_change_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("w1", "id-a").await;
    let before = t.snapshot().await;
    let body = serde_json::to_string(&registration("w2", "x")).unwrap();
    let cases: Vec<(reqwest::Method, &str, Option<&str>, Option<&str>)> = vec![
        (reqwest::Method::POST, "/api/v1/workers", None, Some(&body)),
        (
            reqwest::Method::POST,
            "/api/v1/workers",
            Some("Bearer wrong-key-0123456789"),
            Some(&body),
        ),
        (
            reqwest::Method::POST,
            "/api/v1/workers",
            Some("Basic d29ya2VyOmtleQ=="),
            Some(&body),
        ),
        (reqwest::Method::GET, "/api/v1/workers", None, None),
        (
            reqwest::Method::GET,
            "/api/v1/workers",
            Some("Bearer "),
            None,
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/workers/w1",
            Some("Bearer admin-token-012345678"),
            None,
        ),
        (reqwest::Method::PUT, "/api/v1/workers/w1/land", None, None),
        (
            reqwest::Method::PUT,
            "/api/v1/workers/w1/retire",
            Some("Bearer nope"),
            None,
        ),
        (
            reqwest::Method::POST,
            "/api/v1/stalled-workers/prune",
            None,
            None,
        ),
        (reqwest::Method::GET, "/api/v1/events", None, None),
    ];
    for (method, path, auth, body) in cases {
        let mut req = t.raw.request(method.clone(), format!("{}{path}", t.url));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path} with {auth:?}"
        );
        let err: hangar_api::ErrorBody = resp.json().await.unwrap();
        assert_eq!(err.error.code, "unauthorized");
    }
    assert_eq!(t.snapshot().await, before);
    t.stop().await;
}

async fn each_credential_works_only_where_it_belongs(store: Store) {
    let t = TestWeb::start(store).await;
    let err = t
        .admin
        .register(&registration("w1", "x"))
        .await
        .unwrap_err();
    assert_eq!(api_code(err), (StatusCode::FORBIDDEN, "forbidden".into()));
    t.register("w1", "x").await;
    let before = t.snapshot().await;
    let err = t.worker.prune("w1").await.unwrap_err();
    assert_eq!(api_code(err), (StatusCode::FORBIDDEN, "forbidden".into()));
    let err = t.worker.workers().await.unwrap_err();
    assert_eq!(api_code(err), (StatusCode::FORBIDDEN, "forbidden".into()));
    assert_eq!(t.snapshot().await, before);
    // A worker may land itself (SIGUSR1) with its key.
    assert_eq!(
        t.as_worker("w1")
            .land("w1")
            .await
            .unwrap()
            .state
            .to_string(),
        "landing"
    );
    t.stop().await;
}

async fn bad_registrations_get_a_clear_400_and_change_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("w1", "id-a").await;
    let before = t.snapshot().await;
    let valid = serde_json::to_value(registration("w2", "id")).unwrap();
    let with = |field: &str, value: serde_json::Value| {
        let mut v = valid.clone();
        v[field] = value;
        v.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (with("surprise", 1.into()), "unknown field `surprise`"),
        (with("name", "bad name".into()), "worker name"),
        (with("name", "".into()), "worker name"),
        (with("name", "../etc".into()), "worker name"),
        (with("name", "a".repeat(64).into()), "longer than 63"),
        (with("name", 12.into()), "invalid type"),
        (with("state_identity", "".into()), "state_identity"),
        (
            with("state_identity", "x\u{7}y".into()),
            "control characters",
        ),
        (with("tags", serde_json::json!(["ok", "not ok"])), "tag"),
        (
            with("tags", serde_json::json!(vec!["t"; 33])),
            "at most 32 tags",
        ),
        (with("platform", "linux/amd64".into()), "platform"),
        (with("team", "".into()), "team"),
        (with("containers", (-1).into()), "negative"),
        (
            with(
                "resource_types",
                serde_json::json!([{"type": "git", "path": "/rt/git", "extra": 1}]),
            ),
            "unknown field `extra`",
        ),
        (
            with(
                "resource_types",
                serde_json::json!([{"type": "g it", "path": "/rt"}]),
            ),
            "resource type",
        ),
        ("{\"name\": \"w2\"".to_string(), "malformed json"),
        ("[]".to_string(), "invalid"),
        ("null".to_string(), "invalid"),
    ];
    for (body, expected) in cases {
        let resp = t
            .raw
            .post(format!("{}/api/v1/workers", t.url))
            .bearer_auth(WORKER_KEY)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        let err: hangar_api::ErrorBody = resp.json().await.unwrap();
        assert_eq!(err.error.code, "bad_request");
        assert!(
            err.error.message.contains(expected),
            "{body}: {}",
            err.error.message
        );
    }
    assert_eq!(t.snapshot().await, before);
    t.stop().await;
}

async fn oversized_and_mistyped_bodies_are_refused(store: Store) {
    let t = TestWeb::start(store).await;
    let before = t.snapshot().await;
    let mut big = serde_json::to_value(registration("w2", "id")).unwrap();
    big["version"] = "v".repeat(hangar_api::MAX_JSON_BODY + 1).into();
    let resp = t
        .raw
        .post(format!("{}/api/v1/workers", t.url))
        .bearer_auth(WORKER_KEY)
        .header("content-type", "application/json")
        .body(big.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let err: hangar_api::ErrorBody = resp.json().await.unwrap();
    assert_eq!(err.error.code, "payload_too_large");
    let resp = t
        .raw
        .post(format!("{}/api/v1/workers", t.url))
        .bearer_auth(WORKER_KEY)
        .header("content-type", "text/plain")
        .body(serde_json::to_string(&registration("w2", "id")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(t.snapshot().await, before);
    t.stop().await;
}

async fn invalid_names_and_queries_in_urls_are_refused(store: Store) {
    let t = TestWeb::start(store).await;
    let err = t.admin.worker("bad name").await.unwrap_err();
    assert_eq!(
        api_code(err),
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    let err = t.admin.land("-x").await.unwrap_err();
    assert_eq!(
        api_code(err),
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    for query in [
        "limit=0",
        "limit=5000",
        "limit=abc",
        "worker=bad%20name",
        "colour=blue",
    ] {
        let resp = t
            .raw
            .get(format!("{}/api/v1/events?{query}", t.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
    }
    let resp = t
        .raw
        .get(format!("{}/api/v1/nothing-here", t.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    t.stop().await;
}

async fn metrics_count_workers_and_events(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("w1", "id-a").await;
    t.advance(TTL + 1);
    t.lifecycle().await;
    let text = t.metrics().await;
    assert!(
        text.contains("hangar_workers{state=\"stalled\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hangar_workers{state=\"running\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("hangar_worker_events_total{kind=\"stalled\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hangar_worker_events_total{kind=\"registered\"} 1"),
        "{text}"
    );
    t.stop().await;
}

on_both_databases!(
    info_answers_without_credentials,
    a_worker_registers_heartbeats_and_is_listed,
    allow_privileged_round_trips_through_registration,
    the_lifecycle_runs_through_the_api_in_virtual_time,
    a_superseded_worker_is_told_to_stop,
    pruning_a_running_worker_is_a_clear_conflict,
    prune_all_stalled_removes_only_stalled_workers,
    requests_without_valid_credentials_get_401_and_change_nothing,
    each_credential_works_only_where_it_belongs,
    bad_registrations_get_a_clear_400_and_change_nothing,
    oversized_and_mistyped_bodies_are_refused,
    invalid_names_and_queries_in_urls_are_refused,
    metrics_count_workers_and_events,
);

/// Neither secret shows in the configuration's `Debug` (a log line, a
/// panic message). (The store's hides the database password:
/// `hangar-store`'s `redaction_tests`.)
#[tokio::test]
async fn debug_output_holds_no_secret() {
    let t = TestWeb::start(hangar_testkit::sqlite_store().await).await;
    let shown = format!("{:?}", t.web.config());
    assert!(
        !shown.contains(ADMIN) && !shown.contains(WORKER_KEY),
        "{shown}"
    );
    assert!(shown.contains("admin_token: \"<redacted>\""), "{shown}");
}
