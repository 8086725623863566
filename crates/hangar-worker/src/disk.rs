//! Keeping the worker able to finish what it runs when its work dir fills.
//!
//! When a task fills the disk, the worker still has to write the one thing
//! that ends the step: the container's `result.json`. So it keeps a reserve:
//! a file of [`RESERVE_BYTES`] real (not sparse) bytes in the containers
//! dir. A result write that fails for want of space deletes the reserve and
//! tries again; the health check writes the reserve back once the space has
//! returned.
//!
//! Why a reserve file and not result files allocated up front: a result is
//! written whole or not at all (a temp file linked into place), so a
//! pre-allocated `result.json` would have to be overwritten in place, and a
//! reader could see half of it; and the wrapper's `exit` file is written by
//! a shell that cannot write into a pre-allocated file without truncating
//! it (and so giving its blocks back first). One reserve serves every write
//! the worker must make after the disk filled, on any filesystem (tmpfs,
//! ext4, xfs, overlay), with plain file calls.
//!
//! While the reserve is released, the disk counts as full: the condition
//! says so, the worker takes no new work, and a container that ends then
//! ended on a full disk (an infrastructure failure, retried elsewhere).
//! Every change of that state is logged once, not every failed write.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The bytes held back: room for a few hundred result files on 4 KiB
/// blocks, small beside any disk a worker runs on.
pub const RESERVE_BYTES: u64 = 1024 * 1024;

/// The file holding the reserve, in the containers dir (a dot name, so it
/// is never taken for a container).
pub const RESERVE_FILE: &str = ".disk-reserve";

/// Whether an I/O error means the filesystem (or a quota) has no room.
pub fn is_storage_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

#[derive(Debug)]
pub struct DiskReserve {
    dir: PathBuf,
    path: PathBuf,
    bytes: u64,
    /// The reserve was given up (or could not be made) and is not back yet.
    released: AtomicBool,
    /// The full disk was logged and has not been seen with room since: it
    /// is said once per spell, whichever way it was found.
    announced: AtomicBool,
}

impl DiskReserve {
    /// The reserve of `dir`, written now if there is room (a worker that
    /// starts on a full disk starts with the reserve released).
    pub fn open(dir: &Path, bytes: u64) -> DiskReserve {
        let reserve = DiskReserve {
            dir: dir.to_path_buf(),
            path: dir.join(RESERVE_FILE),
            bytes,
            released: AtomicBool::new(false),
            announced: AtomicBool::new(false),
        };
        let held = fs::metadata(&reserve.path).is_ok_and(|m| m.len() >= bytes);
        if !held {
            if let Err(e) = reserve.write() {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot keep a disk reserve; the disk counts as full until there is room");
                reserve.released.store(true, Ordering::SeqCst);
            }
        }
        reserve
    }

    fn write(&self) -> io::Result<()> {
        let tmp = self.dir.join(format!("{RESERVE_FILE}.tmp"));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            // Zeros written, not a length set: a sparse file holds no blocks.
            let chunk = vec![0u8; 64 * 1024];
            let mut left = self.bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            f.sync_all()?;
            fs::rename(&tmp, &self.path)
        })();
        if result.is_err() {
            if let Err(e) = fs::remove_file(&tmp) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %tmp.display(), error = %e, "cannot remove a temporary file");
                }
            }
        }
        result
    }

    /// Bytes the worker may still write on the reserve's filesystem.
    pub fn free_bytes(&self) -> u64 {
        match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(s) => s.blocks_available() * s.fragment_size(),
            // Unknown reads as room: only a failed write proves it full.
            Err(_) => u64::MAX,
        }
    }

    /// Full: the reserve is given up, or less than it is left.
    pub fn is_full(&self) -> bool {
        self.released.load(Ordering::SeqCst) || self.free_bytes() < self.bytes
    }

    /// A write failed for want of space (`what` says which): gives the
    /// reserve up so the next write fits. True when it freed space now.
    pub fn release(&self, what: &str) -> bool {
        let was = self.released.swap(true, Ordering::SeqCst);
        let freed = match fs::remove_file(&self.path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot release the disk reserve");
                false
            }
        };
        if !was {
            self.announce(what, freed);
        }
        freed
    }

    /// Logs the full disk once per spell of it.
    fn announce(&self, what: &str, freed_reserve: bool) {
        if !self.announced.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                dir = %self.dir.display(),
                found_by = what,
                freed_reserve,
                "disk full: the work dir has no room; taking no work until space is freed"
            );
        }
    }

    /// [`DiskReserve::is_full`], logging a full disk found by its free
    /// space alone (no write failed yet) as a released reserve is logged.
    pub fn check_full(&self) -> bool {
        let full = self.is_full();
        if full {
            self.announce("less than the reserve is left", false);
        } else {
            self.announced.store(false, Ordering::SeqCst);
        }
        full
    }

    /// Writes the reserve back once there is room for it with twice as much
    /// to spare (so a disk at the edge does not flap). True when the disk is no longer
    /// counted as full.
    pub fn restore(&self) -> bool {
        if !self.released.load(Ordering::SeqCst) {
            return true;
        }
        if self.free_bytes() < self.bytes.saturating_mul(3) {
            return false;
        }
        match self.write() {
            Ok(()) => {
                self.released.store(false, Ordering::SeqCst);
                tracing::info!(dir = %self.dir.display(), "disk space is back; the reserve is restored");
                true
            }
            // Taken again meanwhile: still full, and already said so.
            Err(_) => false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_real_bytes_released_once_and_restored_with_room() {
        let dir = tempfile::tempdir().unwrap();
        let r = DiskReserve::open(dir.path(), 64 * 1024);
        let meta = fs::metadata(r.path()).unwrap();
        assert_eq!(meta.len(), 64 * 1024);
        // Allocated, not sparse.
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 >= 64 * 1024, "{} blocks", meta.blocks());
        assert!(!r.is_full());
        assert!(r.release("a test write"));
        assert!(!r.path().exists());
        assert!(r.is_full());
        // Released twice frees nothing more.
        assert!(!r.release("another"));
        assert!(r.restore());
        assert!(r.path().exists() && !r.is_full());
    }

    #[test]
    fn no_space_and_quota_errors_count_as_full_and_others_do_not() {
        let cases = [
            (io::Error::from_raw_os_error(28), true),  // ENOSPC
            (io::Error::from_raw_os_error(122), true), // EDQUOT
            (io::Error::from_raw_os_error(13), false), // EACCES
            (io::Error::other("x"), false),
        ];
        for (e, full) in cases {
            assert_eq!(is_storage_full(&e), full, "{e}");
        }
    }

    #[test]
    fn a_container_error_is_full_only_when_its_io_error_is() {
        use crate::containers::ContainerError;
        use hangar_volumes::VolumeError;
        let io_err = |code| ContainerError::Io {
            context: "writing".into(),
            source: io::Error::from_raw_os_error(code),
        };
        let cases = [
            (io_err(28), true),
            (io_err(13), false),
            (
                ContainerError::Volumes(VolumeError::BadArchive {
                    entry: "a".into(),
                    source: io::Error::from_raw_os_error(122),
                }),
                true,
            ),
            (
                ContainerError::Volumes(VolumeError::Io {
                    context: "x".into(),
                    source: io::Error::from_raw_os_error(28),
                }),
                true,
            ),
            (
                ContainerError::NoRoom {
                    reason: "memory".into(),
                },
                false,
            ),
        ];
        for (e, full) in cases {
            assert_eq!(e.is_storage_full(), full, "{e}");
        }
    }
}
