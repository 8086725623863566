//! Applying one image layer (a tar stream, gzip, zstd or plain) onto a root
//! filesystem being built, with the whiteouts of the OCI image spec, and
//! refusing every entry that could land outside that root.
//!
//! The rules mirror the volume store's checks of tar streams
//! (`hangar-volumes`' `tar_in.rs` and `links.rs`), applied to an image:
//!
//! * entry names and hard link targets must be relative, without `..`
//!   (a leading `./` or `/` is not accepted either: `/etc` is refused);
//! * every parent of an entry is resolved inside the root like the kernel
//!   would, with the root as `/`, following the symlinks lower layers or
//!   earlier entries made: a relative link that stays inside is followed
//!   (`lib -> usr/lib`), one that leaves the root or is absolute is refused
//!   (an absolute target is always outside, as in the volume store), so no
//!   entry is ever written through a link to somewhere else;
//! * the entry itself is never followed: whatever is at its place is
//!   removed first, and files are created with `O_EXCL` (which follows no
//!   symlink);
//! * symlinks themselves may point anywhere (`/bin/sh -> /bin/busybox` is
//!   how images are made); they are only refused when used as a prefix;
//! * device and fifo entries are skipped (a worker's containers get their
//!   devices from the runtime), as Concourse's registry-image does;
//! * a layer's whiteout `.wh.NAME` removes `NAME` of the layers below, and
//!   `.wh..wh..opq` empties its directory of what the layers below put there.
//!
//! The caller builds the root filesystem in a staging directory and renames
//! it into place only when every layer applied, so a refused layer leaves
//! nothing that looks usable.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// How many symlinks one resolution may traverse (Linux's ELOOP limit).
const MAX_SYMLINK_HOPS: u32 = 40;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_WHITEOUT: &str = ".wh..wh..opq";

/// Why a layer could not be applied.
#[derive(Debug)]
pub(crate) enum ApplyError {
    /// The layer holds an entry that is refused: the image's fault.
    Refused { entry: String, reason: String },
    /// The layer is not a readable tar stream (bad compression, truncated).
    Corrupt(String),
    /// Writing the root filesystem failed (disk full, permissions).
    Io { context: String, source: io::Error },
}

fn refused(entry: &str, reason: impl Into<String>) -> ApplyError {
    ApplyError::Refused {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ApplyError {
    let context = context.into();
    move |source| ApplyError::Io { context, source }
}

/// What applying one layer did, for the log.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Applied {
    pub entries: u64,
    pub whiteouts: u64,
    pub skipped_devices: u64,
}

/// The compression of a layer, sniffed from its first bytes as Concourse's
/// registry-image does (builders do not always label zstd layers right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    Gzip,
    Zstd,
    None,
}

fn sniff(reader: &mut impl BufRead) -> io::Result<Compression> {
    let head = reader.fill_buf()?;
    Ok(if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else {
        Compression::None
    })
}

/// What the layers of one image may still unpack: decompressed tar bytes
/// (headers included) and entries, counted on what is read, as the volume
/// store bounds a stream-in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub bytes_left: u64,
    pub entries_left: u64,
}

/// A reader that fails once more than `left` bytes came through it, and
/// says so in `over` (the error itself reaches the caller through `tar`).
struct Meter<R> {
    inner: R,
    left: Rc<Cell<u64>>,
    over: Rc<Cell<bool>>,
}

impl<R: Read> Read for Meter<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let left = self.left.get();
        if n as u64 > left {
            self.over.set(true);
            return Err(io::Error::other(
                "the image's unpacked size limit is reached",
            ));
        }
        self.left.set(left - n as u64);
        Ok(n)
    }
}

