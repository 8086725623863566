//! Concourse's `load_var` step: a file of an artifact read and parsed into
//! the local var `((.:NAME))` of the steps after it, redacted from the
//! build's output unless `reveal`.
//!
//! The value lives in the memory of the node running the build, never in
//! the database (it may be a secret): a build resumed on another node runs
//! its `load_var` steps again, reading the files again.

use hangar_core::build::{BuildEventKind, StepKind, StepState};
use hangar_core::plan::LoadVarStep;

use crate::artifact_files::read_all;
use crate::context::{give_up, succeed, BuildContext, Interrupted, StepEnd};

pub(crate) async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &LoadVarStep,
) -> Result<StepEnd, Interrupted> {
    // A finished run of this step is not taken as done: its value is not
    // stored, so it is loaded again.
    let (mut record, _) = ctx
        .resume_step(step_id, &step.load_var, StepKind::LoadVar)
        .await;
    record.state = StepState::Running;
    record.error = None;
    record.started_at.get_or_insert(ctx.engine.now());
    ctx.save(&record).await;
    let file = match step.artifact_file() {
        Ok(f) => f,
        Err(e) => {
            let why = format!("file: {e}");
            return Ok(give_up(ctx, &mut record, StepState::Failed, None, why).await);
        }
    };
    ctx.log(
        Some(step_id),
        BuildEventKind::Step,
        &format!("loading var {} from {file}", step.load_var),
    )
    .await;
    let content = match read_all(ctx, step_id, "load_var", &step.load_var, &[file]).await? {
        Ok(mut c) => c.remove(0),
        Err((state, why)) => return Ok(give_up(ctx, &mut record, state, None, why).await),
    };
    let value = match step.parse_value(&content) {
        Ok(v) => v,
        Err(why) => return Ok(give_up(ctx, &mut record, StepState::Failed, None, why).await),
    };
    ctx.set_local_var(&step.load_var, value, step.reveal);
    let line = format!(
        "load_var {}: loaded as ((.:{}))",
        step.load_var, step.load_var
    );
    Ok(succeed(ctx, &mut record, &line).await)
}
