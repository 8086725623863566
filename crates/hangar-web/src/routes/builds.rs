use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hangar_api::builds::{Build, BuildEvent, BuildEvents, BuildStep, CreateBuild};
use hangar_core::build::BuildEventKind;
use hangar_core::names::validate_label;
use hangar_core::plan::{leaf_steps, local_vars, parse_build_plan, stored_plan, Step};
use hangar_core::vars::{find_refs, find_unresolved, find_unresolved_except_local};
use hangar_store::{BuildRecord, StepRecord};
use serde::Deserialize;

use crate::authz::{act, authorize, Allowed, CallerOf};
use crate::error::{from_worker, ApiError};
use crate::json::Json;
use crate::routes::volumes::validate_handle;
use crate::Web;
use hangar_core::tenancy::{Action, MAIN_TEAM};

/// Why a plan with vars is refused when web has no credential manager.
const NO_MANAGER: &str = "web has no credential manager (hangar web --credentials-kubernetes \
     or --credentials-dir), so vars must be given to `hangar execute` with -v, -l or -y";

/// The longest a watcher's request waits for new events.
const MAX_WAIT_MS: u64 = 30_000;

pub(super) fn build_to_api(b: BuildRecord, steps: Vec<StepRecord>) -> Build {
    Build {
        id: b.id,
        name: b.name,
        status: b.status,
        created_at: b.created_at,
        started_at: b.started_at,
        finished_at: b.finished_at,
        exit_code: b.exit_code,
        error: b.error,
        steps: steps
            .into_iter()
            .map(|s| BuildStep {
                step_id: s.step_id,
                name: s.name,
                kind: s.kind,
                state: s.state,
                attempt: s.attempt,
                worker: s.worker,
                exit_code: s.exit_code,
                error: s.error,
                started_at: s.started_at,
                finished_at: s.finished_at,
                version: s
                    .version
                    .as_deref()
                    .and_then(|v| serde_json::from_str(v).ok()),
            })
            .collect(),
        inputs: vec![],
        outputs: vec![],
        logs_reaped_at: b.logs_reaped_at,
    }
}

/// Refuses a get or put of a plan sent to the API that names a pipeline
/// resource: only a job build has one, and the versions it records are
/// the scheduler's truth, which a one-off plan must not write.
fn refuse_resource(id: &str, step: &Step) -> Result<(), ApiError> {
    let (name, resource) = match step {
        Step::Get(get) => (&get.get, &get.resource),
        Step::Put(put) => (&put.put, &put.resource),
        _ => return Ok(()),
    };
    match resource {
        None => Ok(()),
        Some(r) => Err(ApiError::bad_request(format!(
            "plan step {id} ({name}): `resource` ({r:?}) names a pipeline resource, which only \
             a job's build has; give `type` and `source` alone"
        ))),
    }
}

/// Refuses a step that still holds a `((var))`: web has nothing to resolve
/// it from, and running it would hand the task the literal text.
fn refuse_unresolved_vars(id: &str, step: &Step) -> Result<(), ApiError> {
    let name = match step {
        Step::Task(task) => &task.task,
        Step::Get(get) => &get.get,
        Step::Put(put) => &put.put,
        Step::LoadVar(load) => &load.load_var,
        Step::SetPipeline(set) => &set.set_pipeline,
        Step::Across(a) => &a.vars[0].var,
        Step::Do(_) | Step::InParallel(_) | Step::Try(_) | Step::Modified(_) => return Ok(()),
    };
    // Local vars (`((.:x))`) are the build's own, filled in when it runs;
    // the plan's parse already refused one no load_var defines.
    let left = find_unresolved_except_local(&local_vars::var_fields(step));
    if left.is_empty() {
        return Ok(());
    }
    // A hostile plan may hold thousands: the answer names the first few.
    const SHOWN: usize = 20;
    let mut names = left
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if left.len() > SHOWN {
        names.push_str(&format!(" and {} more", left.len() - SHOWN));
    }
    Err(ApiError::bad_request(format!(
        "plan step {id} ({name}): unresolved vars: {names}; {NO_MANAGER}"
    )))
}

