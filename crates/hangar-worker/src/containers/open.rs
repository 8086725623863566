//! Opening the manager on a work dir: the dirs' modes, what the host offers
//! (cgroups, runc, root mounts, the task network), then recovery.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

use hangar_volumes::VolumeManager;

use super::cgroup::Cgroups;
use super::network::{self, NetworkMode};
use super::options::{ContainerOptions, TaskNetworkConfig};
use super::{io_err, isolation, runc, sandbox, store, ContainerError, ContainerManager, Inner};
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
}

impl Inner {
    /// Gives container `handle` its network: a namespace of the worker's
    /// task network (and the nameservers it reaches), or runc's own
    /// loopback-only one where the worker has none. Undone by
    /// [`Self::release_network`].
    pub(super) fn attach_network(
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

    pub(super) fn release_network(&self, handle: &str) {
        if let Some(net) = &self.network {
            net.detach(handle);
        }
    }
}

/// Opens the worker's task network (`config`, in
/// `<root>/.network`). Auto (`None`) tries `bridge`, and where it does
/// not work warns and answers `None`: containers get runc's own network
/// namespace, loopback only. An explicit mode that does not work fails.
pub(super) fn open_network(
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
pub(super) fn attach_network(
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
