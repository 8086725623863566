//! Container rows move only from the state the caller expects.

use hangar_core::containers::ContainerState::{Created, Creating, Destroying, Failed};
use hangar_store::{Store, StoreError, WorkerInfo};
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

async fn state_of(store: &Store, handle: &str) -> hangar_core::containers::ContainerState {
    store
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.handle == handle)
        .unwrap()
        .state
}

async fn a_container_moves_only_from_the_expected_state(store: Store) {
    store.register_worker(&info("w"), T0).await.unwrap();
    store
        .create_container_row("c", "w", None, None, T0)
        .await
        .unwrap();
    // From the wrong state: refused, naming what it found; nothing changes.
    let err = store
        .set_container_state("c", Created, Destroying)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict(m) if m.contains("is creating")),
        "{err}"
    );
    assert_eq!(state_of(&store, "c").await, Creating);
    // A move rows never make is refused before the database is asked.
    assert!(store
        .set_container_state("c", Creating, Creating)
        .await
        .is_err());
    assert!(store
        .set_container_state("c", Destroying, Created)
        .await
        .is_err());
    assert_eq!(state_of(&store, "c").await, Creating);
    // The expected moves apply, once.
    store
        .set_container_state("c", Creating, Created)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "c").await, Created);
    assert!(store
        .set_container_state("c", Creating, Failed)
        .await
        .is_err());
    assert_eq!(state_of(&store, "c").await, Created);
    store
        .set_container_state("c", Created, Destroying)
        .await
        .unwrap();
    assert_eq!(state_of(&store, "c").await, Destroying);
    assert!(matches!(
        store.set_container_state("gone", Creating, Created).await,
        Err(StoreError::NotFound(_))
    ));
}

on_both_databases!(a_container_moves_only_from_the_expected_state);
