//! Starting a made container under its wrapper, and ending one: what an
//! exited container gives back, and what destroy kills and removes.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::store::{self, Meta, DESTROYING_PREFIX};
use super::{
    io_err, isolation, runc, spec, wrapper, ContainerError, Inner, Record, KILL_WAIT, RELEASE_GRACE,
};

impl Inner {
    /// Frees what an ended container holds outside its dir: runc's record
    /// and the cgroup. Processes the program left behind keep the cgroup
    /// until destroy, except for a lost container, whose leftovers are
    /// killed (nobody can wait on them any more).
    pub(super) fn release(&self, rec: &Record, kill_leftovers: bool) {
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

    /// Starts the wrapper, records its pid and hands it to a thread that
    /// waits for it. Called with the ops lock held.
    pub(super) fn start(
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

    pub(super) fn destroy(&self, handle: &str) -> Result<(), ContainerError> {
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
    pub(super) fn remove(&self, handle: &str, dir: &Path, meta: Option<&Meta>) {
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
}

/// SIGKILLs a process group and waits (a while) until every member is
/// dead (a zombie its reaper has not collected yet counts as dead).
pub(super) fn kill_group(pgid: i32) {
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
