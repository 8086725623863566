//! The check loop's rows: due scopes, exclusive claims (also across two
//! stores on one database), recorded versions and errors, requests.

use hangar_core::pipeline::{parse_pipeline, PipelineConfig};
use hangar_store::{Store, VersionPage, CLAIM_MARGIN_MS};
use hangar_testkit::on_both_databases;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

fn config(yaml: &str) -> PipelineConfig {
    parse_pipeline(yaml).expect("a valid config").config
}

const PIPELINE: &str = "
resources:
- name: every-minute
  type: mock
  source: {n: 1}
- name: fast
  type: mock
  source: {n: 2}
  check_every: 10s
  check_timeout: 5s
- name: never
  type: mock
  source: {n: 3}
  check_every: never
jobs:
- name: j
  plan: [{get: every-minute}, {get: fast}, {get: never}]
";

async fn scope_of(store: &Store, resource: &str) -> i64 {
    store
        .resource("main", "p", resource)
        .await
        .unwrap()
        .scope_id
        .unwrap()
}

async fn claimed_ids(store: &Store, owner: &str, now: i64) -> Vec<i64> {
    let mut ids: Vec<i64> = store
        .claim_due_checks(owner, now, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.scope_id)
        .collect();
    ids.sort();
    ids
}

async fn due_scopes_follow_check_every_and_pauses(store: Store) {
    store
        .set_pipeline("main", "p", &config(PIPELINE), None, T0)
        .await
        .unwrap();
    let (minute, fast, never) = (
        scope_of(&store, "every-minute").await,
        scope_of(&store, "fast").await,
        scope_of(&store, "never").await,
    );
    // A new pipeline is paused: nothing is due, as in Concourse.
    assert!(claimed_ids(&store, "a", T0 + 1).await.is_empty());
    store
        .set_pipeline_paused("main", "p", false, T0 + 2)
        .await
        .unwrap();
    let mut both = vec![minute, fast];
    both.sort();
    assert_eq!(claimed_ids(&store, "a", T0 + 2).await, both);
    // Held: neither node takes them again.
    assert!(claimed_ids(&store, "b", T0 + 3).await.is_empty());

    let found = [json!({"v": "1"}), json!({"v": "2"}), json!({"v": "3"})];
    assert_eq!(
        store
            .finish_check(minute, "a", &found, None, T0 + 4)
            .await
            .unwrap(),
        Some(3)
    );
    store
        .finish_check(fast, "a", &[], Some("boom"), T0 + 4)
        .await
        .unwrap();
    // What a check that succeeded printed is kept; on a failed one it is
    // not written.
    store
        .set_check_output(minute, "fetched 3 refs")
        .await
        .unwrap();
    store.set_check_output(fast, "stale").await.unwrap();
    assert_eq!(
        store.check_status(minute).await.unwrap().output.as_deref(),
        Some("fetched 3 refs")
    );
    let status = store.check_status(fast).await.unwrap();
    assert_eq!(status.output, None);
    assert_eq!(status.error.as_deref(), Some("boom"));
    assert_eq!(status.last_finished_at, Some(T0 + 4));
    assert!(!status.checking);
    assert_eq!(status.next_check_at, Some(T0 + 10_004));
    assert_eq!(
        store.check_status(minute).await.unwrap().next_check_at,
        Some(T0 + 60_004)
    );
    // Only the 10s scope is due 10s later; the minute one a minute later.
    assert!(claimed_ids(&store, "a", T0 + 10_003).await.is_empty());
    assert_eq!(claimed_ids(&store, "a", T0 + 10_004).await, vec![fast]);
    assert_eq!(claimed_ids(&store, "a", T0 + 60_004).await, vec![minute]);

    // `never` is checked on request only, from the version asked for.
    let from = json!({"v": "9"});
    store
        .request_check(never, Some(&from), T0 + 70_000)
        .await
        .unwrap();
    let claimed = store.claim_due_checks("a", T0 + 70_001, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].scope_id, never);
    assert!(claimed[0].requested);
    assert_eq!(claimed[0].from, Some(from));
    store
        .finish_check(never, "a", &[json!({"v": "9"})], None, T0 + 70_002)
        .await
        .unwrap();
    let status = store.check_status(never).await.unwrap();
    assert_eq!(status.requested_at, None);
    assert_eq!(status.next_check_at, None);
    assert!(claimed_ids(&store, "a", T0 + 10_000_000).await.len() == 2);

    // Paused again: nothing periodic is due any more.
    for scope in [minute, fast] {
        store
            .finish_check(scope, "a", &[], None, T0 + 10_000_001)
            .await
            .unwrap();
    }
    // The next check's end clears what the last one printed.
    assert_eq!(store.check_status(minute).await.unwrap().output, None);
    store
        .set_pipeline_paused("main", "p", true, T0 + 10_000_002)
        .await
        .unwrap();
    assert!(claimed_ids(&store, "a", T0 + 99_000_000).await.is_empty());
}

