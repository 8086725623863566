//! Hostile archives: each is refused with a clear error, the volume is left
//! exactly as it was, and nothing outside it (a canary dir) is touched.
//! Runs against a plain volume (naive) and an overlay copy-on-write child
//! (`overlay_needs_root::…`, as root; they fail without it), where the
//! staging dir lives inside the mount.

use std::fs;
use std::io::{self, Cursor, Read, Write};
use std::path::{Path, PathBuf};

use crate::common::{no_props, snapshot, TestRoot};
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

    /// Stream an archive in that must be accepted (an earlier step of a
    /// multi-step attack).
    fn accepted(&self, archive: &[u8], subpath: &str) {
        self.vm
            .stream_in(
                "target",
                subpath,
                Cursor::new(archive),
                Compression::None,
                &Limits::default(),
            )
            .unwrap_or_else(|e| panic!("{:?}: step refused: {e}", self.driver));
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

    /// No innocent entries: for the harmless first steps of an attack.
    fn bare() -> Self {
        Archive {
            b: tar::Builder::new(Vec::new()),
        }
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

fn parent_directory_traversal_is_refused(driver: DriverKind) {
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

fn absolute_paths_are_refused(driver: DriverKind) {
    let f = Fixture::new(driver);
    let etc = "/etc/hangar-volumes-hostile-test";
    let err = f.refused_plain(&Archive::new().file(etc, "escaped").finish());
    expect_refused(&err, etc, "absolute");
    assert!(!Path::new(etc).exists());
    let abs = f.canary().join("pwned").display().to_string();
    let err = f.refused_plain(&Archive::new().file(&abs, "escaped").finish());
    expect_refused(&err, &abs, "absolute");
}

fn a_symlink_escape_with_a_file_written_through_it_is_refused(driver: DriverKind) {
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

fn a_chain_of_inside_looking_symlinks_that_escapes_is_refused(driver: DriverKind) {
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

fn hardlinks_to_anything_but_an_earlier_entry_are_refused(driver: DriverKind) {
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

fn device_and_fifo_entries_are_refused(driver: DriverKind) {
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

fn a_zstd_bomb_of_zeros_is_stopped_at_the_byte_limit(driver: DriverKind) {
    let mut zst = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
    append_zeros(&mut zst);
    let bomb = zst.finish().unwrap();
    assert!(bomb.len() < 64 * 1024, "a bomb is small: {}", bomb.len());
    bomb_stops_at_the_byte_limit(driver, &bomb, Compression::Zstd);
}

/// A tar of one entry of 64 MiB of zeros.
fn append_zeros(w: &mut impl io::Write) {
    let mut b = tar::Builder::new(w);
    let h = raw_header("zeros.bin", EntryType::Regular, 64 << 20);
    b.append(&h, io::repeat(0).take(64 << 20)).unwrap();
    b.finish().unwrap();
}

/// A compressed `bomb` of [`append_zeros`] is refused at a 1 MiB limit,
/// naming its entry.
fn bomb_stops_at_the_byte_limit(driver: DriverKind, bomb: &[u8], compression: Compression) {
    let f = Fixture::new(driver);
    let limits = Limits {
        max_bytes: 1 << 20,
        ..Limits::default()
    };
    let err = f.refused(bomb, compression, &limits, "");
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

fn a_gzip_bomb_of_zeros_is_stopped_at_the_byte_limit(driver: DriverKind) {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    append_zeros(&mut gz);
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 512 * 1024, "a bomb is small: {}", bomb.len());
    bomb_stops_at_the_byte_limit(driver, &bomb, Compression::Gzip);
}

fn many_small_files_over_the_byte_limit_are_stopped_by_counting(driver: DriverKind) {
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

fn an_oversized_extension_header_is_stopped_before_it_is_buffered(driver: DriverKind) {
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

fn too_many_entries_are_refused_naming_the_first_one_over(driver: DriverKind) {
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

fn bad_subpaths_and_planted_symlinks_in_the_destination_are_refused(driver: DriverKind) {
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
    expect_refused(&err, "planted", "path goes through symlink planted");
}

fn type_conflicts_with_existing_content_are_refused(driver: DriverKind) {
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

fn garbage_and_truncated_streams_are_malformed_not_partially_applied(driver: DriverKind) {
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

fn symlinks_that_stay_inside_the_volume_are_accepted(driver: DriverKind) {
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

fn names_reserved_for_staging_are_refused_at_the_volume_root(driver: DriverKind) {
    let f = Fixture::new(driver);
    let name = ".hangar-stream-in-0000/file";
    let err = f.refused_plain(&Archive::new().file(name, "x").finish());
    expect_refused(&err, name, "reserved");
}

// ------------------------------------------------ attacks over several streams

/// `b/b/.../b/../../...`: inside while `b` is missing or a directory, and
/// enough `..` to reach `/` from any data dir once `b` is a link to `.`.
fn deep_through_b() -> String {
    format!("{}{}", "b/".repeat(16), "../".repeat(16))
}

fn a_link_through_a_missing_name_cannot_escape_once_the_name_is_made_a_link_to_dot(
    driver: DriverKind,
) {
    let f = Fixture::new(driver);
    let up = deep_through_b();
    f.accepted(
        &Archive::bare().link("up", EntryType::Symlink, &up).finish(),
        "",
    );
    let err = f.refused_plain(&Archive::new().link("b", EntryType::Symlink, ".").finish());
    expect_refused(&err, "up", "already in the volume");
    assert!(
        err.to_string().contains("climbs above the volume root"),
        "{err}"
    );
    assert!(fs::symlink_metadata(f.data.join("b")).is_err());
    // A link to `..` is refused on its own, at the root.
    let err = f.refused_plain(&Archive::new().link("b", EntryType::Symlink, "..").finish());
    expect_refused(&err, "b", "climbs above the volume root");
    // Making the name a real directory keeps `up` inside: accepted.
    f.accepted(
        &Archive::bare()
            .raw(raw_header("b/", EntryType::Directory, 0), io::empty())
            .finish(),
        "",
    );
    assert!(fs::metadata(f.data.join("b")).unwrap().is_dir());
}

fn a_missing_name_made_a_link_to_dotdot_below_the_root_is_refused(driver: DriverKind) {
    let f = Fixture::new(driver);
    // From d/: d/n/../.. is the root while n is missing.
    f.accepted(
        &Archive::bare()
            .raw(raw_header("d/", EntryType::Directory, 0), io::empty())
            .link("d/l", EntryType::Symlink, "n/../..")
            .finish(),
        "",
    );
    // d/n -> .. stays inside on its own, but d/l becomes root/..
    let err = f.refused_plain(
        &Archive::new()
            .link("d/n", EntryType::Symlink, "..")
            .finish(),
    );
    expect_refused(&err, "d/l", "already in the volume");
    // The same two steps into a subpath of the volume.
    f.accepted(
        &Archive::bare()
            .link("l", EntryType::Symlink, "m/../..")
            .finish(),
        "sub",
    );
    let err = f.refused(
        &Archive::new().link("m", EntryType::Symlink, ".").finish(),
        Compression::None,
        &Limits::default(),
        "sub",
    );
    expect_refused(&err, "sub/l", "already in the volume");
}

fn a_chain_built_over_three_streams_is_refused_at_the_stream_that_closes_it(driver: DriverKind) {
    let f = Fixture::new(driver);
    f.accepted(
        &Archive::bare()
            .link("x", EntryType::Symlink, "y/..")
            .finish(),
        "",
    );
    f.accepted(
        &Archive::bare().link("y", EntryType::Symlink, "z").finish(),
        "",
    );
    // x -> y/.. -> z/.. -> ./.. : the root's parent.
    let err = f.refused_plain(&Archive::new().link("z", EntryType::Symlink, ".").finish());
    expect_refused(&err, "x", "already in the volume");
    // Replacing a link of the chain is checked the same way.
    f.accepted(
        &Archive::bare()
            .link("b", EntryType::Symlink, "keep/sub")
            .link("a", EntryType::Symlink, "b/../..")
            .finish(),
        "",
    );
    let err = f.refused_plain(&Archive::new().link("b", EntryType::Symlink, ".").finish());
    expect_refused(&err, "a", "already in the volume");
    assert_eq!(
        fs::read_link(f.data.join("b")).unwrap(),
        PathBuf::from("keep/sub")
    );
}

fn hard_links_to_links_are_refused_across_streams(driver: DriverKind) {
    let f = Fixture::new(driver);
    f.accepted(
        &Archive::bare()
            .link("sl", EntryType::Symlink, "existing.txt")
            .link("dl", EntryType::Symlink, "keep")
            .finish(),
        "",
    );
    let err = f.refused_plain(&Archive::new().link("h", EntryType::Link, "sl").finish());
    expect_refused(&err, "h", "not a regular file extracted earlier");
    let err = f.refused_plain(
        &Archive::new()
            .link("h", EntryType::Link, "dl/inner")
            .finish(),
    );
    expect_refused(&err, "h", "not a regular file extracted earlier");
    // Through a link staged by the same archive, to a staged file.
    let err = f.refused_plain(
        &Archive::new()
            .link("nd", EntryType::Symlink, "newdir")
            .link("h", EntryType::Link, "nd/inside.txt")
            .finish(),
    );
    expect_refused(&err, "h", "not a regular file extracted earlier");
}

fn absolute_link_targets_are_refused_in_any_step(driver: DriverKind) {
    let f = Fixture::new(driver);
    f.accepted(
        &Archive::bare()
            .link("rel", EntryType::Symlink, "abs/etc/passwd")
            .finish(),
        "",
    );
    let err = f.refused_plain(&Archive::new().link("abs", EntryType::Symlink, "/").finish());
    expect_refused(&err, "abs", "absolute");
    // A container wrote an absolute link: a new link through it is
    // refused, links that do not touch it are not.
    std::os::unix::fs::symlink("/", f.data.join("host")).unwrap();
    let err = f.refused_plain(
        &Archive::new()
            .link("via", EntryType::Symlink, "host/etc")
            .finish(),
    );
    expect_refused(&err, "via", "absolute");
    f.accepted(
        &Archive::bare()
            .link("ok", EntryType::Symlink, "keep")
            .finish(),
        "",
    );
}

fn entries_through_a_link_an_earlier_stream_made_are_refused(driver: DriverKind) {
    let f = Fixture::new(driver);
    f.accepted(
        &Archive::bare()
            .link("l", EntryType::Symlink, "keep")
            .finish(),
        "",
    );
    let err = f.refused_plain(&Archive::new().file("l/pwned", "through").finish());
    expect_refused(
        &err,
        "l",
        "path goes through symlink l already in the volume",
    );
    assert!(!f.data.join("keep/pwned").exists());
    let err = f.refused(
        &Archive::new().finish(),
        Compression::None,
        &Limits::default(),
        "l",
    );
    assert!(err.to_string().contains("l is a symlink"), "{err}");
}

#[test]
fn an_output_dir_written_twice_cannot_be_redirected_by_the_first_write() {
    let tmp = tempfile::tempdir().unwrap();
    let canary = tmp.path().join("canary");
    fs::create_dir(&canary).unwrap();
    fs::write(canary.join("canary.txt"), "tweet").unwrap();
    let out = tmp.path().join("out");
    let extract = |archive: Vec<u8>| {
        hangar_volumes::extract_into_dir(
            &out,
            Cursor::new(archive),
            Compression::None,
            &Limits::default(),
        )
    };
    let first = Archive::bare()
        .link("up", EntryType::Symlink, &deep_through_b())
        .link("l", EntryType::Symlink, "../canary")
        .finish();
    // `l` climbs out of the dir at once: the first write is refused whole.
    let err = extract(first).unwrap_err();
    expect_refused(&err, "l", "outside the volume");
    assert!(snapshot(&out).is_empty(), "{:?}", snapshot(&out));
    extract(
        Archive::bare()
            .link("up", EntryType::Symlink, &deep_through_b())
            .link("inside", EntryType::Symlink, "later")
            .finish(),
    )
    .unwrap();
    let before = snapshot(&out);
    let canary_before = snapshot(&canary);
    for (second, entry, why) in [
        (
            Archive::new().link("b", EntryType::Symlink, ".").finish(),
            "up",
            "already in the volume",
        ),
        (
            Archive::new().file("inside/pwned", "x").finish(),
            "inside",
            "path goes through symlink",
        ),
    ] {
        let err = extract(second).unwrap_err();
        expect_refused(&err, entry, why);
        assert_eq!(snapshot(&out), before, "output dir changed by {err}");
        assert_eq!(snapshot(&canary), canary_before);
    }
    // An honest second write still lands.
    extract(Archive::new().finish()).unwrap();
    assert_eq!(
        fs::read_to_string(out.join("newdir/inside.txt")).unwrap(),
        "fine"
    );
}

fn a_million_repeats_of_one_directory_cost_one_record_and_the_last_one_wins(driver: DriverKind) {
    let f = Fixture::new(driver);
    let mut a = Archive::bare();
    for i in 0..1000u32 {
        let mut h = raw_header("rep/", EntryType::Directory, 0);
        h.set_mode(if i == 999 { 0o750 } else { 0o700 });
        h.set_mtime(u64::from(i) + 1_000_000);
        h.set_cksum();
        a.raw(h, io::empty());
    }
    let mut h = raw_header("keep/", EntryType::Directory, 0);
    h.set_mode(0o711);
    h.set_mtime(123_456);
    h.set_cksum();
    a.raw(h, io::empty());
    a.file("rep/f", "x").file("keep/new", "y");
    f.accepted(&a.finish(), "");
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(f.data.join("rep")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.mtime()), (0o750, 1_000_999));
    // Merged into an existing directory: its metadata is applied there.
    let m = fs::metadata(f.data.join("keep")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.mtime()), (0o711, 123_456));
    assert_eq!(
        fs::read_to_string(f.data.join("keep/inner")).unwrap(),
        "inner"
    );
}

on_both_drivers!(
    parent_directory_traversal_is_refused,
    absolute_paths_are_refused,
    a_symlink_escape_with_a_file_written_through_it_is_refused,
    a_chain_of_inside_looking_symlinks_that_escapes_is_refused,
    hardlinks_to_anything_but_an_earlier_entry_are_refused,
    device_and_fifo_entries_are_refused,
    a_gzip_bomb_of_zeros_is_stopped_at_the_byte_limit,
    a_zstd_bomb_of_zeros_is_stopped_at_the_byte_limit,
    many_small_files_over_the_byte_limit_are_stopped_by_counting,
    an_oversized_extension_header_is_stopped_before_it_is_buffered,
    too_many_entries_are_refused_naming_the_first_one_over,
    bad_subpaths_and_planted_symlinks_in_the_destination_are_refused,
    type_conflicts_with_existing_content_are_refused,
    garbage_and_truncated_streams_are_malformed_not_partially_applied,
    symlinks_that_stay_inside_the_volume_are_accepted,
    names_reserved_for_staging_are_refused_at_the_volume_root,
    a_link_through_a_missing_name_cannot_escape_once_the_name_is_made_a_link_to_dot,
    a_missing_name_made_a_link_to_dotdot_below_the_root_is_refused,
    a_chain_built_over_three_streams_is_refused_at_the_stream_that_closes_it,
    hard_links_to_links_are_refused_across_streams,
    absolute_link_targets_are_refused_in_any_step,
    entries_through_a_link_an_earlier_stream_made_are_refused,
    a_million_repeats_of_one_directory_cost_one_record_and_the_last_one_wins,
);
