//! Hostile archives: each is refused with a clear error, the volume is left
//! exactly as it was, and nothing outside it (a canary dir) is touched.
//! Runs against a plain volume (naive) and an overlay copy-on-write child
//! (overlay, as root), where the staging dir lives inside the mount.

mod common;

use std::fs;
use std::io::{self, Cursor, Read, Write};
use std::path::{Path, PathBuf};

use common::{drivers, no_props, snapshot, TestRoot};
use hangar_volumes::{
    Compression, DriverKind, LimitKind, Limits, Strategy, VolumeError, VolumeManager,
};
use tar::{EntryType, Header};

struct Fixture {
    _root: TestRoot,
    canary: tempfile::TempDir,
    vm: VolumeManager,
    data: PathBuf,
    driver: DriverKind,
}

impl Fixture {
    fn new(driver: DriverKind) -> Self {
        let root = TestRoot::new();
        let canary = tempfile::tempdir().unwrap();
        fs::write(canary.path().join("canary.txt"), "tweet").unwrap();
        let vm = VolumeManager::open(root.path(), driver).unwrap();
        let base = vm.create("base", Strategy::Empty, no_props()).unwrap();
        fs::write(base.path.join("existing.txt"), "original").unwrap();
        fs::create_dir(base.path.join("keep")).unwrap();
        fs::write(base.path.join("keep/inner"), "inner").unwrap();
        let target = vm
            .create(
                "target",
                Strategy::CopyOnWrite {
                    parent: "base".into(),
                },
                no_props(),
            )
            .unwrap();
        assert_eq!(target.driver, driver);
        Fixture {
            _root: root,
            canary,
            vm,
            data: target.path,
            driver,
        }
    }

    fn canary(&self) -> &Path {
        self.canary.path()
    }

    /// Stream `archive` in and check: refused, volume and canary unchanged,
    /// no staging left over. Returns the error for more specific checks.
    fn refused(
        &self,
        archive: &[u8],
        compression: Compression,
        limits: &Limits,
        subpath: &str,
    ) -> VolumeError {
        let volume_before = snapshot(&self.data);
        let canary_before = snapshot(self.canary());
        let err = self
            .vm
            .stream_in("target", subpath, Cursor::new(archive), compression, limits)
            .expect_err("hostile archive must be refused");
        assert_eq!(
            snapshot(&self.data),
            volume_before,
            "{:?}: volume changed by {err}",
            self.driver
        );
        assert_eq!(
            snapshot(self.canary()),
            canary_before,
            "canary touched by {err}"
        );
        assert!(
            self.vm.leftovers().unwrap().is_empty(),
            "staging left behind"
        );
        err
    }

    fn refused_plain(&self, archive: &[u8]) -> VolumeError {
        self.refused(archive, Compression::None, &Limits::default(), "")
    }
}

/// A header with a raw name (the tar crate's path setters refuse `..` and
/// absolute paths, which is exactly what a hostile archive contains).
fn raw_header(name: &str, kind: EntryType, size: u64) -> Header {
    let mut h = Header::new_gnu();
    let gnu = h.as_gnu_mut().unwrap();
    assert!(
        name.len() <= gnu.name.len(),
        "name too long for a raw header: {name}"
    );
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(if kind == EntryType::Directory {
        0o755
    } else {
        0o644
    });
    h.set_mtime(0);
    h.set_cksum();
    h
}

fn raw_link_header(name: &str, kind: EntryType, target: &str) -> Header {
    let mut h = raw_header(name, kind, 0);
    let gnu = h.as_gnu_mut().unwrap();
    gnu.linkname[..target.len()].copy_from_slice(target.as_bytes());
    h.set_cksum();
    h
}

/// Builds archives that always start with an innocent file and directory,
/// so a refusal must also undo those.
struct Archive {
    b: tar::Builder<Vec<u8>>,
}

impl Archive {
    fn new() -> Self {
        let mut a = Archive {
            b: tar::Builder::new(Vec::new()),
        };
        a.file("innocent.txt", "harmless");
        a.raw(raw_header("newdir/", EntryType::Directory, 0), io::empty());
        a.file("newdir/inside.txt", "fine");
        a
    }

    fn file(&mut self, name: &str, body: &str) -> &mut Self {
        self.raw(
            raw_header(name, EntryType::Regular, body.len() as u64),
            body.as_bytes(),
        )
    }

