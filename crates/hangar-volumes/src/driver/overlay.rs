//! Overlay driver: copy-on-write children are overlayfs mounts stacked on
//! their ancestors' layers.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::names;
use crate::os::{Os, OverlayMount, RealOs, MAX_MOUNT_DATA};

/// Create `upper/`, `work/` and the (empty) mount point `data/`.
pub(crate) fn make_layout(os: &dyn Os, dir: &Path) -> io::Result<()> {
    os.create_dir(&dir.join(names::UPPER))?;
    os.create_dir(&dir.join(names::WORK))?;
    os.create_dir(&dir.join(names::DATA))
}

/// The mount for the copy-on-write volume living in `dir`, on top of
/// `lowers` (top-most first).
pub(crate) fn mount_for(dir: &Path, lowers: Vec<PathBuf>) -> OverlayMount {
    OverlayMount {
        lower: lowers,
        upper: dir.join(names::UPPER),
        work: dir.join(names::WORK),
        target: dir.join(names::DATA),
    }
}

/// Whether the mount's option string fits in one page. Deep chains with long
/// paths do not; the manager then falls back to a naive copy for that child.
pub(crate) fn fits(m: &OverlayMount) -> bool {
    m.options().len() <= MAX_MOUNT_DATA
}

/// Characters that cannot appear in overlay mount option paths.
pub(crate) fn path_problem(path: &Path) -> Option<&'static str> {
    let s = path.to_string_lossy();
    if s.contains(',') {
        Some("path contains ',' which cannot be passed in overlay mount options")
    } else if s.contains('\n') {
        Some("path contains a newline")
    } else {
        None
    }
}

/// Try a real overlay mount inside `root`: write in the lower dir, read it
/// through the mount, write through the mount and find it in the upper dir,
/// unmount, clean up. `Err` carries the reason overlay is not usable.
pub fn probe_overlay(root: &Path) -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("overlayfs needs linux".into());
    }
    if !crate::fsutil::running_as_root() {
        return Err("mounting overlayfs needs root (euid is not 0)".into());
    }
    fs::create_dir_all(root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let root = fs::canonicalize(root).map_err(|e| format!("resolve {}: {e}", root.display()))?;
    if let Some(p) = path_problem(&root) {
        return Err(p.into());
    }
    let dir = root.join(format!(".overlay-probe-{}", uuid::Uuid::new_v4().simple()));
    let result = probe_in(&dir);
    let os = RealOs;
    if os.is_mounted(&dir.join("merged")).unwrap_or(false) {
        let _ = os.unmount(&dir.join("merged"));
    }
    let _ = fs::remove_dir_all(&dir);
    result
}

fn probe_in(dir: &Path) -> Result<(), String> {
    let os = RealOs;
    for sub in ["", "lower", "upper", "work", "merged"] {
        fs::create_dir(dir.join(sub)).map_err(|e| format!("create probe dir: {e}"))?;
    }
    fs::write(dir.join("lower/probe"), b"lower").map_err(|e| format!("write probe: {e}"))?;
    let m = OverlayMount {
        lower: vec![dir.join("lower")],
        upper: dir.join("upper"),
        work: dir.join("work"),
        target: dir.join("merged"),
    };
    os.mount_overlay(&m)
        .map_err(|e| format!("test overlay mount failed: {e}"))?;
    let seen = fs::read(dir.join("merged/probe")).map_err(|e| format!("read through overlay: {e}"));
    let wrote = fs::write(dir.join("merged/up"), b"upper")
        .map_err(|e| format!("write through overlay: {e}"));
    os.unmount(&m.target)
        .map_err(|e| format!("unmount test overlay: {e}"))?;
    if seen? != b"lower" {
        return Err("overlay did not show the lower layer's content".into());
    }
    wrote?;
    if !dir.join("upper/up").is_file() {
        return Err("overlay write did not land in the upper dir".into());
    }
    Ok(())
}
