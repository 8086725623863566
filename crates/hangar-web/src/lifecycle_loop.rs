use std::time::Duration;

use hangar_core::LifecycleConfig;
use hangar_store::StoreError;
use tokio_util::sync::CancellationToken;

use crate::Web;

/// Runs the lifecycle loop every `interval` until `shutdown`. A failing pass
/// (database down) is logged and retried on the next tick: the loop never
/// dies.
///
/// Silence is judged only from the moment web could hear it: for one TTL
/// after this node starts, and after its database answers again following a
/// failed pass (or a pass that waited for it longer than a quarter of the
/// TTL), no worker is declared dead for not heartbeating, since its
/// heartbeats could not land while web or its database was down.
pub(crate) async fn run(web: Web, interval: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listening_since = web.now();
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = web.now();
        if failing {
            listening_since = now;
        }
        let config = judged_from(&web.config().lifecycle, listening_since, now);
        let result = pass(&web, &config, now).await;
        let done = web.now();
        match result {
            Ok(_) => {
                failing = false;
                // A pass that waited long for the database saw it down (or
                // stuck) meanwhile: heartbeats could not land either.
                if done - now > web.config().lifecycle.heartbeat_ttl_ms / 4 {
                    listening_since = done;
                }
            }
            Err(e) => {
                failing = true;
                tracing::warn!(error = %e, "lifecycle pass failed; retrying next tick");
            }
        }
    }
}

/// The lifecycle rules for a pass at `now` by a node that has been able to
/// hear heartbeats since `listening_since`: within one TTL of that, silence
/// does not expire anyone.
pub(crate) fn judged_from(
    config: &LifecycleConfig,
    listening_since: i64,
    now: i64,
) -> LifecycleConfig {
    let mut config = *config;
    if now < listening_since.saturating_add(config.heartbeat_ttl_ms) {
        config.heartbeat_ttl_ms = i64::MAX / 2;
    }
    config
}

pub(crate) async fn tick(web: &Web) -> Result<usize, StoreError> {
    pass(web, &web.config().lifecycle, web.now()).await
}

async fn pass(web: &Web, config: &LifecycleConfig, now: i64) -> Result<usize, StoreError> {
    let applied = web.store().run_lifecycle(config, now).await?;
    for action in &applied {
        tracing::info!(worker = %action.name, event = %action.event, cause = %action.cause, "worker lifecycle");
        web.metrics().lifecycle_event(action.event);
    }
    Ok(applied.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_not_judged_until_web_has_listened_for_a_ttl() {
        let config = LifecycleConfig {
            heartbeat_ttl_ms: 1_000,
            stalled_worker_timeout_ms: Some(60_000),
        };
        // (listening since, now, ttl used)
        let cases = [
            (10_000, 10_000, i64::MAX / 2),
            (10_000, 10_999, i64::MAX / 2),
            (10_000, 11_000, 1_000),
            (10_000, 50_000, 1_000),
        ];
        for (since, now, ttl) in cases {
            let got = judged_from(&config, since, now);
            assert_eq!(got.heartbeat_ttl_ms, ttl, "since {since} now {now}");
            assert_eq!(got.stalled_worker_timeout_ms, Some(60_000));
        }
    }

    #[test]
    fn a_worker_silent_through_web_s_outage_is_not_stalled_at_once() {
        use hangar_core::lifecycle::plan_lifecycle;
        use hangar_core::{WorkerSnapshot, WorkerState};
        let config = LifecycleConfig {
            heartbeat_ttl_ms: 1_000,
            stalled_worker_timeout_ms: None,
        };
        // Its last heartbeat landed before web went down for 5 s.
        let w = WorkerSnapshot {
            name: "w".into(),
            state: WorkerState::Running,
            generation: 1,
            ephemeral: false,
            last_heartbeat_at: 0,
            state_changed_at: 0,
            unfinished_work: 0,
        };
        let back = 5_000;
        let first_pass = judged_from(&config, back, back + 100);
        assert!(plan_lifecycle(std::slice::from_ref(&w), back + 100, &first_pass).is_empty());
        // Still silent a TTL after web came back: it is dead after all.
        let later = judged_from(&config, back, back + 1_100);
        assert_eq!(plan_lifecycle(&[w], back + 1_100, &later).len(), 1);
    }
}
