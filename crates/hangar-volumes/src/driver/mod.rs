//! Volume drivers: how a volume's data directory is produced.
//!
//! * [`DriverKind::Naive`]: every volume owns a plain `data/` directory; a
//!   copy-on-write child is a full `cp -a` of its parent's data.
//! * [`DriverKind::Overlay`]: volumes without a parent (empty, import) own a
//!   plain `data/` directory (their *base layer*); a copy-on-write child owns
//!   `upper/` and `work/` and its `data/` is an overlayfs mount whose lower
//!   layers are the parent's chain of layers, top-most first:
//!   `lowerdir=parent/upper:grandparent/upper:...:root/data`. Overlay mounts
//!   are never used as lower dirs (no nesting).
//!
//! The driver of each volume is recorded in its metadata, so a manager can
//! hold volumes of both kinds (e.g. after a driver change, or when a chain is
//! too deep for one overlay mount and the child falls back to a copy).

pub(crate) mod naive;
pub(crate) mod overlay;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use overlay::probe_overlay;

/// How copy-on-write volumes are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    Naive,
    Overlay,
}

impl std::fmt::Display for DriverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DriverKind::Naive => "naive",
            DriverKind::Overlay => "overlay",
        })
    }
}

/// Overlay when running as root on Linux and a test overlay mount inside
/// `root` works (mount, read through, write to upper, unmount); naive
/// otherwise. `root` is created if missing. The reason for choosing naive is
/// logged at info level.
pub fn best_driver(root: &Path) -> DriverKind {
    match probe_overlay(root) {
        Ok(()) => DriverKind::Overlay,
        Err(reason) => {
            tracing::info!(root = %root.display(), %reason, "overlay driver unavailable, using naive");
            DriverKind::Naive
        }
    }
}

/// File and directory names inside `volumes/<handle>/`.
pub(crate) mod names {
    pub(crate) const META: &str = "meta.json";
    pub(crate) const META_TMP: &str = "meta.json.tmp";
    pub(crate) const DATA: &str = "data";
    pub(crate) const UPPER: &str = "upper";
    pub(crate) const WORK: &str = "work";
    /// Prefix of a volume being created: `volumes/.creating-<handle>-<rand>`.
    pub(crate) const CREATING: &str = ".creating-";
    /// Prefix of a volume being removed: `volumes/.destroying-<handle>-<rand>`.
    pub(crate) const DESTROYING: &str = ".destroying-";
    /// Prefix of a stream-in staging dir (inside a volume dir, or inside the
    /// data dir of an overlay child so the final renames stay on one fs).
    pub(crate) const STREAM_STAGING: &str = ".hangar-stream-in-";
    /// Who owns the data's entries, as far as the worker knows (see
    /// `owners`); beside the data, never in it.
    pub(crate) const OWNERS: &str = "owners";
    pub(crate) const OWNERS_TMP: &str = "owners.tmp";
}

#[cfg(test)]
mod tests;
