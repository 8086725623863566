//! What web does on workers: make, stream and destroy volumes through a
//! worker's own API, keeping the volume rows in step. Shared by the API
//! routes and the build engine.

use std::time::Duration;

use hangar_client::{ClientError, WorkerApi};
use hangar_core::volumes::OwnerKind;
use hangar_store::{NewVolume, StoreError, VolumeRecord};

use crate::Web;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The worker could not be reached or refused; the row (if any) is failed.
    #[error("worker {worker}: {source}")]
    Worker {
        worker: String,
        #[source]
        source: ClientError,
    },
    #[error("worker {0} serves no volume API")]
    NoApi(String),
}

/// How a new volume gets its content.
#[derive(Debug, Clone)]
pub enum Source {
    Empty,
    CopyOnWrite { parent: String },
    Import { path: String },
}

impl Source {
    fn strategy(&self) -> &'static str {
        match self {
            Source::Empty => "empty",
            Source::CopyOnWrite { .. } => "cow",
            Source::Import { .. } => "import",
        }
    }
}

/// The worker API client of a worker, from its registration.
pub async fn worker_api(web: &Web, worker: &str, timeout: Duration) -> Result<WorkerApi, OpError> {
    let (url, token) = web
        .store()
        .worker_api_endpoint(worker)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("worker {worker} not found")))?;
    // The token is the one this worker process made: web never presents a
    // fleet-wide secret to a URL a worker named.
    let (Some(url), Some(token)) = (url, token) else {
        return Err(OpError::NoApi(worker.to_string()));
    };
    WorkerApi::new(&url, &token, timeout).map_err(|source| OpError::Worker {
        worker: worker.to_string(),
        source,
    })
}

/// Makes a volume: the row first (`creating`), then the worker's volume,
/// then the row's outcome (`created` or `failed`). A crash between the steps
/// leaves a row the reconciliation settles, never a volume web does not know.
pub async fn make_volume(
    web: &Web,
    worker: &str,
    source: Source,
    owner_kind: OwnerKind,
    owner_id: Option<String>,
) -> Result<VolumeRecord, OpError> {
    // Half the age at which GC gives a `creating` row up: a request still
    // running can never see its row failed under it.
    let timeout = Duration::from_millis((web.config().gc.abandoned_creation_ms / 2).max(1) as u64);
    let api = worker_api(web, worker, timeout).await?;
    let handle = uuid::Uuid::new_v4().to_string();
    let parent = match &source {
        Source::CopyOnWrite { parent } => Some(parent.clone()),
        _ => None,
    };
    web.store()
        .create_volume_row(
            &NewVolume {
                handle: handle.clone(),
                worker: worker.to_string(),
                parent: parent.clone(),
                owner_kind,
                owner_id,
                strategy: source.strategy().to_string(),
            },
            web.now(),
        )
        .await?;
    let made = api
        .create_volume(&hangar_api::worker_api::CreateVolume {
            handle: handle.clone(),
            strategy: source.strategy().to_string(),
            parent,
            import_path: match &source {
                Source::Import { path } => Some(path.clone()),
                _ => None,
            },
            properties: Default::default(),
        })
        .await;
    match made {
        Ok(v) => {
            let size = v.size_bytes.and_then(|s| i64::try_from(s).ok());
            web.store()
                .finish_volume_creation(&handle, Ok(size))
                .await?;
        }
        Err(source) => {
            if let Err(e) = web.store().finish_volume_creation(&handle, Err(())).await {
                tracing::warn!(%handle, error = %e, "could not mark a failed volume creation");
            }
            return Err(OpError::Worker {
                worker: worker.to_string(),
                source,
            });
        }
    }
    web.store()
        .get_volume(&handle)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("volume {handle} vanished")).into())
}

/// Copies a volume from one worker to another: a new volume on `to`, filled
/// from `from`'s stream-out. The bytes pass through web; a worker-to-worker
/// pull is the better path and not built yet.
pub async fn copy_volume_between_workers(
    web: &Web,
    from: &VolumeRecord,
    to: &str,
    owner_kind: OwnerKind,
    owner_id: Option<String>,
) -> Result<VolumeRecord, OpError> {
    let target = make_volume(web, to, Source::Empty, owner_kind, owner_id).await?;
    let source_api = worker_api(web, &from.worker, Duration::from_secs(3600)).await?;
    let target_api = worker_api(web, to, Duration::from_secs(3600)).await?;
    let stream = source_api
        .stream_out(&from.handle, "", true)
        .await
        .map_err(|source| OpError::Worker {
            worker: from.worker.clone(),
            source,
        })?;
    target_api
        .stream_in(
            &target.handle,
            "",
            true,
            reqwest::Body::wrap_stream(stream.bytes_stream()),
        )
        .await
        .map_err(|source| OpError::Worker {
            worker: to.to_string(),
            source,
        })?;
    Ok(target)
}

/// Marks a volume for destruction; the worker's next report finishes it.
/// Best effort: a volume that is already gone is fine.
pub async fn release_volume(web: &Web, handle: &str) {
    match web.store().destroy_volume(handle).await {
        Ok(_) | Err(StoreError::NotFound(_)) => {}
        Err(e) => tracing::warn!(%handle, error = %e, "could not release volume"),
    }
}
