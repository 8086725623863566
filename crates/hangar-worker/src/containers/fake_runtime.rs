//! A recording fake of [`ContainerRuntime`] for tests of the manager's
//! logic without root.
//!
//! Nothing is done to the host: every side effect is recorded as a
//! [`Call`], and the fake can be told to fail the next call of a kind
//! ([`FakeRuntime::fail`]). Wrappers are entries in a process table: one
//! runs until the test ends it with [`FakeRuntime::exit`] (which writes the
//! exit file as the real wrapper does) or the manager kills its group.
//! The manager's own files (the container dirs) are real, in the test's
//! temp dir.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use hangar_core::users::Ids;

use super::cgroup::{CgroupRef, CgroupVersion};
use super::image_action::ActionRuntime;
use super::network::NetworkMode;
use super::runtime::{ContainerRuntime, Features, Program, Start, Wrapper};
use super::sandbox::{NetworkNs, Sandbox};
use super::{store, Isolation};

/// One side effect the manager asked for. Containers are named by handle
/// (a cgroup by the handle its name starts with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    MakeCgroup {
        container: String,
        memory_limit: Option<u64>,
        cpu_shares: Option<u64>,
    },
    KillCgroup(String),
    RemoveCgroup(String),
    AttachNetwork(String),
    ReleaseNetwork(String),
    /// The handles whose networks are kept.
    SweepNetworks(Vec<String>),
    MountImageRoot(String),
    MakeHostRoot(String),
    ReleaseRoot(String),
    /// The handles whose roots are kept.
    SweepRoots(Vec<String>),
    ShiftTree(PathBuf),
    ShiftImage(PathBuf),
    ChownTree(PathBuf, Ids),
    OwnDir(PathBuf, Ids),
    Start {
        container: String,
        runc: bool,
    },
    /// A wrapper whose pid could not be recorded, killed.
    Abandon(String),
    KillGroup(String),
    KillRunc(String),
    DeleteRunc(String),
}

/// The calls [`FakeRuntime::fail`] can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fail {
    MakeCgroup,
    AttachNetwork,
    MountImageRoot,
    MakeHostRoot,
    Start,
}

/// A root worker that sandboxes: runc, cgroup v2 with the cpu
/// controller, root mounts, the bridge network.
pub(crate) fn sandboxing() -> Features {
    Features {
        runc: Some("/fake/runc".into()),
        cgroups: Ok(CgroupVersion::V2),
        cpu_shares: Ok(()),
        isolation: Isolation::Drop {
            unshare: "/fake/unshare".into(),
            pid_namespace: true,
        },
        roots: true,
        network: Some(NetworkMode::Bridge),
        root: true,
        rootless: None,
    }
}

struct Process {
    pid: u32,
    handle: String,
    dir: PathBuf,
    alive: bool,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    fail: BTreeSet<Fail>,
    processes: Vec<Process>,
}

struct Shared {
    features: Features,
    state: Mutex<State>,
    /// Notified whenever a process ends.
    ended: Condvar,
}

/// Clones share their record and process table: the test keeps one and
/// gives the manager another.
#[derive(Clone)]
pub(crate) struct FakeRuntime(Arc<Shared>);

/// The first pid the fake hands out; far above any real one, so no real
/// process is ever taken for a fake wrapper.
const FIRST_PID: u32 = 3_000_000;