/// Whether a step's values use a local var (`((.:x))`).
fn uses_local_vars(step: &Step) -> bool {
    find_refs(&local_vars::var_fields(step)).is_ok_and(|refs| refs.iter().any(|r| r.is_local()))
}

/// Checks a plan whole before anything is stored: its shape, every task
/// config, its resource types, and the artifacts it starts with.
/// Checks a plan before its build is made. `pipeline`: the team and
/// pipeline of a job build (its vars are looked up under the pipeline
/// first, and its gets and puts name their resources); none for the plan
/// API, whose steps may not name a pipeline resource.
async fn validate(web: &Web, req: &CreateBuild, team: &str) -> Result<(), ApiError> {
    if let Some(name) = &req.name {
        validate_label(name).map_err(|e| ApiError::bad_request(format!("name: {e}")))?;
    }
    let stored = stored_plan(&req.plan, &req.resource_types);
    validate_stored(web, &stored, &req.artifacts, team, None).await
}

/// Checks a plan as it is stored (steps and resource types) with the
/// artifacts it starts from, for a one-off build or (with `pipeline`) a
/// job's.
pub(super) async fn validate_stored(
    web: &Web,
    stored: &serde_json::Value,
    artifacts: &BTreeMap<String, String>,
    team: &str,
    pipeline: Option<&str>,
) -> Result<(), ApiError> {
    // With a credential manager, the plan is checked as it will run: its
    // vars resolved now (an unresolved one refuses the build, named). The
    // values are not kept: the stored plan keeps its `((var))` references
    // and the engine reads them again when it runs the build, on whichever
    // node, so no secret is ever written to the database.
    let resolved;
    let stored = match web.engine().credentials() {
        Some(credentials) => {
            match hangar_engine::resolve_plan(credentials, stored, team, pipeline).await {
                Ok((r, _)) => {
                    resolved = r;
                    &resolved
                }
                Err(e) => return Err(crate::error::from_plan_vars("plan", e)),
            }
        }
        None => stored,
    };
    let plan = parse_build_plan(stored).map_err(|e| ApiError::bad_request(e.to_string()))?;
    for (i, rt) in plan.resource_types.iter().enumerate() {
        let mut parts = vec![serde_json::Value::Object(rt.source.clone())];
        parts.extend(rt.params.clone().map(serde_json::Value::Object));
        parts.extend(rt.defaults.clone().map(serde_json::Value::Object));
        let left = find_unresolved(&serde_json::Value::Array(parts));
        if let Some(first) = left.first() {
            return Err(ApiError::bad_request(format!(
                "resource_types[{i}] ({}): unresolved var {first}; {NO_MANAGER}",
                rt.name
            )));
        }
    }
    for (id, step) in leaf_steps(&plan.steps) {
        refuse_unresolved_vars(&id, step)?;
        if pipeline.is_none() {
            refuse_resource(&id, step)?;
        }
        // A task whose config is in a file, or uses local vars, is checked
        // when it runs, once they are known.
        let checked_now = match step {
            Step::Task(t) if t.file.is_none() && !uses_local_vars(step) => Some(t),
            _ => None,
        };
        if let Some(task) = checked_now {
            task.parse_config().map_err(|e| {
                ApiError::bad_request(format!("plan step {id} ({}): {e}", task.task))
            })?;
        }
    }
    for (name, handle) in artifacts {
        validate_label(name).map_err(|e| ApiError::bad_request(format!("artifact name: {e}")))?;
        validate_handle(handle)?;
        match web.store().get_volume(handle).await? {
            Some(v) if hangar_core::engine::volume_usable(v.state, v.missing_since) => {}
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "artifact {name}: volume {handle} is not available"
                )))
            }
            None => {
                return Err(ApiError::not_found(format!(
                    "artifact {name}: volume {handle} not found"
                )))
            }
        }
    }
    Ok(())
}

