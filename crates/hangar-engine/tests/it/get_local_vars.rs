//! A get step sets the local var `((.:NAME))` to the metadata of the
//! version it fetched, as Concourse's does: from `in`'s answer, from the
//! metadata kept with a resource cache it reuses, and for a put's
//! implicit get under the put's name.

use crate::support::Harness;
use hangar_core::build::BuildStatus;
use serde_json::{json, Value};

fn get(name: &str) -> Value {
    json!({"get": name, "type": "mock", "source": {}})
}

fn task_with(path: &str, params: Value) -> Value {
    json!({"task": "use", "config": {"platform": "linux", "run": {"path": path},
           "params": params}})
}

fn env_of(h: &Harness, path: &str) -> std::collections::BTreeMap<String, String> {
    h.fake
        .container_specs()
        .into_iter()
        .filter(|(_, s)| s.path == path)
        .map(|(_, s)| s.env)
        .next_back()
        .expect("the task ran")
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

fn ins(h: &Harness) -> usize {
    h.fake
        .action_requests()
        .iter()
        .filter(|(_, a)| a.action == "in")
        .count()
}

#[tokio::test]
async fn a_get_sets_its_metadata_as_a_local_var_and_a_cached_get_the_same() {
    let h = Harness::new(&["w1"]).await;
    h.fake.set_version(json!({"ref": "abc"}));
    h.fake.answer_in_metadata(json!([
        {"name": "commit", "value": "abc123"},
        {"name": "branch", "value": "old"},
        // A later field of the same name wins, as Concourse's AsMap.
        {"name": "branch", "value": "main"},
        // A value that is not text is kept as its JSON text.
        {"name": "count", "value": 3}
    ]));
    let plan = json!([
        get("repo"),
        task_with(
            "use",
            json!({"C": "((.:repo.commit))", "B": "on-((.:repo.branch))",
                                "N": "((.:repo.count))"})
        ),
    ]);
    let id = h.submit(plan.clone()).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let env = env_of(&h, "use");
    assert_eq!(env["C"], "abc123");
    assert_eq!(env["B"], "on-main");
    assert_eq!(env["N"], "3");
    assert_eq!(ins(&h), 1);

    // The same version again: the worker's cache is reused (no `in`), and
    // the var is the metadata the cache's `in` answered, not what `in`
    // would answer now.
    h.fake
        .answer_in_metadata(json!([{"name": "commit", "value": "changed"}]));
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(ins(&h), 1, "the cache is reused");
    let log = h.log(id, &["step"]).await;
    assert!(
        log.iter().any(|l| l.contains("found in the cache")),
        "{log:#?}"
    );
    let env = env_of(&h, "use");
    assert_eq!(env["C"], "abc123");
    assert_eq!(env["B"], "on-main");
}

#[tokio::test]
async fn a_field_the_metadata_lacks_fails_the_step_naming_it() {
    let h = Harness::new(&["w1"]).await;
    h.fake
        .answer_in_metadata(json!([{"name": "commit", "value": "abc123"}]));
    let plan = json!([
        get("repo"),
        task_with("use", json!({"X": "((.:repo.nope))"}))
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(error.contains("missing field 'nope'"), "{error}");
    assert!(error.contains("repo.nope"), "{error}");
    assert!(
        h.fake.container_specs().is_empty(),
        "the task never started"
    );

    // A type whose `in` answers no metadata sets an empty mapping: any
    // field of it is missing.
    let h = Harness::new(&["w1"]).await;
    let plan = json!([
        get("bare"),
        task_with("use", json!({"X": "((.:bare.commit))"}))
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let error = error_of(&h, id).await;
    assert!(error.contains("missing field 'commit'"), "{error}");
}

#[tokio::test]
async fn a_put_s_implicit_get_sets_the_var_of_the_put_s_name() {
    let h = Harness::new(&["w1"]).await;
    h.fake
        .answer_in_metadata(json!([{"name": "url", "value": "https://example.com/out"}]));
    let plan = json!([
        {"put": "release", "type": "mock", "source": {"uri": "u"}},
        task_with("use", json!({"U": "((.:release.url))"})),
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(env_of(&h, "use")["U"], "https://example.com/out");
}

#[tokio::test]
async fn a_plan_using_a_get_s_var_before_the_get_is_refused() {
    let h = Harness::new(&["w1"]).await;
    let plan = json!([
        task_with("use", json!({"X": "((.:repo.commit))"})),
        get("repo")
    ]);
    let created = h
        .store
        .create_build("job", None, &plan.to_string(), "{}", crate::support::now())
        .await;
    let error = match created {
        // The engine refuses the plan when it reads it.
        Ok(build) => {
            h.engine.wake();
            assert_eq!(h.finished(build.id).await, BuildStatus::Errored);
            error_of(&h, build.id).await
        }
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("local var ((.:repo.commit)) is not defined before it"),
        "{error}"
    );
}

#[tokio::test]
async fn a_build_resumed_past_a_get_sets_its_var_again_without_fetching_again() {
    let mut a = Harness::new(&["w1"]).await;
    a.fake
        .answer_in_metadata(json!([{"name": "commit", "value": "abc123"}]));
    a.fake.hold_program("hold");
    let plan = json!([
        get("repo"),
        {"task": "hold", "config": {"platform": "linux", "run": {"path": "hold"}}},
        task_with("after", json!({"C": "((.:repo.commit))"})),
    ]);
    let id = a.submit(plan).await;
    a.fake.called("create_container w1 hold").await;
    // What `in` would answer now is not what the build fetched.
    a.fake
        .answer_in_metadata(json!([{"name": "commit", "value": "changed"}]));
    a.stop().await;
    let b = Harness::start_with(
        a.store.clone(),
        a.fake.clone(),
        crate::support::config("node-b"),
    );
    // Node b resumes the build.
    b.logged(id, &["infra"], "resuming the build where it was left")
        .await;
    b.fake.end_containers();
    assert_eq!(b.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(env_of(&b, "after")["C"], "abc123");
    assert_eq!(ins(&b), 1, "the get was not run again");
}

/// A job build's get of a pipeline resource saves the metadata `in`
/// answered on the resource's version, as Concourse's get step updates
/// it; a check (which knows no metadata) never erases it.
#[tokio::test]
async fn a_job_s_get_saves_its_metadata_on_the_resource_version() {
    use hangar_core::pipeline::parse_pipeline;
    use hangar_core::plan::planner::plan_job;
    let h = Harness::new(&["w1"]).await;
    h.fake.set_version(json!({"ref": "v7"}));
    h.fake
        .answer_in_metadata(json!([{"name": "commit", "value": "abc123"}]));
    let config = parse_pipeline(
        "resources:\n- {name: repo, type: mock, source: {}}\njobs:\n- name: ship\n  plan:\n  - get: code\n    resource: repo\n  - task: after\n    config: {platform: linux, run: {path: after}, params: {C: ((.:code.commit))}}\n",
    )
    .expect("a valid pipeline")
    .config;
    h.store
        .set_pipeline("main", "p", &config, None, crate::support::now())
        .await
        .unwrap();
    let job = h.store.job("main", "p", "ship").await.unwrap();
    let plan = plan_job(&config, config.job("ship").unwrap()).unwrap();
    let build = h
        .store
        .create_job_build(
            job.id,
            "p/ship",
            &plan.stored.to_string(),
            crate::support::now(),
        )
        .await
        .unwrap();
    h.engine.wake();
    assert_eq!(h.finished(build.build.id).await, BuildStatus::Succeeded);
    assert_eq!(env_of(&h, "after")["C"], "abc123");
    let page = hangar_store::VersionPage {
        limit: 10,
        before: None,
        after: None,
    };
    let versions = h
        .store
        .resource_versions("main", "p", "repo", page)
        .await
        .unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0].version, r#"{"ref":"v7"}"#);
    let metadata: Value = serde_json::from_str(&versions[0].metadata).unwrap();
    assert_eq!(metadata, json!([{"name": "commit", "value": "abc123"}]));

    // The same version seen again without metadata keeps it.
    let repo = h.store.resource("main", "p", "repo").await.unwrap();
    h.store
        .save_resource_version(
            repo.id,
            &json!({"ref": "v7"}),
            &json!([]),
            crate::support::now(),
        )
        .await
        .unwrap();
    let versions = h
        .store
        .resource_versions("main", "p", "repo", page)
        .await
        .unwrap();
    let metadata: Value = serde_json::from_str(&versions[0].metadata).unwrap();
    assert_eq!(metadata, json!([{"name": "commit", "value": "abc123"}]));
}
