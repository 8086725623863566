//! The worker's volume API: what web (and other workers) call to create,
//! list, destroy and stream volumes. A thin HTTP layer over
//! `hangar_volumes::VolumeManager`, whose blocking calls run on the blocking
//! pool.

use std::io;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use futures_util::TryStreamExt;
use hangar_api::credentials::same_secret;
use hangar_api::http::{json_errors, limited_router, Json as JsonBody};
use hangar_api::worker_api::{CreateVolume, SetProperty, Volume};
use hangar_api::MAX_JSON_BODY;
use hangar_volumes::{Compression, Limits, Strategy, VolumeError, VolumeInfo, VolumeManager};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::containers::ContainerManager;
use crate::error;
pub use crate::error::ApiError;

#[derive(Clone)]
pub struct VolumeApi {
    manager: Arc<VolumeManager>,
    key: Arc<str>,
    limits: Limits,
    /// One permit per running stream-in, `limits.max_concurrent_stream_ins`
    /// in all.
    stream_ins: Arc<Semaphore>,
    /// Served under `/containers` when set (see `containers_api`).
    containers: Option<Arc<ContainerManager>>,
    /// Served under `/resource-actions` when set (see `resources_api`).
    resources: Option<crate::resources_api::ResourceRunner>,
    /// Answers `/healthz` when set; without it the endpoint only says the
    /// process is up.
    health: Option<Arc<crate::health::Health>>,
    /// The host directories (canonical) an `import` may copy from; none:
    /// imports are refused. A fleet key must not be a way to copy
    /// `/etc/shadow` off a worker.
    import_dirs: Arc<Vec<std::path::PathBuf>>,
    /// A root worker gives what is streamed into a volume without parent or
    /// children to the first task user (see `ResourceRunner::with_task_user`).
    task_user: Option<hangar_core::users::Ids>,
    /// Pulls volumes from other workers (`crate::pull`).
    pub(crate) http: reqwest::Client,
}

impl VolumeApi {
    pub fn new(manager: Arc<VolumeManager>, key: &str, limits: Limits) -> VolumeApi {
        VolumeApi {
            manager,
            key: key.into(),
            limits,
            stream_ins: Arc::new(Semaphore::new(limits.max_concurrent_stream_ins)),
            containers: None,
            resources: None,
            health: None,
            import_dirs: Arc::new(Vec::new()),
            task_user: None,
            http: crate::pull::client(),
        }
    }

    /// Stream-ins running now.
    pub fn stream_ins_running(&self) -> usize {
        self.limits.max_concurrent_stream_ins - self.stream_ins.available_permits()
    }

    pub fn with_task_user(mut self, ids: hangar_core::users::Ids) -> VolumeApi {
        self.task_user = Some(ids);
        self
    }

    /// Allows `import` volumes from these directories (and below them),
    /// resolved now: each must exist.
    pub fn with_import_dirs(mut self, dirs: &[std::path::PathBuf]) -> io::Result<VolumeApi> {
        let mut canonical = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let c = std::fs::canonicalize(dir).map_err(|e| {
                io::Error::new(e.kind(), format!("import dir {}: {e}", dir.display()))
            })?;
            if !c.is_dir() {
                return Err(io::Error::other(format!(
                    "import dir {} is not a directory",
                    dir.display()
                )));
            }
            canonical.push(c);
        }
        self.import_dirs = Arc::new(canonical);
        Ok(self)
    }

    /// Serves the container API too, with the same key.
    pub fn with_containers(mut self, containers: Arc<ContainerManager>) -> VolumeApi {
        self.containers = Some(containers);
        self
    }

    pub fn with_health(mut self, health: Arc<crate::health::Health>) -> VolumeApi {
        self.health = Some(health);
        self
    }

    pub fn with_resources(mut self, resources: crate::resources_api::ResourceRunner) -> VolumeApi {
        self.resources = Some(resources);
        self
    }
}

/// A query that does not deserialize, in the error shape.
pub(crate) fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request(format!("invalid query: {}", e.body_text()))
}

/// Runs a blocking volume operation on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(error::volume),
        Err(e) => Err(error::panicked("volume operation", e)),
    }
}

fn to_api(v: VolumeInfo) -> Volume {
    Volume {
        handle: v.handle,
        parent: v.parent,
        path: v.path.display().to_string(),
        properties: v.properties,
        size_bytes: v.size_bytes,
        created_at: v.created_at,
    }
}

