//! Integration tests against the real OS, each once per driver: `naive::…`
//! for any user, `overlay_needs_root::…` as root (they fail without it).

use std::collections::BTreeMap;
use std::fs;
use std::io::Cursor;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::common::{no_props, snapshot, TestRoot};
use hangar_volumes::os::{Os, RealOs};
use hangar_volumes::{Compression, DriverKind, Limits, Strategy, VolumeError, VolumeManager};

fn cow(parent: &str) -> Strategy {
    Strategy::CopyOnWrite {
        parent: parent.into(),
    }
}

fn a_grandchild_sees_its_ancestors_files_and_its_writes_stay_private(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let parent = vm.create("parent", Strategy::Empty, no_props()).unwrap();
    fs::create_dir(parent.path.join("dir")).unwrap();
    fs::write(parent.path.join("dir/from-parent"), "p").unwrap();
    fs::write(parent.path.join("shadowed"), "parent version").unwrap();

    let child = vm.create("child", cow("parent"), no_props()).unwrap();
    fs::write(child.path.join("from-child"), "c").unwrap();
    fs::write(child.path.join("shadowed"), "child version").unwrap();

    let gc = vm.create("grandchild", cow("child"), no_props()).unwrap();
    assert_eq!(gc.driver, driver);
    assert_eq!(
        fs::read_to_string(gc.path.join("dir/from-parent")).unwrap(),
        "p",
        "{driver:?}"
    );
    assert_eq!(
        fs::read_to_string(gc.path.join("from-child")).unwrap(),
        "c",
        "{driver:?}"
    );
    assert_eq!(
        fs::read_to_string(gc.path.join("shadowed")).unwrap(),
        "child version"
    );

    // The grandchild writes, overwrites and deletes.
    fs::write(gc.path.join("dir/from-grandchild"), "g").unwrap();
    fs::write(gc.path.join("dir/from-parent"), "changed by grandchild").unwrap();
    fs::remove_file(gc.path.join("from-child")).unwrap();

    assert_eq!(
        fs::read_to_string(parent.path.join("dir/from-parent")).unwrap(),
        "p"
    );
    assert!(
        !parent.path.join("dir/from-grandchild").exists(),
        "{driver:?}"
    );
    assert!(
        !child.path.join("dir/from-grandchild").exists(),
        "{driver:?}"
    );
    assert_eq!(
        fs::read_to_string(child.path.join("dir/from-parent")).unwrap(),
        "p"
    );
    assert_eq!(
        fs::read_to_string(child.path.join("from-child")).unwrap(),
        "c"
    );
    assert!(!parent.path.join("from-child").exists());

    if driver == DriverKind::Overlay {
        // Only the grandchild's upper layer holds its changes.
        let gc_upper = root.path().join("volumes/grandchild/upper");
        assert!(gc_upper.join("dir/from-grandchild").is_file());
        let usage = vm.disk_usage("grandchild").unwrap();
        assert!(
            usage < 64 * 1024,
            "overlay child should be small, got {usage}"
        );
    }
    let handles: Vec<String> = vm.list().unwrap().into_iter().map(|v| v.handle).collect();
    assert_eq!(handles, vec!["child", "grandchild", "parent"]);
}

