//! Volume rows and reports, on SQLite and PostgreSQL alike.

use hangar_core::volumes::{OwnerKind, VolumeState};
use hangar_core::OperatorCommand;
use hangar_store::{NewVolume, Store, StoreError, WorkerInfo};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;

fn info(name: &str, identity: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: identity.into(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: Some("http://127.0.0.1:7788".into()),
        allow_privileged: false,
    }
}

fn vol(handle: &str, worker: &str, parent: Option<&str>) -> NewVolume {
    NewVolume {
        handle: handle.into(),
        worker: worker.into(),
        parent: parent.map(str::to_string),
        owner_kind: OwnerKind::TaskCache,
        owner_id: Some("job/step/path".into()),
        strategy: if parent.is_some() {
            hangar_core::volumes::Strategy::Cow
        } else {
            hangar_core::volumes::Strategy::Empty
        },
    }
}

/// Registers `worker` and makes created volumes along `chain` (each the
/// previous one's child). Returns the generation.
async fn worker_with_chain(store: &Store, worker: &str, chain: &[&str]) -> i64 {
    let g = store
        .register_worker(&info(worker, worker), T0)
        .await
        .unwrap()
        .generation;
    let mut parent = None;
    for h in chain {
        store
            .create_volume_row(&vol(h, worker, parent), T0)
            .await
            .unwrap();
        store.finish_volume_creation(h, Ok(Some(10))).await.unwrap();
        parent = Some(*h);
    }
    g
}

fn handles(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn states(store: &Store, worker: &str) -> Vec<(String, VolumeState, bool)> {
    store
        .list_volumes(Some(worker))
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.handle, v.state, v.missing_since.is_some()))
        .collect()
}

async fn a_volume_row_exists_before_the_volume_and_records_its_outcome(store: Store) {
    store.register_worker(&info("w1", "a"), T0).await.unwrap();
    let row = store
        .create_volume_row(&vol("v1", "w1", None), T0)
        .await
        .unwrap();
    assert_eq!((row.state, row.size_bytes), (VolumeState::Creating, None));
    store
        .finish_volume_creation("v1", Ok(Some(4096)))
        .await
        .unwrap();
    store
        .create_volume_row(&vol("v2", "w1", None), T0)
        .await
        .unwrap();
    store.finish_volume_creation("v2", Err(())).await.unwrap();
    let v1 = store.get_volume("v1").await.unwrap().unwrap();
    assert_eq!(
        (v1.state, v1.size_bytes, v1.owner_kind),
        (VolumeState::Created, Some(4096), OwnerKind::TaskCache)
    );
    assert_eq!(
        store.get_volume("v2").await.unwrap().unwrap().state,
        VolumeState::Failed
    );
    let err = store
        .create_volume_row(&vol("v1", "w1", None), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
}

async fn volumes_are_made_only_on_running_workers_on_present_parents(store: Store) {
    let g = worker_with_chain(&store, "w1", &["base"]).await;
    worker_with_chain(&store, "w2", &["other"]).await;
    let cases = [
        (vol("x", "nobody", None), "not found"),
        (vol("x", "w1", Some("nothing")), "not found"),
        (vol("x", "w1", Some("other")), "is on worker w2"),
    ];
    for (v, expected) in cases {
        let err = store.create_volume_row(&v, T0).await.unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
    // A parent the worker stopped reporting is missing: never built upon.
    store
        .apply_volume_report("w1", g, &[], T0 + 1)
        .await
        .unwrap();
    let err = store
        .create_volume_row(&vol("x", "w1", Some("base")), T0)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "parent volume base is missing");
    store
        .worker_command("w1", OperatorCommand::Land, "an operator", T0)
        .await
        .unwrap();
    let err = store
        .create_volume_row(&vol("y", "w1", None), T0)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is landing"), "{err}");
    assert!(store.get_volume("x").await.unwrap().is_none());
}

async fn a_report_is_diffed_both_ways_and_applied(store: Store) {
    let g = worker_with_chain(&store, "w1", &["a", "b"]).await;
    store
        .create_volume_row(&vol("c", "w1", None), T0)
        .await
        .unwrap(); // still creating
                   // The worker has b and a stray, but not a (nor c, which is being made).
    let plan = store
        .apply_volume_report("w1", g, &handles(&["b", "stray"]), T0 + 5)
        .await
        .unwrap();
    assert_eq!(plan.destroy_on_worker, ["stray"]);
    assert_eq!(plan.mark_missing, ["a"]);
    assert_eq!(
        states(&store, "w1").await,
        [
            ("a".into(), VolumeState::Created, true),
            ("b".into(), VolumeState::Created, false),
            ("c".into(), VolumeState::Creating, false)
        ]
    );
    let a = store.get_volume("a").await.unwrap().unwrap();
    assert_eq!(a.missing_since, Some(T0 + 5));
    // Reported again: no longer missing.
    store
        .apply_volume_report("w1", g, &handles(&["a", "b"]), T0 + 6)
        .await
        .unwrap();
    assert!(!states(&store, "w1").await[0].2);
}

async fn destroyed_volumes_leave_the_worker_then_the_database_children_first(store: Store) {
    let g = worker_with_chain(&store, "w1", &["p", "c"]).await;
    let err = store.destroy_volume("p").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "volume p has 1 child volume(s); destroy them first"
    );
    store.destroy_volume("c").await.unwrap();
    store.destroy_volume("p").await.unwrap();
    let plan = store
        .apply_volume_report("w1", g, &handles(&["p", "c"]), T0)
        .await
        .unwrap();
    assert_eq!(plan.destroy_on_worker, ["c", "p"]);
    assert!(plan.delete_rows.is_empty());
    let plan = store.apply_volume_report("w1", g, &[], T0).await.unwrap();
    assert_eq!(plan.delete_rows, ["c", "p"]);
    assert!(states(&store, "w1").await.is_empty());
    let err = store.destroy_volume("p").await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)));
}

