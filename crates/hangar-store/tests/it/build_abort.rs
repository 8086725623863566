//! Asking to abort a build: pending, started, finished, unknown.

use hangar_core::build::BuildStatus;
use hangar_store::{AbortRequest, Store};
use hangar_testkit::on_both_databases;

const T0: i64 = 1_700_000_000_000;

async fn a_build_is_aborted_as_its_status_allows(store: Store) {
    let pending = store.create_build("p", None, "[]", "{}", T0).await.unwrap();
    assert!(!store.build_abort_requested(pending.id).await.unwrap());
    assert_eq!(
        store.request_build_abort(pending.id, T0 + 1).await.unwrap(),
        AbortRequest::AbortedPending
    );
    let b = store.get_build(pending.id).await.unwrap().unwrap();
    assert_eq!(
        (b.status, b.finished_at),
        (BuildStatus::Aborted, Some(T0 + 1))
    );
    // Never claimed once aborted.
    assert!(store
        .claim_build("node", T0 + 2, 1000)
        .await
        .unwrap()
        .is_none());

    let started = store.create_build("s", None, "[]", "{}", T0).await.unwrap();
    let claimed = store
        .claim_build("node", T0 + 3, 1000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, started.id);
    assert_eq!(
        store.request_build_abort(started.id, T0 + 4).await.unwrap(),
        AbortRequest::Requested
    );
    assert!(store.build_abort_requested(started.id).await.unwrap());
    // Asked twice: still requested, still started (the node ends it).
    assert_eq!(
        store.request_build_abort(started.id, T0 + 5).await.unwrap(),
        AbortRequest::Requested
    );
    let b = store.get_build(started.id).await.unwrap().unwrap();
    assert_eq!(b.status, BuildStatus::Started);
    store
        .finish_build(
            started.id,
            1,
            BuildStatus::Aborted,
            None,
            Some("aborted"),
            T0 + 6,
        )
        .await
        .unwrap();

    let done = store.create_build("d", None, "[]", "{}", T0).await.unwrap();
    store
        .claim_build("node", T0 + 7, 1000)
        .await
        .unwrap()
        .unwrap();
    store
        .finish_build(done.id, 1, BuildStatus::Succeeded, Some(0), None, T0 + 8)
        .await
        .unwrap();
    assert_eq!(
        store.request_build_abort(done.id, T0 + 9).await.unwrap(),
        AbortRequest::AlreadyFinished(BuildStatus::Succeeded)
    );
    let b = store.get_build(done.id).await.unwrap().unwrap();
    assert_eq!(
        (b.status, b.finished_at),
        (BuildStatus::Succeeded, Some(T0 + 8))
    );
    assert!(!store.build_abort_requested(done.id).await.unwrap());

    assert_eq!(
        store.request_build_abort(9999, T0).await.unwrap(),
        AbortRequest::NotFound
    );
}

on_both_databases!(a_build_is_aborted_as_its_status_allows);