fn destroy_refuses_a_parent_with_live_children_and_a_missing_volume_is_ok(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    vm.create("parent", Strategy::Empty, no_props()).unwrap();
    vm.create("child", cow("parent"), no_props()).unwrap();
    let err = vm.destroy("parent").unwrap_err();
    assert!(
        matches!(&err, VolumeError::HasChildren { children, .. } if children == &["child"]),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "volume \"parent\" has live children: child"
    );
    assert!(vm.get("parent").unwrap().is_some());

    vm.destroy("child").unwrap();
    vm.destroy("child").unwrap(); // idempotent
    vm.destroy("parent").unwrap();
    vm.destroy("never-was").unwrap();
    assert!(vm.list().unwrap().is_empty());
    assert!(vm.leftovers().unwrap().is_empty());
    assert_eq!(
        RealOs.mounts_under(vm.root()).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

fn after_a_restart_with_mounts_gone_volumes_are_remounted_and_listed(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let mut props = BTreeMap::new();
    props.insert("kind".to_string(), "resource-cache".to_string());
    let p = vm.create("parent", Strategy::Empty, props).unwrap();
    fs::write(p.path.join("base"), "b").unwrap();
    let c = vm.create("child", cow("parent"), no_props()).unwrap();
    fs::write(c.path.join("mine"), "m").unwrap();
    let g = vm.create("grandchild", cow("child"), no_props()).unwrap();
    fs::write(g.path.join("deep"), "d").unwrap();
    vm.set_property("child", "note", "kept").unwrap();
    drop(vm);

    // Reboot: the mounts go away, the disk stays.
    let unmounted = root.unmount_all();
    let expect_mounts = if driver == DriverKind::Overlay { 2 } else { 0 };
    assert_eq!(unmounted, expect_mounts, "{driver:?}");

    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let report = vm.open_report().clone();
    if driver == DriverKind::Overlay {
        assert_eq!(report.remounted, vec!["child", "grandchild"]);
    } else {
        assert!(report.remounted.is_empty());
    }
    assert!(report.remount_failed.is_empty(), "{report:?}");
    let list = vm.list().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[2].properties["kind"], "resource-cache");
    assert_eq!(list[0].properties["note"], "kept");
    let g = vm.get("grandchild").unwrap().unwrap();
    assert_eq!(fs::read_to_string(g.path.join("base")).unwrap(), "b");
    assert_eq!(fs::read_to_string(g.path.join("mine")).unwrap(), "m");
    assert_eq!(fs::read_to_string(g.path.join("deep")).unwrap(), "d");
    // A restart of the process alone (mounts kept) re-mounts nothing.
    drop(vm);
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    assert!(vm.open_report().remounted.is_empty());
}

fn a_creation_killed_midway_is_invisible_and_removed_on_open(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let parent = vm.create("parent", Strategy::Empty, no_props()).unwrap();
    fs::write(parent.path.join("f"), "x").unwrap();
    // What a process killed after mounting but before the rename leaves.
    let staging = vm.root().join("volumes/.creating-victim-0123abcd");
    for d in ["", "upper", "work", "data"] {
        fs::create_dir(staging.join(d)).unwrap();
    }
    fs::write(staging.join("meta.json"), "{}").unwrap();
    if driver == DriverKind::Overlay {
        RealOs
            .mount_overlay(&hangar_volumes::os::OverlayMount {
                lower: vec![parent.path.clone()],
                upper: staging.join("upper"),
                work: staging.join("work"),
                target: staging.join("data"),
            })
            .unwrap();
        assert!(staging.join("data/f").exists());
    }
    assert_eq!(vm.list().unwrap().len(), 1);
    assert!(vm.get("victim").unwrap().is_none());
    assert_eq!(vm.leftovers().unwrap(), vec![staging.clone()]);
    drop(vm);

    let vm = VolumeManager::open(root.path(), driver).unwrap();
    assert_eq!(vm.open_report().removed, vec![staging.clone()]);
    assert!(!staging.exists());
    assert!(vm.leftovers().unwrap().is_empty());
    // The parent's data survived the cleanup of a mount stacked on it.
    assert_eq!(fs::read_to_string(parent.path.join("f")).unwrap(), "x");
    assert!(RealOs.mounts_under(vm.root()).unwrap().is_empty());
}

fn concurrent_creates_of_one_handle_have_exactly_one_winner(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = Arc::new(VolumeManager::open(root.path(), driver).unwrap());
    vm.create("parent", Strategy::Empty, no_props()).unwrap();
    let results: Vec<Result<_, VolumeError>> = (0..4)
        .map(|_| {
            let vm = vm.clone();
            std::thread::spawn(move || vm.create("same", cow("parent"), no_props()))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{driver:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(r, VolumeError::AlreadyExists { .. }), "{r}");
    }
    assert!(vm.leftovers().unwrap().is_empty());
    let mounts = RealOs.mounts_under(vm.root()).unwrap().len();
    assert_eq!(mounts, usize::from(driver == DriverKind::Overlay));
}

fn import_copies_a_host_directory_keeping_modes_and_symlinks(driver: DriverKind) {
    let root = TestRoot::new();
    let src = tempfile::tempdir().unwrap();
    fs::create_dir(src.path().join("bin")).unwrap();
    fs::write(src.path().join("bin/tool"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(
        src.path().join("bin/tool"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("bin/tool", src.path().join("tool")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", src.path().join("abs-link")).unwrap();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm
        .create(
            "imported",
            Strategy::Import {
                path: src.path().to_path_buf(),
            },
            no_props(),
        )
        .unwrap();
    assert_eq!(snapshot(&v.path), snapshot(src.path()));
    assert_eq!(
        fs::read_link(v.path.join("abs-link")).unwrap(),
        Path::new("/etc/hostname")
    );
    // Changing the import does not change the source.
    fs::write(v.path.join("bin/tool"), "changed").unwrap();
    assert!(fs::read_to_string(src.path().join("bin/tool"))
        .unwrap()
        .contains("echo hi"));

    let err = vm
        .create(
            "bad",
            Strategy::Import {
                path: src.path().join("missing"),
            },
            no_props(),
        )
        .unwrap_err();
    assert!(matches!(err, VolumeError::InvalidPath { .. }), "{err}");
    assert!(err.to_string().contains("import source"), "{err}");
}

fn build_tree(dir: &Path) {
    fs::create_dir_all(dir.join("a/b")).unwrap();
    fs::write(dir.join("a/b/file.txt"), "hello").unwrap();
    fs::write(dir.join("exec.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(dir.join("exec.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::hard_link(dir.join("a/b/file.txt"), dir.join("hard.txt")).unwrap();
    std::os::unix::fs::symlink("a/b/file.txt", dir.join("rel-link")).unwrap();
    fs::write(dir.join("big.bin"), vec![7u8; 3 * 1024 * 1024 + 17]).unwrap();
    fs::create_dir(dir.join("empty")).unwrap();
    fs::set_permissions(dir.join("empty"), fs::Permissions::from_mode(0o711)).unwrap();
}

fn stream_out_then_stream_in_round_trips_a_tree_plain_gzipped_and_zstd_compressed(
    driver: DriverKind,
) {
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let root = TestRoot::new();
        let vm = VolumeManager::open(root.path(), driver).unwrap();
        let src = vm.create("src", Strategy::Empty, no_props()).unwrap();
        build_tree(&src.path);
        // Stream out of a copy-on-write child so overlay merged views
        // are exercised too.
        let child = vm.create("child", cow("src"), no_props()).unwrap();
        let mut archive = Vec::new();
        let n = vm
            .stream_out("child", "", &mut archive, compression)
            .unwrap();
        assert_eq!(n, archive.len() as u64);

        let dst = vm.create("dst", Strategy::Empty, no_props()).unwrap();
        let report = vm
            .stream_in(
                "dst",
                "",
                Cursor::new(&archive),
                compression,
                &Limits::default(),
            )
            .unwrap();
        assert_eq!(report.files, 3, "{report:?}");
        assert_eq!(report.hardlinks, 1, "{report:?}");
        assert_eq!(report.symlinks, 1);
        assert_eq!(
            snapshot(&dst.path),
            snapshot(&child.path),
            "{driver:?} {compression:?}"
        );
        let a = fs::metadata(dst.path.join("hard.txt")).unwrap();
        let b = fs::metadata(dst.path.join("a/b/file.txt")).unwrap();
        assert_eq!(a.ino(), b.ino(), "hard link kept");
        assert!(vm.leftovers().unwrap().is_empty());
    }
}

fn stream_in_to_a_subpath_merges_with_existing_content(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let base = vm.create("base", Strategy::Empty, no_props()).unwrap();
    fs::create_dir_all(base.path.join("out/keep")).unwrap();
    fs::write(base.path.join("out/keep/old"), "old").unwrap();
    fs::write(base.path.join("out/replace"), "before").unwrap();
    let v = vm.create("v", cow("base"), no_props()).unwrap();

    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, body: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, body.as_bytes()).unwrap();
    };
    add("replace", "after");
    add("keep/new", "new");
    add("fresh/deep/file", "deep");
    let archive = b.into_inner().unwrap();
    vm.stream_in(
        "v",
        "out",
        Cursor::new(archive),
        Compression::None,
        &Limits::default(),
    )
    .unwrap();
    let read = |p: &str| fs::read_to_string(v.path.join(p)).unwrap();
    assert_eq!(read("out/keep/old"), "old");
    assert_eq!(read("out/keep/new"), "new");
    assert_eq!(read("out/replace"), "after");
    assert_eq!(read("out/fresh/deep/file"), "deep");
    // The parent is untouched.
    assert_eq!(
        fs::read_to_string(base.path.join("out/replace")).unwrap(),
        "before"
    );
    assert!(!base.path.join("out/keep/new").exists());
    // A new subpath is created.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    b.append_data(&mut h, "x", &b"1"[..]).unwrap();
    vm.stream_in(
        "v",
        "new/place",
        Cursor::new(b.into_inner().unwrap()),
        Compression::None,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(read("new/place/x"), "1");
    assert!(vm.leftovers().unwrap().is_empty());
}

fn stream_out_of_a_single_file_and_of_a_subdirectory(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm.create("v", Strategy::Empty, no_props()).unwrap();
    build_tree(&v.path);
    let mut out = Vec::new();
    vm.stream_out("v", "a/b/file.txt", &mut out, Compression::None)
        .unwrap();
    let mut ar = tar::Archive::new(Cursor::new(out));
    let names: Vec<String> = ar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, vec!["file.txt"]);

    let mut out = Vec::new();
    vm.stream_out("v", "a", &mut out, Compression::None)
        .unwrap();
    let mut ar = tar::Archive::new(Cursor::new(out));
    let names: Vec<String> = ar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, vec!["b", "b/file.txt"]);

    let err = vm
        .stream_out("v", "missing", std::io::sink(), Compression::None)
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    let err = vm
        .stream_out("v", "../x", std::io::sink(), Compression::None)
        .unwrap_err();
    assert!(matches!(err, VolumeError::InvalidPath { .. }), "{err}");
    let err = vm
        .stream_out("nope", "", std::io::sink(), Compression::None)
        .unwrap_err();
    assert!(matches!(err, VolumeError::NotFound { .. }), "{err}");
}

fn stream_out_archives_symlinks_as_links_and_never_follows_them_out(driver: DriverKind) {
    let root = TestRoot::new();
    let secret = tempfile::tempdir().unwrap();
    fs::write(secret.path().join("secret"), "host secret").unwrap();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm.create("v", Strategy::Empty, no_props()).unwrap();
    // What a container could plant in its volume.
    std::os::unix::fs::symlink(secret.path().join("secret"), v.path.join("leak")).unwrap();
    std::os::unix::fs::symlink(secret.path(), v.path.join("leakdir")).unwrap();
    let mut out = Vec::new();
    vm.stream_out("v", "", &mut out, Compression::None).unwrap();
    assert!(!String::from_utf8_lossy(&out).contains("host secret"));
    let mut ar = tar::Archive::new(Cursor::new(&out));
    for e in ar.entries().unwrap() {
        let e = e.unwrap();
        assert_eq!(e.header().entry_type(), tar::EntryType::Symlink);
    }
    // Asking for a path through the planted directory link is refused.
    let err = vm
        .stream_out("v", "leakdir/secret", std::io::sink(), Compression::None)
        .unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    // Asking for the link itself yields the link, not the target.
    let mut out = Vec::new();
    vm.stream_out("v", "leak", &mut out, Compression::None)
        .unwrap();
    assert!(!String::from_utf8_lossy(&out).contains("host secret"));
}

fn a_stream_in_killed_midway_leaves_staging_that_open_removes(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    vm.create("base", Strategy::Empty, no_props()).unwrap();
    let v = vm.create("v", cow("base"), no_props()).unwrap();
    // Where stream-in stages: beside data for plain volumes, inside the
    // mount for overlay children.
    let stage_parent = if driver == DriverKind::Overlay {
        v.path.clone()
    } else {
        v.path.parent().unwrap().to_path_buf()
    };
    let staging = stage_parent.join(".hangar-stream-in-deadbeef");
    fs::create_dir_all(staging.join("half/written")).unwrap();
    fs::write(staging.join("half/written/file"), "partial").unwrap();
    assert_eq!(vm.leftovers().unwrap(), vec![staging.clone()]);
    // Never shipped out either.
    let mut out = Vec::new();
    vm.stream_out("v", "", &mut out, Compression::None).unwrap();
    assert!(!String::from_utf8_lossy(&out).contains("partial"));
    drop(vm);
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    assert_eq!(vm.open_report().removed, vec![staging.clone()]);
    assert!(!staging.exists());
    assert!(vm.leftovers().unwrap().is_empty());
    assert!(vm.disk_usage("v").unwrap() < 1024 * 1024);
}

/// `stream_in_as`: every entry made — files, explicit directories, the
/// parents an archive implies without naming them, symlinks — is the
/// owner's, whoever the archive names (as root; a worker that is not root
/// owns what it writes, and so the entries stay its own).
fn stream_in_as_makes_every_entry_the_owners(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm.create("v", Strategy::Empty, no_props()).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_uid(0);
    dir.set_size(0);
    b.append_data(&mut dir, "named/", std::io::empty()).unwrap();
    for (path, uid) in [("named/file", 0), ("implied/deep/file", 42)] {
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_mode(0o644);
        h.set_uid(uid);
        h.set_gid(uid);
        b.append_data(&mut h, path, &b"hi"[..]).unwrap();
    }
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_uid(0);
    link.set_size(0);
    b.append_link(&mut link, "link", "named/file").unwrap();
    let archive = b.into_inner().unwrap();
    let owner = (4_000_123, 4_000_456);
    vm.stream_in_as(
        "v",
        "",
        Cursor::new(archive),
        Compression::None,
        &Limits::default(),
        Some(owner),
    )
    .unwrap();
    let me = fs::metadata(root.path()).unwrap();
    let expected = if crate::common::is_root() {
        owner
    } else {
        (me.uid(), me.gid())
    };
    for entry in [
        "named",
        "named/file",
        "implied",
        "implied/deep",
        "implied/deep/file",
        "link",
    ] {
        let m = fs::symlink_metadata(v.path.join(entry)).unwrap();
        assert_eq!((m.uid(), m.gid()), expected, "{entry}");
    }
    assert_eq!(
        fs::read_to_string(v.path.join("implied/deep/file")).unwrap(),
        "hi"
    );
    assert!(fs::symlink_metadata(v.path.join("link"))
        .unwrap()
        .is_symlink());
}

on_both_drivers!(
    stream_in_as_makes_every_entry_the_owners,
    a_grandchild_sees_its_ancestors_files_and_its_writes_stay_private,
    destroy_refuses_a_parent_with_live_children_and_a_missing_volume_is_ok,
    after_a_restart_with_mounts_gone_volumes_are_remounted_and_listed,
    a_creation_killed_midway_is_invisible_and_removed_on_open,
    concurrent_creates_of_one_handle_have_exactly_one_winner,
    import_copies_a_host_directory_keeping_modes_and_symlinks,
    stream_out_then_stream_in_round_trips_a_tree_plain_gzipped_and_zstd_compressed,
    stream_in_to_a_subpath_merges_with_existing_content,
    stream_out_of_a_single_file_and_of_a_subdirectory,
    stream_out_archives_symlinks_as_links_and_never_follows_them_out,
    a_stream_in_killed_midway_leaves_staging_that_open_removes,
);
