use std::time::Duration;

use hangar_store::StoreError;
use tokio_util::sync::CancellationToken;

use crate::Web;

/// Runs the lifecycle loop every `interval` until `shutdown`. A failing pass
/// (database down) is logged and retried on the next tick: the loop never
/// dies.
pub async fn run(web: Web, interval: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Err(e) = tick(&web).await {
            tracing::warn!(error = %e, "lifecycle pass failed; retrying next tick");
        }
    }
}

pub async fn tick(web: &Web) -> Result<usize, StoreError> {
    let applied = web
        .store()
        .run_lifecycle(&web.config().lifecycle, web.now())
        .await?;
    for action in &applied {
        tracing::info!(worker = %action.name, event = %action.event, cause = %action.cause, "worker lifecycle");
        web.metrics().lifecycle_event(action.event);
    }
    Ok(applied.len())
}
