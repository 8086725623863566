//! This node's heartbeat in `web_nodes`: the operator (and every node) can
//! see which nodes are alive, and loops that share work between nodes can
//! tell a dead node within seconds.

use std::time::Duration;

use hangar_core::backoff::{Backoff, Change};
use hangar_core::leases::{WEB_NODE_HEARTBEAT_MS, WEB_NODE_TTL_MS};
use tokio_util::sync::CancellationToken;

use crate::Web;

/// Rows of nodes silent this long are removed (a node killed, never back).
const FORGET_AFTER_MS: i64 = 3_600_000;

pub(crate) async fn run(web: Web, shutdown: CancellationToken) {
    let name = web.node_name().to_string();
    let mut failures = Backoff::new(
        Duration::from_millis(WEB_NODE_HEARTBEAT_MS as u64),
        Duration::from_millis(WEB_NODE_TTL_MS as u64),
    );
    loop {
        let pause = match web.store().web_node_heartbeat(&name, web.now()).await {
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
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    // Leaving: this node's row goes at once, and long-dead nodes' with it.
    if let Err(e) = web
        .store()
        .forget_web_nodes(&name, web.now() - FORGET_AFTER_MS)
        .await
    {
        tracing::warn!(error = %e, "cannot remove this web node's row; it ages out");
    }
}
