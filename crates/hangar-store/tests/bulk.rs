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
