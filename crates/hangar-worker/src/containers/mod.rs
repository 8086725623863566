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
//! counter, records a [`ContainerExit`] in `result.json` exactly once, and
//! removes the cgroup (and runc's record of the container).
//!
//! Everything is blocking; async callers use `spawn_blocking`.

// Everything here blocks (see above): async callers use spawn_blocking.
#![allow(clippy::disallowed_methods)]

mod cgroup;
mod exit;
mod image;
pub(crate) use image::is_layout as is_image_layout;
mod image_action;
mod isolation;
mod network;
mod process;
mod runc;
mod sandbox;
mod seccomp;
mod spec;
mod store;
mod wrapper;

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hangar_api::containers::{Container, ContainerExit, ContainerSpec, RunState, Runtime};
use hangar_volumes::{VolumeError, VolumeManager};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

pub use cgroup::DEFAULT_CGROUP_ROOT;
pub use image_action::ActionRuntime;
pub(crate) use image_action::{prepare as prepare_image_action, ID_PREFIX as ACTION_ID_PREFIX};
pub use isolation::{
    hand_image_to_sandbox, hand_to_task_user, private_env_keys, Isolation, DEFAULT_TASK_IDS,
};
pub(crate) use isolation::{pid_namespace_prefix, TASK_PATH};
pub use network::NetworkMode;
pub use sandbox::DEFAULT_PIDS_LIMIT;
pub use spec::{CPU_SHARES_RANGE, MIN_MEMORY_LIMIT_BYTES};

use crate::disk::{is_storage_full, DiskReserve};
use hangar_core::users::Ids;

use cgroup::{CgroupVersion, Cgroups};
use exit::{parse_exit_file, RawExit};
use store::{Meta, CREATING_PREFIX, DESTROYING_PREFIX};

/// `running` in [`Container::state`].
pub const STATE_RUNNING: RunState = RunState::Running;
/// `exited` in [`Container::state`].
pub const STATE_EXITED: RunState = RunState::Exited;

/// Why a privileged spec is refused by a worker that does not allow them.
pub const PRIVILEGED_REFUSED: &str =
    "privileged container: this worker was not started with --allow-privileged";

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

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ContainerError {
    let context = context.into();
    move |source| ContainerError::Io { context, source }
}

/// Where the manager finds its tools.
#[derive(Debug, Clone)]
pub struct ContainerOptions {
    /// The runc binary; `None` looks on `PATH` and in the usual sbin dirs.
    pub runc: Option<PathBuf>,
    /// Where cgroup filesystems are mounted.
    pub cgroup_root: PathBuf,
    /// The disk reserve kept in the containers dir (see [`crate::disk`]).
    pub disk_reserve_bytes: u64,
    /// The first uid and gid of the users that process tasks naming no
    /// `run.user` run as (a worker running as root): each running
    /// container takes the next free one, so no two share a uid.
    pub task_user: Ids,
    /// Run process tasks in a PID namespace of their own where the host
    /// allows it (on by default; off shows what a host without one gives).
    pub pid_namespace: bool,
    /// The hangar binary, whose `exec-as` drops a task to its user where
    /// util-linux `unshare` is missing (the worker passes its own).
    pub hangar_exe: Option<PathBuf>,
    /// Look for util-linux `unshare` (on by default; off shows what a host
    /// without it gives).
    pub use_unshare: bool,
    /// `--allow-privileged`: privileged specs are taken (off by default:
    /// refused before anything is made).
    pub allow_privileged: bool,
    /// The most tasks (processes and threads) one container may have;
    /// `None`: no limit.
    pub pids_limit: Option<u64>,
    /// Run `process` containers in the sandbox (through runc, over the
    /// host's system dirs read-only) where the worker can: root, with runc.
    /// Off by default for now (the worker turns it on with
    /// `HANGAR_SANDBOX_PROCESS=true`): off runs them as before, as a user of
    /// their own on the host.
    pub sandbox_process: bool,
    /// How sandboxed containers are networked.
    pub task_network: TaskNetworkConfig,
}

/// `--task-network`, `--task-network-subnet`, `--task-network-bridge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskNetworkConfig {
    /// `None` (auto) picks `bridge` where it works and otherwise runc's
    /// own loopback-only namespace, with a warning saying why; never the
    /// host's.
    pub mode: Option<NetworkMode>,
    /// The bridge's IPv4 subnet.
    pub subnet: String,
    /// The bridge's name, shared by the workers of a host.
    pub bridge: String,
}

impl Default for TaskNetworkConfig {
    fn default() -> Self {
        TaskNetworkConfig {
            mode: None,
            subnet: DEFAULT_TASK_SUBNET.into(),
            bridge: DEFAULT_TASK_BRIDGE.into(),
        }
    }
}

/// The subnet task containers get addresses from by default (in
/// 10.0.0.0/8, away from Docker's 172.17/16 and Kubernetes' usual pod
/// and service ranges).
pub const DEFAULT_TASK_SUBNET: &str = "10.223.0.0/16";
/// The host bridge task containers are on by default.
pub const DEFAULT_TASK_BRIDGE: &str = "hangar0";

impl Default for ContainerOptions {
    fn default() -> Self {
        ContainerOptions {
            runc: None,
            cgroup_root: DEFAULT_CGROUP_ROOT.into(),
            disk_reserve_bytes: crate::disk::RESERVE_BYTES,
            task_user: DEFAULT_TASK_IDS,
            pid_namespace: true,
            hangar_exe: None,
            use_unshare: true,
            allow_privileged: false,
            pids_limit: Some(sandbox::DEFAULT_PIDS_LIMIT),
            sandbox_process: true,
            task_network: TaskNetworkConfig::default(),
        }
    }
}

/// What [`ContainerManager::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOpenReport {
    /// Leftovers of interrupted creations and removals, deleted.
    pub removed: Vec<PathBuf>,
    /// Containers whose process was gone without an exit status; recorded
    /// as exited with `lost: true`.
    pub lost: Vec<String>,
    /// Entries that are not containers (bad names); left alone.
    pub unrecognized: Vec<PathBuf>,
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
    runc_state: PathBuf,
    volumes: Arc<VolumeManager>,
    runc: Option<PathBuf>,
    cgroups: Cgroups,
    cgroup_version: Result<CgroupVersion, String>,
    /// Whether CPU shares can be set in those cgroups, or why not.
    cpu_controller: Result<(), String>,
    /// How process tasks are kept from the worker (found once, at open).
    isolation: Isolation,
    task_base: Ids,
    /// Privileged specs are taken (`--allow-privileged`).
    allow_privileged: bool,
    /// Where containers' roots are mounted for runc; `None` where the worker
    /// cannot sandbox (not root).
    roots: Option<sandbox::RootMounts>,
    pids_limit: Option<u64>,
    /// `process` containers run through runc in the sandbox.
    sandbox_process: bool,
    /// The network sandboxed containers get; `None` where the worker
    /// cannot sandbox (runc's own namespace, loopback only).
    network: Option<Arc<network::TaskNetwork>>,
    /// Serializes create, destroy and recording an exit.
    ops: Mutex<()>,
    /// Bumped and notified whenever a wrapper this process started ends.
    ended: (Mutex<u64>, Condvar),
    /// Room kept for the results of containers that end on a full disk.
    disk: DiskReserve,
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
            .field("runc", &self.inner.runc)
            .field("cgroups", &self.inner.cgroup_version)
            .finish()
    }
}

impl ContainerManager {
    /// Opens (creating if needed) the containers under `root`
    /// (`<work-dir>/containers`), mounting volumes from `volumes`.
    pub fn open(root: &Path, volumes: Arc<VolumeManager>) -> Result<Self, ContainerError> {
        Self::open_with(root, volumes, ContainerOptions::default())
    }

