//! Pipelines: versioned configs, the rows derived from them, concurrent
//! sets, renames and destruction, on both databases.

use hangar_core::pipeline::{parse_pipeline, PipelineConfig};
use hangar_store::{Created, Store, StoreError, VersionPage};
use hangar_testkit::on_both_databases;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

fn config(yaml: &str) -> PipelineConfig {
    parse_pipeline(yaml).expect("a valid config").config
}

const TWO_JOBS: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
  version: {ref: abc}
- name: other
  type: mock
  source: {}
resource_types:
- name: custom
  type: registry-image
  source: {repository: example/custom}
jobs:
- name: build
  plan:
  - get: repo
  - get: other
- name: test
  plan:
  - get: repo
    passed: [build]
";

const ONE_JOB: &str = "
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
jobs:
- name: build
  plan:
  - get: repo
";

fn names<T>(rows: &[T], name: impl Fn(&T) -> &str) -> Vec<String> {
    rows.iter().map(|r| name(r).to_string()).collect()
}

async fn a_set_writes_a_new_version_and_keeps_the_previous_readable(store: Store) {
    let first = store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0)
        .await
        .unwrap();
    assert_eq!((first.version, first.created), (1, true));
    let second = store
        .set_pipeline("main", "p", &config(ONE_JOB), None, T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        (second.version, second.created, second.pipeline_id),
        (2, false, first.pipeline_id)
    );

    let (v, current) = store.pipeline_config("main", "p", None).await.unwrap();
    assert_eq!(v, 2);
    assert_eq!(current, serde_json::to_value(config(ONE_JOB)).unwrap());
    let (v, old) = store.pipeline_config("main", "p", Some(1)).await.unwrap();
    assert_eq!(v, 1);
    assert_eq!(old, serde_json::to_value(config(TWO_JOBS)).unwrap());
    assert!(matches!(
        store.pipeline_config("main", "p", Some(3)).await,
        Err(StoreError::NotFound(_))
    ));

    let p = store.pipeline("main", "p").await.unwrap();
    assert!(p.paused, "a new pipeline starts paused");
    assert_eq!(
        (p.config_version, p.created_at, p.updated_at),
        (2, T0, T0 + 1)
    );
}

