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
