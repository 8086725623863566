//! Placement by the operator's chain over what the database knows at
//! once: a step placed a moment ago counts on its worker before any
//! heartbeat reports it, and a limit that every worker has reached makes
//! a step wait, saying why, until one has room.

use hangar_core::build::BuildStatus;
use hangar_core::placement::Placement;

use crate::support::{task_plan, Harness};

#[tokio::test]
async fn running_tasks_spread_over_idle_workers_by_what_was_placed() {
    // The fake workers report no containers at all: only the database's
    // count of placed steps can spread the work.
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake.hold_program("sleep");
    let mut ids = Vec::new();
    for n in 1..=6 {
        ids.push(h.submit(task_plan("sleep")).await);
        // Each placed and running before the next is submitted.
        while h.fake.calls_of("create_container").len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let on = |w: &str| h.fake.calls_of(&format!("create_container {w} ")).len();
    assert_eq!((on("w1"), on("w2")), (3, 3), "{:#?}", h.fake.calls());
    h.fake.end_containers();
    for id in ids {
        assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    }
}

#[tokio::test]
async fn a_task_waits_while_every_worker_is_at_the_task_limit() {
    let chain = vec!["volume-locality".into(), "limit-active-tasks".into()];
    let mut h = Harness::new_with(&["w1"], |c| {
        c.placement = Placement::from_names(&chain, 1, 0, 0).unwrap();
    })
    .await;
    h.fake.hold_program("sleep");
    let first = h.submit(task_plan("sleep")).await;
    h.fake.called("create_container w1 sleep").await;
    let second = h.submit(task_plan("sh")).await;
    h.logged(
        second,
        &["infra"],
        "waiting for a worker: every worker that fits is at its limit \
         (--max-active-tasks-per-worker 1)",
    )
    .await;
    // A get is no task: the limit lets it through.
    let get = h
        .submit(serde_json::json!([{"get": "repo", "type": "mock", "source": {}}]))
        .await;
    assert_eq!(h.finished(get).await, BuildStatus::Succeeded);
    // The waiting task has not failed, nor started.
    let status = h.store.get_build(second).await.unwrap().unwrap().status;
    assert!(!status.is_final(), "{status:?}");
    assert_eq!(h.fake.calls_of("create_container").len(), 1);
    // The first task ends: the second takes its place.
    h.fake.end_containers();
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("create_container"),
        ["create_container w1 sleep", "create_container w1 sh"]
    );
    h.stop().await;
}

#[tokio::test]
async fn a_worker_a_step_failed_on_draws_no_new_work_while_another_fits() {
    use hangar_engine::fake::CallKind;
    use hangar_engine::CallError;
    let h = Harness::new(&["w1", "w2"]).await;
    // w1 wins ties by name; its first container fails for the worker's
    // own fault (a full disk), and the step is retried on w2.
    h.fake.fail_next(
        "w1",
        CallKind::CreateContainer,
        CallError::refused(507, "insufficient_storage", "no space left"),
    );
    let first = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    assert_eq!(h.fake.calls_of("create_container w2 ").len(), 1);
    // The next build's step, with both workers idle, goes to w2: what w1
    // claims is doubted for a while after it failed a step.
    let second = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("create_container w2 ").len(),
        2,
        "{:#?}",
        h.fake.calls()
    );
}

#[tokio::test]
async fn a_worker_that_heartbeats_but_leaves_its_step_unanswered_loses_it() {
    use hangar_engine::fake::CallKind;
    let h = Harness::new_with(&["w1", "w2"], |c| {
        c.unanswered_for = std::time::Duration::from_secs(2)
    })
    .await;
    // w1 wins ties by name, takes the step, and then answers nothing
    // about its container (a hung or rogue worker) while it stays
    // registered: the step goes to w2 and the build does not hang.
    h.fake.hold("w1", CallKind::WaitContainer, true);
    let first = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    assert_eq!(h.fake.calls_of("create_container w1 ").len(), 1);
    assert_eq!(h.fake.calls_of("create_container w2 ").len(), 1);
    let log = h.log(first, &["infra"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("w1") && l.contains("answered nothing about the step's container")),
        "{log:#?}"
    );
    // And w1 is doubted: the next step goes to w2 although both are idle.
    let second = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("create_container w2 ").len(),
        2,
        "{:#?}",
        h.fake.calls()
    );
    assert_eq!(h.fake.calls_of("create_container w1 ").len(), 1);
}
