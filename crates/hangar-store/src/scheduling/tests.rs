//! The scheduler's window queries, the pipeline lease and held builds, on
//! both databases.

use hangar_core::pipeline::parse_pipeline;
use hangar_core::scheduling::{resolve, Input, InputVersion, Window};
use serde_json::json;

use super::{version_matches_pin, PlannedInput};
use crate::test_db::{postgres_store, sqlite_store};
use crate::Store;

const T0: i64 = 1_700_000_000_000;

const CONFIG: &str = "
resources:
- {name: src, type: git, source: {uri: a}}
- {name: lib, type: git, source: {uri: b}}
jobs:
- {name: build, plan: [{get: src}, {get: lib}]}
- {name: test, plan: [{get: src, passed: [build]}, {get: lib, passed: [build]}]}
";

struct Fixture {
    store: Store,
    pipeline: i64,
    src: i64,
    lib: i64,
    build_job: i64,
    test_job: i64,
}

async fn fixture(store: Store) -> Fixture {
    let config = parse_pipeline(CONFIG).unwrap().config;
    let set = store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    let src = store.resource("main", "p", "src").await.unwrap().id;
    let lib = store.resource("main", "p", "lib").await.unwrap().id;
    let build_job = store.job("main", "p", "build").await.unwrap().id;
    let test_job = store.job("main", "p", "test").await.unwrap().id;
    Fixture {
        store,
        pipeline: set.pipeline_id,
        src,
        lib,
        build_job,
        test_job,
    }
}

async fn version(store: &Store, resource: i64, name: &str) -> i64 {
    store
        .save_resource_version(resource, &json!({"ref": name}), &json!([]), T0)
        .await
        .unwrap()
        .id
}

async fn disable(store: &Store, resource: i64, version: i64) {
    sqlx::query("INSERT INTO resource_disabled_versions (resource_id, version_id) VALUES ($1, $2)")
        .bind(resource)
        .bind(version)
        .execute(&store.pool)
        .await
        .unwrap();
}

/// A build of `job` with these inputs, ended with `status`.
async fn build_of(store: &Store, job: i64, inputs: &[(&str, i64, i64)], status: &str) -> i64 {
    let planned: Vec<PlannedInput> = inputs
        .iter()
        .map(|(n, r, v)| PlannedInput {
            name: n.to_string(),
            resource_id: *r,
            version_id: *v,
        })
        .collect();
    let b = store
        .create_scheduled_build(job, "p/j", "[]", &planned, false, None, T0)
        .await
        .unwrap()
        .unwrap();
    sqlx::query("UPDATE builds SET status = $1 WHERE id = $2")
        .bind(status)
        .bind(b.build.id)
        .execute(&store.pool)
        .await
        .unwrap();
    if status == "succeeded" {
        store
            .copy_build_inputs_to_outputs(b.build.id)
            .await
            .unwrap();
    }
    b.build.id
}

async fn latest_skips_disabled_versions(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    assert_eq!(s.latest_enabled_version(f.src).await.unwrap(), None);
    let v1 = version(s, f.src, "1").await;
    let v2 = version(s, f.src, "2").await;
    assert_eq!(s.latest_enabled_version(f.src).await.unwrap(), Some(v2));
    disable(s, f.src, v2).await;
    assert_eq!(s.latest_enabled_version(f.src).await.unwrap(), Some(v1));
    // Disabling is per resource: another resource is unaffected.
    assert_eq!(s.latest_enabled_version(f.lib).await.unwrap(), None);
    assert_eq!(
        s.disabled_versions(&[f.src, f.lib]).await.unwrap(),
        [(f.src, v2)].into_iter().collect()
    );
}

async fn every_walks_versions_in_order_over_gaps(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let v: Vec<i64> = [
        version(s, f.src, "1").await,
        version(s, f.src, "2").await,
        version(s, f.src, "3").await,
        version(s, f.src, "4").await,
    ]
    .to_vec();
    // Never used: the newest, as Concourse starts.
    let next = s
        .every_next_version(f.build_job, "src", f.src)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.version, next.has_next), (v[3], false));
    build_of(s, f.build_job, &[("src", f.src, v[0])], "failed").await;
    // A gap: v2 disabled is skipped, v3 follows with v4 after it.
    disable(s, f.src, v[1]).await;
    let next = s
        .every_next_version(f.build_job, "src", f.src)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.version, next.has_next), (v[2], true));
    build_of(s, f.build_job, &[("src", f.src, v[3])], "succeeded").await;
    // Nothing after the one used: the same one again (used before).
    let next = s
        .every_next_version(f.build_job, "src", f.src)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.version, next.has_next), (v[3], false));
}

