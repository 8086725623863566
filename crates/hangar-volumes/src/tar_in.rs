//! Streaming a tar archive into a volume, safely.
//!
//! Protocol: the archive is extracted into a fresh staging directory that is
//! on the same filesystem as the volume's data (beside `data/`, or inside it
//! for overlay children), with every entry checked *before* anything is
//! written for it:
//!
//! * names must be relative without `..` (refused otherwise);
//! * no entry may be written through a symlink (every parent component is
//!   checked to be a real directory inside the staging dir, files are created
//!   with `O_EXCL`);
//! * only regular files, directories, symlinks and hard links are accepted;
//!   devices, fifos, sparse files and unknown types are refused;
//! * hard links must point at a regular file extracted earlier from the same
//!   archive (checked on the staging dir, which holds only this archive:
//!   never a symlink, never the volume's content);
//! * decompressed bytes actually read are metered against `max_bytes`
//!   (headers, extensions and data alike, so a gzip bomb stops at the limit),
//!   extension headers are additionally capped per entry, and entries are
//!   counted against `max_entries`.
//!
//! After the whole archive was read, the merge into the destination is
//! checked for conflicts (directory vs non-directory, entries that would go
//! through a symlink already in the volume); then every symlink is resolved
//! in the volume as it will be after the merge, and so are the links
//! already in the volume when the archive adds or replaces one (see
//! `links.rs`: multi-step escapes); only then are the staged entries
//! renamed into place. These last steps hold a lock, so concurrent archives
//! are checked one after the other. Any refusal leaves the volume as it
//! was; the staging directory is removed by the caller.
//!
//! Memory does not grow with the archive's size: no record per entry, one
//! small record (keyed by inode) per distinct explicit directory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rustix::fs::{Mode, OFlags};

use crate::driver::names;
use crate::error::{IoContext, LimitKind, VolumeError};
use crate::fsutil::{lchown_if_root, open_dir_nofollow, set_times_nofollow};
use crate::links;
use crate::paths::{self, display, join, RelPath};
use crate::Compression;

/// Cap on the bytes read while parsing one entry's headers (including pax
/// extended headers and GNU long names, which the tar parser buffers in
/// memory).
pub const MAX_HEADER_BYTES: u64 = 1024 * 1024;

/// Name prefix of [`extract_into_dir`]'s staging dir inside the target dir.
pub(crate) const EXTRACT_STAGING: &str = ".hangar-extract-";

/// Limits applied to one stream-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum decompressed archive bytes read (headers included).
    pub max_bytes: u64,
    /// Maximum number of archive entries.
    pub max_entries: u64,
    /// Stream-ins one worker runs at once (its volume API answers 503 past
    /// that); each holds a blocking thread, buffers and a staging dir.
    pub max_concurrent_stream_ins: usize,
}

impl Default for Limits {
    /// 16 GiB, one million entries, 8 stream-ins at once.
    fn default() -> Self {
        Limits {
            max_bytes: 16 << 30,
            max_entries: 1_000_000,
            max_concurrent_stream_ins: 8,
        }
    }
}

/// What a successful stream-in did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamInReport {
    pub entries: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    /// Decompressed archive bytes read (what `max_bytes` is compared with).
    pub archive_bytes: u64,
    /// Bytes of regular file content written.
    pub content_bytes: u64,
}

/// Where the archive lands.
pub(crate) struct Target<'a> {
    /// Fresh, empty staging dir on the same filesystem as `data`.
    pub staging: &'a Path,
    /// The volume's data root.
    pub data: &'a Path,
    /// Destination inside `data`.
    pub sub: &'a [OsString],
    /// Keep setuid/setgid bits.
    pub privileged: bool,
    /// Every entry made is owned by this uid and gid (as root), whatever
    /// the archive says, directories made for parents too.
    pub owner: Option<(u32, u32)>,
    /// Held from the checks against the existing content to the end of the
    /// merge, so two archives cannot each pass against a volume without
    /// the other and together build an escape.
    pub commit: &'a Mutex<()>,
}

