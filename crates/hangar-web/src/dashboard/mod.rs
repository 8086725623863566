//! The web dashboard: server-rendered HTML pages (maud) served by web
//! itself, outside `/api/v1`, live through two small inline scripts over
//! server-sent events: the build log's, and every other page's (`live`). One file per page; `layout` is the
//! shell every page shares, `auth` the login cookie, CSRF and actions.

mod auth;
mod build;
pub(crate) use build::build_is_public;
mod builds;
mod graph;
mod job;
mod layout;
mod live;
pub(crate) use live::Live;
mod oidc;
mod pipeline;
mod pipelines;
mod resource;
mod workers;

use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hangar_store::StoreError;

use crate::{ApiError, Web};

/// The dashboard's routes, merged beside the API's.
pub(crate) fn router() -> Router<Web> {
    const PIPELINE: &str = "/teams/{team}/pipelines/{name}";
    const JOB: &str = "/teams/{team}/pipelines/{name}/jobs/{job}";
    const RESOURCE: &str = "/teams/{team}/pipelines/{name}/resources/{resource}";
    Router::new()
        .route("/", get(pipelines::page))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/auth/oidc", get(oidc::start))
        .route(crate::oidc::CALLBACK_PATH, get(oidc::callback))
        .route("/workers", get(workers::list_page))
        .route("/workers/{worker}", get(workers::worker_page))
        .route(PIPELINE, get(pipeline::page))
        .route(&format!("{PIPELINE}/{{action}}"), post(pipeline::act))
        .route(RESOURCE, get(resource::page))
        .route(&format!("{RESOURCE}/{{action}}"), post(resource::act))
        .route(JOB, get(job::page))
        .route(&format!("{JOB}/{{action}}"), post(job::act))
        .route(
            &format!("{JOB}/builds/{{number}}"),
            get(build::job_build_page),
        )
        .route(
            &format!("{JOB}/builds/{{number}}/rerun"),
            post(build::rerun),
        )
        .route("/builds", get(builds::page))
        .route("/builds/{id}", get(build::page))
        .route("/builds/{id}/log", get(build::log_stream))
        .route("/builds/{id}/abort", post(build::abort))
        .route("/live", get(live::stream))
}

/// Why a page could not be shown, rendered as a page (never JSON: a
/// browser asked). Its status comes from web's one error table
/// (`error.rs`), so a page and the API answer the same failure alike.
#[derive(Debug)]
pub(crate) struct PageError(ApiError);

impl PageError {
    pub(crate) fn not_found(message: impl Into<String>) -> PageError {
        PageError(ApiError::not_found(message))
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> PageError {
        PageError(ApiError::bad_request(message))
    }

    /// Anonymous visitors get the same answer whether or not the thing
    /// exists, so private pipeline names do not leak.
    pub(crate) fn login_needed() -> PageError {
        PageError::unauthorized("log in to see this page (it is not part of an exposed pipeline)")
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> PageError {
        PageError(ApiError::unauthorized(message))
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> PageError {
        PageError(ApiError::forbidden(message))
    }
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> PageError {
        PageError(e)
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> PageError {
        PageError(ApiError::from(e))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = layout::error_page(&self.0);
        (self.0.status, Html(body.into_string())).into_response()
    }
}

type PageResult = Result<Html<String>, PageError>;

/// Any path outside the API that names no page.
pub(crate) async fn not_found() -> PageError {
    PageError::not_found("no such page")
}
