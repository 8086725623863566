//! The manager's public API over `Inner`: reading containers, waiting on
//! them, and admission against the worker's memory budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hangar_api::containers::{Container, ContainerSpec};

use super::{
    nonzero, store, ActionRuntime, ContainerError, ContainerManager, ContainerOpenReport,
    Isolation, NetworkMode, POLL, STATE_EXITED, STATE_RUNNING,
};
use crate::disk::DiskReserve;

impl ContainerManager {
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The work dir's disk reserve: whether the disk counts as full.
    pub fn disk(&self) -> &DiskReserve {
        &self.inner.disk
    }

    /// runc and its state dir for resource actions in containers of a
    /// custom type's image, and of every base type where process tasks
    /// are sandboxed; `None` without runc.
    pub fn action_runtime(&self) -> Option<ActionRuntime> {
        self.inner
            .runtime
            .action_runtime(self.default_limit.clone(), self.inner.sandbox())
            .map(|mut runtime| {
                runtime.host_programs = self.inner.sandbox_process;
                runtime
            })
    }

    /// How sandboxed containers are networked here; `None` where the
    /// worker cannot sandbox.
    pub fn task_network(&self) -> Option<NetworkMode> {
        self.inner.features().network
    }

    /// Whether `process` containers run in the sandbox here.
    pub fn sandboxes_processes(&self) -> bool {
        self.inner.sandbox_process
    }

    /// How process tasks are kept from the worker here.
    pub fn isolation(&self) -> &Isolation {
        &self.inner.features().isolation
    }

    /// What the last open cleaned up.
    pub fn open_report(&self) -> &ContainerOpenReport {
        &self.report
    }

    /// Validates the spec, records it and starts the process. Returns once
    /// the process is started (`running`).
    pub fn create(&self, spec: ContainerSpec) -> Result<Container, ContainerError> {
        self.inner.create(spec)
    }

    /// Sets the memory budget and the default container limit that
    /// [`ContainerManager::create_within`] applies.
    pub fn set_memory_policy(&self, budget: Option<u64>, default_limit: Option<u64>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.budget.store(budget.unwrap_or(0), Relaxed);
        self.default_limit
            .store(default_limit.unwrap_or(0), Relaxed);
    }