async fn derived_rows_follow_the_config_and_removed_jobs_keep_their_history(store: Store) {
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0)
        .await
        .unwrap();
    let jobs = store.jobs("main", "p", false).await.unwrap();
    assert_eq!(names(&jobs, |j| &j.name), ["build", "test"]);
    assert!(jobs
        .iter()
        .all(|j| j.active && !j.paused && j.next_build_number == 1));
    let resources = store.resources("main", "p").await.unwrap();
    assert_eq!(names(&resources, |r| &r.name), ["repo", "other"]);
    assert_eq!(resources[0].resource_type, "git");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&resources[0].source).unwrap(),
        json!({"uri": "https://example.com/repo.git"})
    );
    assert_eq!(resources[0].pinned.as_deref(), Some(r#"{"ref":"abc"}"#));
    assert_eq!(resources[1].pinned, None);
    let types = store.pipeline_resource_types("main", "p").await.unwrap();
    assert_eq!(names(&types, |t| &t.name), ["custom"]);

    store
        .set_job_paused("main", "p", "test", true)
        .await
        .unwrap();
    let test_id = jobs[1].id;
    store
        .set_pipeline("main", "p", &config(ONE_JOB), None, T0 + 1)
        .await
        .unwrap();
    let active = store.jobs("main", "p", false).await.unwrap();
    assert_eq!(names(&active, |j| &j.name), ["build"]);
    assert_eq!(
        active[0].id, jobs[0].id,
        "a job kept by the config keeps its id"
    );
    let all = store.jobs("main", "p", true).await.unwrap();
    assert_eq!(names(&all, |j| &j.name), ["build", "test"]);
    assert!(!all[1].active);
    assert!(matches!(
        store.job("main", "p", "test").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        names(&store.resources("main", "p").await.unwrap(), |r| &r.name),
        ["repo"]
    );
    assert!(store
        .pipeline_resource_types("main", "p")
        .await
        .unwrap()
        .is_empty());

    // The job comes back with its id and its pause.
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0 + 2)
        .await
        .unwrap();
    let back = store.job("main", "p", "test").await.unwrap();
    assert_eq!((back.id, back.paused, back.active), (test_id, true, true));
}

async fn old_name_renames_a_job_and_a_resource_in_place(store: Store) {
    store
        .set_pipeline("main", "p", &config(ONE_JOB), None, T0)
        .await
        .unwrap();
    let job_id = store.job("main", "p", "build").await.unwrap().id;
    let resource_id = store.resource("main", "p", "repo").await.unwrap().id;
    let renamed = "
resources:
- name: source
  old_name: repo
  type: git
  source: {uri: https://example.com/repo.git}
jobs:
- name: compile
  old_name: build
  plan:
  - get: source
";
    store
        .set_pipeline("main", "p", &config(renamed), None, T0 + 1)
        .await
        .unwrap();
    assert_eq!(store.job("main", "p", "compile").await.unwrap().id, job_id);
    assert_eq!(
        store.resource("main", "p", "source").await.unwrap().id,
        resource_id
    );
    assert_eq!(store.jobs("main", "p", true).await.unwrap().len(), 1);
}

async fn a_set_from_a_stale_version_is_refused_and_changes_nothing(store: Store) {
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0)
        .await
        .unwrap();
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), Some(1), T0 + 1)
        .await
        .unwrap();
    let refused = store
        .set_pipeline("main", "p", &config(ONE_JOB), Some(1), T0 + 2)
        .await;
    match refused {
        Err(StoreError::Conflict(m)) => assert!(m.contains("is at version 2"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let p = store.pipeline("main", "p").await.unwrap();
    assert_eq!((p.config_version, p.updated_at), (2, T0 + 1));
    assert_eq!(store.jobs("main", "p", false).await.unwrap().len(), 2);
    assert!(matches!(
        store.pipeline_config("main", "p", Some(3)).await,
        Err(StoreError::NotFound(_))
    ));
    // Version 0: only if the pipeline does not exist yet.
    assert!(matches!(
        store
            .set_pipeline("main", "p", &config(ONE_JOB), Some(0), T0 + 3)
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .set_pipeline("main", "new", &config(ONE_JOB), Some(5), T0 + 3)
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.pipeline("main", "new").await,
        Err(StoreError::NotFound(_))
    ));
    store
        .set_pipeline("main", "new", &config(ONE_JOB), Some(0), T0 + 3)
        .await
        .unwrap();
}

async fn concurrent_sets_from_one_version_let_exactly_one_win(store: Store) {
    store
        .set_pipeline("main", "p", &config(ONE_JOB), None, T0)
        .await
        .unwrap();
    let a = config(TWO_JOBS);
    let b = config(ONE_JOB);
    let (ra, rb) = tokio::join!(
        store.set_pipeline("main", "p", &a, Some(1), T0 + 1),
        store.set_pipeline("main", "p", &b, Some(1), T0 + 1),
    );
    let wins = [ra.is_ok(), rb.is_ok()];
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "{ra:?} {rb:?}");
    for r in [&ra, &rb] {
        if let Err(e) = r {
            assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
        }
    }
    assert_eq!(store.pipeline("main", "p").await.unwrap().config_version, 2);
    let (_, current) = store.pipeline_config("main", "p", None).await.unwrap();
    let winner = if ra.is_ok() { &a } else { &b };
    assert_eq!(current, serde_json::to_value(winner).unwrap());
}

async fn pause_rename_and_listing_order(store: Store) {
    for (i, name) in ["zeta", "alpha", "mid"].iter().enumerate() {
        store
            .set_pipeline("main", name, &config(ONE_JOB), None, T0 + i as i64)
            .await
            .unwrap();
    }
    let listed = store.pipelines("main").await.unwrap();
    assert_eq!(names(&listed, |p| &p.name), ["zeta", "alpha", "mid"]);
    store
        .set_pipeline_paused("main", "alpha", false, T0 + 9)
        .await
        .unwrap();
    assert!(!store.pipeline("main", "alpha").await.unwrap().paused);

    let id = store.pipeline("main", "alpha").await.unwrap().id;
    let job = store.job("main", "alpha", "build").await.unwrap().id;
    store
        .rename_pipeline("main", "alpha", "beta", T0 + 10)
        .await
        .unwrap();
    let renamed = store.pipeline("main", "beta").await.unwrap();
    assert_eq!((renamed.id, renamed.config_version), (id, 1));
    assert_eq!(store.job("main", "beta", "build").await.unwrap().id, job);
    assert!(matches!(
        store.pipeline("main", "alpha").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.rename_pipeline("main", "beta", "zeta", T0 + 11).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.pipeline("main", "beta").await.unwrap().id, id);
}

async fn unknown_teams_and_pipelines_are_not_found(store: Store) {
    assert!(store.team("main").await.unwrap().is_some());
    assert!(store.team("other").await.unwrap().is_none());
    for result in [
        store
            .set_pipeline("other", "p", &config(ONE_JOB), None, T0)
            .await
            .map(|_| ()),
        store.pipelines("other").await.map(|_| ()),
        store.pipeline("main", "missing").await.map(|_| ()),
        store.destroy_pipeline("main", "missing", T0).await,
        store.set_pipeline_paused("main", "missing", true, T0).await,
        store.set_job_paused("main", "missing", "j", true).await,
    ] {
        assert!(matches!(result, Err(StoreError::NotFound(_))), "{result:?}");
    }
}

async fn resource_versions_page_newest_first(store: Store) {
    store
        .set_pipeline("main", "p", &config(ONE_JOB), None, T0)
        .await
        .unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let v = store
            .save_resource_version(
                repo.id,
                &json!({"ref": format!("r{i}")}),
                &json!([]),
                T0 + i,
            )
            .await
            .unwrap();
        assert_eq!(v.check_order, i + 1);
        assert!(v.enabled);
        ids.push(v.id);
    }
    let again = store
        .save_resource_version(repo.id, &json!({"ref": "r0"}), &json!([]), T0 + 9)
        .await
        .unwrap();
    assert_eq!((again.id, again.check_order), (ids[0], 1));

    let page = |limit, before, after| VersionPage {
        limit,
        before,
        after,
    };
    let got = |rows: Vec<hangar_store::ResourceVersionRecord>| -> Vec<i64> {
        rows.iter().map(|r| r.id).collect()
    };
    let first = store
        .resource_versions("main", "p", "repo", page(2, None, None))
        .await
        .unwrap();
    assert_eq!(got(first), [ids[4], ids[3]]);
    let older = store
        .resource_versions("main", "p", "repo", page(2, Some(ids[3]), None))
        .await
        .unwrap();
    assert_eq!(got(older), [ids[2], ids[1]]);
    let newer = store
        .resource_versions("main", "p", "repo", page(2, None, Some(ids[1])))
        .await
        .unwrap();
    assert_eq!(got(newer), [ids[3], ids[2]]);
}

async fn destroy_removes_the_pipeline_and_everything_under_it(store: Store) {
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0)
        .await
        .unwrap();
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0 + 1)
        .await
        .unwrap();
    store
        .set_pipeline("main", "kept", &config(ONE_JOB), None, T0)
        .await
        .unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    store
        .save_resource_version(repo.id, &json!({"ref": "a"}), &json!([]), T0)
        .await
        .unwrap();
    store.destroy_pipeline("main", "p", T0).await.unwrap();
    assert!(matches!(
        store.pipeline("main", "p").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        names(&store.pipelines("main").await.unwrap(), |p| &p.name),
        ["kept"]
    );
    // Setting the name again starts afresh: version 1, new rows. `repo`'s
    // history is the scope's, which `kept` reads too, so it stays.
    let again = store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0 + 2)
        .await
        .unwrap();
    assert_eq!((again.version, again.created), (1, true));
    let fresh = store.resource("main", "p", "repo").await.unwrap();
    assert_ne!(fresh.id, repo.id);
    assert_eq!(fresh.scope_id, repo.scope_id);
    let page = VersionPage {
        limit: 10,
        ..Default::default()
    };
    let versions = store.resource_versions("main", "p", "repo", page);
    assert_eq!(versions.await.unwrap().len(), 1);
    let other = store.resource_versions("main", "p", "other", page);
    assert!(other.await.unwrap().is_empty());
    assert_eq!(store.jobs("main", "kept", true).await.unwrap().len(), 1);
}

