//! `/api/v1/teams/{team}/pipelines…`: pipelines set from their config,
//! listed, paused, renamed and destroyed, with their jobs, resources and
//! resource versions. Every name in the path is checked before any query.

use std::collections::BTreeSet;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use hangar_api::pipelines::{
    ConfigWarning, Job, Pipeline, PipelineConfig, PipelineSaved, RenamePipeline, Resource,
    ResourceVersion, VersionsQuery, CONFIG_VERSION_HEADER, DEFAULT_VERSIONS_PAGE,
    MAX_VERSIONS_PAGE,
};
use hangar_core::names::validate_label;
use hangar_core::pipeline::{check_name, parse_pipeline};
use hangar_store::{
    JobRecord, PipelineRecord, ResourceRecord, ResourceVersionRecord, StoreError, VersionPage,
};

use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::json::Json;
use crate::Web;

/// The most config errors one answer lists; a config past a bound has one.
const MAX_ERRORS_SHOWN: usize = 100;

fn check_team(team: &str) -> Result<(), ApiError> {
    validate_label(team).map_err(|e| ApiError::bad_request(format!("team: {e}")))
}

fn check(what: &str, name: &str) -> Result<(), ApiError> {
    check_name(what, name).map_err(ApiError::bad_request)
}

fn pipeline_to_api(p: PipelineRecord) -> Pipeline {
    // The store wrote the canonical JSON of a checked object.
    let instance_vars = match serde_json::from_str(&p.instance_vars) {
        Ok(serde_json::Value::Object(vars)) => vars,
        _ => serde_json::Map::new(),
    };
    Pipeline {
        instance_vars,
        id: p.id,
        team: p.team,
        name: p.name,
        paused: p.paused,
        config_version: p.config_version,
        created_at: p.created_at,
        updated_at: p.updated_at,
        archived: p.archived,
    }
}

async fn job_to_api(web: &Web, team: &str, pipeline: &str, j: JobRecord) -> Result<Job, ApiError> {
    let waiting =
        match web.store().job_waiting(j.id).await? {
            Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
                StoreError::Corrupt(format!("jobs: the waiting of job {}: {e}", j.id))
            })?),
            None => None,
        };
    // The newest builds are enough to find the last ended one and the
    // newest in flight, but for a job with more in flight than this.
    let recent = web.store().job_builds(j.id, 20).await?;
    let summary = |b: &hangar_store::JobBuildRecord| hangar_api::pipelines::JobBuildSummary {
        id: b.build.id,
        name: b.number.to_string(),
        status: b.build.status,
    };
    Ok(Job {
        id: j.id,
        team: team.to_string(),
        pipeline: pipeline.to_string(),
        name: j.name,
        paused: j.paused,
        next_build_number: j.next_build_number,
        waiting,
        finished_build: recent
            .iter()
            .find(|b| b.build.status.is_final())
            .map(summary),
        next_build: recent
            .iter()
            .find(|b| !b.build.status.is_final())
            .map(summary),
    })
}

/// Stored JSON that no longer parses is a corrupt row, never read as empty.
fn stored_json(
    table: &str,
    id: i64,
    column: &str,
    text: &str,
) -> Result<serde_json::Value, ApiError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!("{table} row id {id}, column {column}: {e}")).into()
    })
}

fn resource_to_api(team: &str, pipeline: &str, r: ResourceRecord) -> Result<Resource, ApiError> {
    let pinned_version = r
        .pinned
        .as_deref()
        .map(|p| stored_json("resources", r.id, "pinned", p))
        .transpose()?;
    Ok(Resource {
        id: r.id,
        team: team.to_string(),
        pipeline: pipeline.to_string(),
        name: r.name,
        resource_type: r.resource_type,
        pinned_version,
        pinned_by_api: false,
        pin_comment: None,
        last_checked_at: None,
        check_error: None,
        check_waiting: None,
    })
}

