use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use futures_util::TryStreamExt;
use hangar_api::builds::{tar_encoding, Artifact};
use hangar_core::names::{validate_label, validate_worker_name};
use hangar_core::placement::Requirement;
use hangar_core::volumes::OwnerKind;
use hangar_engine::placement::{place_now, Wants};
use hangar_engine::Source;
use serde::Deserialize;

use crate::authz::CallerOf;
use crate::error::{from_op, from_worker, ApiError};
use crate::Web;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadQuery {
    /// Put it on this worker (to keep a task's inputs together).
    worker: Option<String>,
    /// Otherwise on a running worker of this platform…
    platform: Option<String>,
    /// …with these tags (comma-separated).
    tags: Option<String>,
    /// The team the upload is for (`main` when left out): the caller needs
    /// the member role there.
    team: Option<String>,
}

/// Uploads a tar as a new artifact volume on a worker: gzipped (as
/// before other encodings were taken, and when no content type is given),
/// zstd-compressed or plain, as its content type says.
pub(super) async fn upload(
    State(web): State<Web>,
    CallerOf(caller): CallerOf,
    headers: axum::http::HeaderMap,
    query: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<(StatusCode, axum::Json<Artifact>), ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let team = q.team.as_deref().unwrap_or(hangar_core::tenancy::MAIN_TEAM);
    validate_label(team).map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    crate::authz::authorize(&caller, hangar_core::tenancy::Action::CreateArtifact, team)?;
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let encoding = tar_encoding(content_type).ok_or_else(|| {
        ApiError::unsupported_media(format!(
            "an upload is a tar: application/x-tar, application/gzip or application/zstd, not {}",
            content_type.unwrap_or_default()
        ))
    })?;
    let worker = match q.worker {
        Some(w) => {
            validate_worker_name(&w).map_err(|e| ApiError::bad_request(format!("worker: {e}")))?;
            // Another team's worker is no place for this team's bytes.
            let owner = web.store().get_worker(&w).await?.and_then(|r| r.info.team);
            if owner.as_deref().is_some_and(|o| o != team) {
                return Err(ApiError::forbidden(format!(
                    "worker {w} serves another team only"
                )));
            }
            w
        }
        None => {
            let platform = q.platform.unwrap_or_else(|| "linux".into());
            validate_label(&platform)
                .map_err(|e| ApiError::bad_request(format!("platform: {e}")))?;
            let mut tags = std::collections::BTreeSet::new();
            for t in q
                .tags
                .iter()
                .flat_map(|t| t.split(','))
                .filter(|t| !t.is_empty())
            {
                validate_label(t).map_err(|e| ApiError::bad_request(format!("tag: {e}")))?;
                tags.insert(t.to_string());
            }
            // The same rule as a build step's: running, fitting, accepting
            // work (not under pressure, healthy) and serving an API.
            let wants = Wants {
                requirement: Requirement {
                    platform,
                    tags,
                    team: Some(team.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            place_now(web.engine(), wants)
                .await?
                .map_err(|no| ApiError::unavailable(format!("cannot place the upload: {}", no.0)))?
        }
    };
    let volume = web
        .engine()
        .make_volume(
            &worker,
            Source::Empty,
            OwnerKind::Artifact,
            Some("upload".into()),
        )
        .await
        .map_err(|e| doubted(&web, &worker, from_op(e)))?;
    let api = match web.workers().api(&worker, Duration::from_secs(3600)).await {
        Ok(api) => api,
        Err(e) => {
            web.engine().release_volume(&volume.handle).await;
            return Err(doubted(&web, &worker, from_worker(&worker, &e)));
        }
    };
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    if let Err(e) = api
        .stream_in_encoded(
            &volume.handle,
            "",
            encoding,
            reqwest::Body::wrap_stream(stream),
        )
        .await
    {
        web.engine().release_volume(&volume.handle).await;
        return Err(doubted(
            &web,
            &worker,
            from_worker(&worker, &hangar_engine::call_error(&e)),
        ));
    }
    Ok(crate::answer::created(axum::Json(Artifact {
        handle: volume.handle,
        worker,
    })))
}

/// An upload that failed for its worker's fault (web's 5xx: the worker
/// unreachable, failing, or its disk full) makes placement doubt that
/// worker, as a failed step does: the client's next try goes elsewhere. A
/// refusal of the upload itself (4xx: a bad archive) says nothing of it.
fn doubted(web: &Web, worker: &str, e: ApiError) -> ApiError {
    if e.status.is_server_error() {
        web.engine().distrust(worker);
    }
    e
}
