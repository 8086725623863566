//! Quiet reports: a report with the handles of the worker's last quiet
//! report, while none of its rows changed, is answered without reading
//! them; every kind of change to a row ends the quiet, on SQLite and
//! PostgreSQL alike.

use hangar_core::gc::GcConfig;
use hangar_core::volumes::{OwnerKind, ReportPlan, Strategy};
use hangar_store::{AppliedReport, NewVolume, Store, WorkerInfo};
use hangar_testkit::{on_both_databases, planned_report, sorted_plan, worker_info};

const T0: i64 = 1_700_000_000_000;

fn info(name: &str, identity: &str) -> WorkerInfo {
    WorkerInfo {
        state_identity: identity.into(),
        ..worker_info(name)
    }
}

fn vol(handle: &str, worker: &str) -> NewVolume {
    NewVolume {
        handle: handle.into(),
        worker: worker.into(),
        parent: None,
        owner_kind: OwnerKind::TaskCache,
        owner_id: Some("job/step/path".into()),
        strategy: Strategy::Empty,
    }
}

fn handles(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `w` registered with created volumes `a` and `b`; returns the generation.
async fn worker_with_a_and_b(store: &Store, w: &str) -> i64 {
    let g = store
        .register_worker(&info(w, "disk-1"), T0)
        .await
        .unwrap()
        .generation;
    for h in ["a", "b"] {
        let h = format!("{w}-{h}");
        store.create_volume_row(&vol(&h, w), T0).await.unwrap();
        store.finish_volume_creation(&h, Ok(Some(1))).await.unwrap();
    }
    g
}

async fn report(store: &Store, w: &str, g: i64, listed: &[String], now: i64) -> AppliedReport {
    store
        .apply_volume_report_counted(w, g, listed, now)
        .await
        .unwrap()
}

async fn a_report_with_the_same_handles_and_unchanged_rows_reads_nothing(store: Store) {
    let g = worker_with_a_and_b(&store, "w").await;
    let listed = handles(&["w-a", "w-b"]);
    let first = report(&store, "w", g, &listed, T0).await;
    assert!(first.read_rows, "the first report reads the rows");
    assert_eq!(first.plan, ReportPlan::default());
    // The same set, in another order and with a repeat: quiet.
    for again in [handles(&["w-b", "w-a"]), handles(&["w-a", "w-b", "w-a"])] {
        let next = report(&store, "w", g, &again, T0).await;
        assert!(!next.read_rows, "{again:?} was answered from the stamp");
        assert_eq!(next.plan, ReportPlan::default());
    }
    // Another set is read, and planned from the rows.
    let fewer = handles(&["w-a"]);
    let expected = planned_report(&store, "w", &fewer).await;
    let other = report(&store, "w", g, &fewer, T0).await;
    assert!(other.read_rows);
    assert_eq!(sorted_plan(other.plan), expected);
    assert_eq!(expected.mark_missing, handles(&["w-b"]));
    // A report that changed rows leaves no quiet behind: the next one
    // reads again (and clears the mark it set).
    let back = report(&store, "w", g, &listed, T0).await;
    assert!(back.read_rows);
    assert_eq!(back.plan.clear_missing, handles(&["w-b"]));
}

/// Every way a row the planner reads can change, between a quiet report
/// and the next with the same handles.
#[derive(Debug, Clone, Copy)]
enum Change {
    RowMade,
    CreationFinished,
    DestroyAsked,
    MarkedMissing,
    AbandonedByGc,
    BulkInserted,
    DiskLost,
}

async fn every_change_to_a_row_ends_the_quiet(store: Store) {
    let listed = handles(&["w-a", "w-b"]);
    let cases = [
        Change::RowMade,
        Change::CreationFinished,
        Change::DestroyAsked,
        Change::MarkedMissing,
        Change::AbandonedByGc,
        Change::BulkInserted,
        Change::DiskLost,
    ];
    for (i, change) in cases.into_iter().enumerate() {
        let w = "w";
        let mut g = worker_with_a_and_b(&store, w).await;
        // A creation left hanging, for the changes that end one.
        let c = format!("w-c{i}");
        if matches!(change, Change::CreationFinished | Change::AbandonedByGc) {
            store.create_volume_row(&vol(&c, w), T0).await.unwrap();
        }
        report(&store, w, g, &listed, T0).await;
        assert!(
            !report(&store, w, g, &listed, T0).await.read_rows,
            "{change:?}: quiet before the change"
        );
        let mut now = T0;
        match change {
            Change::RowMade => {
                store.create_volume_row(&vol(&c, w), T0).await.unwrap();
            }
            Change::CreationFinished => {
                store.finish_volume_creation(&c, Ok(Some(1))).await.unwrap();
            }
            Change::DestroyAsked => {
                store.destroy_volume("w-b").await.unwrap();
            }
            Change::MarkedMissing => {
                assert!(store.mark_volume_missing("w-a", T0).await.unwrap());
            }
            Change::AbandonedByGc => {
                let config = GcConfig {
                    abandoned_creation_ms: 1_000,
                    ..GcConfig::default()
                };
                now = T0 + 2_000;
                for (collector, result) in store.run_gc(&config, now).await {
                    result.unwrap_or_else(|e| panic!("{collector}: {e}"));
                }
            }
            Change::BulkInserted => {
                store
                    .insert_created_volumes(&[vol(&c, w)], T0)
                    .await
                    .unwrap();
            }
            Change::DiskLost => {
                g = store
                    .register_worker(&info(w, "disk-2"), T0)
                    .await
                    .unwrap()
                    .generation;
            }
        }
        let expected = planned_report(&store, w, &listed).await;
        let after = report(&store, w, g, &listed, now).await;
        assert!(after.read_rows, "{change:?}: the change was read");
        assert_eq!(sorted_plan(after.plan.clone()), expected, "{change:?}");
        let shows = match change {
            // A row being made is nothing to a report yet; the test is that
            // it was read at all.
            Change::RowMade => true,
            Change::CreationFinished | Change::BulkInserted => expected.mark_missing == [c.clone()],
            Change::DestroyAsked => expected.destroy_on_worker == handles(&["w-b"]),
            Change::MarkedMissing => expected.clear_missing == handles(&["w-a"]),
            Change::AbandonedByGc => expected.delete_rows == [c.clone()],
            Change::DiskLost => expected.destroy_on_worker == listed,
        };
        assert!(shows, "{change:?}: {expected:?}");
        // Leave no rows for the next case.
        store
            .register_worker(&info(w, &format!("wiped-{i}")), now)
            .await
            .unwrap();
    }
}

async fn a_quiet_report_of_a_superseded_generation_is_still_refused(store: Store) {
    let g = worker_with_a_and_b(&store, "w").await;
    let listed = handles(&["w-a", "w-b"]);
    report(&store, "w", g, &listed, T0).await;
    assert!(!report(&store, "w", g, &listed, T0).await.read_rows);
    // The same disk registers again: the rows stay, the generation moves.
    let g2 = store
        .register_worker(&info("w", "disk-1"), T0)
        .await
        .unwrap()
        .generation;
    assert_ne!(g, g2);
    let refused = store.apply_volume_report_counted("w", g, &listed, T0).await;
    assert!(refused.is_err(), "{refused:?}");
    let unknown = store
        .apply_volume_report_counted("nobody", g, &listed, T0)
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
}

on_both_databases!(
    a_report_with_the_same_handles_and_unchanged_rows_reads_nothing,
    every_change_to_a_row_ends_the_quiet,
    a_quiet_report_of_a_superseded_generation_is_still_refused,
);
