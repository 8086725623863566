//! Streaming a volume (or a path inside it) out as a tar archive.
//!
//! Symlinks are archived as symlinks and never followed, neither for the
//! walk nor for reading file content (files are opened `O_NOFOLLOW`, and
//! `O_NONBLOCK` so a fifo swapped in by a container cannot hang us). Hard
//! links inside the tree are archived as hard links. Sockets, fifos and
//! device nodes are skipped. A file that changes size while being read is
//! truncated or zero-padded to the size in its header, so the archive stays
//! well-formed.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tar::{Builder, EntryType, Header, HeaderMode};

use crate::driver::names;
use crate::error::{IoContext, VolumeError};
use crate::fsutil::{open_dir_nofollow, open_regular_nofollow, open_regular_nofollow_at};
use crate::paths::{display, join};
use crate::Compression;

/// What a stream-out will archive: checked to exist before anything is
/// written, so that a caller can answer a bad path with an error instead
/// of an empty archive.
#[derive(Debug)]
pub struct StreamOutSource {
    data: PathBuf,
    sub: Vec<OsString>,
}

/// Check that `data/sub` exists and is reached through real directories.
pub(crate) fn source(data: &Path, sub: Vec<OsString>) -> Result<StreamOutSource, VolumeError> {
    for i in 1..=sub.len() {
        let p = join(data, &sub[..i]);
        let m = fs::symlink_metadata(&p).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => VolumeError::PathNotFound {
                path: display(&sub),
                missing: display(&sub[..i]),
            },
            _ if e.raw_os_error() == Some(nix::libc::ENOTDIR) => VolumeError::InvalidPath {
                path: display(&sub),
                reason: format!("{} is not a directory", display(&sub[..i - 1])),
            },
            _ => VolumeError::io(format!("stat {}", p.display()), e),
        })?;
        if i < sub.len() && !m.file_type().is_dir() {
            let what = if m.file_type().is_symlink() {
                "is not a directory (a symlink, never followed)"
            } else {
                "is not a directory"
            };
            return Err(VolumeError::InvalidPath {
                path: display(&sub),
                reason: format!("{} {what}", display(&sub[..i])),
            });
        }
    }
    Ok(StreamOutSource {
        data: data.to_path_buf(),
        sub,
    })
}

impl StreamOutSource {
    /// Write the tar to `writer`; returns bytes written to `writer`.
    pub fn write_to<W: Write>(
        self,
        writer: W,
        compression: Compression,
    ) -> Result<u64, VolumeError> {
        stream_out(&self.data, &self.sub, writer, compression)
    }
}

/// Write a tar of `data/sub` (checked by [`source`]) to `writer`; returns
/// bytes written to `writer`.
fn stream_out<W: Write>(
    data: &Path,
    sub: &[OsString],
    writer: W,
    compression: Compression,
) -> Result<u64, VolumeError> {
    let src = join(data, sub);
    let mut counter = CountingWriter {
        inner: writer,
        n: 0,
    };
    match compression {
        Compression::None => write_tar(&mut counter, &src, sub)?,
        Compression::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(&mut counter, flate2::Compression::fast());
            write_tar(&mut gz, &src, sub)?;
            gz.finish().ctx(|| "finish gzip stream".to_string())?;
        }
        Compression::Zstd => {
            let mut zst = zstd::stream::write::Encoder::new(&mut counter, 1)
                .ctx(|| "start zstd stream".to_string())?;
            write_tar(&mut zst, &src, sub)?;
            zst.finish().ctx(|| "finish zstd stream".to_string())?;
        }
    }
    counter.flush().ctx(|| "flush archive output".to_string())?;
    Ok(counter.n)
}

fn write_tar<W: Write>(w: W, src: &Path, sub: &[OsString]) -> Result<(), VolumeError> {
    let mut out = Out::new(w);
    let top = fs::symlink_metadata(src).ctx_path("stat", src)?;
    if top.file_type().is_dir() {
        out.dir_contents(src, Path::new(""), sub.is_empty())?;
    } else {
        let name = PathBuf::from(sub.last().cloned().unwrap_or_default());
        out.node(src, &name, &top)?;
    }
    out.builder
        .into_inner()
        .ctx(|| "finish tar stream".to_string())?;
    Ok(())
}

