use std::time::Duration;

use hangar_core::lifecycle::hearing::Hearing;
use hangar_core::LifecycleConfig;
use hangar_store::StoreError;
use tokio_util::sync::CancellationToken;

use crate::Control;

/// What the loop waits for.
enum Event {
    Tick,
    Shutdown,
}

/// Runs the lifecycle loop every `interval` until `shutdown`. A failing pass
/// (database down) is logged and retried on the next tick: the loop never
/// dies. Silence is judged only from the moment web could hear it
/// ([`Hearing`]).
pub(crate) async fn run(control: Control, interval: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hearing = Hearing::new(control.now());
    let lifecycle = control.config().lifecycle;
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = ticker.tick() => Event::Tick,
        };
        match event {
            Event::Shutdown => return,
            Event::Tick => {
                let now = control.now();
                let rules = hearing.rules_for_pass(&lifecycle, now);
                let result = pass(&control, &rules, now).await;
                hearing.pass_ended(&lifecycle, result.is_ok(), now, control.now());
                if let Err(e) = result {
                    tracing::warn!(error = %e, "lifecycle pass failed; retrying next tick");
                }
            }
        }
    }
}

pub(crate) async fn tick(control: &Control) -> Result<usize, StoreError> {
    pass(control, &control.config().lifecycle, control.now()).await
}

async fn pass(control: &Control, config: &LifecycleConfig, now: i64) -> Result<usize, StoreError> {
    let applied = control.store().run_lifecycle(config, now).await?;
    for action in &applied {
        tracing::info!(worker = %action.name, event = %action.event, cause = %action.cause, "worker lifecycle");
        control.observer().lifecycle_event(action.event);
    }
    Ok(applied.len())
}