pub fn router(api: VolumeApi) -> Router {
    let mut authed = Router::new()
        .route("/volumes", get(list).post(create))
        .route("/volumes/{handle}", get(show).delete(destroy))
        .route("/volumes/{handle}/properties/{key}", put(set_property))
        // Stream-in bodies are bounded by the archive limits, not by size.
        .route(
            "/volumes/{handle}/stream-in",
            put(stream_in).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/volumes/{handle}/pull", put(crate::pull::pull))
        .route("/volumes/{handle}/file", get(read_file))
        // Answers only with this process's own token: how web tells the
        // live holder of a name from a new process at the same address.
        .route(
            "/incarnation",
            get(|| async { Json(serde_json::json!({"ok": true})) }),
        );
    if let Some(containers) = api.containers.clone() {
        authed = authed.merge(crate::containers_api::routes().with_state(containers.clone()));
        authed = authed.merge(crate::exec_api::routes().with_state(containers));
    }
    // Every other body is JSON, and small.
    let authed = limited_router(authed, MAX_JSON_BODY)
        .layer(middleware::from_fn_with_state(api.clone(), require_key));
    let resources = api.resources.clone();
    let router = Router::new()
        // This process's token, or a grant web signed with it for this
        // volume alone (another worker pulling it): checked in the handler.
        .route("/volumes/{handle}/stream-out", get(stream_out))
        .route("/healthz", get(healthz))
        .route(
            "/livez",
            get(|| async { Json(serde_json::json!({"ok": true})) }),
        )
        .merge(authed)
        .with_state(api);
    let router = match resources {
        Some(r) => router.merge(crate::resources_api::router(r)),
        None => router,
    };
    // Outermost: axum's own rejections (a bad path or query, a missing
    // method, an unknown route) answer in the error shape too.
    router
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(middleware::from_fn(json_errors))
}

/// Serves `api` with a worker's default connection limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: VolumeApi,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, api, hangar_http::Limits::worker(), shutdown).await
}

/// Serves `api` with `limits` (the worker's `--http-*` flags).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    api: VolumeApi,
    limits: hangar_http::Limits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    hangar_http::serve(listener, router(api), limits, async move {
        shutdown.cancelled().await
    })
    .await
}

async fn require_key(State(api): State<VolumeApi>, req: Request, next: Next) -> Response {
    if has_key(&api, req.headers()) {
        next.run(req).await
    } else {
        error::unauthorized().into_response()
    }
}

fn has_key(api: &VolumeApi, headers: &header::HeaderMap) -> bool {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    presented.is_some_and(|k| same_secret(k.as_bytes(), api.key.as_bytes()))
}

/// A stream-out is for web (this process's token) or for a worker web
/// sent to pull this one volume (a grant signed with that token).
fn may_stream_out(
    api: &VolumeApi,
    headers: &header::HeaderMap,
    handle: &str,
) -> Result<(), ApiError> {
    if has_key(api, headers) {
        return Ok(());
    }
    let Some(grant) = headers
        .get(hangar_api::volume_grant::GRANT_HEADER)
        .and_then(|h| h.to_str().ok())
    else {
        return Err(error::unauthorized());
    };
    let now = crate::pull::now_ms();
    hangar_api::volume_grant::verify(&api.key, handle, grant, now)
        .map_err(|refused| error::grant_refused(handle, refused))
}

async fn list(State(api): State<VolumeApi>) -> Result<Json<Vec<Volume>>, ApiError> {
    let m = api.manager.clone();
    let volumes = blocking(move || m.list()).await?;
    Ok(Json(volumes.into_iter().map(to_api).collect()))
}

async fn show(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
) -> Result<Json<Volume>, ApiError> {
    let m = api.manager.clone();
    let found = blocking(move || m.get(&handle).map(|v| (handle, v))).await?;
    match found {
        (_, Some(v)) => Ok(Json(to_api(v))),
        (handle, None) => Err(error::volume(VolumeError::NotFound { handle })),
    }
}

async fn create(
    State(api): State<VolumeApi>,
    JsonBody(req): JsonBody<CreateVolume>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    let strategy = match (req.strategy.as_str(), req.parent, req.import_path) {
        ("empty", None, None) => Strategy::Empty,
        ("cow", Some(parent), None) => Strategy::CopyOnWrite { parent },
        ("import", None, Some(path)) => Strategy::Import {
            path: allowed_import(&api.import_dirs, &path).await?,
        },
        (s, _, _) => {
            return Err(ApiError::bad_request(format!(
                "strategy {s:?} with these fields is not valid: empty; cow with parent; import with import_path"
            )))
        }
    };
    let m = api.manager.clone();
    let made = blocking(move || m.create(&req.handle, strategy, req.properties)).await?;
    Ok(crate::answer::created(Json(to_api(made))))
}

