//! A step that needs a resource type no worker has fails clearly within
//! the engine's bound (`--no-worker-timeout`): its log says once why it
//! waits and for how long it will, then the step fails saying no worker
//! has the type. A worker with the type that joins within the bound takes
//! the step; a worker with it that is only down is waited for without a
//! bound.

use std::time::{Duration, Instant};

use crate::support::{info, now, Harness};
use hangar_core::build::BuildStatus;
use serde_json::json;

fn get_mokc() -> serde_json::Value {
    json!([{"get": "repo", "type": "mokc", "source": {"uri": "x"}}])
}

/// Registers `name` with the resource type `mokc`.
async fn join_with_mokc(h: &Harness, name: &str) {
    let worker = hangar_store::WorkerInfo {
        resource_types_json: r#"[{"type":"mokc","path":"/fake/mokc"}]"#.into(),
        ..info(name, &format!("sid-{name}"))
    };
    h.store.register_worker(&worker, now()).await.unwrap();
}

/// Waits until the build's log holds a line with `text`.
async fn logged(h: &Harness, id: i64, text: &str) -> Vec<String> {
    h.logged(id, &["infra", "step", "status"], text).await
}

#[tokio::test]
async fn a_step_of_a_type_no_worker_has_fails_within_the_bound_saying_so() {
    let mut h = Harness::new_with(&["w1"], |c| {
        c.no_worker_timeout = Duration::from_millis(400);
    })
    .await;
    let started = Instant::now();
    let id = h.submit(get_mokc()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let log = h.log(id, &["infra", "step", "status"]).await;
    let waiting: Vec<_> = log
        .iter()
        .filter(|l| l.contains("waiting for a worker"))
        .collect();
    assert_eq!(waiting.len(), 1, "{log:#?}");
    assert!(
        waiting[0].contains(
            "waiting for a worker: no worker has resource type mokc; \
             the step fails if none joins within 400ms"
        ),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| !l.contains("waiting")
            && l.contains("no worker has resource type mokc (none joined within 400ms")),
        "{log:#?}"
    );
    // Nothing ran anywhere.
    assert!(h.fake.calls_of("resource_action").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_worker_with_the_type_that_joins_within_the_bound_takes_the_step() {
    let mut h = Harness::new_with(&["w1"], |c| {
        c.no_worker_timeout = Duration::from_secs(30);
    })
    .await;
    let id = h.submit(get_mokc()).await;
    logged(&h, id, "no worker has resource type mokc").await;
    join_with_mokc(&h, "w2").await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("resource_action"),
        [
            "resource_action w2 mokc check",
            "resource_action w2 mokc in"
        ]
    );
    h.stop().await;
}

#[tokio::test]
async fn a_worker_with_the_type_that_is_down_is_waited_for_past_the_bound() {
    let mut h = Harness::new_with(&["w1"], |c| {
        c.no_worker_timeout = Duration::from_millis(100);
    })
    .await;
    join_with_mokc(&h, "w2").await;
    h.stall("w2").await;
    let id = h.submit(get_mokc()).await;
    let log = logged(&h, id, "waiting for a worker: no worker is running").await;
    assert!(!log.iter().any(|l| l.contains("joins within")), "{log:#?}");
    // Well past the bound, it still waits; back, the worker takes it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let build = h.store.get_build(id).await.unwrap().unwrap();
    assert!(!build.status.is_final(), "{build:?}");
    join_with_mokc(&h, "w2").await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    h.stop().await;
}
