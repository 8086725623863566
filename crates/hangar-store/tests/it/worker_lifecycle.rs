//! The worker registry and lifecycle, on SQLite and PostgreSQL alike, with
//! time passed in rather than slept.

use hangar_core::fencing::Refusal;
use hangar_core::registration::RegistrationKind;
use hangar_core::{EventKind, LifecycleConfig, OperatorCommand, WorkerState};
use hangar_store::{Store, StoreError, WorkerInfo};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;
const TTL: i64 = 15_000;

fn config() -> LifecycleConfig {
    LifecycleConfig {
        heartbeat_ttl_ms: TTL,
        stalled_worker_timeout_ms: Some(600_000),
    }
}

fn info(name: &str, identity: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: identity.into(),
        platform: "linux".into(),
        tags: vec!["fast".into()],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: r#"[{"type":"git","path":"/rt/git","version":null}]"#.into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    }
}

async fn state_of(store: &Store, name: &str) -> Option<WorkerState> {
    store.get_worker(name).await.unwrap().map(|w| w.state)
}

async fn event_kinds(store: &Store, name: &str) -> Vec<EventKind> {
    let mut events = store.list_events(Some(name), 100).await.unwrap();
    events.reverse();
    events.into_iter().map(|e| e.kind).collect()
}

async fn a_new_worker_registers_as_running_with_what_it_said(store: Store) {
    let out = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    assert_eq!(out.kind, RegistrationKind::New);
    assert!(out.previous.is_none());
    let w = store.get_worker("w1").await.unwrap().unwrap();
    assert_eq!(w.state, WorkerState::Running);
    assert_eq!(w.generation, out.generation);
    assert_eq!(w.info, info("w1", "id-a"));
    assert_eq!(
        (w.first_registered_at, w.registered_at, w.last_heartbeat_at),
        (T0, T0, T0)
    );
    assert_eq!(w.restarts, 0);
    let last = w.last_event.unwrap();
    assert_eq!(
        (last.kind, last.generation),
        (EventKind::Registered, out.generation)
    );
}

async fn a_restart_with_the_same_identity_keeps_state_and_counts_a_restart(store: Store) {
    let first = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    let second = store
        .register_worker(&info("w1", "id-a"), T0 + 5)
        .await
        .unwrap();
    assert_eq!(second.kind, RegistrationKind::StateKept);
    assert!(second.generation > first.generation);
    assert_eq!(second.previous.unwrap().generation, first.generation);
    let w = store.get_worker("w1").await.unwrap().unwrap();
    assert_eq!(
        (w.restarts, w.first_registered_at, w.registered_at),
        (1, T0, T0 + 5)
    );
    assert_eq!(
        event_kinds(&store, "w1").await,
        [EventKind::Registered, EventKind::RestartedStateKept]
    );
}

async fn a_restart_with_a_new_identity_is_recorded_as_state_lost(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    let out = store
        .register_worker(&info("w1", "id-b"), T0 + 5)
        .await
        .unwrap();
    assert_eq!(out.kind, RegistrationKind::StateLost);
    let w = store.get_worker("w1").await.unwrap().unwrap();
    assert_eq!(w.info.state_identity, "id-b");
    let last = w.last_event.unwrap();
    assert_eq!(last.kind, EventKind::RestartedStateLost);
    assert!(last.cause.contains("work dir was wiped"), "{}", last.cause);
}

async fn a_heartbeat_of_the_current_generation_updates_the_worker(store: Store) {
    let g = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    let state = store.heartbeat("w1", g, 3, 7, T0 + 5_000).await.unwrap();
    assert_eq!(state, WorkerState::Running);
    let w = store.get_worker("w1").await.unwrap().unwrap();
    assert_eq!(
        (w.info.containers, w.info.volumes, w.last_heartbeat_at),
        (3, 7, T0 + 5_000)
    );
}

