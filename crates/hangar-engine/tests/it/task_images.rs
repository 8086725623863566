//! A task's `image_resource`: fetched with its resource type's `check`
//! and `in` into a resource cache on the task's own worker, the task run
//! under runc in a copy-on-write child of that cache.

use crate::support::{info, now, Harness};
use hangar_core::build::BuildStatus;
use hangar_engine::fake::CallKind;
use hangar_engine::CallError;
use serde_json::{json, Value};

/// A task whose image is a `mock` resource (the fake answers any type).
fn image_plan(image: Value) -> Value {
    json!([{"task": "t", "config": {
        "platform": "linux",
        "image_resource": image,
        "run": {"path": "cat", "args": ["/etc/os-release"]},
    }}])
}

fn busybox() -> Value {
    json!({"name": "build-image", "type": "mock",
           "source": {"repository": "busybox", "tag": "1.36"}})
}

fn pinned() -> Value {
    let mut image = busybox();
    image["version"] = json!({"ref": "v7"});
    image
}

/// The resource caches web knows as present, as (worker, handle).
async fn present_caches(h: &Harness) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for w in h.store.list_workers().await.unwrap() {
        for v in h.store.list_volumes(Some(&w.info.name)).await.unwrap() {
            if v.owner_kind == hangar_core::volumes::OwnerKind::ResourceCache
                && hangar_core::engine::volume_usable(v.state, v.missing_since)
            {
                out.push((v.worker, v.handle));
            }
        }
    }
    out
}

/// The number of `in` calls so far on `worker`.
fn ins(h: &Harness, worker: &str) -> usize {
    h.fake
        .calls_of(&format!("resource_action {worker} mock in"))
        .len()
}

#[tokio::test]
async fn the_image_is_fetched_on_the_task_s_worker_and_the_task_runs_in_a_child_of_it_under_runc() {
    let h = Harness::new(&["w1", "w2"]).await;
    let id = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let calls: Vec<String> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| !c.starts_with("wait_container") && !c.starts_with("container_logs"))
        .collect();
    assert_eq!(
        calls,
        [
            "resource_action w1 mock check",
            "create_volume w1 empty",
            "resource_action w1 mock in",
            "create_volume w1 cow",
            "create_container w1 cat",
            "destroy_container w1",
        ]
    );
    let log = h.log(id, &["step", "status"]).await;
    assert_eq!(
        log,
        [
            "status: started",
            "step: starting task t",
            "step: fetching image build-image (mock busybox:1.36) on worker w1",
            r#"step: image build-image (mock busybox:1.36): fetched version {"ref":"v1"} on worker w1"#,
            "step: running on worker w1 (runc)",
            "step: task t succeeded",
            "status: succeeded",
        ]
    );
    // The container's root is a copy-on-write child of the cache, which
    // stays for the next build; the child went with the container.
    let specs = h.fake.container_specs();
    let spec = &specs[0].1;
    assert_eq!(spec.runtime, hangar_api::containers::Runtime::Runc);
    let rootfs = spec.rootfs_volume.clone().expect("a rootfs volume");
    let caches = present_caches(&h).await;
    assert_eq!(caches.len(), 1, "{caches:?}");
    assert_eq!(caches[0].0, "w1");
    let child = h.store.get_volume(&rootfs).await.unwrap();
    if let Some(child) = child {
        assert_eq!(child.parent.as_deref(), Some(caches[0].1.as_str()));
        assert!(!hangar_core::engine::volume_usable(
            child.state,
            child.missing_since
        ));
    }
}

#[tokio::test]
async fn a_second_build_reuses_the_image_cache_on_its_worker() {
    let h = Harness::new(&["w1", "w2"]).await;
    let first = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    let second = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    let log = h.log(second, &["step"]).await;
    assert!(
        log.contains(
            &r#"step: image build-image (mock busybox:1.36): version {"ref":"v1"} found in the cache on worker w1"#
                .to_string()
        ),
        "{log:#?}"
    );
    assert_eq!(ins(&h, "w1"), 1);
    // check ran again (the tag may have moved), in did not.
    assert_eq!(h.fake.calls_of("resource_action w1 mock check").len(), 2);
    assert_eq!(present_caches(&h).await.len(), 1);
}

