//! The OS seam: every filesystem mutation and mount operation the volume
//! manager performs while creating or destroying volumes goes through [`Os`],
//! so driver logic can be tested with the recording [`fake::FakeOs`] and
//! crashes can be injected at named points.
//!
//! Reads (metadata, listing directories) go straight to `std`; the tar
//! streaming code works on the volume's own data directory directly.

pub mod fake;

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub use crate::fsutil::CopyStats;

/// Longest mount data string the kernel accepts (one page, NUL included).
pub const MAX_MOUNT_DATA: usize = 4095;

/// An overlayfs mount: `lower` is ordered top-most first, exactly as it
/// appears in the `lowerdir=` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayMount {
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub target: PathBuf,
}

impl OverlayMount {
    /// The mount data string. `index=off` is explicit because a lower layer
    /// of a grandchild is the (in-use) upper dir of its parent's mount, which
    /// the kernel refuses with `EBUSY` when the inode index is on.
    pub fn options(&self) -> String {
        let lower: Vec<String> = self
            .lower
            .iter()
            .map(|p| escape_lowerdir(&p.to_string_lossy()))
            .collect();
        format!(
            "lowerdir={},upperdir={},workdir={},index=off,redirect_dir=off,metacopy=off",
            lower.join(":"),
            self.upper.display(),
            self.work.display()
        )
    }
}

fn escape_lowerdir(s: &str) -> String {
    s.replace('\\', "\\\\").replace(':', "\\:")
}

/// The operations the drivers need from the operating system.
pub trait Os: Send + Sync + fmt::Debug {
    /// Create one directory (parent must exist, must not exist yet).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Create or truncate `path`, write `contents` and fsync it.
    fn write_file(&self, path: &Path, contents: &[u8]) -> io::Result<()>;
    /// rename(2): atomic within one filesystem.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Remove a tree without following symlinks. Missing is not an error.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// `cp -a` of a directory tree into `to` (which must not exist).
    fn copy_tree(&self, from: &Path, to: &Path) -> io::Result<CopyStats>;
    /// fsync a directory so renames inside it are durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether this process may mount (root).
    fn can_mount(&self) -> bool;
    fn mount_overlay(&self, mount: &OverlayMount) -> io::Result<()>;
    fn unmount(&self, target: &Path) -> io::Result<()>;
    fn is_mounted(&self, target: &Path) -> io::Result<bool>;
    /// Mount points strictly below `dir` (deepest first).
    fn mounts_under(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
}

/// The real thing: std plus nix's safe mount wrappers.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealOs;

impl Os for RealOs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn write_file(&self, path: &Path, contents: &[u8]) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.write_all(contents)?;
        f.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        match fs::remove_dir_all(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn copy_tree(&self, from: &Path, to: &Path) -> io::Result<CopyStats> {
        crate::fsutil::copy_tree(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn can_mount(&self) -> bool {
        crate::fsutil::running_as_root()
    }

    fn mount_overlay(&self, m: &OverlayMount) -> io::Result<()> {
        let data = m.options();
        if data.len() > MAX_MOUNT_DATA {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "overlay mount options are {} bytes, over one page",
                    data.len()
                ),
            ));
        }
        mount(
            Some("overlay"),
            &m.target,
            Some("overlay"),
            MsFlags::empty(),
            Some(data.as_str()),
        )
        .map_err(io::Error::from)
    }

    fn unmount(&self, target: &Path) -> io::Result<()> {
        umount2(target, MntFlags::empty()).map_err(io::Error::from)
    }

    fn is_mounted(&self, target: &Path) -> io::Result<bool> {
        Ok(crate::fsutil::mount_points()?.iter().any(|p| p == target))
    }

    fn mounts_under(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut found: Vec<PathBuf> = crate::fsutil::mount_points()?
            .into_iter()
            .filter(|p| p != dir && p.starts_with(dir))
            .collect();
        found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        found.dedup();
        Ok(found)
    }
}
