//! The versions a job build used (its `get`s of pipeline resources) and
//! produced (its `put`s), recorded so the scheduler can ask which versions
//! went through a job. A build of the plan API records nothing.
//!
//! Every write is idempotent (the store keeps the first row), so a step
//! resumed on another node, or after a failed write, records again safely.
//! A write that fails stops this run of the build: it is resumed (by the
//! next node to claim it) from the step's saved record, which holds the
//! version, and records it then.

use hangar_core::build::BuildEventKind;
use serde_json::{Map, Value};

use crate::context::{BuildContext, Interrupted};

/// What a recorded version was to the build.
pub(crate) enum Role<'a> {
    /// A `get` step's version, under the step's name.
    Input(&'a str),
    /// The version a `put` step's `out` made.
    Output,
}

/// Saves `version` of the job's pipeline resource `resource` (with the
/// `metadata` a get's `in` answered; `[]` for none) and records it as the
/// build's input or output.
pub(crate) async fn record(
    ctx: &BuildContext,
    step_id: &str,
    resource: &str,
    version: &Map<String, Value>,
    metadata: &Value,
    role: Role<'_>,
) -> Result<(), Interrupted> {
    let Some(job) = &ctx.job_build else {
        return Ok(());
    };
    let store = ctx.engine.store();
    let failed = |e: hangar_store::StoreError| {
        tracing::warn!(build = ctx.build_id, step = step_id, error = %e,
            "cannot record the step's version; leaving the build to be resumed");
        Interrupted
    };
    let Some(resource_id) = store
        .pipeline_resource_id(job.pipeline_id, resource)
        .await
        .map_err(failed)?
    else {
        // The pipeline lost the resource since the build was planned: the
        // build goes on, only the record is missing, and it says so.
        ctx.log(
            Some(step_id),
            BuildEventKind::Infra,
            &format!(
                "resource {resource} is no longer in the pipeline; its version is not recorded"
            ),
        )
        .await;
        return Ok(());
    };
    let saved = store
        .save_resource_version(
            resource_id,
            &Value::Object(version.clone()),
            metadata,
            ctx.engine.now(),
        )
        .await
        .map_err(failed)?;
    match role {
        Role::Input(name) => store
            .record_build_input(ctx.build_id, job.job_id, name, resource_id, saved.id)
            .await
            .map_err(failed)?,
        Role::Output => store
            .record_build_output(ctx.build_id, job.job_id, resource_id, saved.id)
            .await
            .map_err(failed)?,
    }
    Ok(())
}

/// A succeeded build's inputs become its outputs too, as Concourse's, so
/// `passed` reads outputs alone.
pub(crate) async fn on_success(ctx: &BuildContext) -> Result<(), Interrupted> {
    if ctx.job_build.is_none() {
        return Ok(());
    }
    ctx.engine
        .store()
        .copy_build_inputs_to_outputs(ctx.build_id)
        .await
        .map_err(|e| {
            tracing::warn!(build = ctx.build_id, error = %e,
                "cannot record the build's outputs; leaving the build to be resumed");
            Interrupted
        })
}
