//! The store's reads for the dashboard, on both databases: a team's jobs
//! and each one's newest build, exposing pipelines, and who may read a build.

use hangar_core::build::BuildStatus;
use hangar_core::pipeline::parse_pipeline;
use hangar_store::{JobRecord, Store};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;

const PIPELINE: &str = "
resources:
- name: repo
  type: mock
  source: {}
jobs:
- name: build
  public: true
  plan:
  - get: repo
- name: test
  plan:
  - get: repo
";

async fn set(store: &Store, name: &str) -> i64 {
    let config = parse_pipeline(PIPELINE).unwrap().config;
    store
        .set_pipeline("main", name, &config, None, T0)
        .await
        .unwrap()
        .pipeline_id
}

/// Pipelines p and q set; p's `build` and `test` jobs and q's `build`.
async fn three_jobs(store: &Store) -> (JobRecord, JobRecord, JobRecord) {
    set(store, "p").await;
    set(store, "q").await;
    (
        store.job("main", "p", "build").await.unwrap(),
        store.job("main", "p", "test").await.unwrap(),
        store.job("main", "q", "build").await.unwrap(),
    )
}

/// A build of q's `build` job, aborted at `T0 + 5` before it ran.
async fn aborted_before_it_ran(store: &Store, job: i64) {
    let b = store
        .create_job_build(job, "q/build", "[]", T0)
        .await
        .unwrap();
    store.request_build_abort(b.build.id, T0 + 5).await.unwrap();
}

async fn the_newest_build_of_each_job_and_none_for_a_job_never_built(store: Store) {
    let (build, test, other) = three_jobs(&store).await;
    for _ in 0..3 {
        store
            .create_job_build(build.id, "p/build", "[]", T0)
            .await
            .unwrap();
    }
    aborted_before_it_ran(&store, other.id).await;
    let latest = store.latest_job_builds("main").await.unwrap();
    assert_eq!(latest.len(), 2, "{latest:?}");
    assert_eq!(latest[&build.id].number, 3);
    assert!(!latest.contains_key(&test.id));
    assert_eq!(latest[&other.id].status, BuildStatus::Aborted);
    assert_eq!(latest[&other.id].finished_at, Some(T0 + 5));
    assert!(store.latest_job_builds("nobody").await.unwrap().is_empty());
    // Every active job, each pipeline's in config order.
    let jobs: Vec<(i64, String)> = store
        .team_jobs("main")
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.pipeline_id, j.name))
        .collect();
    let (p, q) = (build.pipeline_id, other.pipeline_id);
    assert_eq!(
        jobs,
        [
            (p, "build".to_string()),
            (p, "test".to_string()),
            (q, "build".to_string()),
            (q, "test".to_string()),
        ]
    );
}

async fn exposing_is_idempotent_and_decides_who_reads_a_build(store: Store) {
    let p = set(&store, "p").await;
    let build = store.job("main", "p", "build").await.unwrap();
    let test = store.job("main", "p", "test").await.unwrap();
    let b = store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let t = store
        .create_job_build(test.id, "p/test", "[]", T0)
        .await
        .unwrap();
    let one_off = store
        .create_build("one-off", None, "[]", "{}", T0)
        .await
        .unwrap();
    assert!(store.exposed_pipeline_ids().await.unwrap().is_empty());
    let e = store.build_exposure(b.build.id).await.unwrap().unwrap();
    assert!(!e.pipeline_exposed);
    for _ in 0..2 {
        store.set_pipeline_exposed(p, true).await.unwrap();
    }
    assert_eq!(store.exposed_pipeline_ids().await.unwrap(), [p]);
    let e = store.build_exposure(b.build.id).await.unwrap().unwrap();
    assert!(e.pipeline_exposed);
    assert!(e.job_config.contains("\"public\":true"), "{}", e.job_config);
    let e = store.build_exposure(t.build.id).await.unwrap().unwrap();
    assert!(
        !e.job_config.contains("\"public\":true"),
        "{}",
        e.job_config
    );
    assert_eq!(store.build_exposure(one_off.id).await.unwrap(), None);
    for _ in 0..2 {
        store.set_pipeline_exposed(p, false).await.unwrap();
    }
    assert!(store.exposed_pipeline_ids().await.unwrap().is_empty());
    // Destroying the pipeline forgets that it was exposed.
    store.set_pipeline_exposed(p, true).await.unwrap();
    store.destroy_pipeline("main", "p", T0).await.unwrap();
    assert!(store.exposed_pipeline_ids().await.unwrap().is_empty());
}

/// Concourse colours a job by the build that last ended and marks it
/// running while any build of it runs, a newer one pending or not.
async fn a_jobs_state_is_its_last_ended_build_and_any_running_one(store: Store) {
    let (build, test, other) = three_jobs(&store).await;
    let claim = || async {
        store
            .claim_build("test", T0 + 1, 60_000)
            .await
            .unwrap()
            .unwrap()
    };
    // build: #1 failed, #2 running, #3 pending behind it.
    let b1 = store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let claimed = claim().await;
    assert_eq!(claimed.id, b1.build.id);
    store
        .finish_build(
            claimed.id,
            claimed.lease_token,
            BuildStatus::Failed,
            Some(1),
            None,
            T0 + 2,
        )
        .await
        .unwrap();
    let b2 = store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    assert_eq!(claim().await.id, b2.build.id);
    // test: #1 running, none ended.
    let t1 = store
        .create_job_build(test.id, "p/test", "[]", T0)
        .await
        .unwrap();
    assert_eq!(claim().await.id, t1.build.id);
    store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    // q's build: #1 aborted before it ran.
    aborted_before_it_ran(&store, other.id).await;

    let states = store.job_build_states("main").await.unwrap();
    assert_eq!(states.len(), 3, "{states:?}");
    let number = |b: &Option<hangar_store::LatestBuild>| b.as_ref().map(|b| b.number);
    let s = &states[&build.id];
    assert_eq!(
        (s.newest.number, s.newest.status),
        (3, BuildStatus::Pending)
    );
    assert_eq!(number(&s.finished), Some(1));
    assert_eq!(s.finished.as_ref().unwrap().status, BuildStatus::Failed);
    assert_eq!(number(&s.running), Some(2));
    let s = &states[&test.id];
    assert_eq!((number(&s.finished), number(&s.running)), (None, Some(1)));
    let s = &states[&other.id];
    assert_eq!(s.finished.as_ref(), Some(&s.newest));
    assert_eq!(s.newest.status, BuildStatus::Aborted);
    assert_eq!(s.running, None);
    assert!(store.job_build_states("nobody").await.unwrap().is_empty());
}

on_both_databases!(
    a_jobs_state_is_its_last_ended_build_and_any_running_one,
    the_newest_build_of_each_job_and_none_for_a_job_never_built,
    exposing_is_idempotent_and_decides_who_reads_a_build,
);
