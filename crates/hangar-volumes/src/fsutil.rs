//! Small filesystem helpers shared by the real OS seam and the tar code.
//! Nothing here follows a symlink unless it says so.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::{utimensat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use rustix::fs::{Mode as RMode, OFlags};

/// What a tree copy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    pub specials: u64,
    pub skipped: u64,
    pub bytes: u64,
}

pub(crate) fn running_as_root() -> bool {
    // Asked once per file of an archive: the answer does not change in a
    // process that never changes its user, so it is asked of the kernel once.
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| nix::unistd::geteuid().is_root())
}

/// Set atime/mtime of `path` itself (a symlink is not followed).
pub(crate) fn set_times_nofollow(path: &Path, mtime_s: i64, mtime_ns: i64) -> io::Result<()> {
    let ts = TimeSpec::new(mtime_s, mtime_ns);
    utimensat(None, path, &ts, &ts, UtimensatFlags::NoFollowSymlink).map_err(io::Error::from)
}

/// Change owner of `path` itself (a symlink is not followed). Only as root.
pub(crate) fn lchown_if_root(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    if running_as_root() {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Open a regular file for reading without following a final symlink and
/// without blocking on a fifo that may have been swapped in; then check it
/// really is a regular file.
pub(crate) fn open_regular_nofollow(path: &Path) -> io::Result<(File, fs::Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)?;
    regular(file, || path.display().to_string())
}

/// [`open_regular_nofollow`] of `name` in the open directory `dir`: the
/// kernel looks up one name, not the whole path again.
pub(crate) fn open_regular_nofollow_at(
    dir: &OwnedFd,
    name: &OsStr,
) -> io::Result<(File, fs::Metadata)> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(dir, name, flags, RMode::empty())?);
    regular(file, || name.to_string_lossy().into_owned())
}

fn regular(file: File, shown: impl Fn() -> String) -> io::Result<(File, fs::Metadata)> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            shown()
        )));
    }
    Ok((file, meta))
}

/// A directory opened to make or open entries in by name (`O_PATH`: no
/// read of it), never through a final symlink.
pub(crate) fn open_dir_nofollow(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, RMode::empty())?)
}

/// Recursively copy `from` (a directory) to `to` (must not exist), like
/// `cp -a`: modes, ownership (as root), mtimes, symlinks as symlinks,
/// hard links within the tree kept as hard links, fifos and device nodes
/// recreated; sockets are skipped.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<CopyStats> {
    let meta = fs::symlink_metadata(from)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", from.display()),
        ));
    }
    let mut stats = CopyStats::default();
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    copy_dir(from, to, &meta, &mut stats, &mut links)?;
    Ok(stats)
}

fn copy_dir(
    from: &Path,
    to: &Path,
    meta: &fs::Metadata,
    stats: &mut CopyStats,
    links: &mut HashMap<(u64, u64), PathBuf>,
) -> io::Result<()> {
    fs::create_dir(to)?;
    // Writable while we fill it; the real mode is applied afterwards.
    fs::set_permissions(to, fs::Permissions::from_mode(0o700))?;
    stats.dirs += 1;
    let mut entries: Vec<_> = fs::read_dir(from)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let m = fs::symlink_metadata(&src)?;
        let ft = m.file_type();
        if ft.is_dir() {
            copy_dir(&src, &dst, &m, stats, links)?;
            continue;
        }
        if ft.is_symlink() {
            let target = fs::read_link(&src)?;
            std::os::unix::fs::symlink(&target, &dst)?;
            stats.symlinks += 1;
        } else if m.nlink() > 1 && links.contains_key(&(m.dev(), m.ino())) {
            fs::hard_link(&links[&(m.dev(), m.ino())], &dst)?;
            stats.hardlinks += 1;
            continue;
        } else if ft.is_file() {
            let (mut input, _) = open_regular_nofollow(&src)?;
            let mut output = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&dst)?;
            // io::copy uses copy_file_range on Linux for file-to-file.
            stats.bytes += io::copy(&mut input, &mut output)?;
            drop(output);
            stats.files += 1;
        } else if let Some(kind) = special_kind(&m) {
            let perm = Mode::from_bits_truncate(m.mode() & 0o7777);
            nix::sys::stat::mknod(&dst, kind, perm, m.rdev()).map_err(io::Error::from)?;
            stats.specials += 1;
        } else {
            tracing::warn!(path = %src.display(), "skipping socket while copying tree");
            stats.skipped += 1;
            continue;
        }
        if m.nlink() > 1 && !ft.is_symlink() {
            links.insert((m.dev(), m.ino()), dst.clone());
        }
        apply_meta(&dst, &m)?;
    }
    apply_meta(to, meta)
}

fn special_kind(m: &fs::Metadata) -> Option<SFlag> {
    use std::os::unix::fs::FileTypeExt;
    let ft = m.file_type();
    if ft.is_fifo() {
        Some(SFlag::S_IFIFO)
    } else if ft.is_char_device() {
        Some(SFlag::S_IFCHR)
    } else if ft.is_block_device() {
        Some(SFlag::S_IFBLK)
    } else {
        None
    }
}

/// Apply owner, mode and mtime of `m` to `path` (never following a symlink).
fn apply_meta(path: &Path, m: &fs::Metadata) -> io::Result<()> {
    lchown_if_root(path, m.uid(), m.gid())?;
    if !m.file_type().is_symlink() {
        fs::set_permissions(path, fs::Permissions::from_mode(m.mode() & 0o7777))?;
    }
    set_times_nofollow(path, m.mtime(), m.mtime_nsec())
}

/// Disk usage of a tree in bytes (allocated blocks), never following
/// symlinks; hard links counted once.
pub(crate) fn disk_usage(root: &Path) -> io::Result<u64> {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let m = fs::symlink_metadata(&dir)?;
        total += m.blocks() * 512;
        if !m.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let m = entry.metadata()?; // DirEntry::metadata does not follow symlinks
            if m.is_dir() {
                stack.push(entry.path());
            } else if m.nlink() <= 1 || seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
    }
    Ok(total)
}

/// Mount points (absolute paths) listed in /proc/self/mountinfo.
pub(crate) fn mount_points() -> io::Result<Vec<PathBuf>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .collect())
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo(r"/a\134b"), r"/a\b");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/trailing\"), r"/trailing\");
    }

    #[test]
    fn copy_tree_keeps_modes_symlinks_and_hardlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/exe"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(src.join("sub/exe"), fs::Permissions::from_mode(0o751)).unwrap();
        fs::hard_link(src.join("sub/exe"), src.join("hard")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", src.join("dangling")).unwrap();
        let dst = tmp.path().join("dst");
        let stats = copy_tree(&src, &dst).unwrap();
        assert_eq!(stats.files, 1);
        assert_eq!(stats.hardlinks, 1);
        assert_eq!(stats.symlinks, 1);
        let m = fs::metadata(dst.join("sub/exe")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o751);
        assert_eq!(m.ino(), fs::metadata(dst.join("hard")).unwrap().ino());
        assert_eq!(
            fs::read_link(dst.join("dangling")).unwrap(),
            PathBuf::from("/nonexistent/target")
        );
    }
}
