//! The build engine, in-process: a real store, the recording fake of the
//! workers, and the engine's own rules. No process, no HTTP, no container.

use crate::support::{task_plan, Harness};
use hangar_core::build::BuildStatus;
use hangar_engine::fake::{CallKind, Ending};
use hangar_engine::CallError;

#[tokio::test]
async fn a_task_runs_and_its_whole_run_is_as_expected() {
    let h = Harness::new(&["w1", "w2"]).await;
    let id = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    // The calls that happen in a fixed order (the log and the wait run
    // side by side).
    let calls: Vec<String> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| !c.starts_with("wait_container") && !c.starts_with("container_logs"))
        .collect();
    assert_eq!(
        calls,
        [
            "create_volume w1 empty",
            "create_container w1 sh",
            "destroy_container w1",
        ]
    );
    assert_eq!(
        h.log(id, &["status", "step", "infra"]).await,
        [
            "status: started",
            "step: starting task t",
            "step: running on worker w1 (process)",
            "step: task t succeeded",
            "status: succeeded",
        ]
    );
    // The output became an artifact of the build, on the worker that has it.
    let steps = h.store.build_steps(id).await.unwrap();
    let outputs: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&steps[0].outputs).unwrap();
    let out = h.store.get_volume(&outputs["out"]).await.unwrap().unwrap();
    assert_eq!(out.worker, "w1");
    assert!(h.fake.volumes_on("w1").contains(&out.handle));
}

/// How the first attempt on w1 is broken.
#[derive(Debug, Clone)]
enum Fault {
    Call(CallKind, CallError),
    Ends(Ending),
}

#[tokio::test]
async fn each_kind_of_infrastructure_failure_is_retried_on_another_worker() {
    let unreachable = || CallError::unreachable("connection refused");
    // (fault, what the retry line says)
    let cases = [
        (
            Fault::Call(CallKind::CreateContainer, unreachable()),
            "could not be reached",
        ),
        (
            Fault::Call(CallKind::CreateVolume, unreachable()),
            "could not be reached",
        ),
        (
            Fault::Call(
                CallKind::CreateVolume,
                CallError::refused(507, "insufficient_storage", "no space left"),
            ),
            "disk full on worker w1",
        ),
        (
            Fault::Call(
                CallKind::CreateContainer,
                CallError::refused(503, "unavailable", "too many stream-ins"),
            ),
            "could not be reached",
        ),
        (
            Fault::Call(
                CallKind::WaitContainer,
                CallError::refused(404, "not_found", "no container"),
            ),
            "lost",
        ),
        (Fault::Ends(Ending::Lost), "lost"),
        (Fault::Ends(Ending::DiskFull), "disk full on worker w1"),
    ];
    for (fault, says) in cases {
        eprintln!("case {fault:?}");
        let h = Harness::new(&["w1", "w2"]).await;
        match &fault {
            Fault::Call(kind, e) => h.fake.fail_next("w1", *kind, e.clone()),
            Fault::Ends(ending) => h.fake.end_next_on("w1", ending.clone()),
        }
        let id = h.submit(task_plan("sh")).await;
        let status = h.finished(id).await;
        let log = h.log(id, &["infra", "step", "status"]).await;
        assert_eq!(status, BuildStatus::Succeeded, "{fault:?}: {log:#?}");
        let retry = log
            .iter()
            .find(|l| l.contains("retrying task t (attempt 2 of 3)"))
            .unwrap_or_else(|| panic!("{fault:?}: no retry line in {log:#?}"));
        assert!(retry.contains(says), "{fault:?}: {retry}");
        assert!(retry.contains("w1"), "{fault:?}: {retry}");
        assert!(
            log.contains(&"step: running on worker w2 (process)".to_string()),
            "{fault:?}: {log:#?}"
        );
        assert_eq!(h.fake.calls_of("create_container w2").len(), 1, "{fault:?}");
    }
}

#[tokio::test]
async fn a_step_s_own_failure_is_not_retried() {
    // (fault, build status, what the log says)
    let cases = [
        (Fault::Ends(Ending::Exit(3)), BuildStatus::Failed, "exit"),
        (
            Fault::Ends(Ending::OutOfMemory),
            BuildStatus::Failed,
            "memory",
        ),
        (
            Fault::Call(
                CallKind::CreateContainer,
                CallError::refused(400, "bad_request", "mount path escapes the container"),
            ),
            BuildStatus::Failed,
            "mount path escapes the container",
        ),
        // A limit the worker cannot apply is refused as the memory limit
        // is: the task's own failure, neither retried for ever nor run
        // without the limit.
        (
            Fault::Call(
                CallKind::CreateContainer,
                CallError::refused(
                    400,
                    "bad_request",
                    "unsupported on this worker: container_limits.cpu (512 shares) cannot be applied on this worker: no memory cgroup at /sys/fs/cgroup",
                ),
            ),
            BuildStatus::Failed,
            "container_limits.cpu (512 shares) cannot be applied",
        ),
    ];
    for (fault, want, says) in cases {
        let h = Harness::new(&["w1", "w2"]).await;
        match &fault {
            Fault::Call(kind, e) => h.fake.fail_next("w1", *kind, e.clone()),
            Fault::Ends(ending) => h.fake.end_with("sh", ending.clone()),
        }
        let id = h.submit(task_plan("sh")).await;
        assert_eq!(h.finished(id).await, want, "{fault:?}");
        let log = h.log(id, &["infra", "step", "status"]).await;
        assert!(
            !log.iter().any(|l| l.contains("retrying")),
            "{fault:?}: {log:#?}"
        );
        let last = log.last().unwrap();
        assert!(last.contains(says), "{fault:?}: {last}");
        let created = h.fake.calls_of("create_container");
        assert_eq!(created, ["create_container w1 sh"], "{fault:?}");
    }
}