/// The canonical path to import from, if it is inside an allowed dir. The
/// path as given is checked first, so a refused request learns nothing of
/// the host's files; then where it really leads (through any link).
async fn allowed_import(
    dirs: &Arc<Vec<std::path::PathBuf>>,
    path: &str,
) -> Result<std::path::PathBuf, ApiError> {
    use hangar_core::import::{import_decision, ImportDecision};
    let listed = || {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match import_decision(dirs, std::path::Path::new(path)) {
        ImportDecision::Disabled => {
            return Err(ApiError::forbidden(
                "importing host paths is turned off on this worker: an operator enables it for named directories with --allow-import-dir DIR",
            ))
        }
        ImportDecision::Outside => {
            return Err(ApiError::forbidden(format!(
                "{path:?} is outside the directories this worker may import from ({})",
                listed()
            )))
        }
        ImportDecision::Inside => {}
    }
    let given = std::path::PathBuf::from(path);
    let real = tokio::task::spawn_blocking(move || std::fs::canonicalize(&given))
        .await
        .map_err(|e| error::panicked("resolving an import path", e))?
        .map_err(|e| error::import_path(path, &e))?;
    match import_decision(dirs, &real) {
        ImportDecision::Inside => Ok(real),
        _ => Err(ApiError::forbidden(format!(
            "{path:?} leads to {}, outside the directories this worker may import from ({})",
            real.display(),
            listed()
        ))),
    }
}

async fn destroy(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let m = api.manager.clone();
    blocking(move || m.destroy(&handle)).await?;
    Ok(Json(serde_json::json!({"destroyed": true})))
}

async fn set_property(
    State(api): State<VolumeApi>,
    Path((handle, key)): Path<(String, String)>,
    JsonBody(req): JsonBody<SetProperty>,
) -> Result<Json<Volume>, ApiError> {
    let m = api.manager.clone();
    let v = blocking(move || {
        m.set_property(&handle, &key, &req.value)?;
        m.get(&handle)?.ok_or(VolumeError::NotFound { handle })
    })
    .await?;
    Ok(Json(to_api(v)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    #[serde(default)]
    path: String,
    encoding: Option<String>,
}

fn compression(q: &StreamQuery) -> Result<Compression, ApiError> {
    encoding(q.encoding.as_deref())
}

/// A stream's `encoding`: none (also `identity`), `gzip` or `zstd`.
pub(crate) fn encoding(name: Option<&str>) -> Result<Compression, ApiError> {
    match name {
        None | Some("" | "none" | "identity") => Ok(Compression::None),
        Some("gzip") => Ok(Compression::Gzip),
        Some("zstd") => Ok(Compression::Zstd),
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown encoding {other:?}: use gzip, zstd or none"
        ))),
    }
}

async fn stream_in(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
    query: Result<Query<StreamQuery>, QueryRejection>,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let compression = compression(&q)?;
    let permit = stream_in_permit(&api)?;
    let body = body.into_data_stream().map_err(io::Error::other);
    let report = receive(&api, permit, handle, q.path, body, compression).await?;
    Ok(Json(stream_in_answer(&report)))
}

/// A stream-in's permit, refused before any byte is read: a stream-in
/// over the cap costs nothing but this answer.
pub(crate) fn stream_in_permit(
    api: &VolumeApi,
) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    api.stream_ins
        .clone()
        .try_acquire_owned()
        .map_err(|_| error::stream_ins_full(api.limits.max_concurrent_stream_ins))
}

/// What a stream-in (or a pull) answers.
pub(crate) fn stream_in_answer(report: &hangar_volumes::StreamInReport) -> serde_json::Value {
    serde_json::json!({
        "entries": report.entries,
        "files": report.files,
        "bytes": report.content_bytes,
    })
}

/// Extracts a tar stream into `handle` at `path` under this worker's
/// limits (a stream-in's body, or a pull's download), then gives the
/// volume to the task user as [`hand_over`] says.
pub(crate) async fn receive(
    api: &VolumeApi,
    permit: tokio::sync::OwnedSemaphorePermit,
    handle: String,
    path: String,
    stream: impl futures_util::Stream<Item = io::Result<axum::body::Bytes>> + Send + Unpin + 'static,
    compression: Compression,
) -> Result<hangar_volumes::StreamInReport, ApiError> {
    // Made on the runtime, read on the blocking pool.
    let reader = hangar_client::blocking_body_reader(stream);
    let (m, limits, task_user) = (api.manager.clone(), api.limits, api.task_user);
    let containers = api.containers.clone();
    blocking(move || {
        let _permit = permit; // held until the blocking work ends

        // Never under a container that mounts it: its user owns it now.
        let mounted = || {
            containers
                .as_ref()
                .is_some_and(|c| c.mounted_volumes().map_or(true, |v| v.contains(&handle)))
        };
        // A fresh volume (a pull's, an upload's) is the task user's as it
        // is filled; another is handed over after, by a walk of its tree.
        let fresh = task_user
            .filter(|_| path.is_empty() && !mounted())
            .and_then(|ids| fresh_of_its_own(&m, &handle).map(|top| (ids, top)));
        let owner = fresh.as_ref().map(|(ids, _)| (ids.uid, ids.gid));
        let report = m.stream_in_as(&handle, &path, reader, compression, &limits, owner)?;
        match (fresh, task_user) {
            (Some((_, top)), _) => {
                crate::containers::keep_top_for_root(&top).map_err(|e| {
                    VolumeError::io(format!("keep volume {handle:?}'s top dir root's"), e)
                })?;
            }
            (None, Some(ids)) if !mounted() => hand_over(&m, &handle, ids)?,
            (None, _) => {}
        }
        Ok(report)
    })
    .await
}

