//! Watching a step's worker while the step runs there.

use hangar_core::build::{worker_change, StepFailure, WorkerSeen};

use crate::Web;

/// What web knows of `worker` now; `None` if it has no row. A database
/// error reads as "unknown", never as a failure of the step.
pub async fn seen(web: &Web, worker: &str) -> Result<Option<WorkerSeen>, ()> {
    match web.store().get_worker(worker).await {
        Ok(row) => Ok(row.map(|w| WorkerSeen {
            state: w.state,
            generation: w.generation,
            state_identity: w.info.state_identity,
        })),
        Err(e) => {
            tracing::warn!(%worker, error = %e, "cannot read the worker's state");
            Err(())
        }
    }
}

/// The failure the step suffers because its worker changed, if it did.
pub async fn check(web: &Web, worker: &str, at_start: &WorkerSeen) -> Option<StepFailure> {
    match seen(web, worker).await {
        Ok(now) => worker_change(worker, at_start, now.as_ref()),
        Err(()) => None,
    }
}

/// Runs `work` while watching the workers it depends on: if one of them
/// stalls, restarts or leaves meanwhile, the work is abandoned (dropped)
/// with that failure instead of waiting on a worker that will not answer.
pub async fn guarded<T>(
    web: &Web,
    workers: &[(&str, &WorkerSeen)],
    work: impl std::future::Future<Output = T>,
) -> Result<T, StepFailure> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return Ok(out),
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                for (name, seen) in workers {
                    if let Some(f) = check(web, name, seen).await {
                        return Err(f);
                    }
                }
            }
        }
    }
}

/// After a step failed because `worker` could not be reached, waits until
/// web has made up its mind about that worker, so the retry does not race
/// the failure detector: a dead worker that is not stalled yet still looks
/// running, holds the step's inputs and wins placement, and every retry
/// would fail on it at once until the attempts are gone. Returns when the
/// worker heartbeated after `failed_at` (it is alive; the trouble passed),
/// is stalled, registered again or left (it is dead; its volumes count as
/// lost and the retry fetches inputs anew), or after the heartbeat TTL and
/// two lifecycle passes (counted from when the database last failed to
/// answer, if it did meanwhile), whichever comes first.
pub async fn settle(
    web: &Web,
    worker: &str,
    failed_at: i64,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<(), super::context::Interrupted> {
    let config = web.config();
    let pass_ms = config
        .lifecycle_interval
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(1_000);
    let judge_ms = config
        .lifecycle
        .heartbeat_ttl_ms
        .saturating_add(pass_ms.saturating_mul(2));
    let mut deadline = failed_at.saturating_add(judge_ms);
    let first = web.store().get_worker(worker).await.ok().flatten();
    let Some(first) = first else { return Ok(()) };
    loop {
        match web.store().get_worker(worker).await {
            Ok(None) => return Ok(()),
            Ok(Some(w))
                if w.state == hangar_core::WorkerState::Stalled
                    || w.generation != first.generation
                    || w.last_heartbeat_at > failed_at =>
            {
                return Ok(())
            }
            Ok(Some(_)) => {}
            // While the database does not answer, heartbeats cannot land
            // and the lifecycle loop cannot judge: the wait starts over
            // once it answers.
            Err(_) => deadline = deadline.max(web.now().saturating_add(judge_ms)),
        }
        if web.now() >= deadline {
            return Ok(());
        }
        tokio::select! {
            _ = stop.cancelled() => return Err(super::context::Interrupted),
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}