    /// Creates a container within a memory budget: a container without a
    /// limit gets `default_limit` when the worker can enforce limits, and
    /// none is accepted whose limit would take the running containers'
    /// limits past `budget`. The check and the start are serialised, so two
    /// concurrent creations cannot both take the last room.
    pub fn create_within(&self, mut spec: ContainerSpec) -> Result<Container, ContainerError> {
        let budget = nonzero(self.budget.load(std::sync::atomic::Ordering::Relaxed));
        let default_limit = nonzero(
            self.default_limit
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let _admission = self.admission.lock().unwrap_or_else(|p| p.into_inner());
        if spec.memory_limit_bytes.is_none() && self.memory_limits_enforceable().is_ok() {
            // A task that sets no limit gets the default, but never more than
            // the worker has left: the default is a ceiling, not a demand.
            let left = budget.map(|b| b.saturating_sub(self.reserved_memory().unwrap_or(0)));
            spec.memory_limit_bytes = match (default_limit, left) {
                (Some(d), Some(l)) if l > 0 => Some(d.min(l)),
                (d, _) => d,
            };
        }
        if let (Some(budget), Some(limit)) = (budget, spec.memory_limit_bytes) {
            let reserved = self.reserved_memory()?;
            if reserved.saturating_add(limit) > budget {
                let human = hangar_core::build::human_bytes;
                return Err(ContainerError::NoRoom {
                    reason: format!(
                        "a {} limit on top of {} promised exceeds the worker's {}",
                        human(limit),
                        human(reserved),
                        human(budget)
                    ),
                });
            }
        }
        self.inner.create(spec)
    }

    /// The container, after noticing an exit that happened since last look.
    pub fn get(&self, handle: &str) -> Result<Option<Container>, ContainerError> {
        match self.inner.load(handle)? {
            Some(rec) => match self.inner.status(&rec) {
                Ok(c) => Ok(Some(c)),
                // Destroyed while we looked.
                Err(ContainerError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            },
            None => Ok(None),
        }
    }

    /// Every container, oldest first.
    pub fn list(&self) -> Result<Vec<Container>, ContainerError> {
        let mut all = Vec::new();
        for handle in self.inner.handles()? {
            match self.get(&handle) {
                Ok(Some(c)) => all.push(c),
                Ok(None) => {}
                Err(e) => tracing::warn!(%handle, error = %e, "cannot read container"),
            }
        }
        all.sort_by(|a, b| (a.started_at, &a.handle).cmp(&(b.started_at, &b.handle)));
        Ok(all)
    }

    /// How many containers are running.
    pub fn active_count(&self) -> Result<usize, ContainerError> {
        Ok(self
            .list()?
            .iter()
            .filter(|c| c.state == STATE_RUNNING)
            .count())
    }

    /// The memory limits of the running containers, summed: what the worker
    /// has promised away.
    pub fn reserved_memory(&self) -> Result<u64, ContainerError> {
        let mut total = 0u64;
        for c in self.list()?.iter().filter(|c| c.state == STATE_RUNNING) {
            if let Some(rec) = self.inner.load(&c.handle)? {
                total = total.saturating_add(rec.spec.memory_limit_bytes.unwrap_or(0));
            }
        }
        Ok(total)
    }

    /// Whether this worker can put a memory limit on a process container
    /// (a writable memory cgroup); why not, when it cannot.
    pub fn memory_limits_enforceable(&self) -> Result<(), String> {
        self.inner
            .features()
            .cgroups
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }

    /// Whether this worker can give a container CPU shares (a writable
    /// cgroup with the cpu controller); why not, when it cannot.
    pub fn cpu_limits_enforceable(&self) -> Result<(), String> {
        self.inner.features().cpu_shares.clone()
    }

    /// Waits until the container has exited or `timeout` passes; returns it
    /// either way (check `state`).
    pub fn wait(&self, handle: &str, timeout: Duration) -> Result<Container, ContainerError> {
        let deadline = Instant::now() + timeout;
        let (lock, ended) = &self.inner.ended;
        loop {
            let seen = *lock.lock().unwrap_or_else(|p| p.into_inner());
            let c = self.get(handle)?.ok_or_else(|| ContainerError::NotFound {
                handle: handle.to_string(),
            })?;
            let now = Instant::now();
            if c.state == STATE_EXITED || now >= deadline {
                return Ok(c);
            }
            let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            if *guard == seen {
                // A poisoned lock or a timeout both mean: look again.
                let _ = ended.wait_timeout(guard, POLL.min(deadline - now));
            }
        }
    }

    /// The log file (stdout and stderr) of the container.
    pub fn log_path(&self, handle: &str) -> Result<PathBuf, ContainerError> {
        match self.inner.load(handle)? {
            Some(rec) => Ok(rec.dir.join(store::LOG_FILE)),
            None => Err(ContainerError::NotFound {
                handle: handle.to_string(),
            }),
        }
    }

    /// Kills the container's processes and removes it with its cgroup. A
    /// container that is not there counts as destroyed.
    pub fn destroy(&self, handle: &str) -> Result<(), ContainerError> {
        self.inner.destroy(handle)
    }

    /// The handle of every container this worker has, running or exited:
    /// what it reports to web.
    pub fn handles(&self) -> Result<Vec<String>, ContainerError> {
        let mut out = Vec::new();
        for handle in self.inner.handles()? {
            if hangar_volumes::validate_handle(&handle).is_ok()
                && self.inner.dir(&handle).join(store::SPEC_FILE).exists()
            {
                out.push(handle);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every volume a container this worker still has mounts (its rootfs
    /// included), running or exited: the sweeper never destroys them.
    pub fn mounted_volumes(&self) -> Result<std::collections::BTreeSet<String>, ContainerError> {
        let mut out = std::collections::BTreeSet::new();
        for handle in self.inner.handles()? {
            match self.inner.load(&handle) {
                Ok(Some(rec)) => {
                    out.extend(rec.spec.mounts.iter().map(|m| m.volume.clone()));
                    out.extend(rec.spec.rootfs_volume.clone());
                }
                Ok(None) => {}
                Err(e) => {
                    // Its mounts cannot be told: keep every volume.
                    return Err(e);
                }
            }
        }
        Ok(out)
    }
}
