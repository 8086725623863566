//! Web stops within its drain time whatever its clients are doing: a
//! watcher long-polling a build's log does not hold it for the poll's
//! length.

use std::time::Duration;

use crate::common::TestWeb;
use hangar_store::Store;

async fn a_long_polling_watcher_does_not_hold_web_past_its_drain_time(store: Store) {
    let t = TestWeb::start(store).await;
    let build = t
        .web
        .store()
        .create_build("job", None, "[]", "{}", 1)
        .await
        .unwrap();
    let url = format!(
        "{}/api/v1/builds/{}/events?after=1000000&wait_ms=30000",
        t.url, build.id
    );
    let watcher = t.raw.get(url).bearer_auth(crate::common::ADMIN).send();
    let watcher = tokio::spawn(watcher);
    // Let the request reach its long poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!watcher.is_finished(), "the watcher's poll ended at once");
    // The poll would last 30 s; the drain ends it after 10 s. 25 s tells
    // the two apart with room for a slow machine.
    tokio::time::timeout(Duration::from_secs(25), t.stop())
        .await
        .expect("web stops within its drain time while a watcher long-polls");
    assert!(
        hangar_web::DRAIN_WITHIN < Duration::from_secs(25),
        "the test's bound assumes a drain time under 25 s"
    );
    watcher.abort();
}

hangar_testkit::on_both_databases!(a_long_polling_watcher_does_not_hold_web_past_its_drain_time);