async fn a_set_from_a_build_creates_unpaused_and_a_build_knows_its_pipeline(store: Store) {
    let made = store
        .set_pipeline_as(
            "main",
            "p",
            &config(ONE_JOB),
            Some(0),
            Created::Unpaused,
            T0,
        )
        .await
        .unwrap();
    assert!(made.created);
    assert!(!store.pipeline("main", "p").await.unwrap().paused);
    // An existing pipeline keeps its paused flag, whoever sets it.
    store
        .set_pipeline_paused("main", "p", true, T0)
        .await
        .unwrap();
    store
        .set_pipeline_as(
            "main",
            "p",
            &config(TWO_JOBS),
            Some(1),
            Created::Unpaused,
            T0,
        )
        .await
        .unwrap();
    assert!(store.pipeline("main", "p").await.unwrap().paused);
    let job = store.job("main", "p", "build").await.unwrap();
    let build = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    assert_eq!(
        store.build_pipeline(build.build.id).await.unwrap(),
        Some(("main".to_string(), "p".to_string()))
    );
    let one_off = store
        .create_build("one-off", None, "[]", "{}", T0)
        .await
        .unwrap();
    assert_eq!(store.build_pipeline(one_off.id).await.unwrap(), None);
    store.destroy_pipeline("main", "p", T0).await.unwrap();
    assert_eq!(store.build_pipeline(build.build.id).await.unwrap(), None);
}

