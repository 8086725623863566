//! Concourse's steps through `POST /api/v1/builds`: accepted as Concourse
//! writes them, refused with a 400 that says where, a refusal storing
//! nothing. On SQLite and PostgreSQL alike.

use crate::common::TestWeb;
use hangar_api::builds::CreateBuild;
use hangar_client::ClientError;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn req(plan: Value, resource_types: Value) -> CreateBuild {
    CreateBuild {
        resource_types,
        name: Some("b".into()),
        plan,
        artifacts: Default::default(),
        team: None,
    }
}

fn task(name: &str) -> Value {
    json!({"task": name, "config": {"platform": "linux", "run": {"path": "true"}}})
}

async fn concourse_steps_are_taken_and_bad_ones_refused_storing_nothing(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let refused = [
        (
            json!([{"task": "t", "config": {}, "retry_failures": true}]),
            Value::Null,
            "plan: plan[0].retry_failures: replaced by Concourse's `attempts`",
        ),
        (
            json!([{"put": "r", "type": "mock", "source": {"v": "((.:v))"}},
                   {"load_var": "v", "file": "r/v"}]),
            Value::Null,
            "plan step 0: local var ((.:v)) is not defined before it (by a load_var step, or a get or put step of that name)",
        ),
        (
            json!([{"load_var": "v", "file": "a/b"},
                   {"task": "t", "file": "a/t.yml", "params": {"A": "((.:v)) ((.:w.x))"}}]),
            Value::Null,
            "plan step 1: local var ((.:w.x)) is not defined",
        ),
        (
            json!([{"set_pipeline": "p", "file": "a/p.yml", "instance_vars": {"a/b": 1}}]),
            Value::Null,
            "plan: plan[0].instance_vars: instance var key \"a/b\"",
        ),
        (
            json!([{"put": "r", "type": "git", "source": {"uri": "((uri))"}}]),
            Value::Null,
            "plan step 0 (r): unresolved vars: uri;",
        ),
        (
            json!([{"do": [task("a")], "ensure": {"put": "r", "type": "mock", "source": {}, "params": {"p": "((secret))"}}}]),
            Value::Null,
            "plan step 0.ensure (r): unresolved vars: secret;",
        ),
    ];
    for (plan, types, says) in refused {
        match t.admin.create_build(&req(plan.clone(), types)).await {
            Err(ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{plan}: {message}");
                assert!(message.contains(says), "{plan}: {message}");
            }
            other => panic!("{plan}: expected a refusal, got {other:?}"),
        }
    }
    assert!(
        store.list_builds(10).await.unwrap().is_empty(),
        "a refusal stores nothing"
    );

    let plan = json!([
        {"get": "repo", "type": "mock", "source": {}},
        {"in_parallel": {"steps": [task("a"), {"try": task("b")}], "limit": 1, "fail_fast": true}},
        {"put": "repo", "type": "mock", "source": {}, "inputs": "detect", "params": {"file": "repo/v"},
         "attempts": 2, "timeout": "1m", "on_failure": task("alert"), "ensure": task("clean")}
    ]);
    let build = t.admin.create_build(&req(plan, Value::Null)).await.unwrap();
    assert_eq!(store.list_builds(10).await.unwrap().len(), 1);
    // Local vars a load_var before defines are the build's, filled in when
    // it runs; a task from a file is checked then too.
    let plan = json!([
        {"get": "repo", "type": "mock", "source": {}},
        {"load_var": "v", "file": "repo/v.yml", "reveal": false},
        {"task": "t", "file": "repo/t.yml", "vars": {"a": "((.:v.a))"},
         "params": {"B": "((.:v))"}, "container_limits": {"memory": 1000}},
        {"task": "inline", "config": {"platform": "linux", "run": {"path": "x"},
         "container_limits": {"memory": "((.:v.mem))"}}},
        {"set_pipeline": "p", "file": "repo/p.yml", "var_files": ["repo/v.yml"],
         "vars": {"x": "((.:v.x))"}}
    ]);
    t.admin.create_build(&req(plan, Value::Null)).await.unwrap();
    assert_eq!(store.list_builds(10).await.unwrap().len(), 2);
    assert_eq!(build.status, hangar_core::build::BuildStatus::Pending);
    t.stop().await;
}

on_both_databases!(concourse_steps_are_taken_and_bad_ones_refused_storing_nothing);
