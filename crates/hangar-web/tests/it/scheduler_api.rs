//! The scheduler over the API, on SQLite and PostgreSQL: a new version
//! makes exactly one build; `passed` chains; `every`; pins and disabled
//! versions; serial and max_in_flight hold builds; paused jobs and
//! pipelines do nothing; two web nodes make one build per change; and the
//! pin and version endpoints refuse bad input, changing nothing.

use crate::common::TestWeb;
use hangar_core::build::BuildStatus;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_web::Web;
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000_000;

async fn set(t: &TestWeb, config: &str) {
    t.admin
        .set_pipeline("main", "p", config, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
}

async fn save(t: &TestWeb, resource: &str, reference: &str) -> i64 {
    let store = t.web.store();
    let r = store.resource("main", "p", resource).await.unwrap();
    store
        .save_resource_version(r.id, &json!({ "ref": reference }), &json!([]), T0)
        .await
        .unwrap()
        .id
}

async fn schedule(web: &Web) -> usize {
    web.control().run_scheduler_once().await.unwrap()
}

/// Each build of `job`, oldest first, with its inputs' refs by name.
async fn builds(t: &TestWeb, job: &str) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    for b in t
        .admin
        .job_builds("main", "p", job, 50)
        .await
        .unwrap()
        .into_iter()
        .rev()
    {
        let mut inputs: Vec<(String, String)> = b
            .inputs
            .iter()
            .map(|i| {
                (
                    i.name.clone(),
                    i.version["ref"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        inputs.sort();
        out.push(inputs);
    }
    out
}

async fn waiting(t: &TestWeb, job: &str) -> Option<(String, String)> {
    let jobs = t.admin.jobs("main", "p").await.unwrap();
    let j = jobs.into_iter().find(|j| j.name == job).unwrap();
    j.waiting.map(|w| (w.reason, w.message))
}

/// Runs every build the engine may claim to `status` (no engine runs in
/// these tests), recording a success's inputs as its outputs.
async fn finish_claimable(t: &TestWeb, status: BuildStatus) -> usize {
    let store = t.web.store();
    let mut n = 0;
    while let Some(b) = store.claim_build("test", T0, 60_000).await.unwrap() {
        store
            .finish_build(b.id, b.lease_token, status, Some(0), None, T0)
            .await
            .unwrap();
        if status == BuildStatus::Succeeded {
            store.copy_build_inputs_to_outputs(b.id).await.unwrap();
        }
        n += 1;
    }
    n
}

const SIMPLE: &str = "
resources:
- {name: src, type: mock, source: {}}
jobs:
- name: unit
  plan:
  - {get: src, trigger: true}
- name: manual-only
  plan:
  - {get: src}
";

async fn a_new_version_makes_exactly_one_build(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, SIMPLE).await;
    assert_eq!(schedule(&t.web).await, 0);
    let (reason, message) = waiting(&t, "unit").await.unwrap();
    assert_eq!(reason, "no_version");
    assert_eq!(message, "input src: no version yet");
    save(&t, "src", "a").await;
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(schedule(&t.web).await, 0, "the same version builds once");
    assert_eq!(builds(&t, "unit").await, [[("src".into(), "a".into())]]);
    // A get without trigger never builds by itself.
    assert!(builds(&t, "manual-only").await.is_empty());
    assert_eq!(
        waiting(&t, "manual-only").await.unwrap().0,
        "no_new_versions"
    );
    // The plan fetches exactly that version.
    let b = t.admin.job_build("main", "p", "unit", 1).await.unwrap();
    let plan = t.web.store().get_build(b.id).await.unwrap().unwrap().plan;
    assert!(plan.contains(r#""ref":"a""#), "{plan}");
    save(&t, "src", "b").await;
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(builds(&t, "unit").await.len(), 2);
    t.stop().await;
}

const CHAIN: &str = "
resources:
- {name: src, type: mock, source: {}}
jobs:
- name: build
  plan:
  - {get: src, trigger: true}
- name: test
  plan:
  - {get: src, trigger: true, passed: [build]}
";

async fn passed_takes_what_went_through(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, CHAIN).await;
    save(&t, "src", "a").await;
    assert_eq!(schedule(&t.web).await, 1, "build only");
    assert_eq!(waiting(&t, "test").await.unwrap().0, "not_passed");
    assert_eq!(
        waiting(&t, "test").await.unwrap().1,
        "input src: no version has passed build"
    );
    // A failed build vouches for nothing.
    assert_eq!(finish_claimable(&t, BuildStatus::Failed).await, 1);
    assert_eq!(schedule(&t.web).await, 0);
    save(&t, "src", "b").await;
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(finish_claimable(&t, BuildStatus::Succeeded).await, 1);
    assert_eq!(schedule(&t.web).await, 1, "test takes b");
    assert_eq!(builds(&t, "test").await, [[("src".into(), "b".into())]]);
    t.stop().await;
}

const EVERY: &str = "
resources:
- {name: src, type: mock, source: {}}
jobs:
- name: each
  plan:
  - {get: src, trigger: true, version: every}
";

async fn every_builds_each_version_in_order(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, EVERY).await;
    save(&t, "src", "1").await;
    assert_eq!(schedule(&t.web).await, 1);
    for v in ["2", "3", "4"] {
        save(&t, "src", v).await;
    }
    assert_eq!(schedule(&t.web).await, 3);
    let refs: Vec<String> = builds(&t, "each")
        .await
        .into_iter()
        .map(|b| b[0].1.clone())
        .collect();
    assert_eq!(refs, ["1", "2", "3", "4"]);
    assert_eq!(schedule(&t.web).await, 0);
    t.stop().await;
}

async fn pins_and_disabled_versions(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, SIMPLE).await;
    save(&t, "src", "a").await;
    save(&t, "src", "b").await;
    let fields = |r: &str| json!({ "ref": r }).as_object().unwrap().clone();
    // Disabled: the newest enabled one is taken.
    t.web
        .store()
        .set_resource_version_enabled("main", "p", "src", &fields("b"), false)
        .await
        .unwrap();
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(builds(&t, "unit").await[0], [("src".into(), "a".into())]);
    t.web
        .store()
        .set_resource_version_enabled("main", "p", "src", &fields("b"), true)
        .await
        .unwrap();
    // Pinned to a: b, now enabled, is not taken.
    t.web
        .store()
        .pin_resource("main", "p", "src", &fields("a"), Some("hold"))
        .await
        .unwrap();
    assert_eq!(schedule(&t.web).await, 0);
    t.web
        .store()
        .unpin_resource("main", "p", "src")
        .await
        .unwrap();
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(builds(&t, "unit").await[1], [("src".into(), "b".into())]);
    t.stop().await;
}

const CONFIG_PIN: &str = "
resources:
- {name: src, type: mock, source: {}, version: {ref: a}}
jobs:
- name: unit
  plan:
  - {get: src, trigger: true}
";

async fn a_config_pin_wins_and_cannot_be_changed(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, CONFIG_PIN).await;
    assert_eq!(schedule(&t.web).await, 0);
    assert_eq!(
        waiting(&t, "unit").await.unwrap().0,
        "pinned_version_not_found"
    );
    save(&t, "src", "a").await;
    save(&t, "src", "b").await;
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(builds(&t, "unit").await[0], [("src".into(), "a".into())]);
    let b = json!({"ref": "b"}).as_object().unwrap().clone();
    let err = t
        .web
        .store()
        .pin_resource("main", "p", "src", &b, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, hangar_store::StoreError::Conflict(_)),
        "{err}"
    );
    t.stop().await;
}

