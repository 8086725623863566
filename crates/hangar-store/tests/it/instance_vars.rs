//! Migration 0024: a pipeline's identity is (team, name, instance vars), the
//! vars held as canonical JSON. Pipelines set before it hold '{}', rows that
//! refer to pipelines survive the rebuild (SQLite), and the uniqueness is on
//! all three, on both databases.

use hangar_core::instance_vars::InstanceVars;
use hangar_core::pipeline::parse_pipeline;
use hangar_store::Store;
use sqlx::any::AnyPoolOptions;
use sqlx::Row;

const T0: i64 = 1_700_000_000_000;

const ONE_JOB: &str = "
resources:
- name: r
  type: mock
  source: {}
jobs:
- name: build
  plan:
  - get: r
";

async fn check(store: Store, url: &str) {
    sqlx::any::install_default_drivers();
    let config = parse_pipeline(ONE_JOB).unwrap().config;
    store
        .set_pipeline("main", "p", &config, None, T0)
        .await
        .unwrap();
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    let id: i64 = sqlx::query("SELECT id FROM pipelines WHERE name = 'p'")
        .fetch_one(&pool)
        .await
        .unwrap()
        .try_get("id")
        .unwrap();
    let vars: String = sqlx::query("SELECT instance_vars FROM pipelines WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap()
        .try_get("instance_vars")
        .unwrap();
    assert_eq!(vars, "{}", "a pipeline set without vars is not an instance");

    let insert = |vars: String| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "INSERT INTO pipelines (team_id, name, paused, config_version, created_at, \
                 updated_at, instance_vars) \
                 SELECT team_id, name, 1, 1, 0, 0, $1 FROM pipelines WHERE name = 'p' \
                 AND instance_vars = '{}'",
            )
            .bind(vars)
            .execute(&pool)
            .await
        }
    };
    let a = InstanceVars::from_json(r#"{"branch":"main","n":1}"#).unwrap();
    let a_again = InstanceVars::from_json(r#"{"n":1,"branch":"main"}"#).unwrap();
    let b = InstanceVars::from_json(r#"{"branch":"dev","n":1}"#).unwrap();
    insert(a.canonical_json())
        .await
        .expect("an instance beside the plain pipeline");
    insert(b.canonical_json()).await.expect("a second instance");
    let count = |pool: sqlx::AnyPool| async move {
        sqlx::query("SELECT COUNT(*) AS n FROM pipelines WHERE name = 'p'")
            .fetch_one(&pool)
            .await
            .unwrap()
            .try_get::<i64, _>("n")
            .unwrap()
    };
    assert_eq!(count(pool.clone()).await, 3);
    // The same vars written in another key order are the same instance.
    insert(a_again.canonical_json())
        .await
        .expect_err("one instance per (team, name, vars)");
    insert("{}".into())
        .await
        .expect_err("one plain pipeline per name");
    assert_eq!(
        count(pool.clone()).await,
        3,
        "a refused insert adds nothing"
    );

    // The plain pipeline's jobs still refer to it, and it is still set the
    // same way (its ON CONFLICT names the new uniqueness).
    assert_eq!(store.jobs("main", "p", false).await.unwrap().len(), 1);
    let again = store
        .set_pipeline("main", "p", &config, Some(1), T0 + 1)
        .await
        .unwrap();
    assert_eq!(again.version, 2);
    pool.close().await;
}

#[tokio::test]
async fn sqlite_instances_are_unique_by_team_name_and_vars() {
    let dir = tempfile::tempdir().unwrap();
    let url = hangar_testkit::sqlite_file_url(dir.path());
    let store = Store::open(&url).await.unwrap();
    // Foreign keys came back on after the rebuild and nothing dangles.
    check(store.clone(), &url).await;
    let pool = AnyPoolOptions::new().connect(&url).await.unwrap();
    let dangling = sqlx::query("PRAGMA foreign_key_check")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(dangling.is_empty());
}

#[tokio::test]
async fn postgres_instances_are_unique_by_team_name_and_vars() {
    let (store, url) = hangar_testkit::postgres_store_with_url().await;
    check(store, &url).await;
}

/// A SQLite database made before 0024 keeps its pipelines' ids and every row
/// that refers to them through the rebuild, and its foreign keys still
/// cascade after it.
#[tokio::test]
async fn sqlite_rebuild_keeps_rows_that_refer_to_pipelines() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("migrations");
    std::fs::create_dir(&old).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.as_str() < "0024" {
            std::fs::copy(&path, old.join(&name)).unwrap();
        }
    }
    let url = hangar_testkit::sqlite_file_url(dir.path());
    sqlx::any::install_default_drivers();
    {
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::migrate::Migrator::new(old.as_path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        for sql in [
            "PRAGMA foreign_keys = ON",
            "INSERT INTO pipelines (id, team_id, name, paused, config_version, created_at, \
             updated_at) SELECT 7, id, 'old', 0, 1, 0, 0 FROM teams WHERE name = 'main'",
            "INSERT INTO exposed_pipelines (pipeline_id) VALUES (7)",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.pipeline("main", "old").await.unwrap().id, 7);
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(conn, "PRAGMA foreign_keys = ON").await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .unwrap();
    let exposed = |pool: sqlx::AnyPool| async move {
        sqlx::query("SELECT COUNT(*) AS n FROM exposed_pipelines WHERE pipeline_id = 7")
            .fetch_one(&pool)
            .await
            .unwrap()
            .try_get::<i64, _>("n")
            .unwrap()
    };
    assert_eq!(
        exposed(pool.clone()).await,
        1,
        "the rebuild cascaded nothing"
    );
    store.destroy_pipeline("main", "old", T0).await.unwrap();
    assert_eq!(
        exposed(pool.clone()).await,
        0,
        "keys cascade after the rebuild"
    );
}

async fn instances_are_set_and_read_by_their_vars(store: Store) {
    use hangar_store::Created;
    let config = parse_pipeline(ONE_JOB).unwrap().config;
    let main = InstanceVars::from_flags(&["branch=main"]).unwrap();
    let dev = InstanceVars::from_flags(&["branch=dev"]).unwrap();
    let set = |vars: InstanceVars, expected: Option<i64>| {
        let store = store.clone();
        let config = config.clone();
        async move {
            store
                .set_pipeline_instance("main", "p", &vars, &config, expected, Created::Paused, T0)
                .await
        }
    };
    let a = set(main.clone(), None).await.unwrap();
    let b = set(dev.clone(), None).await.unwrap();
    assert!(a.created && b.created);
    assert_eq!(set(main.clone(), Some(1)).await.unwrap().version, 2);
    // A stale version of one instance is refused and changes nothing.
    assert!(set(dev.clone(), Some(5)).await.is_err());
    let dev_row = store.pipeline_instance("main", "p", &dev).await.unwrap();
    assert_eq!(dev_row.config_version, 1);
    assert_eq!(dev_row.instance_vars, r#"{"branch":"dev"}"#);
    // The plain pipeline is none of them.
    assert!(store.pipeline("main", "p").await.is_err());
    assert_eq!(store.jobs("main", "p", false).await.ok(), None);
    let listed = store.pipelines("main").await.unwrap();
    let vars: Vec<&str> = listed.iter().map(|p| p.instance_vars.as_str()).collect();
    assert_eq!(vars, [r#"{"branch":"main"}"#, r#"{"branch":"dev"}"#]);
    // Another team does not see them.
    assert!(store.pipeline_instance("other", "p", &dev).await.is_err());
}

/// Every call that takes a pipeline takes its reference, so an instance is
/// driven through the same calls as a plain pipeline; a rename moves it
/// into another group with its vars.
async fn instances_are_addressed_by_their_reference(store: Store) {
    let config = parse_pipeline(ONE_JOB).unwrap().config;
    let main = store
        .set_pipeline("main", "p/branch:main", &config, Some(0), T0)
        .await
        .unwrap();
    assert!(main.created);
    store
        .set_pipeline("main", "p/branch:dev", &config, None, T0)
        .await
        .unwrap();
    let row = store.pipeline("main", "p/branch:main").await.unwrap();
    assert_eq!(row.instance_vars, r#"{"branch":"main"}"#);
    assert_eq!(row.reference(), "p/branch:main");
    assert_eq!(
        store.jobs("main", "p/branch:dev", false).await.unwrap()[0].name,
        "build"
    );
    assert_eq!(
        store
            .resource("main", "p/branch:dev", "r")
            .await
            .unwrap()
            .pipeline_id,
        store.pipeline("main", "p/branch:dev").await.unwrap().id
    );
    store
        .set_pipeline_paused("main", "p/branch:dev", false, T0 + 1)
        .await
        .unwrap();
    assert!(
        store
            .pipeline("main", "p/branch:main")
            .await
            .unwrap()
            .paused
    );
    assert!(!store.pipeline("main", "p/branch:dev").await.unwrap().paused);

    // Unknown and unreadable references are not found, naming what was asked.
    for missing in ["p/branch:nope", "p/branch", "p/", "q/branch:main"] {
        match store.pipeline("main", missing).await {
            Err(hangar_store::StoreError::NotFound(m)) => {
                assert!(m.contains(missing), "{missing}: {m}")
            }
            other => panic!("{missing}: {other:?}"),
        }
    }

    // A rename keeps the vars; onto an instance that exists it is refused
    // and changes nothing.
    store
        .set_pipeline("main", "q/branch:main", &config, None, T0)
        .await
        .unwrap();
    let before = store.pipelines("main").await.unwrap();
    let refused = store
        .rename_pipeline("main", "p/branch:main", "q", T0 + 2)
        .await
        .expect_err("q/branch:main exists");
    assert!(
        refused.to_string().contains("q/branch:main already exists"),
        "{refused}"
    );
    assert_eq!(store.pipelines("main").await.unwrap(), before);
    store
        .rename_pipeline("main", "p/branch:dev", "q", T0 + 2)
        .await
        .unwrap();
    assert!(!store.pipeline("main", "q/branch:dev").await.unwrap().paused);
    assert!(store.pipeline("main", "p/branch:dev").await.is_err());

    store
        .destroy_pipeline("main", "q/branch:dev", T0 + 3)
        .await
        .unwrap();
    let left: Vec<String> = store
        .pipelines("main")
        .await
        .unwrap()
        .iter()
        .map(|p| p.reference())
        .collect();
    assert_eq!(left, ["p/branch:main", "q/branch:main"]);
}

hangar_testkit::on_both_databases!(
    instances_are_set_and_read_by_their_vars,
    instances_are_addressed_by_their_reference
);