/// The path of a volume with no parent, no children and nothing in it
/// yet; `None` for any other.
fn fresh_of_its_own(m: &VolumeManager, handle: &str) -> Option<std::path::PathBuf> {
    of_its_own(m, handle)
        .ok()
        .flatten()
        .filter(|path| std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none()))
}

/// The path of a volume with no parent and no children; `None` for any
/// other, or one that is gone.
fn of_its_own(m: &VolumeManager, handle: &str) -> Result<Option<std::path::PathBuf>, VolumeError> {
    let all = m.list()?;
    let Some(v) = all.iter().find(|v| v.handle == handle) else {
        return Ok(None);
    };
    let has_children = all.iter().any(|c| c.parent.as_deref() == Some(handle));
    Ok((v.parent.is_none() && !has_children).then(|| v.path.clone()))
}

/// Gives a streamed-in volume to the first task user when it is a volume
/// of its own (no parent, no children): no overlay layer under a mount is
/// touched, and the tasks mounting copies of it need not copy every file up
/// to change its owner.
fn hand_over(
    m: &VolumeManager,
    handle: &str,
    ids: hangar_core::users::Ids,
) -> Result<(), VolumeError> {
    let Some(path) = of_its_own(m, handle)? else {
        return Ok(());
    };
    crate::containers::hand_to_task_user(&path, ids)
        .map_err(|e| VolumeError::io(format!("give volume {handle:?} to the task user"), e))
}

async fn stream_out(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
    headers: header::HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    may_stream_out(&api, &headers, &handle)?;
    let Query(q) = query.map_err(bad_query)?;
    let compression = compression(&q)?;
    // Fail before the headers go out when the volume or the path is not
    // there: a 200 with an empty archive would read as an empty directory.
    let m = api.manager.clone();
    let path = q.path.clone();
    let h = handle.clone();
    let source = blocking(move || m.stream_out_source(&h, &path)).await?;
    // The archive is written a 512-byte header and a small file at a time:
    // gathered into large chunks, so the response carries a few of them
    // rather than three per file.
    let (mut writer, body) = hangar_client::chunks::chunked();
    let body = axum::body::Body::from_stream(body);
    // Owned by the response: when the client goes away the channel closes
    // and the blocking writer returns.
    tokio::task::spawn_blocking(move || {
        if let Err(e) = source.write_to(&mut writer, compression) {
            tracing::warn!(%handle, error = %e, "stream-out ended early");
            writer.abort(format!("stream-out of volume {handle} ended early: {e}"));
        }
    });
    let content_type = match compression {
        Compression::Gzip => "application/gzip",
        Compression::Zstd => "application/zstd",
        Compression::None => "application/x-tar",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQuery {
    path: String,
}

/// One regular file of the volume, whole (at most
/// [`hangar_volumes::MAX_READ_FILE_BYTES`]), never anything outside it.
async fn read_file(
    State(api): State<VolumeApi>,
    Path(handle): Path<String>,
    query: Result<Query<FileQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let m = api.manager.clone();
    let content = tokio::task::spawn_blocking(move || {
        m.read_file(&handle, &q.path, hangar_volumes::MAX_READ_FILE_BYTES)
    })
    .await
    .map_err(|e| error::panicked("reading a file", e))?
    .map_err(error::read_file)?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        content,
    )
        .into_response())
}

/// For readiness probes: 503 while the worker is unhealthy (its work dir
/// unwritable, containers failing, web out of reach) or under pressure, with
/// the reason. `/livez` only says the process answers.
async fn healthz(State(api): State<VolumeApi>) -> Response {
    let Some(health) = &api.health else {
        return Json(serde_json::json!({"ok": true})).into_response();
    };
    let c = health.condition();
    let ok = c.healthy && c.pressure != hangar_core::pressure::Pressure::Hard;
    let status = crate::answer::probe(ok);
    (status, Json(serde_json::json!({"ok": ok, "condition": c}))).into_response()
}
