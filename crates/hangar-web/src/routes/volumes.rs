use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use hangar_api::{CreateVolume, Volume, VolumeReport, VolumeReportAnswer};
use hangar_core::names::validate_worker_name;
use hangar_core::volumes::{OwnerKind, Strategy};
use hangar_store::VolumeRecord;
use serde::Deserialize;

use crate::auth::WorkerCaller;
use crate::authz::{act, Allowed};
use crate::error::from_op;
use crate::error::ApiError;
use crate::json::Json;
use crate::routes::workers::caller_generation;
use crate::Web;
use hangar_engine::Source;

const MAX_HANDLE: usize = 128;
const MAX_REPORTED: usize = 100_000;

pub(super) fn volume_to_api(v: VolumeRecord) -> Volume {
    Volume {
        handle: v.handle,
        worker: v.worker,
        state: v.state,
        parent: v.parent,
        owner_kind: v.owner_kind,
        owner_id: v.owner_id,
        strategy: v.strategy,
        size_bytes: v.size_bytes,
        created_at: v.created_at,
        missing_since: v.missing_since,
        last_used_at: v.last_used_at,
    }
}

/// Handles are what web generates (UUIDs) or what a worker reports; either
/// way they appear in paths on the worker's disk, so the rule is strict.
pub(super) fn validate_handle(handle: &str) -> Result<(), ApiError> {
    let ok = !handle.is_empty()
        && handle.len() <= MAX_HANDLE
        && handle.as_bytes()[0].is_ascii_alphanumeric()
        && handle
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid volume handle {:?}: 1 to {MAX_HANDLE} letters, digits, '-', '_' or '.', starting with a letter or digit",
            handle.chars().take(MAX_HANDLE + 8).collect::<String>()
        )))
    }
}

fn validate_create(req: &CreateVolume) -> Result<OwnerKind, ApiError> {
    validate_worker_name(&req.worker)
        .map_err(|e| ApiError::bad_request(format!("worker name: {e}")))?;
    let owner = req.owner_kind;
    if let Some(id) = &req.owner_id {
        if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
            return Err(ApiError::bad_request(
                "owner_id must be 1 to 256 printable bytes",
            ));
        }
    }
    match (req.strategy, &req.parent, &req.import_path) {
        (Strategy::Empty, None, None) => {}
        (Strategy::Cow, Some(parent), None) => validate_handle(parent)?,
        (Strategy::Import, None, Some(path)) => {
            if !path.starts_with('/') || path.len() > 4096 || path.chars().any(char::is_control) {
                return Err(ApiError::bad_request("import_path must be an absolute path on the worker"));
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "strategy empty takes neither parent nor import_path; cow takes parent; import takes import_path",
            ))
        }
    }
    Ok(owner)
}

/// Makes a volume on a worker (see `hangar_engine::Engine::make_volume`).
pub(super) async fn create(
    State(web): State<Web>,
    _: Allowed<act::CreateVolume>,
    Json(req): Json<CreateVolume>,
) -> Result<(StatusCode, axum::Json<Volume>), ApiError> {
    let owner_kind = validate_create(&req)?;
    let source = match (req.parent, req.import_path) {
        (Some(parent), _) => Source::CopyOnWrite { parent },
        (None, Some(path)) => Source::Import { path },
        (None, None) => Source::Empty,
    };
    let made = web
        .engine()
        .make_volume(&req.worker, source, owner_kind, req.owner_id)
        .await
        .map_err(from_op)?;
    Ok(crate::answer::created(axum::Json(volume_to_api(made))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    worker: Option<String>,
}

pub(super) async fn list(
    State(web): State<Web>,
    _: Allowed<act::ListVolumes>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::Json<Vec<Volume>>, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    if let Some(w) = &q.worker {
        validate_worker_name(w).map_err(|e| ApiError::bad_request(format!("worker name: {e}")))?;
    }
    let rows = web.store().list_volumes(q.worker.as_deref()).await?;
    Ok(axum::Json(rows.into_iter().map(volume_to_api).collect()))
}

pub(super) async fn show(
    State(web): State<Web>,
    _: Allowed<act::GetVolume>,
    Path(handle): Path<String>,
) -> Result<axum::Json<Volume>, ApiError> {
    validate_handle(&handle)?;
    let row = web
        .store()
        .get_volume(&handle)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("volume {handle} not found")))?;
    Ok(axum::Json(volume_to_api(row)))
}

/// Marks a volume for destruction; the worker removes it at its next report.
pub(super) async fn destroy(
    State(web): State<Web>,
    _: Allowed<act::DestroyVolume>,
    Path(handle): Path<String>,
) -> Result<axum::Json<Volume>, ApiError> {
    validate_handle(&handle)?;
    web.store().destroy_volume(&handle).await?;
    let row = web
        .store()
        .get_volume(&handle)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("volume {handle} not found")))?;
    Ok(axum::Json(volume_to_api(row)))
}

/// A worker's full report of its volumes (and containers, when it lists
/// them): diffed both ways, applied, and answered with what the worker must
/// destroy.
pub(super) async fn report(
    State(web): State<Web>,
    caller: WorkerCaller,
    Json(report): Json<VolumeReport>,
) -> Result<axum::Json<VolumeReportAnswer>, ApiError> {
    let name = caller.name;
    caller_generation(caller.generation, report.generation)?;
    if report.handles.len() > MAX_REPORTED {
        return Err(ApiError::bad_request(format!(
            "a report lists at most {MAX_REPORTED} handles"
        )));
    }
    for h in &report.handles {
        validate_handle(h)?;
    }
    if let Some(containers) = &report.containers {
        if containers.len() > MAX_REPORTED {
            return Err(ApiError::bad_request(format!(
                "a report lists at most {MAX_REPORTED} containers"
            )));
        }
        for h in containers {
            validate_handle(h)?;
        }
    }
    let applied = web
        .store()
        .apply_volume_report_counted(&name, report.generation, &report.handles, web.now())
        .await?;
    web.metrics().volume_report(applied.read_rows);
    let plan = applied.plan;
    if !plan.is_empty() {
        tracing::info!(
            worker = %name,
            missing = plan.mark_missing.len(),
            back = plan.clear_missing.len(),
            destroy = plan.destroy_on_worker.len(),
            deleted = plan.delete_rows.len(),
            "volume report applied"
        );
    }
    let mut destroy_containers = Vec::new();
    if let Some(containers) = &report.containers {
        let plan = web
            .store()
            .apply_container_report(&name, report.generation, containers, web.now())
            .await?;
        if !plan.is_empty() {
            tracing::info!(
                worker = %name,
                missing = plan.mark_missing.len(),
                back = plan.clear_missing.len(),
                destroy = plan.destroy_on_worker.len(),
                deleted = plan.delete_rows.len(),
                "container report applied"
            );
        }
        destroy_containers = plan.destroy_on_worker;
    }
    Ok(axum::Json(VolumeReportAnswer {
        destroy: plan.destroy_on_worker,
        destroy_containers,
    }))
}
