//! Entering an exited container again: `intercept` into a failed step's
//! container, which web keeps a while after the step (Concourse's way to
//! debug a failed build).
//!
//! The program has gone and with it what its exit released: runc's record,
//! the cgroup, the task network, the volumes' top dirs (taken back from the
//! container's user). The container's dir, its bundle, its root and its
//! volumes stay until destroy. Entering puts back what the process needs —
//! the cgroup with the container's limits, the volumes' top dirs for its
//! user — and runs it under runc from the container's own config (see
//! `runc::reentry_config`: loopback only, the task network is gone) or, for
//! a host program, as the program ran. One session at a time: leaving
//! kills what the session left, removes the cgroup and runc's record and
//! takes the volumes back, as the exit did.

use std::collections::BTreeSet;
use std::sync::Arc;

use hangar_core::users::Ids;

use super::{ContainerError, Inner, Record, KILL_WAIT, RELEASE_GRACE};

/// An exited container entered again: [`Reentry::leave`] undoes it, and
/// so does dropping it (on a thread of its own).
pub(crate) struct Reentry {
    inner: Arc<Inner>,
    /// `None` once left.
    handle: Option<String>,
}

impl std::fmt::Debug for Reentry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reentry")
            .field("handle", &self.handle)
            .finish()
    }
}

impl Reentry {
    /// Leaves now, on this thread (it blocks while what the session left
    /// is killed): the next session finds the container free.
    pub(crate) fn leave(mut self) {
        if let Some(handle) = self.handle.take() {
            self.inner.leave(&handle);
        }
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        // Leaving waits for processes to die: not on the caller's thread,
        // which may be an async one.
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("container-leave".into())
            .spawn({
                let handle = handle.clone();
                move || inner.leave(&handle)
            });
        if spawned.is_err() {
            self.inner.leave(&handle);
        }
    }
}

impl Inner {
    /// Readies exited container `rec` for one more process; the answer
    /// undoes it when dropped.
    pub(super) fn reenter(self: &Arc<Self>, rec: &Record) -> Result<Reentry, ContainerError> {
        if !self
            .reentered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rec.handle.clone())
        {
            return Err(ContainerError::InUse {
                handle: rec.handle.clone(),
            });
        }
        // From here on a failure leaves through the drop.
        let reentry = Reentry {
            inner: Arc::clone(self),
            handle: Some(rec.handle.clone()),
        };
        let _ops = self.lock();
        if !rec.dir.exists() {
            return Err(ContainerError::NotFound {
                handle: rec.handle.clone(),
            });
        }
        if let Some(cg) = &rec.meta.cgroup {
            self.runtime
                .make_cgroup(cg, rec.spec.memory_limit_bytes, rec.spec.cpu_shares)
                .map_err(|why| ContainerError::Unsupported {
                    reason: format!("cannot make the container's cgroup again: {why}"),
                })?;
        }
        if let Some(ids) = rec.meta.user.filter(|ids| ids.uid != 0) {
            self.give_back_mounts(rec, ids)?;
        }
        tracing::info!(handle = %rec.handle, "entering the exited container");
        Ok(reentry)
    }

    /// Gives the top dir of each volume `rec` mounts back to its user, as
    /// creating it did (the entries below were never taken back), but for
    /// those a running container mounts: they are that one's now.
    fn give_back_mounts(&self, rec: &Record, ids: Ids) -> Result<(), ContainerError> {
        // The volumes' owners stamps may have been made for another
        // container since: the session's writes void them.
        let volumes: Vec<&str> = rec.spec.mounts.iter().map(|m| m.volume.as_str()).collect();
        self.forget_owners(&rec.handle, &volumes);
        let running = self.mounted_by_running(&rec.handle);
        for m in rec
            .spec
            .mounts
            .iter()
            .filter(|m| !running.contains(&m.volume))
        {
            if let Ok(Some(v)) = self.volumes.get(&m.volume) {
                self.runtime
                    .own_dir(&v.path, ids, 0o700)
                    .map_err(super::io_err(format!(
                        "give {} to the container's user again",
                        v.path.display()
                    )))?;
            }
        }
        Ok(())
    }

    /// The volumes containers other than `handle` mount while their
    /// program runs.
    pub(super) fn mounted_by_running(&self, handle: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for other in self.handles().unwrap_or_default() {
            if other == handle {
                continue;
            }
            if let Ok(Some(rec)) = self.load(&other) {
                if !rec.dir.join(super::store::RESULT_FILE).exists() {
                    out.extend(rec.spec.mounts.iter().map(|m| m.volume.clone()));
                }
            }
        }
        out
    }

    /// Undoes [`Self::reenter`]: what the session left is killed, the
    /// cgroup and runc's record go, the volumes are taken back.
    fn leave(&self, handle: &str) {
        {
            let _ops = self.lock();
            match self.load(handle) {
                Ok(Some(rec)) => {
                    let runc = rec.meta.runc && self.features().runc.is_some();
                    if runc {
                        if let Err(e) = self.runtime.kill_runc(handle) {
                            tracing::debug!(%handle, error = %e, "runc kill after a session");
                        }
                    }
                    if let Some(cg) = &rec.meta.cgroup {
                        if !self.runtime.kill_cgroup(cg, KILL_WAIT) {
                            tracing::warn!(%handle, "processes of a session survived SIGKILL");
                        }
                    }
                    if runc {
                        if let Err(e) = self.runtime.delete_runc(handle) {
                            tracing::warn!(%handle, error = %e, "runc delete after a session failed");
                        }
                    }
                    if let Some(cg) = &rec.meta.cgroup {
                        if let Err(e) = self.runtime.remove_cgroup(cg, RELEASE_GRACE) {
                            tracing::debug!(%handle, error = %e, "cgroup still busy after a session; destroy removes it");
                        }
                    }
                    self.reclaim_mounts(&rec);
                    tracing::info!(%handle, "left the exited container");
                }
                // Destroyed meanwhile: destroy killed and removed it all.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%handle, error = %e, "cannot read the container after a session")
                }
            }
        }
        self.reentered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(handle);
    }
}
