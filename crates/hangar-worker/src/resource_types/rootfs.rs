//! The root filesystem of a base resource type in Concourse's layout, made
//! ready for containers: `rootfs.tgz` unpacked (or `rootfs/` copied) once
//! into a directory of the worker's own, keyed by the file (or tree) it
//! came from and the owners it was given, with its owners moved into the
//! sandbox's id range as fetched images' are. Each action of the type gets
//! an overlay of it (see `containers::image_action`), so no action writes
//! into it and none sees another's writes.
//!
//! A tarball is the operator's, but it is read as a hostile one: an entry
//! that is absolute or has `..`, that goes through a symlink of the
//! archive, that is a device node, fifo or anything but a file, directory,
//! symlink or hard link to a file of the archive before it refuses the
//! whole tarball, and so do more than `MAX_ENTRIES` entries, more than
//! `MAX_ARCHIVE_BYTES` unpacked (a gzip bomb) and headers past
//! `MAX_HEADER_BYTES`. Symlinks may point anywhere: they are resolved in
//! the container, never followed by the worker while unpacking. The tar
//! crate's `unpack_in` then writes each entry, and refuses on its own to
//! write outside the target.

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

use hangar_core::users::Ids;

/// A type's root filesystem as a gzipped tar, beside its metadata.
pub(crate) const TARBALL: &str = "rootfs.tgz";
/// A type's root filesystem unpacked, beside its metadata.
pub(crate) const DIR: &str = "rootfs";
/// Under the work dir: where base types' root filesystems are unpacked.
pub(crate) const UNPACKED_DIR: &str = "base-resource-types";

/// The most a tarball may unpack to (headers and data).
const MAX_ARCHIVE_BYTES: u64 = 32 << 30;
const MAX_ENTRIES: u64 = 2_000_000;
/// The most one entry's headers may take (long names and pax records,
/// which the tar crate holds in memory).
const MAX_HEADER_BYTES: u64 = 1 << 20;
/// Prefix of an unpacking that has not finished.
const STAGING_PREFIX: &str = ".unpacking-";

/// Where a Concourse-layout type's root filesystem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootfsSource {
    /// `rootfs.tgz`.
    Tarball(PathBuf),
    /// `rootfs/`.
    Dir(PathBuf),
}

fn refused(entry: impl std::fmt::Display, reason: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("entry {entry}: {reason}"),
    )
}

/// An archive's name as a relative path of plain names (`./` dropped).
fn clean(name: &[u8]) -> Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for part in Path::new(std::ffi::OsStr::from_bytes(name)).components() {
        match part {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("has `..` in its path"),
            Component::RootDir | Component::Prefix(_) => return Err("has an absolute path"),
        }
    }
    Ok(out)
}

/// The rules every entry is held to before anything is written for it.
#[derive(Default)]
struct Checker {
    entries: u64,
    /// The archive's symlinks so far: no entry may go through one.
    symlinks: HashSet<PathBuf>,
    /// The archive's files so far: what a hard link may point at.
    files: HashSet<PathBuf>,
}

impl Checker {
    /// The entry's path if it is to be unpacked, `None` if it is to be
    /// passed over (the root itself, a pax global header).
    fn check<R: Read>(&mut self, entry: &tar::Entry<'_, R>) -> io::Result<Option<PathBuf>> {
        use tar::EntryType;
        self.entries += 1;
        let raw = entry.path_bytes();
        let shown = format!("{:?}", String::from_utf8_lossy(&raw));
        if self.entries > MAX_ENTRIES {
            return Err(refused(shown, format!("more than {MAX_ENTRIES} entries")));
        }
        let kind = entry.header().entry_type();
        match kind {
            EntryType::XGlobalHeader => return Ok(None),
            EntryType::Regular
            | EntryType::Continuous
            | EntryType::Directory
            | EntryType::Symlink
            | EntryType::Link => {}
            EntryType::Char | EntryType::Block => {
                return Err(refused(shown, "is a device node"));
            }
            EntryType::Fifo => return Err(refused(shown, "is a fifo")),
            other => {
                return Err(refused(
                    shown,
                    format!("is of a kind not taken ({other:?}): only files, directories, symlinks and hard links are"),
                ))
            }
        }
        let path = clean(&raw).map_err(|why| refused(&shown, why))?;
        if path.as_os_str().is_empty() {
            return match kind {
                EntryType::Directory => Ok(None),
                _ => Err(refused(shown, "names the root but is not a directory")),
            };
        }
        if let Some(link) = path
            .ancestors()
            .skip(1)
            .find(|a| self.symlinks.contains(*a))
        {
            return Err(refused(
                shown,
                format!("goes through the archive's symlink {}", link.display()),
            ));
        }
        match kind {
            EntryType::Symlink => {
                if entry.link_name_bytes().is_none_or(|t| t.is_empty()) {
                    return Err(refused(shown, "is a symlink to nothing"));
                }
                self.files.remove(&path);
                self.symlinks.insert(path.clone());
            }
            EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&shown, "is a hard link to nothing"))?;
                let target = clean(&target)
                    .map_err(|why| refused(&shown, format!("links to a name that {why}")))?;
                if !self.files.contains(&target) {
                    return Err(refused(
                        shown,
                        format!(
                            "is a hard link to {}, which is not a file of the archive before it",
                            target.display()
                        ),
                    ));
                }
                self.symlinks.remove(&path);
                self.files.insert(path.clone());
            }
            EntryType::Directory => {
                if self.symlinks.contains(&path) {
                    return Err(refused(shown, "replaces a symlink of the archive"));
                }
            }
            _ => {
                self.symlinks.remove(&path);
                self.files.insert(path.clone());
            }
        }
        Ok(Some(path))
    }
}

