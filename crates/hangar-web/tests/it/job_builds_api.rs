//! Triggering and listing a job's builds over the API, on SQLite and
//! PostgreSQL: numbering, the refusals (paused, unknown, a plan web would
//! refuse, bad names, a wrong token), each changing nothing.

use crate::common::{TestWeb, ADMIN};
use hangar_client::ClientError;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::json;

const CONFIG: &str = "
resources:
- name: thing
  type: mock
  source: {}
jobs:
- name: build
  plan:
  - get: thing
- name: unresolved
  plan:
  - get: thing
    params: {token: ((not-given))}
";

fn api_error(result: Result<impl std::fmt::Debug, ClientError>) -> (StatusCode, String) {
    match result {
        Err(ClientError::Api {
            status, message, ..
        }) => (status, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn set(t: &TestWeb) {
    t.admin
        .set_pipeline("main", "p", CONFIG, None)
        .await
        .unwrap();
}

async fn builds_of(t: &TestWeb, job: &str) -> Vec<String> {
    t.admin
        .job_builds("main", "p", job, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect()
}

async fn triggers_are_numbered_and_listed_per_job(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t).await;
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    let first = t.admin.trigger_job("main", "p", "build").await.unwrap();
    let second = t.admin.trigger_job("main", "p", "build").await.unwrap();
    assert_eq!(first.name, "p/build #1");
    assert_eq!(second.name, "p/build #2");
    assert_eq!(builds_of(&t, "build").await, ["p/build #2", "p/build #1"]);
    let one = t.admin.job_build("main", "p", "build", 1).await.unwrap();
    assert_eq!(one.id, first.id);
    let (status, message) = api_error(t.admin.job_build("main", "p", "build", 3).await);
    assert_eq!(status, StatusCode::NOT_FOUND, "{message}");
    assert_eq!(
        t.admin.jobs("main", "p").await.unwrap()[0].next_build_number,
        3
    );
}

async fn refused_triggers_change_nothing(store: Store) {
    let t = TestWeb::start(store).await;
    set(&t).await;
    // New pipelines are paused.
    let (status, message) = api_error(t.admin.trigger_job("main", "p", "build").await);
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(message.contains("pipeline p is paused"), "{message}");
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    t.admin.pause_job("main", "p", "build", true).await.unwrap();
    let (status, message) = api_error(t.admin.trigger_job("main", "p", "build").await);
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(message.contains("job p/build is paused"), "{message}");
    // A plan web refuses (a var no one can resolve) takes no number.
    let (status, message) = api_error(t.admin.trigger_job("main", "p", "unresolved").await);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        message.starts_with("p/unresolved: ") && message.contains("not-given"),
        "{message}"
    );
    let (status, _) = api_error(t.admin.trigger_job("main", "p", "nope").await);
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api_error(t.admin.trigger_job("main", "nope", "build").await);
    assert_eq!(status, StatusCode::NOT_FOUND);
    for job in ["a%2Fb", "a%00b", &"j".repeat(129)] {
        let resp = t
            .raw
            .post(format!(
                "{}/api/v1/teams/main/pipelines/p/jobs/{job}/builds",
                t.url
            ))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{job}");
    }
    let resp = t
        .raw
        .post(format!(
            "{}/api/v1/teams/main/pipelines/p/jobs/build/builds",
            t.url
        ))
        .bearer_auth("not-the-admin-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = t
        .raw
        .get(format!(
            "{}/api/v1/teams/main/pipelines/p/jobs/build/builds?limit=0",
            t.url
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(builds_of(&t, "build").await.is_empty());
    assert!(builds_of(&t, "unresolved").await.is_empty());
    assert!(t.admin.builds(50).await.unwrap().is_empty());
    let jobs = t.admin.jobs("main", "p").await.unwrap();
    assert!(jobs.iter().all(|j| j.next_build_number == 1));
}

async fn a_job_build_shows_the_versions_it_used_and_produced(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    set(&t).await;
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    let build = t.admin.trigger_job("main", "p", "build").await.unwrap();
    // The plan names the resource each get fetches, for the engine.
    let stored = store.get_build(build.id).await.unwrap().unwrap().plan;
    assert!(stored.contains(r#""resource":"thing""#), "{stored}");
    // What the engine records as the build runs (no worker here).
    let thing = store.resource("main", "p", "thing").await.unwrap().id;
    let job = store.job("main", "p", "build").await.unwrap().id;
    let v = store
        .save_resource_version(thing, &json!({"ref": "a"}), &json!([]), 1)
        .await
        .unwrap();
    let out = store
        .save_resource_version(thing, &json!({"ref": "b"}), &json!([]), 1)
        .await
        .unwrap();
    store
        .record_build_input(build.id, job, "thing", thing, v.id)
        .await
        .unwrap();
    store
        .record_build_output(build.id, job, thing, out.id)
        .await
        .unwrap();
    let shown = t.admin.job_build("main", "p", "build", 1).await.unwrap();
    let inputs: Vec<(String, String, serde_json::Value)> = shown
        .inputs
        .iter()
        .map(|i| (i.name.clone(), i.resource.clone(), i.version.clone()))
        .collect();
    assert_eq!(
        inputs,
        [("thing".into(), "thing".into(), json!({"ref": "a"}))]
    );
    assert_eq!(shown.outputs.len(), 1);
    assert_eq!(shown.outputs[0].version, json!({"ref": "b"}));
    // The list carries them too (`hangar builds -j P/J --json`).
    let listed = t.admin.job_builds("main", "p", "build", 5).await.unwrap();
    assert_eq!(listed[0].inputs, shown.inputs);
    assert_eq!(listed[0].outputs, shown.outputs);
}

async fn a_plan_sent_to_the_api_may_not_name_a_pipeline_resource(store: Store) {
    let t = TestWeb::start(store).await;
    for step in [
        json!({"get": "x", "resource": "thing", "type": "mock", "source": {}}),
        json!({"put": "x", "resource": "thing", "type": "mock", "source": {}}),
    ] {
        let (status, message) = api_error(
            t.admin
                .create_build(&hangar_api::builds::CreateBuild {
                    name: None,
                    plan: json!([step]),
                    artifacts: Default::default(),
                    resource_types: serde_json::Value::Null,
                    team: None,
                })
                .await,
        );
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(message.contains("`resource`"), "{message}");
    }
    assert!(t.admin.builds(50).await.unwrap().is_empty());
}

on_both_databases!(
    triggers_are_numbered_and_listed_per_job,
    refused_triggers_change_nothing,
    a_job_build_shows_the_versions_it_used_and_produced,
    a_plan_sent_to_the_api_may_not_name_a_pipeline_resource,
);