pub(super) async fn create(
    State(web): State<Web>,
    CallerOf(caller): CallerOf,
    Json(req): Json<CreateBuild>,
) -> Result<(StatusCode, axum::Json<Build>), ApiError> {
    let team = req.team.clone().unwrap_or_else(|| MAIN_TEAM.to_string());
    hangar_core::names::validate_label(&team)
        .map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    authorize(&caller, Action::CreateBuild, &team)?;
    if web.store().team(&team).await?.is_none() {
        return Err(ApiError::not_found(format!("team {team} not found")));
    }
    validate(&web, &req, &team).await?;
    let name = req.name.clone().unwrap_or_else(|| "one-off".into());
    let artifacts =
        serde_json::to_string(&req.artifacts).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let build = web
        .store()
        .create_build(
            &name,
            Some(&team),
            &stored_plan(&req.plan, &req.resource_types).to_string(),
            &artifacts,
            web.now(),
        )
        .await?;
    web.engine().wake();
    tracing::info!(build = build.id, %name, "build created");
    Ok(crate::answer::created(axum::Json(build_to_api(
        build,
        vec![],
    ))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    limit: Option<i64>,
}

pub(super) async fn list(
    State(web): State<Web>,
    allowed: Allowed<act::ListBuilds>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::Json<Vec<Build>>, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let limit = list_limit(q.limit)?;
    let caller = allowed.caller();
    let builds = web.store().list_builds(limit).await?;
    Ok(axum::Json(
        builds
            .into_iter()
            // A caller sees the builds of the teams they have a role on.
            .filter(|b| {
                caller.is_admin()
                    || b.team
                        .as_deref()
                        .is_some_and(|t| caller.role_on(t).is_some())
            })
            .map(|b| build_to_api(b, vec![]))
            .collect(),
    ))
}

/// How many builds a listing answers: 50 unless asked, at most 1,000.
pub(super) fn list_limit(asked: Option<i64>) -> Result<i64, ApiError> {
    let limit = asked.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is out of range 1..=1000"
        )));
    }
    Ok(limit)
}

async fn load(web: &Web, id: i64) -> Result<BuildRecord, ApiError> {
    web.store()
        .get_build(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("build {id} not found")))
}

pub(super) async fn show(
    State(web): State<Web>,
    _: Allowed<act::GetBuild>,
    Path(id): Path<i64>,
) -> Result<axum::Json<Build>, ApiError> {
    let build = load(&web, id).await?;
    let steps = web.store().build_steps(id).await?;
    Ok(axum::Json(build_to_api(build, steps)))
}

