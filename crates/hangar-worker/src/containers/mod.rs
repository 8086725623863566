//! Containers on the worker: one process each, with volumes mounted into its
//! working directory, run by the `process` runtime (on the host) or by runc
//! (an OCI container from a rootfs volume).
//!
//! All state is on disk under `<work-dir>/containers/<handle>/` (see
//! [`store`]), and every process runs under a small shell wrapper that
//! writes its exit status there. So a worker process that restarts on the
//! same work dir lists, waits on, reads the logs of and destroys the
//! containers its predecessor started, and learns how they ended even if
//! they ended while no worker was running.
//!
//! When a container ends, the first caller to notice (the thread waiting on
//! the wrapper, or anyone reading the container) reads the cgroup's OOM
//! counter, records a [`ContainerExit`](hangar_api::containers::ContainerExit) in `result.json` exactly once, and
//! removes the cgroup (and runc's record of the container).
//!
//! Everything is blocking; async callers use `spawn_blocking`.
//!
//! The manager's own work is in files by concern: `options` (what it is
//! opened with), `open` (the work dir and what the host offers), `manager`
//! (the public API, admission against the memory budget), `create`,
//! `users` (who a container runs as, who owns its volumes), `status`
//! (reading containers, recording exits), `lifecycle` (start, release,
//! destroy) and `recover` (what a worker that died left behind). What they
//! do to the host goes through the `runtime` seam, which `host_runtime`
//! implements.

// Everything here blocks (see above): async callers use spawn_blocking.
#![allow(clippy::disallowed_methods)]

mod cgroup;
mod create;
mod exec;
mod exit;
#[cfg(test)]
mod fake_runtime;
mod host_runtime;
mod image;
pub(crate) use image::is_layout as is_image_layout;
mod image_action;
mod isolation;
mod lifecycle;
mod manager;
#[cfg(test)]
mod manager_tests;
mod network;
mod open;
mod options;
mod process;
mod recover;
mod reenter;
mod rootless;
mod runc;
mod runtime;
mod sandbox;
mod seccomp;
mod spec;
mod status;
mod store;
mod users;
mod wrapper;

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hangar_api::containers::{ContainerSpec, RunState};
use hangar_volumes::{VolumeError, VolumeManager};

pub use cgroup::DEFAULT_CGROUP_ROOT;
pub use exec::ExecPlan;
pub use image_action::ActionRuntime;
pub(crate) use image_action::{
    prepare as prepare_image_action, ActionRoot, ActionSpec, ID_PREFIX as ACTION_ID_PREFIX,
};
pub use isolation::{
    hand_image_to_sandbox, hand_to_task_user, keep_top_for_root, private_env_keys, Isolation,
    DEFAULT_TASK_IDS,
};
pub(crate) use isolation::{is_root, pid_namespace_prefix, TASK_PATH};
pub use network::NetworkMode;
pub use options::{ContainerOptions, TaskNetworkConfig, DEFAULT_TASK_BRIDGE, DEFAULT_TASK_SUBNET};
pub use recover::ContainerOpenReport;
pub use sandbox::DEFAULT_PIDS_LIMIT;
pub use spec::{CPU_SHARES_RANGE, MIN_MEMORY_LIMIT_BYTES};

// Resource actions in images put themselves on the task network as
// containers do.
use host_runtime::attach_network;

use crate::disk::DiskReserve;
use hangar_core::users::Ids;

use runtime::{ContainerRuntime, Features};
use store::Meta;

/// `running` in [`Container::state`](hangar_api::containers::Container::state).
pub const STATE_RUNNING: RunState = RunState::Running;
/// `exited` in [`Container::state`](hangar_api::containers::Container::state).
pub const STATE_EXITED: RunState = RunState::Exited;

/// Why a privileged spec is refused by a worker that does not allow them.
pub const PRIVILEGED_REFUSED: &str =
    "privileged container: this worker was not started with --allow-privileged";

/// Why a privileged spec is refused by a rootless worker, whatever
/// `--allow-privileged` says: it has no real root to give.
pub const PRIVILEGED_ROOTLESS: &str =
    "privileged container: this worker is not root (a rootless worker has no root to give)";