    /// [`ContainerManager::open`] with explicit tool locations.
    ///
    /// Removes half-created containers and marks containers whose process
    /// vanished without an exit status as lost; see
    /// [`ContainerManager::open_report`].
    pub fn open_with(
        root: &Path,
        volumes: Arc<VolumeManager>,
        options: ContainerOptions,
    ) -> Result<Self, ContainerError> {
        fs::create_dir_all(root).map_err(io_err(format!("create {}", root.display())))?;
        let root = fs::canonicalize(root).map_err(io_err(format!("resolve {}", root.display())))?;
        let runc_state = root.join(store::RUNC_STATE_DIR);
        fs::create_dir_all(&runc_state)
            .map_err(io_err(format!("create {}", runc_state.display())))?;
        // Tasks pass through the work dir, its volumes and containers dirs
        // (their mounts are links into them) but list none of them; runc's
        // state is the worker's alone.
        let volumes_dir = volumes.root().join("volumes");
        for (dir, mode) in [
            (volumes.root(), 0o711),
            (volumes_dir.as_path(), 0o711),
            (root.as_path(), 0o711),
            (runc_state.as_path(), 0o700),
        ] {
            isolation::set_mode(dir, mode).map_err(io_err(format!("protect {}", dir.display())))?;
        }
        // The work dir's own files (the state identity) are root's alone.
        for entry in fs::read_dir(volumes.root())
            .map_err(io_err(format!("list {}", volumes.root().display())))?
            .flatten()
        {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                isolation::set_mode(&entry.path(), 0o600)
                    .map_err(io_err(format!("protect {}", entry.path().display())))?;
            }
        }
        let isolation = isolation::detect(
            options.task_user,
            options.pid_namespace,
            options.hangar_exe.as_deref(),
            options.use_unshare,
        );
        let cgroups = Cgroups::new(&options.cgroup_root);
        let cgroup_version = cgroups.detect();
        let cpu_controller = match &cgroup_version {
            Ok(version) => cgroups.detect_cpu(*version),
            Err(why) => Err(why.clone()),
        };
        let runc = options.runc.or_else(runc::find_runc);
        let disk = DiskReserve::open(&root, options.disk_reserve_bytes);
        let roots = if isolation::is_root() {
            match sandbox::RootMounts::for_worker(&root) {
                Ok(roots) => Some(roots),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make the containers' root mount points: containers run without a sandbox");
                    None
                }
            }
        } else {
            None
        };
        // runc needs a cgroup to put the container in.
        let sandbox_process =
            options.sandbox_process && roots.is_some() && runc.is_some() && cgroup_version.is_ok();
        if !sandbox_process && isolation::is_root() {
            tracing::warn!(runc = ?runc, cgroups = ?cgroup_version, "process tasks run outside the sandbox (no runc, no cgroups, or turned off): as a user of their own on the host, with the host's network");
        }
        let network = match (&roots, &runc) {
            (Some(_), Some(_)) => open_network(&root, &options.task_network)?.map(Arc::new),
            _ => match options.task_network.mode {
                Some(mode @ (NetworkMode::Bridge | NetworkMode::None)) => {
                    return Err(ContainerError::Unsupported {
                        reason: format!(
                            "--task-network {mode}: this worker cannot sandbox containers \
                             (it needs root and runc); leave the flag out"
                        ),
                    })
                }
                _ => None,
            },
        };
        let inner = Arc::new(Inner {
            root,
            runc_state,
            volumes,
            runc,
            cgroups,
            cgroup_version,
            cpu_controller,
            isolation,
            task_base: options.task_user,
            allow_privileged: options.allow_privileged,
            roots,
            pids_limit: options.pids_limit,
            sandbox_process,
            network,
            ops: Mutex::new(()),
            ended: (Mutex::new(0), Condvar::new()),
            disk,
        });
        let report = inner.recover()?;
        tracing::info!(
            root = %inner.root.display(),
            runc = ?inner.runc,
            cgroups = ?inner.cgroup_version,
            cpu_shares = ?inner.cpu_controller,
            isolation = ?inner.isolation,
            network = ?inner.network.as_ref().map(|n| n.mode()),
            removed = report.removed.len(),
            lost = report.lost.len(),
            "container manager opened"
        );
        Ok(ContainerManager {
            inner,
            report,
            admission: Mutex::new(()),
            budget: Default::default(),
            default_limit: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The work dir's disk reserve: whether the disk counts as full.
    pub fn disk(&self) -> &DiskReserve {
        &self.inner.disk
    }

    /// runc and its state dir for resource actions in containers of a
    /// custom type's image; `None` without runc.
    pub fn action_runtime(&self) -> Option<ActionRuntime> {
        self.inner.runc.clone().map(|runc| ActionRuntime {
            runc,
            state: self.inner.runc_state.clone(),
            cgroups: self
                .inner
                .cgroup_version
                .clone()
                .ok()
                .map(|version| (self.inner.cgroups.clone(), version)),
            memory_limit: self.default_limit.clone(),
            roots: self.inner.roots.clone(),
            sandbox: self.inner.sandbox(),
            network: self.inner.network.clone(),
        })
    }

    /// How sandboxed containers are networked here; `None` where the
    /// worker cannot sandbox.
    pub fn task_network(&self) -> Option<NetworkMode> {
        self.inner.network.as_ref().map(|n| n.mode())
    }

    /// Whether `process` containers run in the sandbox here.
    pub fn sandboxes_processes(&self) -> bool {
        self.inner.sandbox_process
    }

    /// How process tasks are kept from the worker here.
    pub fn isolation(&self) -> &Isolation {
        &self.inner.isolation
    }

    /// What the last open cleaned up.
    pub fn open_report(&self) -> &ContainerOpenReport {
        &self.report
    }

    /// Validates the spec, records it and starts the process. Returns once
    /// the process is started (`running`).
    pub fn create(&self, spec: ContainerSpec) -> Result<Container, ContainerError> {
        self.inner.create(spec)
    }

    /// Sets the memory budget and the default container limit that
    /// [`ContainerManager::create_within`] applies.
    pub fn set_memory_policy(&self, budget: Option<u64>, default_limit: Option<u64>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.budget.store(budget.unwrap_or(0), Relaxed);
        self.default_limit
            .store(default_limit.unwrap_or(0), Relaxed);
    }

    /// Creates a container within a memory budget: a container without a
    /// limit gets `default_limit` when the worker can enforce limits, and
    /// none is accepted whose limit would take the running containers'
    /// limits past `budget`. The check and the start are serialised, so two
    /// concurrent creations cannot both take the last room.
    pub fn create_within(&self, mut spec: ContainerSpec) -> Result<Container, ContainerError> {
        let budget = nonzero(self.budget.load(std::sync::atomic::Ordering::Relaxed));
        let default_limit = nonzero(
            self.default_limit
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let _admission = self.admission.lock().unwrap_or_else(|p| p.into_inner());
        if spec.memory_limit_bytes.is_none() && self.memory_limits_enforceable().is_ok() {
            // A task that sets no limit gets the default, but never more than
            // the worker has left: the default is a ceiling, not a demand.
            let left = budget.map(|b| b.saturating_sub(self.reserved_memory().unwrap_or(0)));
            spec.memory_limit_bytes = match (default_limit, left) {
                (Some(d), Some(l)) if l > 0 => Some(d.min(l)),
                (d, _) => d,
            };
        }
        if let (Some(budget), Some(limit)) = (budget, spec.memory_limit_bytes) {
            let reserved = self.reserved_memory()?;
            if reserved.saturating_add(limit) > budget {
                let human = hangar_core::build::human_bytes;
                return Err(ContainerError::NoRoom {
                    reason: format!(
                        "a {} limit on top of {} promised exceeds the worker's {}",
                        human(limit),
                        human(reserved),
                        human(budget)
                    ),
                });
            }
        }
        self.inner.create(spec)
    }

    /// The container, after noticing an exit that happened since last look.
    pub fn get(&self, handle: &str) -> Result<Option<Container>, ContainerError> {
        match self.inner.load(handle)? {
            Some(rec) => match self.inner.status(&rec) {
                Ok(c) => Ok(Some(c)),
                // Destroyed while we looked.
                Err(ContainerError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            },
            None => Ok(None),
        }
    }

    /// Every container, oldest first.
    pub fn list(&self) -> Result<Vec<Container>, ContainerError> {
        let mut all = Vec::new();
        for handle in self.inner.handles()? {
            match self.get(&handle) {
                Ok(Some(c)) => all.push(c),
                Ok(None) => {}
                Err(e) => tracing::warn!(%handle, error = %e, "cannot read container"),
            }
        }
        all.sort_by(|a, b| (a.started_at, &a.handle).cmp(&(b.started_at, &b.handle)));
        Ok(all)
    }

    /// How many containers are running.
    pub fn active_count(&self) -> Result<usize, ContainerError> {
        Ok(self
            .list()?
            .iter()
            .filter(|c| c.state == STATE_RUNNING)
            .count())
    }

    /// The memory limits of the running containers, summed: what the worker
    /// has promised away.
    pub fn reserved_memory(&self) -> Result<u64, ContainerError> {
        let mut total = 0u64;
        for c in self.list()?.iter().filter(|c| c.state == STATE_RUNNING) {
            if let Some(rec) = self.inner.load(&c.handle)? {
                total = total.saturating_add(rec.spec.memory_limit_bytes.unwrap_or(0));
            }
        }
        Ok(total)
    }

    /// Whether this worker can put a memory limit on a process container
    /// (a writable memory cgroup); why not, when it cannot.
    pub fn memory_limits_enforceable(&self) -> Result<(), String> {
        self.inner
            .cgroup_version
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }

    /// Whether this worker can give a container CPU shares (a writable
    /// cgroup with the cpu controller); why not, when it cannot.
    pub fn cpu_limits_enforceable(&self) -> Result<(), String> {
        self.inner.cpu_controller.clone()
    }

    /// Waits until the container has exited or `timeout` passes; returns it
    /// either way (check `state`).
    pub fn wait(&self, handle: &str, timeout: Duration) -> Result<Container, ContainerError> {
        let deadline = Instant::now() + timeout;
        let (lock, ended) = &self.inner.ended;
        loop {
            let seen = *lock.lock().unwrap_or_else(|p| p.into_inner());
            let c = self.get(handle)?.ok_or_else(|| ContainerError::NotFound {
                handle: handle.to_string(),
            })?;
            let now = Instant::now();
            if c.state == STATE_EXITED || now >= deadline {
                return Ok(c);
            }
            let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            if *guard == seen {
                // A poisoned lock or a timeout both mean: look again.
                let _ = ended.wait_timeout(guard, POLL.min(deadline - now));
            }
        }
    }

    /// The log file (stdout and stderr) of the container.
    pub fn log_path(&self, handle: &str) -> Result<PathBuf, ContainerError> {
        match self.inner.load(handle)? {
            Some(rec) => Ok(rec.dir.join(store::LOG_FILE)),
            None => Err(ContainerError::NotFound {
                handle: handle.to_string(),
            }),
        }
    }

    /// Kills the container's processes and removes it with its cgroup. A
    /// container that is not there counts as destroyed.
    pub fn destroy(&self, handle: &str) -> Result<(), ContainerError> {
        self.inner.destroy(handle)
    }

    /// The handle of every container this worker has, running or exited:
    /// what it reports to web.
    pub fn handles(&self) -> Result<Vec<String>, ContainerError> {
        let mut out = Vec::new();
        for handle in self.inner.handles()? {
            if hangar_volumes::validate_handle(&handle).is_ok()
                && self.inner.dir(&handle).join(store::SPEC_FILE).exists()
            {
                out.push(handle);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every volume a container this worker still has mounts (its rootfs
    /// included), running or exited: the sweeper never destroys them.
    pub fn mounted_volumes(&self) -> Result<std::collections::BTreeSet<String>, ContainerError> {
        let mut out = std::collections::BTreeSet::new();
        for handle in self.inner.handles()? {
            match self.inner.load(&handle) {
                Ok(Some(rec)) => {
                    out.extend(rec.spec.mounts.iter().map(|m| m.volume.clone()));
                    out.extend(rec.spec.rootfs_volume.clone());
                }
                Ok(None) => {}
                Err(e) => {
                    // Its mounts cannot be told: keep every volume.
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Removes leftovers of interrupted creations and removals (staging
    /// and trash dirs, a container dir without its spec) while the worker
    /// runs. Safe at any moment: creation and removal hold the lock taken
    /// here, so what is found under it is nobody's work in progress.
    pub fn sweep_leftovers(&self) -> Result<Vec<PathBuf>, ContainerError> {
        let inner = &self.inner;
        let _ops = inner.lock();
        let mut removed = Vec::new();
        let entries =
            fs::read_dir(&inner.root).map_err(io_err(format!("list {}", inner.root.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let leftover = name.starts_with(CREATING_PREFIX)
                || name.starts_with(DESTROYING_PREFIX)
                || (!name.starts_with('.')
                    && hangar_volumes::validate_handle(&name).is_ok()
                    && path.is_dir()
                    && !path.join(store::SPEC_FILE).exists());
            if !leftover {
                continue;
            }
            let meta: Option<Meta> = store::read_json(&path.join(store::META_FILE)).unwrap_or(None);
            if let Some(cg) = meta.as_ref().and_then(|m| m.cgroup.as_ref()) {
                inner.cgroups.kill_all(cg, KILL_WAIT);
                if let Err(e) = inner.cgroups.remove(cg, Duration::from_secs(2)) {
                    tracing::warn!(error = %e, "cannot remove a container leftover's cgroup");
                }
            }
            fs::remove_dir_all(&path).map_err(io_err(format!("remove {}", path.display())))?;
            tracing::info!(path = %path.display(), "removed a container leftover");
            removed.push(path);
        }
        Ok(removed)
    }
}

impl Inner {
    /// The sandbox of an unprivileged container on this worker: its ids
    /// start at the task base (`--task-user`).
    fn sandbox(&self) -> sandbox::Sandbox {
        sandbox::Sandbox {
            ids: Some(self.task_base),
            network: sandbox::NetworkNs::New,
            resolv_conf: None,
            pids_limit: self.pids_limit,
        }
    }

    /// Gives container `handle` its network: a namespace of the worker's
    /// task network (and the nameservers it reaches), or runc's own
    /// loopback-only one where the worker has none. Undone by
    /// [`Self::release_network`].
    fn attach_network(
        &self,
        handle: &str,
        sandbox: &mut sandbox::Sandbox,
    ) -> Result<(), ContainerError> {
        if let Some(net) = &self.network {
            attach_network(net, handle, sandbox)
                .map_err(|reason| ContainerError::Unsupported { reason })?;
        }
        Ok(())
    }

    fn release_network(&self, handle: &str) {
        if let Some(net) = &self.network {
            net.detach(handle);
        }
    }

    fn dir(&self, handle: &str) -> PathBuf {
        self.root.join(handle)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify_ended(&self) {
        let (lock, ended) = &self.ended;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        ended.notify_all();
    }

    fn handles(&self) -> Result<Vec<String>, ContainerError> {
        let entries =
            fs::read_dir(&self.root).map_err(io_err(format!("list {}", self.root.display())))?;
        Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect())
    }

    /// The container's record; `None` when there is none (or the handle
    /// could not name one).
    fn load(&self, handle: &str) -> Result<Option<Record>, ContainerError> {
        if hangar_volumes::validate_handle(handle).is_err() {
            return Ok(None);
        }
        let dir = self.dir(handle);
        let corrupt = |reason: String| ContainerError::Corrupt {
            handle: handle.to_string(),
            reason,
        };
        let spec: ContainerSpec = match store::read_json(&dir.join(store::SPEC_FILE)) {
            Ok(Some(spec)) => spec,
            Ok(None) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(corrupt(format!("spec.json: {e}")))
            }
            // The directory itself is gone (destroyed meanwhile).
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Ok(None),
            Err(e) => return Err(io_err(format!("read {}", dir.display()))(e)),
        };
        let meta: Meta = store::read_json(&dir.join(store::META_FILE))
            .map_err(|e| corrupt(format!("meta.json: {e}")))?
            .ok_or_else(|| corrupt("meta.json is missing".into()))?;
        Ok(Some(Record {
            handle: handle.to_string(),
            dir,
            spec,
            meta,
        }))
    }

    fn container(&self, rec: &Record, exit: Option<ContainerExit>) -> Container {
        let log_bytes = fs::metadata(rec.dir.join(store::LOG_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        Container {
            handle: rec.handle.clone(),
            runtime: rec.spec.runtime,
            state: if exit.is_some() {
                STATE_EXITED
            } else {
                STATE_RUNNING
            },
            started_at: rec.meta.started_at,
            exit,
            log_bytes,
        }
    }

    fn read_result(&self, rec: &Record) -> Result<Option<ContainerExit>, ContainerError> {
        store::read_json(&rec.dir.join(store::RESULT_FILE)).map_err(|e| ContainerError::Corrupt {
            handle: rec.handle.clone(),
            reason: format!("result.json: {e}"),
        })
    }

    /// The wrapper's status, once it has written one. A garbled file is
    /// reported and treated as no status (the container counts as lost).
    fn read_exit(&self, rec: &Record) -> Option<RawExit> {
        let path = rec.dir.join(store::EXIT_FILE);
        match store::read_optional(&path) {
            Ok(Some(text)) => match parse_exit_file(&text) {
                Ok(raw) => raw,
                Err(e) => {
                    tracing::warn!(handle = %rec.handle, error = %e, "unreadable exit file");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(handle = %rec.handle, error = %e, "cannot read exit file");
                None
            }
        }
    }

    fn wrapper_pid(&self, dir: &Path) -> Option<u32> {
        store::read_optional(&dir.join(store::PID_FILE))
            .ok()
            .flatten()
            .and_then(|t| t.trim().parse().ok())
    }

    fn wrapper_alive(&self, rec: &Record) -> bool {
        self.wrapper_pid(&rec.dir)
            .is_some_and(|pid| wrapper::is_wrapper_of(pid, &rec.dir))
    }

    /// Running, or exited (recording the exit if nobody has yet).
    fn status(&self, rec: &Record) -> Result<Container, ContainerError> {
        if let Some(exit) = self.read_result(rec)? {
            return Ok(self.container(rec, Some(exit)));
        }
        let raw = self.read_exit(rec);
        if raw.is_none() && self.wrapper_alive(rec) {
            return Ok(self.container(rec, None));
        }
        // Ended, or seems lost: decide under the lock, where a creation in
        // progress (no pid file yet) has finished.
        let _ops = self.lock();
        if !rec.dir.exists() {
            return Err(ContainerError::NotFound {
                handle: rec.handle.clone(),
            });
        }
        if let Some(exit) = self.read_result(rec)? {
            return Ok(self.container(rec, Some(exit)));
        }
        let raw = self.read_exit(rec);
        if raw.is_none() && self.wrapper_alive(rec) {
            return Ok(self.container(rec, None));
        }
        let exit = self.record_exit(rec, raw)?;
        Ok(self.container(rec, Some(exit)))
    }

    /// Writes `result.json` (the OOM counter read first), then cleans up
    /// the cgroup and runc's record. Called with the ops lock held.
    fn record_exit(
        &self,
        rec: &Record,
        raw: Option<RawExit>,
    ) -> Result<ContainerExit, ContainerError> {
        let oom_kills = rec
            .meta
            .cgroup
            .as_ref()
            .and_then(|cg| self.cgroups.oom_kills(cg))
            .unwrap_or(0);
        let finished_at = fs::metadata(rec.dir.join(store::EXIT_FILE))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .filter(|_| raw.is_some())
            .map(|d| d.as_millis() as i64)
            .unwrap_or_else(store::now_millis);
        let mut exit = ContainerExit {
            code: raw.and_then(RawExit::code),
            signal: raw.and_then(RawExit::signal),
            oom_killed: oom_kills > 0,
            memory_limit_bytes: rec.spec.memory_limit_bytes,
            finished_at,
            lost: raw.is_none(),
            // Read before anything is freed: the disk as the program left it.
            disk_full: self.disk.is_full(),
        };
        let path = rec.dir.join(store::RESULT_FILE);
        let mut written =
            store::write_exclusive(&path, &serde_json::to_vec_pretty(&exit).expect("json"));
        if matches!(&written, Err(e) if is_storage_full(e)) {
            exit.disk_full = true;
            self.disk
                .release(&format!("the result of container {}", rec.handle));
            written =
                store::write_exclusive(&path, &serde_json::to_vec_pretty(&exit).expect("json"));
        }
        let written = match written {
            Ok(w) => w,
            // Even the reserve was taken (the container's leftovers write
            // on): the exit is answered unrecorded, the same on every look,
            // so the step still ends. It is recorded once there is room.
            Err(e) if is_storage_full(&e) => {
                tracing::debug!(handle = %rec.handle, error = %e, "result not recorded: disk full");
                self.release(rec, exit.lost);
                return Ok(exit);
            }
            Err(e) => return Err(io_err(format!("write {}", path.display()))(e)),
        };
        let exit = if written {
            if exit.lost && exit.disk_full {
                tracing::warn!(handle = %rec.handle, "container ended on a full disk without an exit status");
            } else if exit.lost {
                tracing::warn!(handle = %rec.handle, "container process vanished without an exit status; marked lost");
            } else {
                tracing::info!(handle = %rec.handle, code = ?exit.code, signal = ?exit.signal, oom_killed = exit.oom_killed, disk_full = exit.disk_full, "container exited");
            }
            exit
        } else {
            // Another worker process on this dir recorded it first.
            self.read_result(rec)?.unwrap_or(exit)
        };
        self.release(rec, exit.lost);
        Ok(exit)
    }

    /// Frees what an ended container holds outside its dir: runc's record
    /// and the cgroup. Processes the program left behind keep the cgroup
    /// until destroy, except for a lost container, whose leftovers are
    /// killed (nobody can wait on them any more).
    fn release(&self, rec: &Record, kill_leftovers: bool) {
        self.reclaim_mounts(rec);
        if rec.meta.runc {
            if let Some(runc) = &self.runc {
                if let Err(e) = runc::delete(runc, &self.runc_state, &rec.handle) {
                    tracing::warn!(handle = %rec.handle, error = %e, "runc delete failed");
                }
            }
            self.release_network(&rec.handle);
        }
        if let Some(cg) = &rec.meta.cgroup {
            if kill_leftovers {
                self.cgroups.kill_all(cg, KILL_WAIT);
            }
            // A moment's grace for children still exiting after the main
            // process (a pipeline's writer after its reader was killed).
            if let Err(e) = self.cgroups.remove(cg, RELEASE_GRACE) {
                tracing::debug!(handle = %rec.handle, error = %e, "cgroup still busy; destroy removes it");
            }
        }
    }

    fn create(self: &Arc<Self>, spec: ContainerSpec) -> Result<Container, ContainerError> {
        // First of all: a privileged container runs as real root, which
        // only `--allow-privileged` allows; refused, nothing is made.
        if spec.privileged && !self.allow_privileged {
            return Err(ContainerError::Unsupported {
                reason: PRIVILEGED_REFUSED.into(),
            });
        }
        // runc runs every container in the sandbox: an image's, and a
        // process container's over the host's system dirs.
        let is_runc = spec.runtime == Runtime::Runc
            || (spec.runtime == Runtime::Process && self.sandbox_process);
        let checked = spec::validate_spec_with(&spec, !is_runc)?;
        let runc_bin = if is_runc {
            Some(self.runc.clone().ok_or_else(|| ContainerError::Unsupported {
                reason: "runtime runc: no runc binary on PATH or in /usr/sbin (install the runc package)".into(),
            })?)
        } else {
            None
        };
        let handle = spec.handle.clone();
        let _ops = self.lock();
        let dir = self.dir(&handle);
        if fs::symlink_metadata(&dir).is_ok() {
            return Err(ContainerError::AlreadyExists { handle });
        }
        let volume_dir = |volume: &str, field: String| -> Result<PathBuf, ContainerError> {
            match self.volumes.get(volume)? {
                Some(v) => Ok(v.path),
                None => Err(ContainerError::VolumeNotFound {
                    volume: volume.to_string(),
                    field,
                }),
            }
        };
        // A rootfs volume in Concourse's image layout gives its `rootfs/`
        // and the image's config; any other is the root itself.
        let (rootfs, image_config) = match &spec.rootfs_volume {
            Some(v) if spec.runtime == Runtime::Runc => {
                let (root, config) = image::open(&volume_dir(v, "rootfs_volume".into())?)?;
                (Some(root), config)
            }
            Some(v) => (
                Some(volume_dir(v, "rootfs_volume".into())?),
                image::ImageConfig::default(),
            ),
            None => (None, image::ImageConfig::default()),
        };
        let sources = checked
            .mounts
            .iter()
            .enumerate()
            .map(|(i, m)| volume_dir(&m.volume, format!("mounts[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sandbox = self.sandbox();
        if spec.privileged {
            // Allowed above: real root with every capability (root on
            // this worker), no user namespace, no seccomp filter.
            sandbox.ids = None;
        }
        if is_runc {
            self.attach_network(&handle, &mut sandbox)?;
        }
        // The user inside the container, and the host ids its mounts go to.
        let (container_user, user) = if is_runc {
            let inside =
                self.container_user(&spec, rootfs.as_deref(), image_config.user.as_deref())?;
            let host = match sandbox.ids {
                Some(base) if isolation::is_root() => {
                    let inside = inside.unwrap_or(Ids { uid: 0, gid: 0 });
                    Some(Ids {
                        uid: sandbox::shifted(inside.uid, base.uid),
                        gid: sandbox::shifted(inside.gid, base.gid),
                    })
                }
                _ => None,
            };
            (inside, host)
        } else {
            let user = self.task_user(&spec)?;
            (user, user)
        };

        // The cgroup: required for a memory limit, for CPU shares and for
        // runc; otherwise made when possible (it lets destroy find every
        // process).
        let required = spec.memory_limit_bytes.is_some() || spec.cpu_shares.is_some() || is_runc;
        let unsupported = |why: &str| ContainerError::Unsupported {
            reason: if is_runc {
                format!("runtime runc needs a memory cgroup: {why}")
            } else if spec.memory_limit_bytes.is_some() {
                format!("memory_limit_bytes cannot be enforced on this worker: {why}")
            } else {
                cpu_unsupported(spec.cpu_shares, why)
            },
        };
        if let (Some(_), Ok(_), Err(why)) =
            (spec.cpu_shares, &self.cgroup_version, &self.cpu_controller)
        {
            return Err(ContainerError::Unsupported {
                reason: cpu_unsupported(spec.cpu_shares, why),
            });
        }
        let mut cgroup = match &self.cgroup_version {
            Ok(version) => Some(Cgroups::reference(
                *version,
                &format!("{handle}-{}", store::random_suffix()),
            )),
            Err(why) if required => return Err(unsupported(why)),
            Err(_) => None,
        };

        let staging = self.root.join(format!(
            "{CREATING_PREFIX}{handle}-{}",
            store::random_suffix()
        ));
        let made = (|| -> Result<(), ContainerError> {
            fs::create_dir(&staging).map_err(io_err(format!("create {}", staging.display())))?;
            isolation::set_mode(&staging, 0o711)
                .map_err(io_err(format!("protect {}", staging.display())))?;
            let mut meta = Meta {
                started_at: store::now_millis(),
                cgroup: cgroup.clone(),
                runc: is_runc,
                user,
            };
            // The cgroup is named on disk before it exists, so open can
            // remove it if the worker dies right here.
            self.write_meta(&staging, &meta)?;
            if let Some(cg) = &cgroup {
                if let Err(why) = self
                    .cgroups
                    .create(cg, spec.memory_limit_bytes, spec.cpu_shares)
                {
                    if required {
                        return Err(unsupported(&why));
                    }
                    tracing::debug!(%handle, error = %why, "running without a cgroup");
                    cgroup = None;
                    meta.cgroup = None;
                    self.write_meta(&staging, &meta)?;
                }
            }
            match &cgroup {
                Some(cg) if is_runc => {
                    let bundle = staging.join(store::BUNDLE_DIR);
                    fs::create_dir(&bundle)
                        .map_err(io_err(format!("create {}", bundle.display())))?;
                    let binds: Vec<runc::BindMount> = checked
                        .mounts
                        .iter()
                        .zip(&sources)
                        .map(|(m, source)| runc::BindMount {
                            path: m.path.clone(),
                            source: source.clone(),
                            read_only: m.read_only,
                        })
                        .collect();
                    let cgroups_path = format!("/{}/{}", cg.path, cgroup::RUNC_CHILD);
                    let (root, host_dirs, env) = self.prepare_root(
                        &handle,
                        &spec,
                        rootfs.as_deref(),
                        &image_config,
                        &sandbox,
                    )?;
                    let config = runc::config_json(
                        &spec,
                        &checked,
                        &root,
                        &host_dirs,
                        &binds,
                        &cgroups_path,
                        container_user,
                        &env,
                        &sandbox,
                    );
                    let path = bundle.join("config.json");
                    write_private(&path, &serde_json::to_vec_pretty(&config).expect("json"))?;
                }
                _ => {
                    let work = staging.join(store::WORK_DIR);
                    let cwd = process::prepare_work_dir(&work, &checked, &sources)
                        .map_err(io_err(format!("prepare {}", work.display())))?;
                    fs::create_dir_all(&cwd)
                        .map_err(io_err(format!("create {}", cwd.display())))?;
                    if let Some(ids) = user {
                        isolation::chown_tree(&work, ids)
                            .and_then(|_| isolation::own_dir(&work, ids, 0o700))
                            .map_err(io_err(format!("give {} to the task user", work.display())))?;
                    }
                }
            }
            match (user, is_runc) {
                (Some(ids), true) => self.give_mounts_in_range(&handle, &sources, ids)?,
                (Some(ids), false) if ids.uid != 0 => self.give_mounts(&handle, &sources, ids)?,
                _ => {}
            }
            // The spec holds the task's params: for the worker's eyes only.
            write_private(
                &staging.join(store::SPEC_FILE),
                &serde_json::to_vec_pretty(&spec).expect("json"),
            )?;
            fs::rename(&staging, &dir).map_err(io_err(format!("rename into {}", dir.display())))
        })();
        if let Err(e) = made {
            if let Some(roots) = &self.roots {
                roots.release(&handle);
            }
            self.release_network(&handle);
            if let Some(cg) = &cgroup {
                if let Err(e) = self.cgroups.remove(cg, Duration::ZERO) {
                    tracing::warn!(error = %e, "cannot remove the cgroup of a container that was not made");
                }
            }
            // What is left is a leftover the next open removes.
            if let Err(e) = fs::remove_dir_all(&staging) {
                tracing::warn!(path = %staging.display(), error = %e, "cannot remove a container's staging dir");
            }
            return Err(e);
        }
        let rec = self.load(&handle)?.ok_or_else(|| ContainerError::Corrupt {
            handle: handle.clone(),
            reason: "vanished right after creation".into(),
        })?;
        match self.start(&rec, &checked, runc_bin.as_deref()) {
            Ok(()) => Ok(self.container(&rec, None)),
            Err(e) => {
                self.remove(&rec.handle, &rec.dir, Some(&rec.meta));
                if let Err(e) = fs::remove_dir_all(&rec.dir) {
                    tracing::warn!(%handle, error = %e, "cannot remove the container that failed to start");
                }
                Err(e)
            }
        }
    }

    /// The root a sandboxed container gets, where runc can reach it: the
    /// image's rootfs (shifted into the sandbox's range) bind-mounted, or
    /// for the `process` runtime a root of mount points for the host's
    /// system dirs, which it returns too; and the container's environment.
    #[allow(clippy::type_complexity)]
    fn prepare_root(
        &self,
        handle: &str,
        spec: &ContainerSpec,
        rootfs: Option<&Path>,
        image_config: &image::ImageConfig,
        sandbox: &sandbox::Sandbox,
    ) -> Result<(PathBuf, Vec<PathBuf>, Vec<(String, String)>), ContainerError> {
        let unsupported = |e: io::Error| ContainerError::Unsupported {
            reason: format!("cannot prepare the container's root: {e}"),
        };
        match rootfs {
            Some(rootfs) => {
                if let (Some(base), true) = (sandbox.ids, isolation::is_root()) {
                    let started = Instant::now();
                    let changed = sandbox::shift_image_rootfs(rootfs, base).map_err(io_err(format!(
                        "give {} to the sandbox's users",
                        rootfs.display()
                    )))?;
                    if changed > 0 {
                        tracing::info!(%handle, entries_changed = changed, elapsed_ms = started.elapsed().as_millis() as u64, "gave an image's files to the sandbox's users");
                    }
                }
                let root = match &self.roots {
                    Some(roots) => roots.mount_image(handle, rootfs).map_err(unsupported)?,
                    None => rootfs.to_path_buf(),
                };
                Ok((root, vec![], image::merge_env(&image_config.env, &spec.env)))
            }
            None => {
                let roots = self
                    .roots
                    .as_ref()
                    .ok_or_else(|| ContainerError::Unsupported {
                        reason: "the process runtime's sandbox needs a worker running as root"
                            .into(),
                    })?;
                let entries = sandbox::host_entries(Path::new("/"));
                let root = roots
                    .make_host_root(handle, &entries, sandbox.ids)
                    .map_err(unsupported)?;
                let host_dirs = entries
                    .iter()
                    .filter_map(|e| match e {
                        sandbox::HostEntry::Dir(name) => Some(Path::new("/").join(name)),
                        sandbox::HostEntry::Link(..) => None,
                    })
                    .collect();
                // Built from nothing: the task's params over a minimal base,
                // never the worker's own environment.
                let base = [
                    ("PATH".to_string(), isolation::TASK_PATH.to_string()),
                    ("HOME".to_string(), runc::WORK_DIR.to_string()),
                ];
                Ok((root, host_dirs, image::merge_env(&base, &spec.env)))
            }
        }
    }

    /// The user a sandboxed container's program runs as, inside it: the
    /// task's `run.user`, else the image's user, else root; a name is looked
    /// up in the container's own `/etc/passwd` (the image's, or for the
    /// process runtime the host's, which the container sees).
    fn container_user(
        &self,
        spec: &ContainerSpec,
        rootfs: Option<&Path>,
        image_user: Option<&str>,
    ) -> Result<Option<Ids>, ContainerError> {
        use hangar_core::users::{parse_user, resolve_user};
        let bad = |reason: String| ContainerError::InvalidSpec {
            field: "user".into(),
            reason,
        };
        let named = spec
            .user
            .as_deref()
            .map(parse_user)
            .transpose()
            .map_err(bad)?;
        let image_bad = |e: String| ContainerError::InvalidSpec {
            field: "rootfs_volume".into(),
            reason: format!("image layout: metadata.json: user: {e}"),
        };
        let (named, from_image) = match (named, image_user) {
            (Some(named), _) => (named, false),
            // Root is the default; a `FROM scratch` image may name it
            // without a passwd file to look it up in.
            (None, None | Some("root")) => return Ok(None),
            (None, Some(user)) => (parse_user(user).map_err(image_bad)?, true),
        };
        let passwd = match rootfs {
            Some(r) => fs::read_to_string(r.join("etc/passwd")).ok(),
            None => isolation::host_passwd(),
        };
        let ids = resolve_user(&named, passwd.as_deref()).map_err(if from_image {
            image_bad
        } else {
            bad
        })?;
        if ids.uid >= sandbox::ID_RANGE || ids.gid >= sandbox::ID_RANGE {
            return Err(bad(format!(
                "{}:{} is past the container's {} user ids",
                ids.uid,
                ids.gid,
                sandbox::ID_RANGE
            )));
        }
        Ok(Some(ids))
    }

    /// Gives the volumes a sandboxed container mounts to its users: every
    /// entry moved into the sandbox's range (what the host's root owned,
    /// root inside owns), and the top dir to the container's user (`owner`,
    /// as host ids) alone.
    fn give_mounts_in_range(
        &self,
        handle: &str,
        sources: &[PathBuf],
        owner: Ids,
    ) -> Result<(), ContainerError> {
        let Some(base) = self.sandbox().ids else {
            return Ok(());
        };
        let started = Instant::now();
        let mut changed = 0;
        for source in sources {
            changed += sandbox::shift_tree(source, base)
                .and_then(|n| isolation::own_dir(source, owner, 0o700).map(|()| n))
                .map_err(io_err(format!(
                    "give {} to the container's users",
                    source.display()
                )))?;
        }
        if changed > 0 {
            tracing::info!(%handle, entries_changed = changed, elapsed_ms = started.elapsed().as_millis() as u64, "gave the container's volumes to its users");
        }
        Ok(())
    }

    /// The host ids a process container outside the sandbox runs as (see
    /// [`Meta::user`]); a sandboxed one's are [`Self::container_user`]'s.
    fn task_user(&self, spec: &ContainerSpec) -> Result<Option<Ids>, ContainerError> {
        use hangar_core::users::{parse_user, pick_task_ids, resolve_user};
        let bad = |reason: String| ContainerError::InvalidSpec {
            field: "user".into(),
            reason,
        };
        let named = spec
            .user
            .as_deref()
            .map(parse_user)
            .transpose()
            .map_err(bad)?;
        let resolve =
            |named| resolve_user(&named, isolation::host_passwd().as_deref()).map_err(bad);
        match (&self.isolation, named) {
            (Isolation::Unavailable(why), _) => Err(ContainerError::Unsupported {
                reason: why.clone(),
            }),
            (Isolation::AsWorker, None) => Ok(None),
            (Isolation::AsWorker, Some(named)) => {
                let ids = resolve(named)?;
                let me = fs::metadata("/proc/self")
                    .map(|m| {
                        (
                            std::os::unix::fs::MetadataExt::uid(&m),
                            std::os::unix::fs::MetadataExt::gid(&m),
                        )
                    })
                    .unwrap_or((u32::MAX, u32::MAX));
                if (ids.uid, ids.gid) == me {
                    Ok(None)
                } else {
                    Err(ContainerError::Unsupported {
                        reason: format!(
                            "user {}:{}: the worker does not run as root and can run process tasks only as its own user ({}:{})",
                            ids.uid, ids.gid, me.0, me.1
                        ),
                    })
                }
            }
            (Isolation::Drop { .. } | Isolation::ExecAs { .. }, Some(named)) => {
                let ids = resolve(named)?;
                if ids.uid == 0 {
                    return Err(bad(
                        "the process runtime does not run tasks as root (uid 0), which would reach the worker's secrets: run the task in an image (runc)".into(),
                    ));
                }
                Ok(Some(ids))
            }
            (Isolation::Drop { .. } | Isolation::ExecAs { .. }, None) => {
                let mut taken = Vec::new();
                for handle in self.handles()? {
                    let Ok(Some(rec)) = self.load(&handle) else {
                        continue;
                    };
                    taken.extend(rec.meta.user);
                    // A volume a running container mounts (a cache two
                    // builds share) stays its user's: the newcomer runs as
                    // the same user rather than take the files from under
                    // it. They share the files anyway.
                    let running = !rec.dir.join(store::RESULT_FILE).exists();
                    let shares = rec
                        .spec
                        .mounts
                        .iter()
                        .any(|m| spec.mounts.iter().any(|n| n.volume == m.volume));
                    if let (true, true, Some(ids)) = (running, shares, rec.meta.user) {
                        return Ok(Some(ids));
                    }
                }
                pick_task_ids(self.task_base, &taken)
                    .map(Some)
                    .ok_or_else(|| ContainerError::NoRoom {
                        reason: format!(
                            "all {} task users from uid {} are taken by containers of this worker",
                            hangar_core::users::TASK_UID_SLOTS,
                            self.task_base.uid
                        ),
                    })
            }
        }
    }

    /// Gives the volumes a container mounts to its user: every entry (so
    /// the task may change its inputs, as it could as root), and the top
    /// dir only it may enter, so other tasks cannot read them.
    fn give_mounts(
        &self,
        handle: &str,
        sources: &[PathBuf],
        ids: Ids,
    ) -> Result<(), ContainerError> {
        let started = Instant::now();
        let mut changed = 0;
        for source in sources {
            changed += isolation::chown_tree(source, ids)
                .and_then(|n| isolation::own_dir(source, ids, 0o700).map(|()| n))
                .map_err(io_err(format!(
                    "give {} to the task user",
                    source.display()
                )))?;
        }
        // Worth an operator's eye only when it had work to do (a copy-up of
        // every file on overlay): the health self-check runs one every few
        // seconds with nothing to change.
        let elapsed_ms = started.elapsed().as_millis() as u64;
        if changed > 0 {
            tracing::info!(%handle, uid = ids.uid, entries_changed = changed, elapsed_ms, "gave the container's volumes to its user");
        } else {
            tracing::debug!(%handle, uid = ids.uid, elapsed_ms, "the container's volumes were its user's already");
        }
        Ok(())
    }

    /// Takes back the top dir of each volume an ended container mounted
    /// (root's, mode 0700), unless another container still mounts it: the
    /// container's uid goes to the next container, which must not find
    /// this one's files.
    fn reclaim_mounts(&self, rec: &Record) {
        if rec.meta.user.is_none_or(|ids| ids.uid == 0) {
            return;
        }
        let mut others = std::collections::BTreeSet::new();
        for handle in self.handles().unwrap_or_default() {
            if handle == rec.handle {
                continue;
            }
            if let Ok(Some(other)) = self.load(&handle) {
                if other.dir.join(store::RESULT_FILE).exists() {
                    continue;
                }
                others.extend(other.spec.mounts.iter().map(|m| m.volume.clone()));
            }
        }
        for m in rec
            .spec
            .mounts
            .iter()
            .filter(|m| !others.contains(&m.volume))
        {
            if let Ok(Some(v)) = self.volumes.get(&m.volume) {
                if let Err(e) = isolation::own_dir(&v.path, Ids { uid: 0, gid: 0 }, 0o700) {
                    tracing::warn!(handle = %rec.handle, volume = %m.volume, error = %e, "cannot take back a volume from the task user");
                }
            }
        }
    }

    fn write_meta(&self, dir: &Path, meta: &Meta) -> Result<(), ContainerError> {
        let path = dir.join(store::META_FILE);
        store::write_atomic(&path, &serde_json::to_vec_pretty(meta).expect("json"))
            .map_err(io_err(format!("write {}", path.display())))
    }

    /// Starts the wrapper, records its pid and hands it to a thread that
    /// waits for it. Called with the ops lock held.
    fn start(
        self: &Arc<Self>,
        rec: &Record,
        checked: &spec::CheckedSpec,
        runc_bin: Option<&Path>,
    ) -> Result<(), ContainerError> {
        let log_path = rec.dir.join(store::LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(io_err(format!("open {}", log_path.display())))?;
        let cwd = rec.dir.join(store::WORK_DIR).join(&checked.dir);
        let procs = rec
            .meta
            .cgroup
            .as_ref()
            .map(|cg| self.cgroups.procs_files(cg, rec.spec.cpu_shares.is_some()))
            .unwrap_or_default();
        let launch = match runc_bin {
            // runc puts the container into runc's child of the cgroup.
            Some(runc_bin) => wrapper::Launch {
                dir: &rec.dir,
                cwd: &rec.dir,
                cgroup_procs: &[],
                argv: runc::run_command(
                    runc_bin,
                    &self.runc_state,
                    &rec.dir.join(store::BUNDLE_DIR),
                    &rec.handle,
                ),
                env: vec![("PATH".into(), isolation::TASK_PATH.into())],
                log,
            },
            None => {
                let mut argv = isolation::drop_prefix(&self.isolation, rec.meta.user);
                argv.push(rec.spec.path.clone().into());
                argv.extend(rec.spec.args.iter().map(Into::into));
                // Built from nothing: the task's params over a minimal base,
                // never the worker's own environment.
                let home = rec.dir.join(store::WORK_DIR).display().to_string();
                let env = [
                    ("PATH".to_string(), isolation::TASK_PATH.to_string()),
                    ("HOME".to_string(), home),
                ]
                .into_iter()
                .filter(|(k, _)| !rec.spec.env.contains_key(k))
                .chain(rec.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())))
                .collect();
                wrapper::Launch {
                    dir: &rec.dir,
                    cwd: &cwd,
                    cgroup_procs: &procs,
                    argv,
                    env,
                    log,
                }
            }
        };
        let mut child = wrapper::spawn(launch).map_err(io_err("start the container's wrapper"))?;
        let pid = child.id();
        let pid_path = rec.dir.join(store::PID_FILE);
        if let Err(e) = store::write_atomic(&pid_path, format!("{pid}\n").as_bytes()) {
            // Untracked, it must not run on.
            if let Err(k) = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL) {
                tracing::error!(pid, error = %k, "cannot kill a container whose pid could not be recorded");
            }
            if let Err(w) = child.wait() {
                tracing::warn!(pid, error = %w, "cannot reap a container whose pid could not be recorded");
            }
            return Err(io_err(format!("write {}", pid_path.display()))(e));
        }
        tracing::info!(handle = %rec.handle, runtime = %rec.spec.runtime, pid, "container started");
        let inner = Arc::clone(self);
        let handle = rec.handle.clone();
        let waiter = std::thread::Builder::new()
            .name("container-wait".into())
            .spawn(move || {
                if let Err(e) = child.wait() {
                    tracing::warn!(%handle, error = %e, "cannot wait for the container's wrapper");
                }
                match inner.load(&handle).and_then(|rec| match rec {
                    Some(rec) => inner.status(&rec).map(|_| ()),
                    None => Ok(()),
                }) {
                    // Destroyed, which is how it ended.
                    Ok(()) | Err(ContainerError::NotFound { .. }) => {}
                    Err(e) => {
                        tracing::warn!(%handle, error = %e, "cannot record the container's exit")
                    }
                }
                inner.notify_ended();
            });
        if let Err(e) = waiter {
            // The exit still reaches disk; waiters poll for it.
            tracing::warn!(handle = %rec.handle, error = %e, "cannot start a thread to wait on the container");
        }
        Ok(())
    }

    fn destroy(&self, handle: &str) -> Result<(), ContainerError> {
        if hangar_volumes::validate_handle(handle).is_err() {
            return Ok(());
        }
        let _ops = self.lock();
        let dir = self.dir(handle);
        if fs::symlink_metadata(&dir).is_err() {
            return Ok(());
        }
        let meta: Option<Meta> = store::read_json(&dir.join(store::META_FILE)).unwrap_or(None);
        self.remove(handle, &dir, meta.as_ref());
        if let Ok(Some(rec)) = self.load(handle) {
            self.reclaim_mounts(&rec);
        }
        let doomed = self.root.join(format!(
            "{DESTROYING_PREFIX}{handle}-{}",
            store::random_suffix()
        ));
        fs::rename(&dir, &doomed).map_err(io_err(format!("remove {}", dir.display())))?;
        fs::remove_dir_all(&doomed).map_err(io_err(format!("remove {}", doomed.display())))?;
        tracing::info!(%handle, "container destroyed");
        drop(_ops);
        self.notify_ended();
        Ok(())
    }

    /// Kills everything of a container and frees its cgroup and runc
    /// record (not its dir). Called with the ops lock held.
    fn remove(&self, handle: &str, dir: &Path, meta: Option<&Meta>) {
        let runc = meta.filter(|m| m.runc).and(self.runc.as_ref());
        if let Some(runc) = runc {
            if let Err(e) = runc::kill(runc, &self.runc_state, handle) {
                tracing::warn!(%handle, error = %e, "runc kill failed");
            }
        }
        let pid = self.wrapper_pid(dir).or_else(|| wrapper::find_wrapper(dir));
        // Only a pid that is still our wrapper names our process group.
        if let Some(pid) = pid.filter(|pid| wrapper::is_wrapper_of(*pid, dir)) {
            kill_group(pid as i32);
        }
        if let Some(cg) = meta.and_then(|m| m.cgroup.as_ref()) {
            if !self.cgroups.kill_all(cg, KILL_WAIT) {
                tracing::warn!(%handle, "processes of the container survived SIGKILL");
            }
        }
        if let Some(runc) = runc {
            if let Err(e) = runc::delete(runc, &self.runc_state, handle) {
                tracing::warn!(%handle, error = %e, "runc delete failed");
            }
        }
        if let Some(cg) = meta.and_then(|m| m.cgroup.as_ref()) {
            if let Err(e) = self.cgroups.remove(cg, Duration::from_secs(2)) {
                tracing::warn!(%handle, error = %e, "cannot remove the container's cgroup");
            }
        }
        if let Some(roots) = &self.roots {
            roots.release(handle);
        }
        if meta.is_some_and(|m| m.runc) {
            self.release_network(handle);
        }
    }

    /// Cleans up after a worker that died mid-operation.
    fn recover(&self) -> Result<ContainerOpenReport, ContainerError> {
        let mut report = ContainerOpenReport::default();
        let entries =
            fs::read_dir(&self.root).map_err(io_err(format!("list {}", self.root.display())))?;
        let mut handles = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                report.unrecognized.push(path);
                continue;
            };
            let half_made = name.starts_with(CREATING_PREFIX)
                || name.starts_with(DESTROYING_PREFIX)
                || (!name.starts_with('.')
                    && hangar_volumes::validate_handle(&name).is_ok()
                    && !path.join(store::SPEC_FILE).exists());
            if half_made {
                let meta: Option<Meta> =
                    store::read_json(&path.join(store::META_FILE)).unwrap_or(None);
                if let Some(cg) = meta.as_ref().and_then(|m| m.cgroup.as_ref()) {
                    self.cgroups.kill_all(cg, KILL_WAIT);
                    if let Err(e) = self.cgroups.remove(cg, Duration::from_secs(2)) {
                        tracing::warn!(error = %e, "cannot remove a half-made container's cgroup");
                    }
                }
                fs::remove_dir_all(&path).map_err(io_err(format!("remove {}", path.display())))?;
                report.removed.push(path);
            } else if name.starts_with('.') {
                // runc's state dir.
            } else if hangar_volumes::validate_handle(&name).is_err() {
                report.unrecognized.push(path);
            } else {
                handles.push(name);
            }
        }
        let mut live = std::collections::BTreeSet::new();
        for handle in handles {
            let Some(rec) = self.load(&handle)? else {
                continue;
            };
            if rec.dir.join(store::RESULT_FILE).exists() {
                live.insert(handle);
                continue;
            }
            // A wrapper started just before the worker died, pid unwritten.
            if self.wrapper_pid(&rec.dir).is_none() {
                if let Some(pid) = wrapper::find_wrapper(&rec.dir) {
                    tracing::info!(%handle, pid, "found the running wrapper of a container without a pid file");
                    let path = rec.dir.join(store::PID_FILE);
                    store::write_atomic(&path, format!("{pid}\n").as_bytes())
                        .map_err(io_err(format!("write {}", path.display())))?;
                }
            }
            let c = self.status(&rec)?;
            if c.exit.as_ref().is_some_and(|e| e.lost) {
                report.lost.push(handle.clone());
            }
            live.insert(handle);
        }
        // Roots of containers that are gone, and of resource actions (none
        // runs yet).
        if let Some(roots) = &self.roots {
            report.removed.extend(roots.sweep(&live));
        }
        // Networks of containers that ended while no worker ran (their
        // exit was not seen, so not released) are kept for the running
        // ones only.
        if let Some(net) = &self.network {
            let running: std::collections::BTreeSet<String> = live
                .iter()
                .filter(|h| !self.dir(h).join(store::RESULT_FILE).exists())
                .cloned()
                .collect();
            net.sweep(&running);
        }
        Ok(report)
    }
}

/// Opens the worker's task network (`config`, in
/// `<root>/.network`). Auto (`None`) tries `bridge`, and where it does
/// not work warns and answers `None`: containers get runc's own network
/// namespace, loopback only. An explicit mode that does not work fails.
fn open_network(
    root: &Path,
    config: &TaskNetworkConfig,
) -> Result<Option<network::TaskNetwork>, ContainerError> {
    let state = root.join(".network");
    let detect = |mode| network::TaskNetwork::detect(mode, &state, &config.subnet, &config.bridge);
    match config.mode {
        Some(mode) => detect(mode)
            .map(Some)
            .map_err(|reason| ContainerError::Unsupported { reason }),
        None => match detect(NetworkMode::Bridge) {
            Ok(net) => Ok(Some(net)),
            Err(why) => {
                tracing::warn!(error = %why, "tasks get no network (loopback only): the bridge does not work here; install containernetworking-plugins and iptables, or pass --task-network host to share the host's network (no isolation)");
                Ok(None)
            }
        },
    }
}

/// Puts container `handle` on `net`: its namespace (none for `host`) and
/// resolv.conf go into `sandbox`.
fn attach_network(
    net: &network::TaskNetwork,
    handle: &str,
    sandbox: &mut sandbox::Sandbox,
) -> Result<(), String> {
    sandbox.network = match net.attach(handle)? {
        Some(path) => sandbox::NetworkNs::Path(path),
        None => sandbox::NetworkNs::Host,
    };
    sandbox.resolv_conf = net.resolv_conf();
    Ok(())
}

/// Why a container's CPU shares cannot be applied here.
fn cpu_unsupported(shares: Option<u64>, why: &str) -> String {
    let shares = shares.map(|s| format!(" ({s} shares)")).unwrap_or_default();
    format!(
        "container_limits.cpu{shares} cannot be applied on this worker: {why} (remove the limit, or run the task on a worker with a writable cpu cgroup)"
    )
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

/// SIGKILLs a process group and waits (a while) until every member is
/// dead (a zombie its reaper has not collected yet counts as dead).
fn kill_group(pgid: i32) {
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
            Err(Errno::ESRCH) => return,
            Err(e) => {
                tracing::warn!(pgid, error = %e, "cannot kill the container's process group");
                return;
            }
            Ok(()) if !wrapper::group_has_live_members(pgid) => return,
            Ok(()) if Instant::now() >= deadline => {
                tracing::warn!(pgid, "the container's process group outlived SIGKILL");
                return;
            }
            Ok(()) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
