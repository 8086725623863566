//! The statuses of the worker API's answers that are not errors (those
//! are `error.rs`'s): what was made, and the health probe's verdict. With
//! `error.rs`, the only places a status is chosen (`hangar-tidy` keeps it
//! so).

use axum::http::StatusCode;

/// Made: `body` describes what.
pub(crate) fn created<T>(body: T) -> (StatusCode, T) {
    (StatusCode::CREATED, body)
}

/// A health probe's status: 200 when healthy, 503 when not, so a probe
/// needs no JSON parsing.
pub(crate) fn probe(healthy: bool) -> StatusCode {
    if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}