#[tokio::test]
async fn a_task_s_container_limits_reach_the_worker_s_container_spec() {
    let h = Harness::new(&["w1"]).await;
    let plan = serde_json::json!([{
        "task": "t",
        "config": {
            "platform": "linux",
            "run": {"path": "sh"},
            "container_limits": {"cpu": 512, "memory": 67108864}
        }
    }]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let specs = h.fake.container_specs();
    assert_eq!(specs.len(), 1, "{specs:?}");
    let (worker, spec) = &specs[0];
    assert_eq!(worker, "w1");
    assert_eq!(
        (spec.cpu_shares, spec.memory_limit_bytes),
        (Some(512), Some(64 << 20))
    );

    // No limit asked, none sent.
    let id = h.submit(task_plan("sh")).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let specs = h.fake.container_specs();
    assert_eq!(specs[1].1.cpu_shares, None);
}

#[tokio::test]
async fn a_worker_that_stalls_or_restarts_under_a_running_step_costs_no_build() {
    for restart in [false, true] {
        let h = Harness::new(&["w1", "w2"]).await;
        h.fake.hold_containers(true);
        let id = h.submit(task_plan("sh")).await;
        h.fake.called("create_container w1").await;
        if restart {
            h.restart_wiped("w1").await;
        } else {
            h.stall("w1").await;
        }
        h.fake.called("create_container w2").await;
        h.fake.end_containers();
        assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
        let log = h.log(id, &["infra"]).await;
        let says = if restart {
            "worker w1 restarted"
        } else {
            "worker w1 stalled"
        };
        assert!(
            log.iter()
                .any(|l| l.contains(says) && l.contains("attempt 2 of 3")),
            "restart={restart}: {log:#?}"
        );
    }
}

#[tokio::test]
async fn an_input_lost_with_its_worker_is_fetched_again_elsewhere() {
    let h = Harness::new(&["w1", "w2"]).await;
    // The task lands where its input is (w1) and hangs there while w1 dies.
    h.fake.hold("w1", CallKind::CreateContainer, true);
    let plan = serde_json::json!([
        {"get": "repo", "type": "mock", "source": {"uri": "x"}},
        {"task": "t", "config": {
            "platform": "linux",
            "run": {"path": "sh"},
            "inputs": [{"name": "repo"}]
        }}
    ]);
    let id = h.submit(plan).await;
    h.fake.called("create_container w1").await;
    h.stall("w1").await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let log = h.log(id, &["infra"]).await;
    assert!(
        log.iter().any(|l| l.contains(
            "input repo was on worker w1, which is gone or stalled; fetching repo again"
        )),
        "{log:#?}"
    );
    // Fetched twice (once per worker), run once on w2.
    assert_eq!(
        h.fake.calls_of("resource_action"),
        [
            "resource_action w1 mock check",
            "resource_action w1 mock in",
            "resource_action w2 mock check",
            "resource_action w2 mock in",
        ]
    );
    assert_eq!(
        h.fake.calls_of("create_container w2"),
        ["create_container w2 sh"]
    );
}

#[tokio::test]
async fn a_stopped_node_s_build_is_resumed_by_another_without_running_its_step_again() {
    let mut a = Harness::new(&["w1", "w2"]).await;
    a.fake.hold_containers(true);
    let id = a.submit(task_plan("sh")).await;
    a.fake.called("create_container w1").await;
    // SIGTERM: the node's engine returns at once; the container runs on.
    a.stop().await;
    assert_eq!(a.fake.running_containers().len(), 1);
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    // Node b claims the build once a's lease ran out, and re-attaches.
    b.logged(id, &["infra"], "re-attaching").await;
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        b.fake.calls_of("create_container"),
        ["create_container w1 sh"]
    );
    let log = b.log(id, &["infra", "status"]).await;
    assert!(
        log.contains(&"infra: resuming the build where it was left".to_string()),
        "{log:#?}"
    );
}

#[tokio::test]
async fn sigterm_ends_the_engine_whatever_call_its_builds_wait_on() {
    let get = serde_json::json!([{"get": "repo", "type": "mock", "source": {}}]);
    // (the call that hangs, the plan that makes it)
    let cases = [
        (CallKind::CreateVolume, task_plan("sh"), "create_volume w1"),
        (
            CallKind::CreateContainer,
            task_plan("sh"),
            "create_container w1",
        ),
        (CallKind::ResourceAction, get, "resource_action w1"),
    ];
    for (kind, plan, call) in cases {
        let mut h = Harness::new(&["w1"]).await;
        h.fake.hold("w1", kind, true);
        let id = h.submit(plan).await;
        h.fake.called(call).await;
        h.stop().await;
        // The build is left to be resumed, not ended by the stop.
        let build = h.store.get_build(id).await.unwrap().unwrap();
        assert_eq!(build.status, BuildStatus::Started, "{kind:?}");
    }
}