/// Counts what the tar reader takes, failing past the current limit.
struct Meter {
    read: Cell<u64>,
    limit: Cell<u64>,
    why: Cell<&'static str>,
}

impl Meter {
    /// Reading the next entry's headers.
    fn headers(&self) {
        self.limit
            .set((self.read.get() + MAX_HEADER_BYTES).min(MAX_ARCHIVE_BYTES));
        self.why.set("an entry's headers are larger than 1 MiB");
    }

    /// Reading an entry's data.
    fn data(&self) {
        self.limit.set(MAX_ARCHIVE_BYTES);
        self.why.set("unpacks to more than 32 GiB");
    }
}

struct Metered<R> {
    inner: R,
    meter: Rc<Meter>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.meter.read.get() + n as u64;
        self.meter.read.set(total);
        if total > self.meter.limit.get() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                self.meter.why.get(),
            ));
        }
        Ok(n)
    }
}

type Entry<'a> = tar::Entry<'a, Metered<Box<dyn Read>>>;

/// Reads the tarball at `path` (gzipped or not), checks every entry and
/// hands each to be unpacked to `each` with its relative path.
fn walk(
    path: &Path,
    keep_owners: bool,
    mut each: impl FnMut(&mut Entry<'_>, &Path) -> io::Result<()>,
) -> io::Result<()> {
    let mut file = BufReader::new(fs::File::open(path)?);
    let gzipped = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let inner: Box<dyn Read> = if gzipped {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let meter = Rc::new(Meter {
        read: Cell::new(0),
        limit: Cell::new(0),
        why: Cell::new(""),
    });
    let mut archive = tar::Archive::new(Metered {
        inner,
        meter: meter.clone(),
    });
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_preserve_ownerships(keep_owners);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let mut checker = Checker::default();
    let mut entries = archive.entries()?;
    loop {
        meter.headers();
        let Some(entry) = entries.next() else {
            return Ok(());
        };
        let mut entry = entry?;
        meter.data();
        if let Some(rel) = checker.check(&entry)? {
            each(&mut entry, &rel)?;
        }
    }
}

/// Unpacks the tarball at `path` into `root` (made here), owners kept
/// where the worker can keep them (root).
fn unpack(path: &Path, root: &Path) -> io::Result<()> {
    fs::create_dir(root)?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))?;
    walk(path, nix::unistd::geteuid().is_root(), |entry, rel| {
        if entry.unpack_in(root)? {
            Ok(())
        } else {
            Err(refused(rel.display(), "the tar reader would not unpack it"))
        }
    })
}

/// What identifies a file's content without reading it: replaced or
/// written to, one of these changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(path: &Path) -> io::Result<FileStamp> {
        let m = fs::metadata(path)?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// Whether the tarball at `path` is one the worker unpacks, read through
/// without writing anything. Remembered per file (its identity, size and
/// times), so that discovery, which runs for every action, reads each
/// tarball once.
pub(crate) fn tarball_verdict(path: &Path) -> Result<(), String> {
    /// A tarball's verdict and the file it was given for.
    type Seen = (FileStamp, Result<(), String>);
    static SEEN: Mutex<BTreeMap<PathBuf, Seen>> = Mutex::new(BTreeMap::new());
    let stamp = FileStamp::of(path).map_err(|e| e.to_string())?;
    let seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((at, verdict)) = seen.get(path) {
        if *at == stamp {
            return verdict.clone();
        }
    }
    drop(seen);
    let verdict = walk(path, false, |entry, _| {
        io::copy(entry, &mut io::sink()).map(drop)
    })
    .map_err(|e| e.to_string());
    SEEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(path.to_path_buf(), (stamp, verdict.clone()));
    verdict
}

