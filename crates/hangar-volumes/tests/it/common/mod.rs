//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hangar_volumes::os::{Os, RealOs};
use hangar_volumes::{best_driver, probe_overlay, DriverKind};

/// A temporary work dir that unmounts whatever overlays the test left in it
/// before deleting it.
pub(crate) struct TestRoot {
    dir: tempfile::TempDir,
}

impl TestRoot {
    pub(crate) fn new() -> Self {
        TestRoot {
            dir: tempfile::tempdir().expect("create temp dir"),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Simulate a reboot: every mount below the root disappears.
    pub(crate) fn unmount_all(&self) -> usize {
        unmount_all(self.path())
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        unmount_all(self.path());
    }
}

pub(crate) fn unmount_all(root: &Path) -> usize {
    let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mounts = RealOs.mounts_under(&root).unwrap_or_default();
    for m in &mounts {
        RealOs
            .unmount(m)
            .unwrap_or_else(|e| panic!("unmount {}: {e}", m.display()));
    }
    mounts.len()
}

pub(crate) fn is_root() -> bool {
    // Effective uid is the second number on the "Uid:" line.
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

/// The naive driver, which works for any user. Not root, overlayfs must not
/// work either (mounting it needs root), and the best driver is naive.
pub(crate) fn naive() -> DriverKind {
    if !is_root() {
        let probe = TestRoot::new();
        let reason = probe_overlay(probe.path()).unwrap_err();
        assert_eq!(best_driver(probe.path()), DriverKind::Naive, "{reason}");
    }
    DriverKind::Naive
}

/// The overlay driver: these tests need root (overlayfs mounts) and fail,
/// saying so, without it; they never skip.
pub(crate) fn overlay() -> DriverKind {
    assert!(
        is_root(),
        "the overlay driver tests need root to mount overlayfs: run the tests as root \
         (scripts/test as root)"
    );
    let probe = TestRoot::new();
    if let Err(reason) = probe_overlay(probe.path()) {
        panic!("running as root but overlayfs does not work here: {reason}");
    }
    assert_eq!(best_driver(probe.path()), DriverKind::Overlay);
    DriverKind::Overlay
}

/// Defines each listed `fn name(driver: DriverKind)` test once per driver:
/// `naive::name` for any user and `overlay_needs_root::name`, which needs
/// root (see [`overlay`]).
macro_rules! on_both_drivers {
    ($($test:ident),* $(,)?) => {
        mod naive {
            $(
                #[test]
                fn $test() {
                    super::$test(crate::common::naive())
                }
            )*
        }
        mod overlay_needs_root {
            $(
                #[test]
                fn $test() {
                    super::$test(crate::common::overlay())
                }
            )*
        }
    };
}

pub(crate) fn no_props() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// Everything below `dir` (not following symlinks): path -> description of
/// type, mode and content.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            let m = fs::symlink_metadata(&path).unwrap();
            let desc = if m.is_dir() {
                stack.push(path.clone());
                format!("dir {:o}", m.mode() & 0o7777)
            } else if m.file_type().is_symlink() {
                format!("symlink -> {}", fs::read_link(&path).unwrap().display())
            } else if m.is_file() {
                format!(
                    "file {:o} {:?}",
                    m.mode() & 0o7777,
                    String::from_utf8_lossy(&fs::read(&path).unwrap())
                )
            } else {
                format!("special {:o}", m.mode())
            };
            out.insert(rel, desc);
        }
    }
    out
}