/// A tar of the given `entries` of `root` (relative paths, each parent
/// before what it holds), after `root`'s own entry as `.`: a directory as
/// its own entry only (its contents are whatever `entries` name), a
/// symlink as a symlink, a file read through a descriptor opened by name
/// in its open parent; the same rules as a stream-out otherwise (hard
/// links as links, special files skipped). What `execute` uploads.
pub fn write_entries<W: Write>(w: W, root: &Path, entries: &[PathBuf]) -> Result<(), VolumeError> {
    let mut out = Out::new(w);
    let top = fs::symlink_metadata(root).ctx_path("stat", root)?;
    if !top.is_dir() {
        return Err(VolumeError::io(
            format!("pack {}", root.display()),
            io::Error::other("not a directory"),
        ));
    }
    out.dir_entry(Path::new("."), &top)?;
    // Entries come sorted: the files of one directory mostly follow each
    // other, and its descriptor serves them all.
    let mut parent: Option<(&Path, std::os::fd::OwnedFd)> = None;
    for rel in entries {
        let Some(name) = rel.file_name() else {
            continue; // `.` or empty: the root's entry is written already
        };
        let dir = rel.parent().unwrap_or(Path::new(""));
        let path = root.join(rel);
        if parent.as_ref().is_none_or(|(open, _)| *open != dir) {
            let dir_path = root.join(dir);
            parent = Some((
                dir,
                open_dir_nofollow(&dir_path).ctx_path("open", &dir_path)?,
            ));
        }
        let (_, dir_fd) = parent.as_ref().expect("opened above");
        match open_regular_nofollow_at(dir_fd, name) {
            Ok((file, fm)) => out.regular_file(&path, rel, file, fm)?,
            // A dir, a link, a special file: by what it is.
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                let m = fs::symlink_metadata(&path).ctx_path("stat", &path)?;
                if m.is_dir() {
                    out.dir_entry(rel, &m)?;
                } else {
                    out.node(&path, rel, &m)?;
                }
            }
            Err(e) => return Err(VolumeError::io(format!("open {}", path.display()), e)),
        }
    }
    out.builder
        .into_inner()
        .ctx(|| "finish tar stream".to_string())?;
    Ok(())
}

struct Out<W: Write> {
    builder: Builder<W>,
    /// (dev, ino) of multiply-linked files already archived -> their name.
    links: HashMap<(u64, u64), PathBuf>,
    /// The copy buffer of large files, made once.
    chunk: Vec<u8>,
}

impl<W: Write> Out<W> {
    fn new(w: W) -> Self {
        Out {
            builder: Builder::new(w),
            links: HashMap::new(),
            chunk: Vec::new(),
        }
    }

