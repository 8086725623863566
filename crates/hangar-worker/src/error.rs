//! The one place where the worker API's errors become HTTP statuses, for
//! the volume, container and resource-action routes alike. Every handler
//! returns `Result<_, ApiError>`, the answer type web shares
//! ([`hangar_api::http::ApiError`], the [`hangar_api::ErrorBody`] shape);
//! axum's own rejections are put in that shape by
//! [`hangar_api::http::json_errors`]. No handler names an error status.
//!
//! A full disk (`ENOSPC`, or a quota) is its own answer, 507
//! `insufficient_storage`, not a 500: the caller can tell the worker has
//! no room (and web places nothing there) from the worker being broken.
//!
//! [`VolumeError`] and [`io::Error`] are other crates' types, as is
//! `ApiError`, so they cannot have `From` impls here: [`volume`] and
//! [`io`] are those conversions, and the volume routes' blocking helper
//! applies [`volume`] to every result.

use std::io;

use axum::http::StatusCode;
use hangar_api::codes;
use hangar_volumes::VolumeError;

pub use hangar_api::http::ApiError;

use crate::containers::ContainerError;
use crate::disk::is_storage_full;
use crate::resources_api::ActionError;

/// The request did not present this process's token.
pub fn unauthorized() -> ApiError {
    ApiError::unauthorized("missing or invalid worker key")
}

/// An I/O failure: 507 when the disk is full, else 500 (logged here,
/// where it is handled; a full disk is logged once by the disk reserve
/// and the health check, not on every refused request).
pub fn io(source: &io::Error, message: String) -> ApiError {
    if is_storage_full(source) {
        tracing::debug!(error = %message, "refused: disk full");
        ApiError::insufficient_storage(format!("disk full on this worker: {message}"))
    } else {
        tracing::error!(error = %message, "worker operation failed");
        ApiError::internal(message)
    }
}

/// Blocking work that panicked (or was cancelled) on the blocking pool.
pub fn panicked(what: &str, e: tokio::task::JoinError) -> ApiError {
    tracing::error!(error = %e, "{what} panicked");
    ApiError::internal(format!("{what} panicked: {e}"))
}

/// The stream-in cap is reached: try again later.
pub fn stream_ins_full(limit: usize) -> ApiError {
    ApiError::unavailable(format!(
        "this worker is already running {limit} stream-ins, its limit; try again later"
    ))
}

/// An import path that cannot be resolved: 404 when it is not there.
pub fn import_path(path: &str, e: &io::Error) -> ApiError {
    match e.kind() {
        io::ErrorKind::NotFound => {
            ApiError::not_found(format!("import path {path:?} does not exist"))
        }
        _ => ApiError::bad_request(format!("import path {path:?}: {e}")),
    }
}

/// A volume store error of reading one file: a path that is missing,
/// refused or too large is the asker's (422 `file_unreadable`), told apart
/// from the volume itself missing (404), which means it was lost.
pub fn read_file(e: VolumeError) -> ApiError {
    match &e {
        VolumeError::PathNotFound { .. }
        | VolumeError::InvalidPath { .. }
        | VolumeError::FileTooLarge { .. } => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            codes::FILE_UNREADABLE,
            e.to_string(),
        ),
        _ => volume(e),
    }
}

