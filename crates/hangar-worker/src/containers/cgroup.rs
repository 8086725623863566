//! Memory cgroups for containers: one per container under `hangar/`, made
//! before the process starts, read for its OOM counter after it ends, and
//! removed then.
//!
//! * cgroup v1 (also the hybrid layout): `<root>/memory/hangar/<name>`,
//!   `memory.limit_in_bytes`, OOM kills in `memory.oom_control`.
//! * cgroup v2: `<root>/hangar/<name>`, `memory.max`, OOM kills in
//!   `memory.events`, after `+memory` is enabled in the parents'
//!   `cgroup.subtree_control`.
//!
//! runc gets a child `<name>/ctr` as its `cgroupsPath`, so the limit is ours
//! and survives runc deleting its own cgroup. On v1 the kernel counts an OOM
//! kill only in the victim's own cgroup (v2 propagates it to the parents),
//! so the counter is read from both and the larger wins.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use std::{fs, io};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The parent of every container's cgroup (shared by all workers of a host,
/// never removed).
pub(crate) const PARENT: &str = "hangar";
/// The child cgroup runc is given.
pub(crate) const RUNC_CHILD: &str = "ctr";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CgroupVersion {
    V1,
    V2,
}

/// One container's cgroup, as persisted in its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CgroupRef {
    pub version: CgroupVersion,
    /// Relative to the hierarchy's root: `hangar/<name>`.
    pub path: String,
}

/// Where cgroups are mounted (normally `/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub(crate) struct Cgroups {
    root: PathBuf,
}

/// The value of the `oom_kill` line in v1 `memory.oom_control` or v2
/// `memory.events`.
pub(crate) fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("oom_kill"), Some(n)) => n.parse().ok(),
            _ => None,
        }
    })
}

fn has_memory(controllers: &str) -> bool {
    controllers
        .split_whitespace()
        .any(|c| c.trim_start_matches('+') == "memory")
}

impl Cgroups {
    pub(super) fn new(root: &Path) -> Cgroups {
        Cgroups {
            root: root.to_path_buf(),
        }
    }

    /// Finds a memory controller this process can make cgroups in, or says
    /// why there is none: none at all, or one mounted read-only (an
    /// unprivileged container) or not ours to write (not root).
    pub(super) fn detect(&self) -> Result<CgroupVersion, String> {
        let version = self.find()?;
        let mem = self.memory_root(version);
        nix::unistd::access(&mem, nix::unistd::AccessFlags::W_OK).map_err(|e| {
            format!(
                "the memory cgroup at {} is not writable ({e}); in a container the worker must be privileged to make cgroups",
                mem.display()
            )
        })?;
        Ok(version)
    }

    /// Finds the memory controller, or says why there is none.
    fn find(&self) -> Result<CgroupVersion, String> {
        let root = &self.root;
        let unified = root.join("cgroup.controllers");
        if let Ok(controllers) = fs::read_to_string(&unified) {
            return if has_memory(&controllers) {
                Ok(CgroupVersion::V2)
            } else {
                Err(format!(
                    "cgroup v2 at {} does not offer the memory controller",
                    root.display()
                ))
            };
        }
        if root.join("memory").join("cgroup.procs").is_file() {
            return Ok(CgroupVersion::V1);
        }
        Err(format!(
            "no memory cgroup at {} (neither cgroup v2 nor a v1 memory hierarchy)",
            root.display()
        ))
    }

    fn memory_root(&self, version: CgroupVersion) -> PathBuf {
        match version {
            CgroupVersion::V1 => self.root.join("memory"),
            CgroupVersion::V2 => self.root.clone(),
        }
    }

    /// The directory of `cg` in the memory hierarchy.
    pub(super) fn dir(&self, cg: &CgroupRef) -> PathBuf {
        self.memory_root(cg.version).join(&cg.path)
    }

    /// Where the wrapper writes its pid to join `cg`.
    pub(super) fn procs_file(&self, cg: &CgroupRef) -> PathBuf {
        self.dir(cg).join("cgroup.procs")
    }

    /// The cgroup `hangar/<name>` of a container.
    pub(super) fn reference(version: CgroupVersion, name: &str) -> CgroupRef {
        CgroupRef {
            version,
            path: format!("{PARENT}/{name}"),
        }
    }

