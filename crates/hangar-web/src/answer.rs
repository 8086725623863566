//! The statuses of web's answers that are not errors (those are
//! `error.rs`'s table): what was made, nothing to say, a browser sent on
//! after a form, a probe's verdict. With `error.rs`, the only places a
//! status is chosen (`hangar-tidy` keeps it so).

use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Done; nothing to answer.
pub(crate) const NO_CONTENT: StatusCode = StatusCode::NO_CONTENT;

/// Made: `body` describes what.
pub(crate) fn created<T>(body: T) -> (StatusCode, T) {
    (StatusCode::CREATED, body)
}

/// Made (201) or changed (200), as a set-team answers.
pub(crate) fn created_or_changed<T>(made: bool, body: T) -> (StatusCode, T) {
    if made {
        created(body)
    } else {
        (StatusCode::OK, body)
    }
}

/// Sends the browser on to `to` after a form.
pub(crate) fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to.to_string())]).into_response()
}

/// Sends the browser on to `to`, setting `cookie`.
pub(crate) fn see_other_with_cookie(to: &str, cookie: String) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(SET_COOKIE, cookie), (LOCATION, to.to_string())],
    )
        .into_response()
}

/// A health probe's status: 200 when healthy, 503 when not, so a load
/// balancer needs no JSON parsing.
pub(crate) fn probe(healthy: bool) -> StatusCode {
    if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}
