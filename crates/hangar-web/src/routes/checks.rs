//! Resource checks: `check-resource` and `check-resource-type` ask for a
//! check now and read its state; a resource's webhook asks for one with
//! the resource's `webhook_token` instead of the admin token, as
//! Concourse's `check/webhook`. Every request wakes the check loop, so
//! the check starts at once rather than at its next tick.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use hangar_api::checks::{CheckRequest, CheckRequested, CheckStatus};
use hangar_api::credentials::same_secret;
use hangar_api::pipelines::Resource;
use hangar_core::names::validate_label;
use hangar_core::pipeline::check_name;
use serde_json::Value;

use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::json::Json;
use crate::Web;

/// The longest webhook token looked at; a longer one cannot match.
const MAX_WEBHOOK_TOKEN: usize = 1_024;

fn check_path(team: &str, pipeline: &str, what: &str, name: &str) -> Result<(), ApiError> {
    validate_label(team).map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    super::check_pipeline(pipeline)?;
    check_name(what, name).map_err(ApiError::bad_request)
}

fn status_to_api(web: &Web, s: hangar_store::CheckStatus) -> CheckStatus {
    CheckStatus {
        last_check_started_at: s.last_started_at,
        last_check_finished_at: s.last_finished_at,
        check_error: s.error,
        check_requested_at: s.requested_at,
        checking: s.checking,
        next_check_at: s.next_check_at,
        waiting: s.waiting_reason,
        waiting_since: s.waiting_since,
        no_worker_timeout_ms: Some(
            i64::try_from(web.config().no_worker_timeout.as_millis()).unwrap_or(i64::MAX),
        ),
        check_timeout_ms: Some(s.timeout_ms),
    }
}

/// Fills a listed resource's check state from its scope's.
pub(super) fn show_check(resource: &mut Resource, status: Option<&hangar_store::CheckStatus>) {
    if let Some(s) = status {
        resource.last_checked_at = s.last_finished_at;
        resource.check_error = s.error.clone();
        resource.check_waiting = s.waiting_reason.clone();
    }
}

async fn resource_scope(
    web: &Web,
    team: &str,
    pipeline: &str,
    resource: &str,
) -> Result<i64, ApiError> {
    let r = web.store().resource(team, pipeline, resource).await?;
    r.scope_id.ok_or_else(|| {
        ApiError::not_found(format!(
            "resource {pipeline}/{resource} has no version history yet; set its pipeline again"
        ))
    })
}

async fn request(
    web: &Web,
    scope: i64,
    body: CheckRequest,
) -> Result<(StatusCode, axum::Json<CheckRequested>), ApiError> {
    // A version is a map of strings, as a check prints it.
    if let Some((key, _)) = body.from.iter().flatten().find(|(_, v)| !v.is_string()) {
        return Err(ApiError::bad_request(format!(
            "from.{key}: a version's values are strings"
        )));
    }
    let from = body.from.map(Value::Object);
    let requested_at = web
        .store()
        .request_check(scope, from.as_ref(), web.now())
        .await?;
    web.wake_checks();
    Ok(crate::answer::created(axum::Json(CheckRequested {
        requested_at,
    })))
}

pub(super) async fn check_resource(
    State(web): State<Web>,
    Path((team, pipeline, resource)): Path<(String, String, String)>,
    _: Allowed<act::CheckResource>,
    Json(body): Json<CheckRequest>,
) -> Result<(StatusCode, axum::Json<CheckRequested>), ApiError> {
    check_path(&team, &pipeline, "resource", &resource)?;
    let scope = resource_scope(&web, &team, &pipeline, &resource).await?;
    request(&web, scope, body).await
}

pub(super) async fn resource_status(
    State(web): State<Web>,
    Path((team, pipeline, resource)): Path<(String, String, String)>,
    _: Allowed<act::GetCheck>,
) -> Result<axum::Json<CheckStatus>, ApiError> {
    check_path(&team, &pipeline, "resource", &resource)?;
    let scope = resource_scope(&web, &team, &pipeline, &resource).await?;
    Ok(axum::Json(status_to_api(
        &web,
        web.store().check_status(scope).await?,
    )))
}

