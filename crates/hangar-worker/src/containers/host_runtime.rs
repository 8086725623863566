//! [`ContainerRuntime`] on this host: cgroups under the cgroup root, runc
//! with its state dir in the work dir, roots under `/run/hangar-sandbox`,
//! the task network through CNI, and the `sh` wrapper.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_core::users::Ids;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::cgroup::{CgroupRef, Cgroups};
use super::image_action::ActionRuntime;
use super::network::{self, NetworkMode};
use super::options::{ContainerOptions, TaskNetworkConfig};
use super::rootless::Rootless;
use super::runtime::{ContainerRuntime, Features, Program, Start, Wrapper};
use super::sandbox::{self, RootMounts, Sandbox};
use super::{isolation, runc, store, wrapper, ContainerError, KILL_WAIT};

pub(crate) struct HostRuntime {
    features: Features,
    runc_state: PathBuf,
    cgroups: Cgroups,
    /// Where containers' roots are mounted for runc; `None` where the worker
    /// cannot sandbox (not root).
    roots: Option<RootMounts>,
    /// The network sandboxed containers get; `None` where the worker
    /// cannot sandbox (runc's own namespace, loopback only).
    network: Option<Arc<network::TaskNetwork>>,
}

impl HostRuntime {
    /// Finds what this host offers the containers of the work dir `root`
    /// (runc keeping its state in `runc_state`). An explicit task network
    /// that cannot be had fails.
    pub(crate) fn open(
        root: &Path,
        runc_state: &Path,
        options: &ContainerOptions,
    ) -> Result<HostRuntime, ContainerError> {
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
        let runc = options.runc.clone().or_else(runc::find_runc);
        let is_root = isolation::is_root();
        let mut rootless = None;
        if !is_root && runc.is_some() {
            match Rootless::detect() {
                Ok(mut found) => {
                    if !tun_usable() {
                        tracing::warn!("/dev/net/tun cannot be opened by the worker's user (udev makes it 0666): slirp4netns cannot work, containers get loopback only");
                        found.slirp4netns = None;
                    }
                    match options.task_network.mode {
                        None => {}
                        Some(NetworkMode::None) => found.slirp4netns = None,
                        Some(mode) => {
                            return Err(ContainerError::Unsupported {
                                reason: format!(
                                    "--task-network {mode}: a worker that is not root networks its containers with slirp4netns; leave the flag out or use none"
                                ),
                            })
                        }
                    }
                    if found.slirp4netns.is_some() {
                        let work_dir = root.parent().unwrap_or(root);
                        if let Err(e) = found.write_resolv_conf(work_dir) {
                            tracing::warn!(error = %e, "cannot write the containers' resolv.conf: they keep their image's");
                        }
                    }
                    rootless = Some(found);
                }
                Err(why) => {
                    tracing::warn!(reason = %why, "the worker is not root and cannot map its containers into subordinate ids: process tasks run as the worker's user, runc containers without the sandbox")
                }
            }
        }
        let roots = if is_root {
            match RootMounts::for_worker(root) {
                Ok(roots) => Some(roots),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make the containers' root mount points: containers run without a sandbox");
                    None
                }
            }
        } else if rootless.is_some() {
            let dir = root
                .parent()
                .unwrap_or(root)
                .join(sandbox::ROOTLESS_ROOTS_DIR);
            match RootMounts::for_rootless(&dir) {
                Ok(roots) => Some(roots),
                Err(e) => {
                    tracing::warn!(path = %dir.display(), error = %e, "cannot make the containers' roots: containers run without a sandbox");
                    rootless = None;
                    None
                }
            }
        } else {
            None
        };
        let network = match (&roots, &runc) {
            _ if rootless.is_some() => None,
            (Some(_), Some(_)) => open_network(root, &options.task_network)?.map(Arc::new),
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
        Ok(HostRuntime {
            features: Features {
                runc,
                cgroups: cgroup_version,
                cpu_shares: cpu_controller,
                isolation,
                roots: roots.is_some(),
                network: network.as_ref().map(|n| n.mode()),
                root: is_root,
                rootless,
            },
            runc_state: runc_state.to_path_buf(),
            cgroups,
            roots,
            network,
        })
    }

    fn runc(&self) -> Option<&Path> {
        self.features.runc.as_deref()
    }
}

impl ContainerRuntime for HostRuntime {
    fn features(&self) -> &Features {
        &self.features
    }