/// Extract, validate and merge. See the module docs.
pub(crate) fn stream_in(
    reader: impl Read,
    compression: Compression,
    limits: &Limits,
    target: &Target<'_>,
) -> Result<StreamInReport, VolumeError> {
    check_destination(target.data, target.sub)?;
    let mut ex = Extractor::new(target, limits);
    ex.extract(reader, compression)?;
    let _commit = target.commit.lock().unwrap_or_else(PoisonError::into_inner);
    let dest = join(target.data, target.sub);
    let replaces_symlink = check_merge(target.staging, &dest, &[])?;
    // After the merge check, which makes the merged view exact.
    links::check_links(target, ex.report.symlinks > 0 || replaces_symlink)?;
    create_destination(target.data, target.sub)?;
    merge(target.staging, &dest, &ex.dirs)?;
    Ok(ex.report)
}

// ---------------------------------------------------------------- metering

/// Counts decompressed bytes as the tar parser pulls them.
struct Meter {
    limit: u64,
    total: std::cell::Cell<u64>,
    phase_start: std::cell::Cell<u64>,
    phase_budget: std::cell::Cell<Option<u64>>,
    tripped: std::cell::Cell<Option<LimitKind>>,
}

impl Meter {
    fn new(limit: u64) -> Self {
        Meter {
            limit,
            total: 0.into(),
            phase_start: 0.into(),
            phase_budget: None.into(),
            tripped: None.into(),
        }
    }

    fn begin_headers(&self) {
        self.phase_start.set(self.total.get());
        self.phase_budget.set(Some(MAX_HEADER_BYTES));
    }

    fn end_headers(&self) {
        self.phase_budget.set(None);
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.total.get())
    }
}

struct MeteredReader<'m, R> {
    inner: R,
    meter: &'m Meter,
}

impl<R: Read> Read for MeteredReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = self.meter;
        if m.tripped.get().is_some() {
            return Err(io::Error::other("archive limit exceeded"));
        }
        let total = m.total.get();
        // Never read more than one byte past a limit: that byte proves the
        // limit is exceeded without buffering an unbounded amount.
        let mut allow = m.limit.saturating_sub(total).saturating_add(1);
        if let Some(budget) = m.phase_budget.get() {
            let used = total - m.phase_start.get();
            allow = allow.min(budget.saturating_sub(used).saturating_add(1));
        }
        let want = buf.len().min(usize::try_from(allow).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        let total = total + n as u64;
        m.total.set(total);
        if total > m.limit {
            m.tripped.set(Some(LimitKind::Bytes));
            return Err(io::Error::other("archive byte limit exceeded"));
        }
        if let Some(budget) = m.phase_budget.get() {
            if total - m.phase_start.get() > budget {
                m.tripped.set(Some(LimitKind::HeaderBytes));
                return Err(io::Error::other("archive header size limit exceeded"));
            }
        }
        Ok(n)
    }
}

// -------------------------------------------------------------- extraction

/// Bytes read from the archive per write of a staged file.
const COPY_BUFFER: usize = 256 * 1024;

struct Extractor<'a> {
    t: &'a Target<'a>,
    limits: Limits,
    /// Metadata of explicit directory entries, applied during the merge.
    dirs: DirMetas,
    report: StreamInReport,
    mode_mask: u32,
    /// One copy buffer for every file: a fresh 256 KiB buffer per file
    /// (zeroed, mapped and unmapped by the allocator) cost more than
    /// writing a tree of small files.
    buf: Vec<u8>,
    /// The parent directory (relative to staging) `ensure_parents` last
    /// found or made real through and through. A staged directory is never
    /// replaced (an entry of its name is refused), so it stays real: an
    /// archive's next entries in the same directory skip the walk.
    known_parent: std::cell::RefCell<Vec<OsString>>,
    /// That directory, open: files are created in it by name (`openat`),
    /// so the kernel does not walk the whole staged path again for each.
    /// Opened lazily, dropped whenever `known_parent` changes.
    parent_dir: std::cell::RefCell<Option<OwnedFd>>,
}

/// Keyed by the staged directory's inode, not by name: an archive that
/// repeats one directory a million times costs one record, and no record
/// holds a path. (Regular files need no record at all: a hard link's
/// target is checked on the staging dir, which holds only this archive.)
type DirMetas = HashMap<u64, DirMeta>;

/// 24 bytes: with its key, 32 per distinct directory.
struct DirMeta {
    /// `NO_MTIME` when the header has none.
    mtime: i64,
    owner: Option<(u32, u32)>,
    mode: u32,
}

const NO_MTIME: i64 = i64::MIN;

