//! The one place where web's errors become HTTP status codes. The body is
//! rendered by [`hangar_api::http::ApiError`], the worker's error type, so
//! both servers answer in one shape. (Web keeps a type of its own because
//! it converts the store's errors, which `hangar-api` does not know.)

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hangar_api::codes;
use hangar_core::fencing::Refusal;
use hangar_store::StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, codes::BAD_REQUEST, message)
    }

    pub fn unsupported_media(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::UNSUPPORTED_MEDIA,
            message,
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, codes::CONFLICT, message)
    }

    /// Busy or out of reach for now (no worker to place on): try again.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::passed_on(StatusCode::TOO_MANY_REQUESTS, message)
    }

    /// A registration under the name of a worker whose process answers.
    pub fn takeover_refused(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, codes::TAKEOVER_REFUSED, message)
    }

    /// Another server's answer passed on as it was (the dashboard's
    /// actions go through the API).
    pub fn passed_on(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError::new(status, hangar_api::http::code_for_status(status), message)
    }

    /// Whether the answer is "log in first".
    pub fn asks_for_login(&self) -> bool {
        self.status == StatusCode::UNAUTHORIZED
    }
}

impl From<hangar_api::http::ApiError> for ApiError {
    fn from(e: hangar_api::http::ApiError) -> ApiError {
        ApiError::new(e.status, e.code, e.message)
    }
}

/// What web answers when a worker it passed a request on to refused it or
/// could not be reached. A worker's full disk stays a 507
/// `insufficient_storage` (the client can try elsewhere or later) and its
/// other refusals keep their status and code; a worker that failed (5xx)
/// or did not answer is a 502: web itself is fine.
pub(crate) fn from_worker(worker: &str, e: &hangar_engine::CallError) -> ApiError {
    match e.status.and_then(|s| StatusCode::from_u16(s).ok()) {
        Some(_) if e.is_storage_full() => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            codes::INSUFFICIENT_STORAGE,
            format!("worker {worker} has no room: {}", e.message),
        ),
        // The worker refusing web's own token is web's trouble with that
        // worker, not the caller's credentials: a 502 like any failure.
        Some(status) if status.is_client_error() && status != StatusCode::UNAUTHORIZED => {
            ApiError::new(
                status,
                hangar_api::http::code_for_status(status),
                format!("worker {worker} refused: {}", e.message),
            )
        }
        _ => ApiError::new(
            StatusCode::BAD_GATEWAY,
            codes::UNAVAILABLE,
            format!("worker {worker}: {e}"),
        ),
    }
}

/// How a failed operation on a worker's volumes reads over the API.
/// Why `what`'s vars could not be read: the plan's fault (400) or the
/// credential manager's (502 `unavailable`, as a worker's failure is).
/// Every route that resolves vars answers through this.
pub(crate) fn from_plan_vars(what: &str, e: hangar_engine::PlanVarsError) -> ApiError {
    match e {
        hangar_engine::PlanVarsError::Refused(why) => {
            ApiError::bad_request(format!("{what}: cannot resolve its vars: {why}"))
        }
        hangar_engine::PlanVarsError::Unavailable(why) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            hangar_api::codes::UNAVAILABLE,
            format!("{what}: cannot resolve its vars: {why}"),
        ),
    }
}

pub(crate) fn from_op(e: hangar_engine::OpError) -> ApiError {
    match e {
        hangar_engine::OpError::Store(e) => e.into(),
        hangar_engine::OpError::Worker { worker, error } => from_worker(&worker, &error),
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let message = e.to_string();
        match e {
            StoreError::NotFound(_) => ApiError::not_found(message),
            StoreError::Conflict(_) => {
                ApiError::new(StatusCode::CONFLICT, codes::CONFLICT, message)
            }
            StoreError::Refused { refusal, .. } => match refusal {
                Refusal::Unknown => ApiError::not_found(message),
                Refusal::Superseded { .. } => {
                    ApiError::new(StatusCode::CONFLICT, codes::SUPERSEDED, message)
                }
                Refusal::Stalled => ApiError::new(StatusCode::CONFLICT, codes::REREGISTER, message),
            },
            StoreError::DatabaseMismatch(_) => {
                tracing::error!(error = %message, "registration from a worker this database never issued");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    codes::DATABASE_MISMATCH,
                    message,
                )
            }
            StoreError::Database(_) | StoreError::Migration(_) => {
                // Logged here, where it is handled: the client gets a plain
                // message without connection strings or SQL.
                tracing::error!(error = %message, "database error");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    codes::UNAVAILABLE,
                    "the database is unavailable; try again",
                )
            }
            StoreError::Lost(_) => {
                tracing::error!(error = %message, "request refused: the database is lost");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    codes::DATABASE_LOST,
                    format!("{message}; web refuses every write until it is restarted"),
                )
            }
            StoreError::Unhealthy(_) => {
                tracing::error!(error = %message, "database unhealthy");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
            }
            StoreError::Sealed(_) => {
                tracing::error!(error = %message, "a worker's API token cannot be sealed or opened");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
            }
            StoreError::Corrupt(_) => {
                tracing::error!(error = %message, "corrupt stored data");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        hangar_api::http::ApiError::new(self.status, self.code, self.message).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hangar_client::ClientError;

    fn api(status: u16, code: &str) -> hangar_engine::CallError {
        hangar_engine::call_error(&ClientError::Api {
            status: StatusCode::from_u16(status).unwrap(),
            code: code.into(),
            message: "m".into(),
        })
    }

    #[test]
    fn a_worker_s_answers_pass_through_as_their_kind_and_its_failures_are_502() {
        // (worker's status, worker's code, web's status, web's code)
        let cases = [
            (
                507,
                "insufficient_storage",
                507,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                500,
                "insufficient_storage",
                507,
                codes::INSUFFICIENT_STORAGE,
            ),
            (413, "payload_too_large", 413, codes::TOO_LARGE),
            (400, "bad_request", 400, codes::BAD_REQUEST),
            (404, "not_found", 404, codes::NOT_FOUND),
            (403, "forbidden", 403, codes::FORBIDDEN),
            (401, "unauthorized", 502, codes::UNAVAILABLE),
            (500, "internal", 502, codes::UNAVAILABLE),
            (503, "unavailable", 502, codes::UNAVAILABLE),
        ];
        for (status, code, want_status, want_code) in cases {
            let e = from_worker("w1", &api(status, code));
            assert_eq!(
                (e.status.as_u16(), e.code),
                (want_status, want_code),
                "{status} {code}"
            );
            assert!(e.message.contains("worker w1"), "{}", e.message);
        }
        let down = from_worker(
            "w1",
            &hangar_engine::call_error(&ClientError::Decode("eof".into())),
        );
        assert_eq!(down.status, StatusCode::BAD_GATEWAY);
    }
}
