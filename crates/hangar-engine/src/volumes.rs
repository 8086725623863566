//! Volumes the engine makes on workers: the row first, then the worker's
//! volume, then the row's outcome, so that a crash between the steps leaves
//! a row the reconciliation settles, never a volume web does not know.
//! Shared by the build steps and web's volume and upload routes.

use hangar_core::engine::CallError;
use hangar_core::volumes::{OwnerKind, Strategy};
use hangar_store::{NewVolume, StoreError, VolumeRecord};

use crate::workers::CopyError;
use crate::Engine;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The worker could not be reached or refused; the row (if any) is failed.
    #[error("worker {worker}: {error}")]
    Worker { worker: String, error: CallError },
}

impl From<CopyError> for OpError {
    fn from(e: CopyError) -> OpError {
        OpError::Worker {
            worker: e.worker,
            error: e.error,
        }
    }
}

/// How a new volume gets its content.
#[derive(Debug, Clone)]
pub enum Source {
    Empty,
    CopyOnWrite { parent: String },
    Import { path: String },
}

impl Source {
    fn strategy(&self) -> Strategy {
        match self {
            Source::Empty => Strategy::Empty,
            Source::CopyOnWrite { .. } => Strategy::Cow,
            Source::Import { .. } => Strategy::Import,
        }
    }
}

impl Engine {
    /// Makes a volume on `worker`: the row (`creating`), the worker's
    /// volume, then the row's outcome (`created` or `failed`).
    pub async fn make_volume(
        &self,
        worker: &str,
        source: Source,
        owner_kind: OwnerKind,
        owner_id: Option<String>,
    ) -> Result<VolumeRecord, OpError> {
        // A worker that is not there or serves no API is refused before a
        // row is made: a request that cannot succeed changes nothing.
        match self.store().worker_api_endpoint(worker).await? {
            None => {
                return Err(StoreError::NotFound(format!("worker {worker} not found")).into());
            }
            Some((Some(_url), _token)) => {}
            Some(_) => {
                return Err(OpError::Worker {
                    worker: worker.to_string(),
                    error: CallError::refused(
                        409,
                        "conflict",
                        format!("worker {worker} serves no volume API"),
                    ),
                })
            }
        }
        let handle = uuid::Uuid::new_v4().to_string();
        let parent = match &source {
            Source::CopyOnWrite { parent } => Some(parent.clone()),
            _ => None,
        };
        self.store()
            .create_volume_row(
                &NewVolume {
                    handle: handle.clone(),
                    worker: worker.to_string(),
                    parent: parent.clone(),
                    owner_kind,
                    owner_id,
                    strategy: source.strategy(),
                },
                self.now(),
            )
            .await?;
        let req = hangar_api::worker_api::CreateVolume {
            handle: handle.clone(),
            strategy: source.strategy(),
            parent,
            import_path: match &source {
                Source::Import { path } => Some(path.clone()),
                _ => None,
            },
            properties: Default::default(),
        };
        match self.workers().create_volume(worker, &req).await {
            Ok(v) => {
                let size = v.size_bytes.and_then(|s| i64::try_from(s).ok());
                self.store()
                    .finish_volume_creation(&handle, Ok(size))
                    .await?;
            }
            Err(error) => {
                if let Err(e) = self.store().finish_volume_creation(&handle, Err(())).await {
                    tracing::warn!(%handle, error = %e, "could not mark a failed volume creation");
                }
                return Err(OpError::Worker {
                    worker: worker.to_string(),
                    error,
                });
            }
        }
        self.store()
            .get_volume(&handle)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("volume {handle} vanished")).into())
    }

    /// Copies a volume from its worker to another: a new volume on `to`,
    /// filled from `from`'s content.
    pub async fn copy_volume_between_workers(
        &self,
        from: &VolumeRecord,
        to: &str,
        owner_kind: OwnerKind,
        owner_id: Option<String>,
    ) -> Result<VolumeRecord, OpError> {
        let target = self
            .make_volume(to, Source::Empty, owner_kind, owner_id)
            .await?;
        let copied = self
            .workers()
            .copy_volume(&from.worker, &from.handle, to, &target.handle)
            .await;
        if let Err(e) = copied {
            self.release_volume(&target.handle).await;
            return Err(e.into());
        }
        Ok(target)
    }

    /// Marks a volume for destruction; the worker's next report finishes it.
    /// A volume that is already gone is fine; another error is logged (the
    /// volume then goes with its owner's collection).
    pub async fn release_volume(&self, handle: &str) {
        match self.store().destroy_volume(handle).await {
            Ok(_) | Err(StoreError::NotFound(_)) => {}
            Err(e) => tracing::warn!(%handle, error = %e, "could not release volume"),
        }
    }
}
