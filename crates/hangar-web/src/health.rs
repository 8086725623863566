//! Whether web's database takes writes, and the guard that keeps web from
//! acknowledging a write into a database that is gone.
//!
//! `/info` answers from a real write (see `Store::probe`), not from a
//! `SELECT 1` a read-only or deleted database still answers. A loop probes
//! in the background too, so the metrics and the lost-database guard are
//! current without any traffic.

use std::sync::atomic::{AtomicU64, Ordering};
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
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the background loop probes.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Lets concurrent probes share one write: `/info` needs no credentials, so
/// a burst of calls must not become a burst of commits on the database.
#[derive(Default)]
pub(crate) struct ProbeGate {
    lock: tokio::sync::Mutex<()>,
    finished: AtomicU64,
    last: std::sync::Mutex<Option<Result<(), String>>>,
}

/// Probes the database, or, when a probe finished while this caller waited
/// for the one in flight, answers with that probe's outcome.
pub(crate) async fn probe_shared(web: &Web) -> Result<(), String> {
    let gate = web.probe_gate();
    let seen = gate.finished.load(Ordering::Acquire);
    let _turn = gate.lock.lock().await;
    if gate.finished.load(Ordering::Acquire) != seen {
        if let Some(last) = gate.last.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return last;
        }
    }
    let result = probe(web).await.map_err(|e| e.to_string());
    *gate.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(result.clone());
    gate.finished.fetch_add(1, Ordering::Release);
    result
}

/// Probes the database now and records the outcome in the metrics.
pub(crate) async fn probe(web: &Web) -> Result<(), StoreError> {
    let result = web.store().probe(web.now(), PROBE_TIMEOUT).await;
    if let Err(e) = &result {
        tracing::warn!(error = %e, "the database failed the write probe");
    }
    web.metrics()
        .database_probe(result.is_ok(), web.store().lost().is_some());
    result
}

pub(crate) async fn run(web: Web, interval: Duration, shutdown: CancellationToken) {
    loop {
        let _ = probe_shared(&web).await; // recorded in the metrics and the log
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
pub(crate) async fn guard(State(web): State<Web>, request: Request, next: Next) -> Response {
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
