//! Custom resource types (Concourse's `resource_types`): a get step of such
//! a type fetches the type's image on its worker with the type's own type
//! (a base type or another custom type), then runs `check` and `in` in a
//! copy-on-write child of that image.

use crate::support::Harness;
use hangar_core::build::BuildStatus;
use hangar_core::plan::stored_plan;
use hangar_engine::fake::CallKind;
use hangar_engine::CallError;
use serde_json::{json, Value};

fn get(type_name: &str) -> Value {
    json!([{"get": "feed", "type": type_name, "source": {"uri": "https://x/feed"}}])
}

/// `rss`, an image fetched by the base type `mock`.
fn rss() -> Value {
    json!([{"name": "rss", "type": "mock", "source": {"repository": "rss"},
            "defaults": {"uri": "default", "limit": 5}}])
}

/// The calls, without log and wait polling.
fn calls(h: &Harness) -> Vec<String> {
    h.fake
        .calls()
        .into_iter()
        .filter(|c| !c.starts_with("wait_container") && !c.starts_with("container_logs"))
        .collect()
}

/// Copies of images (container-owned volumes) web still counts as usable.
async fn live_copies(h: &Harness) -> usize {
    let mut n = 0;
    for v in h.store.list_volumes(None).await.unwrap() {
        if v.owner_kind == hangar_core::volumes::OwnerKind::Container
            && hangar_core::engine::volume_usable(v.state, v.missing_since)
        {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn the_type_s_image_is_fetched_then_check_and_in_run_in_copies_of_it() {
    let h = Harness::new(&["w1"]).await;
    let id = h.submit(stored_plan(&get("rss"), &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        calls(&h),
        [
            // The image, with the base type.
            "resource_action w1 mock check",
            "create_volume w1 empty",
            "resource_action w1 mock in",
            // check in a copy of the image, released after.
            "create_volume w1 cow",
            "resource_action w1 rss check in-image",
            // in into a new cache, in another copy of the image.
            "create_volume w1 empty",
            "create_volume w1 cow",
            "resource_action w1 rss in in-image",
        ]
    );
    assert_eq!(live_copies(&h).await, 0);
    let log = h.log(id, &["step"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("image of resource type rss (mock) fetched on worker w1")),
        "{log:?}"
    );
    // A second build reuses both caches: no `in` at all.
    let again = h.submit(stored_plan(&get("rss"), &rss())).await;
    assert_eq!(h.finished(again).await, BuildStatus::Succeeded);
    let ins = h.fake.calls_of("resource_action w1 mock in").len()
        + h.fake.calls_of("resource_action w1 rss in").len();
    assert_eq!(ins, 2, "{:?}", calls(&h));
}

#[tokio::test]
async fn a_chain_fetches_each_image_in_the_one_before_it() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([
        {"name": "rss", "type": "mirror", "source": {"repository": "rss"}},
        {"name": "mirror", "type": "mock", "source": {"repository": "mirror"}},
    ]);
    let id = h.submit(stored_plan(&get("rss"), &types)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let actions: Vec<String> = h.fake.calls_of("resource_action");
    assert_eq!(
        actions,
        [
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            "resource_action w1 mirror check in-image",
            "resource_action w1 mirror in in-image",
            "resource_action w1 rss check in-image",
            "resource_action w1 rss in in-image",
        ]
    );
}

#[tokio::test]
async fn a_resource_of_a_custom_type_is_keyed_by_its_type_and_its_image() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([
        {"name": "rss", "type": "mirror", "source": {"repository": "rss"}},
        {"name": "mirror", "type": "mock", "source": {"repository": "mirror"}},
    ]);
    let id = h.submit(stored_plan(&get("rss"), &types)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let mut keys: Vec<String> = h
        .store
        .list_volumes(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|v| v.owner_kind == hangar_core::volumes::OwnerKind::ResourceCache)
        .filter_map(|v| v.owner_id)
        .collect();
    keys.sort();
    let types: Vec<&str> = keys.iter().map(|k| k.split('@').next().unwrap()).collect();
    assert_eq!(types, ["mirror", "mock", "rss"], "{keys:?}");
    assert!(keys.iter().all(|k| k.matches('@').count() == 1), "{keys:?}");
}

#[tokio::test]
async fn a_stored_plan_with_a_cycle_errors_without_calling_a_worker() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([
        {"name": "a", "type": "b", "source": {}},
        {"name": "b", "type": "a", "source": {}},
    ]);
    let id = h.submit(stored_plan(&get("a"), &types)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Errored);
    let build = h.store.get_build(id).await.unwrap().unwrap();
    assert!(
        build
            .error
            .as_deref()
            .unwrap_or("")
            .contains("form a cycle"),
        "{build:?}"
    );
    assert!(h.fake.calls_of("resource_action").is_empty());
}

#[tokio::test]
async fn an_unsupported_field_in_a_stored_plan_errors() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([{"name": "rss", "type": "mock", "source": {}, "check_every": "1m"}]);
    let id = h.submit(stored_plan(&get("rss"), &types)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Errored);
    let build = h.store.get_build(id).await.unwrap().unwrap();
    assert!(
        build
            .error
            .as_deref()
            .unwrap_or("")
            .contains("check_every: not supported"),
        "{build:?}"
    );
}

#[tokio::test]
async fn an_infrastructure_failure_of_the_image_fetch_is_retried_on_another_worker() {
    let h = Harness::new(&["w1", "w2"]).await;
    // The image's `in` on w1 cannot reach the worker.
    h.fake.fail_next(
        "w1",
        CallKind::ResourceAction,
        CallError::unreachable("connection refused"),
    );
    let id = h.submit(stored_plan(&get("rss"), &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let w2 = h.fake.calls_of("resource_action w2");
    assert_eq!(
        w2,
        [
            "resource_action w2 mock check",
            "resource_action w2 mock in",
            "resource_action w2 rss check in-image",
            "resource_action w2 rss in in-image",
        ]
    );
    let log = h.log(id, &["infra"]).await;
    assert!(!log.is_empty(), "no retry announced");
}

#[tokio::test]
async fn an_infrastructure_failure_of_the_action_in_the_image_is_retried_on_another_worker() {
    let h = Harness::new(&["w1", "w2"]).await;
    // The image is fetched on w1; rss's check in it fails as the worker's.
    h.fake.fail_next(
        "w1",
        CallKind::ResourceActionInImage,
        CallError::refused(503, "unavailable", "no runc"),
    );
    let id = h.submit(stored_plan(&get("rss"), &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let step = h.store.build_steps(id).await.unwrap().remove(0);
    assert_eq!(step.worker.as_deref(), Some("w2"));
    assert_eq!(
        h.fake.calls_of("resource_action w1"),
        [
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            "resource_action w1 rss check in-image",
        ]
    );
    assert_eq!(h.fake.calls_of("resource_action w2 rss in").len(), 1);
    // The copies of the image the actions ran in were released, the
    // failed one's too.
    assert_eq!(live_copies(&h).await, 0);
}

#[tokio::test]
async fn defaults_go_under_the_step_s_source_and_the_type_s_params_fetch_its_image() {
    let h = Harness::new(&["w1"]).await;
    let mut types = rss();
    types[0]["params"] = json!({"format": "rootfs"});
    let id = h.submit(stored_plan(&get("rss"), &types)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let requests = h.fake.action_requests();
    let image_in = &requests[1].1;
    assert_eq!(image_in.resource_type, "mock");
    assert_eq!(image_in.image_volume, None);
    assert_eq!(image_in.request["source"], json!({"repository": "rss"}));
    assert_eq!(image_in.request["params"], json!({"format": "rootfs"}));
    let check = &requests[2].1;
    assert_eq!(check.resource_type, "rss");
    assert!(check.image_volume.is_some());
    assert_eq!(
        check.request["source"],
        json!({"uri": "https://x/feed", "limit": 5})
    );
    // Each action has its own copy of the image.
    assert_ne!(check.image_volume, requests[3].1.image_volume);
}

#[tokio::test]
async fn a_failed_in_of_the_custom_type_fails_the_step_as_its_own() {
    let h = Harness::new(&["w1"]).await;
    h.fake.exit_next_action("w1", "in", 0);
    h.fake.exit_next_action("w1", "in", 1);
    let id = h.submit(stored_plan(&get("rss"), &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let step = h.store.build_steps(id).await.unwrap().remove(0);
    assert_eq!(step.exit_code, Some(1));
}

#[tokio::test]
async fn a_custom_type_needs_a_worker_with_the_base_type_at_the_root() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([{"name": "rss", "type": "registry-image", "source": {}}]);
    let id = h.submit(stored_plan(&get("rss"), &types)).await;
    // No worker has registry-image: the step waits, calling nobody.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(h.fake.calls_of("resource_action").is_empty());
    let log = h.log(id, &["infra", "step"]).await;
    assert!(log.iter().any(|l| l.contains("registry-image")), "{log:?}");
}

/// A put of `rss` with an input and params.
fn put_rss() -> Value {
    json!([
        {"get": "repo", "type": "mock", "source": {}},
        {"put": "feed", "type": "rss", "source": {"uri": "https://x/feed"},
         "params": {"file": "repo/version"}, "get_params": {"skip": true}},
    ])
}

#[tokio::test]
async fn a_put_runs_out_in_a_copy_of_the_type_s_image_then_gets_through_the_type() {
    let h = Harness::new(&["w1"]).await;
    let id = h.submit(stored_plan(&put_rss(), &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let actions: Vec<String> = h.fake.calls_of("resource_action");
    assert_eq!(
        actions,
        [
            // The input.
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            // The type's image, then out in a copy of it.
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            "resource_action w1 rss out in-image",
            // The implicit get: the image checked again, found in the
            // cache (no `in`), and `in` through the type.
            "resource_action w1 mock check",
            "resource_action w1 rss in in-image",
        ]
    );
    let requests = h.fake.action_requests();
    let (_, out) = requests
        .iter()
        .find(|(_, a)| a.action == "out")
        .expect("out ran");
    assert_eq!(out.resource_type, "rss");
    assert!(out.image_volume.is_some());
    assert_eq!(out.inputs.keys().collect::<Vec<_>>(), ["repo"]);
    // The type's defaults go under the put's source.
    assert_eq!(
        out.request,
        json!({"source": {"uri": "https://x/feed", "limit": 5},
               "params": {"file": "repo/version"}})
    );
    let (_, implicit) = requests.last().unwrap();
    assert_eq!(implicit.request["params"], json!({"skip": true}));
    assert_eq!(implicit.request["version"], json!({"ref": "out-1"}));
    let steps = h.store.build_steps(id).await.unwrap();
    let put = steps.iter().find(|s| s.step_id == "1").unwrap();
    assert_eq!(put.version.as_deref(), Some(r#"{"ref":"out-1"}"#));
    assert!(steps
        .iter()
        .any(|s| s.step_id == "1.get" && s.state == hangar_core::build::StepState::Succeeded));
    assert_eq!(live_copies(&h).await, 0);
}

#[tokio::test]
async fn a_put_whose_out_in_the_image_fails_as_the_worker_s_is_retried_elsewhere() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake.fail_next_action(
        "w1",
        "out",
        CallError::refused(503, "unavailable", "no runc"),
    );
    let plan = json!([{"put": "feed", "type": "rss", "source": {}, "inputs": [], "no_get": true}]);
    let id = h.submit(stored_plan(&plan, &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let step = h.store.build_steps(id).await.unwrap().remove(0);
    assert_eq!(step.worker.as_deref(), Some("w2"));
    assert_eq!(h.fake.calls_of("resource_action w2 rss out").len(), 1);
    // no_get: no in through the type.
    assert!(h.fake.calls_of("resource_action w2 rss in").is_empty());
    assert_eq!(live_copies(&h).await, 0);
}

#[tokio::test]
async fn a_task_s_image_of_a_custom_type_is_fetched_with_that_type_s_in_in_its_image() {
    let h = Harness::new(&["w1"]).await;
    let plan = json!([{"task": "t", "config": {
        "platform": "linux",
        "image_resource": {"type": "rss", "source": {"repository": "busybox"}},
        "run": {"path": "true"},
    }}]);
    let id = h.submit(stored_plan(&plan, &rss())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("resource_action"),
        [
            // The type's image with its base type.
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            // The task's image with the custom type, in copies of its image.
            "resource_action w1 rss check in-image",
            "resource_action w1 rss in in-image",
        ]
    );
    let requests = h.fake.action_requests();
    let (_, fetched) = requests.last().unwrap();
    // The type's defaults go under the image's source.
    assert_eq!(
        fetched.request["source"],
        json!({"repository": "busybox", "uri": "default", "limit": 5})
    );
    assert_eq!(h.fake.container_specs().len(), 1);
    assert_eq!(live_copies(&h).await, 0);
}
