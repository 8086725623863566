//! A recording fake of [`Os`] for tests.
//!
//! Plain filesystem operations are carried out for real (inside whatever
//! temporary root the test uses) so the manager's on-disk logic is exercised;
//! mounts are simulated in memory (a mount table keyed by target path that
//! follows renames like the kernel's does). Every call is recorded, and the
//! fake can be told to fail at a named point of the create/destroy protocol:
//!
//! * [`FailMode::Error`]: that one call fails, later calls succeed (an
//!   ordinary I/O error the manager must roll back from);
//! * [`FailMode::Crash`]: that call and every later mutating call fail until
//!   [`FakeOs::revive`], which models the process dying at that point: no
//!   cleanup can happen, whatever is on disk stays there.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{CopyStats, Os, OverlayMount, RealOs};

/// Named points of the create / destroy protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailAt {
    /// mkdir of `volumes/.creating-<handle>-<rand>`.
    MakeStaging,
    /// mkdir of `data`/`upper`/`work` inside the staging dir.
    MakeLayout,
    /// The tree copy of a parent (naive copy-on-write) or import source.
    CopyData,
    /// Writing `meta.json` (or the temp file + rename of a metadata update).
    WriteMeta,
    /// Mounting the overlay of a copy-on-write child.
    MountOverlay,
    /// The atomic rename of the staging dir to `volumes/<handle>`.
    RenameIntoPlace,
    /// fsync of the `volumes` directory after a rename.
    SyncParent,
    /// Unmounting a volume's overlay.
    Unmount,
    /// Renaming a destroyed volume to `volumes/.destroying-<handle>-<rand>`.
    RenameAway,
    /// Removing a tree (destroyed volume, staging leftovers).
    RemoveTree,
}