fn version_to_api(v: ResourceVersionRecord) -> Result<ResourceVersion, ApiError> {
    Ok(ResourceVersion {
        id: v.id,
        version: stored_json("resource_versions", v.id, "version", &v.version)?,
        metadata: stored_json("resource_versions", v.id, "metadata", &v.metadata)?,
        enabled: v.enabled,
        check_order: v.check_order,
        created_at: v.created_at,
    })
}

fn expected_version(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(CONFIG_VERSION_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v >= 0)
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{CONFIG_VERSION_HEADER} must be a config version (a whole number, 0 for a new pipeline)"
            ))
        })
}

/// `PUT /teams/{team}/pipelines/{name}/config`: the body is the config's
/// YAML (or JSON) text, validated whole before anything is stored.
pub(super) async fn set_config(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::SaveConfig>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<PipelineSaved>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    let expected = expected_version(&headers)?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_request(format!("the config is not UTF-8 text: {e}")))?;
    let validated = parse_pipeline(text).map_err(|errs| {
        let mut lines: Vec<String> = errs
            .errors
            .iter()
            .take(MAX_ERRORS_SHOWN)
            .map(|e| format!("  {}", e))
            .collect();
        if errs.errors.len() > MAX_ERRORS_SHOWN {
            lines.push(format!(
                "  and {} more",
                errs.errors.len() - MAX_ERRORS_SHOWN
            ));
        }
        ApiError::bad_request(format!("invalid pipeline config:\n{}", lines.join("\n")))
    })?;
    let outcome = web
        .store()
        .set_pipeline(&team, &name, &validated.config, expected, web.now())
        .await?;
    let pipeline = web.store().pipeline(&team, &name).await?;
    tracing::info!(%team, pipeline = %name, version = outcome.version, "pipeline set");
    let missing = hangar_core::pipeline::types_no_worker_has(
        &validated.config,
        &worker_types(&web, &team).await?,
        i64::try_from(web.config().no_worker_timeout.as_millis()).unwrap_or(i64::MAX),
    );
    Ok(axum::Json(PipelineSaved {
        pipeline: pipeline_to_api(pipeline),
        created: outcome.created,
        warnings: validated
            .warnings
            .into_iter()
            .chain(missing)
            .map(|w| ConfigWarning {
                kind: w.kind,
                message: w.message,
            })
            .collect(),
    }))
}

/// The base resource types of the workers that may run the team's steps
/// (shared ones and the team's own), in whatever state.
async fn worker_types(web: &Web, team: &str) -> Result<BTreeSet<String>, ApiError> {
    let mut types = BTreeSet::new();
    for w in web.store().list_workers().await? {
        if w.info.team.as_deref().is_some_and(|t| t != team) {
            continue;
        }
        // A worker whose stored list is unreadable runs no resource
        // action (placement says so); it has none here either.
        if let Ok(list) =
            serde_json::from_str::<Vec<hangar_api::BaseResourceType>>(&w.info.resource_types_json)
        {
            types.extend(list.into_iter().map(|t| t.type_name));
        }
    }
    Ok(types)
}

pub(super) async fn list(
    State(web): State<Web>,
    Path(team): Path<String>,
    allowed: Allowed<act::ListPipelines>,
) -> Result<axum::Json<Vec<Pipeline>>, ApiError> {
    check_team(&team)?;
    // A caller without a role on the team sees its exposed pipelines
    // only, and a missing team as one with none.
    let all = allowed.caller().role_on(&team).is_some();
    let pipelines = match web.store().pipelines(&team).await {
        Err(StoreError::NotFound(_)) if !all => Vec::new(),
        other => other?,
    };
    let exposed = if all {
        Vec::new()
    } else {
        web.store().exposed_pipeline_ids().await?
    };
    Ok(axum::Json(
        pipelines
            .into_iter()
            .filter(|p| all || exposed.contains(&p.id))
            .map(pipeline_to_api)
            .collect(),
    ))
}

