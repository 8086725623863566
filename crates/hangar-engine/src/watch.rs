//! Watching a step's worker while the step runs there.

use std::time::Duration;

use hangar_core::build::{worker_change, StepFailure, WorkerSeen};
use hangar_core::engine::{Observed, Settle, WorkerBeat};
use tokio_util::sync::CancellationToken;

use crate::Engine;

/// A step that did not end because the build was interrupted (its node
/// stopped or lost the build's lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interrupted;

/// How often a step waiting on a worker looks at that worker's row.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What web knows of `worker` now. A database error reads as unknown,
/// never as a failure of the step.
pub(crate) async fn seen(engine: &Engine, worker: &str) -> Observed<WorkerSeen> {
    let read = engine.store().get_worker(worker).await;
    if let Err(e) = &read {
        tracing::warn!(%worker, error = %e, "cannot read the worker's state");
    }
    Observed::from_read(read.map(|row| {
        row.map(|w| WorkerSeen {
            state: w.state,
            generation: w.generation,
            state_identity: w.info.state_identity,
        })
    }))
}

/// The failure the step suffers because its worker changed, if it did.
pub(crate) async fn check(
    engine: &Engine,
    worker: &str,
    at_start: &WorkerSeen,
) -> Option<StepFailure> {
    match seen(engine, worker).await {
        Observed::Present(now) => worker_change(worker, at_start, Some(&now)),
        Observed::Absent => worker_change(worker, at_start, None),
        Observed::Unknown => None,
    }
}

/// After a step failed because `worker` could not be reached, waits until
/// web has made up its mind about that worker (`hangar_core::engine::Settle`).
pub(crate) async fn settle(
    engine: &Engine,
    worker: &str,
    failed_at: i64,
    stop: &CancellationToken,
) -> Result<(), Interrupted> {
    let config = engine.config();
    let judge_ms = Settle::judge_ms(config.heartbeat_ttl_ms, config.lifecycle_pass_ms);
    let read = |engine: &Engine| {
        let engine = engine.clone();
        let worker = worker.to_string();
        async move {
            Observed::from_read(engine.store().get_worker(&worker).await.map(|row| {
                row.map(|w| WorkerBeat {
                    state: w.state,
                    generation: w.generation,
                    last_heartbeat_at: w.last_heartbeat_at,
                })
            }))
        }
    };
    let Observed::Present(first) = read(engine).await else {
        return Ok(());
    };
    let mut settle = Settle::new(first.generation, failed_at, judge_ms);
    loop {
        if settle.observe(read(engine).await, engine.now()) {
            return Ok(());
        }
        tokio::select! {
            _ = stop.cancelled() => return Err(Interrupted),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Runs `work` while watching the workers it depends on: if one of them
/// stalls, restarts or leaves, the work is dropped with that failure. The
/// work goes on being polled while the watch reads the database: suspended
/// mid-write it may hold the database's only connection (SQLite).
pub(crate) async fn guarded<T>(
    engine: &Engine,
    workers: &[(&str, &WorkerSeen)],
    work: impl std::future::Future<Output = T>,
) -> Result<T, StepFailure> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return Ok(out),
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let changed = async {
            for (name, seen) in workers {
                if let Some(f) = check(engine, name, seen).await {
                    return Some(f);
                }
            }
            None
        };
        tokio::select! {
            out = &mut work => return Ok(out),
            changed = changed => if let Some(f) = changed {
                return Err(f);
            }
        }
    }
}