async fn resources_of_one_type_and_source_share_one_history(store: Store) {
    // `repo` in both pipelines is the same git repository: one scope. The
    // custom-typed resource is scoped by its pipeline.
    let shared = "
resources:
- {name: repo, type: git, source: {uri: u, branch: main}}
- {name: img, type: custom, source: {x: 1}}
resource_types:
- {name: custom, type: registry-image, source: {repository: r}}
jobs:
- {name: j, plan: [{get: repo}, {get: img}]}
";
    store
        .set_pipeline("main", "a", &config(shared), None, T0)
        .await
        .unwrap();
    store
        .set_pipeline("main", "b", &config(shared), None, T0)
        .await
        .unwrap();
    let a = store.resource("main", "a", "repo").await.unwrap();
    let b = store.resource("main", "b", "repo").await.unwrap();
    assert!(a.scope_id.is_some());
    assert_eq!(a.scope_id, b.scope_id);
    let a_img = store.resource("main", "a", "img").await.unwrap();
    let b_img = store.resource("main", "b", "img").await.unwrap();
    assert_ne!(
        a_img.scope_id, b_img.scope_id,
        "a custom type is its pipeline's own"
    );

    let saved = store
        .save_resource_version(a.id, &json!({"ref": "1"}), &json!([]), T0)
        .await
        .unwrap();
    let again = store
        .save_resource_version(b.id, &json!({"ref": "1"}), &json!([]), T0 + 1)
        .await
        .unwrap();
    assert_eq!(saved.id, again.id, "one version row for the shared scope");
    let page = VersionPage {
        limit: 10,
        ..Default::default()
    };
    let from_b = store
        .resource_versions("main", "b", "repo", page)
        .await
        .unwrap();
    assert_eq!(from_b.iter().map(|v| v.id).collect::<Vec<_>>(), [saved.id]);

    // Destroying one pipeline keeps the shared history; destroying the
    // other removes it.
    store.destroy_pipeline("main", "a", T0).await.unwrap();
    let from_b = store
        .resource_versions("main", "b", "repo", page)
        .await
        .unwrap();
    assert_eq!(from_b.len(), 1);

    // A changed source is a new scope: a new, empty history.
    let moved = shared.replace("branch: main", "branch: dev");
    store
        .set_pipeline("main", "b", &config(&moved), None, T0)
        .await
        .unwrap();
    let b2 = store.resource("main", "b", "repo").await.unwrap();
    assert_ne!(b2.scope_id, b.scope_id);
    assert!(store
        .resource_versions("main", "b", "repo", page)
        .await
        .unwrap()
        .is_empty());
}

/// A version's metadata is what a get's `in` answered last: saved again
/// with other metadata it is replaced, with `[]` (a check's) it is kept;
/// the row, its id and its order stay.
async fn a_version_s_metadata_is_the_last_a_get_answered(store: Store) {
    store
        .set_pipeline("main", "p", &config(TWO_JOBS), None, T0)
        .await
        .unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let v = json!({"ref": "a"});
    let first = store
        .save_resource_version(repo.id, &v, &json!([]), T0)
        .await
        .unwrap();
    let saved = [
        (json!([{"name": "commit", "value": "c1"}]), "c1"),
        (json!([]), "c1"),
        (json!([{"name": "commit", "value": "c2"}]), "c2"),
    ];
    for (i, (metadata, expected)) in saved.into_iter().enumerate() {
        let row = store
            .save_resource_version(repo.id, &v, &metadata, T0 + 1 + i as i64)
            .await
            .unwrap();
        assert_eq!((row.id, row.check_order), (first.id, first.check_order));
        let kept: serde_json::Value = serde_json::from_str(&row.metadata).unwrap();
        assert_eq!(kept, json!([{"name": "commit", "value": expected}]), "{i}");
    }
}

on_both_databases!(
    a_version_s_metadata_is_the_last_a_get_answered,
    resources_of_one_type_and_source_share_one_history,
    a_set_from_a_build_creates_unpaused_and_a_build_knows_its_pipeline,
    a_set_writes_a_new_version_and_keeps_the_previous_readable,
    derived_rows_follow_the_config_and_removed_jobs_keep_their_history,
    old_name_renames_a_job_and_a_resource_in_place,
    a_set_from_a_stale_version_is_refused_and_changes_nothing,
    concurrent_sets_from_one_version_let_exactly_one_win,
    pause_rename_and_listing_order,
    unknown_teams_and_pipelines_are_not_found,
    resource_versions_page_newest_first,
    destroy_removes_the_pipeline_and_everything_under_it,
);
