//! A put step: the resource type's `out` on a worker with the put's inputs
//! (copy-on-write children of the build's artifacts, or copies streamed
//! from the worker that has them), its new version recorded with the step,
//! then the implicit get of that version (a step of its own, `<id>.get`)
//! into the artifact named like the put, unless `no_get`.
//!
//! The version is saved before the get starts: a build resumed after its
//! node or the get's worker died finds it and never runs `out` again; only
//! the get is retried. In a job build the version is then recorded as the
//! build's output (the implicit get is not an input, as in Concourse). An
//! `out` retried after its worker died fetches an input a get step made
//! again, as a task does.

use std::collections::{BTreeMap, BTreeSet};

use hangar_api::resources::ResourceAction;
use hangar_core::build::{BuildEventKind, StepFailure, StepKind, StepState, WorkerSeen};
use hangar_core::engine::Observed;
use hangar_core::plan::{GetStep, PutStep};
use serde_json::{json, Map, Value};

use crate::context::{give_up, BuildContext, Interrupted, StepEnd};
use crate::halt::{split, Attempt, Halt};
use crate::placement::{place_waiting, Wants};
use crate::{get_step, watch};

pub(crate) async fn run(
    ctx: &BuildContext,
    step_id: &str,
    step: &PutStep,
) -> Result<StepEnd, Interrupted> {
    let (mut record, done) = ctx.resume_step(step_id, &step.put, StepKind::Put).await;
    let version = match done {
        Some(end) if end.state != StepState::Succeeded => return Ok(end),
        Some(end) => match record
            .version
            .as_deref()
            .map(serde_json::from_str::<Map<String, Value>>)
        {
            Some(Ok(v)) => v,
            // Succeeded without a readable version: nothing to get.
            _ if step.no_get => return Ok(end),
            _ => {
                let why = format!("the recorded version of put {} is unreadable", step.put);
                return Ok(give_up(ctx, &mut record, StepState::Errored, None, why).await);
            }
        },
        None => match out(ctx, step_id, step, &mut record).await? {
            Ok(v) => v,
            Err(end) => return Ok(end),
        },
    };
    // Recorded before the implicit get: a build resumed from here finds
    // the version with the step and records it again, never runs `out`.
    if let Some(resource) = &step.resource {
        let role = crate::build_versions::Role::Output;
        let none = json!([]);
        crate::build_versions::record(ctx, step_id, resource, &version, &none, role).await?;
    }
    if step.no_get {
        return Ok(StepEnd {
            state: StepState::Succeeded,
            exit_code: Some(0),
            error: None,
        });
    }
    let get = GetStep {
        get: step.put.clone(),
        resource_type: step.resource_type.clone(),
        source: step.source.clone(),
        version: Some(version),
        params: step.get_params.clone(),
        tags: step.tags.clone(),
        infrastructure_attempts: step.infrastructure_attempts,
        // Concourse: the implicit get after a put is not an input of the
        // build, so it names no resource and records nothing.
        resource: None,
    };
    get_step::run(ctx, &format!("{step_id}.get"), &get).await
}

/// Runs `out` (retried on another worker after an infrastructure failure)
/// and records the version it answered.
async fn out(
    ctx: &BuildContext,
    step_id: &str,
    step: &PutStep,
    record: &mut hangar_store::StepRecord,
) -> Result<Result<Map<String, Value>, StepEnd>, Interrupted> {
    let max_attempts = step.infrastructure_attempts();
    let mut avoid = BTreeSet::new();
    loop {
        record.state = StepState::Running;
        record.started_at.get_or_insert(ctx.engine.now());
        ctx.save(record).await;
        ctx.log(
            Some(step_id),
            BuildEventKind::Step,
            &format!("pushing {} ({})", step.put, step.resource_type),
        )
        .await;
        match split(attempt(ctx, step_id, step, &avoid).await)? {
            Ok((worker, version)) => {
                record.worker = Some(worker.clone());
                record.version = Some(Value::Object(version.clone()).to_string());
                record.state = StepState::Succeeded;
                record.exit_code = Some(0);
                record.finished_at = Some(ctx.engine.now());
                ctx.save(record).await;
                ctx.log(
                    Some(step_id),
                    BuildEventKind::Step,
                    &format!(
                        "pushed version {} on worker {worker}",
                        Value::Object(version.clone())
                    ),
                )
                .await;
                return Ok(Ok(version));
            }
            Err(failure) => {
                let next = ctx.after_failure(record, failure, max_attempts, &mut avoid);
                if let Some(end) = next.await? {
                    return Ok(Err(end));
                }
            }
        }
    }
}

