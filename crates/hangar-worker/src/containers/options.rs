//! What the manager is opened with: where its tools are and what the worker
//! allows.

use std::path::PathBuf;

use hangar_core::users::Ids;

use super::cgroup::DEFAULT_CGROUP_ROOT;
use super::isolation::DEFAULT_TASK_IDS;
use super::network::NetworkMode;
use super::sandbox;

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
