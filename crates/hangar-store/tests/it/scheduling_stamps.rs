//! What the scheduler compares to skip a job: each resource's newest
//! version, disabled versions and pin, and each job's newest build, its
//! status and its newest succeeded build, on SQLite and PostgreSQL alike.

use hangar_core::pipeline::parse_pipeline;
use hangar_store::{HistoricBuild, Store};
use hangar_testkit::on_both_databases;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

const PIPELINE: &str = "
resources:
- {name: repo, type: mock, source: {n: 1}}
jobs:
- {name: build, plan: [{get: repo}]}
- {name: idle, plan: [{get: repo, passed: [build]}]}
";

async fn stamps_follow_versions_builds_and_disabling(store: Store) {
    let config = parse_pipeline(PIPELINE).unwrap().config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    let pipeline = store.pipeline("main", "p").await.unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let job = store.job("main", "p", "build").await.unwrap();

    let empty = store.scheduling_stamps(pipeline.id).await.unwrap();
    assert_eq!(empty.resources["repo"].newest_check_order, 0);
    assert_eq!(empty.jobs["idle"], Default::default(), "no builds: zeros");

    let ids = store
        .insert_versions(repo.id, &[json!({"n": "1"}), json!({"n": "2"})], T0)
        .await
        .unwrap();
    let builds: Vec<HistoricBuild> = ids
        .iter()
        .map(|id| HistoricBuild {
            inputs: vec![("repo".into(), repo.id, *id)],
            outputs: vec![],
        })
        .collect();
    store
        .insert_succeeded_job_builds(job.id, "p/build", &builds, T0)
        .await
        .unwrap();
    // A newer build that has not succeeded (yet).
    store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let mut fields = serde_json::Map::new();
    fields.insert("n".into(), json!("1"));
    store
        .set_resource_version_enabled("main", "p", "repo", &fields, false)
        .await
        .unwrap();

    let s = store.scheduling_stamps(pipeline.id).await.unwrap();
    let r = s.resources["repo"];
    assert_eq!(r.newest_check_order, 2);
    assert_eq!(r.disabled, (1, ids[0]));
    assert_eq!(r.api_pin, None);
    let b = &s.jobs["build"];
    assert_eq!(b.number, 3);
    assert_eq!(b.status, "pending");
    assert_eq!(
        b.newest_succeeded, 2,
        "the pending build is not a succeeded one"
    );
    assert_eq!(s.jobs["idle"].newest_succeeded, 0);
}

on_both_databases!(stamps_follow_versions_builds_and_disabling);