async fn attempt(
    ctx: &BuildContext,
    step_id: &str,
    step: &PutStep,
    avoid: &BTreeSet<String>,
) -> Attempt<(String, Map<String, Value>)> {
    let invalid = |reason: String| Err(StepFailure::Invalid { reason }.into());
    // A custom type's chain (outermost first): its images are fetched on
    // the put's worker and `out` runs in a container of the outermost, as
    // a get's `in` does.
    let chain = match hangar_core::resource_types::chain(&ctx.resource_types, &step.resource_type) {
        Ok(chain) => chain,
        Err(e) => return invalid(e.0),
    };
    let source = match chain.first() {
        Some(t) => t.apply_defaults(&step.source),
        None => step.source.clone(),
    };
    let artifacts: BTreeMap<String, String> = ctx
        .artifacts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let names = match step.input_names(&artifacts.keys().cloned().collect()) {
        Ok(n) => n,
        Err(e) => return invalid(format!("put {}: {e}", step.put)),
    };
    let mut inputs: Vec<(String, String)> = Vec::new();
    for (name, handle) in names
        .into_iter()
        .filter_map(|n| artifacts.get(&n).map(|h| (n, h.clone())))
    {
        let handle = usable_input(ctx, step_id, &name, handle, avoid).await?;
        inputs.push((name, handle));
    }
    let wants = Wants {
        volumes: inputs.iter().map(|(_, h)| h.clone()).collect(),
        ..Wants::for_resource(&chain, &step.resource_type, &step.tags, avoid)
    };
    let worker = place_waiting(ctx, step_id, wants).await??;
    let Observed::Present(seen) = watch::seen(&ctx.engine, &worker).await else {
        Err(StepFailure::WorkerGone { worker })?
    };
    let image = if chain.is_empty() {
        None
    } else {
        Some(get_step::fetch_type_images(ctx, step_id, &worker, &seen, &chain).await?)
    };
    let mut release = Vec::new();
    let placed = ctx
        .call(
            &[(worker.as_str(), &seen)],
            place_inputs(ctx, step_id, &worker, &seen, &inputs, &mut release),
        )
        .await
        .and_then(|placed| placed.map_err(Halt::from));
    let placed = match placed {
        Ok(p) => p,
        Err(halt) => {
            release_all(ctx, &release).await;
            return Err(halt);
        }
    };
    let req = ResourceAction {
        resource_type: step.resource_type.clone(),
        action: "out".into(),
        volume: None,
        image_volume: None,
        inputs: placed,
        request: json!({
            "source": source,
            "params": step.params.clone().map_or(Value::Null, Value::Object),
        }),
        privileged: false,
    };
    // With a custom type, `action` runs `out` in a copy of its image.
    let answer = get_step::action(ctx, step_id, &worker, &seen, image.as_ref(), &req).await;
    release_all(ctx, &release).await;
    let answer = answer?;
    // Its stderr is in the build log already (`plain_action`).
    if answer.exit_code != 0 {
        Err(get_step::exit_failure(&worker, &answer))?
    }
    match answer
        .response
        .as_ref()
        .and_then(|r| r.get("version"))
        .and_then(Value::as_object)
    {
        Some(v) => Ok((worker, v.clone())),
        None => invalid(format!("put {}: out answered no version", step.put)),
    }
}

/// An input's volume, or, when it went with its worker, the same artifact
/// fetched again elsewhere if a get step of the build made it (as a task's
/// lost input is): a put retried after its worker died still has its
/// inputs.
async fn usable_input(
    ctx: &BuildContext,
    step_id: &str,
    name: &str,
    handle: String,
    avoid: &BTreeSet<String>,
) -> Attempt<String> {
    use crate::step_inputs::input_usable;
    use hangar_core::engine::InputCheck;
    let InputCheck::Lost { worker } = input_usable(ctx, &handle).await else {
        return Ok(handle);
    };
    let lost_on = worker.unwrap_or_else(|| "an unknown worker".into());
    let Some(get) = ctx.producers.get(name) else {
        Err(StepFailure::VolumeLost {
            worker: lost_on,
            handle,
        })?
    };
    ctx.log(
        Some(step_id),
        BuildEventKind::Infra,
        &format!(
            "input {name} was on worker {lost_on}, which is gone or stalled; fetching it again"
        ),
    )
    .await;
    let mut skip = avoid.clone();
    skip.insert(lost_on);
    get_step::refetch(ctx, step_id, get, &skip).await
}

/// Each input as a volume on `worker` (see
/// [`crate::task_step::input_volume`]). Every volume made is in `release`
/// however this ends.
async fn place_inputs(
    ctx: &BuildContext,
    step_id: &str,
    worker: &str,
    seen: &WorkerSeen,
    inputs: &[(String, String)],
    release: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, StepFailure> {
    let mut placed = BTreeMap::new();
    for (name, handle) in inputs {
        let volume =
            crate::task_step::input_volume(ctx, step_id, worker, seen, name, handle).await?;
        release.push(volume.clone());
        placed.insert(name.clone(), volume);
    }
    Ok(placed)
}

async fn release_all(ctx: &BuildContext, handles: &[String]) {
    for h in handles {
        ctx.engine.release_volume(h).await;
    }
}
