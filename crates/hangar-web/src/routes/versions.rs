//! `…/pipelines/{name}/resources/{resource}/pin|unpin|versions/enable|
//! versions/disable`: pins and disabled versions. A pin set by the config
//! (`version:`) cannot be changed here (409, as Concourse). Each change
//! wakes the scheduler.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use hangar_api::pins::{
    check_version_fields, PinRequest, ResourcePin, VersionRequest, MAX_FIELD_BYTES,
};
use hangar_core::names::validate_label;
use hangar_core::pipeline::check_name;
use hangar_store::StoreError;

use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::json::Json;
use crate::Web;

type ResourcePath = Path<(String, String, String)>;

fn check_path(team: &str, pipeline: &str, resource: &str) -> Result<(), ApiError> {
    validate_label(team).map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    super::check_pipeline(pipeline)?;
    check_name("resource", resource).map_err(ApiError::bad_request)
}

pub(super) async fn pin(
    State(web): State<Web>,
    Path((team, pipeline, resource)): ResourcePath,
    _: Allowed<act::PinResourceVersion>,
    Json(req): Json<PinRequest>,
) -> Result<StatusCode, ApiError> {
    check_path(&team, &pipeline, &resource)?;
    check_version_fields(&req.version).map_err(ApiError::bad_request)?;
    if req
        .comment
        .as_ref()
        .is_some_and(|c| c.len() > MAX_FIELD_BYTES)
    {
        return Err(ApiError::bad_request(format!(
            "comment: at most {MAX_FIELD_BYTES} bytes"
        )));
    }
    web.store()
        .pin_resource(
            &team,
            &pipeline,
            &resource,
            &req.version,
            req.comment.as_deref(),
        )
        .await?;
    tracing::info!(%team, %pipeline, %resource, "resource pinned");
    web.wake_scheduler();
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn unpin(
    State(web): State<Web>,
    Path((team, pipeline, resource)): ResourcePath,
    _: Allowed<act::UnpinResource>,
) -> Result<StatusCode, ApiError> {
    check_path(&team, &pipeline, &resource)?;
    web.store()
        .unpin_resource(&team, &pipeline, &resource)
        .await?;
    tracing::info!(%team, %pipeline, %resource, "resource unpinned");
    web.wake_scheduler();
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn show_pin(
    State(web): State<Web>,
    Path((team, pipeline, resource)): ResourcePath,
    _: Allowed<act::GetPin>,
) -> Result<axum::Json<Option<ResourcePin>>, ApiError> {
    check_path(&team, &pipeline, &resource)?;
    let pin = web
        .store()
        .resource_pin(&team, &pipeline, &resource)
        .await?;
    let pin = pin
        .map(|p| {
            Ok::<_, StoreError>(ResourcePin {
                version: serde_json::from_str(&p.version).map_err(|e| {
                    StoreError::Corrupt(format!("the pin of {pipeline}/{resource}: {e}"))
                })?,
                from_config: p.from_config,
                comment: p.comment,
            })
        })
        .transpose()?;
    Ok(axum::Json(pin))
}

async fn set_enabled(
    web: &Web,
    (team, pipeline, resource): (String, String, String),
    req: VersionRequest,
    enabled: bool,
) -> Result<StatusCode, ApiError> {
    check_path(&team, &pipeline, &resource)?;
    check_version_fields(&req.version).map_err(ApiError::bad_request)?;
    web.store()
        .set_resource_version_enabled(&team, &pipeline, &resource, &req.version, enabled)
        .await?;
    tracing::info!(%team, %pipeline, %resource, enabled, "resource version enabled or disabled");
    web.wake_scheduler();
    Ok(crate::answer::NO_CONTENT)
}

pub(super) async fn enable(
    State(web): State<Web>,
    Path(path): ResourcePath,
    _: Allowed<act::EnableResourceVersion>,
    Json(req): Json<VersionRequest>,
) -> Result<StatusCode, ApiError> {
    set_enabled(&web, path, req, true).await
}

pub(super) async fn disable(
    State(web): State<Web>,
    Path(path): ResourcePath,
    _: Allowed<act::DisableResourceVersion>,
    Json(req): Json<VersionRequest>,
) -> Result<StatusCode, ApiError> {
    set_enabled(&web, path, req, false).await
}
