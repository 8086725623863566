//! Task config fields the engine honours: an output that is an input
//! changed in place, a cache's ttl (`image_resource` is
//! `task_images.rs`'s).

mod support;

use std::collections::BTreeMap;

use hangar_core::build::BuildStatus;
use serde_json::json;
use support::{now, Harness};

fn outputs_of(steps: &[hangar_store::StepRecord], name: &str) -> BTreeMap<String, String> {
    let step = steps.iter().find(|s| s.name == name).expect("the step ran");
    serde_json::from_str(&step.outputs).unwrap()
}

#[tokio::test]
async fn an_output_at_an_inputs_path_is_the_input_changed_in_place() {
    let h = Harness::new(&["w1"]).await;
    let plan = json!([
        {"task": "make", "config": {
            "platform": "linux", "run": {"path": "make"},
            "outputs": [{"name": "repo"}]}},
        {"task": "change", "config": {
            "platform": "linux", "run": {"path": "change"},
            "inputs": [{"name": "repo"}],
            "outputs": [{"name": "repo"}, {"name": "notes", "path": "repo-notes"}]}},
        {"task": "read", "config": {
            "platform": "linux", "run": {"path": "read"},
            "inputs": [{"name": "repo"}]}}
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let steps = h.store.build_steps(id).await.unwrap();
    let made = outputs_of(&steps, "make")["repo"].clone();
    let changed = outputs_of(&steps, "change");
    // The changed repo is the copy the task was given of the one made
    // before, not a fresh empty volume beside it.
    let repo = h.store.get_volume(&changed["repo"]).await.unwrap().unwrap();
    assert_eq!(repo.parent.as_deref(), Some(made.as_str()));
    assert!(h.fake.volumes_on("w1").contains(&repo.handle));
    assert_ne!(changed["notes"], changed["repo"]);
    // `change` made one copy (its input) and one empty volume (notes).
    let creates = h.fake.calls_of("create_volume");
    assert_eq!(
        creates,
        [
            "create_volume w1 empty", // make: repo
            "create_volume w1 cow",   // change: repo, changed in place
            "create_volume w1 empty", // change: notes
            "create_volume w1 cow",   // read: repo
        ]
    );
}

fn cached_plan(ttl: Option<&str>) -> serde_json::Value {
    let mut cache = json!({"path": "deps"});
    if let Some(ttl) = ttl {
        cache["ttl"] = json!(ttl);
    }
    json!([{"task": "t", "config": {
        "platform": "linux", "run": {"path": "build"}, "caches": [cache]}}])
}

#[tokio::test]
async fn a_cache_unused_for_longer_than_its_ttl_starts_empty() {
    let h = Harness::new(&["w1"]).await;
    let first = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    let caches = |h: &Harness| {
        let h = h.store.clone();
        async move {
            h.list_volumes(None)
                .await
                .unwrap()
                .into_iter()
                .filter(|v| v.owner_kind.as_str() == "task-cache" && v.state.as_str() == "created")
                .map(|v| v.handle)
                .collect::<Vec<_>>()
        }
    };
    let old = caches(&h).await;
    assert_eq!(old.len(), 1);

    // Used 30 s ago: within the ttl, reused.
    h.store
        .mark_volumes_used(&old, now() - 30_000)
        .await
        .unwrap();
    let second = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert!(h
        .log(second, &["infra"])
        .await
        .contains(&"infra: reusing cache deps on worker w1".to_string()));
    assert_eq!(caches(&h).await, old);

    // Unused for 2 minutes: past the ttl, released and started empty.
    h.store
        .mark_volumes_used(&old, now() - 120_000)
        .await
        .unwrap();
    let third = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(third).await, BuildStatus::Succeeded);
    let log = h.log(third, &["infra"]).await;
    assert!(
        log.iter().any(
            |l| l.starts_with("infra: cache deps on worker w1 was unused for 2m")
                && l.ends_with("longer than its ttl: starting it empty")
        ),
        "{log:#?}"
    );
    let now_caches = caches(&h).await;
    assert_eq!(now_caches.len(), 1);
    assert_ne!(now_caches, old);

    // Without a ttl, the same idle cache is reused.
    h.store
        .mark_volumes_used(&now_caches, now() - 3_600_000)
        .await
        .unwrap();
    let fourth = h.submit(cached_plan(None)).await;
    assert_eq!(h.finished(fourth).await, BuildStatus::Succeeded);
    assert_eq!(caches(&h).await, now_caches);
}
