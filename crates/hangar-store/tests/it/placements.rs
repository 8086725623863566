//! Placement's count of each worker's active build steps: a step counts
//! from the moment placement records it until it or its build ends.

use hangar_core::build::{BuildStatus, StepKind, StepState};
use hangar_core::placement::Load;
use hangar_store::{StepRecord, Store};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 6_000;

fn step(build_id: i64, step_id: &str, kind: StepKind, state: StepState) -> StepRecord {
    StepRecord {
        build_id,
        step_id: step_id.into(),
        name: step_id.into(),
        kind,
        state,
        attempt: 1,
        worker: None,
        container: None,
        log_offset: 0,
        exit_code: None,
        outputs: "{}".into(),
        error: None,
        started_at: Some(T0),
        finished_at: None,
        version: None,
    }
}

fn load(build_steps: i64, tasks: i64) -> Load {
    Load {
        build_steps,
        tasks,
        volumes: 0,
    }
}

/// A started build (claimed with lease token 1... n) and its steps.
async fn started(store: &Store, steps: &[(&str, StepKind)]) -> (i64, i64) {
    let b = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    let claimed = store.claim_build("node", T0, LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, b.id);
    for (id, kind) in steps {
        store
            .save_step(&step(b.id, id, *kind, StepState::Running))
            .await
            .unwrap();
    }
    (b.id, claimed.lease_token)
}

async fn placed_steps_count_until_they_or_their_build_end(store: Store) {
    assert!(store.placement_loads().await.unwrap().is_empty());
    let (b1, lease1) = started(
        &store,
        &[
            ("0", StepKind::Get),
            ("1", StepKind::Task),
            ("2", StepKind::Task),
        ],
    )
    .await;
    assert_eq!(
        store.step_kind(b1, "1").await.unwrap(),
        Some(StepKind::Task)
    );
    assert_eq!(store.step_kind(b1, "9").await.unwrap(), None);
    // Not placed yet: nothing counts.
    assert!(store.placement_loads().await.unwrap().is_empty());
    for (id, worker) in [("0", "w1"), ("1", "w1"), ("2", "w2")] {
        assert!(store
            .record_step_placement(b1, id, worker, lease1)
            .await
            .unwrap());
    }
    let loads = store.placement_loads().await.unwrap();
    assert_eq!(loads.get("w1"), Some(&load(2, 1)));
    assert_eq!(loads.get("w2"), Some(&load(1, 1)));

    // Placed again (a retry elsewhere): it moves.
    assert!(store
        .record_step_placement(b1, "0", "w2", lease1)
        .await
        .unwrap());
    let loads = store.placement_loads().await.unwrap();
    assert_eq!(loads.get("w1"), Some(&load(1, 1)));
    assert_eq!(loads.get("w2"), Some(&load(2, 1)));

    // A step that finished no longer counts.
    store
        .save_step(&step(b1, "1", StepKind::Task, StepState::Succeeded))
        .await
        .unwrap();
    let loads = store.placement_loads().await.unwrap();
    assert_eq!(loads.get("w1"), None);
    assert_eq!(loads.get("w2"), Some(&load(2, 1)));

    // A stale claim, or a step without a row, records nothing.
    assert!(!store
        .record_step_placement(b1, "2", "w1", lease1 + 1)
        .await
        .unwrap());
    assert!(!store
        .record_step_placement(b1, "9", "w1", lease1)
        .await
        .unwrap());
    assert_eq!(
        store.placement_loads().await.unwrap().get("w2"),
        Some(&load(2, 1))
    );

    // A second build's steps add up; the first build's end takes its
    // running steps out with it.
    let (b2, lease2) = started(&store, &[("0", StepKind::Put)]).await;
    assert!(store
        .record_step_placement(b2, "0", "w2", lease2)
        .await
        .unwrap());
    assert_eq!(
        store.placement_loads().await.unwrap().get("w2"),
        Some(&load(3, 1))
    );
    assert!(store
        .finish_build(b1, lease1, BuildStatus::Failed, None, None, T0 + 1)
        .await
        .unwrap());
    let loads = store.placement_loads().await.unwrap();
    assert_eq!(loads.len(), 1);
    assert_eq!(loads.get("w2"), Some(&load(1, 0)));
    // And a finished build records no placement.
    assert!(!store
        .record_step_placement(b1, "2", "w1", lease1)
        .await
        .unwrap());
}

on_both_databases!(placed_steps_count_until_they_or_their_build_end);