/// The decompressed tar stream of a layer's blob, its compression sniffed
/// from its first bytes. Runs on a decoder thread ([`crate::decode_ahead`]).
pub(crate) fn decoder(
    blob: impl Read + Send + 'static,
) -> Result<(Compression, Box<dyn Read + Send>), ApplyError> {
    let mut reader = BufReader::with_capacity(256 * 1024, blob);
    let compression = sniff(&mut reader).map_err(io_err("read the layer"))?;
    let decoded: Box<dyn Read + Send> = match compression {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(reader)
                .map_err(|e| ApplyError::Corrupt(format!("zstd: {e}")))?,
        ),
        Compression::None => Box::new(reader),
    };
    Ok((compression, decoded))
}

/// Applies the layer whose tar stream is `stream` (from [`decoder`]) onto
/// `root`, counting what it unpacks against `budget`. `root` must exist and
/// be a directory the caller owns.
pub(crate) fn apply_layer(
    stream: impl Read,
    root: &Path,
    chown: bool,
    budget: &mut Budget,
    limits: (u64, u64),
) -> Result<Applied, ApplyError> {
    let left = Rc::new(Cell::new(budget.bytes_left));
    let over = Rc::new(Cell::new(false));
    let metered = Meter {
        inner: stream,
        left: Rc::clone(&left),
        over: Rc::clone(&over),
    };
    let mut applier = Applier::new(root, chown);
    applier.entries_left = budget.entries_left;
    let result = applier.apply(metered);
    budget.bytes_left = left.get();
    if over.get() {
        return Err(refused(
            "(layer)",
            format!(
                "the image unpacks to more than {} bytes, the limit",
                limits.0
            ),
        ));
    }
    let applied = result.map_err(|e| match e {
        ApplyError::Refused { entry, reason } if reason == TOO_MANY_ENTRIES => refused(
            &entry,
            format!("the image has more than {} entries, the limit", limits.1),
        ),
        other => other,
    })?;
    budget.entries_left -= applied.entries;
    Ok(applied)
}

const TOO_MANY_ENTRIES: &str = "too many entries";

const COPY_BUF: usize = 256 * 1024;

/// `io::copy` through a caller's buffer.
fn copy_file(from: &mut impl Read, to: &mut impl Write, buf: &mut [u8]) -> io::Result<u64> {
    let mut total = 0;
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

struct Applier<'a> {
    root: &'a Path,
    chown: bool,
    /// Paths (relative) this layer created, which an opaque whiteout of
    /// their directory keeps.
    created: HashSet<PathBuf>,
    /// The directories (relative) that hold something this layer created.
    holds_created: HashSet<PathBuf>,
    /// Directory modes, applied once the layer is written so a read-only
    /// directory can still receive its entries.
    dir_modes: Vec<(PathBuf, u32)>,
    applied: Applied,
    entries_left: u64,
    /// One buffer for every file's bytes: `io::copy` would move them
    /// 8 KiB at a time, a system call each.
    copy_buf: Vec<u8>,
}

impl<'a> Applier<'a> {
    fn new(root: &'a Path, chown: bool) -> Self {
        Applier {
            root,
            chown,
            created: HashSet::new(),
            holds_created: HashSet::new(),
            dir_modes: Vec::new(),
            applied: Applied::default(),
            entries_left: u64::MAX,
            copy_buf: vec![0; COPY_BUF],
        }
    }