    /// Makes the cgroup with its memory limit (none: unlimited, still
    /// counted). A half-made cgroup is removed again on failure.
    pub(super) fn create(&self, cg: &CgroupRef, limit: Option<u64>) -> Result<(), String> {
        let mem = self.memory_root(cg.version);
        let dir = self.dir(cg);
        let fail = |what: &str, path: &Path, e: io::Error| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (the worker must run as root to make cgroups)"
            } else {
                ""
            };
            format!("cannot {what} {}: {e}{hint}", path.display())
        };
        if cg.version == CgroupVersion::V2 {
            enable_memory(&mem).map_err(|e| fail("enable +memory in", &mem, e))?;
        }
        let parent = mem.join(PARENT);
        fs::create_dir_all(&parent).map_err(|e| fail("create cgroup", &parent, e))?;
        if cg.version == CgroupVersion::V2 {
            enable_memory(&parent).map_err(|e| fail("enable +memory in", &parent, e))?;
        }
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("create cgroup", &dir, e)),
        }
        let (limit_file, swap) = match cg.version {
            CgroupVersion::V1 => ("memory.limit_in_bytes", ("memory.swappiness", "0")),
            CgroupVersion::V2 => ("memory.max", ("memory.swap.max", "0")),
        };
        if let Some(limit) = limit {
            let file = dir.join(limit_file);
            if let Err(e) = fs::write(&file, limit.to_string()) {
                let message = fail("set the memory limit in", &file, e);
                if let Err(e) = fs::remove_dir(&dir) {
                    tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove a cgroup that could not be limited");
                }
                return Err(message);
            }
            // No swapping past the limit where the kernel lets us say so.
            let swap_file = dir.join(swap.0);
            if swap_file.exists() {
                if let Err(e) = fs::write(&swap_file, swap.1) {
                    tracing::debug!(file = %swap_file.display(), error = %e, "cannot turn swap off for the cgroup");
                }
            }
        }
        Ok(())
    }

    /// OOM kills counted in `cg` and in runc's child of it, the larger.
    /// `None` when neither can be read (already removed).
    pub(super) fn oom_kills(&self, cg: &CgroupRef) -> Option<u64> {
        let file = match cg.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let dir = self.dir(cg);
        [dir.join(file), dir.join(RUNC_CHILD).join(file)]
            .iter()
            .filter_map(|f| fs::read_to_string(f).ok())
            .filter_map(|text| parse_oom_kill(&text))
            .max()
    }

    fn pids(&self, cg: &CgroupRef) -> Vec<i32> {
        let dir = self.dir(cg);
        [
            dir.join("cgroup.procs"),
            dir.join(RUNC_CHILD).join("cgroup.procs"),
        ]
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
    }

    /// SIGKILLs every process in `cg` (and runc's child) until none is left
    /// or `within` passes. True when it is empty.
    pub(super) fn kill_all(&self, cg: &CgroupRef, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        if cg.version == CgroupVersion::V2 {
            // cgroup.kill (Linux 5.14) kills the whole subtree at once.
            // Older kernels lack it: the loop below kills each process.
            if let Err(e) = fs::write(self.dir(cg).join("cgroup.kill"), "1") {
                tracing::debug!(error = %e, "cgroup.kill unavailable; killing process by process");
            }
        }
        loop {
            let pids = self.pids(cg);
            if pids.is_empty() {
                return true;
            }
            for pid in pids {
                // One that ended meanwhile (ESRCH) is what we want; any
                // other is seen again on the next pass and counted by the
                // deadline.
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Removes `cg` and runc's child of it. On v1 runc made its child in
    /// every hierarchy (cpu, pids, ...), and `hangar/<name>` along with it,
    /// so those go too. Not there is fine.
    pub(super) fn remove(&self, cg: &CgroupRef, within: Duration) -> Result<(), String> {
        if cg.version == CgroupVersion::V1 {
            if let Ok(entries) = fs::read_dir(&self.root) {
                for entry in entries.flatten() {
                    let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                    if is_dir && entry.file_name() != "memory" {
                        let dir = entry.path().join(&cg.path);
                        for d in [dir.join(RUNC_CHILD), dir] {
                            if let Err(e) = fs::remove_dir(&d) {
                                if e.kind() != std::io::ErrorKind::NotFound {
                                    tracing::warn!(cgroup = %d.display(), error = %e, "cannot remove a cgroup");
                                }
                            }
                        }
                    }
                }
            }
        }
        let dir = self.dir(cg);
        let deadline = Instant::now() + within;
        // A child left behind makes the parent's removal fail, and that
        // failure is the one returned.
        let _ = rmdir_until(&dir.join(RUNC_CHILD), deadline);
        rmdir_until(&dir, deadline)
            .map_err(|e| format!("cannot remove cgroup {}: {e}", dir.display()))
    }
}

/// rmdir, retrying while the cgroup is busy (killed processes still
/// leaving); a missing dir counts as removed.
fn rmdir_until(dir: &Path, deadline: Instant) -> io::Result<()> {
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Enables the memory controller for the children of a v2 cgroup.
fn enable_memory(dir: &Path) -> io::Result<()> {
    let control = dir.join("cgroup.subtree_control");
    if has_memory(&fs::read_to_string(&control)?) {
        return Ok(());
    }
    fs::write(&control, "+memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_kill_count_is_read_from_v1_oom_control() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_oom_kill(text), Some(3));
    }

    #[test]
    fn the_oom_kill_count_is_read_from_v2_memory_events_not_oom_group_kill() {
        let text = "low 0\nhigh 0\nmax 41\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(text), Some(1));
        let group_first = "oom_group_kill 7\noom_kill 0\n";
        assert_eq!(parse_oom_kill(group_first), Some(0));
    }

    #[test]
    fn a_kernel_without_the_counter_gives_none() {
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n"), None);
        assert_eq!(parse_oom_kill(""), None);
    }

    #[test]
    fn v2_is_detected_by_its_controllers_file_and_needs_memory() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("cgroup.controllers"), "cpu io pids\n").unwrap();
        let err = Cgroups::new(root.path()).detect().unwrap_err();
        assert!(err.contains("memory controller"), "{err}");
        fs::write(root.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert_eq!(Cgroups::new(root.path()).detect(), Ok(CgroupVersion::V2));
    }

    #[test]
    fn v1_is_detected_by_a_memory_hierarchy_and_nothing_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        let none = Cgroups::new(root.path()).detect().unwrap_err();
        assert!(none.contains("no memory cgroup"), "{none}");
        fs::create_dir(root.path().join("memory")).unwrap();
        fs::write(root.path().join("memory/cgroup.procs"), "").unwrap();
        assert_eq!(Cgroups::new(root.path()).detect(), Ok(CgroupVersion::V1));
    }

    #[test]
    fn a_v2_cgroup_enables_memory_in_its_parents_and_sets_memory_max() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::write(r.join("cgroup.controllers"), "memory pids").unwrap();
        fs::write(r.join("cgroup.subtree_control"), "pids").unwrap();
        fs::create_dir(r.join(PARENT)).unwrap();
        fs::write(r.join(PARENT).join("cgroup.subtree_control"), "").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(cgroups.detect().unwrap(), "build-1-abc");
        assert_eq!(cg.path, "hangar/build-1-abc");
        cgroups.create(&cg, Some(32 << 20)).unwrap();
        assert!(fs::read_to_string(r.join("cgroup.subtree_control"))
            .unwrap()
            .contains("memory"));
        assert!(fs::read_to_string(r.join("hangar/cgroup.subtree_control"))
            .unwrap()
            .contains("memory"));
        let max = fs::read_to_string(r.join("hangar/build-1-abc/memory.max")).unwrap();
        assert_eq!(max, "33554432");
        assert_eq!(
            cgroups.procs_file(&cg),
            r.join("hangar/build-1-abc/cgroup.procs")
        );
    }

    #[test]
    fn a_v1_cgroup_lives_in_the_memory_hierarchy_with_limit_in_bytes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir(r.join("memory")).unwrap();
        fs::write(r.join("memory/cgroup.procs"), "").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(cgroups.detect().unwrap(), "t-1");
        cgroups.create(&cg, Some(64 << 20)).unwrap();
        let limit = fs::read_to_string(r.join("memory/hangar/t-1/memory.limit_in_bytes")).unwrap();
        assert_eq!(limit, "67108864");
        // The counter is read from runc's child too, and the larger wins.
        fs::create_dir(r.join("memory/hangar/t-1/ctr")).unwrap();
        fs::write(
            r.join("memory/hangar/t-1/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        fs::write(
            r.join("memory/hangar/t-1/ctr/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(cgroups.oom_kills(&cg), Some(2));
    }
}
