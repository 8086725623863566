//! A plan that still holds a `((var))` is refused, naming each var and what
//! to do, before anything is stored; text that only looks like a var is not.
//! On SQLite and PostgreSQL alike.

use crate::common::{TestWeb, ADMIN};
use hangar_api::builds::CreateBuild;
use hangar_api::ErrorBody;
use hangar_client::ClientError;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn task(config: Value) -> Value {
    json!({"task": "t", "config": config})
}

fn config(params: Value) -> Value {
    json!({"platform": "linux", "run": {"path": "true"}, "params": params})
}

async fn refused(t: &TestWeb, plan: Value) -> String {
    let req = CreateBuild {
        resource_types: serde_json::Value::Null,
        name: None,
        plan: plan.clone(),
        artifacts: Default::default(),
        team: None,
    };
    match t.admin.create_build(&req).await {
        Err(ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{plan}: {message}");
            message
        }
        other => panic!("{plan}: expected a refusal, got {other:?}"),
    }
}

async fn a_plan_holding_an_unresolved_var_is_refused_naming_each(store: Store) {
    let t = TestWeb::start(store).await;
    let cases = [
        (
            json!([task(config(json!({"TOKEN": "((some-secret.password))"})))]),
            "plan step 0 (t): unresolved vars: some-secret.password;",
        ),
        (
            json!([task(config(json!({"A": "x-((b.c))-((a))", "((k))": "v"})))]),
            "plan step 0 (t): unresolved vars: a, b.c, k;",
        ),
        (
            json!([task(
                json!({"platform": "linux", "run": {"path": "((path))"},
                               "container_limits": {"memory": "((mem))"}})
            )]),
            "plan step 0 (t): unresolved vars: mem, path;",
        ),
        (
            json!([{"in_parallel": [task(config(json!({}))),
                                    task(config(json!({"X": "((vault:x))"})))]}]),
            "plan step 0.1 (t): unresolved vars: vault:x;",
        ),
        (
            json!([{"get": "repo", "type": "git", "source": {"uri": "https://((host))/r"},
                    "params": {"depth": "((depth))"}}]),
            "plan step 0 (repo): unresolved vars: depth, host;",
        ),
        // Not a task config at all, still named rather than misread.
        (
            json!([task(json!("((whole))"))]),
            "plan step 0 (t): unresolved vars: whole;",
        ),
    ];
    for (plan, want) in cases {
        let message = refused(&t, plan.clone()).await;
        assert!(message.starts_with(want), "{plan}: {message}");
        assert!(
            message.contains("web has no credential manager (hangar web --credentials-kubernetes or --credentials-dir)")
                && message.contains("`hangar execute` with -v, -l or -y"),
            "{message}"
        );
    }
    // Thousands of vars: the answer names the first few.
    let many: serde_json::Map<String, Value> = (0..5000)
        .map(|i| (format!("K{i}"), json!(format!("((v{i:05}))"))))
        .collect();
    let message = refused(&t, json!([task(config(Value::Object(many)))])).await;
    assert!(message.contains("v00000, v00001"), "{message}");
    assert!(message.contains("and 4980 more"), "{message}");
    assert!(message.len() < 1000, "{}", message.len());

    assert!(t.admin.builds(10).await.unwrap().is_empty());
    t.stop().await;
}

async fn text_that_only_looks_like_a_var_is_accepted(store: Store) {
    let t = TestWeb::start(store).await;
    for params in [
        json!({"A": "(( spaced ))", "B": "((unterminated", "C": "(()", "D": "a)) b (("}),
        json!({"E": "$((1 + 2))"}),
    ] {
        let req = CreateBuild {
            resource_types: serde_json::Value::Null,
            name: None,
            plan: json!([task(config(params.clone()))]),
            artifacts: Default::default(),
            team: None,
        };
        t.admin
            .create_build(&req)
            .await
            .unwrap_or_else(|e| panic!("{params}: {e}"));
    }
    assert_eq!(t.admin.builds(10).await.unwrap().len(), 2);
    t.stop().await;
}

async fn hostile_bodies_are_refused_in_the_error_shape(store: Store) {
    let t = TestWeb::start(store).await;
    let mut deep = String::from("\"((x))\"");
    for _ in 0..200 {
        deep = format!("[{deep}]");
    }
    let bodies = [
        format!(r#"{{"plan": [{{"task": "t", "config": {deep}}}], "artifacts": {{}}}}"#),
        r#"{"plan": [{"task": "t", "config": {"platform": "linux", "run": {"path": "((x"#
            .to_string(),
        r#"{"plan": [{"task": "t", "config": {"params": {"((a))": "((a))"}}}], "artifacts": {}, "vars": {"a": 1}}"#
            .to_string(),
        "\"((a))\"".to_string(),
        format!(
            r#"{{"plan": [{{"task": "t", "config": {{"platform": "linux", "run": {{"path": "true"}}, "params": {{"X": "{}"}}}}}}], "artifacts": {{}}}}"#,
            "((".repeat(100_000)
        ),
    ];
    for body in bodies {
        let resp = t
            .raw
            .post(format!("{}/api/v1/builds", t.url))
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let shown = &body[..body.len().min(80)];
        if status == StatusCode::CREATED {
            // Only the run of opening parentheses, which holds no var.
            assert!(body.contains("(((((("), "{shown}: {text}");
            continue;
        }
        assert_eq!(status, StatusCode::BAD_REQUEST, "{shown}: {text}");
        let err: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(!err.error.message.is_empty(), "{shown}");
    }
    assert!(t.admin.builds(10).await.unwrap().len() <= 1);
    t.stop().await;
}

on_both_databases!(
    a_plan_holding_an_unresolved_var_is_refused_naming_each,
    text_that_only_looks_like_a_var_is_accepted,
    hostile_bodies_are_refused_in_the_error_shape,
);
