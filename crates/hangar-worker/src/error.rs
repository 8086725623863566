//! The one place where the worker API's errors become HTTP statuses, for
//! the volume, container and resource-action routes alike. The body is the
//! shape web uses ([`hangar_api::ErrorBody`]); axum's own rejections are
//! put in that shape by [`hangar_api::http::json_errors`].
//!
//! A full disk (`ENOSPC`, or a quota) is its own answer, 507
//! `insufficient_storage`, not a 500: the caller can tell the worker has
//! no room (and web places nothing there) from the worker being broken.

use std::io;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hangar_api::codes;
use hangar_api::http::ErrorResponse;
use hangar_volumes::VolumeError;

use crate::containers::ContainerError;
use crate::disk::is_storage_full;

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

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            codes::UNAUTHORIZED,
            "missing or invalid worker key",
        )
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    pub fn storage_full(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            codes::INSUFFICIENT_STORAGE,
            message,
        )
    }

    /// An I/O failure: 507 when the disk is full, else 500 (logged here,
    /// where it is handled; a full disk is logged once by the disk reserve
    /// and the health check, not on every refused request).
    fn io(source: &io::Error, message: String) -> ApiError {
        if is_storage_full(source) {
            tracing::debug!(error = %message, "refused: disk full");
            ApiError::storage_full(format!("disk full on this worker: {message}"))
        } else {
            tracing::error!(error = %message, "worker operation failed");
            ApiError::internal(message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        ErrorResponse::new(self.status, self.code, self.message).into_response()
    }
}

impl From<ErrorResponse> for ApiError {
    fn from(e: ErrorResponse) -> ApiError {
        ApiError::new(e.status, e.code, e.message)
    }
}

impl From<VolumeError> for ApiError {
    fn from(e: VolumeError) -> ApiError {
        let message = e.to_string();
        let (status, code) = match &e {
            VolumeError::NotFound { .. }
            | VolumeError::ParentNotFound { .. }
            | VolumeError::PathNotFound { .. } => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            VolumeError::AlreadyExists { .. } | VolumeError::HasChildren { .. } => {
                (StatusCode::CONFLICT, codes::CONFLICT)
            }
            VolumeError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, codes::TOO_LARGE),
            // An archive that could not be written out for want of room is
            // not a bad archive.
            VolumeError::BadArchive { source, .. } if is_storage_full(source) => {
                return ApiError::io(source, message)
            }
            VolumeError::InvalidHandle { .. }
            | VolumeError::InvalidPath { .. }
            | VolumeError::Refused { .. }
            | VolumeError::BadArchive { .. }
            | VolumeError::Unsupported { .. } => (StatusCode::BAD_REQUEST, codes::BAD_REQUEST),
            VolumeError::Io { source, .. } => return ApiError::io(source, message),
            VolumeError::CorruptMeta { .. } => {
                tracing::error!(error = %message, "volume operation failed");
                (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL)
            }
        };
        ApiError::new(status, code, message)
    }
}

impl From<ContainerError> for ApiError {
    fn from(e: ContainerError) -> ApiError {
        let (status, code) = match e {
            ContainerError::InvalidSpec { .. } | ContainerError::Unsupported { .. } => {
                (StatusCode::BAD_REQUEST, codes::BAD_REQUEST)
            }
            ContainerError::NotFound { .. } | ContainerError::VolumeNotFound { .. } => {
                (StatusCode::NOT_FOUND, codes::NOT_FOUND)
            }
            ContainerError::AlreadyExists { .. } => (StatusCode::CONFLICT, codes::CONFLICT),
            ContainerError::NoRoom { .. } => (StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE),
            ContainerError::Volumes(v) => return v.into(),
            ContainerError::Io {
                ref context,
                ref source,
            } => return ApiError::io(source, format!("{context}: {source}")),
            ContainerError::Corrupt { .. } => {
                tracing::error!(error = %e, "container operation failed");
                (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL)
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enospc() -> io::Error {
        io::Error::from_raw_os_error(28)
    }

    #[test]
    fn a_full_disk_is_507_and_other_io_errors_500_on_every_route() {
        // (error, status, code)
        let cases: Vec<(ApiError, StatusCode, &str)> = vec![
            (
                VolumeError::io("write meta", enospc()).into(),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                VolumeError::BadArchive {
                    entry: "big".into(),
                    source: enospc(),
                }
                .into(),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                VolumeError::BadArchive {
                    entry: "x".into(),
                    source: io::Error::other("truncated"),
                }
                .into(),
                StatusCode::BAD_REQUEST,
                codes::BAD_REQUEST,
            ),
            (
                ContainerError::Io {
                    context: "write result".into(),
                    source: enospc(),
                }
                .into(),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                ContainerError::Volumes(VolumeError::io("copy", io::Error::from_raw_os_error(122)))
                    .into(),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                ContainerError::Io {
                    context: "open".into(),
                    source: io::Error::from_raw_os_error(5),
                }
                .into(),
                StatusCode::INTERNAL_SERVER_ERROR,
                codes::INTERNAL,
            ),
            (
                ContainerError::NotFound { handle: "h".into() }.into(),
                StatusCode::NOT_FOUND,
                codes::NOT_FOUND,
            ),
        ];
        for (e, status, code) in cases {
            assert_eq!((e.status, e.code), (status, code), "{e:?}");
        }
        let full: ApiError = VolumeError::io("write x", enospc()).into();
        assert!(
            full.message.starts_with("disk full on this worker"),
            "{full:?}"
        );
    }
}