pub(super) async fn show(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::GetPipeline>,
) -> Result<axum::Json<Pipeline>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    Ok(axum::Json(pipeline_to_api(
        web.store().pipeline(&team, &name).await?,
    )))
}

pub(super) async fn get_config(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::GetConfig>,
) -> Result<axum::Json<PipelineConfig>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    let (version, config) = web.store().pipeline_config(&team, &name, None).await?;
    Ok(axum::Json(PipelineConfig { config, version }))
}

pub(super) async fn destroy(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::DeletePipeline>,
) -> Result<StatusCode, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    web.store()
        .destroy_pipeline(&team, &name, web.now())
        .await?;
    tracing::info!(%team, pipeline = %name, "pipeline destroyed");
    Ok(crate::answer::NO_CONTENT)
}

async fn set_paused(
    web: &Web,
    team: &str,
    name: &str,
    paused: bool,
) -> Result<StatusCode, ApiError> {
    check_team(team)?;
    super::check_pipeline(name)?;
    web.store()
        .set_pipeline_paused(team, name, paused, web.now())
        .await?;
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn pause(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::PausePipeline>,
) -> Result<StatusCode, ApiError> {
    set_paused(&web, &team, &name, true).await
}

pub(super) async fn unpause(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::UnpausePipeline>,
) -> Result<StatusCode, ApiError> {
    set_paused(&web, &team, &name, false).await
}

/// The most pipeline names one ordering may list.
const MAX_ORDERED: usize = 10_000;

/// `PUT /teams/{team}/pipelines/ordering` (Concourse's, for
/// `order-pipelines`): the named pipelines first, in that order. It shares
/// its path with a pipeline's, which has no PUT of its own: a pipeline
/// named `ordering` is still read and destroyed as any other.
pub(super) async fn order(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    allowed: Allowed<act::OrderPipelines>,
    crate::json::Json(names): crate::json::Json<Vec<String>>,
) -> Result<StatusCode, ApiError> {
    if name != "ordering" {
        return Err(ApiError::not_found("no such route"));
    }
    check_team(&team)?;
    if names.len() > MAX_ORDERED {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_ORDERED} pipelines are ordered at once"
        )));
    }
    for n in &names {
        check("pipeline name", n)?;
    }
    web.store().order_pipelines(&team, &names).await?;
    tracing::info!(%team, by = %allowed.caller().describe(), "pipelines ordered");
    Ok(crate::answer::NO_CONTENT)
}

/// Archives a pipeline (`fly archive-pipeline`): nothing checks or builds
/// until it is set again; its history stays.
pub(super) async fn archive(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    allowed: Allowed<act::ArchivePipeline>,
) -> Result<StatusCode, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    web.store()
        .archive_pipeline(&team, &name, web.now())
        .await?;
    web.control().wake_scheduler();
    tracing::info!(%team, pipeline = %name, by = %allowed.caller().describe(), "pipeline archived");
    Ok(crate::answer::NO_CONTENT)
}

/// Makes a pipeline readable without logging in (`fly expose-pipeline`).
pub(super) async fn expose(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::ExposePipeline>,
) -> Result<StatusCode, ApiError> {
    set_exposed(&web, &team, &name, true).await
}

/// Makes it private again (`fly hide-pipeline`).
pub(super) async fn hide(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::HidePipeline>,
) -> Result<StatusCode, ApiError> {
    set_exposed(&web, &team, &name, false).await
}