    fn apply(mut self, stream: impl Read) -> Result<Applied, ApplyError> {
        let mut archive = tar::Archive::new(stream);
        let entries = archive
            .entries()
            .map_err(|e| ApplyError::Corrupt(format!("not a tar stream: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| ApplyError::Corrupt(format!("tar: {e}")))?;
            let raw = entry.path_bytes().into_owned();
            let shown = String::from_utf8_lossy(&raw).into_owned();
            if self.applied.entries >= self.entries_left {
                return Err(refused(&shown, TOO_MANY_ENTRIES));
            }
            self.entry(&mut entry, &raw, &shown)?;
            self.applied.entries += 1;
        }
        // Deepest first, so a read-only parent does not stop a child.
        self.dir_modes
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (path, mode) in std::mem::take(&mut self.dir_modes) {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                .map_err(io_err(format!("set the mode of {}", path.display())))?;
        }
        Ok(self.applied)
    }

    fn entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        raw: &[u8],
        shown: &str,
    ) -> Result<(), ApplyError> {
        use tar::EntryType as T;
        let rel = relative_name(raw).map_err(|why| refused(shown, format!("path {why}")))?;
        let Some(file_name) = rel.last().cloned() else {
            // `.` or `./`: the root itself; its metadata is not the image's
            // to change.
            return Ok(());
        };
        let parent_rel = &rel[..rel.len() - 1];
        let kind = entry.header().entry_type();

        // Whiteouts.
        let name_bytes = file_name.as_bytes();
        if name_bytes == OPAQUE_WHITEOUT.as_bytes() {
            let dir = self.resolve_dir(parent_rel, shown, false)?;
            if let Some(dir) = dir {
                self.opaque(&dir, parent_rel)?;
            }
            self.applied.whiteouts += 1;
            return Ok(());
        }
        if let Some(hidden) = name_bytes.strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
            if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(refused(shown, "whiteout of no name"));
            }
            if let Some(dir) = self.resolve_dir(parent_rel, shown, false)? {
                remove_any(&dir.join(OsStr::from_bytes(hidden)))?;
            }
            self.applied.whiteouts += 1;
            return Ok(());
        }

        match kind {
            T::Char | T::Block | T::Fifo => {
                self.applied.skipped_devices += 1;
                return Ok(());
            }
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => return Ok(()),
            _ => {}
        }

        let parent = self
            .resolve_dir(parent_rel, shown, true)?
            .expect("created when missing");
        let path = parent.join(&file_name);
        let mode = entry
            .header()
            .mode()
            .map_err(|e| refused(shown, format!("mode: {e}")))?
            & 0o7777;
        let rel_path: PathBuf = rel.iter().collect();

