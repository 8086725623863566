//! This node's heartbeat in `web_nodes`: the operator (and every node) can
//! see which nodes are alive, and loops that share work between nodes can
//! tell a dead node within seconds.

use std::time::Duration;

use hangar_core::backoff::{Backoff, Change};
use hangar_core::leases::{WEB_NODE_HEARTBEAT_MS, WEB_NODE_TTL_MS};
use tokio_util::sync::CancellationToken;

use crate::Control;

/// Rows of nodes silent this long are removed (a node killed, never back).
const FORGET_AFTER_MS: i64 = 3_600_000;

/// What the loop waits for.
enum Event {
    HeartbeatDue,
    Shutdown,
}

pub(crate) async fn run(control: Control, shutdown: CancellationToken) {
    let name = control.node_id().to_string();
    let mut failures = Backoff::new(
        Duration::from_millis(WEB_NODE_HEARTBEAT_MS as u64),
        Duration::from_millis(WEB_NODE_TTL_MS as u64),
    );
    loop {
        let pause = match control
            .store()
            .web_node_heartbeat(&name, control.now())
            .await
        {
            Ok(()) => {
                if let Change::Recovered { failures } = failures.succeeded() {
                    tracing::info!(failures, "web node heartbeats work again");
                }
                Duration::from_millis(WEB_NODE_HEARTBEAT_MS as u64)
            }
            Err(e) => {
                let (delay, change) = failures.failed();
                if change == Change::StartedFailing {
                    tracing::warn!(error = %e, "cannot record this web node's heartbeat");
                }
                delay
            }
        };
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = tokio::time::sleep(pause) => Event::HeartbeatDue,
        };
        match event {
            Event::Shutdown => break,
            Event::HeartbeatDue => {}
        }
    }
    // Leaving: this node's row goes at once, and long-dead nodes' with it.
    if let Err(e) = control
        .store()
        .forget_web_nodes(&name, control.now() - FORGET_AFTER_MS)
        .await
    {
        tracing::warn!(error = %e, "cannot remove this web node's row; it ages out");
    }
}
