//! Whether web's database takes writes, and the guard that keeps web from
//! acknowledging a write into a database that is gone.
//!
//! `/info` answers from a real write (see `Store::probe`), not from a
//! `SELECT 1` a read-only or deleted database still answers. A loop probes
//! in the background too, so the metrics and the lost-database guard are
//! current without any traffic.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hangar_store::StoreError;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::Web;

/// How long the probe's write may take before the database counts as
/// unreachable: well under a load balancer's usual check timeout, and well
/// over a healthy commit (SQLite's busy timeout is 5s; a probe stuck behind
/// a long writer for that long is a database that does not answer).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the background loop probes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Probes the database now and records the outcome in the metrics.
pub async fn probe(web: &Web) -> Result<(), StoreError> {
    let result = web.store().probe(web.now(), PROBE_TIMEOUT).await;
    if let Err(e) = &result {
        tracing::warn!(error = %e, "the database failed the write probe");
    }
    web.metrics()
        .database_probe(result.is_ok(), web.store().lost().is_some());
    result
}

pub async fn run(web: Web, interval: Duration, shutdown: CancellationToken) {
    loop {
        let _ = probe(&web).await; // recorded in the metrics and the log
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

fn writes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Refuses every request once the database is lost, and never lets a write
/// request answer 2xx when the database file vanished while it ran: the
/// write went into a file nobody will read, so it is not acknowledged.
pub async fn guard(State(web): State<Web>, request: Request, next: Next) -> Response {
    let store = web.store();
    let write = writes(request.method());
    // Reads only look at the remembered state; writes also stat the file
    // (one system call), before and after the work.
    let before = if write {
        store.check_file()
    } else {
        store.lost().map_or(Ok(()), |r| Err(StoreError::Lost(r)))
    };
    if let Err(e) = before {
        return refuse(&web, e);
    }
    let response = next.run(request).await;
    if write && response.status().is_success() {
        if let Err(e) = store.check_file() {
            return refuse(&web, e);
        }
    }
    response
}

fn refuse(web: &Web, e: StoreError) -> Response {
    web.metrics()
        .database_probe(false, web.store().lost().is_some());
    ApiError::from(e).into_response()
}