        match kind {
            T::Directory => {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove_any(&path)?;
                        make_dir(&path)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => make_dir(&path)?,
                    Err(e) => return Err(io_err(format!("inspect {}", path.display()))(e)),
                }
                self.dir_modes.push((path.clone(), mode));
            }
            T::Regular | T::Continuous => {
                remove_any(&path)?;
                let mut out = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(io_err(format!("create {}", path.display())))?;
                copy_file(entry, &mut out, &mut self.copy_buf).map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData => {
                        ApplyError::Corrupt(format!("{shown}: {e}"))
                    }
                    _ => ApplyError::Io {
                        context: format!("write {}", path.display()),
                        source: e,
                    },
                })?;
                out.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(io_err(format!("set the mode of {}", path.display())))?;
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(shown, "symlink has no target"))?
                    .into_owned();
                if target.is_empty() || target.contains(&0) {
                    return Err(refused(shown, "symlink has an empty target or a NUL byte"));
                }
                remove_any(&path)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)
                    .map_err(io_err(format!("make the symlink {}", path.display())))?;
            }
            T::Link => {
                let target_raw = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(shown, "hard link has no target"))?
                    .into_owned();
                let target_shown = String::from_utf8_lossy(&target_raw).into_owned();
                let target_rel = relative_name(&target_raw).map_err(|why| {
                    refused(shown, format!("hard link target {target_shown:?} {why}"))
                })?;
                let Some((target_name, target_parent)) = target_rel.split_last() else {
                    return Err(refused(shown, "hard link to the root"));
                };
                let target_dir =
                    self.resolve_dir(target_parent, shown, false)?
                        .ok_or_else(|| {
                            refused(
                                shown,
                                format!("hard link target {target_shown:?} does not exist"),
                            )
                        })?;
                let target = target_dir.join(target_name);
                match fs::symlink_metadata(&target) {
                    Ok(m) if m.is_dir() => {
                        return Err(refused(
                            shown,
                            format!("hard link to the directory {target_shown:?}"),
                        ))
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return Err(refused(
                            shown,
                            format!("hard link target {target_shown:?} does not exist"),
                        ))
                    }
                }
                if target == path {
                    return Ok(());
                }
                remove_any(&path)?;
                fs::hard_link(&target, &path)
                    .map_err(io_err(format!("make the hard link {}", path.display())))?;
                // A hard link shares the target's owner and mode.
                self.record_created(rel_path);
                return Ok(());
            }
            T::GNUSparse => return Err(refused(shown, "sparse file entries are not supported")),
            other => {
                return Err(refused(
                    shown,
                    format!("entry type {other:?} is not supported"),
                ))
            }
        }

        if self.chown {
            let uid = entry
                .header()
                .uid()
                .map_err(|e| refused(shown, format!("uid: {e}")))?;
            let gid = entry
                .header()
                .gid()
                .map_err(|e| refused(shown, format!("gid: {e}")))?;
            let uid = u32::try_from(uid).map_err(|_| refused(shown, "uid out of range"))?;
            let gid = u32::try_from(gid).map_err(|_| refused(shown, "gid out of range"))?;
            match std::os::unix::fs::lchown(&path, Some(uid), Some(gid)) {
                // Inside a user namespace (a sandboxed fetch) an id past
                // the namespace's range has no name: the file is root's,
                // as the sandbox makes such an owner of an image's file.
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {
                    std::os::unix::fs::lchown(&path, Some(0), Some(0))
                        .map_err(io_err(format!("chown {}", path.display())))?
                }
                other => other.map_err(io_err(format!("chown {}", path.display())))?,
            }
            if kind != T::Symlink && kind != T::Directory && mode & 0o6000 != 0 {
                // chown clears setuid and setgid bits: put them back.
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                    .map_err(io_err(format!("set the mode of {}", path.display())))?;
            }
        }
        self.record_created(rel_path);
        Ok(())
    }

    /// The real path of directory `rel` inside the root, following the
    /// symlinks on the way as long as they stay inside. `create` makes the
    /// missing ones (mode 0755, as tar does); otherwise `None` when one is
    /// missing.
    fn resolve_dir(
        &self,
        rel: &[OsString],
        shown: &str,
        create: bool,
    ) -> Result<Option<PathBuf>, ApplyError> {
        // Stack of real components below the root.
        let mut real: Vec<OsString> = Vec::new();
        let mut pending: std::collections::VecDeque<OsString> = rel.iter().cloned().collect();
        let mut hops = 0;
        while let Some(c) = pending.pop_front() {
            if c == ".." {
                if real.pop().is_none() {
                    return Err(refused(
                        shown,
                        "a symlink on its path leads out of the root filesystem",
                    ));
                }
                continue;
            }
            if c == "." || c.is_empty() {
                continue;
            }
            let mut path = self.root.to_path_buf();
            path.extend(&real);
            path.push(&c);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(refused(shown, "too many levels of symlinks on its path"));
                    }
                    let target = fs::read_link(&path)
                        .map_err(io_err(format!("read the symlink {}", path.display())))?;
                    if target.is_absolute() {
                        return Err(refused(
                            shown,
                            format!(
                                "its path goes through the absolute symlink {} -> {}",
                                display_rel(&real, &c),
                                target.display()
                            ),
                        ));
                    }
                    let mut next: Vec<OsString> = Vec::new();
                    for comp in target.components() {
                        match comp {
                            Component::Normal(n) => next.push(n.to_os_string()),
                            Component::ParentDir => next.push(OsString::from("..")),
                            Component::CurDir => {}
                            Component::RootDir | Component::Prefix(_) => unreachable!("relative"),
                        }
                    }
                    for n in next.into_iter().rev() {
                        pending.push_front(n);
                    }
                }
                Ok(m) if m.is_dir() => real.push(c),
                Ok(_) => {
                    if !create {
                        return Ok(None);
                    }
                    // A file where a directory is needed: the layer
                    // replaces it, as tar would.
                    remove_any(&path)?;
                    make_dir(&path)?;
                    real.push(c);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if !create {
                        return Ok(None);
                    }
                    make_dir(&path)?;
                    real.push(c);
                }
                Err(e) => return Err(io_err(format!("inspect {}", path.display()))(e)),
            }
        }
        let mut path = self.root.to_path_buf();
        path.extend(&real);
        Ok(Some(path))
    }

    /// Empties `dir` of what lower layers put there; what this layer
    /// already wrote in it (at any depth) stays.
    fn opaque(&self, dir: &Path, rel: &[OsString]) -> Result<(), ApplyError> {
        self.prune(dir, &rel.iter().collect::<PathBuf>())
    }

    fn prune(&self, dir: &Path, base: &Path) -> Result<(), ApplyError> {
        let listing = fs::read_dir(dir).map_err(io_err(format!("list {}", dir.display())))?;
        for child in listing {
            let child = child.map_err(io_err(format!("list {}", dir.display())))?;
            let rel = base.join(child.file_name());
            let is_dir = child.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && self.holds_created.contains(&rel) {
                // This layer wrote below it: keep those, drop the rest.
                self.prune(&child.path(), &rel)?;
            } else if !self.created.contains(&rel) {
                remove_any(&child.path())?;
            }
        }
        Ok(())
    }

    fn record_created(&mut self, rel: PathBuf) {
        for ancestor in rel.ancestors().skip(1) {
            if ancestor.as_os_str().is_empty() || !self.holds_created.insert(ancestor.to_path_buf())
            {
                break;
            }
        }
        self.created.insert(rel);
    }
}

