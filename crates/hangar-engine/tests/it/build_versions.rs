//! A job build records the versions it used (its gets of pipeline
//! resources, by step name) and produced (its puts), and on success its
//! inputs as outputs too; the implicit get after a put is not an input; a
//! build of the plan API records nothing; a resumed build records once and
//! never runs `out` again.

use hangar_core::build::BuildStatus;
use hangar_core::pipeline::parse_pipeline;
use hangar_core::plan::planner::plan_job;
use hangar_store::{BuildVersionShown, Store};
use serde_json::json;

use crate::support::{now, Harness};

const PIPELINE: &str = r#"
resources:
- {name: repo, type: mock, source: {}}
- {name: out, type: mock, source: {uri: u}}
jobs:
- name: ship
  plan:
  - get: code
    resource: repo
  - put: out
  - task: after
    config: {platform: linux, run: {path: after}}
"#;

/// Sets the pipeline and makes a build of its job `ship` (as a trigger
/// does): its id.
async fn job_build(store: &Store, config: &str) -> i64 {
    let config = parse_pipeline(config).expect("a valid pipeline").config;
    store
        .set_pipeline("main", "p", &config, None, now())
        .await
        .unwrap();
    let job = store.job("main", "p", "ship").await.unwrap();
    let plan = plan_job(&config, config.job("ship").unwrap()).unwrap();
    let build = store
        .create_job_build(job.id, "p/ship", &plan.stored.to_string(), now())
        .await
        .unwrap();
    build.build.id
}

/// A build's inputs (`name=resource:version`) and outputs
/// (`resource:version`).
async fn versions(store: &Store, build: i64) -> (Vec<String>, Vec<String>) {
    let (inputs, outputs) = store.build_versions_shown(build).await.unwrap();
    let show = |list: Vec<BuildVersionShown>| -> Vec<String> {
        list.into_iter()
            .map(|v| {
                let name = v.name.map_or(String::new(), |n| format!("{n}="));
                format!("{name}{}:{}", v.resource, v.version)
            })
            .collect()
    };
    (show(inputs), show(outputs))
}

#[tokio::test]
async fn a_job_build_records_its_inputs_and_outputs_and_copies_inputs_on_success() {
    let h = Harness::new(&["w1"]).await;
    let id = job_build(&h.store, PIPELINE).await;
    h.engine.wake();
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let (inputs, outputs) = versions(&h.store, id).await;
    // The get's version under the step's name; the implicit get of `out`
    // (version out-1) is not an input.
    assert_eq!(inputs, [r#"code=repo:{"ref":"v1"}"#]);
    assert_eq!(
        outputs,
        [r#"out:{"ref":"out-1"}"#, r#"repo:{"ref":"v1"}"#],
        "the put's version, and the input copied on success"
    );
}

/// A type's `in` may answer the version in another shape than `check`
/// found it (git-resource answers a tag's `{"ref"}` for a checked
/// `{"commit", "ref"}`): the build keeps the checked version, as
/// Concourse's does, and no new version of the resource is saved, so no
/// job triggers on it.
#[tokio::test]
async fn an_in_answering_another_version_saves_no_new_version() {
    let h = Harness::new(&["w1"]).await;
    h.fake.answer_in_with(json!({"ref": "v1-as-in-says"}));
    let id = job_build(&h.store, PIPELINE).await;
    h.engine.wake();
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let (inputs, _) = versions(&h.store, id).await;
    assert_eq!(inputs, [r#"code=repo:{"ref":"v1"}"#]);
    let saved = h
        .store
        .resource_versions(
            "main",
            "p",
            "repo",
            hangar_store::VersionPage {
                limit: 50,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let shown: Vec<&str> = saved.iter().map(|v| v.version.as_str()).collect();
    assert_eq!(shown, [r#"{"ref":"v1"}"#], "no version from in's answer");
}

/// `worker action` of each resource action, in order.
fn actions(h: &Harness) -> Vec<String> {
    h.fake
        .action_requests()
        .into_iter()
        .map(|(w, a)| format!("{w} {}", a.action))
        .collect()
}

#[tokio::test]
async fn a_failed_job_build_keeps_its_inputs_and_outputs_but_copies_nothing() {
    let h = Harness::new(&["w1"]).await;
    h.fake
        .end_with("after", hangar_engine::fake::Ending::Exit(1));
    let id = job_build(&h.store, PIPELINE).await;
    h.engine.wake();
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let (inputs, outputs) = versions(&h.store, id).await;
    assert_eq!(inputs, [r#"code=repo:{"ref":"v1"}"#]);
    assert_eq!(outputs, [r#"out:{"ref":"out-1"}"#], "no input copied");
}

#[tokio::test]
async fn a_build_of_the_plan_api_records_nothing_even_naming_a_resource() {
    let h = Harness::new(&["w1"]).await;
    // A job build of the same pipeline exists, so the resource is real.
    let job = job_build(&h.store, PIPELINE).await;
    assert_eq!(h.finished(job).await, BuildStatus::Succeeded);
    let id = h
        .submit(json!([{"get": "code", "resource": "repo", "type": "mock", "source": {}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(versions(&h.store, id).await, (vec![], vec![]));
}

#[tokio::test]
async fn a_put_whose_implicit_get_loses_its_worker_runs_out_once_and_records_once() {
    let h = Harness::new(&["w1", "w2"]).await;
    for w in ["w1", "w2"] {
        h.fake.fail_next_action(
            w,
            "in",
            hangar_engine::CallError::unreachable("connection refused"),
        );
    }
    let id = job_build(
        &h.store,
        "resources:\n- {name: out, type: mock, source: {uri: u}}\n\
         jobs:\n- name: ship\n  plan:\n  - put: out\n",
    )
    .await;
    h.engine.wake();
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let outs = actions(&h)
        .into_iter()
        .filter(|a| a.ends_with(" out"))
        .count();
    assert_eq!(outs, 1, "{:?}", actions(&h));
    let (inputs, outputs) = versions(&h.store, id).await;
    assert!(inputs.is_empty(), "an implicit get is no input: {inputs:?}");
    assert_eq!(outputs, [r#"out:{"ref":"out-1"}"#]);
}

#[tokio::test]
async fn a_job_build_resumed_on_another_node_records_once_and_never_runs_out_again() {
    let mut a = Harness::new(&["w1"]).await;
    a.fake.hold_program("after");
    let id = job_build(&a.store, PIPELINE).await;
    a.engine.wake();
    a.fake.called("create_container w1 after").await;
    a.stop().await;
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    let outs = actions(&b)
        .into_iter()
        .filter(|a| a.ends_with(" out"))
        .count();
    assert_eq!(outs, 1, "{:?}", actions(&b));
    let (inputs, outputs) = versions(&b.store, id).await;
    assert_eq!(inputs, [r#"code=repo:{"ref":"v1"}"#]);
    assert_eq!(outputs, [r#"out:{"ref":"out-1"}"#, r#"repo:{"ref":"v1"}"#]);
}
