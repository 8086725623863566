//! A resource action's stderr in the build log as it is written, under
//! the step it ran for and bounded per step; and a resource action's
//! failure classified by the worker: the infrastructure's tried on another
//! worker, the resource's own not.

use crate::support::Harness;
use hangar_api::resources::ActionFailure;
use hangar_core::build::{BuildStatus, StepState};
use serde_json::{json, Value};

fn get_plan() -> Value {
    json!([{"get": "repo", "type": "mock", "source": {"uri": "x"}}])
}

/// A task whose image is a pinned `mock` resource (the fake answers any
/// type).
fn image_plan() -> Value {
    json!([{"task": "t", "config": {
        "platform": "linux",
        "image_resource": {"name": "build-image", "type": "mock",
                           "source": {"repository": "busybox"},
                           "version": {"ref": "v7"}},
        "run": {"path": "true"},
    }}])
}

/// The build's `log` events as (step, text).
async fn output(h: &Harness, id: i64) -> Vec<(Option<String>, String)> {
    h.store
        .build_events(id, 0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.as_str() == "log")
        .map(|e| (e.step, e.payload))
        .collect()
}

async fn wait_for_output(h: &Harness, id: i64, text: &str) {
    h.logged(id, &["log"], text).await;
}

#[tokio::test]
async fn a_get_step_s_output_is_in_the_build_log_under_it_before_it_ends() {
    let h = Harness::new(&["w1"]).await;
    h.fake.write_next_action(
        "w1",
        "in",
        vec!["cloning x\n".into(), "fetched 3 objects\n".into()],
    );
    h.fake.pause_after_output("w1", "in", true);
    let id = h.submit(get_plan()).await;
    wait_for_output(&h, id, "fetched 3 objects").await;
    // The step still runs: the action has not ended.
    let steps = h.store.build_steps(id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].state, StepState::Running);
    assert!(!h
        .store
        .get_build(id)
        .await
        .unwrap()
        .unwrap()
        .status
        .is_final());
    h.fake.pause_after_output("w1", "in", false);
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let out = output(&h, id).await;
    let step = Some(steps[0].step_id.clone());
    // Pieces that came together are one event.
    assert_eq!(out, [(step, "cloning x\nfetched 3 objects\n".to_string())]);
}

