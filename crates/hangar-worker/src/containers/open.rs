//! Opening the manager on a work dir: the dirs' modes, what the host offers
//! (found by the runtime), then recovery.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use hangar_volumes::VolumeManager;

use super::host_runtime::HostRuntime;
use super::options::ContainerOptions;
use super::runtime::ContainerRuntime;
use super::{io_err, isolation, store, ContainerError, ContainerManager, Inner};
use crate::disk::DiskReserve;

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
        let (root, runc_state) = prepare_dirs(root, &volumes)?;
        let runtime = HostRuntime::open(&root, &runc_state, &options)?;
        Self::open_on(root, volumes, options, Box::new(runtime))
    }

    /// [`ContainerManager::open_with`] on `runtime` instead of this host.
    #[cfg(test)]
    pub(crate) fn open_with_runtime(
        root: &Path,
        volumes: Arc<VolumeManager>,
        options: ContainerOptions,
        runtime: Box<dyn ContainerRuntime>,
    ) -> Result<Self, ContainerError> {
        let (root, _) = prepare_dirs(root, &volumes)?;
        Self::open_on(root, volumes, options, runtime)
    }

    fn open_on(
        root: PathBuf,
        volumes: Arc<VolumeManager>,
        options: ContainerOptions,
        runtime: Box<dyn ContainerRuntime>,
    ) -> Result<Self, ContainerError> {
        let features = runtime.features();
        // runc needs a cgroup to put the container in, except a rootless
        // worker's (no limits then, see `rootless`).
        let sandbox_process = options.sandbox_process
            && features.roots
            && features.runc.is_some()
            && (features.cgroups.is_ok() || features.rootless.is_some());
        if let Some(rootless) = &features.rootless {
            if let Err(why) = &features.cgroups {
                tracing::warn!(cgroups = %why, "a rootless worker without a delegated memory cgroup: containers run with no memory limit or CPU weight, and an RLIMIT_NPROC for the pids limit");
            }
            if options.allow_privileged {
                tracing::warn!("--allow-privileged on a worker that is not root: privileged steps are refused all the same");
            }
            if rootless.slirp4netns.is_none() {
                tracing::warn!("no slirp4netns on PATH (install Debian's slirp4netns package): a rootless worker's containers get loopback only");
            }
        }
        if !sandbox_process && features.root {
            tracing::warn!(runc = ?features.runc, cgroups = ?features.cgroups, "process tasks run outside the sandbox (no runc, no cgroups, or turned off): as a user of their own on the host, with the host's network");
        }
        let disk = DiskReserve::open(&root, options.disk_reserve_bytes);
        let inner = Arc::new(Inner {
            root,
            volumes,
            runtime,
            task_base: options.task_user,
            allow_privileged: options.allow_privileged,
            pids_limit: options.pids_limit,
            sandbox_process,
            ops: Mutex::new(()),
            ended: (Mutex::new(0), Condvar::new()),
            disk,
            reentered: Mutex::new(Default::default()),
        });
        let report = inner.recover()?;
        let features = inner.features();
        tracing::info!(
            root = %inner.root.display(),
            runc = ?features.runc,
            cgroups = ?features.cgroups,
            cpu_shares = ?features.cpu_shares,
            isolation = ?features.isolation,
            network = ?features.network,
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
}

/// Makes the containers dir `root` and runc's state dir in it, and gives
/// the work dir's dirs and files their modes; answers both dirs, `root`
/// resolved.
fn prepare_dirs(
    root: &Path,
    volumes: &VolumeManager,
) -> Result<(PathBuf, PathBuf), ContainerError> {
    fs::create_dir_all(root).map_err(io_err(format!("create {}", root.display())))?;
    let root = fs::canonicalize(root).map_err(io_err(format!("resolve {}", root.display())))?;
    let runc_state = root.join(store::RUNC_STATE_DIR);
    fs::create_dir_all(&runc_state).map_err(io_err(format!("create {}", runc_state.display())))?;
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
    Ok((root, runc_state))
}
