//! Build leases between web nodes: each claim is a fencing token, and a
//! node whose lease another node took cannot write to the build at all.

use hangar_core::build::{BuildEventKind, BuildStatus, StepKind, StepState};
use hangar_store::{StepRecord, Store};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 6_000;

fn step(build_id: i64, state: StepState) -> StepRecord {
    StepRecord {
        build_id,
        step_id: "0".into(),
        name: "t".into(),
        kind: StepKind::Task,
        state,
        attempt: 1,
        worker: Some("w1".into()),
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

/// Everything a node writes to a build, as seen from outside.
async fn written(store: &Store, id: i64) -> String {
    let build = store.get_build(id).await.unwrap().unwrap();
    let steps = store.build_steps(id).await.unwrap();
    let events = store.build_events(id, 0, 100).await.unwrap();
    format!("{build:?}{steps:?}{events:?}")
}

async fn a_stale_claim_cannot_write_once_another_node_took_the_build(store: Store) {
    let b = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    let a = store
        .claim_build("node-a", T0, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.id, a.lease_token), (b.id, 1));
    // Held: nobody else may take it, and its holder writes.
    assert!(store
        .claim_build("node-b", T0 + LEASE, LEASE)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .save_step_under_lease(&step(b.id, StepState::Running), 1)
        .await
        .unwrap());
    assert!(store
        .append_build_event_under_lease(b.id, 1, None, BuildEventKind::Log, "a\n", T0)
        .await
        .unwrap()
        .is_some());
    assert!(store
        .renew_build_lease(b.id, 1, T0 + 1_000, LEASE)
        .await
        .unwrap());

    // Node a pauses past its lease; node b takes the build over.
    let later = T0 + 1_000 + LEASE + 1;
    let taken = store
        .claim_build("node-b", later, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id, taken.lease_token), (b.id, 2));
    let before = written(&store, b.id).await;

    // Node a wakes up: every write it tries is refused and changes nothing.
    assert!(!store
        .save_step_under_lease(&step(b.id, StepState::Succeeded), 1)
        .await
        .unwrap());
    assert!(store
        .append_build_event_under_lease(b.id, 1, None, BuildEventKind::Log, "stale\n", later)
        .await
        .unwrap()
        .is_none());
    assert!(!store
        .renew_build_lease(b.id, 1, later, LEASE)
        .await
        .unwrap());
    assert!(!store.release_build_lease(b.id, 1).await.unwrap());
    assert!(!store
        .finish_build(b.id, 1, BuildStatus::Failed, Some(1), None, later)
        .await
        .unwrap());
    assert_eq!(written(&store, b.id).await, before);

    // The same node name claiming again is a new claim: the old run's token
    // stays refused (a node that took back its own build after a pause).
    assert!(store.release_build_lease(b.id, 2).await.unwrap());
    let again = store
        .claim_build("node-a", later, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.lease_token, 3);
    assert!(!store
        .save_step_under_lease(&step(b.id, StepState::Succeeded), 1)
        .await
        .unwrap());
    assert!(store
        .save_step_under_lease(&step(b.id, StepState::Succeeded), 3)
        .await
        .unwrap());
    assert!(store
        .finish_build(b.id, 3, BuildStatus::Succeeded, Some(0), None, later)
        .await
        .unwrap());
    // Ended: even the last claim writes nothing more.
    assert!(!store
        .save_step_under_lease(&step(b.id, StepState::Failed), 3)
        .await
        .unwrap());
    assert!(!store
        .renew_build_lease(b.id, 3, later, LEASE)
        .await
        .unwrap());
}

async fn a_released_lease_is_claimed_at_once(store: Store) {
    let b = store.create_build("b", None, "[]", "{}", T0).await.unwrap();
    let a = store
        .claim_build("node-a", T0, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .claim_build("node-b", T0 + 1, LEASE)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .release_build_lease(b.id, a.lease_token)
        .await
        .unwrap());
    let taken = store
        .claim_build("node-b", T0 + 1, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id, taken.lease_token), (b.id, 2));
}

async fn web_nodes_heartbeat_and_are_forgotten(store: Store) {
    store.web_node_heartbeat("web-a", T0).await.unwrap();
    store.web_node_heartbeat("web-b", T0).await.unwrap();
    store.web_node_heartbeat("web-a", T0 + 2_000).await.unwrap();
    let nodes = store.web_nodes().await.unwrap();
    let seen: Vec<_> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.started_at, n.last_heartbeat_at))
        .collect();
    assert_eq!(seen, [("web-a", T0, T0 + 2_000), ("web-b", T0, T0)]);
    // web-c leaves; web-b went silent before the cut and goes with it.
    store.web_node_heartbeat("web-c", T0 + 2_000).await.unwrap();
    assert_eq!(store.forget_web_nodes("web-c", T0 + 1).await.unwrap(), 2);
    let left: Vec<_> = store
        .web_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(left, ["web-a"]);
}

/// Claims take the oldest build a node may run, pending or orphaned
/// (started under a lease that ran out), whichever is older; finished
/// builds and builds under a live lease are never taken.
async fn claims_take_the_oldest_runnable_build_of_either_kind(store: Store) {
    let old = store
        .create_build("old", None, "[]", "{}", T0)
        .await
        .unwrap();
    let done = store
        .create_build("done", None, "[]", "{}", T0)
        .await
        .unwrap();
    let mid = store
        .create_build("mid", None, "[]", "{}", T0)
        .await
        .unwrap();
    let new = store
        .create_build("new", None, "[]", "{}", T0)
        .await
        .unwrap();
    let claim = |at: i64| {
        let store = store.clone();
        async move {
            store
                .claim_build("n", at, LEASE)
                .await
                .unwrap()
                .map(|b| b.id)
        }
    };
    assert_eq!(claim(T0).await, Some(old.id));
    assert_eq!(claim(T0).await, Some(done.id));
    store
        .finish_build(done.id, 1, BuildStatus::Succeeded, None, None, T0)
        .await
        .unwrap();
    assert_eq!(claim(T0).await, Some(mid.id));
    // `old` and `mid` are held under live leases: the pending one is next.
    assert_eq!(claim(T0 + 1).await, Some(new.id));
    assert_eq!(claim(T0 + 2).await, None);
    // Every lease ran out: the older orphan first, never the finished one.
    assert_eq!(claim(T0 + LEASE + 10).await, Some(old.id));
    assert_eq!(claim(T0 + LEASE + 10).await, Some(mid.id));
    assert_eq!(claim(T0 + LEASE + 10).await, Some(new.id));
    assert_eq!(claim(T0 + LEASE + 10).await, None);
}

on_both_databases!(
    a_stale_claim_cannot_write_once_another_node_took_the_build,
    a_released_lease_is_claimed_at_once,
    web_nodes_heartbeat_and_are_forgotten,
    claims_take_the_oldest_runnable_build_of_either_kind,
);