pub(crate) fn refused(entry: &str, reason: impl Into<String>) -> VolumeError {
    VolumeError::Refused {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

impl<'a> Extractor<'a> {
    fn new(t: &'a Target<'a>, limits: &Limits) -> Self {
        Extractor {
            t,
            limits: *limits,
            dirs: HashMap::new(),
            report: StreamInReport::default(),
            mode_mask: if t.privileged { 0o7777 } else { 0o1777 },
            buf: vec![0u8; COPY_BUFFER],
            known_parent: std::cell::RefCell::new(Vec::new()),
            parent_dir: std::cell::RefCell::new(None),
        }
    }

    fn read_failure(&self, meter: &Meter, entry: &str, e: io::Error) -> VolumeError {
        match meter.tripped.get() {
            Some(LimitKind::HeaderBytes) => VolumeError::TooLarge {
                entry: entry.to_string(),
                kind: LimitKind::HeaderBytes,
                limit: MAX_HEADER_BYTES,
            },
            Some(kind) => VolumeError::TooLarge {
                entry: entry.to_string(),
                kind,
                limit: self.limits.max_bytes,
            },
            None => VolumeError::BadArchive {
                entry: entry.to_string(),
                source: e,
            },
        }
    }

    fn extract(&mut self, reader: impl Read, compression: Compression) -> Result<(), VolumeError> {
        let meter = Meter::new(self.limits.max_bytes);
        let input: Box<dyn Read + '_> = match compression {
            Compression::None => Box::new(BufReader::with_capacity(256 * 1024, reader)),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(
                BufReader::with_capacity(256 * 1024, reader),
            )),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(
                    256 * 1024,
                    reader,
                ))
                .ctx(|| "start zstd stream".to_string())?,
            ),
        };
        let mut archive = tar::Archive::new(MeteredReader {
            inner: input,
            meter: &meter,
        });
        let mut entries = archive
            .entries()
            .map_err(|e| self.read_failure(&meter, "(first entry)", e))?;
        let mut last: Option<String> = None;
        loop {
            meter.begin_headers();
            let next = entries.next();
            meter.end_headers();
            let mut entry = match next {
                None => break,
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    let at = match &last {
                        Some(l) => format!("(entry after {l})"),
                        None => "(first entry)".to_string(),
                    };
                    return Err(self.read_failure(&meter, &at, e));
                }
            };
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            self.report.entries += 1;
            if self.report.entries > self.limits.max_entries {
                return Err(VolumeError::TooLarge {
                    entry: name,
                    kind: LimitKind::Entries,
                    limit: self.limits.max_entries,
                });
            }
            // Cheap early refusal on the declared size; the meter remains the
            // real guard since it counts what is actually read.
            if entry.size() > meter.remaining() {
                return Err(VolumeError::TooLarge {
                    entry: name,
                    kind: LimitKind::Bytes,
                    limit: self.limits.max_bytes,
                });
            }
            self.entry(&mut entry, &name, &meter)?;
            // Consume whatever the handler did not read, still metered.
            io::copy(&mut entry, &mut io::sink())
                .map_err(|e| self.read_failure(&meter, &name, e))?;
            last = Some(name);
        }
        self.report.archive_bytes = meter.total.get();
        Ok(())
    }

    fn entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        name: &str,
        meter: &Meter,
    ) -> Result<(), VolumeError> {
        use tar::EntryType as T;
        let rel = paths::normalize_bytes(&entry.path_bytes())
            .map_err(|why| refused(name, format!("path {why}")))?;
        if self.t.sub.is_empty()
            && rel
                .first()
                .is_some_and(|c| c.to_string_lossy().starts_with(names::STREAM_STAGING))
        {
            return Err(refused(
                name,
                "name is reserved for the volume manager's staging dirs",
            ));
        }
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().unwrap_or(0o644) & self.mode_mask;
        let (uid, gid) = match self.t.owner {
            Some((u, g)) => (Some(u), Some(g)),
            None => (
                header.uid().ok().and_then(|v| u32::try_from(v).ok()),
                header.gid().ok().and_then(|v| u32::try_from(v).ok()),
            ),
        };
        let mtime = header.mtime().ok().and_then(|v| i64::try_from(v).ok());
        match kind {
            T::Directory => {
                if rel.is_empty() {
                    return Ok(()); // "./": the destination itself; left as is
                }
                self.ensure_parents(&rel, name)?;
                let path = join(self.t.staging, &rel);
                let ino = match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => m.ino(),
                    Ok(_) => return Err(refused(
                        name,
                        "directory conflicts with an earlier non-directory entry of the same name",
                    )),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        fs::create_dir(&path).ctx_path("create staged directory", &path)?;
                        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
                            .ctx_path("chmod staged directory", &path)?;
                        fs::symlink_metadata(&path)
                            .ctx_path("stat staged directory", &path)?
                            .ino()
                    }
                    Err(e) => return Err(VolumeError::io(format!("stat {}", path.display()), e)),
                };
                // A repeated entry replaces the earlier one's metadata.
                self.dirs.insert(
                    ino,
                    DirMeta {
                        mtime: mtime.unwrap_or(NO_MTIME),
                        owner: uid.zip(gid),
                        mode,
                    },
                );
                self.report.dirs += 1;
            }
            T::Regular | T::Continuous => {
                let (mut file, path) = self.create_file(&rel, name)?;
                let mut written = 0u64;
                loop {
                    let n = match entry.read(&mut self.buf) {
                        Ok(n) => n,
                        Err(e) => return Err(self.read_failure(meter, name, e)),
                    };
                    if n == 0 {
                        break;
                    }
                    file.write_all(&self.buf[..n])
                        .ctx_path("write staged file", &path)?;
                    written += n as u64;
                }
                set_file_meta(&file, &path, mode, uid.zip(gid), mtime)?;
                self.report.files += 1;
                self.report.content_bytes += written;
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|c| c.into_owned())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| refused(name, "symlink has no target"))?;
                if target.contains(&0) {
                    return Err(refused(name, "symlink target contains a NUL byte"));
                }
                let target = PathBuf::from(std::ffi::OsString::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&target),
                ));
                if target.is_absolute() {
                    return Err(refused(
                        name,
                        format!(
                            "symlink target {} is absolute and points outside the volume",
                            target.display()
                        ),
                    ));
                }
                let path = self.prepare_slot(&rel, name)?;
                std::os::unix::fs::symlink(&target, &path)
                    .ctx_path("create staged symlink", &path)?;
                set_node_meta(&path, mode, uid, gid, mtime, true)?;
                self.report.symlinks += 1;
            }
            T::Link => {
                let raw = entry
                    .link_name_bytes()
                    .map(|c| c.into_owned())
                    .ok_or_else(|| refused(name, "hard link has no target"))?;
                let shown = String::from_utf8_lossy(&raw).into_owned();
                let target = paths::normalize_bytes(&raw)
                    .map_err(|why| refused(name, format!("hard link target {shown:?} {why}")))?;
                if target.is_empty() || target == rel {
                    return Err(refused(
                        name,
                        format!("hard link target {shown:?} is invalid"),
                    ));
                }
                // Never a symlink (a hard link to a symlink would be a
                // second, unchecked copy of it), never the volume's content.
                if !self.staged_regular_file(&target)? {
                    return Err(refused(
                        name,
                        format!(
                            "hard link target {shown:?} is not a regular file extracted earlier from this archive"
                        ),
                    ));
                }
                let src = join(self.t.staging, &target);
                let path = self.prepare_slot(&rel, name)?;
                fs::hard_link(&src, &path).ctx_path("create staged hard link", &path)?;
                self.report.hardlinks += 1;
            }
            T::XGlobalHeader => {} // global pax header: nothing to apply
            T::Char => return Err(refused(name, "character device entries are not allowed")),
            T::Block => return Err(refused(name, "block device entries are not allowed")),
            T::Fifo => return Err(refused(name, "fifo entries are not allowed")),
            T::GNUSparse => return Err(refused(name, "sparse file entries are not supported")),
            other => {
                return Err(refused(
                    name,
                    format!("unsupported entry type {:?}", other.as_byte() as char),
                ))
            }
        }
        Ok(())
    }

    /// `rel` is a regular file in staging, reached through real directories.
    fn staged_regular_file(&self, rel: &[OsString]) -> Result<bool, VolumeError> {
        for i in 1..=rel.len() {
            let p = join(self.t.staging, &rel[..i]);
            let m = match fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
                {
                    return Ok(false)
                }
                Err(e) => return Err(VolumeError::io(format!("stat {}", p.display()), e)),
            };
            let ok = if i < rel.len() {
                m.is_dir()
            } else {
                m.file_type().is_file()
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Create missing parents of `rel` as real directories; refuse to go
    /// through symlinks or files.
    fn ensure_parents(&self, rel: &[OsString], name: &str) -> Result<(), VolumeError> {
        let parent = &rel[..rel.len().saturating_sub(1)];
        if parent == self.known_parent.borrow().as_slice() {
            return Ok(());
        }
        for i in 1..rel.len() {
            let p = join(self.t.staging, &rel[..i]);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(refused(
                        name,
                        format!("path goes through symlink {}", display(&rel[..i])),
                    ))
                }
                Ok(_) => {
                    return Err(refused(
                        name,
                        format!("parent {} is not a directory", display(&rel[..i])),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&p).ctx_path("create staged directory", &p)?;
                    if let Some((u, g)) = self.t.owner {
                        lchown_if_root(&p, u, g).ctx_path("chown staged directory", &p)?;
                    }
                }
                Err(e) => return Err(VolumeError::io(format!("stat {}", p.display()), e)),
            }
        }
        *self.known_parent.borrow_mut() = parent.to_vec();
        *self.parent_dir.borrow_mut() = None;
        Ok(())
    }

    /// A new regular file at `rel`, made in its parent's open directory;
    /// an earlier file or symlink of the same name is replaced and an
    /// earlier directory refused, as [`Self::prepare_slot`] does, which
    /// runs only when the name is taken (the first try is `O_EXCL`).
    fn create_file(&self, rel: &RelPath, name: &str) -> Result<(fs::File, PathBuf), VolumeError> {
        let Some(file_name) = rel.last() else {
            return Err(refused(name, "entry has an empty path"));
        };
        self.ensure_parents(rel, name)?;
        let path = join(self.t.staging, rel);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let first = {
            let mut parent = self.parent_dir.borrow_mut();
            let dir = match parent.as_ref() {
                Some(dir) => dir,
                None => {
                    let dir_path = join(self.t.staging, &rel[..rel.len() - 1]);
                    let dir = open_dir_nofollow(&dir_path)
                        .ctx_path("open staged directory", &dir_path)?;
                    parent.insert(dir)
                }
            };
            rustix::fs::openat(
                dir,
                file_name.as_os_str(),
                flags,
                Mode::from_raw_mode(0o600),
            )
        };
        let fd = match first {
            Ok(fd) => fd,
            Err(rustix::io::Errno::EXIST) => {
                let path = self.prepare_slot(rel, name)?;
                rustix::fs::open(&path, flags, Mode::from_raw_mode(0o600))
                    .map_err(io::Error::from)
                    .ctx_path("create staged file", &path)?
            }
            Err(e) => return Err(io::Error::from(e)).ctx_path("create staged file", &path),
        };
        Ok((fs::File::from(fd), path))
    }

    /// Make `rel` free for a new non-directory node: parents exist, an
    /// earlier file or symlink of the same name is replaced (tar semantics),
    /// an earlier directory is a conflict.
    fn prepare_slot(&self, rel: &RelPath, name: &str) -> Result<PathBuf, VolumeError> {
        if rel.is_empty() {
            return Err(refused(name, "entry has an empty path"));
        }
        self.ensure_parents(rel, name)?;
        let path = join(self.t.staging, rel);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => Err(refused(
                name,
                "entry conflicts with an earlier directory of the same name",
            )),
            Ok(_) => {
                fs::remove_file(&path).ctx_path("replace staged entry", &path)?;
                Ok(path)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path),
            Err(e) => Err(VolumeError::io(format!("stat {}", path.display()), e)),
        }
    }
}