/// 64-bit FNV-1a: a stable name for what was unpacked.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so `ab`,`c` and `a`,`bc` differ.
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// Every entry of the tree at `root` (names, kinds, owners, modes, sizes,
/// times, link targets) in one number; a device node in it is refused.
fn fingerprint_dir(root: &Path, h: &mut Fnv) -> io::Result<()> {
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let path = root.join(&rel);
        let m = fs::symlink_metadata(&path)?;
        let ft = m.file_type();
        if ft.is_block_device() || ft.is_char_device() {
            return Err(refused(
                format!("{:?}", rel.display().to_string()),
                "is a device node",
            ));
        }
        h.write(rel.as_os_str().as_bytes());
        h.write(
            format!(
                "{} {} {} {} {} {}.{} {}.{}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.size(),
                m.ino(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            )
            .as_bytes(),
        );
        if ft.is_symlink() {
            h.write(fs::read_link(&path)?.as_os_str().as_bytes());
        } else if ft.is_dir() {
            let mut names: Vec<_> = fs::read_dir(&path)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<_>>()?;
            names.sort();
            // Popped in name order.
            stack.extend(names.into_iter().rev().map(|n| rel.join(n)));
        }
    }
    Ok(())
}

/// The name of what `source` unpacks to for `owners`: it changes when the
/// tarball (or any entry of the tree) or the owners do.
fn key_of(source: &RootfsSource, owners: Option<Ids>) -> io::Result<String> {
    let mut h = Fnv::new();
    match source {
        RootfsSource::Tarball(path) => {
            let s = FileStamp::of(path)?;
            h.write(format!("tarball {s:?}").as_bytes());
        }
        RootfsSource::Dir(path) => {
            h.write(b"dir");
            fingerprint_dir(path, &mut h)?;
        }
    }
    match owners {
        Some(ids) => h.write(format!("owners {}:{}", ids.uid, ids.gid).as_bytes()),
        None => h.write(b"owners kept"),
    }
    Ok(format!("{:016x}", h.0))
}

/// `<work-dir>/base-resource-types`: each type's root filesystem, ready,
/// at `<type>/<key>/rootfs`. Only the worker's user enters it.
#[derive(Debug, Clone)]
pub(crate) struct RootfsCache {
    dir: PathBuf,
    /// One unpacking at a time: two actions of a type not yet unpacked
    /// wait for one unpacking, not race two.
    lock: Arc<Mutex<()>>,
}

impl RootfsCache {
    pub(crate) fn new(dir: &Path) -> RootfsCache {
        RootfsCache {
            dir: dir.to_path_buf(),
            lock: Arc::default(),
        }
    }

    /// Type `type_name`'s root filesystem from `source`, unpacked (or
    /// copied) the first time and whenever the source changed, its owners
    /// moved into the range starting at `owners` (`None`: kept, for a
    /// privileged type). An older one of the type no container uses any
    /// more is removed. Blocks.
    pub(crate) fn rootfs(
        &self,
        type_name: &str,
        source: &RootfsSource,
        owners: Option<Ids>,
    ) -> io::Result<PathBuf> {
        // The name is a path component here: a label is never `..` or `/`.
        hangar_core::names::validate_label(type_name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let key = key_of(source, owners)?;
        let type_dir = self.dir.join(type_name);
        let ready = type_dir.join(&key);
        let root = ready.join(DIR);
        let _one_at_a_time = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
            return Ok(root);
        }
        let started = std::time::Instant::now();
        for dir in [&self.dir, &type_dir] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let staging = type_dir.join(format!("{STAGING_PREFIX}{}", uuid::Uuid::new_v4().simple()));
        let made = make(source, &staging, owners).and_then(|()| fs::rename(&staging, &ready));
        if let Err(e) = made {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        tracing::info!(resource_type = %type_name, %key, took_ms = started.elapsed().as_millis() as u64, "made a base resource type's root filesystem ready");
        remove_stale(&type_dir, &ready);
        Ok(root)
    }
}

/// Unpacks (or copies) `source` into `<staging>/rootfs` and moves its
/// owners into the range at `owners`.
fn make(source: &RootfsSource, staging: &Path, owners: Option<Ids>) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(staging)?;
    let root = staging.join(DIR);
    match source {
        RootfsSource::Tarball(path) => unpack(path, &root)?,
        RootfsSource::Dir(path) => {
            hangar_volumes::copy_tree(path, &root)?;
        }
    }
    if let Some(base) = owners {
        crate::containers::hand_image_to_sandbox(staging, base)?;
    }
    Ok(())
}

