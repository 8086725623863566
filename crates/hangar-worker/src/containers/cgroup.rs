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
//! A container with CPU shares (`container_limits.cpu`) gets them in the cpu
//! controller too:
//!
//! * cgroup v1: `<root>/cpu/hangar/<name>/cpu.shares`, a second cgroup the
//!   process runtime's wrapper joins along with the memory one.
//! * cgroup v2: `cpu.weight` of the same `<root>/hangar/<name>`, converted
//!   from shares ([`cpu_weight`]), after `+cpu` is enabled in the parents.
//!
//! runc gets a child `<name>/ctr` as its `cgroupsPath`, so the limits are
//! ours and survive runc deleting its own cgroup. The CPU weight counts
//! against the cgroup's siblings, the other containers' `hangar/<name>`, so
//! it is set on ours, not only on runc's child (which has no sibling). On v1 the kernel counts an OOM
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

fn has_controller(controllers: &str, name: &str) -> bool {
    controllers
        .split_whitespace()
        .any(|c| c.trim_start_matches('+') == name)
}

/// The cgroup v2 `cpu.weight` (1 to 10000, default 100) for CPU shares (2 to
/// 262144, default 1024), as runc (opencontainers/cgroups
/// `ConvertCPUSharesToCgroupV2Value`, since runc 1.3.2) and crun (1.23)
/// convert them: a quadratic in log2(shares) through the three points
/// min→min, default→default and max→max. Their earlier linear formula,
/// `1 + ((shares - 2) * 9999) / 262142`, gave the default 1024 shares a
/// weight of 39, so a task asking for the default ran at well under half the
/// weight of one asking for nothing (kubernetes/kubernetes#131216).
/// Shares outside 2..=262144 are clamped here; the spec check refuses them
/// before they get this far.
pub(crate) fn cpu_weight(shares: u64) -> u64 {
    if shares <= 2 {
        return 1;
    }
    if shares >= 262_144 {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    (10f64.powf(exponent).ceil() as u64).clamp(1, 10_000)
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
            return if has_controller(&controllers, "memory") {
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

    /// Whether CPU shares can be set in cgroups made here (`version` being
    /// what [`Cgroups::detect`] found), or why not: no cpu controller
    /// offered (v2), no cpu hierarchy mounted (v1), or one not ours to
    /// write.
    pub(super) fn detect_cpu(&self, version: CgroupVersion) -> Result<(), String> {
        match version {
            CgroupVersion::V2 => {
                let file = self.root.join("cgroup.controllers");
                let controllers = fs::read_to_string(&file)
                    .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                if !has_controller(&controllers, "cpu") {
                    return Err(format!(
                        "cgroup v2 at {} does not offer the cpu controller",
                        self.root.display()
                    ));
                }
                Ok(())
            }
            CgroupVersion::V1 => {
                let cpu = self.root.join("cpu");
                if !cpu.join("cgroup.procs").is_file() {
                    return Err(format!("no cgroup v1 cpu hierarchy at {}", cpu.display()));
                }
                nix::unistd::access(&cpu, nix::unistd::AccessFlags::W_OK).map_err(|e| {
                    format!(
                        "the cpu cgroup at {} is not writable ({e}); in a container the worker must be privileged to make cgroups",
                        cpu.display()
                    )
                })
            }
        }
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

    /// The directory of `cg` in the cpu controller: its own hierarchy on v1,
    /// the one cgroup on v2.
    pub(super) fn cpu_dir(&self, cg: &CgroupRef) -> PathBuf {
        match cg.version {
            CgroupVersion::V1 => self.root.join("cpu").join(&cg.path),
            CgroupVersion::V2 => self.dir(cg),
        }
    }

    /// Where the wrapper writes its pid to join `cg`: the memory cgroup,
    /// and on v1 also the cpu one when `cpu` (the container has shares).
    pub(super) fn procs_files(&self, cg: &CgroupRef, cpu: bool) -> Vec<PathBuf> {
        let mut files = vec![self.dir(cg).join("cgroup.procs")];
        if cpu && cg.version == CgroupVersion::V1 {
            files.push(self.cpu_dir(cg).join("cgroup.procs"));
        }
        files
    }

    /// The cgroup `hangar/<name>` of a container.
    pub(super) fn reference(version: CgroupVersion, name: &str) -> CgroupRef {
        CgroupRef {
            version,
            path: format!("{PARENT}/{name}"),
        }
    }

    /// Makes the cgroup with its memory limit (none: unlimited, still
    /// counted) and CPU shares (none: the default weight). A half-made
    /// cgroup is removed again on failure.
    pub(super) fn create(
        &self,
        cg: &CgroupRef,
        limit: Option<u64>,
        cpu_shares: Option<u64>,
    ) -> Result<(), String> {
        let mem = self.memory_root(cg.version);
        let dir = self.dir(cg);
        let v2 = cg.version == CgroupVersion::V2;
        // On v2 the controllers a child uses are enabled in every parent.
        let mut controllers = vec!["memory"];
        if cpu_shares.is_some() {
            controllers.push("cpu");
        }
        if v2 {
            enable(&mem, &controllers)
                .map_err(|(c, e)| fail(&format!("enable +{c} in"), &mem, e))?;
        }
        let parent = mem.join(PARENT);
        fs::create_dir_all(&parent).map_err(|e| fail("create cgroup", &parent, e))?;
        if v2 {
            enable(&parent, &controllers)
                .map_err(|(c, e)| fail(&format!("enable +{c} in"), &parent, e))?;
        }
        mkdir(&dir).map_err(|e| fail("create cgroup", &dir, e))?;
        if let Err(message) = self.set_limits(cg, limit, cpu_shares) {
            for d in [self.cpu_dir(cg), dir] {
                if let Err(e) = fs::remove_dir(&d) {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::warn!(cgroup = %d.display(), error = %e, "cannot remove a cgroup that could not be limited");
                    }
                }
            }
            return Err(message);
        }
        Ok(())
    }

    /// Writes the limits into a freshly made cgroup (and makes its v1 cpu
    /// twin).
    fn set_limits(
        &self,
        cg: &CgroupRef,
        limit: Option<u64>,
        cpu_shares: Option<u64>,
    ) -> Result<(), String> {
        let dir = self.dir(cg);
        let (limit_file, swap) = match cg.version {
            CgroupVersion::V1 => ("memory.limit_in_bytes", ("memory.swappiness", "0")),
            CgroupVersion::V2 => ("memory.max", ("memory.swap.max", "0")),
        };
        if let Some(limit) = limit {
            let file = dir.join(limit_file);
            fs::write(&file, limit.to_string())
                .map_err(|e| fail("set the memory limit in", &file, e))?;
            // No swapping past the limit where the kernel lets us say so.
            let swap_file = dir.join(swap.0);
            if swap_file.exists() {
                if let Err(e) = fs::write(&swap_file, swap.1) {
                    tracing::debug!(file = %swap_file.display(), error = %e, "cannot turn swap off for the cgroup");
                }
            }
        }
        if let Some(shares) = cpu_shares {
            let cpu = self.cpu_dir(cg);
            let (file, value) = match cg.version {
                CgroupVersion::V1 => {
                    let parent = self.root.join("cpu").join(PARENT);
                    fs::create_dir_all(&parent).map_err(|e| fail("create cgroup", &parent, e))?;
                    mkdir(&cpu).map_err(|e| fail("create cgroup", &cpu, e))?;
                    (cpu.join("cpu.shares"), shares)
                }
                CgroupVersion::V2 => (cpu.join("cpu.weight"), cpu_weight(shares)),
            };
            fs::write(&file, value.to_string())
                .map_err(|e| fail("set the CPU shares in", &file, e))?;
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

    /// Whether memory use in `cg` ever reached its limit (v1's
    /// `memory.failcnt`; v2's `max` events). With a process killed by
    /// SIGKILL this tells an OOM kill where the kill counter is gone: on
    /// v1 it is kept only in the victim's cgroup, which `runc run` removes
    /// as the container ends.
    pub(super) fn hit_limit(&self, cg: &CgroupRef) -> bool {
        let dir = self.dir(cg);
        match cg.version {
            CgroupVersion::V1 => fs::read_to_string(dir.join("memory.failcnt"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0),
            CgroupVersion::V2 => fs::read_to_string(dir.join("memory.events"))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("max ")?.trim().parse::<u64>().ok())
                })
                .is_some_and(|n| n > 0),
        }
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

/// Why a cgroup could not be made, with a hint when it is a permission.
fn fail(what: &str, path: &Path, e: io::Error) -> String {
    let hint = if e.kind() == io::ErrorKind::PermissionDenied {
        " (the worker must run as root to make cgroups)"
    } else {
        ""
    };
    format!("cannot {what} {}: {e}{hint}", path.display())
}

/// mkdir; one already there is fine.
fn mkdir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Enables `controllers` for the children of a v2 cgroup, each unless it
/// already is; the error names the one that could not be.
fn enable<'a>(dir: &Path, controllers: &[&'a str]) -> Result<(), (&'a str, io::Error)> {
    let control = dir.join("cgroup.subtree_control");
    for &c in controllers {
        let enabled = fs::read_to_string(&control).map_err(|e| (c, e))?;
        if !has_controller(&enabled, c) {
            fs::write(&control, format!("+{c}")).map_err(|e| (c, e))?;
        }
    }
    Ok(())
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
        cgroups.create(&cg, Some(32 << 20), None).unwrap();
        assert!(fs::read_to_string(r.join("cgroup.subtree_control"))
            .unwrap()
            .contains("memory"));
        assert!(fs::read_to_string(r.join("hangar/cgroup.subtree_control"))
            .unwrap()
            .contains("memory"));
        let max = fs::read_to_string(r.join("hangar/build-1-abc/memory.max")).unwrap();
        assert_eq!(max, "33554432");
        assert_eq!(
            cgroups.procs_files(&cg, true),
            [r.join("hangar/build-1-abc/cgroup.procs")]
        );
    }

    #[test]
    fn a_limit_reached_is_read_from_v1_failcnt_and_v2_max_events() {
        let root = tempfile::tempdir().unwrap();
        let cgroups = Cgroups::new(root.path());
        // (version, file under the cgroup, its text, limit reached)
        let cases = [
            (CgroupVersion::V1, "memory.failcnt", "0\n", false),
            (CgroupVersion::V1, "memory.failcnt", "12\n", true),
            (
                CgroupVersion::V2,
                "memory.events",
                "low 0\nhigh 0\nmax 0\noom 0\n",
                false,
            ),
            (
                CgroupVersion::V2,
                "memory.events",
                "low 0\nhigh 0\nmax 5\noom 1\n",
                true,
            ),
        ];
        for (i, (version, file, text, reached)) in cases.into_iter().enumerate() {
            let cg = Cgroups::reference(version, &format!("case-{i}"));
            let dir = cgroups.dir(&cg);
            fs::create_dir_all(&dir).unwrap();
            assert!(!cgroups.hit_limit(&cg), "case {i}: no file yet");
            fs::write(dir.join(file), text).unwrap();
            assert_eq!(cgroups.hit_limit(&cg), reached, "case {i}");
        }
    }

    #[test]
    fn shares_convert_to_weight_as_runc_and_crun_do_keeping_the_ends_and_the_default() {
        // (shares, weight): the kernel's ends, the defaults (1024 -> 100),
        // and points between.
        let cases = [
            (0, 1),
            (2, 1),
            (3, 2),
            (10, 4),
            (100, 17),
            (512, 59),
            (1024, 100),
            (2048, 174),
            (4096, 303),
            (100_000, 4340),
            (262_143, 10_000),
            (262_144, 10_000),
            (u64::MAX, 10_000),
        ];
        for (shares, weight) in cases {
            assert_eq!(cpu_weight(shares), weight, "{shares} shares");
        }
        let mut last = 0;
        for shares in 2..=262_144 {
            let w = cpu_weight(shares);
            assert!(w >= last && (1..=10_000).contains(&w), "{shares} -> {w}");
            last = w;
        }
    }

    #[test]
    fn cpu_shares_need_the_cpu_controller() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::write(r.join("cgroup.controllers"), "memory pids\n").unwrap();
        let cgroups = Cgroups::new(r);
        let err = cgroups.detect_cpu(CgroupVersion::V2).unwrap_err();
        assert!(err.contains("cpu controller"), "{err}");
        // cpuset is not cpu.
        fs::write(r.join("cgroup.controllers"), "cpuset memory pids\n").unwrap();
        assert!(cgroups.detect_cpu(CgroupVersion::V2).is_err());
        fs::write(r.join("cgroup.controllers"), "cpuset cpu memory\n").unwrap();
        assert_eq!(cgroups.detect_cpu(CgroupVersion::V2), Ok(()));

        let err = cgroups.detect_cpu(CgroupVersion::V1).unwrap_err();
        assert!(err.contains("no cgroup v1 cpu hierarchy"), "{err}");
        fs::create_dir(r.join("cpu")).unwrap();
        fs::write(r.join("cpu/cgroup.procs"), "").unwrap();
        assert_eq!(cgroups.detect_cpu(CgroupVersion::V1), Ok(()));
    }

    #[test]
    fn a_v2_cgroup_with_cpu_shares_enables_cpu_in_its_parents_and_sets_cpu_weight() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::write(r.join("cgroup.controllers"), "cpu memory pids").unwrap();
        fs::write(r.join("cgroup.subtree_control"), "memory pids").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(cgroups.detect().unwrap(), "t-1");
        // A real parent would have the file already; so does this one once
        // made.
        fs::create_dir(r.join(PARENT)).unwrap();
        fs::write(r.join(PARENT).join("cgroup.subtree_control"), "memory").unwrap();
        cgroups.create(&cg, None, Some(512)).unwrap();
        for control in ["cgroup.subtree_control", "hangar/cgroup.subtree_control"] {
            let text = fs::read_to_string(r.join(control)).unwrap();
            assert!(has_controller(&text, "cpu"), "{control}: {text}");
        }
        let weight = fs::read_to_string(r.join("hangar/t-1/cpu.weight")).unwrap();
        assert_eq!(weight, "59");
        assert!(!r.join("hangar/t-1/memory.max").exists());
        // One cgroup for both controllers: the wrapper joins it once.
        assert_eq!(
            cgroups.procs_files(&cg, true),
            [r.join("hangar/t-1/cgroup.procs")]
        );

        // Without shares, cpu is left alone.
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::write(r.join("cgroup.controllers"), "cpu memory").unwrap();
        fs::write(r.join("cgroup.subtree_control"), "").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(CgroupVersion::V2, "t-2");
        fs::create_dir(r.join(PARENT)).unwrap();
        fs::write(r.join(PARENT).join("cgroup.subtree_control"), "").unwrap();
        cgroups.create(&cg, Some(64 << 20), None).unwrap();
        let text = fs::read_to_string(r.join("cgroup.subtree_control")).unwrap();
        assert!(!has_controller(&text, "cpu"), "{text}");
        assert!(!r.join("hangar/t-2/cpu.weight").exists());
    }

    #[test]
    fn a_v1_cgroup_with_cpu_shares_has_a_twin_in_the_cpu_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for h in ["memory", "cpu"] {
            fs::create_dir(r.join(h)).unwrap();
            fs::write(r.join(h).join("cgroup.procs"), "").unwrap();
        }
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(cgroups.detect().unwrap(), "t-1");
        cgroups.create(&cg, None, Some(512)).unwrap();
        assert_eq!(
            fs::read_to_string(r.join("cpu/hangar/t-1/cpu.shares")).unwrap(),
            "512"
        );
        assert_eq!(
            cgroups.procs_files(&cg, true),
            [
                r.join("memory/hangar/t-1/cgroup.procs"),
                r.join("cpu/hangar/t-1/cgroup.procs"),
            ]
        );
        assert_eq!(cgroups.procs_files(&cg, false).len(), 1);
    }

    #[test]
    fn a_cgroup_whose_cpu_shares_cannot_be_set_is_removed_again() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir(r.join("memory")).unwrap();
        fs::write(r.join("memory/cgroup.procs"), "").unwrap();
        // A file where the cpu hierarchy should be: nothing can be made in it.
        fs::write(r.join("cpu"), "").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(CgroupVersion::V1, "t-1");
        let err = cgroups.create(&cg, None, Some(512)).unwrap_err();
        assert!(err.contains("cpu"), "{err}");
        assert!(!r.join("memory/hangar/t-1").exists());
    }

    #[test]
    fn a_v1_cgroup_lives_in_the_memory_hierarchy_with_limit_in_bytes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir(r.join("memory")).unwrap();
        fs::write(r.join("memory/cgroup.procs"), "").unwrap();
        let cgroups = Cgroups::new(r);
        let cg = Cgroups::reference(cgroups.detect().unwrap(), "t-1");
        cgroups.create(&cg, Some(64 << 20), None).unwrap();
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