/// chown (as root), chmod and mtime of a freshly staged regular file,
/// through the descriptor that made it: no path is resolved again.
fn set_file_meta(
    file: &fs::File,
    path: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
    mtime: Option<i64>,
) -> Result<(), VolumeError> {
    if let Some((u, g)) = owner.filter(|_| crate::fsutil::running_as_root()) {
        std::os::unix::fs::fchown(file, Some(u), Some(g)).ctx_path("chown staged entry", path)?;
    }
    // After chown, which clears setuid/setgid bits.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .ctx_path("chmod staged entry", path)?;
    if let Some(t) = mtime {
        let ts = nix::sys::time::TimeSpec::new(t, 0);
        nix::sys::stat::futimens(std::os::fd::AsRawFd::as_raw_fd(file), &ts, &ts)
            .map_err(io::Error::from)
            .ctx_path("set mtime of staged entry", path)?;
    }
    Ok(())
}

/// chown, chmod, mtime of a freshly staged node (never follows it).
fn set_node_meta(
    path: &Path,
    mode: u32,
    uid: Option<u32>,
    gid: Option<u32>,
    mtime: Option<i64>,
    is_symlink: bool,
) -> Result<(), VolumeError> {
    if let (Some(u), Some(g)) = (uid, gid) {
        lchown_if_root(path, u, g).ctx_path("chown staged entry", path)?;
    }
    if !is_symlink {
        // After chown, which clears setuid/setgid bits.
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .ctx_path("chmod staged entry", path)?;
    }
    if let Some(t) = mtime {
        set_times_nofollow(path, t, 0).ctx_path("set mtime of staged entry", path)?;
    }
    Ok(())
}

