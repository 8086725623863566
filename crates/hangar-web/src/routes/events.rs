use axum::extract::{Query, State};
use axum::Json;
use hangar_api::WorkerEvent;
use hangar_store::EventRecord;
use serde::Deserialize;

use crate::authz::{act, Allowed};
use crate::error::ApiError;
use crate::Web;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventQuery {
    worker: Option<String>,
    limit: Option<i64>,
}

pub(super) fn event_to_api(e: EventRecord) -> WorkerEvent {
    WorkerEvent {
        id: e.id,
        worker: e.worker,
        kind: e.kind,
        cause: e.cause,
        generation: e.generation,
        at: e.at,
    }
}

pub(super) async fn list(
    State(web): State<Web>,
    _: Allowed<act::ListEvents>,
    query: Result<Query<EventQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<WorkerEvent>>, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    if let Some(name) = &q.worker {
        hangar_core::names::validate_worker_name(name)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is out of range 1..=1000"
        )));
    }
    let events = web.store().list_events(q.worker.as_deref(), limit).await?;
    Ok(Json(events.into_iter().map(event_to_api).collect()))
}
