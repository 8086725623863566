//! Volumes through web's API: made on a real worker volume API (served
//! in-process over a real volume store in a temp dir), reported, destroyed;
//! and refused when the input is bad. On SQLite and PostgreSQL alike.

use std::sync::Arc;

use crate::common::{api_code, registration, TestWeb, API_TOKEN};
use hangar_api::{CreateVolume, VolumeReport};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

/// A worker's volume API over a naive volume store, registered with web.
struct FakeWorkerHost {
    _dir: tempfile::TempDir,
    manager: Arc<VolumeManager>,
    generation: i64,
    _stop: tokio_util::sync::DropGuard,
}

impl FakeWorkerHost {
    async fn start(t: &TestWeb, name: &str) -> FakeWorkerHost {
        let dir = tempfile::tempdir().unwrap();
        let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            VolumeApi::new(manager.clone(), API_TOKEN, Limits::default()),
            stop.clone(),
        ));
        let mut reg = registration(name, name);
        reg.api_url = Some(url);
        reg.api_token = Some(API_TOKEN.into());
        let generation = t.register_with(&reg).await.0;
        FakeWorkerHost {
            _dir: dir,
            manager,
            generation,
            _stop: stop.drop_guard(),
        }
    }

    fn on_disk(&self) -> Vec<String> {
        let mut handles: Vec<String> = self
            .manager
            .list()
            .unwrap()
            .into_iter()
            .map(|v| v.handle)
            .collect();
        handles.sort();
        handles
    }

    /// Reports like the agent does and destroys what web answers.
    async fn report(&self, t: &TestWeb, name: &str) {
        let answer = t
            .as_worker(name)
            .report_volumes(
                name,
                &VolumeReport {
                    generation: self.generation,
                    handles: self.on_disk(),
                    containers: None,
                },
            )
            .await
            .unwrap();
        for h in answer.destroy {
            self.manager.destroy(&h).unwrap();
        }
    }
}

fn create(worker: &str, strategy: &str, parent: Option<&str>) -> CreateVolume {
    CreateVolume {
        worker: worker.into(),
        strategy: strategy.parse().unwrap(),
        parent: parent.map(str::to_string),
        import_path: None,
        owner_kind: hangar_api::OwnerKind::TaskCache,
        owner_id: None,
    }
}

async fn a_volume_is_made_through_web_on_the_worker_and_destroyed_by_its_report(store: Store) {
    let t = TestWeb::start(store).await;
    let host = FakeWorkerHost::start(&t, "w1").await;
    let parent = t
        .admin
        .create_volume(&create("w1", "empty", None))
        .await
        .unwrap();
    assert_eq!(
        (parent.state.as_str(), parent.worker.as_str()),
        ("created", "w1")
    );
    let parent_path = host.manager.get(&parent.handle).unwrap().unwrap().path;
    std::fs::write(parent_path.join("hello"), "hi").unwrap();
    let child = t
        .admin
        .create_volume(&create("w1", "cow", Some(&parent.handle)))
        .await
        .unwrap();
    assert_eq!(child.parent.as_deref(), Some(parent.handle.as_str()));
    let child_path = host.manager.get(&child.handle).unwrap().unwrap().path;
    assert_eq!(
        std::fs::read_to_string(child_path.join("hello")).unwrap(),
        "hi"
    );
    let mut expected = vec![parent.handle.clone(), child.handle.clone()];
    expected.sort();
    assert_eq!(host.on_disk(), expected);

    let err = t.admin.destroy_volume(&parent.handle).await.unwrap_err();
    assert_eq!(api_code(err), (StatusCode::CONFLICT, "conflict".into()));
    assert_eq!(
        t.admin
            .destroy_volume(&child.handle)
            .await
            .unwrap()
            .state
            .to_string(),
        "destroying"
    );
    assert_eq!(
        t.admin
            .destroy_volume(&parent.handle)
            .await
            .unwrap()
            .state
            .to_string(),
        "destroying"
    );
    host.report(&t, "w1").await; // the worker destroys both, child first
    assert!(host.on_disk().is_empty());
    host.report(&t, "w1").await; // and web forgets them
    assert!(t.admin.volumes(Some("w1")).await.unwrap().is_empty());
    t.stop().await;
}