pub(super) async fn check_resource_type(
    State(web): State<Web>,
    Path((team, pipeline, name)): Path<(String, String, String)>,
    _: Allowed<act::CheckResourceType>,
    Json(body): Json<CheckRequest>,
) -> Result<(StatusCode, axum::Json<CheckRequested>), ApiError> {
    check_path(&team, &pipeline, "resource type", &name)?;
    let scope = web
        .store()
        .resource_type_scope(&team, &pipeline, &name)
        .await?;
    request(&web, scope, body).await
}

pub(super) async fn resource_type_status(
    State(web): State<Web>,
    Path((team, pipeline, name)): Path<(String, String, String)>,
    _: Allowed<act::GetCheck>,
) -> Result<axum::Json<CheckStatus>, ApiError> {
    check_path(&team, &pipeline, "resource type", &name)?;
    let scope = web
        .store()
        .resource_type_scope(&team, &pipeline, &name)
        .await?;
    Ok(axum::Json(status_to_api(
        &web,
        web.store().check_status(scope).await?,
    )))
}

/// The resource's token as a webhook must give it: a `((var))` in it is
/// looked up in the credential manager under the pipeline, then the team,
/// as a job build's vars are (Concourse allows credentials there). A var
/// that cannot be found matches nothing; a manager that does not answer is
/// the server's trouble (503), not the caller's.
async fn expected_token(
    web: &Web,
    team: &str,
    pipeline: &str,
    configured: &str,
) -> Result<String, ApiError> {
    let value = Value::String(configured.to_string());
    if hangar_core::vars::find_unresolved_except_local(&value).is_empty() {
        return Ok(configured.to_string());
    }
    let Some(credentials) = web.engine().credentials() else {
        tracing::warn!(%team, %pipeline, "a webhook_token holds a ((var)) and this web node has no credential manager");
        return Ok(String::new());
    };
    match hangar_engine::resolve_plan(credentials, &value, team, Some(pipeline)).await {
        Ok((Value::String(token), _)) => Ok(token),
        Ok(_) => Ok(String::new()),
        Err(hangar_engine::PlanVarsError::Refused(why)) => {
            tracing::warn!(%team, %pipeline, %why, "the webhook_token's var cannot be resolved");
            Ok(String::new())
        }
        Err(e) => Err(crate::error::from_plan_vars("the webhook_token", e)),
    }
}

/// `POST …/resources/{r}/check/webhook?webhook_token=T`: no admin token;
/// the resource's own token, compared in constant time. As Concourse: no
/// token 400, an unknown resource 404, a wrong token (or a resource
/// without one) 401, a check asked for 201. The body (a forge's event)
/// is not read.
/// The one refusal of a webhook call, whether the token is wrong or the
/// resource is missing.
const WEBHOOK_REFUSED: &str = "invalid webhook token";

pub(super) async fn webhook(
    State(web): State<Web>,
    Path((team, pipeline, resource)): Path<(String, String, String)>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<(StatusCode, axum::Json<CheckRequested>), ApiError> {
    check_path(&team, &pipeline, "resource", &resource)?;
    let Query(query) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let given = match query.get("webhook_token") {
        Some(t) if !t.is_empty() => t,
        _ => return Err(ApiError::bad_request("missing webhook_token")),
    };
    // A caller without the token learns nothing: a resource, pipeline or
    // team that does not exist is answered as a wrong token is.
    let r = match web.store().resource(&team, &pipeline, &resource).await {
        Ok(r) => r,
        Err(hangar_store::StoreError::NotFound(_)) => {
            return Err(ApiError::unauthorized(WEBHOOK_REFUSED))
        }
        Err(e) => return Err(e.into()),
    };
    let config: Value = serde_json::from_str(&r.config).map_err(|e| {
        ApiError::from(hangar_store::StoreError::Corrupt(format!(
            "resources row id {}, column config: {e}",
            r.id
        )))
    })?;
    let configured = config
        .get("webhook_token")
        .and_then(Value::as_str)
        .unwrap_or("");
    let expected = expected_token(&web, &team, &pipeline, configured).await?;
    let matches = !expected.is_empty()
        && given.len() <= MAX_WEBHOOK_TOKEN
        && same_secret(given.as_bytes(), expected.as_bytes());
    if !matches {
        return Err(ApiError::unauthorized(WEBHOOK_REFUSED));
    }
    let scope = resource_scope(&web, &team, &pipeline, &resource).await?;
    tracing::info!(%team, %pipeline, %resource, "check asked for by webhook");
    request(&web, scope, CheckRequest::default()).await
}
