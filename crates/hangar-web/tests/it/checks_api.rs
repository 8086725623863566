//! Resource checks through web: due resources checked on a worker (an
//! in-process worker API with a shell resource type), versions saved in
//! order, a failing or slow check's error shown on the resource,
//! `check-resource` from a version, the webhook and its hostile input,
//! and two web nodes on one database never running one check twice. On
//! SQLite and PostgreSQL alike.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{api_code, registration, TestWeb, ADMIN, API_TOKEN};
use hangar_api::checks::CheckRequest;
use hangar_api::pipelines::VersionsQuery;
use hangar_api::BaseResourceType;
use hangar_client::Checked;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::resources_api::ResourceRunner;
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A worker API whose `sh` type's `check` prints what the test put in
/// `versions` (`FAIL`: fails saying so; `SLOW`: sleeps), keeps its last
/// request and counts its calls.
struct CheckWorker {
    dir: tempfile::TempDir,
    _stop: tokio_util::sync::DropGuard,
}

impl CheckWorker {
    async fn start(t: &TestWeb, name: &str) -> CheckWorker {
        CheckWorker::start_typed(t, name, "sh").await
    }

    /// A worker whose only resource type, `type_name`, is the `sh` type.
    async fn start_typed(t: &TestWeb, name: &str, type_name: &str) -> CheckWorker {
        let dir = tempfile::tempdir().unwrap();
        let types = dir.path().join("types");
        std::fs::create_dir_all(types.join(type_name)).unwrap();
        let state = dir.path().display().to_string();
        let check = format!(
            r#"#!/bin/sh
cat > "{state}/last-request"
echo call >> "{state}/calls"
v=$(cat "{state}/versions")
case "$v" in
  FAIL) echo "cannot reach the repository" >&2; exit 1 ;;
  SLOW) exec sleep 30 ;;
esac
echo "$v"
"#
        );
        for (file, text) in [
            ("check", check.as_str()),
            ("in", "#!/bin/sh\necho no image here >&2\nexit 1\n"),
        ] {
            let path = types.join(type_name).join(file);
            std::fs::write(&path, text).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let w = CheckWorker {
            _stop: Self::serve(t, name, dir.path(), &types, type_name)
                .await
                .drop_guard(),
            dir,
        };
        w.set(r#"[{"ref":"1"},{"ref":"2"},{"ref":"3"}]"#);
        w
    }

    async fn serve(
        t: &TestWeb,
        name: &str,
        dir: &Path,
        types: &Path,
        type_name: &str,
    ) -> CancellationToken {
        let volumes =
            Arc::new(VolumeManager::open(&dir.join("volumes"), DriverKind::Naive).unwrap());
        let runner = ResourceRunner::new(
            Some(types.to_path_buf()),
            volumes.clone(),
            ActionDirs::open(&dir.join(ACTIONS_DIR)).unwrap(),
            API_TOKEN,
            Duration::from_secs(60),
        );
        let api = VolumeApi::new(volumes, API_TOKEN, Limits::default()).with_resources(runner);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, api, stop.clone()));
        let mut reg = registration(name, name);
        reg.api_url = Some(url);
        reg.api_token = Some(API_TOKEN.into());
        reg.resource_types = vec![BaseResourceType {
            type_name: type_name.into(),
            path: types.join(type_name).display().to_string(),
            version: None,
            privileged: false,
        }];
        t.register_with(&reg).await;
        stop
    }

    fn set(&self, versions: &str) {
        std::fs::write(self.dir.path().join("versions"), versions).unwrap();
    }

    fn calls(&self) -> usize {
        std::fs::read_to_string(self.path("calls"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn last_request(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.path("last-request")).unwrap()).unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

const PIPELINE: &str = "
resources:
- name: repo
  type: sh
  source: {uri: one}
  webhook_token: s3cret-token
- name: quiet
  type: sh
  source: {uri: two}
  check_every: never
- name: slow
  type: sh
  source: {uri: three}
  check_every: never
  check_timeout: 1s
jobs:
- name: j
  plan: [{get: repo}, {get: quiet}, {get: slow}]
";

async fn set_pipeline(t: &TestWeb, unpause: bool) {
    t.admin
        .set_pipeline("main", "p", PIPELINE, None)
        .await
        .unwrap();
    if unpause {
        t.admin.pause_pipeline("main", "p", false).await.unwrap();
    }
}

async fn versions(t: &TestWeb, resource: &str) -> Vec<(String, i64)> {
    t.admin
        .resource_versions(
            "main",
            "p",
            resource,
            VersionsQuery {
                limit: None,
                before: None,
                after: None,
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|v| {
            (
                v.version["ref"].as_str().unwrap().to_string(),
                v.check_order,
            )
        })
        .collect()
}

async fn resource(t: &TestWeb, name: &str) -> hangar_api::pipelines::Resource {
    t.admin
        .resources("main", "p")
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap()
}

async fn due_resources_are_checked_and_their_versions_saved_in_order(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    set_pipeline(&t, false).await;
    // Paused: nothing is checked.
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 0);
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert_eq!(
        versions(&t, "repo").await,
        [("3".into(), 3), ("2".into(), 2), ("1".into(), 1)]
    );
    assert_eq!(
        w.last_request(),
        json!({"source": {"uri": "one"}, "version": null})
    );
    let r = resource(&t, "repo").await;
    assert_eq!(r.last_checked_at, Some(1_700_000_000_000));
    assert_eq!(r.check_error, None);
    // Not due again before check_every (1m by default).
    t.advance(59_999);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 0);
    t.advance(1);
    w.set(r#"[{"ref":"3"},{"ref":"4"}]"#);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    // Checked from the newest version known, as Concourse does.
    assert_eq!(
        w.last_request(),
        json!({"source": {"uri": "one"}, "version": {"ref": "3"}})
    );
    assert_eq!(versions(&t, "repo").await[0], ("4".into(), 4));
    assert_eq!(versions(&t, "repo").await.len(), 4);
    t.stop().await;
}

async fn a_failing_check_shows_its_error_until_one_succeeds(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    set_pipeline(&t, true).await;
    w.set("FAIL");
    t.web.control().run_checks_once().await.unwrap();
    let r = resource(&t, "repo").await;
    let error = r.check_error.unwrap();
    assert!(
        error.contains("exited with code 1") && error.contains("cannot reach the repository"),
        "{error}"
    );
    w.set("not json");
    t.advance(60_000);
    t.web.control().run_checks_once().await.unwrap();
    let error = resource(&t, "repo").await.check_error.unwrap();
    assert!(error.contains("printed no JSON"), "{error}");
    w.set(r#"[{"ref":"1"}]"#);
    t.advance(60_000);
    t.web.control().run_checks_once().await.unwrap();
    assert_eq!(resource(&t, "repo").await.check_error, None);
    t.stop().await;
}

async fn a_check_past_its_timeout_fails_saying_so(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    set_pipeline(&t, false).await;
    w.set("SLOW");
    t.admin
        .request_check(
            "main",
            "p",
            Checked::Resource,
            "slow",
            &CheckRequest::default(),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert!(started.elapsed() < Duration::from_secs(10));
    let status = t
        .admin
        .check_status("main", "p", Checked::Resource, "slow")
        .await
        .unwrap();
    let error = status.check_error.unwrap();
    assert!(
        error.contains("timed out after 1s (check_timeout)"),
        "{error}"
    );
    t.stop().await;
}

async fn check_resource_checks_a_paused_pipeline_from_a_version(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    set_pipeline(&t, false).await;
    let asked = t
        .admin
        .request_check(
            "main",
            "p",
            Checked::Resource,
            "quiet",
            &CheckRequest {
                from: Some(json!({"ref": "2"}).as_object().unwrap().clone()),
                shallow: false,
            },
        )
        .await
        .unwrap();
    let before = t
        .admin
        .check_status("main", "p", Checked::Resource, "quiet")
        .await
        .unwrap();
    assert_eq!(before.check_requested_at, Some(asked.requested_at));
    assert!(!before.answers(asked.requested_at));
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert_eq!(
        w.last_request(),
        json!({"source": {"uri": "two"}, "version": {"ref": "2"}})
    );
    let after = t
        .admin
        .check_status("main", "p", Checked::Resource, "quiet")
        .await
        .unwrap();
    assert!(after.answers(asked.requested_at), "{after:?}");
    assert_eq!(after.next_check_at, None);
    assert_eq!(versions(&t, "quiet").await.len(), 3);
    // `never`: no periodic check follows.
    t.advance(3_600_000);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 0);
    t.stop().await;
}

async fn check_requests_are_refused_when_hostile(store: Store) {
    let t = TestWeb::start(store).await;
    set_pipeline(&t, false).await;
    let url = |rest: &str| format!("{}/api/v1/teams/main/pipelines/{rest}", t.url);
    let post = |path: String, token: Option<&'static str>, body: &'static str| {
        let mut req = t
            .raw
            .post(path)
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        async move { req.send().await.unwrap().status() }
    };
    let cases = [
        (
            url("p/resources/repo/check"),
            None,
            "{}",
            StatusCode::UNAUTHORIZED,
        ),
        (
            url("p/resources/repo/check"),
            Some("wrong-token-0123456789"),
            "{}",
            StatusCode::UNAUTHORIZED,
        ),
        (
            url("p/resources/repo/check"),
            Some(ADMIN),
            "{\"bogus\": 1}",
            StatusCode::BAD_REQUEST,
        ),
        (
            url("p/resources/repo/check"),
            Some(ADMIN),
            "{\"from\": \"v1\"}",
            StatusCode::BAD_REQUEST,
        ),
        (
            url("p/resources/repo/check"),
            Some(ADMIN),
            "not json",
            StatusCode::BAD_REQUEST,
        ),
        (
            url("p/resources/repo/check"),
            Some(ADMIN),
            "{\"from\": {\"ref\": 1}}",
            StatusCode::BAD_REQUEST,
        ),
        (
            url("p/resources/nope/check"),
            Some(ADMIN),
            "{}",
            StatusCode::NOT_FOUND,
        ),
        (
            url("nope/resources/repo/check"),
            Some(ADMIN),
            "{}",
            StatusCode::NOT_FOUND,
        ),
        (
            url("p/resources/..%2Fx/check"),
            Some(ADMIN),
            "{}",
            StatusCode::BAD_REQUEST,
        ),
        (
            url("p/resource-types/nope/check"),
            Some(ADMIN),
            "{}",
            StatusCode::NOT_FOUND,
        ),
    ];
    for (path, token, body, want) in cases {
        assert_eq!(post(path.clone(), token, body).await, want, "{path} {body}");
    }
    let status = t
        .admin
        .check_status("main", "p", Checked::Resource, "repo")
        .await
        .unwrap();
    assert_eq!(
        status.check_requested_at, None,
        "a refused request changed nothing"
    );
    let err = t
        .admin
        .check_status("main", "p", Checked::Resource, "nope")
        .await
        .unwrap_err();
    assert_eq!(api_code(err).0, StatusCode::NOT_FOUND);
    t.stop().await;
}

async fn the_webhook_asks_for_a_check_with_the_resource_token_only(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    set_pipeline(&t, false).await;
    let hook = |resource: &str, query: &str| {
        let req = t.raw.post(format!(
            "{}/api/v1/teams/main/pipelines/p/resources/{resource}/check/webhook{query}",
            t.url
        ));
        async move {
            req.body("{\"any\": \"payload\"}")
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let long = format!("?webhook_token={}", "x".repeat(5_000));
    let cases = [
        ("repo", "".to_string(), StatusCode::BAD_REQUEST),
        (
            "repo",
            "?webhook_token=".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "repo",
            "?webhook_token=wrong".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "repo",
            "?webhook_token=s3cret-toke".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "repo",
            "?webhook_token=s3cret-token-".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        ("repo", long, StatusCode::UNAUTHORIZED),
        // A resource without a token: no token matches, as in Concourse.
        (
            "quiet",
            "?webhook_token=s3cret-token".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        // A missing resource is answered as a wrong token: a stranger
        // cannot tell which names exist.
        (
            "nope",
            "?webhook_token=s3cret-token".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "..%2Fx",
            "?webhook_token=s3cret-token".to_string(),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (resource, query, want) in cases {
        let status = hook(resource, &query).await;
        assert_eq!(status, want, "{resource} {}", &query[..query.len().min(40)]);
    }
    // The same words for a wrong token and for a team, pipeline or resource
    // that is not there.
    let body = |path: &str| {
        let req = t.raw.post(format!(
            "{}/api/v1/teams/{path}/check/webhook?webhook_token=guess",
            t.url
        ));
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    let wrong = body("main/pipelines/p/resources/repo").await;
    assert!(wrong.contains("invalid webhook token"), "{wrong}");
    for missing in [
        "main/pipelines/p/resources/nope",
        "main/pipelines/nope/resources/repo",
        "nope/pipelines/p/resources/repo",
    ] {
        assert_eq!(body(missing).await, wrong, "{missing}");
    }
    assert_eq!(
        t.web.control().run_checks_once().await.unwrap(),
        0,
        "refused hooks asked for nothing"
    );
    assert_eq!(
        hook("repo", "?webhook_token=s3cret-token").await,
        StatusCode::CREATED
    );
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert_eq!(w.calls(), 1);
    assert_eq!(versions(&t, "repo").await.len(), 3);
    t.stop().await;
}

/// A `((var))` in `webhook_token` is looked up in the credential manager
/// (pipeline first, then team), as Concourse allows; a var the manager
/// does not hold matches no token, not even its own literal text.
async fn a_webhook_token_var_is_read_from_the_credential_manager(store: Store) {
    use hangar_creds::cache::Cache;
    use hangar_creds::dir::DirSecrets;
    use hangar_creds::{Credentials, Manager};
    let creds = tempfile::tempdir().unwrap();
    let pipeline_dir = creds.path().join("main").join("p");
    std::fs::create_dir_all(&pipeline_dir).unwrap();
    for (file, text) in [
        (pipeline_dir.join("hook_token"), "from-the-manager\n"),
        (creds.path().join("main").join("team_token"), "team-wide\n"),
    ] {
        std::fs::write(&file, text).unwrap();
        // The manager refuses files others may read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let manager = Manager::Dir(DirSecrets::new(creds.path()).unwrap());
    let credentials = Arc::new(Credentials::new(manager, Cache::off()));
    let t = TestWeb::start_with(store, |c| c.credentials = Some(credentials)).await;
    let _w = CheckWorker::start(&t, "w1").await;
    let pipeline = "
resources:
- {name: repo, type: sh, source: {uri: one}, webhook_token: ((hook_token))}
- {name: team, type: sh, source: {uri: two}, webhook_token: ((team_token))}
- {name: gone, type: sh, source: {uri: three}, webhook_token: ((missing))}
jobs:
- {name: j, plan: [{get: repo}, {get: team}, {get: gone}]}
";
    t.admin
        .set_pipeline("main", "p", pipeline, None)
        .await
        .unwrap();
    let hook = |resource: &str, token: &str| {
        let req = t.raw.post(format!(
            "{}/api/v1/teams/main/pipelines/p/resources/{resource}/check/webhook?webhook_token={token}",
            t.url
        ));
        async move { req.send().await.unwrap().status() }
    };
    let cases = [
        ("repo", "from-the-manager", StatusCode::CREATED),
        ("repo", "((hook_token))", StatusCode::UNAUTHORIZED),
        ("repo", "wrong", StatusCode::UNAUTHORIZED),
        ("team", "team-wide", StatusCode::CREATED),
        ("gone", "((missing))", StatusCode::UNAUTHORIZED),
        ("gone", "", StatusCode::BAD_REQUEST),
    ];
    for (resource, token, want) in cases {
        assert_eq!(hook(resource, token).await, want, "{resource} {token}");
    }
    t.stop().await;
}

/// A worker that cannot be reached is the infrastructure's failure: the
/// check runs on another worker, and with none left it is tried again
/// later, never recorded as the resource's error.
async fn a_check_on_a_lost_worker_runs_on_another(store: Store) {
    let t = TestWeb::start(store).await;
    // Registered with an API nobody serves any more (placement takes
    // workers by name among equals: this one first).
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut lost = registration("a-lost", "a-lost");
    lost.api_url = Some(format!("http://{}", closed.local_addr().unwrap()));
    lost.api_token = Some(API_TOKEN.into());
    lost.resource_types = vec![BaseResourceType {
        type_name: "sh".into(),
        path: "/nowhere".into(),
        version: None,
        privileged: false,
    }];
    drop(closed);
    t.register_with(&lost).await;
    set_pipeline(&t, true).await;
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    let status = t
        .admin
        .check_status("main", "p", Checked::Resource, "repo")
        .await
        .unwrap();
    assert_eq!(status.check_error, None, "{status:?}");
    assert_eq!(status.last_check_finished_at, None);
    assert_eq!(status.next_check_at, Some(1_700_000_000_000 + 10_000));
    let w = CheckWorker::start(&t, "b-live").await;
    t.advance(10_000);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert_eq!(w.calls(), 1);
    assert_eq!(versions(&t, "repo").await.len(), 3);
    assert_eq!(resource(&t, "repo").await.check_error, None);
    t.stop().await;
}

/// A resource type is checked as a resource of its type is; a resource
/// of a custom type is checked with its type's image, fetched on the
/// worker first as a get step does (here the worker has no runtime for
/// the image's container, so the check fails saying where).
async fn resource_types_and_custom_typed_resources_are_checked(store: Store) {
    let t = TestWeb::start(store).await;
    let w = CheckWorker::start(&t, "w1").await;
    let yaml = "
resource_types:
- name: custom
  type: sh
  source: {uri: image}
resources:
- name: thing
  type: custom
  source: {x: y}
jobs:
- name: j
  plan: [{get: thing}]
";
    t.admin.set_pipeline("main", "p", yaml, None).await.unwrap();
    let asked = t
        .admin
        .request_check(
            "main",
            "p",
            Checked::ResourceType,
            "custom",
            &CheckRequest::default(),
        )
        .await
        .unwrap();
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert_eq!(
        w.last_request(),
        json!({"source": {"uri": "image"}, "version": null})
    );
    let status = t
        .admin
        .check_status("main", "p", Checked::ResourceType, "custom")
        .await
        .unwrap();
    assert!(status.answers(asked.requested_at), "{status:?}");
    assert_eq!(status.check_error, None);
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    t.advance(60_000);
    // Both the type (due again) and the resource (due at once).
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 2);
    let error = resource(&t, "thing").await.check_error.unwrap();
    assert!(
        error.contains("fetching the image of resource type custom: exited with code 1")
            && error.contains("no image here"),
        "{error}"
    );
    // The type's image was checked for it: a third call.
    assert!(w.calls() >= 3, "{}", w.calls());
    t.stop().await;
}

/// A pipeline whose one resource is of a type no test worker has at
/// first.
const MOKC: &str = "
resources:
- name: m
  type: mokc
  source: {uri: four}
  check_every: never
jobs:
- name: j
  plan: [{get: m}]
";

const T0: i64 = 1_700_000_000_000;

async fn check_m(t: &TestWeb) -> i64 {
    t.admin
        .request_check(
            "main",
            "q",
            Checked::Resource,
            "m",
            &CheckRequest::default(),
        )
        .await
        .unwrap()
        .requested_at
}

async fn status_of_m(t: &TestWeb) -> hangar_api::checks::CheckStatus {
    t.admin
        .check_status("main", "q", Checked::Resource, "m")
        .await
        .unwrap()
}

async fn listed_m(t: &TestWeb) -> hangar_api::pipelines::Resource {
    t.admin
        .resources("main", "q")
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.name == "m")
        .unwrap()
}

/// The pipeline's dashboard page as a logged-in person sees it.
async fn dashboard_of_q(t: &TestWeb) -> String {
    crate::common::dashboard_page(t, "/teams/main/pipelines/q").await
}

/// A resource of a type no worker has: `set-pipeline` warns; its check
/// waits saying why (status, `resources`, dashboard) and fails past web's
/// bound with `no worker has resource type mokc`, shown wherever a check
/// error is.
async fn a_check_of_a_type_no_worker_has_fails_within_the_bound_saying_so(store: Store) {
    let t = TestWeb::start_with(store, |c| c.no_worker_timeout = Duration::from_secs(2)).await;
    let _w = CheckWorker::start(&t, "w1").await;
    let saved = t.admin.set_pipeline("main", "q", MOKC, None).await.unwrap();
    let warned: Vec<&str> = saved.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(
        warned,
        [
            "no worker has resource type mokc (needed by resource m): their checks and steps \
          fail after waiting 2s unless a worker with it joins"
        ],
    );
    // A pipeline of types the workers have is set without it.
    let quiet = t
        .admin
        .set_pipeline("main", "p", PIPELINE, None)
        .await
        .unwrap();
    assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);

    let asked = check_m(&t).await;
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    let status = status_of_m(&t).await;
    assert_eq!(
        status.waiting.as_deref(),
        Some("no worker has resource type mokc"),
        "{status:?}"
    );
    assert_eq!(status.waiting_since, Some(T0));
    assert_eq!(status.no_worker_timeout_ms, Some(2_000));
    assert_eq!(status.check_error, None);
    assert!(!status.answers(asked), "{status:?}");
    let listed = listed_m(&t).await;
    assert_eq!(
        listed.check_waiting.as_deref(),
        Some("no worker has resource type mokc")
    );
    assert_eq!(listed.last_checked_at, None);
    let html = dashboard_of_q(&t).await;
    assert!(
        html.contains("check waiting: no worker has resource type mokc"),
        "{html}"
    );

    // Within the bound it is tried again and still waits.
    t.advance(1_999);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    let status = status_of_m(&t).await;
    assert!(!status.answers(asked), "{status:?}");
    assert_eq!(status.waiting_since, Some(T0));
    assert_eq!(status.check_error, None);

    // Past it, the check fails saying why.
    t.advance(1);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    let status = status_of_m(&t).await;
    assert!(status.answers(asked), "{status:?}");
    let error = status.check_error.unwrap();
    assert!(
        error.starts_with("no worker has resource type mokc (none joined within 2s"),
        "{error}"
    );
    assert_eq!(status.waiting, None);
    assert_eq!(status.waiting_since, None);
    let listed = listed_m(&t).await;
    assert_eq!(listed.check_error.as_deref(), Some(error.as_str()));
    assert_eq!(listed.check_waiting, None);
    assert_eq!(listed.last_checked_at, Some(T0 + 2_000));
    let html = dashboard_of_q(&t).await;
    assert!(
        html.contains("check failed: no worker has resource type mokc (none joined within 2s"),
        "{html}"
    );
    assert!(!html.contains("check waiting"), "{html}");
    // Nothing asked for: no further pass runs it.
    t.advance(60_000);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 0);
    t.stop().await;
}

/// A worker with the type that joins within the bound: the waiting check
/// runs on it and says nothing more of waiting.
async fn a_worker_with_the_type_that_joins_within_the_bound_lets_the_check_run(store: Store) {
    let t = TestWeb::start_with(store, |c| c.no_worker_timeout = Duration::from_secs(2)).await;
    let _w = CheckWorker::start(&t, "w1").await;
    t.admin.set_pipeline("main", "q", MOKC, None).await.unwrap();
    let asked = check_m(&t).await;
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    assert!(status_of_m(&t).await.waiting.is_some());
    let joined = CheckWorker::start_typed(&t, "w2", "mokc").await;
    t.advance(1_500);
    assert_eq!(t.web.control().run_checks_once().await.unwrap(), 1);
    let status = status_of_m(&t).await;
    assert!(status.answers(asked), "{status:?}");
    assert_eq!(status.check_error, None);
    assert_eq!(status.waiting, None);
    assert_eq!(status.waiting_since, None);
    assert_eq!(joined.calls(), 1);
    assert_eq!(
        joined.last_request(),
        json!({"source": {"uri": "four"}, "version": null})
    );
    let found = t
        .admin
        .resource_versions(
            "main",
            "q",
            "m",
            VersionsQuery {
                limit: None,
                before: None,
                after: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(found.len(), 3);
    // Set again now that a worker has the type: no warning.
    let saved = t.admin.set_pipeline("main", "q", MOKC, None).await.unwrap();
    assert!(saved.warnings.is_empty(), "{:?}", saved.warnings);
    t.stop().await;
}

on_both_databases!(
    a_check_of_a_type_no_worker_has_fails_within_the_bound_saying_so,
    a_worker_with_the_type_that_joins_within_the_bound_lets_the_check_run,
    a_check_on_a_lost_worker_runs_on_another,
    resource_types_and_custom_typed_resources_are_checked,
    due_resources_are_checked_and_their_versions_saved_in_order,
    a_failing_check_shows_its_error_until_one_succeeds,
    a_check_past_its_timeout_fails_saying_so,
    check_resource_checks_a_paused_pipeline_from_a_version,
    check_requests_are_refused_when_hostile,
    the_webhook_asks_for_a_check_with_the_resource_token_only,
    a_webhook_token_var_is_read_from_the_credential_manager,
);

/// Two web nodes on one database, each running passes as fast as it can:
/// every scope is checked exactly once per due time.
async fn two_nodes_never_check_one_scope_twice(a: Store, b: Store) {
    let ta = TestWeb::start(a).await;
    let tb = TestWeb::start(b).await;
    let w = CheckWorker::start(&ta, "w1").await;
    let mut yaml = String::from("resources:\n");
    for i in 0..12 {
        yaml.push_str(&format!("- name: r{i}\n  type: sh\n  source: {{n: {i}}}\n"));
    }
    yaml.push_str("jobs:\n- name: j\n  plan:\n");
    for i in 0..12 {
        yaml.push_str(&format!("  - get: r{i}\n"));
    }
    ta.admin
        .set_pipeline("main", "p", &yaml, None)
        .await
        .unwrap();
    ta.admin.pause_pipeline("main", "p", false).await.unwrap();
    for round in 1..=3 {
        let (x, y) = tokio::join!(
            async {
                let mut n = 0;
                for _ in 0..5 {
                    n += ta.web.control().run_checks_once().await.unwrap();
                }
                n
            },
            async {
                let mut n = 0;
                for _ in 0..5 {
                    n += tb.web.control().run_checks_once().await.unwrap();
                }
                n
            },
        );
        assert_eq!(x + y, 12, "round {round}: {x} + {y}");
        assert_eq!(w.calls(), 12 * round, "round {round}");
        ta.advance(60_000);
        tb.advance(60_000);
    }
    ta.stop().await;
    tb.stop().await;
}

#[tokio::test]
async fn two_nodes_on_one_postgres_never_check_one_scope_twice() {
    let (a, url) = hangar_testkit::postgres_store_with_url().await;
    let b = Store::open(&url).await.unwrap();
    two_nodes_never_check_one_scope_twice(a, b).await;
}

#[tokio::test]
async fn two_nodes_on_one_sqlite_file_never_check_one_scope_twice() {
    let dir = tempfile::tempdir().unwrap();
    let url = hangar_testkit::sqlite_file_url(dir.path());
    let a = Store::open(&url).await.unwrap();
    let b = Store::open(&url).await.unwrap();
    two_nodes_never_check_one_scope_twice(a, b).await;
}
