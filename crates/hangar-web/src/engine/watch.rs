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
