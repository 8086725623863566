//! One file per API resource. Handlers parse, check credentials, call the
//! store and shape the answer; nothing else.

mod artifacts;
mod builds;
mod checks;
mod containers;
mod events;
mod info;
mod job_builds;
mod pipelines;
mod teams;
mod versions;
mod volumes;
mod workers;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;
use hangar_api::http::{json_errors, limited, limited_router};

use crate::error::ApiError;
use crate::Web;

/// Checks a pipeline reference from a URL segment: a name, or
/// `name/key:value,…` for an instance (the segment percent-encodes its `/`).
pub(crate) fn check_pipeline(reference: &str) -> Result<(), ApiError> {
    hangar_core::instance_vars::PipelineRef::parse_checked(reference)
        .map(drop)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

pub(crate) fn router(web: Web) -> Router {
    let api = Router::new()
        .route("/workers", post(workers::register).get(workers::list))
        .route("/workers/{name}", get(workers::show).delete(workers::prune))
        .route("/workers/{name}/heartbeat", put(workers::heartbeat))
        // Held open for the worker process's life (`crate::presence`).
        .route("/workers/{name}/presence", post(workers::presence))
        .route("/workers/{name}/land", put(workers::land))
        .route("/workers/{name}/retire", put(workers::retire))
        .route("/stalled-workers/prune", post(workers::prune_stalled))
        .route("/events", get(events::list))
        .route(
            "/builds",
            limited(
                post(builds::create).get(builds::list),
                hangar_api::builds::MAX_PLAN_BODY,
            ),
        )
        .route("/builds/{id}", get(builds::show))
        .route("/builds/{id}/abort", put(builds::abort))
        .route("/builds/{id}/events", get(builds::events))
        .route("/builds/{id}/artifacts/{name}", get(builds::artifact))
        // Uploads stream through to the worker, which enforces its limits.
        .route(
            "/artifacts",
            post(artifacts::upload).layer(DefaultBodyLimit::disable()),
        )
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route(
            "/volumes/{handle}",
            get(volumes::show).delete(volumes::destroy),
        )
        .route(
            "/workers/{name}/volumes",
            // A full report of a big worker is larger than any other body.
            limited(put(volumes::report), hangar_api::MAX_REPORT_BODY),
        )
        .route("/login", post(teams::login))
        .route("/login/cli", post(teams::login_cli))
        .route("/logout", post(teams::logout))
        .route("/user", get(teams::user))
        .route("/teams", get(teams::list))
        .route(
            "/teams/{team}",
            get(teams::show).put(teams::set).delete(teams::destroy),
        )
        .route("/teams/{team}/rename", put(teams::rename))
        .route("/teams/{team}/containers", get(containers::list))
        .route(
            "/teams/{team}/containers/{handle}/intercept",
            get(containers::intercept),
        )
        .nest("/teams/{team}/pipelines", pipeline_routes())
        // Every route above: no request answers 2xx from a lost database.
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            crate::health::guard,
        ));
    // `/info` reports a lost database in its own body, so it is not guarded.
    let api = Router::new()
        .route("/info", get(info::info))
        .merge(api)
        .fallback(not_found);
    let router = Router::new()
        .nest(hangar_api::API_PREFIX, api)
        .route("/metrics", get(info::metrics))
        // The browser's pages, outside the API (see `crate::dashboard`).
        .merge(crate::dashboard::router())
        // Outside the API a browser asked: a page, not JSON.
        .fallback(crate::dashboard::not_found);
    // Each route's own limit (above) replaces this one, and its 413 names
    // it; outermost, axum's own rejections (a path parameter or query that
    // does not parse, a missing method) are put in the error shape.
    limited_router(router, hangar_api::MAX_JSON_BODY)
        .layer(axum::middleware::from_fn(json_errors))
        .with_state(web)
}

/// `/teams/{team}/pipelines…`; the config's own body limit is the core's.
fn pipeline_routes() -> Router<Web> {
    const JOB: &str = "/{name}/jobs/{job}";
    Router::new()
        .route("/", get(pipelines::list))
        .route(
            "/{name}",
            get(pipelines::show)
                .delete(pipelines::destroy)
                .put(pipelines::order),
        )
        .route(
            "/{name}/config",
            limited(
                put(pipelines::set_config).get(pipelines::get_config),
                hangar_core::pipeline::MAX_CONFIG_BYTES,
            ),
        )
        .route("/{name}/pause", put(pipelines::pause))
        .route("/{name}/unpause", put(pipelines::unpause))
        .route("/{name}/rename", put(pipelines::rename))
        .route("/{name}/expose", put(pipelines::expose))
        .route("/{name}/archive", put(pipelines::archive))
        .route("/{name}/hide", put(pipelines::hide))
        .route("/{name}/jobs", get(pipelines::jobs))
        .route(JOB, get(pipelines::job))
        .route(&format!("{JOB}/pause"), put(pipelines::pause_job))
        .route(&format!("{JOB}/unpause"), put(pipelines::unpause_job))
        .route(
            &format!("{JOB}/builds"),
            get(job_builds::list).post(job_builds::trigger),
        )
        .route(
            &format!("{JOB}/builds/{{number}}"),
            get(job_builds::show).post(job_builds::rerun),
        )
        .route(&format!("{JOB}/inputs"), get(job_builds::inputs))
        .route(
            &format!("{JOB}/tasks/{{step}}/cache"),
            axum::routing::delete(job_builds::clear_task_cache),
        )
        .route("/{name}/resources", get(pipelines::resources))
        .route(
            "/{name}/resources/{resource}/cache",
            axum::routing::delete(job_builds::clear_resource_cache),
        )
        .route(
            "/{name}/resources/{resource}/versions",
            get(pipelines::versions),
        )
        .route(
            "/{name}/resources/{resource}/check",
            post(checks::check_resource).get(checks::resource_status),
        )
        .route(
            "/{name}/resources/{resource}/check/webhook",
            post(checks::webhook),
        )
        .route(
            "/{name}/resource-types/{type}/check",
            post(checks::check_resource_type).get(checks::resource_type_status),
        )
        .route(
            "/{name}/resources/{resource}/pin",
            put(versions::pin).get(versions::show_pin),
        )
        .route("/{name}/resources/{resource}/unpin", put(versions::unpin))
        .route(
            "/{name}/resources/{resource}/versions/enable",
            put(versions::enable),
        )
        .route(
            "/{name}/resources/{resource}/versions/disable",
            put(versions::disable),
        )
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}
