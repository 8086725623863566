//! A job build records the versions it used (its gets of pipeline
//! resources, by step name) and produced (its puts), and on success its
//! inputs as outputs too; the implicit get after a put is not an input; a
//! build of the plan API records nothing; a resumed build records once and
//! never runs `out` again.

mod support;

use hangar_core::build::BuildStatus;
use hangar_core::pipeline::parse_pipeline;
use hangar_core::plan::planner::plan_job;
use hangar_store::{BuildVersionShown, Store};
use serde_json::json;
use support::{now, Harness};

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
