//! The worker watching itself: its memory (its cgroup's, or the host's) and
//! its disk against thresholds, and a self-check on a timer (write a file in
//! the work dir, run a trivial container, reach web). What it finds goes to
//! web with every heartbeat and answers the health endpoint.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_api::containers::{ContainerSpec, Runtime};
use hangar_api::WorkerCondition;
use hangar_core::pressure::{assess, with_full_disk, Levels, Pressure, Readings, Thresholds};

use crate::containers::ContainerManager;

/// What the worker is configured to watch for.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// The memory the worker may use; `None` reads its cgroup limit, else
    /// the host's memory.
    pub memory_limit: Option<u64>,
    pub memory_thresholds: Thresholds,
    pub disk_thresholds: Thresholds,
    pub check_interval: Duration,
    /// Web counts as unreachable after this long without an accepted
    /// heartbeat.
    pub web_timeout: Duration,
    /// The memory limit of a container whose task sets none.
    pub default_container_memory: Option<u64>,
}

/// The latest findings, shared by the agent loop and the health endpoint.
#[derive(Debug)]
pub struct Health {
    state: Mutex<WorkerCondition>,
    /// Each resource's pressure after the last check, for hysteresis.
    levels: Mutex<Levels>,
    /// Unix millis of the last heartbeat web accepted.
    last_web_contact: AtomicI64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::new(WorkerCondition {
                pressure: Pressure::None,
                pressure_reason: None,
                healthy: true,
                unhealthy_reason: None,
                memory_used: 0,
                memory_limit: 0,
                memory_reserved: 0,
                disk_used: 0,
                disk_total: 0,
            }),
            levels: Mutex::new(Levels::default()),
            last_web_contact: AtomicI64::new(now_ms()),
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Health {
    pub fn condition(&self) -> WorkerCondition {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn pressure(&self) -> Pressure {
        self.condition().pressure
    }

    pub fn web_answered(&self) {
        self.last_web_contact.store(now_ms(), Ordering::Relaxed);
    }

    fn set(&self, c: WorkerCondition) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = c;
    }
}

/// One round of measuring and checking; updates `health`.
pub async fn check_once(
    health: &Health,
    config: &HealthConfig,
    work_dir: &Path,
    containers: &Arc<ContainerManager>,
) {
    let (memory_used, memory_limit) = read_memory(config.memory_limit);
    let (disk_used, disk_total) = read_disk(work_dir);
    let readings = Readings {
        memory_used,
        memory_limit,
        disk_used,
        disk_total,
    };
    let before_levels = *health.levels.lock().unwrap_or_else(|p| p.into_inner());
    let mut problems = Vec::new();
    let mut no_room = None;
    for probe in [
        probe_work_dir(work_dir).await,
        probe_container(containers).await,
    ] {
        if let Err(failed) = probe {
            if failed.no_room {
                no_room.get_or_insert("the health check's probe");
            }
            problems.push(failed.message);
        }
    }
    // A probe that found no room is as sure a sign of a full disk as a
    // result that could not be written: the reserve is given up now (and
    // the change logged once), whichever write met the full disk first.
    if let Some(what) = no_room {
        let d = containers.clone();
        let _ = tokio::task::spawn_blocking(move || d.disk().release(what)).await;
    }
    // A full disk (the reserve given up, or less than it left) is hard
    // pressure with its own reason, so web places nothing here; the reserve
    // comes back, and the pressure goes, once space is freed.
    let reserve = containers.clone();
    let (disk_full, disk_free) = tokio::task::spawn_blocking(move || {
        let d = reserve.disk();
        let full = !d.restore() || d.check_full();
        (full, d.free_bytes())
    })
    .await
    .unwrap_or((false, 0));
    let assessment = with_full_disk(
        assess(
            &readings,
            &config.memory_thresholds,
            &config.disk_thresholds,
            before_levels,
        ),
        disk_full,
        disk_free,
    );
    *health.levels.lock().unwrap_or_else(|p| p.into_inner()) = assessment.levels;
    let (pressure, pressure_reason) = (assessment.pressure, assessment.reason);
    containers.set_memory_policy(Some(memory_limit), config.default_container_memory);
    let m = containers.clone();
    let memory_reserved = tokio::task::spawn_blocking(move || m.reserved_memory().unwrap_or(0))
        .await
        .unwrap_or(0);
    let silent = now_ms() - health.last_web_contact.load(Ordering::Relaxed);
    if silent > config.web_timeout.as_millis() as i64 {
        problems.push(format!(
            "web has not answered for {}",
            hangar_core::lifecycle::human_ms(silent)
        ));
    }
    let before = health.condition();
    let healthy = problems.is_empty();
    let unhealthy_reason = (!healthy).then(|| problems.join("; "));
    if before.healthy != healthy || before.pressure != pressure {
        tracing::warn!(
            healthy,
            reason = unhealthy_reason.as_deref().unwrap_or(""),
            pressure = pressure.as_str(),
            pressure_reason = pressure_reason.as_deref().unwrap_or(""),
            "worker condition changed"
        );
    }
    health.set(WorkerCondition {
        pressure,
        pressure_reason,
        healthy,
        unhealthy_reason,
        memory_used,
        memory_limit,
        memory_reserved,
        disk_used,
        disk_total,
    });
}

/// A self-check that failed: what to report, and whether it failed for want
/// of room (which makes the disk count as full).
struct ProbeFailed {
    message: String,
    no_room: bool,
}

impl ProbeFailed {
    fn other(message: String) -> ProbeFailed {
        ProbeFailed {
            message,
            no_room: false,
        }
    }
}

/// Can the worker create, write, read and remove a file in its work dir?
async fn probe_work_dir(work_dir: &Path) -> Result<(), ProbeFailed> {
    let path = work_dir.join(format!(".health-{}", uuid::Uuid::new_v4().simple()));
    let result = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let written = std::fs::write(&path, b"ok").and_then(|()| std::fs::read(&path));
        // Whatever was made goes, a file left by a failed write too.
        let removed = std::fs::remove_file(&path);
        match written {
            Err(e) => Err(e),
            Ok(back) if back != b"ok" => Err(std::io::Error::other("read back something else")),
            Ok(_) => removed,
        }
    })
    .await
    .map_err(|e| ProbeFailed::other(e.to_string()))?;
    result.map_err(|e| ProbeFailed {
        message: format!("work dir {} is not writable: {e}", work_dir.display()),
        no_room: crate::disk::is_storage_full(&e),
    })
}

