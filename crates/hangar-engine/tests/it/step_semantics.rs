//! Concourse's step semantics in the engine: hooks, `try`, `attempts`
//! (and hangar's infrastructure retries below them), `timeout`, and
//! `in_parallel`'s `limit` and `fail_fast`. Each task's program names
//! what it is; the fake ends it as the test says.

use crate::support::Harness;
use hangar_core::build::{BuildStatus, StepState};
use hangar_engine::fake::Ending;
use serde_json::{json, Value};

fn task(path: &str) -> Value {
    json!({"task": path, "config": {"platform": "linux", "run": {"path": path}}})
}

/// A task that errors: its worker loses the container and it may not be
/// tried again on another worker.
fn erroring(path: &str) -> Value {
    let mut t = task(path);
    t["infrastructure_attempts"] = json!(1);
    t
}

/// A harness where `fail` exits 1 and `err` loses its container.
async fn harness(workers: &[&str]) -> Harness {
    let h = Harness::new(workers).await;
    h.fake.end_with("fail", Ending::Exit(1));
    h.fake.end_with("err", Ending::Lost);
    h
}

/// The programs started, in order.
fn started(h: &Harness) -> Vec<String> {
    h.fake
        .calls_of("create_container")
        .into_iter()
        .map(|c| c.rsplit(' ').next().unwrap_or_default().to_string())
        .collect()
}

fn with(mut step: Value, key: &str, value: Value) -> Value {
    step[key] = value;
    step
}

fn hooked(main: Value, on_success: &str, ensure: &str) -> Value {
    let step = with(main, "on_success", task(on_success));
    let step = with(step, "on_failure", task("on-failure"));
    let step = with(step, "on_error", task("on-error"));
    let step = with(step, "on_abort", task("on-abort"));
    with(step, "ensure", task(ensure))
}

#[tokio::test]
async fn hooks_run_as_concourse_runs_them_and_their_ends_count() {
    let cases = [
        (
            hooked(task("ok"), "on-success", "ensure"),
            BuildStatus::Succeeded,
            vec!["ok", "on-success", "ensure"],
        ),
        (
            hooked(task("fail"), "on-success", "ensure"),
            BuildStatus::Failed,
            vec!["fail", "on-failure", "ensure"],
        ),
        // An error is not a failure: on_error runs, on_failure does not.
        (
            hooked(erroring("err"), "on-success", "ensure"),
            BuildStatus::Errored,
            vec!["err", "on-error", "ensure"],
        ),
        // ensure's failure fails a success.
        (
            hooked(task("ok"), "on-success", "fail"),
            BuildStatus::Failed,
            vec!["ok", "on-success", "fail"],
        ),
        // on_success's failure fails the step, and on_failure sees it.
        (
            hooked(task("ok"), "fail", "ensure"),
            BuildStatus::Failed,
            vec!["ok", "fail", "on-failure", "ensure"],
        ),
    ];
    for (step, status, ran) in cases {
        let h = harness(&["w1"]).await;
        let id = h.submit(json!([step])).await;
        let got = h.finished(id).await;
        let log = h.log(id, &["status", "step", "infra"]).await;
        assert_eq!(
            (got, started(&h)),
            (status, ran.iter().map(|s| s.to_string()).collect()),
            "{step}: {log:#?}"
        );
    }
}

#[tokio::test]
async fn hooks_are_steps_of_their_own_in_the_build() {
    let h = harness(&["w1"]).await;
    let id = h
        .submit(json!([with(
            task("fail"),
            "on_failure",
            json!({"do": [task("notify")]})
        )]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let steps: Vec<(String, StepState)> = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.step_id, s.state))
        .collect();
    assert_eq!(
        steps,
        [
            ("0".to_string(), StepState::Failed),
            ("0.on_failure.0".to_string(), StepState::Succeeded)
        ]
    );
}

#[tokio::test]
async fn try_makes_failures_and_errors_successes_and_the_build_goes_on() {
    for inner in [task("fail"), erroring("err")] {
        let h = harness(&["w1"]).await;
        let id = h
            .submit(json!([{"try": inner.clone()}, task("after")]))
            .await;
        assert_eq!(h.finished(id).await, BuildStatus::Succeeded, "{inner}");
        assert_eq!(
            started(&h).last().map(String::as_str),
            Some("after"),
            "{inner}"
        );
    }
}

