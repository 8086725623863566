//! The build engine: one loop per web node claims builds (pending ones, and
//! started ones whose node died) and runs each in a task it owns. A build's
//! progress is in the database step by step, so any node can resume it.

mod caches;
mod context;
mod get_step;
mod logs;
mod placement;
mod runner;
mod task_step;
mod watch;

use std::time::Duration;

use hangar_core::backoff::{Backoff, Change};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::Web;

/// How long a claimed build stays with its node without a renewal.
pub const LEASE_MS: i64 = 30_000;

/// Claims and runs builds until `shutdown`. On shutdown the running builds
/// stop where they are; their leases run out and they are resumed by the
/// next node to look (this one, restarted, or another).
pub async fn run(web: Web, shutdown: CancellationToken) {
    let mut builds = JoinSet::new();
    // A database that refuses claims (down, or its disk full) is asked
    // again less and less often, and said so once, not every second.
    let mut claim_errors = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        let mut pause = Duration::from_secs(1);
        loop {
            match web
                .store()
                .claim_build(web.node_id(), web.now(), LEASE_MS)
                .await
            {
                Ok(Some(build)) => {
                    claimed(&mut claim_errors);
                    tracing::info!(build = build.id, "running build");
                    builds.spawn(runner::run(web.clone(), build, shutdown.child_token()));
                }
                Ok(None) => {
                    claimed(&mut claim_errors);
                    break;
                }
                Err(e) => {
                    let (delay, change) = claim_errors.failed();
                    if change == Change::StartedFailing {
                        tracing::warn!(error = %e, "cannot claim builds; retrying with backoff");
                    }
                    pause = delay;
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = web.engine_wake().notified() => {}
            _ = tokio::time::sleep(pause) => {}
            Some(_) = builds.join_next() => {}
        }
    }
    while builds.join_next().await.is_some() {}
}

fn claimed(errors: &mut Backoff) {
    if let Change::Recovered { failures } = errors.succeeded() {
        tracing::info!(failures, "claiming builds works again");
    }
}
