//! Scheduler wake-ups between nodes: on PostgreSQL a wake-up sent by one
//! store reaches a listener opened by another; on SQLite there is no
//! channel, sending is a no-op and nobody listens.

use std::time::Duration;

use hangar_store::{Backend, Store};
use hangar_testkit::on_both_databases;

async fn a_wake_up_reaches_every_listening_node(store: Store) {
    let Some(mut listener) = store.scheduler_listener().await.unwrap() else {
        assert_eq!(
            store.backend(),
            Backend::Sqlite,
            "only SQLite has no channel"
        );
        store.notify_scheduler().await.unwrap();
        return;
    };
    assert_eq!(store.backend(), Backend::Postgres);
    // Nothing was sent yet: nothing arrives.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), listener.next())
            .await
            .is_err(),
        "a wake-up arrived that nobody sent"
    );
    store.notify_scheduler().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), listener.next())
        .await
        .expect("the wake-up did not arrive")
        .unwrap();
}

on_both_databases!(a_wake_up_reaches_every_listening_node);
