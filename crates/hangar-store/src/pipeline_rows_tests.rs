//! A destroyed pipeline leaves no row in any table under it, on both
//! databases (counted with raw SQL, behind the store's back), and a stored
//! config that no longer parses is a corrupt row, never an empty config.

use hangar_core::pipeline::parse_pipeline;
use serde_json::json;
use sqlx::Row;

use crate::test_db::{postgres_store, sqlite_store};
use crate::{Store, StoreError};

const T0: i64 = 1_700_000_000_000;

const CONFIG: &str = "
resources:
- {name: repo, type: git, source: {uri: x}}
resource_types:
- {name: custom, type: registry-image, source: {repository: r}}
jobs:
- {name: build, plan: [{get: repo}]}
- {name: test, plan: [{get: repo, passed: [build]}]}
";

const TABLES: [&str; 5] = [
    "pipeline_configs",
    "jobs",
    "resources",
    "resource_types",
    "pipelines",
];

async fn count(store: &Store, table: &str) -> i64 {
    sqlx::query(&format!("SELECT COUNT(*) AS n FROM {table}"))
        .fetch_one(&store.pool)
        .await
        .unwrap()
        .try_get("n")
        .unwrap()
}

async fn destroy_leaves_no_row_behind(store: Store) {
    let config = parse_pipeline(CONFIG).unwrap().config;
    for version in 0..2 {
        store
            .set_pipeline("main", "p", &config, None, T0 + version)
            .await
            .unwrap();
    }
    let repo = store.resource("main", "p", "repo").await.unwrap();
    store
        .save_resource_version(repo.id, &json!({"ref": "a"}), &json!([]), T0)
        .await
        .unwrap();
    let counts: Vec<i64> =
        futures_util::future::join_all(TABLES.iter().map(|t| count(&store, t))).await;
    assert_eq!(counts, [2, 2, 1, 1, 1]);
    assert_eq!(count(&store, "resource_versions").await, 1);

    store.destroy_pipeline("main", "p", T0).await.unwrap();
    for table in TABLES
        .iter()
        .chain(&["resource_versions", "resource_scopes"])
    {
        assert_eq!(count(&store, table).await, 0, "{table}");
    }
    assert_eq!(count(&store, "teams").await, 1, "the team stays");
}

async fn a_stored_config_that_does_not_parse_is_corrupt(store: Store) {
    let config = parse_pipeline(CONFIG).unwrap().config;
    let saved = store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    sqlx::query("UPDATE pipeline_configs SET config = 'not json' WHERE pipeline_id = $1")
        .bind(saved.pipeline_id)
        .execute(&store.pool)
        .await
        .unwrap();
    match store.pipeline_config("main", "p", None).await {
        Err(StoreError::Corrupt(m)) => {
            assert!(m.starts_with("pipeline_configs row pipeline_id "), "{m}");
            assert!(m.contains("column config"), "{m}");
        }
        other => panic!("expected a corrupt row, got {other:?}"),
    }
}

#[tokio::test]
async fn sqlite_destroy_leaves_no_row_behind() {
    destroy_leaves_no_row_behind(sqlite_store().await).await;
}

#[tokio::test]
async fn postgres_destroy_leaves_no_row_behind() {
    destroy_leaves_no_row_behind(postgres_store().await).await;
}

#[tokio::test]
async fn sqlite_a_stored_config_that_does_not_parse_is_corrupt() {
    a_stored_config_that_does_not_parse_is_corrupt(sqlite_store().await).await;
}

#[tokio::test]
async fn postgres_a_stored_config_that_does_not_parse_is_corrupt() {
    a_stored_config_that_does_not_parse_is_corrupt(postgres_store().await).await;
}

async fn an_archived_pipeline_stays_paused_until_it_is_set_again(store: Store) {
    let config = parse_pipeline(CONFIG).unwrap().config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    store
        .set_pipeline_paused("main", "p", false, T0)
        .await
        .unwrap();
    store.archive_pipeline("main", "p", T0 + 1).await.unwrap();
    let p = store.pipeline("main", "p").await.unwrap();
    assert!(p.archived && p.paused, "{p:?}");
    assert!(store.jobs("main", "p", false).await.unwrap().is_empty());
    // Its rows stay: its history is kept.
    assert_eq!(count(&store, "jobs").await, 2);
    assert!(matches!(
        store.set_pipeline_paused("main", "p", false, T0 + 2).await,
        Err(StoreError::Conflict(m)) if m.contains("archived")
    ));
    assert!(store.pipeline("main", "p").await.unwrap().paused);
    // Set again: back, paused, its jobs active again.
    store
        .set_pipeline("main", "p", &config, None, T0 + 3)
        .await
        .unwrap();
    let p = store.pipeline("main", "p").await.unwrap();
    assert!(!p.archived && p.paused, "{p:?}");
    assert_eq!(store.jobs("main", "p", false).await.unwrap().len(), 2);
    store
        .set_pipeline_paused("main", "p", false, T0 + 4)
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_an_archived_pipeline_stays_paused_until_it_is_set_again() {
    an_archived_pipeline_stays_paused_until_it_is_set_again(sqlite_store().await).await;
}

#[tokio::test]
async fn postgres_an_archived_pipeline_stays_paused_until_it_is_set_again() {
    an_archived_pipeline_stays_paused_until_it_is_set_again(postgres_store().await).await;
}

async fn pipelines_are_listed_in_the_order_set_and_new_ones_go_last(store: Store) {
    let config = parse_pipeline(CONFIG).unwrap().config;
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        store
            .set_pipeline("main", name, &config, None, T0 + i as i64)
            .await
            .unwrap();
    }
    let names = |ps: Vec<crate::PipelineRecord>| -> Vec<String> {
        ps.into_iter().map(|p| p.name).collect()
    };
    assert_eq!(
        names(store.pipelines("main").await.unwrap()),
        ["a", "b", "c"]
    );
    store
        .order_pipelines("main", &["c".into(), "a".into()])
        .await
        .unwrap();
    assert_eq!(
        names(store.pipelines("main").await.unwrap()),
        ["c", "a", "b"]
    );
    store
        .set_pipeline("main", "d", &config, None, T0 + 9)
        .await
        .unwrap();
    assert_eq!(
        names(store.pipelines("main").await.unwrap()),
        ["c", "a", "b", "d"]
    );
    // An unknown name changes nothing.
    assert!(matches!(
        store
            .order_pipelines("main", &["b".into(), "nope".into()])
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        names(store.pipelines("main").await.unwrap()),
        ["c", "a", "b", "d"]
    );
}

#[tokio::test]
async fn sqlite_pipelines_are_listed_in_the_order_set() {
    pipelines_are_listed_in_the_order_set_and_new_ones_go_last(sqlite_store().await).await;
}

#[tokio::test]
async fn postgres_pipelines_are_listed_in_the_order_set() {
    pipelines_are_listed_in_the_order_set_and_new_ones_go_last(postgres_store().await).await;
}