async fn a_volume_web_does_not_know_is_destroyed_on_the_worker(store: Store) {
    let t = TestWeb::start(store).await;
    let host = FakeWorkerHost::start(&t, "w1").await;
    host.manager
        .create("stray", hangar_volumes::Strategy::Empty, Default::default())
        .unwrap();
    host.report(&t, "w1").await;
    assert!(host.on_disk().is_empty());
    t.stop().await;
}

async fn a_volume_the_worker_stops_reporting_is_missing_and_never_a_parent(store: Store) {
    let t = TestWeb::start(store).await;
    let host = FakeWorkerHost::start(&t, "w1").await;
    let v = t
        .admin
        .create_volume(&create("w1", "empty", None))
        .await
        .unwrap();
    host.manager.destroy(&v.handle).unwrap(); // gone behind web's back
                                              // Reported at once, it is too young to judge (the listing may predate it).
    host.report(&t, "w1").await;
    let row = t.admin.volume(&v.handle).await.unwrap();
    assert!(row.missing_since.is_none(), "{row:?}");
    t.advance(hangar_core::volumes::YOUNG_VOLUME_MS + 1);
    host.report(&t, "w1").await;
    let row = t.admin.volume(&v.handle).await.unwrap();
    assert!(row.missing_since.is_some());
    let err = t
        .admin
        .create_volume(&create("w1", "cow", Some(&v.handle)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is missing"), "{err}");
    t.stop().await;
}

async fn a_worker_failing_to_make_a_volume_leaves_a_failed_row(store: Store) {
    let t = TestWeb::start(store).await;
    let _host = FakeWorkerHost::start(&t, "w1").await;
    let mut req = create("w1", "import", None);
    req.import_path = Some("/nonexistent/hangar/import".into());
    // The worker refuses a path outside its allowed import dirs; web passes
    // the refusal on as the worker's, and keeps the row as failed.
    let err = t.admin.create_volume(&req).await.unwrap_err();
    assert!(err.to_string().contains("worker w1 refused"), "{err}");
    assert_eq!(api_code(err).0, StatusCode::FORBIDDEN);
    let rows = t.admin.volumes(Some("w1")).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state.to_string(), "failed");
    t.stop().await;
}

async fn bad_volume_requests_get_a_clear_400_and_change_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    let _host = FakeWorkerHost::start(&t, "w1").await;
    t.register("nohost", "x").await;
    let before = format!("{:?}", t.admin.volumes(None).await.unwrap());
    let cases: Vec<(CreateVolume, StatusCode, &str)> = vec![
        (
            create("w1", "cow", None),
            StatusCode::BAD_REQUEST,
            "cow takes parent",
        ),
        (
            create("w1", "empty", Some("p")),
            StatusCode::BAD_REQUEST,
            "empty takes neither",
        ),
        (
            create("w1", "cow", Some("../etc")),
            StatusCode::BAD_REQUEST,
            "invalid volume handle",
        ),
        (
            create("bad name", "empty", None),
            StatusCode::BAD_REQUEST,
            "worker name",
        ),
        (
            CreateVolume {
                import_path: Some("relative/path".into()),
                ..create("w1", "import", None)
            },
            StatusCode::BAD_REQUEST,
            "absolute",
        ),
        (
            create("ghost", "empty", None),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            create("nohost", "empty", None),
            StatusCode::CONFLICT,
            "serves no volume API",
        ),
    ];
    for (req, status, expected) in cases {
        let err = t.admin.create_volume(&req).await.unwrap_err();
        assert!(err.to_string().contains(expected), "{req:?}: {err}");
        assert_eq!(api_code(err).0, status, "{req:?}");
    }
    // What the typed client cannot say: an unknown field, an unknown
    // strategy or owner kind.
    let raw_cases = [
        serde_json::json!({"worker": "w1", "strategy": "empty", "owner_kind": "artifact", "size": 5}),
        serde_json::json!({"worker": "w1", "strategy": "teleport", "owner_kind": "artifact"}),
        serde_json::json!({"worker": "w1", "strategy": "empty", "owner_kind": "pet"}),
    ];
    for body in raw_cases {
        let resp = t
            .raw
            .post(format!("{}/api/v1/volumes", t.url))
            .bearer_auth(crate::common::ADMIN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    assert_eq!(
        format!("{:?}", t.admin.volumes(None).await.unwrap()),
        before
    );
    t.stop().await;
}

async fn reports_with_bad_handles_stale_generations_or_too_much_are_refused(store: Store) {
    let t = TestWeb::start(store).await;
    let host = FakeWorkerHost::start(&t, "w1").await;
    let v = t
        .admin
        .create_volume(&create("w1", "empty", None))
        .await
        .unwrap();
    let report = |generation, handles: Vec<String>| VolumeReport {
        generation,
        handles,
        containers: None,
    };
    let err = t
        .as_worker("w1")
        .report_volumes("w1", &report(host.generation, vec!["../x".into()]))
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::BAD_REQUEST);
    let err = t
        .as_worker("w1")
        .report_volumes("w1", &report(host.generation - 1, vec![]))
        .await
        .unwrap_err();
    // A report must state the generation its credential belongs to.
    assert_eq!(api_code(err), (StatusCode::FORBIDDEN, "forbidden".into()));
    let err = t
        .admin
        .report_volumes("w1", &report(host.generation, vec![]))
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::FORBIDDEN);
    // Nothing changed: the volume is not missing.
    assert_eq!(t.admin.volume(&v.handle).await.unwrap().missing_since, None);
    // A large report is fine; one beyond the limit is refused whole.
    let many: Vec<String> = (0..20_000).map(|i| format!("h-{i:08}")).collect();
    let answer = t
        .as_worker("w1")
        .report_volumes("w1", &report(host.generation, many.clone()))
        .await
        .unwrap();
    assert_eq!(answer.destroy.len(), 20_000);
    let too_many: Vec<String> = (0..100_001).map(|i| format!("h-{i:08}")).collect();
    let err = t
        .as_worker("w1")
        .report_volumes("w1", &report(host.generation, too_many))
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::BAD_REQUEST);
    let huge = vec!["h".repeat(128); 140_000];
    let err = t
        .as_worker("w1")
        .report_volumes("w1", &report(host.generation, huge))
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::PAYLOAD_TOO_LARGE);
    t.stop().await;
}

