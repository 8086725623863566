//! Builds of a pipeline's jobs, numbered per job, on both databases.

use hangar_core::build::BuildStatus;
use hangar_core::pipeline::parse_pipeline;
use hangar_store::{Store, StoreError};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;

const PIPELINE: &str = "
resources:
- name: repo
  type: mock
  source: {}
jobs:
- name: build
  plan:
  - get: repo
- name: test
  plan:
  - get: repo
";

async fn set(store: &Store) {
    let config = parse_pipeline(PIPELINE).unwrap().config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
}

async fn builds_are_numbered_per_job_from_one(store: Store) {
    set(&store).await;
    let build = store.job("main", "p", "build").await.unwrap();
    let test = store.job("main", "p", "test").await.unwrap();
    let b1 = store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let b2 = store
        .create_job_build(build.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let t1 = store
        .create_job_build(test.id, "p/test", "[]", T0)
        .await
        .unwrap();
    assert_eq!((b1.number, b2.number, t1.number), (1, 2, 1));
    assert_eq!(b2.build.name, "p/build #2");
    assert_eq!(t1.build.name, "p/test #1");
    assert_eq!(
        store
            .job("main", "p", "build")
            .await
            .unwrap()
            .next_build_number,
        3
    );
    let listed: Vec<(i64, String)> = store
        .job_builds(build.id, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.number, b.build.name))
        .collect();
    assert_eq!(
        listed,
        vec![(2, "p/build #2".to_string()), (1, "p/build #1".to_string())]
    );
    assert_eq!(store.job_builds(build.id, 1).await.unwrap().len(), 1);
    let one = store.job_build(build.id, 1).await.unwrap().unwrap();
    assert_eq!(one.build.id, b1.build.id);
    assert!(store.job_build(build.id, 3).await.unwrap().is_none());
    // The build is an ordinary build too.
    let plain = store.get_build(b1.build.id).await.unwrap().unwrap();
    assert_eq!(plain.name, "p/build #1");
}