    fn raw(&mut self, h: Header, body: impl Read) -> &mut Self {
        self.b.append(&h, body).unwrap();
        self
    }

    fn link(&mut self, name: &str, kind: EntryType, target: &str) -> &mut Self {
        self.raw(raw_link_header(name, kind, target), io::empty())
    }

    fn finish(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.b, tar::Builder::new(Vec::new()))
            .into_inner()
            .unwrap()
    }
}

fn expect_refused(err: &VolumeError, entry: &str, reason_part: &str) {
    match err {
        VolumeError::Refused { entry: e, reason } => {
            assert_eq!(e, entry, "wrong entry named in: {err}");
            assert!(
                reason.contains(reason_part),
                "reason {reason:?} lacks {reason_part:?}"
            );
        }
        other => panic!("expected Refused for {entry}, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.starts_with("refused archive entry"), "{msg}");
    assert!(msg.contains(entry), "{msg}");
}

/// `../` enough times to climb from any data dir to `/`, then `abs`.
fn climb_to(abs: &Path) -> String {
    format!(
        "{}{}",
        "../".repeat(16),
        abs.display().to_string().trim_start_matches('/')
    )
}

#[test]
fn parent_directory_traversal_is_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let err = f.refused_plain(&Archive::new().file("../x", "escaped").finish());
        expect_refused(&err, "../x", "'..'");
        let deep = climb_to(&f.canary().join("pwned"));
        let err = f.refused_plain(&Archive::new().file(&deep, "escaped").finish());
        expect_refused(&err, &deep, "'..'");
        let sneaky = "newdir/../../x";
        let err = f.refused_plain(&Archive::new().file(sneaky, "escaped").finish());
        expect_refused(&err, sneaky, "'..'");
    }
}

#[test]
fn absolute_paths_are_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let etc = "/etc/hangar-volumes-hostile-test";
        let err = f.refused_plain(&Archive::new().file(etc, "escaped").finish());
        expect_refused(&err, etc, "absolute");
        assert!(!Path::new(etc).exists());
        let abs = f.canary().join("pwned").display().to_string();
        let err = f.refused_plain(&Archive::new().file(&abs, "escaped").finish());
        expect_refused(&err, &abs, "absolute");
    }
}

#[test]
fn a_symlink_escape_with_a_file_written_through_it_is_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let canary = f.canary().display().to_string();
        // Absolute target, then a write through it.
        let err = f.refused_plain(
            &Archive::new()
                .link("link", EntryType::Symlink, &canary)
                .file("link/pwned", "escaped")
                .finish(),
        );
        expect_refused(&err, "link", "absolute");
        // Relative target climbing out, then a write through it.
        let climb = climb_to(f.canary());
        let err = f.refused_plain(
            &Archive::new()
                .link("link", EntryType::Symlink, &climb)
                .file("link/pwned", "escaped")
                .finish(),
        );
        expect_refused(&err, "link/pwned", "goes through symlink link");
        // Relative target climbing out, alone.
        let err = f.refused_plain(
            &Archive::new()
                .link("newdir/up", EntryType::Symlink, "../..")
                .finish(),
        );
        expect_refused(&err, "newdir/up", "resolves outside the volume");
    }
}

#[test]
fn a_chain_of_inside_looking_symlinks_that_escapes_is_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        // `s -> .` is harmless; `l -> s/../x` looks like it stays at the
        // root, but the kernel resolves s/.. to the root's parent.
        let err = f.refused_plain(
            &Archive::new()
                .link("s", EntryType::Symlink, ".")
                .link("l", EntryType::Symlink, "s/../x")
                .finish(),
        );
        expect_refused(&err, "l", "climbs above the volume root");
        // The same through a link a container planted in the volume earlier.
        std::os::unix::fs::symlink(".", f.data.join("dot")).unwrap();
        let err = f.refused_plain(
            &Archive::new()
                .link("esc", EntryType::Symlink, "dot/../x")
                .finish(),
        );
        expect_refused(&err, "esc", "outside the volume");
    }
}