    fn dir_contents(
        &mut self,
        dir: &Path,
        rel: &Path,
        is_data_root: bool,
    ) -> Result<(), VolumeError> {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .ctx_path("list", dir)?
            .collect::<io::Result<_>>()
            .ctx_path("list", dir)?;
        entries.sort_by_key(|e| e.file_name());
        // Regular files are opened by name in the open directory: one
        // open and one fstat, where a stat and an open by path walked the
        // whole path twice (a tree of small files is mostly that).
        let dir_fd = open_dir_nofollow(dir).ctx_path("open", dir)?;
        for entry in entries {
            let name = entry.file_name();
            if is_data_root && name.to_string_lossy().starts_with(names::STREAM_STAGING) {
                continue; // an in-flight stream-in's staging dir
            }
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                match open_regular_nofollow_at(&dir_fd, &name) {
                    Ok((file, fm)) => {
                        self.regular_file(&path, &rel.join(&name), file, fm)?;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // removed meanwhile
                    // Replaced since the listing: as whatever it is now.
                    Err(_) => {}
                }
            }
            let m = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // removed meanwhile
                Err(e) => return Err(VolumeError::io(format!("stat {}", path.display()), e)),
            };
            self.node(&path, &rel.join(&name), &m)?;
        }
        Ok(())
    }

    fn node(&mut self, path: &Path, rel: &Path, m: &fs::Metadata) -> Result<(), VolumeError> {
        let ft = m.file_type();
        let write_err =
            |e: io::Error| VolumeError::io(format!("write archive entry {}", rel.display()), e);
        if ft.is_dir() {
            self.dir_entry(rel, m)?;
            self.dir_contents(path, rel, false)
        } else if ft.is_symlink() {
            let target = fs::read_link(path).ctx_path("read symlink", path)?;
            let mut h = header_for(m);
            h.set_entry_type(EntryType::Symlink);
            h.set_size(0);
            self.builder
                .append_link(&mut h, rel, &target)
                .map_err(write_err)
        } else if ft.is_file() {
            let (file, fm) = match open_regular_nofollow(path) {
                Ok(v) => v,
                Err(e) => {
                    // Replaced by a symlink/fifo or removed since listing.
                    tracing::warn!(path = %path.display(), error = %e, "skipping file that changed while streaming out");
                    return Ok(());
                }
            };
            self.regular_file(path, rel, file, fm)
        } else {
            tracing::warn!(path = %path.display(), "skipping special file (fifo, socket or device) while streaming out");
            Ok(())
        }
    }

    /// A directory's own entry.
    fn dir_entry(&mut self, rel: &Path, m: &fs::Metadata) -> Result<(), VolumeError> {
        let mut h = header_for(m);
        h.set_entry_type(EntryType::Directory);
        h.set_size(0);
        self.builder
            .append_data(&mut h, rel, io::empty())
            .map_err(|e| VolumeError::io(format!("write archive entry {}", rel.display()), e))
    }

    /// A regular file, open, as an entry (or a hard link to the name it
    /// was first archived under).
    fn regular_file(
        &mut self,
        path: &Path,
        rel: &Path,
        file: fs::File,
        fm: fs::Metadata,
    ) -> Result<(), VolumeError> {
        let key = (fm.dev(), fm.ino());
        if fm.nlink() > 1 {
            if let Some(first) = self.links.get(&key) {
                let mut h = header_for(&fm);
                h.set_entry_type(EntryType::Link);
                h.set_size(0);
                let first = first.clone();
                return self.builder.append_link(&mut h, rel, &first).map_err(|e| {
                    VolumeError::io(format!("write archive entry {}", rel.display()), e)
                });
            }
        }
        let mut h = header_for(&fm);
        h.set_entry_type(EntryType::Regular);
        h.set_size(fm.len());
        let body = ExactLen {
            inner: file.take(fm.len()),
            remaining: fm.len(),
        };
        let archived = if fm.len() >= LARGE_FILE && h.set_path(rel).is_ok() {
            // tar's own copy reads 8 KiB at a time through a `dyn Read`: a
            // large file goes out in `COPY_CHUNK` reads and writes instead.
            // (A name too long for the header takes tar's way, which adds
            // the GNU long-name entry.)
            h.set_cksum();
            write_entry(self.builder.get_mut(), &h, body, &mut self.chunk)
        } else {
            self.builder.append_data(&mut h, rel, body)
        };
        archived.map_err(|e| VolumeError::io(format!("archive file {}", path.display()), e))?;
        if fm.nlink() > 1 {
            self.links.insert(key, rel.to_path_buf());
        }
        Ok(())
    }
}

/// A file at least this large is copied in `COPY_CHUNK` pieces.
const LARGE_FILE: u64 = 1024 * 1024;
const COPY_CHUNK: usize = 256 * 1024;

