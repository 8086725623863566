//! Concourse's `set_pipeline` step: a pipeline of the build's team
//! configured from a file of an artifact, through the store's one set path
//! (the config validated whole as `hangar set-pipeline`'s, with its
//! errors and warnings). As in Concourse: `self` is the build's own
//! pipeline; a pipeline the step creates starts unpaused; an unchanged
//! config is not written again ("no changes to apply"). Unlike Concourse,
//! a build sets pipelines of its own team only (Concourse lets the `main`
//! team's builds set any team's), and `team` with `self` is refused rather
//! than ignored. With `instance_vars` it sets that instance of the
//! pipeline, its vars interpolated into the config first.

use hangar_core::build::{BuildEventKind, StepKind, StepState};
use hangar_core::instance_vars::{InstanceVars, PipelineRef};
use hangar_core::pipeline::{diff, parse_pipeline_value};
use hangar_core::plan::{ArtifactFile, SetPipelineStep};
use hangar_store::{Created, StoreError};

use crate::artifact_files::read_all;
use crate::context::{give_up, succeed, BuildContext, Interrupted, StepEnd};

/// The most config errors written to the build log (all are counted).
const MAX_ERRORS_SHOWN: usize = 20;

pub(crate) async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &SetPipelineStep,
) -> Result<StepEnd, Interrupted> {
    let (mut record, done) = ctx
        .resume_step(step_id, &step.set_pipeline, StepKind::SetPipeline)
        .await;
    if let Some(end) = done {
        return Ok(end);
    }
    record.state = StepState::Running;
    record.started_at.get_or_insert(ctx.engine.now());
    ctx.save(&record).await;
    let target = match target(ctx, step) {
        Ok(t) => t,
        Err(why) => return Ok(give_up(ctx, &mut record, StepState::Failed, None, why).await),
    };
    let (team, name) = (target.0.as_str(), target.1.as_str());
    let files = std::iter::once(&step.file)
        .chain(&step.var_files)
        .map(|f| ArtifactFile::parse(f))
        .collect::<Result<Vec<_>, _>>();
    let files = match files {
        Ok(f) => f,
        Err(e) => return Ok(give_up(ctx, &mut record, StepState::Failed, None, e).await),
    };
    let mut contents = match read_all(ctx, step_id, "set_pipeline", name, &files).await? {
        Ok(c) => c,
        Err((state, why)) => return Ok(give_up(ctx, &mut record, state, None, why).await),
    };
    let template = contents.remove(0);
    let var_files: Vec<(String, Vec<u8>)> = step.var_files.iter().cloned().zip(contents).collect();
    // `self` of an instance: its own vars fill the config, as when it was set.
    let own_vars;
    let step = match PipelineRef::parse(name) {
        Ok(r) if step.is_self() && !r.instance_vars.is_empty() => {
            own_vars = SetPipelineStep {
                instance_vars: Some(r.instance_vars.as_map().clone()),
                ..step.clone()
            };
            &own_vars
        }
        _ => step,
    };
    let value = match step.render(&template, &var_files) {
        Ok(v) => v,
        Err(why) => return Ok(give_up(ctx, &mut record, StepState::Failed, None, why).await),
    };
    let validated = match parse_pipeline_value(&value) {
        Ok(v) => v,
        Err(errs) => {
            ctx.log(Some(step_id), BuildEventKind::Log, "invalid pipeline:")
                .await;
            for e in errs.errors.iter().take(MAX_ERRORS_SHOWN) {
                ctx.log(Some(step_id), BuildEventKind::Log, &format!("- {e}"))
                    .await;
            }
            let first = errs
                .errors
                .first()
                .map(|e| e.to_string())
                .unwrap_or_default();
            let why = format!(
                "{}: invalid pipeline config ({} errors): {first}",
                step.file,
                errs.errors.len()
            );
            return Ok(give_up(ctx, &mut record, StepState::Failed, None, why).await);
        }
    };
    for w in &validated.warnings {
        ctx.log(
            Some(step_id),
            BuildEventKind::Log,
            &format!("WARNING: {}", w.message),
        )
        .await;
    }
    let store = ctx.engine.store();
    let current = match store.pipeline_config(team, name, None).await {
        Ok((version, config)) => match parse_pipeline_value(&config) {
            Ok(old) => Some((version, old.config)),
            Err(e) => {
                let why = format!("the stored config of {team}/{name} does not read back: {e}");
                return Ok(give_up(ctx, &mut record, StepState::Errored, None, why).await);
            }
        },
        Err(StoreError::NotFound(_)) => None,
        Err(e) => {
            let why = format!("cannot read pipeline {team}/{name}: {e}");
            return Ok(give_up(ctx, &mut record, StepState::Errored, None, why).await);
        }
    };
    let old = current.as_ref().map(|(_, c)| c.clone()).unwrap_or_default();
    let changes = diff(&old, &validated.config);
    if current.is_some() && changes.is_empty() {
        // In the step's output, as Concourse's.
        ctx.log(Some(step_id), BuildEventKind::Log, "no changes to apply")
            .await;
        let line = format!("set_pipeline {team}/{name}: no changes to apply");
        return Ok(succeed(ctx, &mut record, &line).await);
    }
    for line in changes.render().lines() {
        ctx.log(Some(step_id), BuildEventKind::Log, line).await;
    }
    ctx.log(
        Some(step_id),
        BuildEventKind::Log,
        &format!("setting pipeline: {team}/{name}"),
    )
    .await;
    let from = current.map(|(v, _)| v).unwrap_or(0);
    let set = store
        .set_pipeline_as(
            team,
            name,
            &validated.config,
            Some(from),
            Created::Unpaused,
            ctx.engine.now(),
        )
        .await;
    match set {
        Ok(outcome) => {
            ctx.log(Some(step_id), BuildEventKind::Log, "done").await;
            record.version = Some(
                serde_json::json!({ "config_version": outcome.version.to_string() }).to_string(),
            );
            let line = format!(
                "set_pipeline {team}/{name}: config version {} written{}",
                outcome.version,
                if outcome.created {
                    " (a new pipeline, unpaused)"
                } else {
                    ""
                }
            );
            Ok(succeed(ctx, &mut record, &line).await)
        }
        // Changed meanwhile by someone else: not this config's fault, and
        // setting it over a change it never saw would lose that change.
        Err(StoreError::Conflict(m)) => {
            Ok(give_up(ctx, &mut record, StepState::Errored, None, m).await)
        }
        Err(StoreError::NotFound(m)) => {
            Ok(give_up(ctx, &mut record, StepState::Failed, None, m).await)
        }
        Err(e) => {
            let why = format!("cannot set pipeline {team}/{name}: {e}");
            Ok(give_up(ctx, &mut record, StepState::Errored, None, why).await)
        }
    }
}

