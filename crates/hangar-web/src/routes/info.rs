use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use hangar_api::{DatabaseStatus, Info};

use crate::auth::Admin;
use crate::error::ApiError;
use crate::Web;

/// Answers without credentials: for load balancers and probes. The status is
/// 503 while the database does not take a write (a real one, to a table of
/// its own) or is lost, so a probe needs no JSON parsing.
pub(super) async fn info(State(web): State<Web>) -> impl IntoResponse {
    let probe = crate::health::probe_shared(&web).await;
    let status = crate::answer::probe(probe.is_ok());
    let body = Info {
        version: env!("CARGO_PKG_VERSION").to_string(),
        database: DatabaseStatus {
            backend: web.store().backend().as_str().to_string(),
            reachable: probe.is_ok(),
            lost: web.store().lost().is_some(),
            error: probe.err(),
        },
        credential_manager: web.engine().credentials().is_some(),
    };
    (status, axum::Json(body))
}

/// Open by default, so Prometheus scrapes without a secret: the numbers
/// are counts by state, kind and result, never a name, a build or a
/// secret. With `--metrics-require-token` only the admin token reads them.
pub(super) async fn metrics(State(web): State<Web>, admin: Result<Admin, ApiError>) -> Response {
    if web.config().metrics_require_token {
        if let Err(e) = admin {
            return e.into_response();
        }
    }
    // Worker counts are read at scrape time so every web node reports the
    // fleet as the database holds it. A failed read keeps the last values.
    if let Ok(workers) = web.store().list_workers().await {
        let counts: Vec<_> = workers.iter().map(|w| (w.state, 1)).collect();
        web.metrics().set_worker_counts(&counts);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        web.metrics().render(),
    )
        .into_response()
}
