//! One small file of a volume read whole (a `load_var`'s value, a task's
//! `file:`, a `set_pipeline`'s config), never anything outside the volume.
//!
//! The path is checked lexically first (relative, no `..`), then opened
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the volume's
//! data dir: the kernel resolves every component, symlinks included, and
//! refuses (`EXDEV`) any resolution that would leave the data dir, whether
//! by an absolute link, a `..` in a link, or a `/proc` magic link. A
//! symlink that stays inside the volume is followed, as a task reading the
//! file in its container would. No check-then-open race is possible: the
//! checks are the open.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};

use crate::error::VolumeError;
use crate::paths::{display, parse_subpath};

/// The largest file read whole: the files this is for are small configs
/// and values, and the whole content is held in memory and sent as one
/// answer.
pub const MAX_READ_FILE_BYTES: u64 = 1024 * 1024;

/// The content of `subpath` under `data`, at most `limit` bytes.
pub(crate) fn read_file(data: &Path, subpath: &str, limit: u64) -> Result<Vec<u8>, VolumeError> {
    let rel = parse_subpath(subpath)?;
    if rel.is_empty() {
        return Err(VolumeError::InvalidPath {
            path: subpath.to_string(),
            reason: "names the volume itself, not a file in it".into(),
        });
    }
    let shown = display(&rel);
    let root =
        File::open(data).map_err(|e| VolumeError::io(format!("open {}", data.display()), e))?;
    // O_NONBLOCK: a fifo put there by a task must not hang the open; it is
    // refused as not a regular file right after.
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let fd = openat2(&root, Path::new(&shown), flags, Mode::empty(), resolve).map_err(|e| {
        let e = io::Error::from(e);
        match e.raw_os_error() {
            Some(nix::libc::ENOENT) => VolumeError::PathNotFound {
                path: shown.clone(),
                missing: shown.clone(),
            },
            Some(nix::libc::EXDEV) => VolumeError::InvalidPath {
                path: shown.clone(),
                reason: "leads out of the volume (through a symlink)".into(),
            },
            Some(nix::libc::ENOTDIR) => VolumeError::InvalidPath {
                path: shown.clone(),
                reason: "a component on the way is not a directory".into(),
            },
            Some(nix::libc::ELOOP) => VolumeError::InvalidPath {
                path: shown.clone(),
                reason: "too many levels of symlinks".into(),
            },
            _ => VolumeError::io(format!("open {shown} in the volume"), e),
        }
    })?;
    let file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| VolumeError::io(format!("stat {shown}"), e))?;
    if !meta.file_type().is_file() {
        return Err(VolumeError::InvalidPath {
            path: shown,
            reason: "is not a regular file".into(),
        });
    }
    if meta.len() > limit {
        return Err(VolumeError::FileTooLarge { path: shown, limit });
    }
    // The file may grow while it is read: the bound is on what is read.
    let mut out = Vec::with_capacity(meta.len() as usize);
    (&file)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| VolumeError::io(format!("read {shown}"), e))?;
    if out.len() as u64 > limit {
        return Err(VolumeError::FileTooLarge { path: shown, limit });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("sub/deeper")).unwrap();
        std::fs::write(data.join("sub/vars.yml"), "a: 1\n").unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        (dir, data)
    }

    fn err(data: &Path, path: &str) -> String {
        read_file(data, path, MAX_READ_FILE_BYTES)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_file_of_the_volume_is_read_and_links_inside_are_followed() {
        let (_dir, data) = setup();
        assert_eq!(
            read_file(&data, "sub/vars.yml", 100).unwrap(),
            b"a: 1\n".to_vec()
        );
        assert_eq!(
            read_file(&data, "./sub//vars.yml", 100).unwrap(),
            b"a: 1\n".to_vec()
        );
        symlink("vars.yml", data.join("sub/link.yml")).unwrap();
        symlink("../vars.yml", data.join("sub/deeper/up.yml")).unwrap();
        assert_eq!(read_file(&data, "sub/link.yml", 100).unwrap(), b"a: 1\n");
        assert_eq!(
            read_file(&data, "sub/deeper/up.yml", 100).unwrap(),
            b"a: 1\n"
        );
    }

    #[test]
    fn hostile_paths_are_refused_and_nothing_outside_is_read() {
        let (dir, data) = setup();
        let outside = dir.path().join("secret");
        symlink(&outside, data.join("abs")).unwrap();
        symlink("../secret", data.join("rel")).unwrap();
        symlink("../../secret", data.join("sub/rel2")).unwrap();
        symlink(dir.path(), data.join("dirout")).unwrap();
        symlink("/proc/self/root/etc/hostname", data.join("magic")).unwrap();
        symlink("loop", data.join("loop")).unwrap();
        let cases = [
            ("../secret", "contains a '..' component"),
            ("sub/../../secret", "contains a '..' component"),
            ("/etc/passwd", "is absolute"),
            ("", "names the volume itself"),
            (".", "names the volume itself"),
            ("abs", "leads out of the volume"),
            ("rel", "leads out of the volume"),
            ("sub/rel2", "leads out of the volume"),
            ("dirout/secret", "leads out of the volume"),
            ("magic", "leads out of the volume"),
            ("loop", "too many levels of symlinks"),
            ("sub", "is not a regular file"),
            ("sub/vars.yml/x", "not a directory"),
            ("nope.yml", "not found"),
            ("a\0b", "NUL"),
        ];
        for (path, expected) in cases {
            let got = err(&data, path);
            assert!(got.contains(expected), "{path:?}: {got}");
            assert!(!got.contains("outside"), "{path:?}: {got}");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking_and_size_is_capped() {
        let (_dir, data) = setup();
        nix::unistd::mkfifo(&data.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(err(&data, "fifo").contains("is not a regular file"));
        std::fs::write(data.join("big"), vec![b'x'; 11]).unwrap();
        assert_eq!(read_file(&data, "big", 11).unwrap().len(), 11);
        let got = read_file(&data, "big", 10).unwrap_err().to_string();
        assert!(got.contains("larger than the 10 bytes"), "{got}");
    }
}
