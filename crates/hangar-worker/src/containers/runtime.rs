//! The seam between the container manager and the host.
//!
//! The manager decides: what a container gets and in what order, what is
//! undone when a step fails, how an exit is recorded, what recovery does
//! with half-made and lost containers, who runs as whom. Every side effect
//! on the host that those decisions lead to goes through
//! [`ContainerRuntime`]: cgroups, the task network, the roots runc mounts,
//! handing files to users, starting and killing wrappers, runc's records.
//! [`super::host_runtime::HostRuntime`] does them; the manager's own files
//! (the container's dir, its meta, spec, bundle and exit records) it keeps
//! itself.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use hangar_core::users::Ids;

use super::cgroup::{CgroupRef, CgroupVersion};
use super::image_action::ActionRuntime;
use super::isolation::Isolation;
use super::network::NetworkMode;
use super::sandbox::Sandbox;

/// What the host offers containers, found once when the manager opens.
#[derive(Debug, Clone)]
pub(crate) struct Features {
    /// The runc binary; `None`: runc containers (and the process sandbox)
    /// are refused.
    pub runc: Option<PathBuf>,
    /// The cgroup version containers' cgroups are made in, or why there
    /// are none.
    pub cgroups: Result<CgroupVersion, String>,
    /// Whether CPU shares can be set in those cgroups, or why not.
    pub cpu_shares: Result<(), String>,
    /// How process tasks outside the sandbox are kept from the worker.
    pub isolation: Isolation,
    /// Containers' roots can be mounted where runc reaches them; without
    /// them there is no sandbox.
    pub roots: bool,
    /// The network sandboxed containers are put on; `None`: runc's own
    /// namespace, loopback only.
    pub network: Option<NetworkMode>,
    /// The worker runs as root: a sandbox's ids are its range of host ids,
    /// and files are handed to them.
    pub root: bool,
    /// A worker that is not root but has subordinate ids: its containers
    /// are sandboxed in them (see `rootless`).
    pub rootless: Option<super::rootless::Rootless>,
}

/// A made container's program, started under its wrapper.
pub(crate) struct Start<'a> {
    pub handle: &'a str,
    /// The container's dir: the wrapper writes the exit file there.
    pub dir: &'a Path,
    /// stdout and stderr.
    pub log: File,
    pub program: Program<'a>,
}

pub(crate) enum Program<'a> {
    /// `runc run` of the bundle in the container's dir; runc puts the
    /// container into its child of the container's cgroup.
    Runc,
    /// The task's program on the host, in `cwd`, moved into `cgroup` (and,
    /// on cgroup v1, its cpu twin when `cpu_shares`).
    Process {
        cwd: &'a Path,
        argv: Vec<OsString>,
        /// The program's whole environment.
        env: Vec<(String, String)>,
        cgroup: Option<&'a CgroupRef>,
        cpu_shares: bool,
    },
}

/// A wrapper this worker process started.
pub(crate) trait Wrapper: Send {
    fn pid(&self) -> u32;
    /// Blocks until the wrapper has ended, and reaps it.
    fn wait(&mut self) -> io::Result<()>;
    /// Kills the wrapper's process group and reaps it: one the manager
    /// could not record must not run on.
    fn abandon(self: Box<Self>);
}

/// Everything the manager does to the host for a container. Every call
/// blocks.
pub(crate) trait ContainerRuntime: Send + Sync {
    fn features(&self) -> &Features;

    /// Makes `cg` with its memory limit and CPU shares; a half-made one is
    /// removed again on failure.
    fn make_cgroup(
        &self,
        cg: &CgroupRef,
        memory_limit: Option<u64>,
        cpu_shares: Option<u64>,
    ) -> Result<(), String>;
    /// The OOM kills counted in `cg`; `None` when it cannot be read.
    fn oom_kills(&self, cg: &CgroupRef) -> Option<u64>;
    /// SIGKILLs every process in `cg` until none is left or `within`
    /// passes; true when it is empty.
    fn kill_cgroup(&self, cg: &CgroupRef, within: Duration) -> bool;
    /// Removes `cg`, waiting up to `within` for it to empty; not there is
    /// fine.
    fn remove_cgroup(&self, cg: &CgroupRef, within: Duration) -> Result<(), String>;

