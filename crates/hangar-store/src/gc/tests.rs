//! An error on one subtree never blocks the rest: a trigger refuses to
//! delete "poison" rows, on both databases.

use crate::test_db::{postgres_store, worker_info};
use crate::{NewVolume, Store};
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
    chain_on(store, "w1", handles).await
}

async fn chain_on(store: &Store, worker: &str, handles: &[&str]) {
    let mut parent: Option<&str> = None;
    for h in handles {
        store
            .create_volume_row(
                &NewVolume {
                    handle: h.to_string(),
                    worker: worker.into(),
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
        .register_worker(&worker_info("w1"), T0)
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

/// Workers are shared out between the lanes that read and delete: every
/// worker's doomed rows go, a bad subtree on one worker keeps only itself,
/// and a subtree bigger than a batch goes in order.
async fn every_workers_missing_rows_go_whichever_lane_reads_them(store: Store) {
    poison(&store).await;
    for w in ["w1", "w2", "w3", "w4", "w5"] {
        let g = store
            .register_worker(&worker_info(w), T0)
            .await
            .unwrap()
            .generation;
        let h = |s: &str| format!("{w}-{s}");
        let (a, a1, a2) = (h("a"), h("a1"), h("a2"));
        let (b, b1) = (h("b"), h("b1"));
        chain_on(&store, w, &[&a, &a1, &a2]).await;
        chain_on(&store, w, &[&b, &b1]).await;
        let mut reported = vec![b.clone(), b1.clone()];
        if w == "w3" {
            let (p, p1) = (h("p"), format!("poison-{w}"));
            chain_on(&store, w, &[&p, &p1]).await;
        }
        if w == "w4" {
            let long: Vec<String> = (0..7).map(|i| h(&format!("long{i}"))).collect();
            let long: Vec<&str> = long.iter().map(String::as_str).collect();
            chain_on(&store, w, &long).await;
            // Only the base vanished: its live descendants go with it.
            reported.extend(long[1..].iter().map(|s| s.to_string()));
        }
        store
            .apply_volume_report(w, g, &reported, T0)
            .await
            .unwrap();
    }
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
            found: 5 * 3 + 2 + 7,
            destroyed: 5 * 3 + 7,
            failed: 2
        }
    );
    let left: Vec<String> = store
        .list_volumes(None)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.handle)
        .collect();
    let mut expected: Vec<String> = ["w1", "w2", "w3", "w4", "w5"]
        .iter()
        .flat_map(|w| [format!("{w}-b"), format!("{w}-b1")])
        .chain(["w3-p".to_string(), "poison-w3".to_string()])
        .collect();
    expected.sort();
    let mut left = left;
    left.sort();
    assert_eq!(left, expected);
}

#[tokio::test]
async fn sqlite_every_workers_missing_rows_go_whichever_lane_reads_them() {
    every_workers_missing_rows_go_whichever_lane_reads_them(crate::test_db::sqlite_store().await)
        .await
}

#[tokio::test]
async fn postgres_every_workers_missing_rows_go_whichever_lane_reads_them() {
    every_workers_missing_rows_go_whichever_lane_reads_them(postgres_store().await).await
}

#[tokio::test]
async fn sqlite_one_bad_subtree_is_counted_and_skipped() {
    one_bad_subtree_is_counted_and_skipped(crate::test_db::sqlite_store().await).await
}

#[tokio::test]
async fn postgres_one_bad_subtree_is_counted_and_skipped() {
    one_bad_subtree_is_counted_and_skipped(postgres_store().await).await
}
