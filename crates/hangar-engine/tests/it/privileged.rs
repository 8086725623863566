//! Privileged steps, as Concourse has them: a task step's `privileged` and
//! a privileged custom resource type run only on workers that registered
//! with `--allow-privileged`; with none, the step waits saying which flag
//! is missing, as a step whose tags no worker has waits.

use crate::support::{info, now, Harness};
use hangar_core::build::BuildStatus;
use hangar_core::placement::NO_PRIVILEGED_WORKER;
use hangar_core::plan::stored_plan;
use serde_json::{json, Value};

/// Registers `name` again (its state kept) allowing privileged containers.
async fn allow_privileged(h: &Harness, name: &str) {
    let info = hangar_store::WorkerInfo {
        allow_privileged: true,
        ..info(name, &format!("sid-{name}"))
    };
    h.store.register_worker(&info, now()).await.unwrap();
}

fn task(name: &str, privileged: bool) -> Value {
    json!({"task": name, "privileged": privileged,
           "config": {"platform": "linux", "run": {"path": name}}})
}

/// The privilege of each container created, by worker, in order.
fn specs(h: &Harness) -> Vec<(String, String, bool)> {
    h.fake
        .container_specs()
        .into_iter()
        .map(|(w, s)| (w, s.path, s.privileged))
        .collect()
}

/// Waits until the build's log holds a line with `text`.
async fn logged(h: &Harness, id: i64, text: &str) -> Vec<String> {
    h.logged(id, &["infra", "step"], text).await
}

#[tokio::test]
async fn a_privileged_task_runs_only_on_the_worker_that_allows_it() {
    let h = Harness::new(&["a", "b", "c"]).await;
    allow_privileged(&h, "b").await;
    for w in ["a", "c"] {
        let row = h.store.get_worker(w).await.unwrap().unwrap();
        assert!(!row.info.allow_privileged);
    }
    let plan = json!([
        task("root-1", true),
        task("root-2", true),
        task("user", false)
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let got = specs(&h);
    let privileged: Vec<_> = got.iter().filter(|(_, _, p)| *p).collect();
    assert_eq!(
        privileged,
        [
            &("b".to_string(), "root-1".to_string(), true),
            &("b".to_string(), "root-2".to_string(), true),
        ],
        "{got:?}"
    );
    // The unprivileged task's spec says so (and it may go anywhere).
    assert!(
        got.iter().any(|(_, path, p)| path == "user" && !p),
        "{got:?}"
    );
}

#[tokio::test]
async fn with_no_worker_allowing_it_a_privileged_task_waits_naming_the_flag() {
    let h = Harness::new(&["a", "b"]).await;
    let id = h.submit(json!([task("root", true)])).await;
    let log = logged(&h, id, "--allow-privileged").await;
    assert!(
        log.iter()
            .any(|l| l.contains(&format!("waiting for a worker: {NO_PRIVILEGED_WORKER}"))),
        "{log:#?}"
    );
    assert!(
        specs(&h).is_empty(),
        "a container was made: {:?}",
        specs(&h)
    );
    // A worker that allows it comes: the step runs there.
    allow_privileged(&h, "a").await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(specs(&h), [("a".into(), "root".into(), true)]);
}

#[tokio::test]
async fn a_privileged_task_from_a_file_keeps_the_step_s_privilege() {
    let h = Harness::new(&["a", "b"]).await;
    allow_privileged(&h, "b").await;
    // `ci/task.yml` is `task.yml` of the artifact `ci`.
    h.fake
        .put_file("task.yml", b"platform: linux\nrun: {path: from-file}\n");
    let plan = json!([
        {"get": "ci", "type": "mock", "source": {}},
        {"task": "t", "file": "ci/task.yml", "privileged": true},
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(specs(&h), [("b".into(), "from-file".into(), true)]);
}

/// `dind`, a privileged type whose image the base type `mock` fetches.
fn dind(privileged: bool) -> Value {
    json!([{"name": "dind", "type": "mock", "source": {"repository": "dind"},
            "privileged": privileged}])
}

fn get_dind() -> Value {
    json!([{"get": "thing", "type": "dind", "source": {}}])
}

#[tokio::test]
async fn a_privileged_resource_type_runs_its_actions_privileged_where_allowed() {
    let h = Harness::new(&["a", "b"]).await;
    allow_privileged(&h, "b").await;
    let id = h.submit(stored_plan(&get_dind(), &dind(true))).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let step = h.store.build_steps(id).await.unwrap().remove(0);
    assert_eq!(step.worker.as_deref(), Some("b"));
    let actions: Vec<(String, String, String, bool)> = h
        .fake
        .action_requests()
        .into_iter()
        .map(|(w, r)| (w, r.resource_type, r.action, r.privileged))
        .collect();
    let row = |t: &str, a: &str, p: bool| ("b".to_string(), t.to_string(), a.to_string(), p);
    assert_eq!(
        actions,
        [
            // The image is fetched by the base type: not privileged.
            row("mock", "check", false),
            row("mock", "in", false),
            // The type's own actions, in its image: privileged.
            row("dind", "check", true),
            row("dind", "in", true),
        ]
    );
}

#[tokio::test]
async fn an_unprivileged_resource_type_asks_for_nothing_privileged() {
    let h = Harness::new(&["a"]).await;
    let id = h.submit(stored_plan(&get_dind(), &dind(false))).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert!(h.fake.action_requests().iter().all(|(_, r)| !r.privileged));
}

#[tokio::test]
async fn with_no_worker_allowing_it_a_privileged_type_s_get_waits_naming_the_flag() {
    let h = Harness::new(&["a"]).await;
    let id = h.submit(stored_plan(&get_dind(), &dind(true))).await;
    logged(&h, id, NO_PRIVILEGED_WORKER).await;
    assert!(h.fake.calls_of("resource_action").is_empty());
}