async fn passed_builds_page_newest_first(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let a = version(s, f.src, "a").await;
    let b = version(s, f.src, "b").await;
    let l = version(s, f.lib, "l").await;
    let b1 = build_of(
        s,
        f.build_job,
        &[("src", f.src, a), ("lib", f.lib, l)],
        "succeeded",
    )
    .await;
    build_of(
        s,
        f.build_job,
        &[("src", f.src, b), ("lib", f.lib, l)],
        "failed",
    )
    .await;
    let b3 = build_of(
        s,
        f.build_job,
        &[("src", f.src, b), ("lib", f.lib, l)],
        "succeeded",
    )
    .await;
    let one = s.passed_builds(f.build_job, &[f.src], 1).await.unwrap();
    assert!(!one.complete);
    assert_eq!(one.builds.len(), 1);
    assert_eq!(one.builds[0].id, b3);
    assert_eq!(
        one.builds[0].versions,
        vec![(f.src, b)],
        "only the resources asked"
    );
    let all = s
        .passed_builds(f.build_job, &[f.src, f.lib], 10)
        .await
        .unwrap();
    assert!(all.complete);
    assert_eq!(
        all.builds.iter().map(|b| b.id).collect::<Vec<_>>(),
        vec![b3, b1],
        "the failed build is not a passed one"
    );
}

/// Fan-in: `test` takes src and lib from the same build of `build`; a
/// version disabled after it passed is skipped, so the older build's pair
/// is taken, answered from the store.
async fn fan_in_with_a_version_disabled_after_it_passed(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let a = version(s, f.src, "a").await;
    let b = version(s, f.src, "b").await;
    let l1 = version(s, f.lib, "1").await;
    let l2 = version(s, f.lib, "2").await;
    build_of(
        s,
        f.build_job,
        &[("src", f.src, a), ("lib", f.lib, l1)],
        "succeeded",
    )
    .await;
    build_of(
        s,
        f.build_job,
        &[("src", f.src, b), ("lib", f.lib, l2)],
        "succeeded",
    )
    .await;
    let inputs = [
        Input {
            name: "src".into(),
            resource: f.src,
            passed: [f.build_job].into_iter().collect(),
            version: InputVersion::Latest,
            trigger: true,
        },
        Input {
            name: "lib".into(),
            resource: f.lib,
            passed: [f.build_job].into_iter().collect(),
            version: InputVersion::Latest,
            trigger: true,
        },
    ];
    let builds = s
        .passed_builds(f.build_job, &[f.src, f.lib], 10)
        .await
        .unwrap();
    let mut w = Window {
        passed_builds: [(f.build_job, builds)].into_iter().collect(),
        ..Default::default()
    };
    let r = resolve(&inputs, &w).unwrap();
    assert_eq!(r.inputs["src"].as_ref().unwrap().version, b);
    assert_eq!(r.inputs["lib"].as_ref().unwrap().version, l2);
    disable(s, f.lib, l2).await;
    w.disabled = s.disabled_versions(&[f.src, f.lib]).await.unwrap();
    let r = resolve(&inputs, &w).unwrap();
    assert_eq!(
        r.inputs["src"].as_ref().unwrap().version,
        a,
        "same build as lib"
    );
    assert_eq!(r.inputs["lib"].as_ref().unwrap().version, l1);
    let _ = f.test_job;
}

async fn pins_match_as_concourse(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let v1 = s
        .save_resource_version(f.src, &json!({"ref": "1", "branch": "m"}), &json!([]), T0)
        .await
        .unwrap()
        .id;
    version(s, f.src, "2").await;
    let pin = |v: serde_json::Value| v.as_object().unwrap().clone();
    assert_eq!(
        s.match_pinned_version(f.src, &pin(json!({"ref": "1"})))
            .await
            .unwrap(),
        Some(v1),
        "a pin matches a version with more fields"
    );
    assert_eq!(
        s.match_pinned_version(f.src, &pin(json!({"ref": "9"})))
            .await
            .unwrap(),
        None
    );
    assert!(!version_matches_pin(
        &pin(json!({"ref": "1"})),
        &pin(json!({"ref": "1", "branch": "m"}))
    ));
}

