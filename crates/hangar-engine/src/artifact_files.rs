//! Files read from the build's artifacts when a step runs (a `load_var`'s
//! value, a task's `file:`, a `set_pipeline`'s config and var files): on
//! the worker holding the artifact, under that worker's watch. A file the
//! worker cannot give is the step's own failure; a worker that is lost or
//! does not answer is the infrastructure's, retried as a leaf step's (an
//! artifact a get step made is fetched again elsewhere).

use std::collections::BTreeSet;

use hangar_core::build::{decide_retry, RetryDecision, StepFailure, StepState};
use hangar_core::engine::{read_file_failure, InputCheck, Observed};
use hangar_core::plan::{ArtifactFile, TaskStep, DEFAULT_ATTEMPTS};

use crate::context::{BuildContext, Interrupted};
use crate::halt::{split, Attempt};
use crate::step_inputs::input_usable;

/// How a step reading files gives up: the state it ends in and why.
pub(crate) type GiveUp = (StepState, String);

/// The content of every file of `files`, in order, each read whole; the
/// reads are tried again (all of them) when the infrastructure failed one.
pub(crate) async fn read_all(
    ctx: &BuildContext,
    step_id: &str,
    kind: &str,
    name: &str,
    files: &[ArtifactFile],
) -> Result<Result<Vec<Vec<u8>>, GiveUp>, Interrupted> {
    let mut avoid = BTreeSet::new();
    let mut attempt = 1;
    loop {
        let mut contents = Vec::with_capacity(files.len());
        let mut failed = None;
        for file in files {
            match split(read_once(ctx, step_id, file, &avoid).await)? {
                Ok(bytes) => contents.push(bytes),
                Err(f) => {
                    failed = Some(f);
                    break;
                }
            }
        }
        let Some(failure) = failed else {
            return Ok(Ok(contents));
        };
        match decide_retry(&failure, attempt, DEFAULT_ATTEMPTS, false) {
            RetryDecision::Retry { next_attempt } => {
                ctx.announce_retry(
                    step_id,
                    kind,
                    name,
                    &failure,
                    next_attempt,
                    DEFAULT_ATTEMPTS,
                    &mut avoid,
                )
                .await?;
                attempt = next_attempt;
            }
            RetryDecision::GiveUp(state) => {
                let mut why = failure.describe();
                if state == StepState::Errored {
                    why.push_str(&format!(" (after {attempt} attempts)"));
                }
                return Ok(Err((state, why)));
            }
        }
    }
}

/// One read of `file` on the worker holding its artifact.
async fn read_once(
    ctx: &BuildContext,
    step_id: &str,
    file: &ArtifactFile,
    avoid: &BTreeSet<String>,
) -> Attempt<Vec<u8>> {
    let artifact = &file.artifact;
    let Some(mut handle) = ctx.artifact(artifact) else {
        Err(StepFailure::Invalid {
            reason: format!(
                "{file}: no artifact named {artifact} (no earlier step produced it and none \
                 was uploaded)"
            ),
        })?
    };
    if let InputCheck::Lost { worker } = input_usable(ctx, &handle).await {
        let lost_on = worker.unwrap_or_else(|| "an unknown worker".into());
        let Some(get) = ctx.producers.get(artifact.as_str()) else {
            Err(StepFailure::VolumeLost {
                worker: lost_on,
                handle,
            })?
        };
        ctx.log(
            Some(step_id),
            hangar_core::build::BuildEventKind::Infra,
            &format!(
                "{artifact} was on worker {lost_on}, which is gone or stalled; fetching it again"
            ),
        )
        .await;
        let mut skip = avoid.clone();
        skip.insert(lost_on);
        handle = crate::get_step::refetch(ctx, step_id, get, &skip).await?;
    }
    let volume = match ctx.engine.store().get_volume(&handle).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Err(StepFailure::VolumeLost {
                worker: "an unknown worker".into(),
                handle,
            }
            .into())
        }
        Err(e) => Err(StepFailure::WorkerUnreachable {
            worker: "?".into(),
            reason: format!("cannot read where {artifact} is: {e}"),
        })?,
    };
    let worker = volume.worker.as_str();
    let Observed::Present(seen) = crate::watch::seen(&ctx.engine, worker).await else {
        Err(StepFailure::WorkerGone {
            worker: worker.to_string(),
        })?
    };
    let read = ctx
        .call(
            &[(worker, &seen)],
            ctx.engine.workers().read_file(worker, &handle, &file.path),
        )
        .await?;
    Ok(match read {
        Ok(bytes) => bytes,
        Err(e) => {
            let (failure, lost) = read_file_failure(worker, &handle, &file.to_string(), &e);
            if lost {
                if let Err(err) = ctx
                    .engine
                    .store()
                    .mark_volume_missing(&handle, ctx.engine.now())
                    .await
                {
                    tracing::warn!(%handle, error = %err, "cannot mark a lost artifact missing");
                }
            }
            Err(failure)?
        }
    })
}

/// A task step whose config is in a `file` of an artifact, as it runs:
/// the file read, its vars filled from the step's `vars` and then the
/// build's local vars, the step's overrides applied, and the result
/// checked as any task config is. Every problem of the file is the step's
/// own failure, named with the file's path.
pub(crate) async fn task_from_file(
    ctx: &BuildContext,
    step_id: &str,
    step: &TaskStep,
    file: &str,
) -> Result<Result<TaskStep, GiveUp>, Interrupted> {
    let failed = |why: String| Ok(Err((StepState::Failed, why)));
    let parsed = match ArtifactFile::parse(file) {
        Ok(f) => f,
        Err(e) => return failed(format!("file: {e}")),
    };
    let content = match read_all(ctx, step_id, "task", &step.task, &[parsed]).await? {
        Ok(mut c) => c.remove(0),
        Err(give_up) => return Ok(Err(give_up)),
    };
    let config = match hangar_core::plan::file_steps::task_config_from_file(
        file,
        &content,
        step.vars.as_ref(),
        step.params.as_ref(),
        step.container_limits.as_ref(),
    ) {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let config = match ctx.fill_local_vars_in(&config) {
        Ok(c) => c,
        Err(e) => return failed(format!("{file}: {e}")),
    };
    let resolved = step.with_config(config);
    if let Err(e) = resolved.parse_config() {
        return failed(format!("{file}: {e}"));
    }
    Ok(Ok(resolved))
}
