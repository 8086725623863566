//! `hangar-volumes`: the worker's volume manager (a library in the spirit of
//! Concourse's baggageclaim).
//!
//! Volumes live under `<root>/volumes/<handle>/` with a `meta.json` beside
//! their data. Copy-on-write children are made by a full copy (the naive
//! driver) or as overlayfs mounts stacked on their ancestors' layers (the
//! overlay driver, root only). Creation and destruction are crash-safe: a
//! volume becomes visible with a single rename, and [`VolumeManager::open`]
//! removes whatever an interrupted operation left behind and re-mounts
//! overlays lost in a reboot. Tar streams in are validated so that a hostile
//! archive can neither write outside the volume nor change it at all.
//!
//! Everything is synchronous; async callers use `spawn_blocking`.
//!
//! # Decisions worth knowing
//!
//! * **Sizes** are not computed by `create`/`get`/`list` (`size_bytes` is
//!   always `None` there): a size needs a walk of the tree. Call
//!   [`VolumeManager::disk_usage`] when it is needed; for an overlay child it
//!   counts only its own upper layer.
//! * **Overlay layout**: volumes without a parent are plain directories (the
//!   base layer); copy-on-write children are overlay mounts with
//!   `lowerdir=parent/upper:...:base/data`, mounted while still in the
//!   staging dir and moved into place by the same rename that publishes the
//!   volume. Mounts use `index=off` (a grandchild's lower dir is its parent's
//!   in-use upper dir, which the kernel refuses with the index on; it logs
//!   "lowerdir is in-use as upperdir/workdir of another mount" instead).
//!   Writing into a volume that already has overlay children is undefined
//!   for those children (overlayfs semantics); naive children never see it.
//!   A chain too deep for one page of mount options falls back to a naive
//!   copy for that child.
//! * **Stream-in** refuses rather than sanitizes: see [`tar_in`]. Absolute
//!   symlink targets are refused too (they point outside the volume from the
//!   host's point of view), which a rootfs-style archive may contain.
//!   setuid/setgid bits are kept only for privileged volumes; ownership is
//!   restored from the archive when running as root.
//! * **Races with running containers**: path checks use `lstat` and
//!   `O_NOFOLLOW`, not `openat2(RESOLVE_BENEATH)`, so a container that swaps a
//!   directory for a symlink in its own volume at the exact moment of a
//!   stream-in merge could still redirect a rename. Streams into volumes that
//!   are mounted into live containers should be avoided.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use hangar_volumes::{best_driver, Strategy, VolumeManager};
//! let root = std::path::Path::new("/var/lib/hangar/work");
//! let vm = VolumeManager::open(root, best_driver(root))?;
//! let base = vm.create("base", Strategy::Empty, BTreeMap::new())?;
//! std::fs::write(base.path.join("hello"), "hi")?;
//! let child = vm.create("task-1", Strategy::CopyOnWrite { parent: "base".into() }, BTreeMap::new())?;
//! assert!(child.path.join("hello").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod driver;
mod error;
mod fsutil;
mod links;
mod manager;
mod meta;
pub mod os;
mod owners;
mod paths;
mod read_file;
pub mod tar_in;
mod tar_out;

pub use driver::{best_driver, probe_overlay, DriverKind};
pub use error::{LimitKind, VolumeError};
pub use fsutil::copy_tree;
pub use manager::{OpenReport, Strategy, VolumeInfo, VolumeManager, VolumeSpec};
pub use meta::{validate_handle, StrategyKind};
pub use owners::{Owners, OwnersToken};
pub use read_file::MAX_READ_FILE_BYTES;
pub use tar_in::{extract_into_dir, Limits, StreamInReport};
pub use tar_out::{write_entries, StreamOutSource};

/// Compression of a tar stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    /// gzip (multi-member accepted on input; level 1 on output).
    Gzip,
    /// zstd (level 1 on output): between workers whose link is slower
    /// than their disks, where gzip would be the slowest part.
    Zstd,
}