#[test]
fn hardlinks_to_anything_but_an_earlier_entry_are_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let err = f.refused_plain(
            &Archive::new()
                .link("h", EntryType::Link, "../../../etc/passwd")
                .finish(),
        );
        expect_refused(&err, "h", "'..'");
        let err = f.refused_plain(
            &Archive::new()
                .link("h", EntryType::Link, "/etc/passwd")
                .finish(),
        );
        expect_refused(&err, "h", "absolute");
        // Exists in the volume, but not earlier in this archive.
        let err = f.refused_plain(
            &Archive::new()
                .link("h", EntryType::Link, "existing.txt")
                .finish(),
        );
        expect_refused(&err, "h", "not a regular file extracted earlier");
        // Later in the archive is not earlier.
        let err = f.refused_plain(
            &Archive::new()
                .link("h", EntryType::Link, "later.txt")
                .file("later.txt", "x")
                .finish(),
        );
        expect_refused(&err, "h", "earlier");
        // A symlink from the archive is not a regular file either.
        let err = f.refused_plain(
            &Archive::new()
                .link("sl", EntryType::Symlink, "innocent.txt")
                .link("h", EntryType::Link, "sl")
                .finish(),
        );
        expect_refused(&err, "h", "earlier");
    }
}

#[test]
fn device_and_fifo_entries_are_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        for (kind, what) in [
            (EntryType::Char, "character device"),
            (EntryType::Block, "block device"),
            (EntryType::Fifo, "fifo"),
        ] {
            let mut h = raw_header("newdir/node", kind, 0);
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
            h.set_cksum();
            let err = f.refused_plain(&Archive::new().raw(h, io::empty()).finish());
            expect_refused(&err, "newdir/node", what);
        }
    }
}

#[test]
fn a_gzip_bomb_of_zeros_is_stopped_at_the_byte_limit() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        {
            let mut b = tar::Builder::new(&mut gz);
            let h = raw_header("zeros.bin", EntryType::Regular, 64 << 20);
            b.append(&h, io::repeat(0).take(64 << 20)).unwrap();
            b.finish().unwrap();
        }
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 512 * 1024, "a bomb is small: {}", bomb.len());
        let limits = Limits {
            max_bytes: 1 << 20,
            ..Limits::default()
        };
        let err = f.refused(&bomb, Compression::Gzip, &limits, "");
        match &err {
            VolumeError::TooLarge { entry, kind, limit } => {
                assert_eq!(entry, "zeros.bin");
                assert_eq!(*kind, LimitKind::Bytes);
                assert_eq!(*limit, 1 << 20);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(err.to_string().contains("zeros.bin"), "{err}");
    }
}

#[test]
fn many_small_files_over_the_byte_limit_are_stopped_by_counting() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let mut a = Archive::new();
        for i in 0..64 {
            a.file(&format!("newdir/f{i}"), &"z".repeat(4000));
        }
        let limits = Limits {
            max_bytes: 100_000,
            ..Limits::default()
        };
        let err = f.refused(&a.finish(), Compression::None, &limits, "");
        assert!(
            matches!(
                err,
                VolumeError::TooLarge {
                    kind: LimitKind::Bytes,
                    limit: 100_000,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn an_oversized_extension_header_is_stopped_before_it_is_buffered() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        // A pax extended header the parser would read into memory whole.
        let size = 4u64 << 20;
        let h = raw_header("PaxHeaders/x", EntryType::XHeader, size);
        let archive = Archive::new()
            .raw(h, io::repeat(b'a').take(size))
            .file("after", "x")
            .finish();
        let err = f.refused_plain(&archive);
        assert!(
            matches!(
                err,
                VolumeError::TooLarge {
                    kind: LimitKind::HeaderBytes,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("header bytes"), "{err}");
    }
}

#[test]
fn too_many_entries_are_refused_naming_the_first_one_over() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let mut a = Archive::new(); // 3 entries already
        for i in 0..10 {
            a.file(&format!("newdir/f{i}"), "x");
        }
        let limits = Limits {
            max_entries: 10,
            ..Limits::default()
        };
        let err = f.refused(&a.finish(), Compression::None, &limits, "");
        match &err {
            VolumeError::TooLarge { entry, kind, limit } => {
                assert_eq!(entry, "newdir/f7");
                assert_eq!(*kind, LimitKind::Entries);
                assert_eq!(*limit, 10);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "archive too large at entry \"newdir/f7\": more than 10 entries"
        );
    }
}

#[test]
fn bad_subpaths_and_planted_symlinks_in_the_destination_are_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let ok = Archive::new().finish();
        for sub in ["../x", "/abs", "keep/../../x"] {
            let err = f.refused(&ok, Compression::None, &Limits::default(), sub);
            assert!(
                matches!(err, VolumeError::InvalidPath { .. }),
                "{sub}: {err}"
            );
            assert!(err.to_string().contains(sub), "{err}");
        }
        // A container planted a symlink to the host in its volume.
        std::os::unix::fs::symlink(f.canary(), f.data.join("planted")).unwrap();
        for sub in ["planted", "planted/deeper"] {
            let err = f.refused(&ok, Compression::None, &Limits::default(), sub);
            assert!(err.to_string().contains("planted is a symlink"), "{err}");
        }
        // ... and an archive that tries to write into it from the root.
        let err = f.refused_plain(
            &Archive::new()
                .raw(raw_header("planted/", EntryType::Directory, 0), io::empty())
                .file("planted/pwned", "escaped")
                .finish(),
        );
        expect_refused(&err, "planted", "would replace an existing file or symlink");
    }
}

