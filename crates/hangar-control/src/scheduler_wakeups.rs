//! The scheduler's wake-ups across web nodes: what wakes this node's
//! scheduler (a new version, a finished build, a pin, a trigger) is also
//! sent on the database's channel, and what other nodes send wakes this
//! one. Without it, a version found by one node's check waits for the
//! scheduler tick of the node holding the pipeline's lease. On SQLite
//! there is no channel and this is a no-op.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Control;

/// How long a node waits before listening again after the database
/// refused it (a restart, a failover).
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// What the sending loop waits for.
enum Event {
    /// A wake-up is to be sent.
    ToSend,
    Shutdown,
}

/// Tells the other nodes, without waiting: [`tell`], a task the
/// supervisor owns, sends it. A wake-up that cannot be sent costs them at most a tick.
pub(crate) fn tell_other_nodes(control: &Control) {
    if control.store().backend() == hangar_store::Backend::Postgres {
        control.wake_other_nodes();
    }
}

/// Sends the database's wake-up for every [`tell_other_nodes`] until
/// shutdown; wake-ups asked for while one is sent go as one.
pub(crate) async fn tell(control: Control, shutdown: CancellationToken) {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = control.others_to_wake() => Event::ToSend,
        };
        if let Event::Shutdown = event {
            return;
        }
        if let Err(e) = control.store().notify_scheduler().await {
            tracing::debug!(error = %e, "could not send the scheduler's wake-up to other nodes");
        }
    }
}

/// Wakes this node's scheduler on every wake-up the database delivers,
/// until shutdown; listens again after a lost connection.
pub(crate) async fn listen(control: Control, shutdown: CancellationToken) {
    loop {
        match control.store().scheduler_listener().await {
            Ok(None) => return,
            Ok(Some(mut listener)) => loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    got = listener.next() => match got {
                        Ok(()) => control.wake_local_scheduler(),
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
