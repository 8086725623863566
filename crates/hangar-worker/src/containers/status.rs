//! Reading containers from disk, and noticing how they ended: the wrapper's
//! exit file becomes `result.json`, recorded once, with the OOM counter
//! read before the cgroup goes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use hangar_api::containers::{Container, ContainerExit, ContainerSpec};

use super::exit::{parse_exit_file, RawExit};
use super::store::{self, Meta};
use super::{io_err, ContainerError, Inner, Record, STATE_EXITED, STATE_RUNNING};
use crate::disk::is_storage_full;

impl Inner {
    pub(super) fn dir(&self, handle: &str) -> PathBuf {
        self.root.join(handle)
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn notify_ended(&self) {
        let (lock, ended) = &self.ended;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        ended.notify_all();
    }

    pub(super) fn handles(&self) -> Result<Vec<String>, ContainerError> {
        let entries =
            fs::read_dir(&self.root).map_err(io_err(format!("list {}", self.root.display())))?;
        Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect())
    }

    /// The container's record; `None` when there is none (or the handle
    /// could not name one).
    pub(super) fn load(&self, handle: &str) -> Result<Option<Record>, ContainerError> {
        if hangar_volumes::validate_handle(handle).is_err() {
            return Ok(None);
        }
        let dir = self.dir(handle);
        let corrupt = |reason: String| ContainerError::Corrupt {
            handle: handle.to_string(),
            reason,
        };
        let spec: ContainerSpec = match store::read_json(&dir.join(store::SPEC_FILE)) {
            Ok(Some(spec)) => spec,
            Ok(None) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(corrupt(format!("spec.json: {e}")))
            }
            // The directory itself is gone (destroyed meanwhile).
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Ok(None),
            Err(e) => return Err(io_err(format!("read {}", dir.display()))(e)),
        };
        let meta: Meta = store::read_json(&dir.join(store::META_FILE))
            .map_err(|e| corrupt(format!("meta.json: {e}")))?
            .ok_or_else(|| corrupt("meta.json is missing".into()))?;
        Ok(Some(Record {
            handle: handle.to_string(),
            dir,
            spec,
            meta,
        }))
    }

    pub(super) fn container(&self, rec: &Record, exit: Option<ContainerExit>) -> Container {
        let log_bytes = fs::metadata(rec.dir.join(store::LOG_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        Container {
            handle: rec.handle.clone(),
            runtime: rec.spec.runtime,
            state: if exit.is_some() {
                STATE_EXITED
            } else {
                STATE_RUNNING
            },
            started_at: rec.meta.started_at,
            exit,
            log_bytes,
        }
    }

    pub(super) fn read_result(
        &self,
        rec: &Record,
    ) -> Result<Option<ContainerExit>, ContainerError> {
        store::read_json(&rec.dir.join(store::RESULT_FILE)).map_err(|e| ContainerError::Corrupt {
            handle: rec.handle.clone(),
            reason: format!("result.json: {e}"),
        })
    }

    /// The wrapper's status, once it has written one. A garbled file is
    /// reported and treated as no status (the container counts as lost).
    pub(super) fn read_exit(&self, rec: &Record) -> Option<RawExit> {
        let path = rec.dir.join(store::EXIT_FILE);
        match store::read_optional(&path) {
            Ok(Some(text)) => match parse_exit_file(&text) {
                Ok(raw) => raw,
                Err(e) => {
                    tracing::warn!(handle = %rec.handle, error = %e, "unreadable exit file");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(handle = %rec.handle, error = %e, "cannot read exit file");
                None
            }
        }
    }

    pub(super) fn wrapper_pid(&self, dir: &Path) -> Option<u32> {
        store::read_optional(&dir.join(store::PID_FILE))
            .ok()
            .flatten()
            .and_then(|t| t.trim().parse().ok())
    }

    pub(super) fn wrapper_alive(&self, rec: &Record) -> bool {
        self.wrapper_pid(&rec.dir)
            .is_some_and(|pid| self.runtime.is_wrapper_of(pid, &rec.dir))
    }

    /// Running, or exited (recording the exit if nobody has yet).
    pub(super) fn status(&self, rec: &Record) -> Result<Container, ContainerError> {
        if let Some(exit) = self.read_result(rec)? {
            return Ok(self.container(rec, Some(exit)));
        }
        let raw = self.read_exit(rec);
        if raw.is_none() && self.wrapper_alive(rec) {
            return Ok(self.container(rec, None));
        }
        // Ended, or seems lost: decide under the lock, where a creation in
        // progress (no pid file yet) has finished.
        let _ops = self.lock();
        if !rec.dir.exists() {
            return Err(ContainerError::NotFound {
                handle: rec.handle.clone(),
            });
        }
        if let Some(exit) = self.read_result(rec)? {
            return Ok(self.container(rec, Some(exit)));
        }
        let raw = self.read_exit(rec);
        if raw.is_none() && self.wrapper_alive(rec) {
            return Ok(self.container(rec, None));
        }
        let exit = self.record_exit(rec, raw)?;
        Ok(self.container(rec, Some(exit)))
    }

    /// Writes `result.json` (the OOM counter read first), then cleans up
    /// the cgroup and runc's record. Called with the ops lock held.
    pub(super) fn record_exit(
        &self,
        rec: &Record,
        raw: Option<RawExit>,
    ) -> Result<ContainerExit, ContainerError> {
        let oom_kills = rec
            .meta
            .cgroup
            .as_ref()
            .and_then(|cg| self.runtime.oom_kills(cg))
            .unwrap_or(0);
        let finished_at = fs::metadata(rec.dir.join(store::EXIT_FILE))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .filter(|_| raw.is_some())
            .map(|d| d.as_millis() as i64)
            .unwrap_or_else(store::now_millis);
        let mut exit = ContainerExit {
            code: raw.and_then(RawExit::code),
            signal: raw.and_then(RawExit::signal),
            oom_killed: oom_kills > 0,
            memory_limit_bytes: rec.spec.memory_limit_bytes,
            finished_at,
            lost: raw.is_none(),
            // Read before anything is freed: the disk as the program left it.
            disk_full: self.disk.is_full(),
        };
        let path = rec.dir.join(store::RESULT_FILE);
        let mut written =
            store::write_exclusive(&path, &serde_json::to_vec_pretty(&exit).expect("json"));
        if matches!(&written, Err(e) if is_storage_full(e)) {
            exit.disk_full = true;
            self.disk
                .release(&format!("the result of container {}", rec.handle));
            written =
                store::write_exclusive(&path, &serde_json::to_vec_pretty(&exit).expect("json"));
        }
        let written = match written {
            Ok(w) => w,
            // Even the reserve was taken (the container's leftovers write
            // on): the exit is answered unrecorded, the same on every look,
            // so the step still ends. It is recorded once there is room.
            Err(e) if is_storage_full(&e) => {
                tracing::debug!(handle = %rec.handle, error = %e, "result not recorded: disk full");
                self.release(rec, exit.lost);
                return Ok(exit);
            }
            Err(e) => return Err(io_err(format!("write {}", path.display()))(e)),
        };
        let exit = if written {
            if exit.lost && exit.disk_full {
                tracing::warn!(handle = %rec.handle, "container ended on a full disk without an exit status");
            } else if exit.lost {
                tracing::warn!(handle = %rec.handle, "container process vanished without an exit status; marked lost");
            } else {
                tracing::info!(handle = %rec.handle, code = ?exit.code, signal = ?exit.signal, oom_killed = exit.oom_killed, disk_full = exit.disk_full, "container exited");
            }
            exit
        } else {
            // Another worker process on this dir recorded it first.
            self.read_result(rec)?.unwrap_or(exit)
        };
        self.release(rec, exit.lost);
        Ok(exit)
    }
}
