//! Cleaning up after a worker that died mid-operation: half-made and
//! half-removed containers, containers that ended unseen, and the roots and
//! networks of containers that are gone.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use super::store::{self, Meta, CREATING_PREFIX, DESTROYING_PREFIX};
use super::{io_err, ContainerError, ContainerManager, Inner, KILL_WAIT};

/// What [`ContainerManager::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOpenReport {
    /// Leftovers of interrupted creations and removals, deleted.
    pub removed: Vec<PathBuf>,
    /// Containers whose process was gone without an exit status; recorded
    /// as exited with `lost: true`.
    pub lost: Vec<String>,
    /// Entries that are not containers (bad names); left alone.
    pub unrecognized: Vec<PathBuf>,
}

impl ContainerManager {
    /// Removes leftovers of interrupted creations and removals (staging
    /// and trash dirs, a container dir without its spec) while the worker
    /// runs. Safe at any moment: creation and removal hold the lock taken
    /// here, so what is found under it is nobody's work in progress.
    pub fn sweep_leftovers(&self) -> Result<Vec<PathBuf>, ContainerError> {
        let inner = &self.inner;
        let _ops = inner.lock();
        let mut removed = Vec::new();
        let entries =
            fs::read_dir(&inner.root).map_err(io_err(format!("list {}", inner.root.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let leftover = name.starts_with(CREATING_PREFIX)
                || name.starts_with(DESTROYING_PREFIX)
                || (!name.starts_with('.')
                    && hangar_volumes::validate_handle(&name).is_ok()
                    && path.is_dir()
                    && !path.join(store::SPEC_FILE).exists());
            if !leftover {
                continue;
            }
            let meta: Option<Meta> = store::read_json(&path.join(store::META_FILE)).unwrap_or(None);
            if let Some(cg) = meta.as_ref().and_then(|m| m.cgroup.as_ref()) {
                inner.runtime.kill_cgroup(cg, KILL_WAIT);
                if let Err(e) = inner.runtime.remove_cgroup(cg, Duration::from_secs(2)) {
                    tracing::warn!(error = %e, "cannot remove a container leftover's cgroup");
                }
            }
            fs::remove_dir_all(&path).map_err(io_err(format!("remove {}", path.display())))?;
            tracing::info!(path = %path.display(), "removed a container leftover");
            removed.push(path);
        }
        Ok(removed)
    }
}

impl Inner {
    /// Cleans up after a worker that died mid-operation.
    pub(super) fn recover(&self) -> Result<ContainerOpenReport, ContainerError> {
        let mut report = ContainerOpenReport::default();
        let entries =
            fs::read_dir(&self.root).map_err(io_err(format!("list {}", self.root.display())))?;
        let mut handles = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                report.unrecognized.push(path);
                continue;
            };
            let half_made = name.starts_with(CREATING_PREFIX)
                || name.starts_with(DESTROYING_PREFIX)
                || (!name.starts_with('.')
                    && hangar_volumes::validate_handle(&name).is_ok()
                    && !path.join(store::SPEC_FILE).exists());
            if half_made {
                let meta: Option<Meta> =
                    store::read_json(&path.join(store::META_FILE)).unwrap_or(None);
                if let Some(cg) = meta.as_ref().and_then(|m| m.cgroup.as_ref()) {
                    self.runtime.kill_cgroup(cg, KILL_WAIT);
                    if let Err(e) = self.runtime.remove_cgroup(cg, Duration::from_secs(2)) {
                        tracing::warn!(error = %e, "cannot remove a half-made container's cgroup");
                    }
                }
                fs::remove_dir_all(&path).map_err(io_err(format!("remove {}", path.display())))?;
                report.removed.push(path);
            } else if name.starts_with('.') {
                // runc's state dir.
            } else if hangar_volumes::validate_handle(&name).is_err() {
                report.unrecognized.push(path);
            } else {
                handles.push(name);
            }
        }
        let mut live = std::collections::BTreeSet::new();
        for handle in handles {
            let Some(rec) = self.load(&handle)? else {
                continue;
            };
            if rec.dir.join(store::RESULT_FILE).exists() {
                live.insert(handle);
                continue;
            }
            // A wrapper started just before the worker died, pid unwritten.
            if self.wrapper_pid(&rec.dir).is_none() {
                if let Some(pid) = self.runtime.find_wrapper(&rec.dir) {
                    tracing::info!(%handle, pid, "found the running wrapper of a container without a pid file");
                    let path = rec.dir.join(store::PID_FILE);
                    store::write_atomic(&path, format!("{pid}\n").as_bytes())
                        .map_err(io_err(format!("write {}", path.display())))?;
                }
            }
            let c = self.status(&rec)?;
            if c.exit.as_ref().is_some_and(|e| e.lost) {
                report.lost.push(handle.clone());
            }
            live.insert(handle);
        }
        // Roots of containers that are gone, and of resource actions (none
        // runs yet).
        if self.features().roots {
            report.removed.extend(self.runtime.sweep_roots(&live));
        }
        // Networks of containers that ended while no worker ran (their
        // exit was not seen, so not released) are kept for the running
        // ones only.
        if self.features().network.is_some() {
            let running: std::collections::BTreeSet<String> = live
                .iter()
                .filter(|h| !self.dir(h).join(store::RESULT_FILE).exists())
                .cloned()
                .collect();
            self.runtime.sweep_networks(&running);
        }
        Ok(report)
    }
}
