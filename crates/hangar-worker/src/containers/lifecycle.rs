//! Starting a made container under its wrapper, and ending one: what an
//! exited container gives back, and what destroy kills and removes.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Program, Start};
use super::store::{self, Meta, DESTROYING_PREFIX};
use super::{io_err, isolation, spec, ContainerError, Inner, Record, KILL_WAIT, RELEASE_GRACE};

/// The whole environment of a host program of container `rec` (its own,
/// or one `intercept` runs beside it): built from nothing, the task's
/// params over a minimal base, never the worker's own environment.
pub(super) fn host_program_env(rec: &Record) -> Vec<(String, String)> {
    let home = rec.dir.join(store::WORK_DIR).display().to_string();
    [
        ("PATH".to_string(), isolation::TASK_PATH.to_string()),
        ("HOME".to_string(), home),
    ]
    .into_iter()
    .filter(|(k, _)| !rec.spec.env.contains_key(k))
    .chain(rec.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())))
    .collect()
}

impl Inner {
    /// Frees what an ended container holds outside its dir: runc's record
    /// and the cgroup. Processes the program left behind keep the cgroup
    /// until destroy, except for a lost container, whose leftovers are
    /// killed (nobody can wait on them any more).
    pub(super) fn release(&self, rec: &Record, kill_leftovers: bool) {
        self.reclaim_mounts(rec);
        if rec.meta.runc {
            if self.features().runc.is_some() {
                if let Err(e) = self.runtime.delete_runc(&rec.handle) {
                    tracing::warn!(handle = %rec.handle, error = %e, "runc delete failed");
                }
            }
            self.release_network(&rec.handle);
        }
        if let Some(cg) = &rec.meta.cgroup {
            if kill_leftovers {
                self.runtime.kill_cgroup(cg, KILL_WAIT);
            }
            // A moment's grace for children still exiting after the main
            // process (a pipeline's writer after its reader was killed).
            if let Err(e) = self.runtime.remove_cgroup(cg, RELEASE_GRACE) {
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
    ) -> Result<(), ContainerError> {
        let log_path = rec.dir.join(store::LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(io_err(format!("open {}", log_path.display())))?;
        let cwd = rec.dir.join(store::WORK_DIR).join(&checked.dir);
        let program = if rec.meta.runc {
            Program::Runc
        } else {
            let mut argv = isolation::drop_prefix(&self.features().isolation, rec.meta.user);
            argv.push(rec.spec.path.clone().into());
            argv.extend(rec.spec.args.iter().map(Into::into));
            let env = host_program_env(rec);
            Program::Process {
                cwd: &cwd,
                argv,
                env,
                cgroup: rec.meta.cgroup.as_ref(),
                cpu_shares: rec.spec.cpu_shares.is_some(),
            }
        };
        let mut wrapper = self
            .runtime
            .start(Start {
                handle: &rec.handle,
                dir: &rec.dir,
                log,
                program,
            })
            .map_err(io_err("start the container's wrapper"))?;
        let pid = wrapper.pid();
        let pid_path = rec.dir.join(store::PID_FILE);
        if let Err(e) = store::write_atomic(&pid_path, format!("{pid}\n").as_bytes()) {
            // Untracked, it must not run on.
            wrapper.abandon();
            return Err(io_err(format!("write {}", pid_path.display()))(e));
        }
        tracing::info!(handle = %rec.handle, runtime = %rec.spec.runtime, pid, "container started");
        let inner = Arc::clone(self);
        let handle = rec.handle.clone();
        let waiter = std::thread::Builder::new()
            .name("container-wait".into())
            .spawn(move || {
                if let Err(e) = wrapper.wait() {
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
        let runc = meta.is_some_and(|m| m.runc) && self.features().runc.is_some();
        if runc {
            if let Err(e) = self.runtime.kill_runc(handle) {
                tracing::warn!(%handle, error = %e, "runc kill failed");
            }
        }
        let pid = self
            .wrapper_pid(dir)
            .or_else(|| self.runtime.find_wrapper(dir));
        // Only a pid that is still our wrapper names our process group.
        if let Some(pid) = pid.filter(|pid| self.runtime.is_wrapper_of(*pid, dir)) {
            self.runtime.kill_group(pid);
        }
        if let Some(cg) = meta.and_then(|m| m.cgroup.as_ref()) {
            if !self.runtime.kill_cgroup(cg, KILL_WAIT) {
                tracing::warn!(%handle, "processes of the container survived SIGKILL");
            }
        }
        if runc {
            if let Err(e) = self.runtime.delete_runc(handle) {
                tracing::warn!(%handle, error = %e, "runc delete failed");
            }
        }
        if let Some(cg) = meta.and_then(|m| m.cgroup.as_ref()) {
            if let Err(e) = self.runtime.remove_cgroup(cg, Duration::from_secs(2)) {
                tracing::warn!(%handle, error = %e, "cannot remove the container's cgroup");
            }
        }
        if self.features().roots {
            self.runtime.release_root(handle);
        }
        // An exited container's network went when its exit was recorded.
        if meta.is_some_and(|m| m.runc) && !dir.join(store::RESULT_FILE).exists() {
            self.release_network(handle);
        }
    }
}
