//! An error on one subtree never blocks the rest: a trigger refuses to
//! delete "poison" rows, on both databases.

use crate::test_db::postgres_store;
use crate::{NewVolume, Store, WorkerInfo};
use hangar_core::gc::{Collector, CollectorStats, GcConfig};
use hangar_core::volumes::OwnerKind;

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

async fn poison(store: &Store) {
    let statements: &[&str] = match store.backend() {
        crate::Backend::Sqlite => &["CREATE TRIGGER poison BEFORE DELETE ON volumes \
             WHEN old.handle LIKE 'poison%' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"],
        crate::Backend::Postgres => &[
            "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN \
             IF old.handle LIKE 'poison%' THEN RAISE EXCEPTION 'poisoned row'; END IF; \
             RETURN old; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER poison BEFORE DELETE ON volumes FOR EACH ROW EXECUTE FUNCTION poison()",
        ],
    };
    for s in statements {
        sqlx::query(s).execute(&store.pool).await.unwrap();
    }
}

async fn chain(store: &Store, handles: &[&str]) {
    let mut parent: Option<&str> = None;
    for h in handles {
        store
            .create_volume_row(
                &NewVolume {
                    handle: h.to_string(),
                    worker: "w1".into(),
                    parent: parent.map(str::to_string),
                    owner_kind: OwnerKind::Container,
                    owner_id: None,
                    strategy: hangar_core::volumes::Strategy::Empty,
                },
                T0,
            )
            .await
            .unwrap();
        store.finish_volume_creation(h, Ok(None)).await.unwrap();
        parent = Some(h);
    }
}

async fn one_bad_subtree_is_counted_and_skipped(store: Store) {
    let g = store
        .register_worker(
            &WorkerInfo {
                name: "w1".into(),
                state_identity: "i".into(),
                platform: "linux".into(),
                tags: vec![],
                team: None,
                version: "0".into(),
                resource_types_json: "[]".into(),
                ephemeral: false,
                containers: 0,
                volumes: 0,
                api_url: None,
            },
            T0,
        )
        .await
        .unwrap()
        .generation;
    poison(&store).await;
    chain(&store, &["a", "poison-a1"]).await;
    chain(&store, &["b", "b1"]).await;
    chain(&store, &["c"]).await;
    // A chain longer than a batch, poisoned in its deepest batch: its
    // later batches wait too.
    chain(&store, &["r", "r1", "poison-r2", "r3"]).await;
    chain(&store, &["s", "s1"]).await;
    store.apply_volume_report("w1", g, &[], T0).await.unwrap();
    let config = GcConfig {
        batch_size: 3,
        ..GcConfig::default()
    };
    let stats = store
        .run_collector(Collector::MissingVolumes, &config, T0 + 5 * MIN)
        .await
        .unwrap();
    assert_eq!(
        stats,
        CollectorStats {
            found: 11,
            destroyed: 5,
            failed: 6
        }
    );
    let left: Vec<String> = store
        .list_volumes(None)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.handle)
        .collect();
    assert_eq!(left, ["a", "poison-a1", "poison-r2", "r", "r1", "r3"]);
}

#[tokio::test]
async fn sqlite_one_bad_subtree_is_counted_and_skipped() {
    one_bad_subtree_is_counted_and_skipped(crate::test_db::sqlite_store().await).await
}

#[tokio::test]
async fn postgres_one_bad_subtree_is_counted_and_skipped() {
    one_bad_subtree_is_counted_and_skipped(postgres_store().await).await
}