// ------------------------------------------------------------------ merge

/// Each existing component of the destination subpath must be a real
/// directory (never a symlink a container may have planted).
fn check_destination(data: &Path, sub: &[OsString]) -> Result<(), VolumeError> {
    for i in 1..=sub.len() {
        let p = join(data, &sub[..i]);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                let what = if m.file_type().is_symlink() {
                    "is a symlink"
                } else {
                    "is not a directory"
                };
                return Err(VolumeError::InvalidPath {
                    path: display(sub),
                    reason: format!("{} {what}", display(&sub[..i])),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(VolumeError::io(format!("stat {}", p.display()), e)),
        }
    }
    Ok(())
}

fn create_destination(data: &Path, sub: &[OsString]) -> Result<(), VolumeError> {
    check_destination(data, sub)?;
    for i in 1..=sub.len() {
        let p = join(data, &sub[..i]);
        match fs::create_dir(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(VolumeError::io(format!("create {}", p.display()), e)),
        }
    }
    check_destination(data, sub)
}

fn is_real_dir(m: &fs::Metadata) -> bool {
    m.file_type().is_dir()
}

/// Refuse merges that would replace a directory by a non-directory or the
/// other way round (which includes writing through a symlink already in
/// the volume). Answers whether a staged entry replaces a symlink.
fn check_merge(staged: &Path, dest: &Path, rel: &[OsString]) -> Result<bool, VolumeError> {
    let mut replaces_symlink = false;
    for entry in fs::read_dir(staged).ctx_path("list staged directory", staged)? {
        let entry = entry.ctx_path("list staged directory", staged)?;
        let mut r = rel.to_vec();
        r.push(entry.file_name());
        let staged_is_dir = entry
            .file_type()
            .ctx_path("stat staged entry", &entry.path())?
            .is_dir();
        let d = dest.join(entry.file_name());
        let existing = match fs::symlink_metadata(&d) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => continue,
            Err(e) => return Err(VolumeError::io(format!("stat {}", d.display()), e)),
        };
        let existing_is_link = existing.file_type().is_symlink();
        match (staged_is_dir, is_real_dir(&existing)) {
            (true, true) => replaces_symlink |= check_merge(&entry.path(), &d, &r)?,
            (true, false) if existing_is_link => {
                return Err(refused(
                    &display(&r),
                    format!(
                        "path goes through symlink {} already in the volume (nothing is written through a symlink)",
                        display(&r)
                    ),
                ))
            }
            (true, false) => {
                return Err(refused(
                    &display(&r),
                    "directory would replace an existing file in the volume",
                ))
            }
            (false, true) => {
                return Err(refused(
                    &display(&r),
                    "entry would replace an existing directory in the volume",
                ))
            }
            (false, false) => replaces_symlink |= existing_is_link,
        }
    }
    Ok(replaces_symlink)
}

