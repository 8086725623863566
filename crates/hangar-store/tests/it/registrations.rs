//! Registrations running at once, and the generation numbers they take, on
//! SQLite and PostgreSQL alike. On PostgreSQL numbers come from a sequence
//! and registrations of different names do not wait for each other; these
//! tests hold the promises that change must keep: no number is issued
//! twice, a name's numbers only rise, and a floor this database never
//! issued is refused (changing nothing) or adopted past.

use std::collections::BTreeSet;

use hangar_store::{Expect, Registration, Store, StoreError};
use hangar_testkit::{on_both_databases, worker_info};

const T0: i64 = 1_700_000_000_000;

async fn register(store: &Store, name: &str, floor: i64, accept: bool) -> Result<i64, StoreError> {
    let info = worker_info(name);
    store
        .register_incarnation(
            &Registration {
                info: &info,
                previous_exit: None,
                credentials: None,
                expect: Expect::Anything,
                generation_floor: floor,
                accept_unissued_generation: accept,
            },
            T0,
        )
        .await
        .map(|out| out.generation)
}

/// Registers until it is not told to try again (two first registrations of
/// one name at once: one of them is).
async fn register_retrying(store: &Store, name: &str, floor: i64, accept: bool) -> i64 {
    for _ in 0..50 {
        match register(store, name, floor, accept).await {
            Ok(generation) => return generation,
            Err(StoreError::Conflict(_)) => tokio::task::yield_now().await,
            Err(e) => panic!("register {name}: {e}"),
        }
    }
    panic!("register {name}: still conflicting after 50 tries");
}

async fn registrations_at_once_each_get_their_own_number(store: Store) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..48 {
        let store = store.clone();
        // Three registrations of each name, sixteen names.
        tasks.spawn(async move {
            let name = format!("w{}", i % 16);
            (
                name.clone(),
                register_retrying(&store, &name, 0, false).await,
            )
        });
    }
    let mut numbers = BTreeSet::new();
    let mut highest_per_name = std::collections::BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (name, generation) = done.unwrap();
        assert!(
            numbers.insert(generation),
            "generation {generation} issued twice"
        );
        let h = highest_per_name.entry(name).or_insert(0);
        *h = generation.max(*h);
    }
    assert_eq!(numbers.len(), 48);
    // Each name's row holds its newest registration: a name's numbers only
    // rise, whichever registration committed last.
    for (name, highest) in highest_per_name {
        let row = store.get_worker(&name).await.unwrap().unwrap();
        assert_eq!(row.generation, highest, "{name}");
    }
}

async fn an_unissued_floor_is_refused_and_changes_nothing(store: Store) {
    let first = register(&store, "w1", 0, false).await.unwrap();
    let err = register(&store, "w2", first + 1000, false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::DatabaseMismatch(m) if m.contains("--accept-new-database")),
        "{err}"
    );
    assert!(store.get_worker("w2").await.unwrap().is_none());
    let next = register(&store, "w3", 0, false).await.unwrap();
    assert!(
        next > first && next < first + 1000,
        "the refused floor must not move the numbers: {first} then {next}"
    );
    // A floor this database did issue is no reason to refuse.
    assert!(register(&store, "w4", next, false).await.unwrap() > next);
}

async fn an_accepted_floor_is_adopted_and_never_issued_again(store: Store) {
    let first = register(&store, "w1", 0, false).await.unwrap();
    let adopted = register(&store, "w2", first + 500, true).await.unwrap();
    assert_eq!(adopted, first + 501);
    assert!(register(&store, "w3", 0, false).await.unwrap() > adopted);
}

async fn adoptions_at_once_with_other_registrations_never_lower_the_numbers(store: Store) {
    let base = register(&store, "seed", 0, false).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24i64 {
        let store = store.clone();
        tasks.spawn(async move {
            let name = format!("w{i}");
            // Every third adopts a floor far above anything issued, each a
            // different one; the rest register plainly.
            let floor = if i % 3 == 0 { base + 1000 * (i + 1) } else { 0 };
            (floor, register_retrying(&store, &name, floor, true).await)
        });
    }
    let mut numbers = BTreeSet::new();
    let mut highest_floor = 0;
    while let Some(done) = tasks.join_next().await {
        let (floor, generation) = done.unwrap();
        assert!(
            generation > floor,
            "{generation} not above its floor {floor}"
        );
        assert!(
            numbers.insert(generation),
            "generation {generation} issued twice"
        );
        highest_floor = highest_floor.max(floor);
    }
    let after = register(&store, "after", 0, false).await.unwrap();
    assert!(
        after > highest_floor && !numbers.contains(&after),
        "{after} after floors up to {highest_floor}"
    );
}

/// `--allow-privileged`, as each registration says it: kept with the row,
/// read back by every read of workers, and replaced by the next
/// registration (a worker restarted without the flag allows nothing).
async fn allow_privileged_follows_the_latest_registration(store: Store) {
    let register_as = |name: &'static str, identity: &'static str, allow: bool| {
        let store = store.clone();
        async move {
            let info = hangar_store::WorkerInfo {
                state_identity: identity.into(),
                allow_privileged: allow,
                ..worker_info(name)
            };
            store.register_worker(&info, T0).await.unwrap();
        }
    };
    let allowed = |name: &'static str| {
        let store = store.clone();
        async move {
            let one = store.get_worker(name).await.unwrap().unwrap();
            let listed = store.list_workers().await.unwrap();
            let listed = listed.iter().find(|w| w.info.name == name).unwrap();
            assert_eq!(one, *listed, "{name}");
            one.info.allow_privileged
        }
    };
    register_as("root", "disk-1", true).await;
    register_as("plain", "disk-2", false).await;
    assert!(allowed("root").await);
    assert!(!allowed("plain").await);
    // Again on the same disk without the flag, then with it on a new disk.
    register_as("root", "disk-1", false).await;
    assert!(!allowed("root").await);
    register_as("root", "disk-3", true).await;
    assert!(allowed("root").await);
    register_as("plain", "disk-2", true).await;
    assert!(allowed("plain").await);
}

on_both_databases!(
    allow_privileged_follows_the_latest_registration,
    registrations_at_once_each_get_their_own_number,
    an_unissued_floor_is_refused_and_changes_nothing,
    an_accepted_floor_is_adopted_and_never_issued_again,
    adoptions_at_once_with_other_registrations_never_lower_the_numbers,
);