/// The team and pipeline (its reference: an instance's carries its vars)
/// the step sets, or why it may not.
fn target(ctx: &BuildContext, step: &SetPipelineStep) -> Result<(String, String), String> {
    let own_team = ctx.team.as_str();
    if let Some(team) = &step.team {
        if step.is_self() {
            return Err(
                "team: `self` is the build's own pipeline in its own team; drop `team` \
                        (Concourse ignores it there, hangar refuses it so that it is not \
                        ignored silently)"
                    .into(),
            );
        }
        if team != own_team {
            return Err(format!(
                "team: a build sets pipelines of its own team ({own_team}) only, not of \
                 {team} (Concourse lets the main team's builds set any team's; hangar does not)"
            ));
        }
    }
    if step.is_self() {
        return match &ctx.pipeline {
            Some((team, pipeline)) => Ok((team.clone(), pipeline.clone())),
            None => Err(
                "set_pipeline: self: this build is not a build of a pipeline's job, so it has \
                 no pipeline of its own to set"
                    .into(),
            ),
        };
    }
    let reference = match &step.instance_vars {
        Some(vars) => {
            let vars = InstanceVars::from_value(serde_json::Value::Object(vars.clone()))
                .map_err(|e| format!("instance_vars: {e}"))?;
            PipelineRef {
                name: step.set_pipeline.clone(),
                instance_vars: vars,
            }
            .to_string()
        }
        None => step.set_pipeline.clone(),
    };
    Ok((own_team.to_string(), reference))
}