/// One entry whose header is complete: the header, exactly its size of
/// `body`, and the zeros that fill its last 512-byte block.
fn write_entry<W: Write, R: Read>(
    out: &mut W,
    header: &Header,
    mut body: R,
    chunk: &mut Vec<u8>,
) -> io::Result<()> {
    out.write_all(header.as_bytes())?;
    chunk.resize(COPY_CHUNK, 0);
    let mut written = 0u64;
    loop {
        let n = match body.read(chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&chunk[..n])?;
        written += n as u64;
    }
    let pad = (512 - written % 512) % 512;
    out.write_all(&[0u8; 512][..pad as usize])
}

fn header_for(m: &fs::Metadata) -> Header {
    let mut h = Header::new_gnu();
    h.set_metadata_in_mode(m, HeaderMode::Complete);
    h
}

/// Yields exactly `remaining` bytes: truncates growth, zero-pads shrinkage.
struct ExactLen<R> {
    inner: R,
    remaining: u64,
}

impl<R: Read> Read for ExactLen<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut buf[..max])?;
        if n == 0 {
            buf[..max].fill(0);
            n = max;
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

struct CountingWriter<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large file's entry, written past tar's own copy, reads back as
    /// tar reads any: same name, size and bytes, blocks filled.
    #[test]
    fn a_large_file_written_in_chunks_is_an_ordinary_entry() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * 1024 * 1024 + 77).map(|i| (i % 251) as u8).collect();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/big.bin"), &data).unwrap();
        std::fs::write(dir.path().join("small.txt"), b"small").unwrap();
        let mut archive = Vec::new();
        stream_out(dir.path(), &[], &mut archive, Compression::None).unwrap();
        assert_eq!(archive.len() % 512, 0);
        let mut read = tar::Archive::new(&archive[..]);
        let mut got = std::collections::BTreeMap::new();
        for entry in read.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            got.insert(name, bytes);
        }
        assert_eq!(got["d/big.bin"], data);
        assert_eq!(got["small.txt"], b"small");
    }

    /// Only the named entries go in: a named dir is its own entry, not
    /// its contents; a link stays a link; a second name of a file is a
    /// hard link; a name that is gone fails the archive.
    #[test]
    fn written_entries_are_exactly_the_ones_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/skipped")).unwrap();
        std::fs::write(root.join("a/skipped/secret"), b"no").unwrap();
        std::fs::write(root.join("a/f"), b"file").unwrap();
        std::fs::hard_link(root.join("a/f"), root.join("a/g")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("a/l")).unwrap();
        let named: Vec<PathBuf> = ["a", "a/f", "a/g", "a/l", "a/skipped"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let mut archive = Vec::new();
        write_entries(&mut archive, root, &named).unwrap();
        let mut read = tar::Archive::new(&archive[..]);
        let mut got = Vec::new();
        for entry in read.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let kind = entry.header().entry_type();
            let link = entry.link_name().unwrap().map(|l| l.display().to_string());
            let mut bytes = String::new();
            entry.read_to_string(&mut bytes).unwrap();
            got.push((name, kind, link, bytes));
        }
        let want = |n: &str, k, l: Option<&str>, b: &str| {
            (n.to_string(), k, l.map(str::to_string), b.to_string())
        };
        assert_eq!(
            got,
            vec![
                want(".", EntryType::Directory, None, ""),
                want("a", EntryType::Directory, None, ""),
                want("a/f", EntryType::Regular, None, "file"),
                want("a/g", EntryType::Link, Some("a/f"), ""),
                want("a/l", EntryType::Symlink, Some("/etc/passwd"), ""),
                want("a/skipped", EntryType::Directory, None, ""),
            ]
        );

        let gone = vec![PathBuf::from("a/missing")];
        let err = write_entries(&mut Vec::new(), root, &gone).unwrap_err();
        assert!(err.to_string().contains("a/missing"), "{err}");
    }

    #[test]
    fn exact_len_pads_a_shrunken_file_with_zeros() {
        let mut r = ExactLen {
            inner: &b"abc"[..],
            remaining: 5,
        };
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        assert_eq!(v, b"abc\0\0");
    }
}
