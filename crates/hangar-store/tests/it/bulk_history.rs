//! A pipeline's history inserted at once reads back as the one-row paths
//! write it, on SQLite and PostgreSQL alike.

use hangar_core::pipeline::parse_pipeline;
use hangar_store::{HistoricBuild, Store, VersionPage};
use hangar_testkit::on_both_databases;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

const PIPELINE: &str = "
resources:
- {name: repo, type: mock, source: {n: 1}}
jobs:
- {name: build, plan: [{get: repo}, {put: repo}]}
";

async fn bulk_history_reads_back_in_order(store: Store) {
    let config = parse_pipeline(PIPELINE).unwrap().config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    let repo = store.resource("main", "p", "repo").await.unwrap();
    let job = store.job("main", "p", "build").await.unwrap();

    // 450 versions (more than one statement), one of them given twice.
    let mut versions: Vec<_> = (0..450).map(|i| json!({"n": i.to_string()})).collect();
    versions.push(json!({"n": "7"}));
    let ids = store.insert_versions(repo.id, &versions, T0).await.unwrap();
    assert_eq!(ids.len(), 450, "the repeated version is skipped");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // A version saved the one-row way comes after them.
    let next = store
        .save_resource_version(repo.id, &json!({"n": "new"}), &json!([]), T0)
        .await
        .unwrap();
    assert_eq!(next.check_order, 451);
    let page = VersionPage {
        limit: 2,
        ..Default::default()
    };
    let newest = store
        .resource_versions("main", "p", "repo", page)
        .await
        .unwrap();
    assert_eq!(newest[1].id, ids[449]);
    assert_eq!(newest[1].version, r#"{"n":"449"}"#);

    let builds: Vec<HistoricBuild> = (0..250)
        .map(|i| HistoricBuild {
            inputs: vec![("repo".into(), repo.id, ids[i])],
            outputs: vec![(repo.id, ids[i + 1])],
        })
        .collect();
    let made = store
        .insert_succeeded_job_builds(job.id, "p/build", &builds, T0)
        .await
        .unwrap();
    assert_eq!(made.len(), 250);
    let listed = store.job_builds(job.id, 3).await.unwrap();
    assert_eq!(
        listed.iter().map(|b| b.number).collect::<Vec<_>>(),
        [250, 249, 248]
    );
    assert_eq!(listed[0].build.id, made[249]);
    assert_eq!(listed[0].build.name, "p/build #250");
    let (inputs, outputs) = store.build_versions(made[249]).await.unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].version_id, ids[249]);
    let mut out: Vec<i64> = outputs.iter().map(|o| o.version_id).collect();
    out.sort_unstable();
    assert_eq!(out, [ids[249], ids[250]], "inputs are outputs too");
    // The next build the usual way is numbered after them.
    let next = store
        .create_job_build(job.id, "p/build", "[]", T0)
        .await
        .unwrap();
    assert_eq!(next.number, 251);
}

on_both_databases!(bulk_history_reads_back_in_order);