const LIMITS: &str = "
resources:
- {name: src, type: mock, source: {}}
jobs:
- name: one-at-a-time
  serial: true
  plan:
  - {get: src}
- name: two-at-a-time
  max_in_flight: 2
  plan:
  - {get: src}
";

async fn serial_and_max_in_flight_hold_builds(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, LIMITS).await;
    save(&t, "src", "a").await;
    for _ in 0..2 {
        t.admin
            .trigger_job("main", "p", "one-at-a-time")
            .await
            .unwrap();
    }
    for _ in 0..3 {
        t.admin
            .trigger_job("main", "p", "two-at-a-time")
            .await
            .unwrap();
    }
    schedule(&t.web).await;
    // 1 of the serial job and 2 of the other are the engine's; the rest held.
    let store = t.web.store();
    let mut claimed = Vec::new();
    while let Some(b) = store.claim_build("test", T0, 60_000).await.unwrap() {
        claimed.push(b.name);
    }
    claimed.sort();
    assert_eq!(
        claimed,
        [
            "p/one-at-a-time #1",
            "p/two-at-a-time #1",
            "p/two-at-a-time #2"
        ]
    );
    assert_eq!(waiting(&t, "one-at-a-time").await.unwrap().0, "start_limit");
    // The serial job's held build does not start while the job is paused,
    // even once its slot is free.
    t.admin
        .pause_job("main", "p", "one-at-a-time", true)
        .await
        .unwrap();
    let first = t
        .admin
        .job_build("main", "p", "one-at-a-time", 1)
        .await
        .unwrap();
    // Claimed above, as the engine would: finished under its claim.
    let token = store
        .get_build(first.id)
        .await
        .unwrap()
        .map_or(0, |b| b.lease_token);
    store
        .finish_build(first.id, token, BuildStatus::Succeeded, Some(0), None, T0)
        .await
        .unwrap();
    schedule(&t.web).await;
    assert!(store
        .claim_build("test", T0, 60_000)
        .await
        .unwrap()
        .is_none());
    t.admin
        .pause_job("main", "p", "one-at-a-time", false)
        .await
        .unwrap();
    schedule(&t.web).await;
    let next = store
        .claim_build("test", T0, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.name, "p/one-at-a-time #2");
    t.stop().await;
}