async fn versions_keep_their_rows_and_order(store: Store) {
    store
        .set_pipeline("main", "p", &config(PIPELINE), None, T0)
        .await
        .unwrap();
    let scope = scope_of(&store, "never").await;
    let page = VersionPage {
        limit: 10,
        ..Default::default()
    };
    for (at, found) in [
        (
            1,
            vec![json!({"v": "1"}), json!({"v": "2"}), json!({"v": "3"})],
        ),
        (2, vec![json!({"v": "2"}), json!({"v": "4"})]),
    ] {
        store.request_check(scope, None, T0 + at).await.unwrap();
        assert_eq!(claimed_ids(&store, "a", T0 + at).await, vec![scope]);
        store
            .finish_check(scope, "a", &found, None, T0 + at)
            .await
            .unwrap();
    }
    let versions = store
        .resource_versions("main", "p", "never", page)
        .await
        .unwrap();
    let orders: Vec<(String, i64)> = versions
        .iter()
        .map(|v| (v.version.clone(), v.check_order))
        .collect();
    assert_eq!(
        orders,
        vec![
            (r#"{"v":"4"}"#.to_string(), 4),
            (r#"{"v":"3"}"#.to_string(), 3),
            (r#"{"v":"2"}"#.to_string(), 2),
            (r#"{"v":"1"}"#.to_string(), 1),
        ]
    );
}

async fn a_lapsed_claim_records_nothing(store: Store) {
    store
        .set_pipeline("main", "p", &config(PIPELINE), None, T0)
        .await
        .unwrap();
    let fast = scope_of(&store, "fast").await;
    store.request_check(fast, None, T0).await.unwrap();
    assert_eq!(claimed_ids(&store, "a", T0).await, vec![fast]);
    // The lease is the check's timeout (5s) and a margin.
    let lapsed = T0 + 5_000 + CLAIM_MARGIN_MS + 1;
    assert!(claimed_ids(&store, "b", lapsed - 2).await.is_empty());
    assert_eq!(claimed_ids(&store, "b", lapsed).await, vec![fast]);
    let late = store
        .finish_check(fast, "a", &[json!({"v": "late"})], Some("late"), lapsed + 1)
        .await
        .unwrap();
    assert_eq!(late, None);
    let status = store.check_status(fast).await.unwrap();
    assert_eq!(status.error, None);
    assert!(status.checking);
    assert!(store
        .resource_versions(
            "main",
            "p",
            "fast",
            VersionPage {
                limit: 10,
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .is_empty());
    // A request made while the check ran survives its end.
    store.request_check(fast, None, lapsed + 2).await.unwrap();
    store
        .finish_check(fast, "b", &[], None, lapsed + 3)
        .await
        .unwrap();
    assert_eq!(
        store.check_status(fast).await.unwrap().requested_at,
        Some(lapsed + 2)
    );
}

async fn shared_scopes_are_checked_once(store: Store) {
    store
        .set_pipeline("main", "p", &config(PIPELINE), None, T0)
        .await
        .unwrap();
    store
        .set_pipeline("main", "q", &config(PIPELINE), None, T0)
        .await
        .unwrap();
    let p_scope = scope_of(&store, "fast").await;
    let q_scope = store
        .resource("main", "q", "fast")
        .await
        .unwrap()
        .scope_id
        .unwrap();
    assert_eq!(p_scope, q_scope);
    let members = store.check_members(p_scope).await.unwrap();
    assert_eq!(members.len(), 2);
    store
        .set_pipeline_paused("main", "q", false, T0)
        .await
        .unwrap();
    // q unpaused: its members make the scope due (once).
    assert_eq!(claimed_ids(&store, "a", T0).await.len(), 2);
}

on_both_databases!(
    due_scopes_follow_check_every_and_pauses,
    versions_keep_their_rows_and_order,
    a_lapsed_claim_records_nothing,
    shared_scopes_are_checked_once,
);

/// Two stores (two web nodes) on one database claim at the same time:
/// every scope is taken by exactly one.
async fn two_stores_never_claim_one_scope(a: Store, b: Store) {
    let mut yaml = String::from("resources:\n");
    for i in 0..40 {
        yaml.push_str(&format!(
            "- name: r{i}\n  type: mock\n  source: {{n: {i}}}\n"
        ));
    }
    yaml.push_str("jobs:\n- name: j\n  plan:\n");
    for i in 0..40 {
        yaml.push_str(&format!("  - get: r{i}\n"));
    }
    a.set_pipeline("main", "p", &config(&yaml), None, T0)
        .await
        .unwrap();
    a.set_pipeline_paused("main", "p", false, T0).await.unwrap();
    let mut taken = Vec::new();
    for round in 0..3 {
        let now = T0 + round * 100_000_000;
        let (x, y) = tokio::join!(
            async {
                let mut ids = Vec::new();
                for _ in 0..10 {
                    ids.extend(claimed_ids_limit(&a, "a", now, 3).await);
                }
                ids
            },
            async {
                let mut ids = Vec::new();
                for _ in 0..10 {
                    ids.extend(claimed_ids_limit(&b, "b", now, 3).await);
                }
                ids
            },
        );
        let mut all: Vec<i64> = x.iter().chain(y.iter()).copied().collect();
        all.sort();
        let n = all.len();
        all.dedup();
        assert_eq!(all.len(), n, "a scope was claimed twice in round {round}");
        assert_eq!(n, 40, "round {round}");
        taken.push((x.len(), y.len()));
        for id in &x {
            a.finish_check(*id, "a", &[], None, now).await.unwrap();
        }
        for id in &y {
            b.finish_check(*id, "b", &[], None, now).await.unwrap();
        }
    }
}

async fn claimed_ids_limit(store: &Store, owner: &str, now: i64, limit: i64) -> Vec<i64> {
    store
        .claim_due_checks(owner, now, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.scope_id)
        .collect()
}

#[tokio::test]
async fn two_stores_on_one_sqlite_file_never_claim_one_scope() {
    let dir = tempfile::tempdir().unwrap();
    let url = hangar_testkit::sqlite_file_url(dir.path());
    let a = Store::open(&url).await.unwrap();
    let b = Store::open(&url).await.unwrap();
    two_stores_never_claim_one_scope(a, b).await;
}

#[tokio::test]
async fn two_stores_on_one_postgres_never_claim_one_scope() {
    let (a, url) = hangar_testkit::postgres_store_with_url().await;
    let b = Store::open(&url).await.unwrap();
    two_stores_never_claim_one_scope(a, b).await;
}