#[tokio::test]
async fn a_check_of_the_image_within_the_check_interval_is_reused_as_concourse_does() {
    let h = Harness::new_with(&["w1"], |c| c.image_check_interval_ms = 60_000).await;
    let first = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    let second = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    // One check for both builds; the second says where its version came
    // from, then finds the image in the cache.
    assert_eq!(h.fake.calls_of("resource_action w1 mock check").len(), 1);
    let log = h.log(second, &["step"]).await;
    let reused = log
        .iter()
        .position(|l| {
            l.starts_with(r#"step: image build-image (mock busybox:1.36): version {"ref":"v1"} from a check "#)
                && l.ends_with("s ago (checked again after 60 s, as Concourse's check interval)")
        })
        .unwrap_or_else(|| panic!("{log:#?}"));
    let cached = log
        .iter()
        .position(|l| l.contains("found in the cache on worker w1"))
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(reused < cached, "{log:#?}");
    assert_eq!(ins(&h, "w1"), 1);
    // Another image (another source) is checked for itself.
    let other = h
        .submit(image_plan(json!({
            "type": "mock",
            "source": {"repository": "alpine", "tag": "3"}
        })))
        .await;
    assert_eq!(h.finished(other).await, BuildStatus::Succeeded);
    assert_eq!(h.fake.calls_of("resource_action w1 mock check").len(), 2);
}

#[tokio::test]
async fn a_pinned_image_skips_check_and_is_placed_where_its_cache_is() {
    let h = Harness::new(&["w1", "w2"]).await;
    // The first fetch lands on w2 (w1 down), then w1 is back and idle.
    h.fake.set_down("w1", true);
    let first = h.submit(image_plan(pinned())).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    h.fake.set_down("w1", false);
    let second = h.submit(image_plan(pinned())).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert!(h.fake.calls_of("resource_action w2 mock check").is_empty());
    assert!(h.fake.calls_of("resource_action w1").is_empty());
    assert_eq!(ins(&h, "w2"), 1);
    let log = h.log(second, &["step"]).await;
    assert!(
        log.contains(
            &r#"step: image build-image (mock busybox:1.36): version {"ref":"v7"} found in the cache on worker w2"#
                .to_string()
        ),
        "{log:#?}"
    );
    assert!(log.contains(&"step: running on worker w2 (runc)".to_string()));
}

#[tokio::test]
async fn an_infrastructure_failure_of_the_image_fetch_is_retried_on_another_worker_and_its_cache_never_reused(
) {
    let cases = [
        CallError::refused(500, "internal", "cannot run the resource type"),
        CallError::unreachable("connection refused"),
    ];
    for error in cases {
        let h = Harness::new(&["w1", "w2"]).await;
        h.fake
            .fail_next("w1", CallKind::ResourceAction, error.clone());
        let id = h.submit(image_plan(pinned())).await;
        let status = h.finished(id).await;
        let log = h.log(id, &["infra", "step", "status"]).await;
        assert_eq!(status, BuildStatus::Succeeded, "{error:?}: {log:#?}");
        assert!(
            log.iter()
                .any(|l| l.contains("retrying task t (attempt 2 of 3)") && l.contains("w1")),
            "{error:?}: {log:#?}"
        );
        assert!(
            log.contains(&"step: running on worker w2 (runc)".to_string()),
            "{error:?}: {log:#?}"
        );
        // The half-made cache on w1 was released: only w2's is present.
        let caches = present_caches(&h).await;
        assert_eq!(caches.len(), 1, "{error:?}: {caches:?}");
        assert_eq!(caches[0].0, "w2");
        // A build that must use w1 fetches there again.
        // w2 is excluded by a tag only w1 carries.
        h.store
            .register_worker(
                &hangar_store::WorkerInfo {
                    tags: vec!["here".into()],
                    ..info("w1", "sid-w1")
                },
                now(),
            )
            .await
            .unwrap();
        let mut image = pinned();
        image["tags"] = json!(["here"]);
        let second = h.submit(image_plan(image)).await;
        assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
        let log = h.log(second, &["step"]).await;
        assert!(
            log.iter()
                .any(|l| l.contains("fetched version") && l.contains("w1")),
            "{error:?}: {log:#?}"
        );
    }
}

#[tokio::test]
async fn a_failed_image_fetch_fails_the_task_and_is_never_reused() {
    let h = Harness::new(&["w1"]).await;
    h.fake.exit_next_action("w1", "in", 1);
    let id = h.submit(image_plan(pinned())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    // The resource type's own failure: not retried, nothing run.
    assert_eq!(ins(&h, "w1"), 1);
    assert!(h.fake.calls_of("create_container").is_empty());
    assert!(present_caches(&h).await.is_empty());
    let log = h.log(id, &["step"]).await;
    assert!(
        log.iter().any(|l| l.starts_with(
            "step: image build-image (mock busybox:1.36): cannot fetch it on worker w1:"
        )),
        "{log:#?}"
    );
    let again = h.submit(image_plan(pinned())).await;
    assert_eq!(h.finished(again).await, BuildStatus::Succeeded);
    assert_eq!(ins(&h, "w1"), 2);
    let log = h.log(again, &["step"]).await;
    assert!(
        !log.iter().any(|l| l.contains("found in the cache")),
        "{log:#?}"
    );
}

#[tokio::test]
async fn a_worker_that_restarted_wiped_fetches_the_image_again() {
    let h = Harness::new(&["w1"]).await;
    let first = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    h.restart_wiped("w1").await;
    let second = h.submit(image_plan(busybox())).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert_eq!(ins(&h, "w1"), 2);
    let log = h.log(second, &["step"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("fetched version") && l.contains("on worker w1")),
        "{log:#?}"
    );
}

#[tokio::test]
async fn the_image_s_tags_and_the_step_s_tags_both_narrow_the_task_s_worker() {
    let h = Harness::new(&["w1"]).await;
    for (name, tags) in [("w2", vec!["big"]), ("w3", vec!["big", "gpu"])] {
        h.store
            .register_worker(
                &hangar_store::WorkerInfo {
                    tags: tags.into_iter().map(String::from).collect(),
                    ..info(name, &format!("sid-{name}"))
                },
                now(),
            )
            .await
            .unwrap();
    }
    let mut image = busybox();
    image["tags"] = json!(["big"]);
    let id = h.submit(image_plan(image.clone())).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(ins(&h, "w1"), 0);
    let mut plan = image_plan(image);
    plan[0]["tags"] = json!(["gpu"]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(ins(&h, "w3"), 1, "{:#?}", h.fake.calls());
    assert!(h.fake.calls_of("create_container w3").len() == 1);
}

#[tokio::test]
async fn an_image_of_a_type_no_worker_has_waits_and_never_runs_on_the_host() {
    let mut h = Harness::new(&["w1"]).await;
    let mut image = busybox();
    image["type"] = json!("registry-image");
    let id = h.submit(image_plan(image)).await;
    // The step says why it waits.
    h.logged(id, &["infra"], "no worker has resource type registry-image")
        .await;
    assert!(h.fake.calls().is_empty(), "{:#?}", h.fake.calls());
    h.stop().await;
}

#[tokio::test]
async fn an_image_fetch_cut_short_by_a_web_node_killed_mid_in_is_never_reused() {
    let mut a = Harness::new(&["w1"]).await;
    a.fake.hold("w1", CallKind::ResourceAction, true);
    let id = a.submit(image_plan(pinned())).await;
    a.fake.called("resource_action w1 mock in").await;
    // Killed, not stopped: no release of the half-written cache follows.
    // (Its build tasks are dropped with the engine's; then the token ends
    // the detached lease keeper, which a dead process would not run.)
    let task = a.task.take().expect("the engine runs");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    a.shutdown.cancel();
    a.fake.hold("w1", CallKind::ResourceAction, false);
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(ins(&b, "w1"), 2, "{:#?}", b.fake.calls());
    let log = b.log(id, &["step"]).await;
    assert!(
        !log.iter().any(|l| l.contains("found in the cache")),
        "{log:#?}"
    );
    // The finished fetch is the one cache a later build finds.
    let again = b.submit(image_plan(pinned())).await;
    assert_eq!(b.finished(again).await, BuildStatus::Succeeded);
    assert_eq!(ins(&b, "w1"), 2);
}