#[test]
fn type_conflicts_with_existing_content_are_refused() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let err = f.refused_plain(
            &Archive::new()
                .raw(
                    raw_header("existing.txt/", EntryType::Directory, 0),
                    io::empty(),
                )
                .finish(),
        );
        expect_refused(&err, "existing.txt", "would replace an existing file");
        let err = f.refused_plain(&Archive::new().file("keep", "not a dir").finish());
        expect_refused(&err, "keep", "would replace an existing directory");
        let err = f.refused_plain(&Archive::new().file("newdir", "file over dir").finish());
        expect_refused(&err, "newdir", "earlier directory");
    }
}

#[test]
fn garbage_and_truncated_streams_are_malformed_not_partially_applied() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let mut good = Archive::new().file("big", &"y".repeat(5000)).finish();
        good.truncate(3000);
        let err = f.refused_plain(&good);
        assert!(matches!(err, VolumeError::BadArchive { .. }), "{err:?}");
        let err = f.refused(
            b"definitely not gzip",
            Compression::Gzip,
            &Limits::default(),
            "",
        );
        assert!(matches!(err, VolumeError::BadArchive { .. }), "{err:?}");
    }
}

#[test]
fn symlinks_that_stay_inside_the_volume_are_accepted() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let archive = Archive::new()
            .link("to-inner", EntryType::Symlink, "keep/inner")
            .link("newdir/up", EntryType::Symlink, "../existing.txt")
            .link("dangling", EntryType::Symlink, "not/yet/there")
            .link("newdir/hard", EntryType::Link, "innocent.txt")
            .finish();
        let report =
            f.vm.stream_in(
                "target",
                "",
                Cursor::new(archive),
                Compression::None,
                &Limits::default(),
            )
            .unwrap();
        assert_eq!(report.symlinks, 3);
        assert_eq!(report.hardlinks, 1);
        assert_eq!(
            fs::read_to_string(f.data.join("to-inner")).unwrap(),
            "inner"
        );
        assert_eq!(
            fs::read_to_string(f.data.join("newdir/up")).unwrap(),
            "original"
        );
        assert_eq!(
            fs::read_to_string(f.data.join("newdir/hard")).unwrap(),
            "harmless"
        );
        // Into a subpath, a link may climb up to (not above) the volume root.
        let archive = Archive::new()
            .link("l", EntryType::Symlink, "../../existing.txt")
            .finish();
        f.vm.stream_in(
            "target",
            "a/b",
            Cursor::new(archive),
            Compression::None,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            fs::read_to_string(f.data.join("a/b/l")).unwrap(),
            "original"
        );
        let archive = Archive::new()
            .link("l2", EntryType::Symlink, "../../../x")
            .finish();
        let err = f.refused(&archive, Compression::None, &Limits::default(), "a/b");
        expect_refused(&err, "l2", "outside the volume");
        let _ = io::stdout().flush();
    }
}

#[test]
fn names_reserved_for_staging_are_refused_at_the_volume_root() {
    for driver in drivers() {
        let f = Fixture::new(driver);
        let name = ".hangar-stream-in-0000/file";
        let err = f.refused_plain(&Archive::new().file(name, "x").finish());
        expect_refused(&err, name, "reserved");
    }
}