/// How long destroy waits for killed processes to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long recording an exit waits for the cgroup to empty.
const RELEASE_GRACE: Duration = Duration::from_millis(500);
/// How often waiting re-reads the disk (for containers this process did not
/// start; its own children wake waiters at once).
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The spec is wrong; `field` names the culprit (`mounts[1].path`).
    #[error("invalid {field}: {reason}")]
    InvalidSpec { field: String, reason: String },
    #[error("container {handle:?} not found")]
    NotFound { handle: String },
    #[error("container {handle:?} already exists")]
    AlreadyExists { handle: String },
    /// An exited container is entered by one session at a time.
    #[error("container {handle:?} has exited and is being entered by another session; an exited container takes one at a time")]
    InUse { handle: String },
    /// A volume the spec names is not on this worker.
    #[error("volume {volume:?} of {field} not found")]
    VolumeNotFound { volume: String, field: String },
    /// The worker cannot do what the spec asks (runc missing, no cgroup for
    /// a memory limit, no cpu controller for CPU shares); the reason says
    /// what is missing.
    #[error("unsupported on this worker: {reason}")]
    Unsupported { reason: String },
    /// The worker has promised its memory away: the container would take
    /// the sum of limits past what the worker may use. Another worker may
    /// have room.
    #[error("no room on this worker: {reason}")]
    NoRoom { reason: String },
    #[error("corrupt state of container {handle:?}: {reason}")]
    Corrupt { handle: String, reason: String },
    #[error("volume store: {0}")]
    Volumes(#[from] VolumeError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl ContainerError {
    /// The filesystem (or a quota) had no room for what this needed.
    pub fn is_storage_full(&self) -> bool {
        match self {
            ContainerError::Io { source, .. }
            | ContainerError::Volumes(
                VolumeError::Io { source, .. } | VolumeError::BadArchive { source, .. },
            ) => crate::disk::is_storage_full(source),
            _ => false,
        }
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ContainerError {
    let context = context.into();
    move |source| ContainerError::Io { context, source }
}

/// The worker's containers. Cheap to share behind an `Arc`; all methods
/// take `&self` and block.
pub struct ContainerManager {
    inner: Arc<Inner>,
    report: ContainerOpenReport,
    /// Serialises admission checks against the memory budget.
    admission: Mutex<()>,
    /// The memory all containers' limits may add up to (0: no budget).
    budget: std::sync::atomic::AtomicU64,
    /// The limit a container without one gets (0: none); resource
    /// actions in containers get it too.
    default_limit: Arc<std::sync::atomic::AtomicU64>,
}

fn nonzero(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

struct Inner {
    root: PathBuf,
    volumes: Arc<VolumeManager>,
    /// Everything done to the host for a container goes through here.
    runtime: Box<dyn ContainerRuntime>,
    task_base: Ids,
    /// Privileged specs are taken (`--allow-privileged`).
    allow_privileged: bool,
    pids_limit: Option<u64>,
    /// `process` containers run through runc in the sandbox.
    sandbox_process: bool,
    /// Serializes create, destroy and recording an exit.
    ops: Mutex<()>,
    /// Bumped and notified whenever a wrapper this process started ends.
    ended: (Mutex<u64>, Condvar),
    /// Room kept for the results of containers that end on a full disk.
    disk: DiskReserve,
    /// Exited containers entered again right now (see `reenter`).
    reentered: Mutex<std::collections::BTreeSet<String>>,
}

impl Inner {
    /// What the host offers containers (found once, at open).
    fn features(&self) -> &Features {
        self.runtime.features()
    }
}

/// A container as read from disk.
struct Record {
    handle: String,
    dir: PathBuf,
    spec: ContainerSpec,
    meta: Meta,
}

impl std::fmt::Debug for ContainerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerManager")
            .field("root", &self.inner.root)
            .field("runc", &self.inner.features().runc)
            .field("cgroups", &self.inner.features().cgroups)
            .finish()
    }
}

/// Writes a file only root may read (the worker's records of a task).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ContainerError> {
    use std::io::Write;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("write {}", path.display())))?;
    f.write_all(bytes)
        .map_err(io_err(format!("write {}", path.display())))
}