async fn paused_jobs_and_pipelines_do_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, SIMPLE).await;
    t.admin.pause_job("main", "p", "unit", true).await.unwrap();
    save(&t, "src", "a").await;
    assert_eq!(schedule(&t.web).await, 0);
    assert_eq!(waiting(&t, "unit").await.unwrap().0, "job_paused");
    t.admin.pause_job("main", "p", "unit", false).await.unwrap();
    t.admin.pause_pipeline("main", "p", true).await.unwrap();
    assert_eq!(schedule(&t.web).await, 0);
    assert_eq!(waiting(&t, "unit").await.unwrap().0, "pipeline_paused");
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    assert_eq!(schedule(&t.web).await, 1);
    t.stop().await;
}

async fn a_manual_trigger_waits_for_inputs(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, SIMPLE).await;
    let b = t
        .admin
        .trigger_job("main", "p", "manual-only")
        .await
        .unwrap();
    assert_eq!(b.name, "p/manual-only #1");
    schedule(&t.web).await;
    assert!(
        t.web
            .store()
            .claim_build("test", T0, 60_000)
            .await
            .unwrap()
            .is_none(),
        "no input version yet: the build waits"
    );
    save(&t, "src", "a").await;
    schedule(&t.web).await;
    let claimed = t
        .web
        .store()
        .claim_build("test", T0, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, b.id);
    assert_eq!(
        builds(&t, "manual-only").await,
        [[("src".into(), "a".into())]]
    );
    // disable_manual_trigger is refused.
    let config = SIMPLE.replace(
        "- name: unit\n",
        "- name: unit\n  disable_manual_trigger: true\n",
    );
    t.admin
        .set_pipeline("main", "p", &config, Some(1))
        .await
        .unwrap();
    let before = builds(&t, "unit").await.len();
    let err = t.admin.trigger_job("main", "p", "unit").await.unwrap_err();
    let hangar_client::ClientError::Api {
        status, message, ..
    } = err
    else {
        panic!("expected an API error, got {err}")
    };
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{message}");
    assert!(message.contains("disable_manual_trigger"), "{message}");
    assert_eq!(
        builds(&t, "unit").await.len(),
        before,
        "nothing was created"
    );
    t.stop().await;
}

