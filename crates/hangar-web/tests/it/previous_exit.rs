//! A worker that tells how its previous container ended (on Kubernetes, read
//! from its pod's status) has it recorded in the registration event, so
//! `hangar workers` and `hangar events` show it. On both databases.

use crate::common::{api_code, registration, TestWeb};
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use reqwest::StatusCode;

async fn the_previous_exit_is_in_the_registration_event(store: Store) {
    let t = TestWeb::start(store).await;
    t.register("w1", "id-a").await;

    // The container was OOM-killed and restarted on the same work dir (its
    // heartbeats stopped with it).
    t.advance(crate::common::TTL);
    let mut again = registration("w1", "id-a");
    again.previous_exit = Some("OOMKilled (exit 137) at 2025-05-01T10:00:00Z".into());
    let reg = t.worker.register(&again).await.unwrap();
    assert_eq!(reg.kind.to_string(), "state-kept");
    let w = t.admin.worker("w1").await.unwrap();
    let event = w.last_event.unwrap();
    assert_eq!(event.kind.to_string(), "restarted-state-kept");
    assert!(
        event
            .cause
            .ends_with("; previous container ended: OOMKilled (exit 137) at 2025-05-01T10:00:00Z"),
        "{}",
        event.cause
    );

    // Recreated with a wiped work dir: both facts are in the cause.
    let mut wiped = registration("w1", "id-b");
    wiped.previous_exit = Some("Error (exit 137)".into());
    t.advance(crate::common::TTL);
    t.worker.register(&wiped).await.unwrap();
    let events = t.admin.events(Some("w1"), 1).await.unwrap();
    assert_eq!(events[0].kind.to_string(), "restarted-state-lost");
    assert!(
        events[0].cause.contains("work dir was wiped"),
        "{}",
        events[0].cause
    );
    assert!(
        events[0]
            .cause
            .ends_with("; previous container ended: Error (exit 137)"),
        "{}",
        events[0].cause
    );

    // Without it the cause says nothing of a previous container.
    t.advance(crate::common::TTL);
    t.worker
        .register(&registration("w1", "id-b"))
        .await
        .unwrap();
    let events = t.admin.events(Some("w1"), 1).await.unwrap();
    assert!(
        !events[0].cause.contains("previous container"),
        "{}",
        events[0].cause
    );
    t.stop().await;
}

async fn a_previous_exit_with_control_characters_or_too_long_is_refused(store: Store) {
    let t = TestWeb::start(store).await;
    for bad in [
        "OOMKilled\n(exit 137)".to_string(),
        "x".repeat(300),
        String::new(),
    ] {
        let mut reg = registration("w1", "id-a");
        reg.previous_exit = Some(bad);
        let (status, code) = api_code(t.worker.register(&reg).await.unwrap_err());
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_request")
        );
    }
    assert!(t.admin.workers().await.unwrap().is_empty());
    t.stop().await;
}

on_both_databases!(
    the_previous_exit_is_in_the_registration_event,
    a_previous_exit_with_control_characters_or_too_long_is_refused,
);
