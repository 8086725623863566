//! A team's containers: the listing (`hangar containers`) and `intercept`
//! sessions, which web opens on the container's worker and then relays
//! byte for byte (it reads no frame; see `hangar_api::intercept`).

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::response::Response;
use axum::Json;
use hangar_api::http::{switching, wants_session};
use hangar_api::intercept::{ExecRequest, TeamContainer};
use hangar_core::containers::ContainerState;
use hangar_core::tenancy::act;
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use crate::authz::Allowed;
use crate::error::ApiError;
use crate::Web;

use hangar_core::pipeline::check_name;

/// How long opening a session on the worker may take.
const WORKER_TIMEOUT: Duration = Duration::from_secs(10);

fn wire(c: hangar_store::TeamContainer) -> TeamContainer {
    TeamContainer {
        handle: c.container.handle,
        worker: c.container.worker,
        state: c.container.state.as_str().to_string(),
        build_id: c.container.build_id.unwrap_or_default(),
        build_name: c.build_number.map_or(c.build_name, |n| n.to_string()),
        pipeline: c.pipeline,
        job: c.job,
        step: c.step_name,
        step_type: c.step_kind,
        attempt: c.attempt,
        created_at: c.container.created_at,
        kept_until: c.container.kept_until,
    }
}

pub(super) async fn list(
    State(web): State<Web>,
    Path(team): Path<String>,
    _allowed: Allowed<act::ListContainers>,
) -> Result<Json<Vec<TeamContainer>>, ApiError> {
    check_name("team", &team).map_err(ApiError::bad_request)?;
    let rows = web.store().team_containers(&team, None).await?;
    Ok(Json(rows.into_iter().map(wire).collect()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InterceptQuery {
    process: String,
}

/// Opens an `intercept` session in `team`'s container `handle`: the
/// worker's session first (so its refusal reaches the caller as an
/// answer), then the `101`, then the relay.
pub(super) async fn intercept(
    State(web): State<Web>,
    Path((team, handle)): Path<(String, String)>,
    query: Result<Query<InterceptQuery>, QueryRejection>,
    allowed: Allowed<act::InterceptContainer>,
    mut req: Request,
) -> Result<Response, ApiError> {
    check_name("team", &team).map_err(ApiError::bad_request)?;
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let process = ExecRequest::from_query(&q.process).map_err(ApiError::bad_request)?;
    if !wants_session(req.headers()) {
        return Err(ApiError::bad_request(format!(
            "intercept is a session: send Connection: upgrade and Upgrade: {}",
            hangar_api::intercept::UPGRADE_PROTOCOL
        )));
    }
    // Another team's container reads as missing.
    let Some(found) = web
        .store()
        .team_containers(&team, Some(&handle))
        .await?
        .pop()
    else {
        return Err(ApiError::not_found(format!(
            "container {handle} not found in team {team}"
        )));
    };
    let c = found.container;
    if c.state != ContainerState::Created {
        return Err(ApiError::conflict(format!(
            "container {handle} is {}: only a running container, or a failed step's kept one, can be intercepted",
            c.state
        )));
    }
    let api = web
        .workers()
        .api(&c.worker, WORKER_TIMEOUT)
        .await
        .map_err(|e| crate::error::from_worker(&c.worker, &e))?;
    let session = api
        .exec(&handle, &process)
        .await
        .map_err(|e| crate::error::from_worker(&c.worker, &hangar_engine::call_error(&e)))?;
    let upgrade = hyper::upgrade::on(&mut req);
    // The session holds its connection's place under the connection caps.
    let place = hangar_http::ConnectionPlace::of(&req);
    tracing::info!(%team, container = %handle, worker = %c.worker, path = %process.path, by = %allowed.caller().describe(), "intercept session opened");
    tokio::spawn(async move {
        let _place = place;
        let mut session = session;
        match upgrade.await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                match tokio::io::copy_bidirectional(&mut client, &mut session).await {
                    Ok((up, down)) => {
                        tracing::info!(container = %handle, up, down, "intercept session ended")
                    }
                    Err(e) => {
                        tracing::info!(container = %handle, error = %e, "intercept session broke")
                    }
                }
            }
            // Dropping the worker's session ends its process.
            Err(e) => tracing::debug!(error = %e, "the intercept upgrade failed"),
        }
    });
    Ok(switching())
}
