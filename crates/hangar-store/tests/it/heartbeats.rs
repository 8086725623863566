//! The heartbeat's one-statement path: recorded only for the current
//! registration's generation and secret digest, of a worker that is not
//! stalled; anything else records nothing, on SQLite and PostgreSQL alike.

use hangar_core::{LifecycleConfig, WorkerState};
use hangar_store::{Credentials, Expect, HeartbeatRecord, Registration, Store};
use hangar_testkit::{on_both_databases, worker_info};

const T0: i64 = 1_700_000_000_000;

async fn register(store: &Store, name: &str, digest: &str, at: i64) -> i64 {
    let info = worker_info(name);
    store
        .register_incarnation(
            &Registration {
                info: &info,
                previous_exit: None,
                credentials: Some(Credentials {
                    token_hash: digest,
                    api_token: None,
                }),
                expect: Expect::Anything,
                generation_floor: 0,
                accept_unissued_generation: false,
            },
            at,
        )
        .await
        .unwrap()
        .generation
}

fn beat(name: &str, generation: i64, volumes: i64) -> HeartbeatRecord<'_> {
    HeartbeatRecord {
        name,
        generation,
        containers: 1,
        volumes,
        condition: Some(r#"{"pressure":"none"}"#),
    }
}

/// (containers, volumes, last heartbeat) of the row.
async fn recorded(store: &Store, name: &str) -> (i64, i64, i64) {
    let w = store.get_worker(name).await.unwrap().unwrap();
    (w.info.containers, w.info.volumes, w.last_heartbeat_at)
}

async fn only_the_current_generation_and_secret_record_a_heartbeat(store: Store) {
    let old = register(&store, "w1", "digest-a", T0).await;
    let current = register(&store, "w1", "digest-b", T0 + 1).await;
    register(&store, "w2", "digest-c", T0 + 1).await;

    let refused: [(&str, &str, i64); 5] = [
        ("superseded generation", "digest-a", old),
        ("current generation, old secret", "digest-a", current),
        ("another worker's secret", "digest-c", current),
        ("empty secret", "", current),
        ("generation never issued", "digest-b", current + 100),
    ];
    for (what, digest, generation) in refused {
        let got = store
            .heartbeat_proven(&beat("w1", generation, 9), digest, T0 + 10)
            .await
            .unwrap();
        assert_eq!(got, None, "{what}");
        assert_eq!(recorded(&store, "w1").await, (0, 0, T0 + 1), "{what}");
    }
    let got = store
        .heartbeat_proven(&beat("ghost", current, 9), "digest-b", T0 + 10)
        .await
        .unwrap();
    assert_eq!(got, None, "unknown worker");

    let got = store
        .heartbeat_proven(&beat("w1", current, 9), "digest-b", T0 + 10)
        .await
        .unwrap();
    assert_eq!(got, Some(WorkerState::Running));
    assert_eq!(recorded(&store, "w1").await, (1, 9, T0 + 10));
    assert_eq!(
        store
            .get_worker("w1")
            .await
            .unwrap()
            .unwrap()
            .condition
            .as_deref(),
        Some(r#"{"pressure":"none"}"#)
    );
    // The other worker's row is untouched.
    assert_eq!(recorded(&store, "w2").await, (0, 0, T0 + 1));
}

async fn a_stalled_worker_records_no_heartbeat(store: Store) {
    let g = register(&store, "w1", "digest-a", T0).await;
    let lifecycle = LifecycleConfig {
        heartbeat_ttl_ms: 15_000,
        stalled_worker_timeout_ms: None,
    };
    store.run_lifecycle(&lifecycle, T0 + 60_000).await.unwrap();
    assert_eq!(
        store.get_worker("w1").await.unwrap().unwrap().state,
        WorkerState::Stalled
    );
    let got = store
        .heartbeat_proven(&beat("w1", g, 9), "digest-a", T0 + 60_001)
        .await
        .unwrap();
    assert_eq!(got, None);
    assert_eq!(recorded(&store, "w1").await, (0, 0, T0));
}

on_both_databases!(
    only_the_current_generation_and_secret_record_a_heartbeat,
    a_stalled_worker_records_no_heartbeat,
);