/// Rename staged entries into `dest`, merging into existing directories.
/// Explicit directory entries get their owner, mode and mtime once nothing
/// more moves into them: children first, so a parent's mtime sticks and a
/// restrictive mode never blocks the work below it; a renamed directory
/// after its rename, which needs it writable.
fn merge(staged: &Path, dest: &Path, metas: &DirMetas) -> Result<(), VolumeError> {
    for entry in fs::read_dir(staged).ctx_path("list staged directory", staged)? {
        let entry = entry.ctx_path("list staged directory", staged)?;
        let src = entry.path();
        let d = dest.join(entry.file_name());
        let staged_is_dir = entry
            .file_type()
            .ctx_path("stat staged entry", &src)?
            .is_dir();
        if !staged_is_dir {
            fs::rename(&src, &d).ctx(|| format!("move {} into {}", src.display(), d.display()))?;
            continue;
        }
        let ino = fs::symlink_metadata(&src)
            .ctx_path("stat staged directory", &src)?
            .ino();
        match fs::symlink_metadata(&d) {
            Ok(m) if is_real_dir(&m) => merge(&src, &d, metas)?,
            _ => {
                apply_dir_metas_below(&src, metas)?;
                fs::rename(&src, &d)
                    .ctx(|| format!("move {} into {}", src.display(), d.display()))?;
            }
        }
        apply_dir_meta(&d, metas.get(&ino))?;
    }
    Ok(())
}