#[tokio::test]
async fn a_call_to_a_worker_that_stalls_meanwhile_is_abandoned() {
    // The worker's API hangs (paused process): the watch, not a timeout,
    // ends the wait, and the step goes elsewhere.
    let h = Harness::new(&["w1", "w2"]).await;
    h.fake.hold("w1", CallKind::CreateVolume, true);
    let id = h.submit(task_plan("sh")).await;
    h.fake.called("create_volume w1").await;
    h.stall("w1").await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("create_container"),
        ["create_container w2 sh"]
    );
}

#[tokio::test]
async fn a_build_whose_stored_artifacts_are_corrupt_errors_and_says_so() {
    let h = Harness::new(&["w1"]).await;
    let build = h
        .store
        .create_build(
            "job",
            None,
            &task_plan("sh").to_string(),
            "{not json",
            crate::support::now(),
        )
        .await
        .unwrap();
    h.engine.wake();
    assert_eq!(h.finished(build.id).await, BuildStatus::Errored);
    let log = h.log(build.id, &["status"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("stored artifacts are unreadable")),
        "{log:#?}"
    );
    assert!(h.fake.calls().is_empty());
}

#[tokio::test]
async fn a_get_with_other_params_fetches_again_and_the_same_params_reuse_the_cache() {
    let h = Harness::new(&["w1", "w2"]).await;
    let get = |params: serde_json::Value, version: Option<&str>| {
        let mut step = serde_json::json!({"get": "repo", "type": "mock", "source": {"uri": "x"}});
        if !params.is_null() {
            step["params"] = params;
        }
        if let Some(v) = version {
            step["version"] = serde_json::json!({"ref": v});
        }
        serde_json::json!([step])
    };
    // (plan, whether the cache of an earlier build serves it)
    let cases = [
        (
            get(serde_json::json!({"depth": 1, "submodules": "none"}), None),
            false,
        ),
        // Other params: another fetch, not the shallow clone of the first.
        (
            get(serde_json::json!({"depth": 2, "submodules": "none"}), None),
            false,
        ),
        (get(serde_json::Value::Null, None), false),
        // The first params in another key order: its cache.
        (
            get(serde_json::json!({"submodules": "none", "depth": 1}), None),
            true,
        ),
        // Empty params are no params.
        (get(serde_json::json!({}), None), true),
        // A pinned version places the step by the same key: found too.
        (
            get(
                serde_json::json!({"depth": 2, "submodules": "none"}),
                Some("v1"),
            ),
            true,
        ),
        (get(serde_json::json!({"depth": 3}), Some("v1")), false),
    ];
    let mut fetches = 0;
    for (i, (plan, reused)) in cases.into_iter().enumerate() {
        let id = h.submit(plan.clone()).await;
        assert_eq!(h.finished(id).await, BuildStatus::Succeeded, "case {i}");
        let log = h.log(id, &["step"]).await;
        let found = log.iter().any(|l| l.contains("found in the cache"));
        assert_eq!(found, reused, "case {i} {plan}: {log:#?}");
        if !reused {
            fetches += 1;
        }
        let ins = h
            .fake
            .calls_of("resource_action")
            .iter()
            .filter(|c| c.ends_with(" mock in"))
            .count();
        assert_eq!(ins, fetches, "case {i} {plan}");
    }
}

#[tokio::test]
async fn a_pinned_get_is_placed_on_the_worker_with_the_cache_of_its_params() {
    let h = Harness::new(&["w1", "w2"]).await;
    let get = |depth: u32| {
        serde_json::json!([{"get": "repo", "type": "mock", "source": {"uri": "x"},
            "version": {"ref": "v1"}, "params": {"depth": depth}}])
    };
    // The first fetch lands on w2: w1 is down, then back.
    h.fake.set_down("w1", true);
    let id = h.submit(get(1)).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    h.fake.set_down("w1", false);
    // (depth, the step's line about the cache)
    let cases = [
        (1, Some("found in the cache on worker w2")),
        // Other params: no cache anywhere; w1 failed the first fetch a
        // moment ago, so it is doubted and w2 takes this one too.
        (2, None),
        (1, Some("found in the cache on worker w2")),
        (2, Some("found in the cache on worker w2")),
    ];
    for (depth, want) in cases {
        let id = h.submit(get(depth)).await;
        assert_eq!(
            h.finished(id).await,
            BuildStatus::Succeeded,
            "depth {depth}"
        );
        let log = h.log(id, &["step"]).await;
        let found = log.iter().find(|l| l.contains("found in the cache"));
        assert_eq!(
            found.map(|l| &l[l.find("found").unwrap()..]),
            want,
            "depth {depth}: {log:#?}"
        );
    }
}