/// Aborts a build (Concourse's `PUT /api/v1/builds/:id/abort`): a pending
/// one at once, a started one by the node running it, which runs its
/// `on_abort` and `ensure` hooks first; a finished one stays as it ended.
/// Answers the build as it is now (Concourse answers 204 with no body).
pub(super) async fn abort(
    State(web): State<Web>,
    _: Allowed<act::AbortBuild>,
    Path(id): Path<i64>,
) -> Result<axum::Json<Build>, ApiError> {
    let now = web.now();
    match web.store().request_build_abort(id, now).await? {
        hangar_store::AbortRequest::NotFound => {
            return Err(ApiError::not_found(format!("build {id} not found")))
        }
        hangar_store::AbortRequest::AbortedPending => {
            web.store()
                .append_build_event(id, None, BuildEventKind::Status, "aborted", now)
                .await?;
        }
        hangar_store::AbortRequest::Requested | hangar_store::AbortRequest::AlreadyFinished(_) => {}
    }
    web.engine().wake();
    web.engine().build_events().notify_waiters();
    let build = load(&web, id).await?;
    let steps = web.store().build_steps(id).await?;
    Ok(axum::Json(build_to_api(build, steps)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    #[serde(default)]
    after: i64,
    #[serde(default)]
    wait_ms: u64,
}

/// A build's log after event `after`. With `wait_ms`, waits (long-poll) for
/// new events until the build ends or the time passes.
pub(super) async fn events(
    State(web): State<Web>,
    _: Allowed<act::BuildEvents>,
    Path(id): Path<i64>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::Json<BuildEvents>, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    loop {
        // Register for a wake-up before reading, so an event written in
        // between is not missed.
        let notified = web.build_events().notified();
        let build = load(&web, id).await?;
        let events = web.store().build_events(id, q.after, 1000).await?;
        let done = build.status.is_final();
        if !events.is_empty() || done || tokio::time::Instant::now() >= deadline {
            return Ok(axum::Json(BuildEvents {
                events: events
                    .into_iter()
                    .map(|e| BuildEvent {
                        id: e.id,
                        step: e.step,
                        kind: e.kind,
                        payload: e.payload,
                        at: e.at,
                    })
                    .collect(),
                status: build.status,
                exit_code: build.exit_code,
            }));
        }
        // Another web node may be running the build: look again soon even
        // without a local wake-up.
        // Woken or timed out, the loop reads the log again: either is fine.
        let _woken = tokio::time::timeout_at(
            deadline.min(tokio::time::Instant::now() + Duration::from_millis(250)),
            notified,
        )
        .await
        .is_ok();
    }
}

/// How a build's artifact is downloaded.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ArtifactQuery {
    /// `gzip` (the default), `zstd` or `none`.
    encoding: Option<String>,
}

/// A build's artifact (an uploaded input or a step's output) as a tar,
/// gzipped unless asked otherwise, streamed from the worker that holds it.
pub(super) async fn artifact(
    State(web): State<Web>,
    _: Allowed<act::GetBuildArtifact>,
    Path((id, name)): Path<(i64, String)>,
    query: Result<Query<ArtifactQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let encoding = match q.encoding.as_deref() {
        None | Some("gzip") => "gzip",
        Some("zstd") => "zstd",
        Some("none") => "none",
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding {other:?}: gzip, zstd or none"
            )))
        }
    };
    validate_label(&name).map_err(|e| ApiError::bad_request(format!("artifact name: {e}")))?;
    let build = load(&web, id).await?;
    let corrupt = |what: String, e: serde_json::Error| {
        ApiError::from(hangar_store::StoreError::Corrupt(format!("{what}: {e}")))
    };
    let mut artifacts: BTreeMap<String, String> = serde_json::from_str(&build.artifacts)
        .map_err(|e| corrupt(format!("builds row {id}, column artifacts"), e))?;
    for step in web.store().build_steps(id).await? {
        if step.state == hangar_core::build::StepState::Succeeded {
            let outputs: BTreeMap<String, String> =
                serde_json::from_str(&step.outputs).map_err(|e| {
                    corrupt(
                        format!("build_steps row {id}/{}, column outputs", step.step_id),
                        e,
                    )
                })?;
            artifacts.extend(outputs);
        }
    }
    let handle = artifacts
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("build {id} has no artifact named {name}")))?;
    let volume = web
        .store()
        .get_volume(handle)
        .await?
        .filter(|v| hangar_core::engine::volume_usable(v.state, v.missing_since))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "artifact {name} of build {id} is no longer available"
            ))
        })?;
    let worker = &volume.worker;
    let api = web
        .workers()
        .api(worker, Duration::from_secs(3600))
        .await
        .map_err(|e| from_worker(worker, &e))?;
    let stream = api
        .stream_out_encoded(&volume.handle, "", encoding)
        .await
        .map_err(|e| from_worker(worker, &hangar_engine::call_error(&e)))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            hangar_api::builds::tar_content_type(encoding),
        )],
        Body::from_stream(stream.bytes_stream()),
    )
        .into_response())
}