/// Metadata of every staged directory strictly below `dir`, deepest first.
fn apply_dir_metas_below(dir: &Path, metas: &DirMetas) -> Result<(), VolumeError> {
    if metas.is_empty() {
        return Ok(());
    }
    for entry in fs::read_dir(dir).ctx_path("list staged directory", dir)? {
        let entry = entry.ctx_path("list staged directory", dir)?;
        let path = entry.path();
        if entry
            .file_type()
            .ctx_path("stat staged entry", &path)?
            .is_dir()
        {
            apply_dir_metas_below(&path, metas)?;
            let ino = fs::symlink_metadata(&path)
                .ctx_path("stat staged directory", &path)?
                .ino();
            apply_dir_meta(&path, metas.get(&ino))?;
        }
    }
    Ok(())
}

fn apply_dir_meta(path: &Path, meta: Option<&DirMeta>) -> Result<(), VolumeError> {
    let Some(d) = meta else { return Ok(()) };
    let m = fs::symlink_metadata(path).ctx_path("stat extracted directory", path)?;
    if !m.is_dir() {
        return Ok(()); // replaced meanwhile; never chmod through a symlink
    }
    let (uid, gid) = d.owner.unzip();
    let mtime = (d.mtime != NO_MTIME).then_some(d.mtime);
    set_node_meta(path, d.mode, uid, gid, mtime, false)
}

/// Extracts a tar stream into a plain directory (not a volume) with the
/// same checks as a stream into a volume: the CLI uses it for the outputs
/// it downloads. The directory is created if missing; a refused archive
/// leaves it as it was.
pub fn extract_into_dir(
    dir: &Path,
    reader: impl Read,
    compression: Compression,
    limits: &Limits,
) -> Result<StreamInReport, VolumeError> {
    /// One extraction at a time checks and merges (see `Target::commit`).
    static COMMIT: Mutex<()> = Mutex::new(());
    fs::create_dir_all(dir).map_err(|e| VolumeError::io(format!("create {}", dir.display()), e))?;
    let staging = dir.join(format!(
        "{EXTRACT_STAGING}{}",
        uuid::Uuid::new_v4().simple()
    ));
    fs::create_dir(&staging)
        .map_err(|e| VolumeError::io(format!("create {}", staging.display()), e))?;
    let target = Target {
        staging: &staging,
        data: dir,
        sub: &[],
        owner: None,
        privileged: false,
        commit: &COMMIT,
    };
    let result = stream_in(reader, compression, limits, &target);
    let _ = fs::remove_dir_all(&staging);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_stops_an_endless_stream_one_byte_past_the_limit() {
        let meter = Meter::new(10_000);
        let mut r = MeteredReader {
            inner: io::repeat(0),
            meter: &meter,
        };
        let err = io::copy(&mut r, &mut io::sink()).unwrap_err();
        assert!(err.to_string().contains("limit"));
        assert_eq!(meter.total.get(), 10_001);
        assert_eq!(meter.tripped.get(), Some(LimitKind::Bytes));
    }

    #[test]
    fn the_header_budget_applies_only_while_parsing_headers() {
        let meter = Meter::new(u64::MAX);
        let mut r = MeteredReader {
            inner: io::repeat(1).take(4 * MAX_HEADER_BYTES),
            meter: &meter,
        };
        let mut sink = Vec::new();
        (&mut r)
            .take(2 * MAX_HEADER_BYTES)
            .read_to_end(&mut sink)
            .unwrap();
        meter.begin_headers();
        let err = io::copy(&mut r, &mut io::sink()).unwrap_err();
        assert!(err.to_string().contains("header"));
        assert_eq!(meter.tripped.get(), Some(LimitKind::HeaderBytes));
    }
}
