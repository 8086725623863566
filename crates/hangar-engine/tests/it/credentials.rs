//! Vars resolved when a build runs: the stored plan keeps its `((var))`
//! references, the node running the build reads them from its credential
//! manager (a directory here), the worker gets the values, and a node
//! without a manager refuses to run such a plan rather than hand a task the
//! literal text.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use crate::support::Harness;
use hangar_core::build::BuildStatus;
use hangar_creds::cache::Cache;
use hangar_creds::dir::DirSecrets;
use hangar_creds::{Credentials, Manager};

const SECRET_PATH: &str = "/opt/s3cret-tool-4471";

fn plan() -> serde_json::Value {
    serde_json::json!([{
        "task": "t",
        "config": {"platform": "linux", "run": {"path": "((tool))"}}
    }])
}

fn creds_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, Arc<Credentials>) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let manager = Manager::Dir(DirSecrets::new(dir.path()).unwrap());
    (dir, Arc::new(Credentials::new(manager, Cache::off())))
}

#[tokio::test]
async fn the_running_node_reads_the_vars_and_the_stored_plan_keeps_references() {
    let h = Harness::new(&["w1"]).await;
    let (_dir, creds) = creds_dir(&[("main/tool", &format!("{SECRET_PATH}\n"))]);
    h.engine.set_credentials(creds.clone()).unwrap();
    assert!(h.engine.set_credentials(creds).is_err());
    let id = h.submit(plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake.calls_of("create_container"),
        [format!("create_container w1 {SECRET_PATH}")]
    );
    let stored = h.store.get_build(id).await.unwrap().unwrap();
    assert!(stored.plan.contains("((tool))"), "{}", stored.plan);
    assert!(!stored.plan.contains(SECRET_PATH));
    let log = h.log(id, &["status", "step", "infra", "log"]).await;
    assert!(!log.iter().any(|l| l.contains(SECRET_PATH)), "{log:#?}");
}

#[tokio::test]
async fn a_var_the_manager_lacks_errors_the_build_before_any_call() {
    let h = Harness::new(&["w1"]).await;
    let (_dir, creds) = creds_dir(&[("main/other", "x1")]);
    h.engine.set_credentials(creds).unwrap();
    let id = h.submit(plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Errored);
    let log = h.log(id, &["status"]).await;
    assert_eq!(
        log.last().unwrap(),
        "status: errored: cannot resolve the plan's vars: undefined vars: tool"
    );
    assert!(h.fake.calls().is_empty());
}

#[tokio::test]
async fn a_node_without_a_manager_never_runs_a_plan_holding_vars() {
    let h = Harness::new(&["w1"]).await;
    let id = h.submit(plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Errored);
    let log = h.log(id, &["status"]).await;
    assert_eq!(
        log.last().unwrap(),
        "status: errored: the plan holds vars (tool) and this web node has no credential \
         manager: every web node needs the same --credentials-* flags"
    );
    assert!(h.fake.calls().is_empty());
}

#[tokio::test]
async fn local_vars_are_left_for_the_run_by_the_credential_manager() {
    let h = Harness::new(&["w1"]).await;
    let (_dir, creds) = creds_dir(&[("main/tool", SECRET_PATH)]);
    h.engine.set_credentials(creds).unwrap();
    h.fake.put_file("v.txt", b"from-a-file");
    let id = h
        .submit(serde_json::json!([
            {"task": "make", "config": {"platform": "linux", "run": {"path": "make"},
             "outputs": [{"name": "out"}]}},
            {"load_var": "v", "file": "out/v.txt"},
            {"task": "t", "config": {"platform": "linux", "run": {"path": "((tool))"},
             "params": {"V": "((.:v))"}}}
        ]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let (_, spec) = h.fake.container_specs().pop().unwrap();
    assert_eq!(
        (spec.path.as_str(), spec.env["V"].as_str()),
        (SECRET_PATH, "from-a-file")
    );
}

/// A job build of pipeline `p`'s job `j` whose task runs `((tool))`.
async fn job_build(store: &hangar_store::Store) -> i64 {
    let config = hangar_core::pipeline::parse_pipeline(
        "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: ((tool))}}\n",
    )
    .unwrap()
    .config;
    store
        .set_pipeline("main", "p", &config, None, crate::support::now())
        .await
        .unwrap();
    let job = store.job("main", "p", "j").await.unwrap();
    let plan = hangar_core::plan::planner::plan_job(&config, config.job("j").unwrap()).unwrap();
    store
        .create_job_build(
            job.id,
            "p/j",
            &plan.stored.to_string(),
            crate::support::now(),
        )
        .await
        .unwrap()
        .build
        .id
}

#[tokio::test]
async fn a_job_build_reads_its_pipeline_s_var_first_then_the_team_s() {
    // (files, what the task runs): the pipeline's wins over the team's;
    // without it the team's; another pipeline's is never read.
    type Files<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Files, Option<&str>); 3] = [
        (
            &[("main/p/tool", "/pipeline"), ("main/tool", "/team")],
            Some("/pipeline"),
        ),
        (&[("main/tool", "/team")], Some("/team")),
        (&[("main/other/tool", "/other")], None),
    ];
    for (files, runs) in cases {
        let h = Harness::new(&["w1"]).await;
        let (_dir, creds) = creds_dir(files);
        h.engine.set_credentials(creds).unwrap();
        let id = job_build(&h.store).await;
        h.engine.wake();
        let status = h.finished(id).await;
        match runs {
            Some(path) => {
                assert_eq!(status, BuildStatus::Succeeded, "{files:?}");
                assert_eq!(
                    h.fake.calls_of("create_container"),
                    [format!("create_container w1 {path}")]
                );
            }
            None => {
                assert_eq!(status, BuildStatus::Errored, "{files:?}");
                assert!(h.fake.calls().is_empty());
            }
        }
    }
}

#[tokio::test]
async fn a_build_of_the_plan_api_never_reads_a_pipeline_s_var() {
    let h = Harness::new(&["w1"]).await;
    let (_dir, creds) = creds_dir(&[("main/p/tool", "/pipeline")]);
    h.engine.set_credentials(creds).unwrap();
    let id = h.submit(plan()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Errored);
    assert!(h.fake.calls().is_empty());
}
