//! `/api/v1/teams/{team}/pipelines/{name}/jobs/{job}/builds…`: a job's
//! builds, numbered per job (`P/J #N`). A manual trigger plans the job
//! from the pipeline's current config (`hangar_core::plan::plan_job`) and
//! checks the plan as `POST /builds` checks one.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use hangar_api::builds::{Build, BuildInput, BuildOutput};
use hangar_core::names::validate_label;
use hangar_core::pipeline::PipelineConfig;
use hangar_core::pipeline::{check_name, parse_pipeline_value};
use hangar_core::plan::planner::plan_job;
use hangar_core::scheduling::trigger::{manual_trigger, TriggerState};
use hangar_core::scheduling::{JobGate, NextBuild};
use hangar_store::{PipelineRecord, SchedulablePipeline, StoreError};
use serde::Deserialize;
use serde_json::Value;

use super::builds::{build_to_api, list_limit, validate_stored};
use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::Web;
use hangar_control::{
    decide_job, plan_with, start_held, waiting_json, waiting_words, PipelineView,
};

fn check_path(team: &str, pipeline: &str, job: &str) -> Result<(), ApiError> {
    validate_label(team).map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    super::check_pipeline(pipeline)?;
    check_name("job", job).map_err(ApiError::bad_request)
}

/// Triggers a build of the job (`hangar trigger-job`): refused as
/// `hangar_core::scheduling::trigger` says, else planned as the scheduler
/// plans (every input resolved now, `trigger` or not), its plan checked as
/// `POST /builds` checks one, created and released.
pub(super) async fn trigger(
    State(web): State<Web>,
    Path((team, pipeline, job)): Path<(String, String, String)>,
    _: Allowed<act::CreateJobBuild>,
) -> Result<(StatusCode, axum::Json<Build>), ApiError> {
    check_path(&team, &pipeline, &job)?;
    let p = web.store().pipeline(&team, &pipeline).await?;
    // Names and messages say it as hangar prints it, not as it was typed.
    let pipeline = p.reference();
    let j = web.store().job(&team, &pipeline, &job).await?;
    let config = current_config(&web, &team, &pipeline).await?;
    let job_config = config
        .job(&job)
        .ok_or_else(|| ApiError::not_found(format!("job {pipeline}/{job} not found")))?;
    manual_trigger(TriggerState {
        pipeline_paused: p.paused,
        job_paused: j.paused,
        disable_manual_trigger: job_config.disable_manual_trigger,
    })
    .map_err(|refusal| ApiError::conflict(refusal.words(&pipeline, &job)))?;
    let JobNow {
        config,
        job_ids,
        decision,
        inputs_pending,
        planned,
    } = plan_job_now(&web, j.id, &pipeline, &job, p.id, config).await?;
    let fixed_inputs: &[_] = if inputs_pending {
        &[]
    } else {
        &decision.planned
    };
    let created = create_job_build(
        &web,
        &team,
        (&pipeline, &job, j.id),
        &planned,
        fixed_inputs,
        inputs_pending,
    )
    .await?;
    if let NextBuild::Wait(w) = &decision.next {
        web.store()
            .set_job_waiting(j.id, Some(&waiting_json(w, &job_ids)))
            .await?;
    }
    release(&web, &p, &config, &job_ids).await?;
    tracing::info!(build = created.build.id, %pipeline, %job, number = created.number, "job build created");
    Ok(crate::answer::created(axum::Json(build_to_api(
        created.build,
        vec![],
    ))))
}

