//! What every step that reads volumes shares (tasks, puts, file-based
//! task configs, refetched gets): whether an input artifact is usable now,
//! and the failure an operation on a worker's volumes brings. Apart from
//! the steps, so no step module imports another for them.

use hangar_core::build::StepFailure;
use hangar_core::engine::{call_failure, input_check, InputCheck, Observed, VolumeSeen};

use crate::context::BuildContext;
use crate::{watch, OpError};

/// Whether an input artifact can be used now (`hangar_core::engine::input_check`).
pub(crate) async fn input_usable(ctx: &BuildContext, handle: &str) -> InputCheck {
    let read = ctx.engine.store().get_volume(handle).await;
    let volume = Observed::from_read(read);
    let seen = match &volume {
        Observed::Present(v) => Observed::Present(VolumeSeen {
            state: v.state,
            missing_since: v.missing_since,
            worker: &v.worker,
        }),
        Observed::Absent => Observed::Absent,
        Observed::Unknown => Observed::Unknown,
    };
    let worker = match &volume {
        Observed::Present(v) => match watch::seen(&ctx.engine, &v.worker).await {
            Observed::Present(w) => Observed::Present(w.state),
            Observed::Absent => Observed::Absent,
            Observed::Unknown => Observed::Unknown,
        },
        _ => Observed::Unknown,
    };
    input_check(seen, worker)
}

/// The failure an operation on `worker`'s volumes brings.
pub(crate) fn op_failure(worker: &str, e: OpError) -> StepFailure {
    match e {
        OpError::Worker { worker, error } => call_failure(&worker, &error),
        OpError::Store(
            hangar_store::StoreError::Conflict(m) | hangar_store::StoreError::NotFound(m),
        ) => StepFailure::VolumeLost {
            worker: worker.to_string(),
            handle: m,
        },
        OpError::Store(e) => StepFailure::WorkerUnreachable {
            worker: worker.to_string(),
            reason: e.to_string(),
        },
    }
}