async fn a_report_from_a_superseded_generation_is_refused_and_changes_nothing(store: Store) {
    let old = worker_with_chain(&store, "w1", &["a"]).await;
    store
        .register_worker(&info("w1", "w1"), T0 + 1)
        .await
        .unwrap(); // same identity: kept
    let before = states(&store, "w1").await;
    let err = store
        .apply_volume_report("w1", old, &[], T0 + 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err:?}");
    assert_eq!(states(&store, "w1").await, before);
    assert_eq!(
        before.len(),
        1,
        "a restart with the state kept keeps the volumes"
    );
}

async fn a_restart_with_the_state_lost_drops_every_row_in_the_registration(store: Store) {
    worker_with_chain(&store, "w1", &["a", "b", "c"]).await;
    worker_with_chain(&store, "w2", &["z"]).await;
    let out = store
        .register_worker(&info("w1", "new-disk"), T0 + 1)
        .await
        .unwrap();
    assert_eq!(out.invalidated_volumes, 3);
    assert!(states(&store, "w1").await.is_empty());
    assert_eq!(states(&store, "w2").await.len(), 1);
    let event = store.list_events(Some("w1"), 1).await.unwrap().remove(0);
    assert!(
        event
            .cause
            .ends_with("; invalidated 3 volume(s) and 0 container(s)"),
        "{}",
        event.cause
    );
}

async fn pruning_a_worker_removes_its_volume_rows(store: Store) {
    worker_with_chain(&store, "w1", &["a", "b"]).await;
    store
        .run_lifecycle(&Default::default(), T0 + 60_000)
        .await
        .unwrap();
    store
        .worker_command("w1", OperatorCommand::Prune, "an operator", T0 + 60_001)
        .await
        .unwrap();
    assert!(store.list_volumes(None).await.unwrap().is_empty());
}

async fn a_report_of_thousands_of_handles_is_applied_in_chunks(store: Store) {
    let g = store
        .register_worker(&info("w1", "a"), T0)
        .await
        .unwrap()
        .generation;
    let many: Vec<String> = (0..2500).map(|i| format!("h{i:05}")).collect();
    for h in &many {
        store
            .create_volume_row(&vol(h, "w1", None), T0)
            .await
            .unwrap();
        store.finish_volume_creation(h, Ok(None)).await.unwrap();
    }
    let plan = store
        .apply_volume_report("w1", g, &[], T0 + 1)
        .await
        .unwrap();
    assert_eq!(plan.mark_missing.len(), 2500);
    let missing = store
        .list_volumes(Some("w1"))
        .await
        .unwrap()
        .iter()
        .filter(|v| v.missing_since.is_some())
        .count();
    assert_eq!(missing, 2500);
    let plan = store
        .apply_volume_report("w1", g, &many, T0 + 2)
        .await
        .unwrap();
    assert_eq!(plan.clear_missing.len(), 2500);
}

/// Handles travel to the database as one JSON list and come back packed
/// with their lengths: whatever they hold, each is matched as itself.
async fn a_report_matches_handles_whatever_they_hold(store: Store) {
    let odd = [
        "a b",
        "quo\"te",
        "back\\slash",
        "é€😀",
        "it's",
        "new\nline",
        "[\"json\"]",
        "3 - 2 x",
    ];
    let g = worker_with_chain(&store, "w1", &odd[..3]).await;
    for (i, h) in odd[3..].iter().enumerate() {
        store
            .create_volume_row(&vol(h, "w1", Some(odd[i % 3])), T0)
            .await
            .unwrap();
        store.finish_volume_creation(h, Ok(None)).await.unwrap();
    }
    store.destroy_volume(odd[6]).await.unwrap();
    // Everything is there but "it's" (vanished) and the destroyed one;
    // a stray with a quote and a space comes along.
    let mut reported: Vec<String> = odd
        .iter()
        .filter(|h| **h != "it's" && **h != odd[6])
        .map(|h| h.to_string())
        .collect();
    reported.push("stray \"1\"".into());
    let plan = store
        .apply_volume_report("w1", g, &reported, T0 + 1)
        .await
        .unwrap();
    assert_eq!(plan.mark_missing, ["it's"]);
    assert_eq!(plan.delete_rows, [odd[6]]);
    assert_eq!(plan.destroy_on_worker, ["stray \"1\""]);
    let rows = states(&store, "w1").await;
    assert_eq!(rows.len(), odd.len() - 1);
    for (h, state, missing) in &rows {
        assert_eq!(*state, VolumeState::Created, "{h:?}");
        assert_eq!(*missing, h == "it's", "{h:?}");
    }
    // Back again: the mark is cleared, nothing else changes.
    reported.push("it's".into());
    let plan = store
        .apply_volume_report("w1", g, &reported, T0 + 2)
        .await
        .unwrap();
    assert_eq!(plan.clear_missing, ["it's"]);
    assert!(states(&store, "w1").await.iter().all(|(_, _, m)| !m));
}