async fn used_before_and_held_builds(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let a = version(s, f.src, "a").await;
    let b = version(s, f.src, "b").await;
    let id = build_of(s, f.build_job, &[("src", f.src, a)], "pending").await;
    let ask = |v| PlannedInput {
        name: "src".into(),
        resource_id: f.src,
        version_id: v,
    };
    assert_eq!(
        s.inputs_used_before(f.build_job, &[ask(a), ask(b)])
            .await
            .unwrap(),
        ["src".to_string()].into_iter().collect(),
    );
    assert!(s
        .inputs_used_before(f.test_job, &[ask(a)])
        .await
        .unwrap()
        .is_empty());
    // The same version under another name was not used before.
    let renamed = PlannedInput {
        name: "renamed".into(),
        ..ask(a)
    };
    assert_eq!(
        s.inputs_used_before(f.build_job, &[renamed, ask(b), ask(a)])
            .await
            .unwrap(),
        ["src".to_string()].into_iter().collect(),
    );
    assert!(s
        .inputs_used_before(f.build_job, &[])
        .await
        .unwrap()
        .is_empty());
    // Versions' texts at once; an id that names none is an error.
    let texts = s.version_texts(&[b, a]).await.unwrap();
    assert_eq!(texts[&a], r#"{"ref":"a"}"#);
    assert_eq!(texts[&b], r#"{"ref":"b"}"#);
    assert!(s.version_texts(&[a, 999_999]).await.is_err());
    assert!(s.version_texts(&[]).await.unwrap().is_empty());
    // A held build is not the engine's to claim until released.
    let state = s.start_state(f.pipeline).await.unwrap();
    assert_eq!(state.held.len(), 1);
    assert!(state.running.is_empty());
    assert!(s.claim_build("node", T0, 1000).await.unwrap().is_none());
    s.release_held_builds(&[id]).await.unwrap();
    assert_eq!(
        s.claim_build("node", T0, 1000).await.unwrap().unwrap().id,
        id
    );
    let state = s.start_state(f.pipeline).await.unwrap();
    assert_eq!(state.running.len(), 1);
}

/// A build made with its inputs fixed says the job no longer waits; a
/// manual one whose inputs are still to be resolved leaves the reason.
async fn a_created_build_clears_the_waiting_reason(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    let a = version(s, f.src, "a").await;
    let b = version(s, f.src, "b").await;
    let reason = r#"{"reason":"no_versions"}"#;
    s.set_job_waiting(f.build_job, Some(reason)).await.unwrap();
    s.create_scheduled_build(f.build_job, "p/build", "[]", &[], true, None, T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.job_waiting(f.build_job).await.unwrap().as_deref(),
        Some(reason)
    );
    let planned = [
        PlannedInput {
            name: "src".into(),
            resource_id: f.src,
            version_id: a,
        },
        PlannedInput {
            name: "again".into(),
            resource_id: f.src,
            version_id: b,
        },
    ];
    let made = s
        .create_scheduled_build(f.build_job, "p/build", "[]", &planned, false, None, T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.job_waiting(f.build_job).await.unwrap(), None);
    let (inputs, _) = s.build_versions(made.build.id).await.unwrap();
    let mut got: Vec<(String, i64)> = inputs
        .iter()
        .map(|i| (i.name.clone().unwrap_or_default(), i.version_id))
        .collect();
    got.sort();
    assert_eq!(got, [("again".to_string(), b), ("src".to_string(), a)]);
}

async fn one_node_holds_a_pipeline(store: Store) {
    let f = fixture(store).await;
    let s = &f.store;
    assert!(s
        .claim_pipeline_schedule(f.pipeline, "a", T0, 1000)
        .await
        .unwrap());
    assert!(!s
        .claim_pipeline_schedule(f.pipeline, "b", T0, 1000)
        .await
        .unwrap());
    // b cannot create a build under a lease it does not hold.
    let made = s
        .create_scheduled_build(
            f.build_job,
            "p/build",
            "[]",
            &[],
            false,
            Some((f.pipeline, "b")),
            T0,
        )
        .await
        .unwrap();
    assert!(made.is_none());
    // Once a's lease runs out, b takes over.
    assert!(s
        .claim_pipeline_schedule(f.pipeline, "b", T0 + 1001, 1000)
        .await
        .unwrap());
    s.release_pipeline_schedule(f.pipeline, "b").await.unwrap();
    assert!(s
        .claim_pipeline_schedule(f.pipeline, "a", T0 + 1002, 1000)
        .await
        .unwrap());
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::sqlite_store().await).await;
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::postgres_store().await).await;
            })*
        }
    };
}

both!(
    latest_skips_disabled_versions,
    every_walks_versions_in_order_over_gaps,
    passed_builds_page_newest_first,
    fan_in_with_a_version_disabled_after_it_passed,
    pins_match_as_concourse,
    used_before_and_held_builds,
    a_created_build_clears_the_waiting_reason,
    one_node_holds_a_pipeline,
);
