//! Put steps in the engine: `out` with the put's inputs, the version it
//! answers recorded with the step, the implicit get of that version, and
//! `out` never run twice.

use crate::support::Harness;
use hangar_core::build::{BuildStatus, StepState};
use hangar_engine::CallError;
use serde_json::{json, Value};

fn get(name: &str) -> Value {
    json!({"get": name, "type": "mock", "source": {}})
}

fn put(name: &str) -> Value {
    json!({"put": name, "type": "mock", "source": {"uri": "u"}})
}

fn with(mut step: Value, key: &str, value: Value) -> Value {
    step[key] = value;
    step
}

/// `worker action` of each resource action, in order.
fn actions(h: &Harness) -> Vec<String> {
    h.fake
        .action_requests()
        .into_iter()
        .map(|(w, a)| format!("{w} {}", a.action))
        .collect()
}

#[tokio::test]
async fn a_put_runs_out_with_its_detected_inputs_then_gets_the_new_version() {
    let h = Harness::new(&["w1"]).await;
    let step = with(
        put("pushed"),
        "params",
        json!({"file": "repo/version", "n": 1}),
    );
    let step = with(step, "get_params", json!({"skip": true}));
    let id = h.submit(json!([get("repo"), get("other"), step])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        actions(&h),
        // `other` is the same resource at the same version: from the cache.
        ["w1 check", "w1 in", "w1 check", "w1 out", "w1 in"]
    );
    let requests = h.fake.action_requests();
    let (_, out) = &requests[3];
    // Only the artifact the params name, as a copy-on-write child of it.
    assert_eq!(out.inputs.keys().collect::<Vec<_>>(), ["repo"]);
    assert_eq!(
        out.request,
        json!({"source": {"uri": "u"}, "params": {"file": "repo/version", "n": 1}})
    );
    let (_, implicit) = &requests[4];
    assert_eq!(
        implicit.request,
        json!({"source": {"uri": "u"}, "version": {"ref": "out-1"}, "params": {"skip": true}})
    );
    let steps = h.store.build_steps(id).await.unwrap();
    let put = steps.iter().find(|s| s.step_id == "2").unwrap();
    assert_eq!(
        (put.state, put.version.as_deref()),
        (StepState::Succeeded, Some(r#"{"ref":"out-1"}"#))
    );
    let got = steps.iter().find(|s| s.step_id == "2.get").unwrap();
    assert_eq!(
        (got.state, got.name.as_str()),
        (StepState::Succeeded, "pushed")
    );
    assert!(got.outputs.contains("pushed"), "{}", got.outputs);
    // The copy-on-write input was released.
    assert!(h.fake.volumes_on("w1").len() <= 3);
}

#[tokio::test]
async fn inputs_all_and_a_list_and_no_get() {
    let cases = [
        (json!("all"), vec!["a", "b"]),
        (json!(["b"]), vec!["b"]),
        (json!("detect"), vec![]),
    ];
    for (inputs, expected) in cases {
        let h = Harness::new(&["w1"]).await;
        let step = with(
            with(put("p"), "inputs", inputs.clone()),
            "no_get",
            json!(true),
        );
        let id = h.submit(json!([get("a"), get("b"), step])).await;
        assert_eq!(h.finished(id).await, BuildStatus::Succeeded, "{inputs}");
        let requests = h.fake.action_requests();
        let (_, out) = requests.last().unwrap();
        assert_eq!(out.action, "out", "no_get: no in after out ({inputs})");
        assert_eq!(out.inputs.keys().collect::<Vec<_>>(), expected, "{inputs}");
        let ids: Vec<String> = h
            .store
            .build_steps(id)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.step_id)
            .collect();
        assert_eq!(ids, ["0", "1", "2"], "{inputs}");
    }
}

#[tokio::test]
async fn a_failing_out_fails_the_put_and_runs_its_on_failure_hook() {
    let h = Harness::new(&["w1"]).await;
    h.fake.exit_next_action("w1", "out", 1);
    let step = with(
        put("p"),
        "on_failure",
        json!({"task": "notify", "config": {"platform": "linux", "run": {"path": "notify"}}}),
    );
    let id = h.submit(json!([step])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert_eq!(actions(&h), ["w1 out"]);
    assert_eq!(
        h.fake.calls_of("create_container"),
        ["create_container w1 notify"]
    );
}

#[tokio::test]
async fn an_input_the_build_lacks_is_the_put_s_own_failure() {
    let h = Harness::new(&["w1"]).await;
    let id = h
        .submit(json!([with(put("p"), "inputs", json!(["nope"]))]))
        .await;
    // The plan's own mistake, as an invalid task config is: failed, not
    // retried (Concourse errors the step).
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let build = h.store.get_build(id).await.unwrap().unwrap();
    assert_eq!(
        build.error.as_deref(),
        Some("put p: inputs: no artifact \"nope\" in the build")
    );
    assert!(actions(&h).is_empty());
}

#[tokio::test]
async fn out_is_retried_elsewhere_after_an_infrastructure_failure() {
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake
        .fail_next_action("w1", "out", CallError::unreachable("connection refused"));
    h.fake
        .fail_next_action("w2", "out", CallError::unreachable("connection refused"));
    let id = h
        .submit(json!([with(put("p"), "no_get", json!(true))]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    // Two failed calls, then the third attempt's out.
    assert_eq!(actions(&h).len(), 1);
}

#[tokio::test]
async fn when_the_implicit_get_s_worker_fails_after_out_only_the_get_is_retried() {
    let h = Harness::new(&["w1", "w2"]).await;
    for w in ["w1", "w2"] {
        h.fake
            .fail_next_action(w, "in", CallError::unreachable("connection refused"));
    }
    let id = h.submit(json!([put("p")])).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let outs: Vec<String> = actions(&h)
        .into_iter()
        .filter(|a| a.ends_with(" out"))
        .collect();
    assert_eq!(outs.len(), 1, "out ran once: {:?}", actions(&h));
    let log = h.log(id, &["infra"]).await;
    assert!(log.iter().any(|l| l.contains("retrying get p")), "{log:#?}");
}

#[tokio::test]
async fn a_resumed_build_never_runs_out_again() {
    let mut a = Harness::new(&["w1"]).await;
    // The put is done; the node stops under the next step.
    a.fake.hold_program("after");
    let id = a
        .submit(json!([put("p"), {"task": "after", "config": {"platform": "linux", "run": {"path": "after"}}}]))
        .await;
    a.fake.called("create_container w1 after").await;
    a.stop().await;
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    let outs: Vec<String> = actions(&b)
        .into_iter()
        .filter(|a| a.ends_with(" out"))
        .collect();
    assert_eq!(outs, ["w1 out"]);
}

#[tokio::test]
async fn an_abort_during_the_implicit_get_keeps_the_put_s_version_and_ends_the_get() {
    let h = Harness::new(&["w1"]).await;
    h.fake.hold_action("in", true);
    let id = h.submit(json!([put("p")])).await;
    h.fake.called("resource_action w1 mock in").await;
    h.store
        .request_build_abort(id, crate::support::now())
        .await
        .unwrap();
    assert_eq!(h.finished(id).await, BuildStatus::Aborted);
    let steps: Vec<(String, StepState, Option<String>)> = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.step_id, s.state, s.version))
        .collect();
    assert_eq!(
        steps,
        [
            (
                "0".to_string(),
                StepState::Succeeded,
                Some(r#"{"ref":"out-1"}"#.to_string())
            ),
            ("0.get".to_string(), StepState::Aborted, None),
        ]
    );
}

#[tokio::test]
async fn a_put_retried_after_its_worker_died_fetches_its_lost_input_again() {
    let h = Harness::new(&["w1"]).await;
    h.fake.hold_action("out", true);
    let id = h
        .submit(json!([
            get("repo"),
            with(put("p"), "inputs", json!(["repo"]))
        ]))
        .await;
    h.fake.called("resource_action w1 mock out").await;
    h.store
        .register_worker(&crate::support::info("w2", "sid-w2"), crate::support::now())
        .await
        .unwrap();
    h.stall("w1").await;
    // Released once the out on w1 was given up, so only w2's runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !h
        .log(id, &["infra"])
        .await
        .iter()
        .any(|l| l.contains("retrying put p"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the put was never retried"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    h.fake.hold_action("out", false);
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let log = h.log(id, &["infra"]).await;
    assert!(
        log.iter().any(|l| l
            .contains("input repo was on worker w1, which is gone or stalled; fetching it again")),
        "{log:#?}"
    );
    let requests = h.fake.action_requests();
    let (worker, out) = requests
        .iter()
        .rev()
        .find(|(_, a)| a.action == "out")
        .unwrap();
    assert_eq!(worker, "w2");
    assert_eq!(out.inputs.keys().collect::<Vec<_>>(), ["repo"]);
}