/// A resource cache keeps the metadata its `in` answered with its key, in
/// one write; a cache keyed without it, or a volume that is gone, has none;
/// text that does not parse is a corrupt row.
async fn a_resource_cache_keeps_its_metadata_with_its_key(store: Store) {
    worker_with_chain(&store, "w1", &["fetched", "old"]).await;
    let metadata = serde_json::json!([{"name": "commit", "value": "abc"}]);
    store
        .key_resource_cache("fetched", "mock@k1", &metadata)
        .await
        .unwrap();
    let v = store.get_volume("fetched").await.unwrap().unwrap();
    assert_eq!(v.owner_kind, OwnerKind::ResourceCache);
    assert_eq!(v.owner_id.as_deref(), Some("mock@k1"));
    assert_eq!(
        store.resource_cache_metadata("fetched").await.unwrap(),
        Some(metadata)
    );
    store
        .set_volume_owner("old", OwnerKind::ResourceCache, Some("mock@k2"))
        .await
        .unwrap();
    assert_eq!(store.resource_cache_metadata("old").await.unwrap(), None);
    assert_eq!(store.resource_cache_metadata("nope").await.unwrap(), None);
    store
        .key_resource_cache("old", "mock@k2", &serde_json::json!([]))
        .await
        .unwrap();
    assert_eq!(
        store.resource_cache_metadata("old").await.unwrap(),
        Some(serde_json::json!([]))
    );
}

/// A volume made while the worker's report was under way (listed before
/// it existed) is not marked missing by that report; one that stays
/// unlisted past the grace is. Until then the report is not remembered
/// as quiet, so the same listing later is judged again.
async fn a_report_leaves_a_volume_younger_than_the_grace_unjudged(store: Store) {
    const GRACE: i64 = 30_000;
    let store = store.with_young_volume_grace(GRACE);
    let g = worker_with_chain(&store, "w1", &["old"]).await;
    store
        .create_volume_row(&vol("new", "w1", None), T0 + 40_000)
        .await
        .unwrap();
    store
        .finish_volume_creation("new", Ok(Some(10)))
        .await
        .unwrap();
    let listed = handles(&["old"]);
    let plan = store
        .apply_volume_report("w1", g, &listed, T0 + 40_010)
        .await
        .unwrap();
    assert_eq!((plan.mark_missing.len(), plan.deferred), (0, 1));
    let new = store.get_volume("new").await.unwrap().unwrap();
    assert_eq!(new.missing_since, None, "a young volume was marked missing");
    // The same listing again, still within the grace: still unjudged.
    let plan = store
        .apply_volume_report("w1", g, &listed, T0 + 50_000)
        .await
        .unwrap();
    assert_eq!((plan.mark_missing.len(), plan.deferred), (0, 1));
    // Past the grace, the same listing marks it missing.
    let plan = store
        .apply_volume_report("w1", g, &listed, T0 + 40_000 + GRACE + 1)
        .await
        .unwrap();
    assert_eq!(plan.mark_missing, ["new"]);
    let new = store.get_volume("new").await.unwrap().unwrap();
    assert_eq!(new.missing_since, Some(T0 + 40_000 + GRACE + 1));
}

on_both_databases!(
    a_report_leaves_a_volume_younger_than_the_grace_unjudged,
    a_resource_cache_keeps_its_metadata_with_its_key,
    a_report_matches_handles_whatever_they_hold,
    a_volume_row_exists_before_the_volume_and_records_its_outcome,
    volumes_are_made_only_on_running_workers_on_present_parents,
    a_report_is_diffed_both_ways_and_applied,
    destroyed_volumes_leave_the_worker_then_the_database_children_first,
    a_report_from_a_superseded_generation_is_refused_and_changes_nothing,
    a_restart_with_the_state_lost_drops_every_row_in_the_registration,
    pruning_a_worker_removes_its_volume_rows,
    a_report_of_thousands_of_handles_is_applied_in_chunks,
);
