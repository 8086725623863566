//! Bulk inserts of volume rows, on SQLite and PostgreSQL alike.

use hangar_core::volumes::{OwnerKind, VolumeState};
use hangar_store::{NewVolume, Store, WorkerInfo};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;

fn info(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        state_identity: format!("{name}-identity"),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        version: "0.1.0".into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: 0,
        api_url: None,
        allow_privileged: false,
    }
}

fn vol(handle: String, parent: Option<String>) -> NewVolume {
    NewVolume {
        strategy: if parent.is_some() {
            hangar_core::volumes::Strategy::Cow
        } else {
            hangar_core::volumes::Strategy::Empty
        },
        handle,
        worker: "w".into(),
        parent,
        owner_kind: OwnerKind::TaskCache,
        owner_id: Some("job/step/path".into()),
    }
}

async fn bulk_inserted_rows_are_created_present_and_keep_their_parents(store: Store) {
    store.register_worker(&info("w"), T0).await.unwrap();
    // More rows than one statement holds, in chains of three.
    let mut rows = Vec::new();
    for i in 0..150 {
        let root = format!("root-{i}");
        let child = format!("child-{i}");
        rows.push(vol(root.clone(), None));
        rows.push(vol(child.clone(), Some(root)));
        rows.push(vol(format!("grandchild-{i}"), Some(child)));
    }
    assert_eq!(store.insert_created_volumes(&rows, T0).await.unwrap(), 450);
    let listed = store.list_volumes(Some("w")).await.unwrap();
    assert_eq!(listed.len(), 450);
    assert!(listed
        .iter()
        .all(|v| v.state == VolumeState::Created && v.missing_since.is_none()));
    let grandchild = store.get_volume("grandchild-7").await.unwrap().unwrap();
    assert_eq!(grandchild.parent.as_deref(), Some("child-7"));
    // A report of all of them changes nothing.
    let handles: Vec<String> = rows.iter().map(|v| v.handle.clone()).collect();
    let generation = store.get_worker("w").await.unwrap().unwrap().generation;
    let plan = store
        .apply_volume_report("w", generation, &handles, T0 + 1)
        .await
        .unwrap();
    assert!(plan.is_empty(), "{plan:?}");
}

async fn a_bulk_insert_with_one_bad_row_inserts_nothing(store: Store) {
    store.register_worker(&info("w"), T0).await.unwrap();
    let rows = vec![
        vol("fine".into(), None),
        vol("orphan".into(), Some("no-such-parent".into())),
    ];
    assert!(store.insert_created_volumes(&rows, T0).await.is_err());
    assert!(store.list_volumes(Some("w")).await.unwrap().is_empty());
}

on_both_databases!(
    bulk_inserted_rows_are_created_present_and_keep_their_parents,
    a_bulk_insert_with_one_bad_row_inserts_nothing,
);

mod marked_missing {
    use super::*;

    async fn a_volume_its_worker_does_not_have_is_marked_missing_until_reported(store: Store) {
        store.register_worker(&info("w"), T0).await.unwrap();
        store
            .insert_created_volumes(&[vol("a".into(), None)], T0)
            .await
            .unwrap();
        assert!(store.mark_volume_missing("a", T0 + 5).await.unwrap());
        // Marking again changes nothing; an unknown handle is no error.
        assert!(!store.mark_volume_missing("a", T0 + 6).await.unwrap());
        assert!(!store.mark_volume_missing("nope", T0 + 6).await.unwrap());
        let a = store.get_volume("a").await.unwrap().unwrap();
        assert_eq!(a.missing_since, Some(T0 + 5));
        // The worker lists it after all: the mark goes.
        let generation = store.get_worker("w").await.unwrap().unwrap().generation;
        store
            .apply_volume_report("w", generation, &["a".to_string()], T0 + 7)
            .await
            .unwrap();
        let a = store.get_volume("a").await.unwrap().unwrap();
        assert_eq!(a.missing_since, None);
    }

    on_both_databases!(a_volume_its_worker_does_not_have_is_marked_missing_until_reported);
}

mod fleet {
    use super::*;
    use hangar_store::{fleet_volume, fleet_volume_handle};

    fn prefix(i: usize) -> String {
        format!("{i:08x}-0000-4000-8000-")
    }

    async fn generated_fleet_rows_are_the_described_rows_and_a_full_report_changes_nothing(
        store: Store,
    ) {
        // More workers than one statement holds.
        let workers: Vec<(String, String)> =
            (0..130).map(|i| (format!("sim-{i}"), prefix(i))).collect();
        for (name, _) in &workers {
            store.register_worker(&info(name), T0).await.unwrap();
        }
        assert_eq!(
            store.insert_fleet_volumes(&workers, 23, T0).await.unwrap(),
            130 * 23
        );
        for i in [0, 99, 100, 129] {
            let (name, prefix) = &workers[i];
            let listed = store.list_volumes(Some(name)).await.unwrap();
            let mut expected: Vec<NewVolume> =
                (0..23).map(|v| fleet_volume(name, prefix, v)).collect();
            expected.sort_by(|a, b| a.handle.cmp(&b.handle));
            assert_eq!(listed.len(), expected.len());
            for (got, want) in listed.iter().zip(&expected) {
                assert_eq!(
                    (
                        &got.handle,
                        &got.worker,
                        &got.parent,
                        got.owner_kind,
                        &got.owner_id,
                        got.strategy,
                    ),
                    (
                        &want.handle,
                        &want.worker,
                        &want.parent,
                        want.owner_kind,
                        &want.owner_id,
                        want.strategy,
                    )
                );
                assert_eq!(got.state, VolumeState::Created);
                assert_eq!((got.created_at, got.missing_since), (T0, None));
            }
            let handles: Vec<String> = (0..23).map(|v| fleet_volume_handle(prefix, v)).collect();
            let generation = store.get_worker(name).await.unwrap().unwrap().generation;
            let plan = store
                .apply_volume_report(name, generation, &handles, T0 + 1)
                .await
                .unwrap();
            assert!(plan.is_empty(), "{plan:?}");
        }
        store.vacuum_after_bulk_insert().await.unwrap();
        assert_eq!(store.list_volumes(None).await.unwrap().len(), 130 * 23);
        // Handles past 9 are hex, as the described rows say.
        assert_eq!(fleet_volume_handle("p-", 26), "p-00000000001a");
        assert!(store
            .get_volume(&fleet_volume_handle(&prefix(5), 17))
            .await
            .unwrap()
            .is_some());
    }

    async fn generated_fleet_rows_for_an_unknown_worker_insert_nothing(store: Store) {
        store.register_worker(&info("known"), T0).await.unwrap();
        let workers = vec![
            ("known".to_string(), prefix(1)),
            ("unknown".to_string(), prefix(2)),
        ];
        assert!(store.insert_fleet_volumes(&workers, 10, T0).await.is_err());
        assert!(store.list_volumes(None).await.unwrap().is_empty());
        assert_eq!(
            store.insert_fleet_volumes(&workers, 0, T0).await.unwrap(),
            0
        );
    }

    on_both_databases!(
        generated_fleet_rows_are_the_described_rows_and_a_full_report_changes_nothing,
        generated_fleet_rows_for_an_unknown_worker_insert_nothing,
    );
}