async fn concurrent_triggers_never_share_a_number(store: Store) {
    set(&store).await;
    let job = store.job("main", "p", "build").await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.create_job_build(job.id, "p/build", "[]", T0).await })
        })
        .collect();
    let mut numbers = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(b) => numbers.push(b.number),
            // SQLite may refuse a writer while another holds the lock;
            // a refused trigger takes no number.
            Err(StoreError::Database(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    numbers.sort_unstable();
    let expected: Vec<i64> = (1..=numbers.len() as i64).collect();
    assert_eq!(numbers, expected);
    assert!(!numbers.is_empty());
}

async fn a_removed_or_unknown_job_takes_no_build(store: Store) {
    set(&store).await;
    let job = store.job("main", "p", "test").await.unwrap();
    let only_build = parse_pipeline(
        "
resources:
- name: repo
  type: mock
  source: {}
jobs:
- name: build
  plan:
  - get: repo
",
    )
    .unwrap()
    .config;
    store
        .set_pipeline("main", "p", &only_build, None, T0)
        .await
        .unwrap();
    let err = store
        .create_job_build(job.id, "p/test", "[]", T0)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert!(store
        .create_job_build(999_999, "x", "[]", T0)
        .await
        .is_err());
    assert!(store.list_builds(10).await.unwrap().is_empty());
}

async fn destroying_the_pipeline_ends_its_builds_keeps_them_and_frees_the_numbering(store: Store) {
    set(&store).await;
    let job = store.job("main", "p", "build").await.unwrap();
    let running = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let done = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    // `running` and `done` are claimed, `done` ends; `b` stays pending.
    let r = store.claim_build("n", T0, 60_000).await.unwrap().unwrap();
    assert_eq!(r.id, running.build.id);
    let d = store.claim_build("n", T0, 60_000).await.unwrap().unwrap();
    assert_eq!(d.id, done.build.id);
    store
        .finish_build(
            d.id,
            d.lease_token,
            BuildStatus::Succeeded,
            Some(0),
            None,
            T0,
        )
        .await
        .unwrap();
    let b = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let one_off = store.create_build("x", None, "[]", "{}", T0).await.unwrap();

    store.destroy_pipeline("main", "p", T0 + 5).await.unwrap();
    assert!(store.job_builds(job.id, 10).await.unwrap().is_empty());
    // Its pending build is aborted, its running one asked to stop, its
    // finished one and builds of no pipeline left as they were.
    let pending = store.get_build(b.build.id).await.unwrap().unwrap();
    assert_eq!(pending.status, BuildStatus::Aborted);
    assert_eq!(pending.finished_at, Some(T0 + 5));
    assert!(store.build_abort_requested(running.build.id).await.unwrap());
    let finished = store.get_build(done.build.id).await.unwrap().unwrap();
    assert_eq!(finished.status, BuildStatus::Succeeded);
    assert!(!store.build_abort_requested(done.build.id).await.unwrap());
    assert!(!store.build_abort_requested(one_off.id).await.unwrap());
    // The same name set again starts its numbering anew.
    set(&store).await;
    let job = store.job("main", "p", "build").await.unwrap();
    let again = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    assert_eq!(again.number, 1);
}

async fn a_build_knows_its_job_and_the_pipeline_s_resources_even_removed(store: Store) {
    set(&store).await;
    let job = store.job("main", "p", "build").await.unwrap();
    let b = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    let one_off = store.create_build("x", None, "[]", "{}", T0).await.unwrap();
    let found = store.build_job(b.build.id).await.unwrap().unwrap();
    assert_eq!((found.job_id, found.pipeline_id), (job.id, job.pipeline_id));
    assert_eq!(store.build_job(one_off.id).await.unwrap(), None);
    let repo = store.resource("main", "p", "repo").await.unwrap().id;
    assert_eq!(
        store
            .pipeline_resource_id(job.pipeline_id, "repo")
            .await
            .unwrap(),
        Some(repo)
    );
    assert_eq!(
        store
            .pipeline_resource_id(job.pipeline_id, "nope")
            .await
            .unwrap(),
        None
    );
    // Recorded twice (a resumed build): one row each, shown by name.
    let v = store
        .save_resource_version(
            repo,
            &serde_json::json!({"ref": "a"}),
            &serde_json::json!([]),
            T0,
        )
        .await
        .unwrap();
    for _ in 0..2 {
        store
            .record_build_input(b.build.id, job.id, "code", repo, v.id)
            .await
            .unwrap();
        store
            .copy_build_inputs_to_outputs(b.build.id)
            .await
            .unwrap();
    }
    let (inputs, outputs) = store.build_versions_shown(b.build.id).await.unwrap();
    let shown = |l: Vec<hangar_store::BuildVersionShown>| -> Vec<String> {
        l.into_iter()
            .map(|v| format!("{:?} {} {}", v.name, v.resource, v.version))
            .collect()
    };
    assert_eq!(shown(inputs), [r#"Some("code") repo {"ref":"a"}"#]);
    assert_eq!(shown(outputs), [r#"None repo {"ref":"a"}"#]);
    // The config no longer names the resource: its id stays for the build.
    let config = parse_pipeline("jobs:\n- name: build\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: x}}\n")
        .unwrap()
        .config;
    store
        .set_pipeline("main", "p", &config, Some(1), T0)
        .await
        .unwrap();
    assert_eq!(
        store
            .pipeline_resource_id(job.pipeline_id, "repo")
            .await
            .unwrap(),
        Some(repo)
    );
}

on_both_databases!(
    a_build_knows_its_job_and_the_pipeline_s_resources_even_removed,
    builds_are_numbered_per_job_from_one,
    concurrent_triggers_never_share_a_number,
    a_removed_or_unknown_job_takes_no_build,
    destroying_the_pipeline_ends_its_builds_keeps_them_and_frees_the_numbering,
);