async fn a_heartbeat_of_a_superseded_generation_is_refused_and_changes_nothing(store: Store) {
    let old = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    let new = store
        .register_worker(&info("w1", "id-b"), T0 + 1)
        .await
        .unwrap()
        .generation;
    let err = store.heartbeat("w1", old, 9, 9, T0 + 2).await.unwrap_err();
    match err {
        StoreError::Refused { refusal, message } => {
            assert_eq!(refusal, Refusal::Superseded { current: new });
            assert!(message.contains("superseded"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let w = store.get_worker("w1").await.unwrap().unwrap();
    assert_eq!((w.info.containers, w.last_heartbeat_at), (0, T0 + 1));
}

async fn a_heartbeat_of_an_unknown_worker_is_refused_as_unknown(store: Store) {
    let err = store.heartbeat("ghost", 1, 0, 0, T0).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Refused {
                refusal: Refusal::Unknown,
                ..
            }
        ),
        "{err:?}"
    );
}

async fn a_running_worker_past_its_ttl_becomes_stalled_and_must_register_again(store: Store) {
    let g = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    store
        .register_worker(&info("w2", "id-x"), T0)
        .await
        .unwrap();
    store.heartbeat("w2", g + 1, 0, 0, T0 + TTL).await.unwrap();
    assert!(store
        .run_lifecycle(&config(), T0 + TTL)
        .await
        .unwrap()
        .is_empty());
    let done = store.run_lifecycle(&config(), T0 + TTL + 1).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Stalled));
    assert_eq!(state_of(&store, "w2").await, Some(WorkerState::Running));
    let err = store
        .heartbeat("w1", g, 0, 0, T0 + TTL + 2)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Refused {
                refusal: Refusal::Stalled,
                ..
            }
        ),
        "{err:?}"
    );
    let again = store
        .register_worker(&info("w1", "id-a"), T0 + TTL + 3)
        .await
        .unwrap();
    assert_eq!(again.kind, RegistrationKind::StateKept);
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Running));
    assert_eq!(
        event_kinds(&store, "w1").await,
        [
            EventKind::Registered,
            EventKind::Stalled,
            EventKind::RestartedStateKept
        ]
    );
}

async fn an_ephemeral_worker_past_its_ttl_is_removed_instead_of_stalled(store: Store) {
    let mut eph = info("e1", "id-e");
    eph.ephemeral = true;
    store.register_worker(&eph, T0).await.unwrap();
    store.run_lifecycle(&config(), T0 + TTL + 1).await.unwrap();
    assert_eq!(state_of(&store, "e1").await, None);
    assert_eq!(
        event_kinds(&store, "e1").await,
        [EventKind::Registered, EventKind::RemovedEphemeral]
    );
}

async fn a_landing_worker_lands_once_its_work_is_done(store: Store) {
    let g = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    store.heartbeat("w1", g, 2, 0, T0).await.unwrap();
    let out = store
        .worker_command("w1", OperatorCommand::Land, "an operator", T0)
        .await
        .unwrap();
    assert_eq!((out.state, out.changed), (Some(WorkerState::Landing), true));
    store.run_lifecycle(&config(), T0 + 1).await.unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Landing));
    assert_eq!(
        store.heartbeat("w1", g, 0, 0, T0 + 2).await.unwrap(),
        WorkerState::Landing
    );
    store.run_lifecycle(&config(), T0 + 3).await.unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Landed));
    // Landing again is not an error and changes nothing.
    let again = store
        .worker_command("w1", OperatorCommand::Land, "an operator", T0 + 4)
        .await
        .unwrap();
    assert_eq!(
        (again.state, again.changed),
        (Some(WorkerState::Landed), false)
    );
    // A landed worker that restarts comes back running.
    store
        .register_worker(&info("w1", "id-a"), T0 + 5)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Running));
}

async fn a_retiring_worker_is_removed_once_its_work_is_done(store: Store) {
    let g = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    store.heartbeat("w1", g, 1, 0, T0).await.unwrap();
    store
        .worker_command("w1", OperatorCommand::Retire, "the worker", T0)
        .await
        .unwrap();
    store.run_lifecycle(&config(), T0 + 1).await.unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Retiring));
    store.heartbeat("w1", g, 0, 0, T0 + 2).await.unwrap();
    store.run_lifecycle(&config(), T0 + 3).await.unwrap();
    assert_eq!(state_of(&store, "w1").await, None);
    let err = store.heartbeat("w1", g, 0, 0, T0 + 4).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Refused {
                refusal: Refusal::Unknown,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        event_kinds(&store, "w1").await,
        [
            EventKind::Registered,
            EventKind::Retiring,
            EventKind::Retired
        ]
    );
}

async fn a_stalled_worker_is_removed_after_the_stall_timeout_unless_it_is_zero(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    let stalled_at = T0 + TTL + 1;
    store.run_lifecycle(&config(), stalled_at).await.unwrap();
    let never = LifecycleConfig {
        stalled_worker_timeout_ms: None,
        ..config()
    };
    store
        .run_lifecycle(&never, stalled_at + 10 * 600_000)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Stalled));
    store
        .run_lifecycle(&config(), stalled_at + 600_000 - 1)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Stalled));
    store
        .run_lifecycle(&config(), stalled_at + 600_000)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "w1").await, None);
    let last = store.list_events(Some("w1"), 1).await.unwrap().remove(0);
    assert_eq!(last.kind, EventKind::RemovedAfterStallTimeout);
    assert_eq!(last.cause, "stalled for 10m (timeout 10m)");
}