/// Two nodes on one database, scheduling at once: one build per change.
async fn two_nodes_make_one_build_per_change(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let other = Web::new(store, t.web.config().clone()).unwrap();
    set(&t, SIMPLE).await;
    for (i, v) in ["a", "b", "c"].iter().enumerate() {
        save(&t, "src", v).await;
        let (x, y) = tokio::join!(schedule(&t.web), schedule(&other));
        // A node finding the pipeline leased skips it; if the passes ran
        // one after the other, the second finds nothing new.
        assert_eq!(x + y, 1, "change {v}");
        assert_eq!(builds(&t, "unit").await.len(), i + 1);
    }
    t.stop().await;
}

const FAN_IN: &str = "
resources:
- {name: src, type: mock, source: {}}
- {name: lib, type: mock, source: {}}
jobs:
- name: build
  plan:
  - {get: src}
  - {get: lib}
- name: test
  plan:
  - {get: src, trigger: true, passed: [build]}
  - {get: lib, trigger: true, passed: [build]}
";

/// A succeeded build of `job` with these inputs, made through the store.
async fn passed_build(t: &TestWeb, job: &str, inputs: &[(&str, &str, i64)]) {
    let store = t.web.store();
    let j = store.job("main", "p", job).await.unwrap();
    let mut planned = Vec::new();
    for (name, resource, version) in inputs {
        planned.push(hangar_store::PlannedInput {
            name: name.to_string(),
            resource_id: store.resource("main", "p", resource).await.unwrap().id,
            version_id: *version,
        });
    }
    let b = store
        .create_scheduled_build(j.id, "p/x", "[]", &planned, false, None, T0)
        .await
        .unwrap()
        .unwrap();
    store.release_held_builds(&[b.build.id]).await.unwrap();
    let claimed = store
        .claim_build("test", T0, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, b.build.id);
    store
        .finish_build(
            b.build.id,
            claimed.lease_token,
            BuildStatus::Succeeded,
            Some(0),
            None,
            T0,
        )
        .await
        .unwrap();
    store
        .copy_build_inputs_to_outputs(b.build.id)
        .await
        .unwrap();
}

/// The one build of `build` whose pair of versions is usable is older than
/// the first window holds: the scheduler widens it, and both inputs come
/// from that same build.
async fn fan_in_searches_past_the_first_window(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t, FAN_IN).await;
    let a = save(&t, "src", "a").await;
    let b = save(&t, "src", "b").await;
    let l1 = save(&t, "lib", "1").await;
    let l2 = save(&t, "lib", "2").await;
    passed_build(&t, "build", &[("src", "src", a), ("lib", "lib", l1)]).await;
    for _ in 0..60 {
        passed_build(&t, "build", &[("src", "src", b), ("lib", "lib", l2)]).await;
    }
    let fields = json!({"ref": "2"}).as_object().unwrap().clone();
    t.web
        .store()
        .set_resource_version_enabled("main", "p", "lib", &fields, false)
        .await
        .unwrap();
    assert_eq!(schedule(&t.web).await, 1);
    assert_eq!(
        builds(&t, "test").await,
        [[("lib".into(), "1".into()), ("src".into(), "a".into())]]
    );
    t.stop().await;
}

on_both_databases!(
    fan_in_searches_past_the_first_window,
    a_new_version_makes_exactly_one_build,
    passed_takes_what_went_through,
    every_builds_each_version_in_order,
    pins_and_disabled_versions,
    a_config_pin_wins_and_cannot_be_changed,
    serial_and_max_in_flight_hold_builds,
    paused_jobs_and_pipelines_do_nothing,
    a_manual_trigger_waits_for_inputs,
    two_nodes_make_one_build_per_change,
);

mod endpoints {
    //! The pin and version endpoints: they work through the client, refuse
    //! bad input with 400 (and a config pin with 409), changing nothing.

    use super::*;
    use hangar_api::pipelines::VersionsQuery;

