//! Steps that read a file of an artifact when they run: `load_var` (a
//! local var, redacted unless revealed), a task's `file:` and
//! `set_pipeline`, each with what fails them and what is retried.

use crate::support::Harness;
use hangar_core::build::BuildStatus;
use hangar_engine::fake::CallKind;
use hangar_engine::CallError;
use serde_json::{json, Value};

/// A task that makes the artifact `out` (the fake's volumes hold every
/// file put with `put_file`).
fn make_out() -> Value {
    json!({"task": "make", "config": {"platform": "linux", "run": {"path": "make"},
           "outputs": [{"name": "out"}]}})
}

fn task_with(path: &str, params: Value) -> Value {
    json!({"task": "use", "config": {"platform": "linux", "run": {"path": path},
           "params": params}})
}

async fn error_of(h: &Harness, id: i64) -> String {
    h.store
        .get_build(id)
        .await
        .unwrap()
        .unwrap()
        .error
        .unwrap_or_default()
}

fn env_of(h: &Harness, path: &str) -> std::collections::BTreeMap<String, String> {
    h.fake
        .container_specs()
        .into_iter()
        .find(|(_, s)| s.path == path)
        .map(|(_, s)| s.env)
        .expect("the task ran")
}

#[tokio::test]
async fn a_loaded_var_is_filled_into_later_steps_and_redacted_unless_revealed() {
    let h = Harness::new(&["w1"]).await;
    h.fake
        .put_file("version.json", br#"{"n": 7, "token": "s3cret-token"}"#);
    h.fake.put_file("plain.txt", b"  2.6.0\n");
    let plan = json!([
        make_out(),
        {"load_var": "v", "file": "out/version.json"},
        {"load_var": "plain", "file": "out/plain.txt", "reveal": true},
        task_with("use", json!({"N": "((.:v.n))", "T": "((.:v.token))", "P": "v((.:plain))"})),
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let env = env_of(&h, "use");
    assert_eq!(env["N"], "7");
    assert_eq!(env["T"], "s3cret-token");
    assert_eq!(env["P"], "v2.6.0");
    assert_eq!(h.fake.calls_of("read_file").len(), 2);
    let log = h.log(id, &["step"]).await;
    assert!(
        log.contains(&"step: load_var v: loaded as ((.:v))".to_string()),
        "{log:#?}"
    );

    // A step failing on the value: the build's error shows the unrevealed
    // value redacted, and the revealed one as it is.
    let plan = json!([
        make_out(),
        {"load_var": "v", "file": "out/version.json"},
        {"load_var": "plain", "file": "out/plain.txt", "reveal": true},
        {"task": "bad", "config": {"platform": "linux", "run": {"path": "x"},
         "container_limits": {"memory": "((.:v.token))-((.:plain))"}}},
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(!error.contains("s3cret-token"), "{error}");
    assert!(error.contains("((redacted))-2.6.0"), "{error}");
}

#[tokio::test]
async fn a_missing_file_fails_the_step_and_a_lost_worker_is_retried() {
    let h = Harness::new(&["w1"]).await;
    let plan = json!([make_out(), {"load_var": "v", "file": "out/nope.txt"}]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(error.contains("out/nope.txt"), "{error}");
    assert!(error.contains("not found"), "{error}");
    // The step's own failure: read once, not retried.
    assert_eq!(h.fake.calls_of("read_file").len(), 1);

    h.fake.put_file("v.txt", b"x");
    h.fake.fail_next(
        "w1",
        CallKind::ReadFile,
        CallError::unreachable("connection reset"),
    );
    let plan = json!([make_out(), {"load_var": "v", "file": "out/v.txt"},
                      task_with("after", json!({"V": "((.:v))"}))]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let log = h.log(id, &["infra"]).await;
    assert!(
        log.iter()
            .any(|l| l.contains("retrying load_var v (attempt 2 of 3)")),
        "{log:#?}"
    );
    assert_eq!(env_of(&h, "after")["V"], "x");

    // A format that does not parse is the step's own failure too.
    h.fake.put_file("bad.json", b"{");
    let plan = json!([make_out(), {"load_var": "v", "file": "out/bad.json"}]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    assert!(error_of(&h, id)
        .await
        .contains("failed to parse out/bad.json in format json"));
}

#[tokio::test]
async fn a_task_file_is_read_with_its_vars_and_the_step_overrides() {
    let h = Harness::new(&["w1"]).await;
    h.fake.put_file(
        "ci/task.yml",
        b"platform: linux\nrun: {path: ((cmd))}\nparams: {A: file, B: file, V: ((.:v))}\n",
    );
    h.fake.put_file("v.txt", b"loaded");
    let plan = json!([
        make_out(),
        {"load_var": "v", "file": "out/v.txt", "reveal": true},
        {"task": "from-file", "file": "out/ci/task.yml", "vars": {"cmd": "run-it"},
         "params": {"B": "step"}},
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let env = env_of(&h, "run-it");
    assert_eq!(
        (env["A"].as_str(), env["B"].as_str(), env["V"].as_str()),
        ("file", "step", "loaded")
    );

    // A file that is not a task config fails the step, naming the file.
    h.fake
        .put_file("ci/bad.yml", b"platform: linux\nrun: {path: x}\nbogus: 1\n");
    let plan = json!([make_out(), {"task": "t", "file": "out/ci/bad.yml"}]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(error.contains("out/ci/bad.yml: "), "{error}");
    assert!(error.contains("bogus"), "{error}");

    // A var of the file nobody defines is named, as Concourse does.
    h.fake
        .put_file("ci/vars.yml", b"platform: linux\nrun: {path: ((nobody))}\n");
    let plan = json!([make_out(), {"task": "t", "file": "out/ci/vars.yml"}]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(error.contains("undefined vars: nobody"), "{error}");
}

const PIPELINE: &[u8] = b"
resources:
- name: r
  type: mock
  source: {tag: ((tag))}
jobs:
- name: j
  plan:
  - get: r
";

#[tokio::test]
async fn set_pipeline_writes_a_new_unpaused_pipeline_once_and_refuses_what_it_cannot_set() {
    let h = Harness::new(&["w1"]).await;
    h.fake.put_file("p.yml", PIPELINE);
    h.fake.put_file("vars.yml", b"tag: from-file\nother: x\n");
    let plan = json!([make_out(), {"set_pipeline": "made", "file": "out/p.yml",
                                   "var_files": ["out/vars.yml"]}]);
    let id = h.submit(plan.clone()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let made = h.store.pipeline("main", "made").await.unwrap();
    assert!(
        !made.paused,
        "a set_pipeline step's pipeline starts unpaused"
    );
    assert_eq!(made.config_version, 1);
    let (_, config) = h.store.pipeline_config("main", "made", None).await.unwrap();
    assert_eq!(config["resources"][0]["source"]["tag"], json!("from-file"));
    let step = h
        .store
        .build_steps(id)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "made")
        .unwrap();
    assert_eq!(step.version.as_deref(), Some(r#"{"config_version":"1"}"#));

    // The same config again: nothing written.
    let again = h.submit(plan).await;
    assert_eq!(h.finished(again).await, BuildStatus::Succeeded);
    assert_eq!(
        h.store
            .pipeline("main", "made")
            .await
            .unwrap()
            .config_version,
        1
    );
    assert!(h
        .log(again, &["step"])
        .await
        .contains(&"step: set_pipeline main/made: no changes to apply".to_string()));

    // A step's vars come before its var files.
    let plan = json!([make_out(), {"set_pipeline": "made", "file": "out/p.yml",
                                   "vars": {"tag": "from-vars"}, "var_files": ["out/vars.yml"]}]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let (version, config) = h.store.pipeline_config("main", "made", None).await.unwrap();
    assert_eq!(version, 2);
    assert_eq!(config["resources"][0]["source"]["tag"], json!("from-vars"));

    // What it may not set, or a config that is not valid: the step's own
    // failure, nothing written.
    h.fake
        .put_file("bad.yml", b"jobs:\n- name: j\n  plan:\n  - get: nowhere\n");
    let cases = [
        (
            json!({"set_pipeline": "self", "file": "out/p.yml"}),
            "set_pipeline: self: this build is not a build of a pipeline's job",
        ),
        (
            json!({"set_pipeline": "made", "file": "out/p.yml", "team": "other"}),
            "team: a build sets pipelines of its own team (main) only",
        ),
        (
            json!({"set_pipeline": "made", "file": "out/bad.yml"}),
            "out/bad.yml: invalid pipeline config (1 errors)",
        ),
        (
            json!({"set_pipeline": "made", "file": "out/missing.yml"}),
            "out/missing.yml: path",
        ),
    ];
    for (step, expected) in cases {
        let id = h.submit(json!([make_out(), step])).await;
        assert_eq!(h.finished(id).await, BuildStatus::Failed, "{step}");
        let error = error_of(&h, id).await;
        assert!(error.contains(expected), "{step}: {error}");
    }
    assert_eq!(
        h.store
            .pipeline("main", "made")
            .await
            .unwrap()
            .config_version,
        2
    );
}

#[tokio::test]
async fn set_pipeline_self_sets_the_job_build_s_own_pipeline_in_its_team() {
    let h = Harness::new(&["w1"]).await;
    let first = hangar_core::pipeline::parse_pipeline(
        "resources: [{name: r, type: mock, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
    )
    .unwrap()
    .config;
    h.store
        .set_pipeline("main", "app", &first, Some(0), crate::support::now())
        .await
        .unwrap();
    h.fake.put_file(
        "self.yml",
        b"resources: [{name: r, type: mock, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n\
          - name: k\n  plan: [{get: r}]\n",
    );
    let job = h.store.job("main", "app", "j").await.unwrap();
    let plan = json!([make_out(), {"set_pipeline": "self", "file": "out/self.yml"},
                      {"set_pipeline": "sibling", "file": "out/self.yml", "team": "main"}]);
    let build = h
        .store
        .create_job_build(job.id, "app/j", &plan.to_string(), crate::support::now())
        .await
        .unwrap();
    h.engine.wake();
    assert_eq!(h.finished(build.build.id).await, BuildStatus::Succeeded);
    let app = h.store.pipeline("main", "app").await.unwrap();
    assert_eq!(app.config_version, 2);
    // An existing pipeline keeps its paused flag (set-pipeline made it
    // paused); only a pipeline the step creates starts unpaused.
    assert!(app.paused);
    let jobs: Vec<String> = h
        .store
        .jobs("main", "app", false)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.name)
        .collect();
    assert_eq!(jobs, ["j", "k"]);
    assert!(!h.store.pipeline("main", "sibling").await.unwrap().paused);
}

#[tokio::test]
async fn a_build_resumed_on_another_node_loads_its_vars_again() {
    let mut a = Harness::new(&["w1"]).await;
    a.fake.put_file("v.txt", b"value-1");
    a.fake.hold_program("held");
    let id = a
        .submit(json!([
            make_out(),
            {"load_var": "v", "file": "out/v.txt"},
            task_with("held", json!({"V": "((.:v))"})),
            task_with("after", json!({"W": "((.:v))"})),
        ]))
        .await;
    a.fake.called("create_container w1 held").await;
    a.stop().await;
    let b = Harness::start(a.store.clone(), a.fake.clone(), "node-b");
    // Another node resumes the build.
    b.logged(id, &["infra"], "re-attaching").await;
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    // The value is in no database: node b read the file again.
    assert_eq!(b.fake.calls_of("read_file").len(), 2);
    assert_eq!(env_of(&b, "after")["W"], "value-1");
}