/// Can the worker run a trivial container?
async fn probe_container(containers: &Arc<ContainerManager>) -> Result<(), ProbeFailed> {
    let m = containers.clone();
    tokio::task::spawn_blocking(move || {
        let handle = format!("health-{}", uuid::Uuid::new_v4().simple());
        let spec = ContainerSpec {
            handle: handle.clone(),
            runtime: Runtime::Process,
            rootfs_volume: None,
            path: "/bin/sh".into(),
            args: vec!["-c".into(), "exit 0".into()],
            env: Default::default(),
            dir: None,
            mounts: vec![],
            memory_limit_bytes: None,
            cpu_shares: None,
            user: None,
            privileged: false,
        };
        let failed = |e: crate::containers::ContainerError| ProbeFailed {
            message: e.to_string(),
            no_room: e.is_storage_full(),
        };
        let result = m
            .create(spec)
            .map_err(failed)
            .and_then(|_| m.wait(&handle, Duration::from_secs(20)).map_err(failed))
            .and_then(|c| match c.exit {
                Some(exit) if exit.code == Some(0) => Ok(()),
                Some(exit) => Err(ProbeFailed {
                    message: format!("it ended with {exit:?}"),
                    no_room: exit.disk_full,
                }),
                None => Err(ProbeFailed::other("it did not end within 20s".into())),
            });
        if let Err(e) = m.destroy(&handle) {
            // The next report lists it and web has it destroyed.
            tracing::warn!(%handle, error = %e, "cannot destroy the self-check container");
        }
        result.map_err(|f| ProbeFailed {
            message: format!("cannot run a trivial container: {}", f.message),
            ..f
        })
    })
    .await
    .map_err(|e| ProbeFailed::other(e.to_string()))?
}

/// The worker's memory in use (without reclaimable cache) and its limit:
/// its cgroup's when it has a limited one, else the host's. A configured
/// limit overrides the one found.
pub fn read_memory(configured_limit: Option<u64>) -> (u64, u64) {
    let (used, limit) = cgroup_memory().unwrap_or_else(host_memory);
    (used, configured_limit.unwrap_or(limit))
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn stat_field(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// (used, limit) of this process's memory cgroup, if it has a limit.
fn cgroup_memory() -> Option<(u64, u64)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            let dir = PathBuf::from("/sys/fs/cgroup/memory").join(rel);
            let limit = read_u64(&dir.join("memory.limit_in_bytes"))?;
            // The "unlimited" value is a huge page-aligned number.
            if limit >= 1 << 60 {
                return None;
            }
            let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
            let inactive = stat_field(&dir.join("memory.stat"), "total_inactive_file").unwrap_or(0);
            return Some((usage.saturating_sub(inactive), limit));
        }
        if controllers.is_empty() {
            let dir = PathBuf::from("/sys/fs/cgroup").join(rel);
            let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
            let limit: u64 = max.trim().parse().ok()?; // "max" = unlimited
            let current = read_u64(&dir.join("memory.current"))?;
            let inactive = stat_field(&dir.join("memory.stat"), "inactive_file").unwrap_or(0);
            return Some((current.saturating_sub(inactive), limit));
        }
    }
    None
}

fn host_memory() -> (u64, u64) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |key: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    let total = field("MemTotal:");
    (total.saturating_sub(field("MemAvailable:")), total)
}

/// (used, total) bytes of the filesystem holding `dir`.
pub fn read_disk(dir: &Path) -> (u64, u64) {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => {
            // As df counts: space reserved for root is neither used nor
            // available, so it is left out of the total.
            let frag = s.fragment_size();
            let used = s.blocks().saturating_sub(s.blocks_free()) * frag;
            let avail = s.blocks_available() * frag;
            (used, used + avail)
        }
        Err(_) => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_reads_some_memory_and_disk() {
        let (used, limit) = read_memory(None);
        assert!(limit > 0 && used <= limit, "{used} of {limit}");
        assert_eq!(read_memory(Some(42)).1, 42);
        let (used, total) = read_disk(Path::new("/"));
        assert!(total > 0 && used <= total);
    }

    #[tokio::test]
    async fn the_work_dir_probe_leaves_nothing_and_tells_no_room_from_other_failures() {
        let dir = tempfile::tempdir().unwrap();
        assert!(probe_work_dir(dir.path()).await.is_ok());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let gone = dir.path().join("gone");
        let failed = probe_work_dir(&gone).await.unwrap_err();
        assert!(!failed.no_room, "{}", failed.message);
        assert!(
            failed.message.contains("is not writable"),
            "{}",
            failed.message
        );
    }

    #[test]
    fn memory_stat_fields_are_read_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("memory.stat");
        std::fs::write(&p, "cache 10\ntotal_inactive_file 4096\ninactive_file 7\n").unwrap();
        assert_eq!(stat_field(&p, "total_inactive_file"), Some(4096));
        assert_eq!(stat_field(&p, "inactive_file"), Some(7));
        assert_eq!(stat_field(&p, "missing"), None);
    }
}