#[tokio::test]
async fn a_flood_of_output_is_cut_at_the_step_s_bound_and_said_once() {
    let h = Harness::new(&["w1"]).await;
    // 3 MiB in pieces of 64 KiB: 1 MiB is kept. Pieces of "é" so the cut
    // must fall between characters.
    let piece = "\u{e9}".repeat(32 * 1024);
    h.fake
        .write_next_action("w1", "check", vec![piece.clone(); 16]);
    h.fake.write_next_action("w1", "in", vec![piece; 32]);
    let id = h.submit(get_plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let kept: usize = output(&h, id).await.iter().map(|(_, t)| t.len()).sum();
    assert!(kept <= 1024 * 1024, "{kept}");
    assert!(kept > 1024 * 1024 - 4, "{kept}");
    let said: Vec<String> = h
        .log(id, &["step"])
        .await
        .into_iter()
        .filter(|l| l.contains("output of resource actions cut at 1 MiB"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
}

#[tokio::test]
async fn a_custom_type_s_image_fetch_and_its_in_in_a_container_both_write_under_the_get_step() {
    let h = Harness::new(&["w1"]).await;
    let types = json!([{"name": "rss", "type": "mock", "source": {"repository": "rss"}}]);
    // The first `in` fetches the type's image, the second runs in it.
    h.fake
        .write_next_action("w1", "in", vec!["pulling the rss image\n".into()]);
    h.fake
        .write_next_action("w1", "in", vec!["3 new items\n".into()]);
    let plan = json!([{"get": "feed", "type": "rss", "source": {"uri": "x"}}]);
    let id = h
        .submit(hangar_core::plan::stored_plan(&plan, &types))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let step = Some(h.store.build_steps(id).await.unwrap()[0].step_id.clone());
    assert_eq!(
        output(&h, id).await,
        [
            (step.clone(), "pulling the rss image\n".to_string()),
            (step, "3 new items\n".to_string()),
        ]
    );
    assert_eq!(
        h.fake.calls_of("resource_action w1 rss in in-image").len(),
        1
    );
}

#[tokio::test]
async fn output_written_a_byte_at_a_time_makes_few_log_events() {
    let h = Harness::new(&["w1"]).await;
    let bytes: Vec<String> = (0..5000).map(|i| format!("{}", i % 10)).collect();
    h.fake.write_next_action("w1", "in", bytes);
    let id = h.submit(get_plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let out = output(&h, id).await;
    assert_eq!(out.iter().map(|(_, t)| t.len()).sum::<usize>(), 5000);
    assert!(out.len() <= 5, "{} events", out.len());
}

#[tokio::test]
async fn an_image_fetch_s_output_is_under_the_task_after_the_line_naming_the_image() {
    let h = Harness::new(&["w1"]).await;
    h.fake.write_next_action(
        "w1",
        "in",
        vec!["registry-image: manifest sha256:abc: 2 layer(s), 3.0 MiB compressed\n".into()],
    );
    let id = h.submit(image_plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let events = h.store.build_events(id, 0, 1000).await.unwrap();
    let task_step = h.store.build_steps(id).await.unwrap()[0].step_id.clone();
    let naming = events
        .iter()
        .position(|e| {
            e.payload
                .starts_with("fetching image build-image (mock busybox")
        })
        .expect("a line names the image");
    let progress = events
        .iter()
        .position(|e| e.payload.contains("registry-image: manifest sha256:abc"))
        .expect("the fetch's output is in the log");
    assert!(naming < progress);
    assert_eq!(events[progress].step.as_deref(), Some(task_step.as_str()));
    assert_eq!(events[progress].kind.as_str(), "log");
}

#[tokio::test]
async fn an_infrastructure_failure_of_the_image_s_registry_is_retried_on_another_worker() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake
        .exit_next_action_as("w1", "in", 75, ActionFailure::Infrastructure);
    let id = h.submit(image_plan()).await;
    let status = h.finished(id).await;
    let log = h.log(id, &["infra", "step", "status"]).await;
    assert_eq!(status, BuildStatus::Succeeded, "{log:#?}");
    let retries: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("retrying task t (attempt 2 of 3)"))
        .collect();
    assert_eq!(retries.len(), 1, "{log:#?}");
    assert!(
        retries[0].contains("could not be reached or failed from worker w1"),
        "{log:#?}"
    );
    assert!(
        log.contains(&"step: running on worker w2 (runc)".to_string()),
        "{log:#?}"
    );
    assert_eq!(h.fake.calls_of("resource_action w1 mock in").len(), 1);
    assert_eq!(h.fake.calls_of("resource_action w2 mock in").len(), 1);
    assert_eq!(h.fake.calls_of("create_container").len(), 1);
    // No half-fetched image is left to be used: one usable cache.
    let mut usable = 0;
    for w in ["w1", "w2"] {
        for v in h.store.list_volumes(Some(w)).await.unwrap() {
            if v.owner_kind == hangar_core::volumes::OwnerKind::ResourceCache
                && hangar_core::engine::volume_usable(v.state, v.missing_since)
            {
                usable += 1;
            }
        }
    }
    assert_eq!(usable, 1);
}

#[tokio::test]
async fn a_get_step_whose_source_is_unreachable_from_its_worker_is_retried_elsewhere() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake
        .exit_next_action_as("w1", "check", 75, ActionFailure::Infrastructure);
    let id = h.submit(get_plan()).await;
    let status = h.finished(id).await;
    let log = h.log(id, &["infra", "step"]).await;
    assert_eq!(status, BuildStatus::Succeeded, "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("retrying get repo (attempt 2 of")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("fetched version") && l.contains("w2")),
        "{log:#?}"
    );
}

#[tokio::test]
async fn a_configuration_failure_of_the_image_fails_the_task_at_once_with_its_message() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake.write_next_action(
        "w1",
        "in",
        vec!["error: registry-image: 401 Unauthorized (configuration or image error)\n".into()],
    );
    h.fake
        .exit_next_action_as("w1", "in", 1, ActionFailure::Own);
    let id = h.submit(image_plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert_eq!(h.fake.calls_of("resource_action w1 mock in").len(), 1);
    assert!(h.fake.calls_of("resource_action w2").is_empty());
    assert!(h.fake.calls_of("create_container").is_empty());
    let log = h.log(id, &["infra", "log", "step"]).await;
    assert!(!log.iter().any(|l| l.contains("retrying")), "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("401 Unauthorized (configuration or image error)")),
        "{log:#?}"
    );
    // An image's own exit 75 without the worker's word is its own too.
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake
        .exit_next_action_as("w1", "in", 75, ActionFailure::Own);
    let id = h.submit(image_plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert!(h.fake.calls_of("resource_action w2").is_empty());
}

#[tokio::test]
async fn an_image_fetch_whose_worker_dies_mid_in_leaves_nothing_a_later_task_uses() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake
        .write_next_action("w1", "in", vec!["layer 1/3\n".into()]);
    h.fake.pause_after_output("w1", "in", true);
    let id = h.submit(image_plan()).await;
    wait_for_output(&h, id, "layer 1/3").await;
    // The answer breaks off half-way.
    h.fake.set_down("w1", true);
    let status = h.finished(id).await;
    let log = h.log(id, &["infra", "step"]).await;
    assert_eq!(status, BuildStatus::Succeeded, "{log:#?}");
    assert!(
        log.contains(&"step: running on worker w2 (runc)".to_string()),
        "{log:#?}"
    );
    for v in h.store.list_volumes(Some("w1")).await.unwrap() {
        assert!(
            !(v.owner_kind == hangar_core::volumes::OwnerKind::ResourceCache
                && hangar_core::engine::volume_usable(v.state, v.missing_since)),
            "a half-fetched cache on w1 is usable: {v:?}"
        );
    }
}