/// Removes `type_dir`'s other roots and unfinished unpackings, except a
/// root an overlay still uses (an action of the type's former content
/// still running): a later unpacking removes it.
fn remove_stale(type_dir: &Path, keep: &Path) {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for entry in fs::read_dir(type_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let unfinished = entry
            .file_name()
            .as_bytes()
            .starts_with(STAGING_PREFIX.as_bytes());
        if !unfinished && mounts.contains(&*path.to_string_lossy()) {
            tracing::debug!(path = %path.display(), "a former root filesystem is still in use; removed later");
            continue;
        }
        if let Err(e) = fs::remove_dir_all(&path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a former root filesystem of a base resource type");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One entry of a test tarball.
    enum E<'a> {
        Dir(&'a str),
        File(&'a str, &'a str),
        Link(&'a str, &'a str),
        Hard(&'a str, &'a str),
        Device(&'a str),
        Fifo(&'a str),
    }

    /// A gzipped tar of `entries`, names written as they are (the tar
    /// crate's builder refuses `..` and absolute names; the header's name
    /// field takes anything).
    fn tarball(dir: &Path, name: &str, entries: &[E]) -> PathBuf {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for e in entries {
            let mut h = tar::Header::new_old();
            let (path, kind, data, link): (&str, _, &str, Option<&str>) = match e {
                E::Dir(p) => (p, tar::EntryType::Directory, "", None),
                E::File(p, d) => (p, tar::EntryType::Regular, d, None),
                E::Link(p, t) => (p, tar::EntryType::Symlink, "", Some(t)),
                E::Hard(p, t) => (p, tar::EntryType::Link, "", Some(t)),
                E::Device(p) => (p, tar::EntryType::Char, "", None),
                E::Fifo(p) => (p, tar::EntryType::Fifo, "", None),
            };
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(t) = link {
                h.as_old_mut().linkname[..t.len()].copy_from_slice(t.as_bytes());
            }
            h.set_entry_type(kind);
            h.set_mode(if kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            h.set_size(data.len() as u64);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1_700_000_000);
            h.set_cksum();
            b.append(&h, data.as_bytes()).unwrap();
        }
        let bytes = b.into_inner().unwrap().finish().unwrap();
        let path = dir.join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    /// Every path under `dir`, relative, sorted.
    fn tree(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
                if fs::symlink_metadata(&p).unwrap().is_dir() {
                    stack.push(p);
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_good_tarball_is_unpacked_once_and_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let good = [
            E::Dir("./"),
            E::Dir("./etc/"),
            E::File("./etc/os-release", "ID=test\n"),
            E::Hard("./etc/again", "etc/os-release"),
            E::Dir("./opt/resource/"),
            E::File("./opt/resource/check", "#!/bin/sh\n"),
            // Anywhere, even outside: resolved in the container.
            E::Link("./bin", "/usr/bin"),
            E::Link("./etc/mtab", "../proc/self/mounts"),
        ];
        let tgz = tarball(dir.path(), "rootfs.tgz", &good);
        assert_eq!(tarball_verdict(&tgz), Ok(()));
        let cache = RootfsCache::new(&dir.path().join("cache"));
        let source = RootfsSource::Tarball(tgz.clone());
        let root = cache.rootfs("git", &source, None).unwrap();
        assert!(root.starts_with(dir.path().join("cache/git")));
        assert_eq!(
            fs::read_to_string(root.join("etc/again")).unwrap(),
            "ID=test\n"
        );
        assert_eq!(
            fs::read_link(root.join("bin")).unwrap(),
            Path::new("/usr/bin")
        );
        // Once: what an action would find there stays.
        fs::write(root.join("marker"), "").unwrap();
        assert_eq!(cache.rootfs("git", &source, None).unwrap(), root);
        assert!(root.join("marker").exists());
        // A changed tarball is unpacked again, and the former one goes.
        tarball(dir.path(), "rootfs.tgz", &good[..3]);
        let again = cache.rootfs("git", &source, None).unwrap();
        assert_ne!(again, root);
        assert!(!again.join("marker").exists());
        assert!(!root.exists());
        assert_eq!(
            fs::read_dir(dir.path().join("cache/git")).unwrap().count(),
            1
        );
    }

    #[test]
    fn a_hostile_tarball_is_refused_and_writes_nothing_outside() {
        let cases: Vec<(&str, Vec<E>, &str)> = vec![
            ("dotdot", vec![E::File("../escaped", "x")], "`..`"),
            (
                "deep-dotdot",
                vec![E::Dir("a/"), E::File("a/../../escaped", "x")],
                "`..`",
            ),
            ("absolute", vec![E::File("/escaped", "x")], "absolute"),
            (
                "through-link",
                vec![E::Link("out", "/tmp-outside"), E::File("out/escaped", "x")],
                "goes through the archive's symlink out",
            ),
            (
                "through-relative-link",
                vec![E::Link("up", ".."), E::File("up/escaped", "x")],
                "goes through the archive's symlink up",
            ),
            (
                "dir-over-link",
                vec![E::Link("d", "/"), E::Dir("d/")],
                "replaces a symlink",
            ),
            ("device", vec![E::Device("dev/sda")], "device node"),
            ("fifo", vec![E::Fifo("run/pipe")], "fifo"),
            (
                "hard-link-out",
                vec![E::Hard("shadow", "/etc/shadow")],
                "absolute",
            ),
            (
                "hard-link-up",
                vec![E::Hard("shadow", "../outside")],
                "`..`",
            ),
            (
                "hard-link-to-nothing-before",
                vec![E::Hard("a", "b"), E::File("b", "x")],
                "not a file of the archive before it",
            ),
            (
                "hard-link-to-a-link",
                vec![E::Link("l", "/etc/shadow"), E::Hard("h", "l")],
                "not a file of the archive before it",
            ),
        ];
        for (name, entries, want) in cases {
            let dir = tempfile::tempdir().unwrap();
            let outside = dir.path().join("outside");
            fs::write(&outside, "untouched").unwrap();
            let tgz = tarball(dir.path(), "rootfs.tgz", &entries);
            let before = tree(dir.path());
            let verdict = tarball_verdict(&tgz).unwrap_err();
            assert!(verdict.contains(want), "{name}: {verdict}");
            let cache = RootfsCache::new(&dir.path().join("cache"));
            let err = cache
                .rootfs(
                    "t",
                    &RootfsSource::Tarball(tgz),
                    Some(Ids { uid: 0, gid: 0 }),
                )
                .unwrap_err();
            assert!(err.to_string().contains(want), "{name}: {err}");
            // Nothing anywhere but the (empty) cache dirs.
            let mut after = tree(dir.path());
            after.retain(|p| p != "cache" && p != "cache/t");
            assert_eq!(after, before, "{name}");
            assert_eq!(fs::read_to_string(&outside).unwrap(), "untouched");
            assert!(!Path::new("/escaped").exists(), "{name}");
        }
    }

    #[test]
    fn limits_stop_endless_headers() {
        let dir = tempfile::tempdir().unwrap();
        // A GNU long name of 2 MiB: past the header budget.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        let long = vec![b'a'; 2 << 20];
        h.set_size(long.len() as u64);
        h.set_cksum();
        b.append(&h, &long[..]).unwrap();
        let path = dir.path().join("rootfs.tgz");
        fs::write(&path, b.into_inner().unwrap()).unwrap();
        let err = tarball_verdict(&path).unwrap_err();
        assert!(err.contains("headers are larger"), "{err}");
    }

    #[test]
    fn a_rootfs_dir_is_copied_and_copied_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("rootfs");
        fs::create_dir_all(src.join("opt/resource")).unwrap();
        fs::write(src.join("opt/resource/check"), "1").unwrap();
        let cache = RootfsCache::new(&dir.path().join("cache"));
        let source = RootfsSource::Dir(src.clone());
        let root = cache.rootfs("git", &source, None).unwrap();
        assert_eq!(
            fs::read_to_string(root.join("opt/resource/check")).unwrap(),
            "1"
        );
        assert_eq!(cache.rootfs("git", &source, None).unwrap(), root);
        fs::write(src.join("opt/resource/check"), "22").unwrap();
        let again = cache.rootfs("git", &source, None).unwrap();
        assert_ne!(again, root);
        assert_eq!(
            fs::read_to_string(again.join("opt/resource/check")).unwrap(),
            "22"
        );
        // Other owners are another root filesystem.
        let shifted = cache
            .rootfs(
                "git",
                &source,
                Some(Ids {
                    uid: 3_000_000,
                    gid: 3_000_000,
                }),
            )
            .unwrap();
        assert_ne!(shifted, again);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(
                fs::metadata(shifted.join("opt/resource/check"))
                    .unwrap()
                    .uid(),
                3_000_000
            );
        }
        // A type name is never a way out of the cache.
        assert!(cache.rootfs("../x", &source, None).is_err());
    }
}