impl FailAt {
    pub const CREATE_POINTS: [FailAt; 7] = [
        FailAt::MakeStaging,
        FailAt::MakeLayout,
        FailAt::CopyData,
        FailAt::WriteMeta,
        FailAt::MountOverlay,
        FailAt::RenameIntoPlace,
        FailAt::SyncParent,
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    Error,
    Crash,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    CreateDir(PathBuf),
    WriteFile(PathBuf),
    Rename(PathBuf, PathBuf),
    RemoveDirAll(PathBuf),
    CopyTree(PathBuf, PathBuf),
    SyncDir(PathBuf),
    MountOverlay(OverlayMount),
    Unmount(PathBuf),
}

impl Call {
    /// Which named point this call is, by the manager's naming conventions.
    pub fn point(&self) -> FailAt {
        fn name_starts(p: &Path, prefix: &str) -> bool {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with(prefix))
                .unwrap_or(false)
        }
        match self {
            Call::CreateDir(p) if name_starts(p, ".creating-") => FailAt::MakeStaging,
            Call::CreateDir(_) => FailAt::MakeLayout,
            Call::WriteFile(_) => FailAt::WriteMeta,
            Call::Rename(from, _) if name_starts(from, ".creating-") => FailAt::RenameIntoPlace,
            Call::Rename(_, to) if name_starts(to, ".destroying-") => FailAt::RenameAway,
            Call::Rename(_, _) => FailAt::WriteMeta,
            Call::RemoveDirAll(_) => FailAt::RemoveTree,
            Call::CopyTree(_, _) => FailAt::CopyData,
            Call::SyncDir(_) => FailAt::SyncParent,
            Call::MountOverlay(_) => FailAt::MountOverlay,
            Call::Unmount(_) => FailAt::Unmount,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    mounts: BTreeMap<PathBuf, OverlayMount>,
    fail: Option<(FailAt, FailMode)>,
    crashed: bool,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct FakeOs {
    state: Mutex<State>,
}

impl FakeOs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fail the next call at `point` in the given mode.
    pub fn fail_at(&self, point: FailAt, mode: FailMode) {
        let mut s = self.lock();
        s.fail = Some((point, mode));
    }

    /// Bring a crashed fake back to life (a new process on the same disk).
    /// The simulated mount table survives, like it would across a process
    /// restart; use [`FakeOs::forget_mounts`] to simulate a reboot.
    pub fn revive(&self) {
        let mut s = self.lock();
        s.crashed = false;
        s.fail = None;
    }

    pub fn forget_mounts(&self) {
        self.lock().mounts.clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    pub fn mounts(&self) -> BTreeMap<PathBuf, OverlayMount> {
        self.lock().mounts.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the call, then decide whether it fails.
    fn enter(&self, call: Call) -> io::Result<()> {
        let mut s = self.lock();
        let point = call.point();
        s.calls.push(call);
        if s.crashed {
            return Err(io::Error::other(
                "fake os: process is dead (crashed earlier)",
            ));
        }
        if let Some((at, mode)) = s.fail {
            if at == point {
                s.fail = None;
                if mode == FailMode::Crash {
                    s.crashed = true;
                }
                return Err(io::Error::other(format!(
                    "fake os: injected failure at {point:?}"
                )));
            }
        }
        Ok(())
    }
}

impl Os for FakeOs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.enter(Call::CreateDir(path.to_path_buf()))?;
        RealOs.create_dir(path)
    }

    fn write_file(&self, path: &Path, contents: &[u8]) -> io::Result<()> {
        self.enter(Call::WriteFile(path.to_path_buf()))?;
        RealOs.write_file(path, contents)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.enter(Call::Rename(from.to_path_buf(), to.to_path_buf()))?;
        let mut s = self.lock();
        if s.mounts.contains_key(from) {
            return Err(io::Error::from_raw_os_error(nix::libc::EBUSY));
        }
        RealOs.rename(from, to)?;
        // Mounts below a renamed directory move with it.
        let moved: Vec<PathBuf> = s
            .mounts
            .keys()
            .filter(|k| k.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            let m = s.mounts.remove(&old).expect("key listed above");
            let new = to.join(old.strip_prefix(from).expect("prefix checked"));
            s.mounts.insert(new, m);
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.enter(Call::RemoveDirAll(path.to_path_buf()))?;
        if self.lock().mounts.keys().any(|k| k.starts_with(path)) {
            // The real kernel would let us delete through the mount into its
            // layers; the manager must never do that.
            return Err(io::Error::other(format!(
                "fake os: refusing to remove {} which has mounts below it",
                path.display()
            )));
        }
        RealOs.remove_dir_all(path)
    }

    fn copy_tree(&self, from: &Path, to: &Path) -> io::Result<CopyStats> {
        self.enter(Call::CopyTree(from.to_path_buf(), to.to_path_buf()))?;
        RealOs.copy_tree(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.enter(Call::SyncDir(path.to_path_buf()))?;
        RealOs.sync_dir(path)
    }

    fn can_mount(&self) -> bool {
        true
    }

    fn mount_overlay(&self, m: &OverlayMount) -> io::Result<()> {
        self.enter(Call::MountOverlay(m.clone()))?;
        for dir in m.lower.iter().chain([&m.upper, &m.work, &m.target]) {
            if !dir.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("fake os: {} is not a directory", dir.display()),
                ));
            }
        }
        if m.options().len() > super::MAX_MOUNT_DATA {
            return Err(io::Error::from_raw_os_error(nix::libc::EINVAL));
        }
        let mut s = self.lock();
        if s.mounts.contains_key(&m.target) {
            return Err(io::Error::from_raw_os_error(nix::libc::EBUSY));
        }
        s.mounts.insert(m.target.clone(), m.clone());
        Ok(())
    }

    fn unmount(&self, target: &Path) -> io::Result<()> {
        self.enter(Call::Unmount(target.to_path_buf()))?;
        match self.lock().mounts.remove(target) {
            Some(_) => Ok(()),
            None => Err(io::Error::from_raw_os_error(nix::libc::EINVAL)),
        }
    }

    fn is_mounted(&self, target: &Path) -> io::Result<bool> {
        Ok(self.lock().mounts.contains_key(target))
    }

    fn mounts_under(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = self
            .lock()
            .mounts
            .keys()
            .filter(|k| k.as_path() != dir && k.starts_with(dir))
            .cloned()
            .collect();
        v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        Ok(v)
    }
}