async fn report_counts(t: &TestWeb) -> (String, String) {
    let text = t.metrics().await;
    let count = |rows: &str| {
        let prefix = format!("hangar_volume_reports_total{{rows=\"{rows}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or("absent")
            .to_string()
    };
    (count("read"), count("quiet"))
}

async fn a_quiet_report_reads_nothing_and_a_destroy_still_reaches_the_worker(store: Store) {
    let t = TestWeb::start(store).await;
    let host = FakeWorkerHost::start(&t, "w1").await;
    let v = t
        .admin
        .create_volume(&create("w1", "empty", None))
        .await
        .unwrap();
    host.report(&t, "w1").await;
    host.report(&t, "w1").await;
    assert_eq!(report_counts(&t).await, ("1".into(), "1".into()));
    t.admin.destroy_volume(&v.handle).await.unwrap();
    host.report(&t, "w1").await; // read: the worker is told to destroy it
    assert!(host.on_disk().is_empty());
    host.report(&t, "w1").await; // read: web forgets the row
    assert!(t.admin.volumes(Some("w1")).await.unwrap().is_empty());
    // A report that changed rows records no quiet: the next one reads,
    // finds nothing to do and records it; the one after is quiet.
    host.report(&t, "w1").await;
    host.report(&t, "w1").await;
    assert_eq!(report_counts(&t).await, ("4".into(), "2".into()));
    t.stop().await;
}

on_both_databases!(
    a_quiet_report_reads_nothing_and_a_destroy_still_reaches_the_worker,
    a_volume_is_made_through_web_on_the_worker_and_destroyed_by_its_report,
    a_volume_web_does_not_know_is_destroyed_on_the_worker,
    a_volume_the_worker_stops_reporting_is_missing_and_never_a_parent,
    a_worker_failing_to_make_a_volume_leaves_a_failed_row,
    bad_volume_requests_get_a_clear_400_and_change_nothing,
    reports_with_bad_handles_stale_generations_or_too_much_are_refused,
);