async fn set_exposed(
    web: &Web,
    team: &str,
    name: &str,
    exposed: bool,
) -> Result<StatusCode, ApiError> {
    check_team(team)?;
    super::check_pipeline(name)?;
    let p = web.store().pipeline(team, name).await?;
    web.store().set_pipeline_exposed(p.id, exposed).await?;
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn rename(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::RenamePipeline>,
    Json(req): Json<RenamePipeline>,
) -> Result<StatusCode, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    check("new pipeline name", &req.name)?;
    web.store()
        .rename_pipeline(&team, &name, &req.name, web.now())
        .await?;
    tracing::info!(%team, pipeline = %name, to = %req.name, "pipeline renamed");
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn jobs(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::ListJobs>,
) -> Result<axum::Json<Vec<Job>>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    let jobs = web.store().jobs(&team, &name, false).await?;
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        out.push(job_to_api(&web, &team, &name, j).await?);
    }
    Ok(axum::Json(out))
}

pub(super) async fn job(
    State(web): State<Web>,
    Path((team, name, job)): Path<(String, String, String)>,
    _: Allowed<act::GetJob>,
) -> Result<axum::Json<Job>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    check("job", &job)?;
    let j = web.store().job(&team, &name, &job).await?;
    Ok(axum::Json(job_to_api(&web, &team, &name, j).await?))
}

async fn set_job_paused(
    web: &Web,
    (team, name, job): (String, String, String),
    paused: bool,
) -> Result<StatusCode, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    check("job", &job)?;
    web.store()
        .set_job_paused(&team, &name, &job, paused)
        .await?;
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn pause_job(
    State(web): State<Web>,
    Path(path): Path<(String, String, String)>,
    _: Allowed<act::PauseJob>,
) -> Result<StatusCode, ApiError> {
    set_job_paused(&web, path, true).await
}

pub(super) async fn unpause_job(
    State(web): State<Web>,
    Path(path): Path<(String, String, String)>,
    _: Allowed<act::UnpauseJob>,
) -> Result<StatusCode, ApiError> {
    set_job_paused(&web, path, false).await
}

pub(super) async fn resources(
    State(web): State<Web>,
    Path((team, name)): Path<(String, String)>,
    _: Allowed<act::ListResources>,
) -> Result<axum::Json<Vec<Resource>>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    let resources = web.store().resources(&team, &name).await?;
    let pipeline_id = resources.first().map_or(0, |r| r.pipeline_id);
    let checks = web.store().pipeline_check_statuses(pipeline_id).await?;
    let mut api_pins = web.store().api_pins(pipeline_id).await?;
    Ok(axum::Json(
        resources
            .into_iter()
            .map(|r| {
                let scope = r.scope_id;
                let api_pin = api_pins.remove(&r.id);
                let mut api = resource_to_api(&team, &name, r)?;
                // The config's pin wins, as it does for the scheduler.
                if let (None, Some((version, comment))) = (&api.pinned_version, api_pin) {
                    api.pinned_version = Some(stored_json(
                        "resource_versions",
                        api.id,
                        "version",
                        &version,
                    )?);
                    api.pinned_by_api = true;
                    api.pin_comment = comment;
                }
                super::checks::show_check(&mut api, scope.and_then(|s| checks.get(&s)));
                Ok(api)
            })
            .collect::<Result<_, ApiError>>()?,
    ))
}

pub(super) async fn versions(
    State(web): State<Web>,
    Path((team, name, resource)): Path<(String, String, String)>,
    _: Allowed<act::ListResourceVersions>,
    query: Result<Query<VersionsQuery>, QueryRejection>,
) -> Result<axum::Json<Vec<ResourceVersion>>, ApiError> {
    check_team(&team)?;
    super::check_pipeline(&name)?;
    check("resource", &resource)?;
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let limit = q.limit.unwrap_or(DEFAULT_VERSIONS_PAGE);
    if !(1..=MAX_VERSIONS_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is out of range 1..={MAX_VERSIONS_PAGE}"
        )));
    }
    let versions = web
        .store()
        .resource_versions(
            &team,
            &name,
            &resource,
            VersionPage {
                limit,
                before: q.before,
                after: q.after,
            },
        )
        .await?;
    Ok(axum::Json(
        versions
            .into_iter()
            .map(version_to_api)
            .collect::<Result<_, _>>()?,
    ))
}