/// A volume store error.
pub fn volume(e: VolumeError) -> ApiError {
    let message = e.to_string();
    let (status, code) = match &e {
        VolumeError::NotFound { .. }
        | VolumeError::ParentNotFound { .. }
        | VolumeError::PathNotFound { .. } => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
        VolumeError::AlreadyExists { .. } | VolumeError::HasChildren { .. } => {
            (StatusCode::CONFLICT, codes::CONFLICT)
        }
        VolumeError::TooLarge { .. } | VolumeError::FileTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, codes::TOO_LARGE)
        }
        // An archive that could not be written out for want of room is
        // not a bad archive.
        VolumeError::BadArchive { source, .. } if is_storage_full(source) => {
            return io(source, message)
        }
        VolumeError::InvalidHandle { .. }
        | VolumeError::InvalidPath { .. }
        | VolumeError::Refused { .. }
        | VolumeError::BadArchive { .. }
        | VolumeError::Unsupported { .. } => (StatusCode::BAD_REQUEST, codes::BAD_REQUEST),
        VolumeError::Io { source, .. } => return io(source, message),
        VolumeError::CorruptMeta { .. } => {
            tracing::error!(error = %message, "volume operation failed");
            (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL)
        }
    };
    ApiError::new(status, code, message)
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
            ContainerError::AlreadyExists { .. } | ContainerError::InUse { .. } => {
                (StatusCode::CONFLICT, codes::CONFLICT)
            }
            ContainerError::NoRoom { .. } => (StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE),
            ContainerError::Volumes(v) => return volume(v),
            ContainerError::Io {
                ref context,
                ref source,
            } => return io(source, format!("{context}: {source}")),
            ContainerError::Corrupt { .. } => {
                tracing::error!(error = %e, "container operation failed");
                (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL)
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<ActionError> for ApiError {
    fn from(e: ActionError) -> ApiError {
        let message = e.to_string();
        match e {
            ActionError::UnknownAction(_)
            | ActionError::NoVolume
            | ActionError::Misplaced(_)
            | ActionError::BadInput(_)
            | ActionError::Input(_)
            | ActionError::PrivilegedRefused(_) => ApiError::bad_request(message),
            ActionError::NoResourceType(_) | ActionError::VolumeNotFound(_) => {
                ApiError::not_found(message)
            }
            ActionError::Volume(v) => volume(v),
            // The program ran too long: the worker is fine, the source
            // (or the network to it) is slow.
            ActionError::TimedOut { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, codes::UNAVAILABLE, message)
            }
            ActionError::Start { ref source, .. }
            | ActionError::Wait(ref source)
            | ActionError::PrivateDir(ref source)
            | ActionError::HandOver(ref source)
            // A base type the worker cannot make ready or run is the
            // worker's failure, not the step's.
            | ActionError::BaseType { ref source, .. } => io(source, message),
            ActionError::Panicked(e) => panicked("a resource action", e),
            // Another worker may have runc: retried there.
            ActionError::NoRunc(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
            }
            ActionError::Image { source, .. } => {
                let status = ApiError::from(source);
                ApiError::new(status.status, status.code, message)
            }
        }
    }
}

/// A grant presented for a volume's stream-out that opens nothing.
pub fn grant_refused(handle: &str, why: hangar_api::volume_grant::GrantRefused) -> ApiError {
    tracing::warn!(%handle, "refused a stream-out: {why}");
    ApiError::unauthorized(format!("stream-out of volume {handle}: {why}"))
}

/// A pull the source worker failed: 502, with a code that tells web the
/// source (not this worker) failed, and whether it lacks the volume.
pub fn pull_source(not_found: bool, message: String) -> ApiError {
    use hangar_api::worker_api::pull_codes;
    let code = if not_found {
        pull_codes::SOURCE_NOT_FOUND
    } else {
        pull_codes::SOURCE_FAILED
    };
    ApiError::new(StatusCode::BAD_GATEWAY, code, message)
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
                volume(VolumeError::io("write meta", enospc())),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                volume(VolumeError::BadArchive {
                    entry: "big".into(),
                    source: enospc(),
                }),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                volume(VolumeError::BadArchive {
                    entry: "x".into(),
                    source: io::Error::other("truncated"),
                }),
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
        let full = volume(VolumeError::io("write x", enospc()));
        assert!(
            full.message.starts_with("disk full on this worker"),
            "{full:?}"
        );
    }

    #[test]
    fn a_resource_action_s_failures_keep_their_statuses_and_codes() {
        let cases: Vec<(ActionError, StatusCode, &str)> = vec![
            (
                ActionError::UnknownAction("put".into()),
                StatusCode::BAD_REQUEST,
                codes::BAD_REQUEST,
            ),
            (
                ActionError::NoVolume,
                StatusCode::BAD_REQUEST,
                codes::BAD_REQUEST,
            ),
            (
                ActionError::NoResourceType("svn".into()),
                StatusCode::NOT_FOUND,
                codes::NOT_FOUND,
            ),
            (
                ActionError::VolumeNotFound("v".into()),
                StatusCode::NOT_FOUND,
                codes::NOT_FOUND,
            ),
            (
                ActionError::Volume(VolumeError::InvalidHandle {
                    handle: "..".into(),
                    reason: "dots",
                }),
                StatusCode::BAD_REQUEST,
                codes::BAD_REQUEST,
            ),
            (
                ActionError::TimedOut {
                    resource_type: "git".into(),
                    action: "in".into(),
                    timeout: std::time::Duration::from_secs(1),
                },
                StatusCode::GATEWAY_TIMEOUT,
                codes::UNAVAILABLE,
            ),
            (
                ActionError::Start {
                    program: "/rt/git/in".into(),
                    source: io::Error::from_raw_os_error(2),
                },
                StatusCode::INTERNAL_SERVER_ERROR,
                codes::INTERNAL,
            ),
            (
                ActionError::PrivateDir(enospc()),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (
                ActionError::PrivateDir(io::Error::from_raw_os_error(13)),
                StatusCode::INTERNAL_SERVER_ERROR,
                codes::INTERNAL,
            ),
            (
                ActionError::HandOver(enospc()),
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
        ];
        for (e, status, code) in cases {
            let shown = format!("{e:?}");
            let answer = ApiError::from(e);
            assert_eq!((answer.status, answer.code), (status, code), "{shown}");
        }
    }
}
