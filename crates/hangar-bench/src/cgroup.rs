//! A memory cgroup of the chaos harness's own, to get a worker OOM-killed by
//! the kernel: the worker process is moved into it after it starts, a task
//! on that worker joins it and allocates past the limit, and the kernel's
//! OOM killer (told by `oom_score_adj` to prefer the worker, as a pod-level
//! OOM takes the whole pod) kills the worker.
//!
//! cgroup v1: `/sys/fs/cgroup/memory/<name>/` with `memory.limit_in_bytes`
//! and the `oom_kill` count in `memory.oom_control`. cgroup v2:
//! `/sys/fs/cgroup/<name>/` with `memory.max` and `memory.events`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug)]
pub struct MemoryCgroup {
    pub version: Version,
    pub dir: PathBuf,
}

impl MemoryCgroup {
    /// Makes `<name>` in the memory hierarchy, or says why it cannot.
    pub fn create(name: &str) -> Result<MemoryCgroup, String> {
        Self::create_under(Path::new(ROOT), name)
    }

    pub fn create_under(root: &Path, name: &str) -> Result<MemoryCgroup, String> {
        let (version, dir) = if root.join("cgroup.controllers").is_file() {
            let controllers = fs::read_to_string(root.join("cgroup.controllers"))
                .map_err(|e| format!("read cgroup.controllers: {e}"))?;
            if !controllers.split_whitespace().any(|c| c == "memory") {
                return Err("cgroup v2 without the memory controller".into());
            }
            // Children of the root get the memory controller only if the
            // root hands it down.
            let _ = fs::write(root.join("cgroup.subtree_control"), "+memory");
            (Version::V2, root.join(name))
        } else if root.join("memory").join("cgroup.procs").is_file() {
            (Version::V1, root.join("memory").join(name))
        } else {
            return Err(format!(
                "no memory cgroup hierarchy under {}",
                root.display()
            ));
        };
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("create {}: {e}", dir.display())),
        }
        Ok(MemoryCgroup { version, dir })
    }

    /// Sets the memory limit (and no swap beyond it where that can be said).
    pub fn set_limit(&self, bytes: u64) -> Result<(), String> {
        let (limit, swap) = match self.version {
            Version::V1 => ("memory.limit_in_bytes", "memory.swappiness"),
            Version::V2 => ("memory.max", "memory.swap.max"),
        };
        fs::write(self.dir.join(limit), bytes.to_string())
            .map_err(|e| format!("set {limit} in {}: {e}", self.dir.display()))?;
        let _ = fs::write(self.dir.join(swap), "0");
        Ok(())
    }

    /// Moves a process (all its threads) into the cgroup.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        fs::write(self.procs_file(), pid.to_string())
            .map_err(|e| format!("move {pid} into {}: {e}", self.dir.display()))
    }

    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// OOM kills the kernel counted in the cgroup so far.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("oom_kill"))
                .then(|| w.next().and_then(|n| n.parse().ok()))
                .flatten()
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.procs_file())
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills whatever is left in it and removes it. Blocks (up to 5 s).
    // Called once, at the end of a run, after every process was killed.
    #[allow(clippy::disallowed_methods)]
    pub fn remove(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            if Instant::now() > deadline {
                return Err(format!("{} still has processes", self.dir.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("remove {}: {e}", self.dir.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Makes the kernel's OOM killer prefer (`1000`) or spare (`-1000`) a process.
pub fn set_oom_score_adj(pid: u32, value: i32) -> Result<(), String> {
    fs::write(format!("/proc/{pid}/oom_score_adj"), value.to_string())
        .map_err(|e| format!("set oom_score_adj of {pid}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hierarchy_without_memory_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let err = MemoryCgroup::create_under(dir.path(), "x").unwrap_err();
        assert!(err.contains("no memory cgroup hierarchy"), "{err}");
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io").unwrap();
        let err = MemoryCgroup::create_under(dir.path(), "x").unwrap_err();
        assert!(err.contains("without the memory controller"), "{err}");
    }

    #[test]
    fn oom_kills_are_read_from_the_version_s_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("memory")).unwrap();
        std::fs::write(dir.path().join("memory").join("cgroup.procs"), "").unwrap();
        let cg = MemoryCgroup::create_under(dir.path(), "chaos").unwrap();
        assert_eq!(cg.version, Version::V1);
        std::fs::write(
            cg.dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(2));
    }
}