    /// Puts container `handle` on the task network: its namespace and
    /// resolv.conf go into `sandbox`. Undone by [`Self::release_network`].
    fn attach_network(&self, handle: &str, sandbox: &mut Sandbox) -> Result<(), String>;
    fn release_network(&self, handle: &str);
    /// Releases the networks of every container but the `running` ones.
    fn sweep_networks(&self, running: &BTreeSet<String>);

    /// The image's root filesystem `rootfs`, mounted for container
    /// `handle` where runc reaches it.
    fn mount_image_root(&self, handle: &str, rootfs: &Path) -> io::Result<PathBuf>;
    /// A root of mount points for the host's system dirs for container
    /// `handle`, owned by `owner` (the container's root); with the host
    /// dirs to bind there.
    fn make_host_root(
        &self,
        handle: &str,
        owner: Option<Ids>,
    ) -> io::Result<(PathBuf, Vec<PathBuf>)>;
    /// Unmounts and removes `handle`'s root; none is fine.
    fn release_root(&self, handle: &str);
    /// Releases the roots of containers not in `live`; answers what went.
    fn sweep_roots(&self, live: &BTreeSet<String>) -> Vec<PathBuf>;

    /// Moves every entry under `tree` into the range of host ids from
    /// `base`; answers how many changed.
    fn shift_tree(&self, tree: &Path, base: Ids) -> io::Result<u64>;
    /// [`Self::shift_tree`] of an image's `rootfs`, unless its volume says
    /// it was moved into that range already.
    fn shift_image(&self, rootfs: &Path, base: Ids) -> io::Result<u64>;
    /// Gives every entry under `tree` to `ids`; answers how many changed.
    fn chown_tree(&self, tree: &Path, ids: Ids) -> io::Result<u64>;
    /// Gives `dir` itself to `ids` with `mode`.
    fn own_dir(&self, dir: &Path, ids: Ids, mode: u32) -> io::Result<()>;

    /// Starts the wrapper of a made container.
    fn start(&self, start: Start<'_>) -> io::Result<Box<dyn Wrapper>>;
    /// Whether `pid` is, right now, the live wrapper of the container in
    /// `dir`.
    fn is_wrapper_of(&self, pid: u32, dir: &Path) -> bool;
    /// The live wrapper of the container in `dir`, looked for among every
    /// process (its pid was never recorded).
    fn find_wrapper(&self, dir: &Path) -> Option<u32>;
    /// SIGKILLs the wrapper's process group `pgid` and waits a while for
    /// every member to be gone.
    fn kill_group(&self, pgid: u32);
    /// The command that runs the OCI process in `process_file` in the live
    /// runc container `handle` (`runc exec`), in the foreground; files it
    /// may make for that go under `scratch`, which the caller removes.
    fn exec_runc(
        &self,
        handle: &str,
        process_file: &Path,
        scratch: &Path,
    ) -> io::Result<Vec<OsString>>;
    /// The command that runs the bundle in `bundle` as runc container
    /// `handle` (`runc run`), in the foreground.
    fn run_runc(&self, handle: &str, bundle: &Path) -> io::Result<Vec<OsString>>;
    /// The files a host program writes its pid to, to join `cg` (and its
    /// cpu twin on cgroup v1 when `cpu_shares`).
    fn cgroup_procs(&self, cg: &CgroupRef, cpu_shares: bool) -> Vec<PathBuf>;
    /// SIGKILLs every process of runc container `handle`; one runc does
    /// not know is fine.
    fn kill_runc(&self, handle: &str) -> Result<(), String>;
    /// Makes runc forget container `handle`; one it does not know is fine.
    fn delete_runc(&self, handle: &str) -> Result<(), String>;

    /// runc, its state dir, the cgroups, roots and network, for resource
    /// actions in containers of a custom type's image (which run through
    /// runc directly, not through the manager); `None` without runc.
    fn action_runtime(
        &self,
        memory_limit: Arc<AtomicU64>,
        sandbox: Sandbox,
    ) -> Option<ActionRuntime>;
}
