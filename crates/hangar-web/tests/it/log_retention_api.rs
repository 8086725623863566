//! `build_log_retention` on a garbage collection pass, on SQLite and
//! PostgreSQL: the builds past the policy lose their events and say so
//! (`logs_reaped_at`), the kept ones and a running one keep theirs.

use crate::common::TestWeb;
use hangar_core::build::{BuildEventKind, BuildStatus};
use hangar_store::Store;
use hangar_testkit::on_both_databases;

const CONFIG: &str = "
jobs:
- name: j
  build_log_retention: {builds: 2, minimum_succeeded_builds: 1}
  plan:
  - task: t
    config: {platform: linux, run: {path: x}}
- name: keeps-all
  plan:
  - task: t
    config: {platform: linux, run: {path: x}}
";

/// Triggers a build of `job` and, unless `status` is none, runs it to that
/// end by hand (no worker here), with one line of log.
async fn build(t: &TestWeb, store: &Store, job: &str, status: Option<BuildStatus>) -> i64 {
    let b = t.admin.trigger_job("main", "p", job).await.unwrap();
    let claimed = store
        .claim_build("n", 1, 3_600_000)
        .await
        .unwrap()
        .expect("the build just triggered");
    assert_eq!(claimed.id, b.id);
    store
        .append_build_event(b.id, None, BuildEventKind::Log, "output\n", 1)
        .await
        .unwrap();
    if let Some(status) = status {
        assert!(store
            .finish_build(b.id, 1, status, None, None, 2)
            .await
            .unwrap());
    }
    b.id
}

async fn events(store: &Store, id: i64) -> usize {
    store.build_events(id, 0, 100).await.unwrap().len()
}

async fn builds_past_the_policy_lose_their_logs_and_say_so(store: Store) {
    let t = TestWeb::start(store.clone()).await;
    t.admin
        .set_pipeline("main", "p", CONFIG, None)
        .await
        .unwrap();
    t.admin.pause_pipeline("main", "p", false).await.unwrap();
    use BuildStatus::*;
    // #1 s, #2 f, #3 f, #4 f, #5 running: keep #5 (running), #4 and the
    // newest success #1; reap #3 and #2.
    let mut ids = vec![];
    for status in [
        Some(Succeeded),
        Some(Failed),
        Some(Failed),
        Some(Failed),
        None,
    ] {
        ids.push(build(&t, &store, "j", status).await);
    }
    let other = build(&t, &store, "keeps-all", Some(Failed)).await;
    t.web.control().run_gc_once().await;
    let mut kept = vec![];
    for (n, id) in ids.iter().enumerate() {
        let shown = t
            .admin
            .job_build("main", "p", "j", n as i64 + 1)
            .await
            .unwrap();
        let count = events(&store, *id).await;
        assert_eq!(
            shown.logs_reaped_at.is_some(),
            count == 0,
            "build #{}: reaped says the events are gone",
            n + 1
        );
        if count > 0 {
            kept.push(n + 1);
        }
    }
    assert_eq!(kept, [1, 4, 5]);
    assert_eq!(
        events(&store, other).await,
        1,
        "a job without a policy keeps its logs"
    );
    // A second pass changes nothing more.
    t.web.control().run_gc_once().await;
    let reaped_at = |n| t.admin.job_build("main", "p", "j", n);
    assert!(reaped_at(2).await.unwrap().logs_reaped_at.is_some());
    assert!(reaped_at(1).await.unwrap().logs_reaped_at.is_none());
    // The store itself refuses to reap a running build's log.
    assert!(!store.reap_build_logs(ids[4], 9).await.unwrap());
    assert_eq!(events(&store, ids[4]).await, 1);
    // The running one finishes: now #5 and #1 are kept, #4 goes.
    assert!(store
        .finish_build(ids[4], 1, Failed, None, None, 3)
        .await
        .unwrap());
    t.web.control().run_gc_once().await;
    assert_eq!(events(&store, ids[3]).await, 0);
    assert_eq!(events(&store, ids[4]).await, 1);
    assert_eq!(events(&store, ids[0]).await, 1);
    // A reaped build cannot be marked again.
    assert!(!store.reap_build_logs(ids[1], 9).await.unwrap());
    t.stop().await;
}

on_both_databases!(builds_past_the_policy_lose_their_logs_and_say_so);
