//! The worker's container API: create, list, show, wait, read the log of,
//! and destroy containers. Served beside the volume API (same listener,
//! same worker key); a thin HTTP layer over
//! [`crate::containers::ContainerManager`], whose blocking calls run on the
//! blocking pool.
//!
//! * `POST /containers` (a `ContainerSpec`) → 201 and the `Container`
//! * `GET /containers`, `GET /containers/{handle}`
//! * `GET /containers/{handle}/wait?timeout_ms=N` → the container once it
//!   has exited, or still running when the timeout (at most 60 s) passes
//! * `GET /containers/{handle}/logs?offset=N&follow=true` → the log from
//!   byte N; with `follow` the body goes on until the container has exited
//!   and everything it wrote has been sent
//! * `DELETE /containers/{handle}` → `{"destroyed": true}`, also when it was
//!   not there

use std::io::SeekFrom;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hangar_api::containers::{Container, ContainerSpec};
use hangar_api::http::Json as JsonBody;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::api::bad_query;
use crate::containers::{ContainerError, ContainerManager, STATE_EXITED};
use crate::error::{self, ApiError};
use crate::file_writes::FileWrites;

/// The longest a wait request is held.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);
const LOG_CHUNK: usize = 64 * 1024;
/// How often a followed log that is at its end looks whether its container
/// has exited (and, where inotify is unavailable, for more): soon after it
/// last grew, then less and less often, down to [`FOLLOW_POLL_MAX`] for a
/// quiet task. A write wakes the follower at once ([`FileWrites`]).
const FOLLOW_POLL_MIN: Duration = Duration::from_millis(2);
const FOLLOW_POLL_MAX: Duration = Duration::from_millis(50);

type Manager = Arc<ContainerManager>;

/// The container routes; the caller adds authentication and the body
/// limit (`MAX_JSON_BODY`, as every JSON route of the worker).
pub(crate) fn routes() -> Router<Manager> {
    Router::new()
        .route("/containers", get(list).post(create))
        .route("/containers/{handle}", get(show).delete(destroy))
        .route("/containers/{handle}/logs", get(logs))
        .route("/containers/{handle}/wait", get(wait))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ContainerError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(error::panicked("container operation", e)),
    }
}

fn not_found(handle: String) -> ApiError {
    ContainerError::NotFound { handle }.into()
}

async fn create(
    State(m): State<Manager>,
    JsonBody(spec): JsonBody<ContainerSpec>,
) -> Result<(StatusCode, Json<Container>), ApiError> {
    let made = blocking(move || m.create_within(spec)).await?;
    Ok(crate::answer::created(Json(made)))
}

async fn list(State(m): State<Manager>) -> Result<Json<Vec<Container>>, ApiError> {
    Ok(Json(blocking(move || m.list()).await?))
}

async fn show(
    State(m): State<Manager>,
    Path(handle): Path<String>,
) -> Result<Json<Container>, ApiError> {
    let h = handle.clone();
    match blocking(move || m.get(&h)).await? {
        Some(c) => Ok(Json(c)),
        None => Err(not_found(handle)),
    }
}

async fn destroy(
    State(m): State<Manager>,
    Path(handle): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || m.destroy(&handle)).await?;
    Ok(Json(serde_json::json!({"destroyed": true})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    timeout_ms: Option<u64>,
}

async fn wait(
    State(m): State<Manager>,
    Path(handle): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Container>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let timeout = q
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(MAX_WAIT)
        .min(MAX_WAIT);
    let deadline = Instant::now() + timeout;
    // Waits in steps so a caller that hangs up frees its blocking thread
    // within a second.
    loop {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        let (m, h) = (m.clone(), handle.clone());
        let c = blocking(move || m.wait(&h, step)).await?;
        if c.state == STATE_EXITED || Instant::now() >= deadline {
            return Ok(Json(c));
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    follow: bool,
}

struct LogReader {
    file: tokio::fs::File,
    manager: Manager,
    handle: String,
    follow: bool,
    /// The container has exited: send what is left, then end.
    draining: bool,
    /// The next wait at the end of the log.
    poll: Duration,
    /// Wakes the wait when the container writes; `None` where inotify is
    /// out of instances, and the follower polls.
    writes: Option<FileWrites>,
}

impl LogReader {
    /// The next chunk; `None` at the end of the body.
    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        let mut buf = vec![0u8; LOG_CHUNK];
        loop {
            match self.file.read(&mut buf).await {
                Err(e) => return Some(Err(e)),
                Ok(0) if !self.follow || self.draining => return None,
                Ok(0) => {
                    if self.exited().await {
                        self.draining = true;
                    } else {
                        match &self.writes {
                            Some(writes) => writes.wait(self.poll).await,
                            None => tokio::time::sleep(self.poll).await,
                        }
                        self.poll = (self.poll * 3 / 2).min(FOLLOW_POLL_MAX);
                    }
                }
                Ok(n) => {
                    self.poll = FOLLOW_POLL_MIN;
                    buf.truncate(n);
                    return Some(Ok(Bytes::from(buf)));
                }
            }
        }
    }

    /// Exited, destroyed, or unreadable: nothing more will be written.
    async fn exited(&self) -> bool {
        let (m, h) = (self.manager.clone(), self.handle.clone());
        match tokio::task::spawn_blocking(move || m.get(&h)).await {
            Ok(Ok(Some(c))) => c.state == STATE_EXITED,
            Ok(Ok(None)) => true,
            Ok(Err(e)) => {
                tracing::warn!(handle = %self.handle, error = %e, "cannot read the container while following its log");
                true
            }
            Err(_) => true,
        }
    }
}

async fn logs(
    State(m): State<Manager>,
    Path(handle): Path<String>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let (m2, h) = (m.clone(), handle.clone());
    let path = blocking(move || m2.log_path(&h)).await?;
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(handle)),
        Err(e) => return Err(error::io(&e, format!("open {}: {e}", path.display()))),
    };
    // Watched before the first read, so no write after it goes unseen.
    let writes = match q.follow {
        true => FileWrites::watch(&path)
            .inspect_err(|e| tracing::debug!(error = %e, "following a log by polling"))
            .ok(),
        false => None,
    };
    file.seek(SeekFrom::Start(q.offset))
        .await
        .map_err(|e| error::io(&e, format!("seek {}: {e}", path.display())))?;
    let reader = LogReader {
        file,
        manager: m,
        handle,
        follow: q.follow,
        draining: false,
        poll: FOLLOW_POLL_MIN,
        writes,
    };
    let stream = futures_util::stream::unfold(reader, |mut r| async move {
        r.next().await.map(|chunk| (chunk, r))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response())
}