impl FakeRuntime {
    pub(crate) fn new(features: Features) -> FakeRuntime {
        FakeRuntime(Arc::new(Shared {
            features,
            state: Mutex::default(),
            ended: Condvar::new(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, call: Call) {
        self.state().calls.push(call);
    }

    /// Records `call`; fails it when the test asked for `fail`.
    fn record_or_fail(&self, call: Call, fail: Fail) -> Result<(), String> {
        let mut state = self.state();
        state.calls.push(call);
        if state.fail.remove(&fail) {
            return Err(format!("{fail:?} failed (as the test asked)"));
        }
        Ok(())
    }

    /// Makes the next call of kind `fail` fail.
    pub(crate) fn fail(&self, fail: Fail) {
        self.state().fail.insert(fail);
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The calls so far, forgotten: the next [`Self::take_calls`] answers
    /// only later ones.
    pub(crate) fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state().calls)
    }

    /// Ends container `handle`'s program with `status`: the exit file is
    /// written, then the wrapper is gone, as the real one does it.
    pub(crate) fn exit(&self, handle: &str, status: i32) {
        let mut state = self.state();
        let p = state
            .processes
            .iter_mut()
            .find(|p| p.alive && p.handle == handle)
            .expect("a running wrapper of the container");
        let tmp = p.dir.join(format!("{}.tmp", store::EXIT_FILE));
        std::fs::write(&tmp, format!("{status}\n")).unwrap();
        std::fs::rename(&tmp, p.dir.join(store::EXIT_FILE)).unwrap();
        p.alive = false;
        self.0.ended.notify_all();
    }

    /// Whether container `handle`'s wrapper runs.
    pub(crate) fn running(&self, handle: &str) -> bool {
        self.state()
            .processes
            .iter()
            .any(|p| p.alive && p.handle == handle)
    }

    fn end(&self, pid: u32) -> Option<String> {
        let mut state = self.state();
        let p = state.processes.iter_mut().find(|p| p.pid == pid)?;
        p.alive = false;
        self.0.ended.notify_all();
        Some(p.handle.clone())
    }
}

/// `hangar/<handle>-<suffix>`'s handle.
fn container_of(cg: &CgroupRef) -> String {
    let name = cg.path.rsplit('/').next().unwrap_or(&cg.path);
    name.rsplit_once('-').map_or(name, |(h, _)| h).to_string()
}

impl ContainerRuntime for FakeRuntime {
    fn features(&self) -> &Features {
        &self.0.features
    }

    fn make_cgroup(
        &self,
        cg: &CgroupRef,
        memory_limit: Option<u64>,
        cpu_shares: Option<u64>,
    ) -> Result<(), String> {
        let call = Call::MakeCgroup {
            container: container_of(cg),
            memory_limit,
            cpu_shares,
        };
        self.record_or_fail(call, Fail::MakeCgroup)
    }

    fn oom_kills(&self, _cg: &CgroupRef) -> Option<u64> {
        Some(0)
    }

    fn kill_cgroup(&self, cg: &CgroupRef, _within: Duration) -> bool {
        self.record(Call::KillCgroup(container_of(cg)));
        true
    }

    fn remove_cgroup(&self, cg: &CgroupRef, _within: Duration) -> Result<(), String> {
        self.record(Call::RemoveCgroup(container_of(cg)));
        Ok(())
    }

    fn attach_network(&self, handle: &str, sandbox: &mut Sandbox) -> Result<(), String> {
        self.record_or_fail(Call::AttachNetwork(handle.into()), Fail::AttachNetwork)?;
        sandbox.network = NetworkNs::Path(PathBuf::from("/fake/netns").join(handle));
        Ok(())
    }

    fn release_network(&self, handle: &str) {
        self.record(Call::ReleaseNetwork(handle.into()));
    }

    fn sweep_networks(&self, running: &BTreeSet<String>) {
        self.record(Call::SweepNetworks(running.iter().cloned().collect()));
    }

    fn mount_image_root(&self, handle: &str, _rootfs: &Path) -> io::Result<PathBuf> {
        self.record_or_fail(Call::MountImageRoot(handle.into()), Fail::MountImageRoot)
            .map_err(io::Error::other)?;
        Ok(PathBuf::from("/fake/roots").join(handle))
    }

    fn make_host_root(
        &self,
        handle: &str,
        _owner: Option<Ids>,
    ) -> io::Result<(PathBuf, Vec<PathBuf>)> {
        self.record_or_fail(Call::MakeHostRoot(handle.into()), Fail::MakeHostRoot)
            .map_err(io::Error::other)?;
        Ok((PathBuf::from("/fake/roots").join(handle), vec![]))
    }

    fn release_root(&self, handle: &str) {
        self.record(Call::ReleaseRoot(handle.into()));
    }

    fn sweep_roots(&self, live: &BTreeSet<String>) -> Vec<PathBuf> {
        self.record(Call::SweepRoots(live.iter().cloned().collect()));
        Vec::new()
    }

    fn shift_tree(&self, tree: &Path, _base: Ids) -> io::Result<u64> {
        self.record(Call::ShiftTree(tree.into()));
        Ok(0)
    }

    fn shift_image(&self, rootfs: &Path, _base: Ids) -> io::Result<u64> {
        self.record(Call::ShiftImage(rootfs.into()));
        Ok(0)
    }

    fn chown_tree(&self, tree: &Path, ids: Ids) -> io::Result<u64> {
        self.record(Call::ChownTree(tree.into(), ids));
        Ok(0)
    }

    fn own_dir(&self, dir: &Path, ids: Ids, _mode: u32) -> io::Result<()> {
        self.record(Call::OwnDir(dir.into(), ids));
        Ok(())
    }

    fn exec_runc(
        &self,
        handle: &str,
        process_file: &Path,
        _scratch: &Path,
    ) -> io::Result<Vec<std::ffi::OsString>> {
        Ok(vec![
            "runc".into(),
            "exec".into(),
            "--process".into(),
            process_file.into(),
            handle.into(),
        ])
    }

    fn run_runc(&self, handle: &str, bundle: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        Ok(vec![
            "runc".into(),
            "run".into(),
            "--bundle".into(),
            bundle.into(),
            handle.into(),
        ])
    }

    fn cgroup_procs(&self, cg: &CgroupRef, _cpu_shares: bool) -> Vec<PathBuf> {
        vec![PathBuf::from(format!(
            "/fake-cgroups/{}/cgroup.procs",
            cg.path
        ))]
    }

    fn start(&self, start: Start<'_>) -> io::Result<Box<dyn Wrapper>> {
        let call = Call::Start {
            container: start.handle.into(),
            runc: matches!(start.program, Program::Runc),
        };
        self.record_or_fail(call, Fail::Start)
            .map_err(io::Error::other)?;
        let mut state = self.state();
        let pid = FIRST_PID + state.processes.len() as u32;
        state.processes.push(Process {
            pid,
            handle: start.handle.into(),
            dir: start.dir.into(),
            alive: true,
        });
        Ok(Box::new(FakeWrapper {
            pid,
            fake: self.clone(),
        }))
    }

    fn is_wrapper_of(&self, pid: u32, dir: &Path) -> bool {
        self.state()
            .processes
            .iter()
            .any(|p| p.pid == pid && p.alive && p.dir == dir)
    }

    fn find_wrapper(&self, dir: &Path) -> Option<u32> {
        self.state()
            .processes
            .iter()
            .find(|p| p.alive && p.dir == dir)
            .map(|p| p.pid)
    }

    fn kill_group(&self, pgid: u32) {
        if let Some(handle) = self.end(pgid) {
            self.record(Call::KillGroup(handle));
        }
    }

    fn kill_runc(&self, handle: &str) -> Result<(), String> {
        self.record(Call::KillRunc(handle.into()));
        Ok(())
    }

    fn delete_runc(&self, handle: &str) -> Result<(), String> {
        self.record(Call::DeleteRunc(handle.into()));
        Ok(())
    }

    fn action_runtime(
        &self,
        _memory_limit: Arc<AtomicU64>,
        _sandbox: Sandbox,
    ) -> Option<ActionRuntime> {
        None
    }
}

struct FakeWrapper {
    pid: u32,
    fake: FakeRuntime,
}

impl Wrapper for FakeWrapper {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn wait(&mut self) -> io::Result<()> {
        let mut state = self.fake.state();
        while state.processes.iter().any(|p| p.pid == self.pid && p.alive) {
            state = self
                .fake
                .0
                .ended
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }

    fn abandon(self: Box<Self>) {
        if let Some(handle) = self.fake.end(self.pid) {
            self.fake.record(Call::Abandon(handle));
        }
    }
}