async fn a_running_worker_cannot_be_pruned_and_nothing_changes(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    let before = store.get_worker("w1").await.unwrap();
    let err = store
        .worker_command("w1", OperatorCommand::Prune, "an operator", T0 + 1)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot prune worker w1: it is running; only a worker that is not running can be pruned (land or retire it first)"
    );
    assert_eq!(store.get_worker("w1").await.unwrap(), before);
    let err = store
        .worker_command("nobody", OperatorCommand::Prune, "an operator", T0 + 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

async fn pruning_all_stalled_workers_leaves_the_others(store: Store) {
    for name in ["a", "b", "c"] {
        store.register_worker(&info(name, name), T0).await.unwrap();
    }
    let g = store.get_worker("b").await.unwrap().unwrap().generation;
    store.heartbeat("b", g, 0, 0, T0 + TTL).await.unwrap();
    store.run_lifecycle(&config(), T0 + TTL + 1).await.unwrap();
    let pruned = store
        .prune_stalled("an operator", T0 + TTL + 2)
        .await
        .unwrap();
    assert_eq!(pruned, ["a", "c"]);
    let names: Vec<_> = store
        .list_workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.info.name)
        .collect();
    assert_eq!(names, ["b"]);
    let last = store.list_events(Some("a"), 1).await.unwrap().remove(0);
    assert_eq!(
        (last.kind, last.cause.as_str()),
        (
            EventKind::Pruned,
            "prune requested by an operator (was stalled)"
        )
    );
}

async fn a_stalled_worker_cannot_land_or_retire(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    store.run_lifecycle(&config(), T0 + TTL + 1).await.unwrap();
    for command in [OperatorCommand::Land, OperatorCommand::Retire] {
        let err = store
            .worker_command("w1", command, "an operator", T0 + TTL + 2)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    }
    assert_eq!(state_of(&store, "w1").await, Some(WorkerState::Stalled));
}

async fn a_lifecycle_pass_applies_each_change_once(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    let cfg = config();
    let (a, b) = tokio::join!(
        store.run_lifecycle(&cfg, T0 + TTL + 1),
        store.run_lifecycle(&cfg, T0 + TTL + 1)
    );
    assert_eq!(a.unwrap().len() + b.unwrap().len(), 1);
    assert_eq!(
        event_kinds(&store, "w1").await,
        [EventKind::Registered, EventKind::Stalled]
    );
}

async fn generations_keep_rising_after_a_worker_is_removed(store: Store) {
    let first = store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap()
        .generation;
    store
        .worker_command("w1", OperatorCommand::Retire, "an operator", T0)
        .await
        .unwrap();
    store.run_lifecycle(&config(), T0 + 1).await.unwrap();
    assert_eq!(state_of(&store, "w1").await, None);
    let again = store
        .register_worker(&info("w1", "id-a"), T0 + 2)
        .await
        .unwrap();
    assert_eq!(again.kind, RegistrationKind::New);
    assert!(
        again.generation > first,
        "a zombie of generation {first} must stay fenced"
    );
    let err = store
        .heartbeat("w1", first, 0, 0, T0 + 3)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Refused {
            refusal: Refusal::Superseded { .. },
            ..
        }
    ));
}

async fn events_list_newest_first_and_can_be_limited(store: Store) {
    store
        .register_worker(&info("w1", "id-a"), T0)
        .await
        .unwrap();
    store
        .register_worker(&info("w2", "id-b"), T0 + 1)
        .await
        .unwrap();
    store
        .register_worker(&info("w1", "id-c"), T0 + 2)
        .await
        .unwrap();
    let all = store.list_events(None, 100).await.unwrap();
    let seen: Vec<_> = all.iter().map(|e| (e.worker.as_str(), e.kind)).collect();
    assert_eq!(
        seen,
        [
            ("w1", EventKind::RestartedStateLost),
            ("w2", EventKind::Registered),
            ("w1", EventKind::Registered)
        ]
    );
    assert_eq!(store.list_events(None, 1).await.unwrap().len(), 1);
    assert_eq!(store.list_events(Some("w2"), 100).await.unwrap().len(), 1);
}

on_both_databases!(
    a_new_worker_registers_as_running_with_what_it_said,
    a_restart_with_the_same_identity_keeps_state_and_counts_a_restart,
    a_restart_with_a_new_identity_is_recorded_as_state_lost,
    a_heartbeat_of_the_current_generation_updates_the_worker,
    a_heartbeat_of_a_superseded_generation_is_refused_and_changes_nothing,
    a_heartbeat_of_an_unknown_worker_is_refused_as_unknown,
    a_running_worker_past_its_ttl_becomes_stalled_and_must_register_again,
    an_ephemeral_worker_past_its_ttl_is_removed_instead_of_stalled,
    a_landing_worker_lands_once_its_work_is_done,
    a_retiring_worker_is_removed_once_its_work_is_done,
    a_stalled_worker_is_removed_after_the_stall_timeout_unless_it_is_zero,
    a_running_worker_cannot_be_pruned_and_nothing_changes,
    pruning_all_stalled_workers_leaves_the_others,
    a_stalled_worker_cannot_land_or_retire,
    a_lifecycle_pass_applies_each_change_once,
    generations_keep_rising_after_a_worker_is_removed,
    events_list_newest_first_and_can_be_limited,
);