    async fn pin_of(t: &TestWeb) -> Option<String> {
        t.admin
            .resource_pin("main", "p", "src")
            .await
            .unwrap()
            .map(|p| p.version["ref"].as_str().unwrap().to_string())
    }

    /// The pipeline's page as a logged-in person sees it.
    async fn pipeline_page(t: &TestWeb) -> String {
        crate::common::dashboard_page(t, "/teams/main/pipelines/p").await
    }

    async fn pin_unpin_enable_disable(store: Store) {
        let t = TestWeb::start(store).await;
        set(&t, SIMPLE).await;
        save(&t, "src", "a").await;
        save(&t, "src", "b").await;
        let v = |r: &str| json!({ "ref": r }).as_object().unwrap().clone();
        t.admin
            .pin_resource("main", "p", "src", v("a"), Some("hold".into()))
            .await
            .unwrap();
        assert_eq!(pin_of(&t).await.as_deref(), Some("a"));
        // The API's pin shows where a person looks: `resources` and the
        // pipeline's page, with its comment.
        let listed = t.admin.resources("main", "p").await.unwrap();
        let src = listed.iter().find(|r| r.name == "src").unwrap();
        assert_eq!(src.pinned_version, Some(json!({"ref": "a"})));
        assert!(src.pinned_by_api);
        assert_eq!(src.pin_comment.as_deref(), Some("hold"));
        let page = pipeline_page(&t).await;
        assert!(
            page.contains("{&quot;ref&quot;:&quot;a&quot;} (pin-resource)")
                || page.contains(r#"{"ref":"a"} (pin-resource)"#),
            "{page}"
        );
        assert!(page.contains("“hold”"), "{page}");
        assert_eq!(schedule(&t.web).await, 1);
        assert_eq!(builds(&t, "unit").await[0][0].1, "a");
        t.admin.unpin_resource("main", "p", "src").await.unwrap();
        assert_eq!(pin_of(&t).await, None);
        let listed = t.admin.resources("main", "p").await.unwrap();
        let src = listed.iter().find(|r| r.name == "src").unwrap();
        assert_eq!((&src.pinned_version, src.pinned_by_api), (&None, false));
        assert!(!pipeline_page(&t).await.contains("(pin-resource)"));
        t.admin
            .set_resource_version_enabled("main", "p", "src", v("b"), false)
            .await
            .unwrap();
        let versions = t
            .admin
            .resource_versions(
                "main",
                "p",
                "src",
                VersionsQuery {
                    limit: None,
                    before: None,
                    after: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            versions.iter().map(|v| v.enabled).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(schedule(&t.web).await, 0, "b is disabled, a was built");
        t.admin
            .set_resource_version_enabled("main", "p", "src", v("b"), true)
            .await
            .unwrap();
        assert_eq!(schedule(&t.web).await, 1);
        t.stop().await;
    }

    async fn bad_requests_change_nothing(store: Store) {
        let t = TestWeb::start(store).await;
        set(&t, SIMPLE).await;
        save(&t, "src", "a").await;
        let base = format!("{}/api/v1/teams/main/pipelines/p/resources", t.url);
        let long = "x".repeat(2000);
        let cases: Vec<(String, Value, u16)> = vec![
            (format!("{base}/src/pin"), json!({"version": {}}), 400),
            (
                format!("{base}/src/pin"),
                json!({"version": {"ref": 1}}),
                400,
            ),
            (format!("{base}/src/pin"), json!({"version": "a"}), 400),
            (
                format!("{base}/src/pin"),
                json!({"version": {"ref": "a"}, "extra": 1}),
                400,
            ),
            (
                format!("{base}/src/pin"),
                json!({"version": {"ref": &long}}),
                400,
            ),
            (
                format!("{base}/src/pin"),
                json!({"version": {"ref": "a"}, "comment": &long}),
                400,
            ),
            (
                format!("{base}/src/pin"),
                json!({"version": {"ref": "nope"}}),
                404,
            ),
            (
                format!("{base}/nope/pin"),
                json!({"version": {"ref": "a"}}),
                404,
            ),
            (
                format!("{base}/..%2Fx/pin"),
                json!({"version": {"ref": "a"}}),
                400,
            ),
            (
                format!("{base}/src/versions/disable"),
                json!({"version": {}}),
                400,
            ),
            (format!("{base}/src/versions/enable"), json!({}), 400),
        ];
        for (url, body, want) in cases {
            let resp = t
                .raw
                .put(&url)
                .bearer_auth(crate::common::ADMIN)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), want, "{url} {body}");
        }
        let resp = t
            .raw
            .put(format!("{base}/src/pin"))
            .header("content-type", "application/json")
            .bearer_auth(crate::common::ADMIN)
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        // Without the token: refused.
        let resp = t.raw.put(format!("{base}/src/unpin")).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        assert_eq!(pin_of(&t).await, None, "nothing was pinned");
        let versions = t
            .admin
            .resource_versions(
                "main",
                "p",
                "src",
                VersionsQuery {
                    limit: None,
                    before: None,
                    after: None,
                },
            )
            .await
            .unwrap();
        assert!(versions.iter().all(|v| v.enabled));
        t.stop().await;
    }

    /// `GET …/jobs/{job}/inputs`: the job's gets at the versions a
    /// trigger would take, without the pipeline resource; 409 while one
    /// has no version, 404 and 400 for unknown or unsafe names, 401
    /// without the token; reading them makes no build.
    async fn job_inputs_for_execute(store: Store) {
        let t = TestWeb::start(store).await;
        set(&t, SIMPLE).await;
        let base = format!("{}/api/v1/teams/main/pipelines/p/jobs", t.url);
        let status = |url: String, token: bool| {
            let req = t.raw.get(url);
            let req = if token {
                req.bearer_auth(crate::common::ADMIN)
            } else {
                req
            };
            async move { req.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status(format!("{base}/unit/inputs"), true).await, 409);
        save(&t, "src", "a").await;
        save(&t, "src", "b").await;
        let found = t.admin.job_inputs("main", "p", "unit").await.unwrap();
        assert_eq!(found.inputs.len(), 1, "{found:?}");
        let get = &found.inputs[0];
        assert_eq!(get["get"], "src");
        assert_eq!(get["type"], "mock");
        assert_eq!(get["version"], json!({"ref": "b"}));
        assert!(get.get("resource").is_none(), "{get}");
        for (url, token, want) in [
            (format!("{base}/nope/inputs"), true, 404),
            (format!("{base}/..%2Fx/inputs"), true, 400),
            (format!("{base}/unit/inputs"), false, 401),
        ] {
            assert_eq!(status(url.clone(), token).await, want, "{url}");
        }
        assert!(builds(&t, "unit").await.is_empty(), "no build was made");
        t.stop().await;
    }

    async fn a_config_pin_is_refused_with_409(store: Store) {
        let t = TestWeb::start(store).await;
        set(&t, CONFIG_PIN).await;
        save(&t, "src", "a").await;
        save(&t, "src", "b").await;
        let b = json!({"ref": "b"}).as_object().unwrap().clone();
        for result in [
            t.admin.pin_resource("main", "p", "src", b, None).await,
            t.admin.unpin_resource("main", "p", "src").await,
        ] {
            let Err(hangar_client::ClientError::Api {
                status, message, ..
            }) = result
            else {
                panic!("expected a refusal, got {result:?}")
            };
            assert_eq!(status, reqwest::StatusCode::CONFLICT, "{message}");
            assert!(message.contains("config"), "{message}");
        }
        let pin = t
            .admin
            .resource_pin("main", "p", "src")
            .await
            .unwrap()
            .unwrap();
        assert!(pin.from_config);
        assert_eq!(pin.version, json!({"ref": "a"}));
        t.stop().await;
    }

    on_both_databases!(
        pin_unpin_enable_disable,
        bad_requests_change_nothing,
        a_config_pin_is_refused_with_409,
        job_inputs_for_execute,
    );
}
