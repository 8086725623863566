//! The scheduler's wake-ups across web nodes: what wakes this node's
//! scheduler (a new version, a finished build, a pin, a trigger) is also
//! sent on the database's channel, and what other nodes send wakes this
//! one. Without it, a version found by one node's check waits for the
//! scheduler tick of the node holding the pipeline's lease. On SQLite
//! there is no channel and this is a no-op.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Web;

/// How long a node waits before listening again after the database
/// refused it (a restart, a failover).
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// Tells the other nodes, without waiting: [`tell`], the task `serve`
/// owns, sends it. A wake-up that cannot be sent costs them at most a tick.
pub(crate) fn tell_other_nodes(web: &Web) {
    if web.store().backend() == hangar_store::Backend::Postgres {
        web.wake_other_nodes();
    }
}

/// Sends the database's wake-up for every [`tell_other_nodes`] until
/// shutdown; wake-ups asked for while one is sent go as one.
pub(crate) async fn tell(web: Web, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = web.others_to_wake() => {}
        }
        if let Err(e) = web.store().notify_scheduler().await {
            tracing::debug!(error = %e, "could not send the scheduler's wake-up to other nodes");
        }
    }
}

/// Wakes this node's scheduler on every wake-up the database delivers,
/// until shutdown; listens again after a lost connection.
pub(crate) async fn listen(web: Web, shutdown: CancellationToken) {
    loop {
        match web.store().scheduler_listener().await {
            Ok(None) => return,
            Ok(Some(mut listener)) => loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    got = listener.next() => match got {
                        Ok(()) => web.wake_local_scheduler(),
                        Err(e) => {
                            tracing::warn!(error = %e, "lost the scheduler's wake-up channel; listening again");
                            break;
                        }
                    },
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other nodes' scheduler wake-ups");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RELISTEN_AFTER) => {}
        }
    }
}
