//! A plan's `resource_types` (Concourse's custom resource types) are
//! checked whole before anything is stored: malformed, hostile or
//! unsupported ones get a 400 that says where, on SQLite and PostgreSQL
//! alike; good ones are stored with the plan.

use crate::common::{TestWeb, ADMIN};
use hangar_api::builds::CreateBuild;
use hangar_api::ErrorBody;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn get(type_name: &str) -> Value {
    json!([{"get": "feed", "type": type_name, "source": {"uri": "u"}}])
}

fn rss() -> Value {
    json!({"name": "rss", "type": "registry-image", "source": {"repository": "rss"}})
}

async fn post(t: &TestWeb, body: String) -> (StatusCode, String) {
    let resp = t
        .raw
        .post(format!("{}/api/v1/builds", t.url))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.text().await.unwrap())
}

async fn bad_resource_types_are_refused_saying_where(store: Store) {
    let t = TestWeb::start(store).await;
    let mut deep: Vec<Value> = (0..6)
        .map(|i| json!({"name": format!("t{i}"), "type": format!("t{}", i + 1), "source": {}}))
        .collect();
    deep.push(rss());
    let cases = [
        (
            json!([rss(), rss()]),
            "resource_types[1].name: \"rss\" is declared twice",
        ),
        (
            json!([{"name": "r s", "type": "registry-image", "source": {}}]),
            "resource_types[0].name: invalid name",
        ),
        (
            json!([{"name": "rss", "source": {}}]),
            "resource_types[0]: missing field `type`",
        ),
        (
            json!([{"name": "rss", "type": "registry-image"}]),
            "resource_types[0]: missing field `source`",
        ),
        (
            json!([{"name": "rss", "type": "registry-image", "source": {}, "privileged": "yes"}]),
            "resource_types[0].privileged: invalid type: string \"yes\", expected a boolean",
        ),
        (
            json!([{"name": "rss", "type": "registry-image", "source": {}, "check_every": "1m"}]),
            "resource_types[0].check_every: not supported",
        ),
        (
            json!([{"name": "rss", "type": "registry-image", "source": {}, "unique_version_history": true}]),
            "resource_types[0].unique_version_history: unknown field",
        ),
        (
            json!([{"name": "a", "type": "b", "source": {}}, {"name": "b", "type": "a", "source": {}}]),
            "its types form a cycle (a -> b -> a)",
        ),
        (Value::Array(deep), "a chain of more than 4 custom types"),
        (json!({"rss": {}}), "resource_types: expected a list"),
        (
            json!([{"name": "rss", "type": "registry-image", "source": {"password": "((pw))"}}]),
            "resource_types[0] (rss): unresolved var pw",
        ),
    ];
    for (types, expected) in cases {
        let body = json!({"plan": get("rss"), "resource_types": types}).to_string();
        let (status, text) = post(&t, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{types}: {text}");
        let err: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(
            err.error.message.contains(expected),
            "{types}: {}",
            err.error.message
        );
    }
    // The stored form sent as a plan is not a plan.
    let sneaky = json!({"steps": get("rss"), "resource_types": [rss()]});
    let (status, text) = post(&t, json!({"plan": sneaky}).to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("expected a list of steps"), "{text}");
    // Many of them: bounded.
    let many: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("t{i}"), "type": "registry-image", "source": {}}))
        .collect();
    let (status, text) = post(
        &t,
        json!({"plan": get("rss"), "resource_types": many}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("at most 64 resource types"), "{text}");
    assert!(t.admin.builds(10).await.unwrap().is_empty());
    t.stop().await;
}

async fn a_plan_with_resource_types_is_stored_with_them(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    let req = CreateBuild {
        name: None,
        plan: get("rss"),
        artifacts: Default::default(),
        resource_types: json!([rss()]),
        team: None,
    };
    let build = t.admin.create_build(&req).await.unwrap();
    let stored = store.get_build(build.id).await.unwrap().unwrap();
    let plan =
        hangar_core::plan::parse_build_plan(&serde_json::from_str(&stored.plan).unwrap()).unwrap();
    assert_eq!(plan.resource_types.len(), 1);
    assert_eq!(plan.resource_types[0].name, "rss");
    t.stop().await;
}

on_both_databases!(
    bad_resource_types_are_refused_saying_where,
    a_plan_with_resource_types_is_stored_with_them,
);