fn display_rel(real: &[OsString], c: &OsStr) -> String {
    let mut p: PathBuf = real.iter().collect();
    p.push(c);
    format!("/{}", p.display())
}

fn make_dir(path: &Path) -> Result<(), ApplyError> {
    fs::create_dir(path).map_err(io_err(format!("create the directory {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(io_err(format!("set the mode of {}", path.display())))
}

/// Removes whatever is at `path` (not following it); nothing there is fine.
fn remove_any(path: &Path) -> Result<(), ApplyError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            // A read-only directory of a lower layer must still go.
            make_removable(path)?;
            fs::remove_dir_all(path).map_err(io_err(format!("remove {}", path.display())))
        }
        Ok(_) => fs::remove_file(path).map_err(io_err(format!("remove {}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(format!("inspect {}", path.display()))(e)),
    }
}

fn make_removable(dir: &Path) -> Result<(), ApplyError> {
    let m = fs::symlink_metadata(dir).map_err(io_err(format!("inspect {}", dir.display())))?;
    if m.permissions().mode() & 0o700 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("set the mode of {}", dir.display())))?;
    }
    for child in fs::read_dir(dir).map_err(io_err(format!("list {}", dir.display())))? {
        let child = child.map_err(io_err(format!("list {}", dir.display())))?;
        if child.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            make_removable(&child.path())?;
        }
    }
    Ok(())
}

/// An entry name as components: relative, no `..`, no NUL. `./a/b/` is
/// `[a, b]`; `.` is `[]`.
fn relative_name(raw: &[u8]) -> Result<Vec<OsString>, &'static str> {
    if raw.is_empty() {
        return Err("is empty");
    }
    if raw.contains(&0) {
        return Err("contains a NUL byte");
    }
    if raw.starts_with(b"/") {
        return Err("is absolute");
    }
    let mut out = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("contains `..`"),
            p => out.push(OsStr::from_bytes(p).to_os_string()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_relative_without_parent_components() {
        assert_eq!(relative_name(b"./a/b/").unwrap(), vec!["a", "b"]);
        assert!(relative_name(b".").unwrap().is_empty());
        assert_eq!(relative_name(b"/etc/passwd"), Err("is absolute"));
        assert_eq!(relative_name(b"a/../../x"), Err("contains `..`"));
        assert_eq!(relative_name(b"../x"), Err("contains `..`"));
        assert_eq!(relative_name(b""), Err("is empty"));
    }
}