/// Runs build `number` of a job again with the very versions it took
/// (`hangar rerun-build`, Concourse's rerun): a new build of the job, from
/// the job's current config, refused as a trigger would be. hangar numbers
/// it as the job's next build (Concourse names it `N.1`); its log says
/// which build it reruns.
pub(super) async fn rerun(
    State(web): State<Web>,
    Path((team, pipeline, job, number)): Path<(String, String, String, i64)>,
    _: Allowed<act::RerunJobBuild>,
) -> Result<(StatusCode, axum::Json<Build>), ApiError> {
    check_path(&team, &pipeline, &job)?;
    let p = web.store().pipeline(&team, &pipeline).await?;
    let pipeline = p.reference();
    let j = web.store().job(&team, &pipeline, &job).await?;
    let original = web.store().job_build(j.id, number).await?.ok_or_else(|| {
        ApiError::not_found(format!("build {pipeline}/{job} #{number} not found"))
    })?;
    let config = current_config(&web, &team, &pipeline).await?;
    let job_config = config
        .job(&job)
        .ok_or_else(|| ApiError::not_found(format!("job {pipeline}/{job} not found")))?;
    manual_trigger(TriggerState {
        pipeline_paused: p.paused,
        job_paused: j.paused,
        disable_manual_trigger: job_config.disable_manual_trigger,
    })
    .map_err(|refusal| ApiError::conflict(refusal.words(&pipeline, &job)))?;
    let (inputs, _) = web.store().build_versions(original.build.id).await?;
    let gets = {
        let mut gets = Vec::new();
        collect_gets(
            &serde_json::to_value(&job_config.plan).unwrap_or(Value::Null),
            &mut gets,
        );
        gets
    };
    if inputs.is_empty() && !gets.is_empty() {
        return Err(ApiError::conflict(format!(
            "build {pipeline}/{job} #{number} never fixed its inputs: there is nothing to run again"
        )));
    }
    let planned_inputs: Vec<hangar_store::PlannedInput> = inputs
        .into_iter()
        .map(|v| hangar_store::PlannedInput {
            name: v.name.unwrap_or_default(),
            resource_id: v.resource_id,
            version_id: v.version_id,
        })
        .collect();
    let planned = hangar_control::plan_with(web.store(), &config, job_config, &planned_inputs)
        .await?
        .map_err(|e| ApiError::conflict(format!("{pipeline}/{job} #{number}: {e}")))?;
    let created = create_job_build(
        &web,
        &team,
        (&pipeline, &job, j.id),
        &planned,
        &planned_inputs,
        false,
    )
    .await?;
    web.store()
        .append_build_event(
            created.build.id,
            None,
            hangar_core::build::BuildEventKind::Infra,
            &format!("rerun of build #{number}, with its inputs' versions\n"),
            web.now(),
        )
        .await?;
    let job_ids: BTreeMap<String, i64> = web
        .store()
        .scheduling_jobs(p.id)
        .await?
        .into_iter()
        .map(|(id, name, _)| (name, id))
        .collect();
    release(&web, &p, &config, &job_ids).await?;
    tracing::info!(build = created.build.id, %pipeline, %job, number = created.number, rerun_of = number, "job build rerun");
    Ok(crate::answer::created(axum::Json(build_to_api(
        created.build,
        vec![],
    ))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClearCacheQuery {
    /// One cache path of the step; none: all of them.
    cache_path: Option<String>,
}

/// Removes a job's task step's caches (Concourse's `clear-task-cache`): on
/// every worker, all of them or the one at `cache_path`. The step's next
/// run starts with an empty cache.
pub(super) async fn clear_task_cache(
    State(web): State<Web>,
    Path((team, pipeline, job, step)): Path<(String, String, String, String)>,
    query: Result<Query<ClearCacheQuery>, QueryRejection>,
    allowed: Allowed<act::ClearTaskCache>,
) -> Result<axum::Json<hangar_api::pipelines::CachesRemoved>, ApiError> {
    check_path(&team, &pipeline, &job)?;
    check_name("step", &step).map_err(ApiError::bad_request)?;
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let p = web.store().pipeline(&team, &pipeline).await?;
    let pipeline = p.reference();
    // The job must exist (a typo removes nothing and says so).
    let j = web.store().job(&team, &pipeline, &job).await?;
    // As the engine scopes them (`BuildContext::job`).
    let scope = hangar_core::caches::task_cache_scope(
        &team,
        &hangar_core::caches::cache_job(Some(j.id), ""),
        &step,
    );
    let wanted = q
        .cache_path
        .as_deref()
        .map(|path| hangar_core::caches::task_cache_key(&scope, path));
    let mut removed = 0;
    for (handle, key) in web
        .store()
        .volumes_by_owner_prefix(
            hangar_core::volumes::OwnerKind::TaskCache.as_str(),
            &format!("{scope}:"),
        )
        .await?
    {
        if wanted.as_ref().is_some_and(|w| *w != key) {
            continue;
        }
        match web.store().destroy_volume(&handle).await {
            Ok(_) => removed += 1,
            // Gone meanwhile, or mounted by a running step: left for GC.
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(%team, %pipeline, %job, %step, removed, by = %allowed.caller().describe(), "task caches cleared");
    Ok(axum::Json(hangar_api::pipelines::CachesRemoved {
        caches_removed: removed,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClearResourceCacheQuery {
    /// A version's fields as JSON (`{"ref":"abc"}`): only the caches of the
    /// versions that have them all; none: every cache.
    version: Option<String>,
}

/// Removes the caches a pipeline resource's gets made (Concourse's
/// `clear-resource-cache`): every version's, or those `version` matches.
/// Its next get runs `in` again. A cache is shared by every get of the
/// same type, source, params and version (another pipeline's too), so it
/// goes for them as well, as in Concourse.
pub(super) async fn clear_resource_cache(
    State(web): State<Web>,
    Path((team, pipeline, resource)): Path<(String, String, String)>,
    query: Result<Query<ClearResourceCacheQuery>, QueryRejection>,
    allowed: Allowed<act::ClearResourceCache>,
) -> Result<axum::Json<hangar_api::pipelines::CachesRemoved>, ApiError> {
    check_name("team", &team).map_err(ApiError::bad_request)?;
    check_name("resource", &resource).map_err(ApiError::bad_request)?;
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let wanted = match q.version.as_deref() {
        None => None,
        Some(v) => match serde_json::from_str::<serde_json::Value>(v) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => {
                return Err(ApiError::bad_request(
                    "version: a JSON object of the version's fields",
                ))
            }
        },
    };
    let p = web.store().pipeline(&team, &pipeline).await?;
    let Some(resource_id) = web.store().pipeline_resource_id(p.id, &resource).await? else {
        return Err(ApiError::not_found(format!(
            "resource {resource} not found in pipeline {}",
            p.reference()
        )));
    };
    let mut removed = 0;
    for (key, version) in web.store().resource_cache_keys(resource_id).await? {
        let version: serde_json::Value = serde_json::from_str(&version).unwrap_or_default();
        if !wanted
            .as_ref()
            .is_none_or(|w| w.iter().all(|(k, v)| version.get(k) == Some(v)))
        {
            continue;
        }
        let mut kept = false;
        for (handle, owner) in web
            .store()
            .volumes_by_owner_prefix(
                hangar_core::volumes::OwnerKind::ResourceCache.as_str(),
                &key,
            )
            .await?
        {
            // The key itself, or a fetch of it under way (`KEY/fetching/…`).
            if owner != key && !owner.starts_with(&format!("{key}/")) {
                continue;
            }
            match web.store().destroy_volume(&handle).await {
                Ok(_) => removed += 1,
                // Mounted by a running step: left, and noted again.
                Err(StoreError::Conflict(_)) => kept = true,
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !kept {
            web.store().forget_resource_cache(resource_id, &key).await?;
        }
    }
    tracing::info!(%team, pipeline = %p.reference(), %resource, removed, by = %allowed.caller().describe(), "resource caches cleared");
    Ok(axum::Json(hangar_api::pipelines::CachesRemoved {
        caches_removed: removed,
    }))
}

/// Creates a job build (a trigger's, a rerun's) of `planned`, its plan
/// checked first as `POST /builds` checks one; `inputs` are the versions it
/// takes when they are fixed. [`release`] starts it.
async fn create_job_build(
    web: &Web,
    team: &str,
    (pipeline, job, job_id): (&str, &str, i64),
    planned: &hangar_core::plan::planner::JobPlan,
    inputs: &[hangar_store::PlannedInput],
    inputs_pending: bool,
) -> Result<hangar_store::JobBuildRecord, ApiError> {
    validate_stored(
        web,
        &planned.stored,
        &Default::default(),
        team,
        Some(pipeline),
    )
    .await
    .map_err(|mut e| {
        e.message = format!("{pipeline}/{job}: {}", e.message);
        e
    })?;
    Ok(web
        .store()
        .create_scheduled_build(
            job_id,
            &format!("{pipeline}/{job}"),
            &planned.stored.to_string(),
            inputs,
            inputs_pending,
            None,
            web.now(),
        )
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("job {pipeline}/{job} not found")))?)
}

/// Releases a new job build at once where start limits allow, and wakes
/// the engine.
async fn release(
    web: &Web,
    p: &PipelineRecord,
    config: &PipelineConfig,
    job_ids: &BTreeMap<String, i64>,
) -> Result<(), ApiError> {
    start_now(web, p, config, job_ids).await?;
    web.engine().wake();
    Ok(())
}

/// A job planned now, as a manual trigger plans it: its inputs resolved as
/// the scheduler's are (every input, `trigger` or not).
struct JobNow {
    config: PipelineConfig,
    job_ids: BTreeMap<String, i64>,
    decision: hangar_control::JobDecision,
    /// Some input has no version yet: the plan's gets are not fixed.
    inputs_pending: bool,
    planned: hangar_core::plan::planner::JobPlan,
}

/// The pipeline's current config, parsed.
async fn current_config(web: &Web, team: &str, pipeline: &str) -> Result<PipelineConfig, ApiError> {
    let (_, config) = web.store().pipeline_config(team, pipeline, None).await?;
    let parsed = parse_pipeline_value(&config).map_err(|e| {
        StoreError::Corrupt(format!("pipeline_configs: the config of {pipeline}: {e}"))
    })?;
    Ok(parsed.config)
}

async fn plan_job_now(
    web: &Web,
    job_id: i64,
    pipeline: &str,
    job: &str,
    pipeline_id: i64,
    config: PipelineConfig,
) -> Result<JobNow, ApiError> {
    let job_config = config
        .job(job)
        .ok_or_else(|| ApiError::not_found(format!("job {pipeline}/{job} not found")))?;
    let resources = web.store().scheduling_resources(pipeline_id).await?;
    let job_ids: BTreeMap<String, i64> = web
        .store()
        .scheduling_jobs(pipeline_id)
        .await?
        .into_iter()
        .map(|(id, name, _)| (name, id))
        .collect();
    let view = PipelineView {
        config: &config,
        resources: &resources,
        job_ids: &job_ids,
    };
    let gate = JobGate {
        manual: true,
        ..JobGate::default()
    };
    let decision = decide_job(web.store(), &view, job_id, job_config, gate).await?;
    let inputs_pending = matches!(decision.next, NextBuild::Wait(_));
    let planned = if inputs_pending {
        plan_job(&config, job_config).map_err(|e| e.to_string())
    } else {
        plan_with(web.store(), &config, job_config, &decision.planned).await?
    }
    .map_err(|e| ApiError::bad_request(format!("{pipeline}/{job}: {e}")))?;
    Ok(JobNow {
        config,
        job_ids,
        decision,
        inputs_pending,
        planned,
    })
}

/// A stored plan's steps and resource types.
fn split_stored(stored: &Value) -> (Value, Value) {
    match stored {
        Value::Object(o) => (
            o.get("steps").cloned().unwrap_or(Value::Null),
            o.get("resource_types").cloned().unwrap_or(Value::Null),
        ),
        steps => (steps.clone(), Value::Null),
    }
}

/// The job's inputs as a trigger now would fetch them, for `hangar execute
/// --inputs-from` (fly's `-j`): each get of its plan with its type,
/// source, params, tags and the version fixed, and the pipeline's resource
/// types. 409 while an input has no version yet, saying which.
pub(super) async fn inputs(
    State(web): State<Web>,
    Path((team, pipeline, job)): Path<(String, String, String)>,
    _: Allowed<act::ListJobInputs>,
) -> Result<axum::Json<hangar_api::builds::JobInputs>, ApiError> {
    check_path(&team, &pipeline, &job)?;
    let p = web.store().pipeline(&team, &pipeline).await?;
    let j = web.store().job(&team, &pipeline, &job).await?;
    // Concourse's `-j` reads a job's inputs even where manual triggers are
    // off (no trigger policy here).
    let config = current_config(&web, &team, &pipeline).await?;
    let now = plan_job_now(&web, j.id, &pipeline, &job, p.id, config).await?;
    if let NextBuild::Wait(w) = &now.decision.next {
        return Err(ApiError::conflict(format!(
            "{pipeline}/{job}: its inputs do not resolve yet: {}",
            waiting_words(w, &now.job_ids)
        )));
    }
    let (steps, resource_types) = split_stored(&now.planned.stored);
    let mut gets = Vec::new();
    collect_gets(&steps, &mut gets);
    Ok(axum::Json(hangar_api::builds::JobInputs {
        inputs: gets,
        resource_types,
    }))
}

/// Every get step in a plan's JSON (in hooks, `try`, `do` and
/// `in_parallel` too), without the pipeline resource it names: a one-off
/// build fetches it by type and source and records no input.
fn collect_gets(value: &Value, gets: &mut Vec<Value>) {
    match value {
        Value::Object(o) => {
            if o.contains_key("get") && o.contains_key("type") {
                let mut get = o.clone();
                get.remove("resource");
                gets.push(Value::Object(get));
            }
            for (key, v) in o {
                // A task's config holds no step.
                if key != "config" {
                    collect_gets(v, gets);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_gets(v, gets)),
        _ => {}
    }
}

/// Releases the new build at once if start limits allow, when no other
/// node is scheduling the pipeline (else its pass will).
async fn start_now(
    web: &Web,
    p: &PipelineRecord,
    config: &PipelineConfig,
    job_ids: &BTreeMap<String, i64>,
) -> Result<(), StoreError> {
    let owner = web.control().node_id();
    if !web
        .store()
        .claim_pipeline_schedule(p.id, owner, web.now(), 30_000)
        .await?
    {
        web.wake_scheduler();
        return Ok(());
    }
    let sp = SchedulablePipeline {
        id: p.id,
        team: p.team.clone(),
        reference: p.reference(),
        paused: p.paused,
        config_version: p.config_version,
    };
    // A trigger of a paused job was refused: no job here is paused.
    let result = start_held(web.control(), &sp, config, job_ids, &Default::default()).await;
    web.store().release_pipeline_schedule(p.id, owner).await?;
    result
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    limit: Option<i64>,
}

/// A job's builds, newest first (`hangar builds -j P/J`).
pub(super) async fn list(
    State(web): State<Web>,
    Path((team, pipeline, job)): Path<(String, String, String)>,
    query: Result<Query<ListQuery>, QueryRejection>,
    _: Allowed<act::ListJobBuilds>,
) -> Result<axum::Json<Vec<Build>>, ApiError> {
    check_path(&team, &pipeline, &job)?;
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let limit = list_limit(q.limit)?;
    let j = web.store().job(&team, &pipeline, &job).await?;
    let builds = web.store().job_builds(j.id, limit).await?;
    let mut out = Vec::with_capacity(builds.len());
    for b in builds {
        out.push(with_versions(&web, build_to_api(b.build, vec![])).await?);
    }
    Ok(axum::Json(out))
}

/// Build `number` of a job, with its steps (`hangar watch -j P/J -b N`).
pub(super) async fn show(
    State(web): State<Web>,
    Path((team, pipeline, job, number)): Path<(String, String, String, i64)>,
    _: Allowed<act::GetJobBuild>,
) -> Result<axum::Json<Build>, ApiError> {
    check_path(&team, &pipeline, &job)?;
    let j = web.store().job(&team, &pipeline, &job).await?;
    let found = web.store().job_build(j.id, number).await?.ok_or_else(|| {
        ApiError::not_found(format!("build {pipeline}/{job} #{number} not found"))
    })?;
    let steps = web.store().build_steps(found.build.id).await?;
    let build = with_versions(&web, build_to_api(found.build, steps)).await?;
    Ok(axum::Json(build))
}

/// `build` with the versions it used and produced.
async fn with_versions(web: &Web, mut build: Build) -> Result<Build, ApiError> {
    let (inputs, outputs) = web.store().build_versions_shown(build.id).await?;
    build.inputs = inputs
        .into_iter()
        .map(|v| {
            Ok(BuildInput {
                name: v.name.unwrap_or_default(),
                version: version_json(&v.resource, &v.version)?,
                resource: v.resource,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    build.outputs = outputs
        .into_iter()
        .map(|v| {
            Ok(BuildOutput {
                version: version_json(&v.resource, &v.version)?,
                resource: v.resource,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(build)
}

/// A stored version's JSON; one that does not parse is a corrupt row, not
/// an empty version.
fn version_json(resource: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!("resource_versions: a version of {resource}: {e}"))
    })
}
