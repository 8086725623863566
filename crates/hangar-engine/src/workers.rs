//! The narrow seam between the engine and the workers: every call the
//! engine makes to a worker's API, by worker name. The real implementation
//! ([`crate::HttpWorkers`]) resolves the worker's API from its registration
//! and speaks HTTP; tests use the recording fake (`fake` feature).
//!
//! Errors are [`CallError`]s, the core's view of a failed call, so that one
//! function (`hangar_core::engine::call_failure`) classifies them all.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use hangar_api::containers::{Container, ContainerSpec};
use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_api::worker_api::{CreateVolume, Volume};
pub use hangar_core::engine::CallError;

/// Where a resource action's stderr goes as the worker hands it on.
/// Bounded: a caller slow to take it slows the worker's reading.
pub type ActionStderr = tokio::sync::mpsc::Sender<String>;

/// A container's log from an offset, as it comes.
pub type LogStream = BoxStream<'static, Result<Bytes, CallError>>;

/// Every call the engine makes to workers.
pub trait Workers: Send + Sync + 'static {
    fn create_volume<'a>(
        &'a self,
        worker: &'a str,
        req: &'a CreateVolume,
    ) -> BoxFuture<'a, Result<Volume, CallError>>;

    /// Fills volume `to_handle` on `to_worker` with the content of
    /// `from_handle` on `from_worker`. The error names which side failed.
    fn copy_volume<'a>(
        &'a self,
        from_worker: &'a str,
        from_handle: &'a str,
        to_worker: &'a str,
        to_handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CopyError>>;

    /// Runs a resource action; its stderr is sent to `stderr` while it
    /// runs, its end answered.
    fn resource_action<'a>(
        &'a self,
        worker: &'a str,
        req: &'a ResourceAction,
        stderr: ActionStderr,
    ) -> BoxFuture<'a, Result<ResourceActionResult, CallError>>;

    /// The content of one regular file of volume `handle`, at `path`
    /// inside it (bounded by the worker; never outside the volume).
    fn read_file<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, CallError>>;

    fn create_container<'a>(
        &'a self,
        worker: &'a str,
        spec: &'a ContainerSpec,
    ) -> BoxFuture<'a, Result<Container, CallError>>;

    /// The container once it exited, or as it is after `timeout`.
    fn wait_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Container, CallError>>;

    /// The container's log from byte `offset`, followed until the container
    /// exited and its log is drained.
    fn container_logs<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
        offset: u64,
    ) -> BoxFuture<'a, Result<LogStream, CallError>>;

    fn destroy_container<'a>(
        &'a self,
        worker: &'a str,
        handle: &'a str,
    ) -> BoxFuture<'a, Result<(), CallError>>;
}

/// Which side of a copy between workers failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyError {
    /// The worker whose call failed (the source or the target).
    pub worker: String,
    pub error: CallError,
}
