//! The worker's container API wire types (served by each worker, called by
//! web's build engine).
//!
//! A container runs one process with volumes mounted into its working
//! directory. Its output (stdout and stderr, interleaved) is kept in a log on
//! the worker, so a caller that lost its connection (web restarted) reads on
//! from an offset; its exit is kept too, so it can be learned after the fact.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a container runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// `process`: run on the worker host, no isolation (works everywhere).
    Process,
    /// `runc`: an OCI container from a rootfs volume, with a memory limit.
    Runc,
}

impl Runtime {
    pub const ALL: [Runtime; 2] = [Runtime::Process, Runtime::Runc];

    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Process => "process",
            Runtime::Runc => "runc",
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(Runtime::Process),
            "runc" => Ok(Runtime::Runc),
            other => Err(format!("unknown runtime {other:?} (process or runc)")),
        }
    }
}

/// Whether a container's process still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    Exited,
}

impl RunState {
    pub const ALL: [RunState; 2] = [RunState::Running, RunState::Exited];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Exited => "exited",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub handle: String,
    /// `process` or `runc`.
    pub runtime: Runtime,
    /// runc only: the volume whose data directory is the root filesystem.
    #[serde(default)]
    pub rootfs_volume: Option<String>,
    /// The program; a relative path is resolved in the working directory.
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Relative to the working directory; default the working directory.
    #[serde(default)]
    pub dir: Option<String>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// The container's memory limit; the worker may refuse to run without
    /// one if it cannot enforce it, or apply its own default.
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    /// The task's `container_limits.cpu`: CPU shares as in Concourse and
    /// cgroup v1 (relative weight, 1024 the default, 2 to 262144). A worker
    /// that cannot apply them refuses the container rather than run it
    /// without. Left out when unset, so a worker that predates the field
    /// still takes every spec that asks for no CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<u64>,
    /// The task's `run.user`: `uid`, `uid:gid` or a name from the passwd
    /// file (the host's for `process`, the image's for `runc`). `None`: the
    /// worker's default task user (`process`), root in the container (`runc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Concourse's `privileged`: the container runs as real root with every
    /// capability. A worker not started with `--allow-privileged` refuses
    /// the spec. Left out when false, so a worker that predates the field
    /// still takes every unprivileged spec.
    #[serde(default, skip_serializing_if = "crate::is_false")]
    pub privileged: bool,
}

/// A volume mounted into the container's working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub volume: String,
    /// Relative to the working directory (e.g. `my-input`, `cache/go`).
    pub path: String,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub handle: String,
    pub runtime: Runtime,
    /// `running` or `exited`.
    pub state: RunState,
    pub started_at: i64,
    pub exit: Option<ContainerExit>,
    /// Bytes of log written so far.
    pub log_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExit {
    /// The exit code, when the process exited rather than being killed.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// The kernel killed a process of the container for exceeding its
    /// memory limit (read from the cgroup's counter: the main process can
    /// exit 0 when a child was the one killed).
    pub oom_killed: bool,
    pub memory_limit_bytes: Option<u64>,
    pub finished_at: i64,
    /// The worker lost track of the process: it was gone without leaving
    /// an exit status (killed together with its wrapper, or never started
    /// because the worker died while creating it). `code` and `signal` are
    /// then `None`.
    #[serde(default)]
    pub lost: bool,
    /// The worker's work dir was full when the container ended (or its
    /// result could not be written for want of space): unless the program
    /// exited 0, the step failed for the disk, not for itself.
    #[serde(default)]
    pub disk_full: bool,
}