    fn make_cgroup(
        &self,
        cg: &CgroupRef,
        memory_limit: Option<u64>,
        cpu_shares: Option<u64>,
    ) -> Result<(), String> {
        self.cgroups.create(cg, memory_limit, cpu_shares)
    }

    fn oom_kills(&self, cg: &CgroupRef) -> Option<u64> {
        self.cgroups.oom_kills(cg)
    }

    fn kill_cgroup(&self, cg: &CgroupRef, within: Duration) -> bool {
        self.cgroups.kill_all(cg, within)
    }

    fn remove_cgroup(&self, cg: &CgroupRef, within: Duration) -> Result<(), String> {
        self.cgroups.remove(cg, within)
    }

    fn attach_network(&self, handle: &str, sandbox: &mut Sandbox) -> Result<(), String> {
        match &self.network {
            Some(net) => attach_network(net, handle, sandbox),
            None => Ok(()),
        }
    }

    fn release_network(&self, handle: &str) {
        if let Some(net) = &self.network {
            net.detach(handle);
        }
    }

    fn sweep_networks(&self, running: &BTreeSet<String>) {
        if let Some(net) = &self.network {
            net.sweep(running);
        }
    }

    fn mount_image_root(&self, handle: &str, rootfs: &Path) -> io::Result<PathBuf> {
        match &self.roots {
            Some(roots) => roots.mount_image(handle, rootfs),
            None => Err(no_roots()),
        }
    }

    fn make_host_root(
        &self,
        handle: &str,
        owner: Option<Ids>,
    ) -> io::Result<(PathBuf, Vec<PathBuf>)> {
        let roots = self.roots.as_ref().ok_or_else(no_roots)?;
        let entries = sandbox::host_entries(Path::new("/"));
        let root = roots.make_host_root(handle, &entries, owner)?;
        let host_dirs = entries
            .iter()
            .filter_map(|e| match e {
                sandbox::HostEntry::Dir(name) => Some(Path::new("/").join(name)),
                sandbox::HostEntry::Link(..) => None,
            })
            .collect();
        Ok((root, host_dirs))
    }

    fn release_root(&self, handle: &str) {
        if let Some(roots) = &self.roots {
            roots.release(handle);
        }
    }

    fn sweep_roots(&self, live: &BTreeSet<String>) -> Vec<PathBuf> {
        match &self.roots {
            Some(roots) => roots.sweep(live),
            None => Vec::new(),
        }
    }

    fn shift_tree(&self, tree: &Path, base: Ids) -> io::Result<u64> {
        sandbox::shift_tree(tree, base)
    }

    fn shift_image(&self, rootfs: &Path, base: Ids) -> io::Result<u64> {
        sandbox::shift_image_rootfs(rootfs, base)
    }

    fn chown_tree(&self, tree: &Path, ids: Ids) -> io::Result<u64> {
        isolation::chown_tree(tree, ids)
    }

    fn own_dir(&self, dir: &Path, ids: Ids, mode: u32) -> io::Result<()> {
        isolation::own_dir(dir, ids, mode)
    }

    fn start(&self, start: Start<'_>) -> io::Result<Box<dyn Wrapper>> {
        let procs = match &start.program {
            Program::Process {
                cgroup: Some(cg),
                cpu_shares,
                ..
            } => self.cgroups.procs_files(cg, *cpu_shares),
            _ => Vec::new(),
        };
        let launch = match start.program {
            // runc puts the container into runc's child of the cgroup.
            Program::Runc => {
                let runc = self
                    .runc()
                    .ok_or_else(|| io::Error::other("no runc binary"))?;
                wrapper::Launch {
                    dir: start.dir,
                    cwd: start.dir,
                    cgroup_procs: &[],
                    argv: runc::run_command(
                        runc,
                        &self.runc_state,
                        &start.dir.join(store::BUNDLE_DIR),
                        start.handle,
                    ),
                    env: vec![("PATH".into(), isolation::TASK_PATH.into())],
                    log: start.log,
                }
            }
            Program::Process { cwd, argv, env, .. } => wrapper::Launch {
                dir: start.dir,
                cwd,
                cgroup_procs: &procs,
                argv,
                env,
                log: start.log,
            },
        };
        let child = wrapper::spawn(launch)?;
        Ok(Box::new(HostWrapper(child)))
    }

    fn is_wrapper_of(&self, pid: u32, dir: &Path) -> bool {
        wrapper::is_wrapper_of(pid, dir)
    }