#[tokio::test]
async fn attempts_run_a_failing_step_again_and_stop_at_the_last() {
    let h = harness(&["w1"]).await;
    let id = h
        .submit(json!([with(
            with(task("fail"), "attempts", json!(3)),
            "on_failure",
            task("on-failure")
        )]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert_eq!(started(&h), ["fail", "fail", "fail", "on-failure"]);
    let ids: Vec<String> = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.step_id)
        .collect();
    assert_eq!(ids, ["0", "0#2", "0#3", "0.on_failure"]);
    let log = h.log(id, &["step"]).await;
    assert!(log.iter().any(|l| l.contains("attempt 2 of 3")), "{log:#?}");
    assert!(log.iter().any(|l| l.contains("attempt 3 of 3")), "{log:#?}");
}

#[tokio::test]
async fn attempts_run_an_erroring_step_again_until_it_succeeds() {
    let h = harness(&["w1"]).await;
    // The first run on w1 loses its container (an error once its one
    // infrastructure attempt is spent); the second succeeds.
    h.fake.end_next_on("w1", Ending::Lost);
    let id = h
        .submit(json!([with(
            with(erroring("sh"), "attempts", json!(2)),
            "on_error",
            task("on-error")
        )]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(started(&h), ["sh", "sh"]);
}

#[tokio::test]
async fn infrastructure_retries_are_not_attempts_nor_errors() {
    let h = harness(&["w1", "w2"]).await;
    h.fake.end_next_on("w1", Ending::Lost);
    let step = with(
        with(task("sh"), "attempts", json!(2)),
        "on_error",
        task("on-error"),
    );
    let id = h.submit(json!([step])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    // Retried below the step on the other worker: one user attempt, no
    // on_error.
    assert_eq!(started(&h), ["sh", "sh"]);
    let log = h.log(id, &["step", "infra"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("retrying task sh (attempt 2 of 3)")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("attempt 2 of 2")),
        "{log:#?}"
    );
    let ids: Vec<String> = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.step_id)
        .collect();
    assert_eq!(ids, ["0"]);
}

#[tokio::test]
async fn a_timeout_kills_the_step_and_fails_it_without_on_abort() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow");
    let step = with(task("slow"), "timeout", json!("300ms"));
    let step = with(step, "on_failure", task("on-failure"));
    let step = with(step, "on_abort", task("on-abort"));
    let id = h.submit(json!([step])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert_eq!(started(&h), ["slow", "on-failure"]);
    assert!(
        h.fake.running_containers().is_empty(),
        "the slow container was destroyed"
    );
    let slow = &h.store.build_steps(id).await.unwrap()[0];
    assert_eq!(
        (slow.state, slow.error.as_deref()),
        (StepState::Failed, Some("timed out"))
    );
    let build = h.store.get_build(id).await.unwrap().unwrap();
    assert_eq!(build.error.as_deref(), Some("timed out after 300ms"));
}

#[tokio::test]
async fn a_timeout_bounds_each_attempt() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow");
    let step = with(
        with(task("slow"), "timeout", json!("200ms")),
        "attempts",
        json!(2),
    );
    let id = h.submit(json!([{"try": step}, task("after")])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(started(&h), ["slow", "slow", "after"]);
}

#[tokio::test]
async fn in_parallel_limit_runs_that_many_at_once() {
    let h = harness(&["w1"]).await;
    let id = h
        .submit(json!([{"in_parallel": {"steps": [task("a"), task("b"), task("c")], "limit": 1}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let order: Vec<String> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("create_container") || c.starts_with("destroy_container"))
        .collect();
    assert_eq!(
        order,
        [
            "create_container w1 a",
            "destroy_container w1",
            "create_container w1 b",
            "destroy_container w1",
            "create_container w1 c",
            "destroy_container w1",
        ]
    );
}

#[tokio::test]
async fn in_parallel_fail_fast_aborts_the_siblings_which_run_on_abort() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow");
    let slow = with(task("slow"), "on_abort", task("on-abort"));
    let id = h
        .submit(json!([{"in_parallel": {"steps": [slow, task("fail")], "fail_fast": true}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let ran = started(&h);
    assert!(ran.contains(&"on-abort".to_string()), "{ran:?}");
    assert!(
        h.fake.running_containers().is_empty(),
        "the slow container was destroyed"
    );
    let states: Vec<(String, StepState)> = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.step_id, s.state))
        .collect();
    assert!(
        states.contains(&("0.0".to_string(), StepState::Aborted)),
        "{states:?}"
    );
    assert!(
        states.contains(&("0.1".to_string(), StepState::Failed)),
        "{states:?}"
    );
}

#[tokio::test]
async fn without_fail_fast_the_siblings_run_to_their_end() {
    let h = harness(&["w1"]).await;
    let id = h
        .submit(json!([{"in_parallel": {"steps": [task("fail"), task("ok")], "fail_fast": false}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let mut ran = started(&h);
    ran.sort();
    assert_eq!(ran, ["fail", "ok"]);
}

#[tokio::test]
async fn fail_fast_with_a_limit_never_starts_the_rest() {
    let h = harness(&["w1"]).await;
    let id = h
        .submit(json!([{"in_parallel": {"steps": [task("fail"), task("b"), task("c")], "limit": 1, "fail_fast": true}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert_eq!(started(&h), ["fail"]);
}

async fn wait_running(h: &Harness, program: &str) {
    let deadline = std::time::Instant::now() + crate::support::HANG;
    while !started(h).contains(&program.to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{program} never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_aborted_build_runs_on_abort_and_ensure_only_and_stops() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow");
    let step = hooked(task("slow"), "on-success", "ensure");
    let id = h.submit(json!([step, task("after")])).await;
    wait_running(&h, "slow").await;
    assert_eq!(
        h.store
            .request_build_abort(id, crate::support::now())
            .await
            .unwrap(),
        hangar_store::AbortRequest::Requested
    );
    assert_eq!(h.finished(id).await, BuildStatus::Aborted);
    assert_eq!(started(&h), ["slow", "on-abort", "ensure"]);
    assert!(
        h.fake.running_containers().is_empty(),
        "the slow container was destroyed"
    );
    let slow = &h.store.build_steps(id).await.unwrap()[0];
    assert_eq!(slow.state, StepState::Aborted);
}

#[tokio::test]
async fn a_build_waiting_for_a_worker_is_aborted() {
    // No worker: the step waits for one to be placed on.
    let h = harness(&[]).await;
    let id = h.submit(json!([task("ok")])).await;
    let deadline = std::time::Instant::now() + crate::support::HANG;
    while h.store.get_build(id).await.unwrap().unwrap().status != BuildStatus::Started {
        assert!(std::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    h.store
        .request_build_abort(id, crate::support::now())
        .await
        .unwrap();
    assert_eq!(h.finished(id).await, BuildStatus::Aborted);
    assert!(started(&h).is_empty());
}

#[tokio::test]
async fn an_abort_during_a_hook_lets_the_hook_finish() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow-ensure");
    let step = with(task("ok"), "ensure", task("slow-ensure"));
    let id = h.submit(json!([step, task("after")])).await;
    wait_running(&h, "slow-ensure").await;
    h.store
        .request_build_abort(id, crate::support::now())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The hook runs on (Concourse runs hooks on a context of their own).
    assert_eq!(h.fake.running_containers().len(), 1);
    h.fake.end_containers();
    assert_eq!(h.finished(id).await, BuildStatus::Aborted);
    assert_eq!(started(&h), ["ok", "slow-ensure"]);
}

#[tokio::test]
async fn an_aborted_build_says_so_once_at_its_end() {
    let h = harness(&["w1"]).await;
    h.fake.hold_program("slow");
    let id = h.submit(json!([task("slow")])).await;
    wait_running(&h, "slow").await;
    h.store
        .request_build_abort(id, crate::support::now())
        .await
        .unwrap();
    assert_eq!(h.finished(id).await, BuildStatus::Aborted);
    let log = h.log(id, &["status"]).await;
    assert_eq!(
        log,
        ["status: started", "status: aborted: the build was aborted"]
    );
}

#[tokio::test]
async fn a_timeout_also_bounds_the_wait_for_a_worker() {
    let h = harness(&[]).await;
    let step = with(
        with(task("ok"), "timeout", json!("200ms")),
        "on_failure",
        json!({"try": task("x")}),
    );
    let id = h.submit(json!([step])).await;
    // on_failure runs (and waits for a worker in its turn, inside a try
    // that cannot end): abort to end the build.
    let deadline = std::time::Instant::now() + crate::support::HANG;
    loop {
        let steps = h.store.build_steps(id).await.unwrap();
        if steps
            .iter()
            .any(|s| s.step_id == "0" && s.state == StepState::Failed)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never timed out: {steps:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    h.store
        .request_build_abort(id, crate::support::now())
        .await
        .unwrap();
    assert!(started(&h).is_empty());
}

#[tokio::test]
async fn a_get_s_hooks_run_as_a_task_s() {
    let get = json!({"get": "repo", "type": "mock", "source": {}});
    for (fails, status, ran) in [
        (false, BuildStatus::Succeeded, vec!["on-success", "ensure"]),
        (true, BuildStatus::Failed, vec!["on-failure", "ensure"]),
    ] {
        let h = harness(&["w1"]).await;
        if fails {
            h.fake.exit_next_action("w1", "check", 1);
        }
        let id = h
            .submit(json!([hooked(get.clone(), "on-success", "ensure")]))
            .await;
        assert_eq!(
            h.finished(id).await,
            status,
            "{:#?}",
            h.log(id, &["step", "infra"]).await
        );
        assert_eq!(started(&h), ran);
    }
}

#[tokio::test]
async fn a_resumed_build_runs_no_attempt_nor_hook_again() {
    let mut a = harness(&["w1"]).await;
    a.fake.hold_program("slow");
    let step = with(
        with(task("fail"), "attempts", json!(2)),
        "ensure",
        task("slow"),
    );
    let id = a.submit(json!([step])).await;
    wait_running(&a, "slow").await;
    // SIGTERM: the node stops; the ensure hook's container runs on.
    a.stop().await;
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    b.logged(id, &["infra"], "resuming the build").await;
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Failed);
    assert_eq!(started(&b), ["fail", "fail", "slow"]);
}
