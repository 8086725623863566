//! The one place where errors become HTTP status codes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hangar_api::{codes, ErrorBody, ErrorDetail};
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

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
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
            StoreError::Corrupt(_) => {
                tracing::error!(error = %message, "corrupt stored data");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}