    fn find_wrapper(&self, dir: &Path) -> Option<u32> {
        wrapper::find_wrapper(dir)
    }

    fn kill_group(&self, pgid: u32) {
        kill_group(pgid as i32);
    }

    fn exec_runc(
        &self,
        handle: &str,
        process_file: &Path,
        scratch: &Path,
    ) -> io::Result<Vec<OsString>> {
        let runc = self
            .runc()
            .ok_or_else(|| io::Error::other("no runc binary"))?;
        // A rootless worker's runc made the network inside the container's
        // user namespace: a plain `runc exec` joins it.
        if self.features.root {
            let state = self.runc_state.join(handle).join("state.json");
            let state: serde_json::Value = serde_json::from_slice(&std::fs::read(&state)?)?;
            // runc joins the user namespace first, and from inside it a
            // network namespace the host made (the task network's) cannot
            // be joined: runc execs from inside that network instead, on
            // a copy of its record that does not ask to join it.
            if let Some((net, shadow)) = runc::exec_around_network(&state) {
                let dir = scratch.join(handle);
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("state.json"), serde_json::to_vec(&shadow)?)?;
                let mut argv: Vec<OsString> =
                    vec!["nsenter".into(), format!("--net={net}").into(), "--".into()];
                argv.extend(runc::exec_command(runc, scratch, process_file, handle));
                return Ok(argv);
            }
        }
        Ok(runc::exec_command(
            runc,
            &self.runc_state,
            process_file,
            handle,
        ))
    }

    fn run_runc(&self, handle: &str, bundle: &Path) -> io::Result<Vec<OsString>> {
        let runc = self
            .runc()
            .ok_or_else(|| io::Error::other("no runc binary"))?;
        Ok(runc::run_command(runc, &self.runc_state, bundle, handle))
    }

    fn cgroup_procs(&self, cg: &CgroupRef, cpu_shares: bool) -> Vec<PathBuf> {
        self.cgroups.procs_files(cg, cpu_shares)
    }

    fn kill_runc(&self, handle: &str) -> Result<(), String> {
        match self.runc() {
            Some(runc) => runc::kill(runc, &self.runc_state, handle),
            None => Ok(()),
        }
    }

    fn delete_runc(&self, handle: &str) -> Result<(), String> {
        match self.runc() {
            Some(runc) => runc::delete(runc, &self.runc_state, handle),
            None => Ok(()),
        }
    }

    fn action_runtime(
        &self,
        memory_limit: Arc<AtomicU64>,
        sandbox: Sandbox,
    ) -> Option<ActionRuntime> {
        self.features.runc.clone().map(|runc| ActionRuntime {
            runc,
            state: self.runc_state.clone(),
            cgroups: self
                .features
                .cgroups
                .clone()
                .ok()
                .map(|version| (self.cgroups.clone(), version)),
            memory_limit,
            // A rootless worker's resource actions stay as they were: their
            // roots are overlays, which it cannot mount.
            roots: self.roots.clone().filter(RootMounts::mounts),
            sandbox,
            network: self.network.clone(),
            host_programs: false,
        })
    }
}

/// Whether the worker's user may open the tun device slirp4netns needs.
fn tun_usable() -> bool {
    nix::unistd::access(
        "/dev/net/tun",
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .is_ok()
}

fn no_roots() -> io::Error {
    io::Error::other("the worker has no root mount points for containers (it is not root)")
}

struct HostWrapper(Child);

impl Wrapper for HostWrapper {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn wait(&mut self) -> io::Result<()> {
        self.0.wait().map(|_| ())
    }

    fn abandon(mut self: Box<Self>) {
        let pid = self.0.id();
        if let Err(k) = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL) {
            tracing::error!(pid, error = %k, "cannot kill a container whose pid could not be recorded");
        }
        if let Err(w) = self.0.wait() {
            tracing::warn!(pid, error = %w, "cannot reap a container whose pid could not be recorded");
        }
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
pub(crate) fn attach_network(
    net: &network::TaskNetwork,
    handle: &str,
    sandbox: &mut Sandbox,
) -> Result<(), String> {
    sandbox.network = match net.attach(handle)? {
        Some(path) => sandbox::NetworkNs::Path(path),
        None => sandbox::NetworkNs::Host,
    };
    sandbox.resolv_conf = net.resolv_conf();
    Ok(())
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
