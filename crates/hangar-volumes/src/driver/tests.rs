//! Driver and manager logic through the recording fake OS.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::names;
use crate::os::fake::{Call, FailAt, FailMode, FakeOs};
use crate::os::Os;
use crate::{DriverKind, Strategy, VolumeError, VolumeManager};

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    fake: Arc<FakeOs>,
    kind: DriverKind,
}

impl Env {
    fn new(kind: DriverKind) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        Env {
            _tmp: tmp,
            root,
            fake: Arc::new(FakeOs::new()),
            kind,
        }
    }

    /// A manager on the same disk and the same (simulated) kernel: what a
    /// restarted worker process would get.
    fn open(&self) -> VolumeManager {
        let os: Arc<dyn Os> = self.fake.clone();
        VolumeManager::open_with_os(&self.root, self.kind, os).unwrap()
    }

    fn vol(&self, handle: &str) -> PathBuf {
        self.root.join("volumes").join(handle)
    }
}

fn none() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn cow(parent: &str) -> Strategy {
    Strategy::CopyOnWrite {
        parent: parent.into(),
    }
}

fn is_staging(p: &Path) -> bool {
    p.file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(names::CREATING)
}

fn handles(vm: &VolumeManager) -> Vec<String> {
    vm.list().unwrap().into_iter().map(|v| v.handle).collect()
}

#[test]
fn an_empty_volume_is_built_in_a_staging_dir_and_renamed_into_place() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    env.fake.clear_calls();
    let info = vm.create("v1", Strategy::Empty, none()).unwrap();
    assert_eq!(info.path, env.vol("v1").join("data"));
    let calls = env.fake.calls();
    let points: Vec<FailAt> = calls.iter().map(Call::point).collect();
    assert_eq!(
        points,
        vec![
            FailAt::MakeStaging,
            FailAt::MakeLayout,
            FailAt::WriteMeta,
            FailAt::RenameIntoPlace,
            FailAt::SyncParent
        ]
    );
    let Call::Rename(from, to) = &calls[3] else {
        panic!("expected a rename, got {:?}", calls[3]);
    };
    assert!(is_staging(from));
    assert_eq!(to, &env.vol("v1"));
    assert!(env.vol("v1").join("meta.json").is_file());
    assert!(vm.leftovers().unwrap().is_empty());
}

#[test]
fn a_naive_copy_on_write_child_is_a_full_copy_of_its_parent() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    let parent = vm.create("p", Strategy::Empty, none()).unwrap();
    fs::write(parent.path.join("f"), b"parent").unwrap();
    env.fake.clear_calls();
    let child = vm.create("c", cow("p"), none()).unwrap();
    assert!(env
        .fake
        .calls()
        .iter()
        .any(|c| matches!(c, Call::CopyTree(from, _) if from == &parent.path)));
    assert_eq!(fs::read(child.path.join("f")).unwrap(), b"parent");
    fs::write(child.path.join("f"), b"child").unwrap();
    assert_eq!(fs::read(parent.path.join("f")).unwrap(), b"parent");
    assert_eq!(child.parent.as_deref(), Some("p"));
}

#[test]
fn an_overlay_grandchild_stacks_its_parents_upper_over_the_base_data() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("base", Strategy::Empty, none()).unwrap();
    vm.create("child", cow("base"), none()).unwrap();
    vm.create("grandchild", cow("child"), none()).unwrap();
    let mounts = env.fake.mounts();
    let child = &mounts[&env.vol("child").join("data")];
    assert_eq!(child.lower, vec![env.vol("base").join("data")]);
    let gc = &mounts[&env.vol("grandchild").join("data")];
    assert_eq!(
        gc.lower,
        vec![env.vol("child").join("upper"), env.vol("base").join("data")]
    );
    let opts = gc.options();
    assert!(opts.starts_with(&format!(
        "lowerdir={}:{},",
        env.vol("child").join("upper").display(),
        env.vol("base").join("data").display()
    )));
    assert!(opts.contains("index=off"), "{opts}");
    assert_eq!(mounts.len(), 2, "the base volume is a plain directory");
    // Mounted in staging, then moved with the rename.
    assert!(env.fake.calls().iter().any(|c| matches!(
        c,
        Call::MountOverlay(m) if is_staging(m.target.parent().unwrap())
    )));
}

/// The create points that a given scenario passes through.
fn scenario_points(kind: DriverKind, child: bool) -> Vec<FailAt> {
    match (kind, child) {
        (DriverKind::Naive, false) => vec![
            FailAt::MakeStaging,
            FailAt::MakeLayout,
            FailAt::WriteMeta,
            FailAt::RenameIntoPlace,
        ],
        (DriverKind::Naive, true) => vec![
            FailAt::MakeStaging,
            FailAt::CopyData,
            FailAt::WriteMeta,
            FailAt::RenameIntoPlace,
        ],
        (DriverKind::Overlay, _) => vec![
            FailAt::MakeStaging,
            FailAt::MakeLayout,
            FailAt::WriteMeta,
            FailAt::MountOverlay,
            FailAt::RenameIntoPlace,
        ],
    }
}

#[test]
fn a_crash_at_each_create_point_leaves_no_visible_volume_and_open_removes_the_leftover() {
    for (kind, child) in [
        (DriverKind::Naive, false),
        (DriverKind::Naive, true),
        (DriverKind::Overlay, true),
    ] {
        for point in scenario_points(kind, child) {
            let label = format!("{kind:?} child={child} crash at {point:?}");
            let env = Env::new(kind);
            let vm = env.open();
            let strategy = if child {
                let p = vm.create("p", Strategy::Empty, none()).unwrap();
                fs::write(p.path.join("f"), b"x").unwrap();
                cow("p")
            } else {
                Strategy::Empty
            };
            env.fake.fail_at(point, FailMode::Crash);
            let err = vm.create("v", strategy.clone(), none()).unwrap_err();
            assert!(
                err.to_string().contains("injected failure"),
                "{label}: {err}"
            );
            assert_eq!(vm.get("v").unwrap(), None, "{label}");
            assert!(!handles(&vm).contains(&"v".to_string()), "{label}");
            let leftovers = vm.leftovers().unwrap();
            if point == FailAt::MakeStaging {
                assert!(leftovers.is_empty(), "{label}: {leftovers:?}");
            } else {
                assert_eq!(leftovers.len(), 1, "{label}: {leftovers:?}");
                assert!(is_staging(&leftovers[0]), "{label}");
            }
            drop(vm);

            // A new process on the same disk.
            env.fake.revive();
            env.fake.clear_calls();
            let vm = env.open();
            assert_eq!(vm.open_report().removed, leftovers, "{label}");
            assert!(vm.leftovers().unwrap().is_empty(), "{label}");
            assert!(
                env.fake
                    .mounts()
                    .keys()
                    .all(|m| !m.to_string_lossy().contains(".creating-")),
                "{label}: staging mount left behind"
            );
            if point == FailAt::RenameIntoPlace && kind == DriverKind::Overlay {
                let calls = env.fake.calls();
                let unmount = calls.iter().position(|c| matches!(c, Call::Unmount(_)));
                let remove = calls
                    .iter()
                    .position(|c| matches!(c, Call::RemoveDirAll(_)));
                assert!(unmount.unwrap() < remove.unwrap(), "{label}: {calls:?}");
            }
            // The handle is free again.
            vm.create("v", strategy, none()).unwrap();
            assert!(vm.get("v").unwrap().is_some(), "{label}");
        }
    }
}

#[test]
fn a_crash_after_the_rename_leaves_a_complete_volume() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    env.fake.fail_at(FailAt::SyncParent, FailMode::Crash);
    // The rename is the commit point: the volume exists.
    let info = vm.create("v", Strategy::Empty, none()).unwrap();
    assert!(info.path.is_dir());
    env.fake.revive();
    let vm = env.open();
    assert_eq!(handles(&vm), vec!["v"]);
    assert!(vm.open_report().removed.is_empty());
}

#[test]
fn a_failed_create_step_is_rolled_back_without_leftovers() {
    for point in scenario_points(DriverKind::Overlay, true) {
        let env = Env::new(DriverKind::Overlay);
        let vm = env.open();
        vm.create("p", Strategy::Empty, none()).unwrap();
        env.fake.fail_at(point, FailMode::Error);
        let err = vm.create("v", cow("p"), none()).unwrap_err();
        assert!(matches!(err, VolumeError::Io { .. }), "{point:?}: {err}");
        assert!(vm.leftovers().unwrap().is_empty(), "{point:?}");
        assert!(env.fake.mounts().is_empty(), "{point:?}");
        assert_eq!(handles(&vm), vec!["p"], "{point:?}");
    }
}

#[test]
fn creating_an_existing_handle_is_already_exists() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    vm.create("v", Strategy::Empty, none()).unwrap();
    let err = vm.create("v", Strategy::Empty, none()).unwrap_err();
    assert!(matches!(err, VolumeError::AlreadyExists { ref handle } if handle == "v"));
    assert_eq!(err.to_string(), "volume \"v\" already exists");
}

#[test]
fn invalid_handles_are_refused_before_touching_the_disk() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    env.fake.clear_calls();
    for bad in ["../escape", "a/b", "", ".creating-x", "a..b"] {
        let err = vm.create(bad, Strategy::Empty, none()).unwrap_err();
        assert!(
            matches!(err, VolumeError::InvalidHandle { .. }),
            "{bad}: {err}"
        );
        assert!(matches!(
            vm.destroy(bad),
            Err(VolumeError::InvalidHandle { .. })
        ));
    }
    assert!(env.fake.calls().is_empty());
}

#[test]
fn a_copy_on_write_child_of_a_missing_parent_is_parent_not_found() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    let err = vm.create("c", cow("nope"), none()).unwrap_err();
    assert!(matches!(err, VolumeError::ParentNotFound { ref parent, .. } if parent == "nope"));
    assert!(vm.leftovers().unwrap().is_empty());
}

#[test]
fn destroy_refuses_a_volume_with_children_and_names_them() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("p", Strategy::Empty, none()).unwrap();
    vm.create("c1", cow("p"), none()).unwrap();
    vm.create("c2", cow("p"), none()).unwrap();
    let err = vm.destroy("p").unwrap_err();
    match &err {
        VolumeError::HasChildren { handle, children } => {
            assert_eq!(handle, "p");
            assert_eq!(children, &vec!["c1".to_string(), "c2".to_string()]);
        }
        other => panic!("expected HasChildren, got {other}"),
    }
    assert!(err.to_string().contains("c1, c2"));
    vm.destroy("c1").unwrap();
    vm.destroy("c2").unwrap();
    vm.destroy("p").unwrap();
    assert!(vm.list().unwrap().is_empty());
}

#[test]
fn destroying_a_missing_volume_is_ok_and_does_nothing() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    env.fake.clear_calls();
    vm.destroy("never-existed").unwrap();
    assert!(env.fake.calls().is_empty());
}

#[test]
fn destroy_unmounts_then_moves_the_volume_away_then_deletes_it() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("p", Strategy::Empty, none()).unwrap();
    vm.create("c", cow("p"), none()).unwrap();
    env.fake.clear_calls();
    vm.destroy("c").unwrap();
    let points: Vec<FailAt> = env.fake.calls().iter().map(Call::point).collect();
    assert_eq!(
        points,
        vec![
            FailAt::Unmount,
            FailAt::RenameAway,
            FailAt::SyncParent,
            FailAt::RemoveTree
        ]
    );
    assert!(env.fake.mounts().is_empty());
    assert!(!env.vol("c").exists());
    assert!(vm.leftovers().unwrap().is_empty());
}

#[test]
fn a_crash_while_destroying_never_leaves_a_half_destroyed_volume_visible() {
    for point in [FailAt::Unmount, FailAt::RenameAway, FailAt::RemoveTree] {
        let env = Env::new(DriverKind::Overlay);
        let vm = env.open();
        vm.create("p", Strategy::Empty, none()).unwrap();
        vm.create("c", cow("p"), none()).unwrap();
        env.fake.fail_at(point, FailMode::Crash);
        assert!(vm.destroy("c").is_err(), "{point:?}");
        let visible = vm.get("c").unwrap().is_some();
        drop(vm);
        env.fake.revive();
        let vm = env.open();
        if point == FailAt::RemoveTree {
            assert!(!visible, "{point:?}: renamed away before deleting");
            assert_eq!(vm.open_report().removed.len(), 1, "{point:?}");
            assert_eq!(handles(&vm), vec!["p"]);
        } else {
            assert!(visible, "{point:?}: still complete");
            assert_eq!(handles(&vm), vec!["c", "p"], "{point:?}");
            // Unmounted but not moved away: the restart re-mounts it.
            let expect: Vec<String> = if point == FailAt::RenameAway {
                vec!["c".into()]
            } else {
                vec![]
            };
            assert_eq!(vm.open_report().remounted, expect, "{point:?}");
            vm.destroy("c").unwrap();
        }
        assert!(vm.leftovers().unwrap().is_empty(), "{point:?}");
    }
}

#[test]
fn open_remounts_overlay_children_lost_in_a_reboot() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("base", Strategy::Empty, none()).unwrap();
    vm.create("child", cow("base"), none()).unwrap();
    vm.create("grandchild", cow("child"), none()).unwrap();
    let before = env.fake.mounts();
    drop(vm);
    env.fake.forget_mounts();
    let vm = env.open();
    assert_eq!(vm.open_report().remounted, vec!["child", "grandchild"]);
    let lowers = |m: &BTreeMap<PathBuf, crate::os::OverlayMount>| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.lower.clone()))
            .collect::<Vec<_>>()
    };
    // Same targets, same stacks (the originals were mounted under their
    // staging names, like the kernel's mount table would show them).
    assert_eq!(lowers(&env.fake.mounts()), lowers(&before));
    assert_eq!(
        env.fake.mounts()[&env.vol("child").join("data")].upper,
        env.vol("child").join("upper")
    );
    drop(vm);
    // A plain process restart keeps the mounts: nothing to do.
    let vm = env.open();
    assert!(vm.open_report().remounted.is_empty());
}

#[test]
fn open_reports_a_child_whose_ancestors_are_gone_and_keeps_going() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("base", Strategy::Empty, none()).unwrap();
    vm.create("child", cow("base"), none()).unwrap();
    drop(vm);
    env.fake.forget_mounts();
    fs::remove_dir_all(env.vol("base")).unwrap();
    let vm = env.open();
    let failed = &vm.open_report().remount_failed;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, "child");
    assert!(
        failed[0].1.contains("\"base\" is missing"),
        "{}",
        failed[0].1
    );
    assert!(vm
        .stream_out("child", "", std::io::sink(), crate::Compression::None)
        .is_err());
}

#[test]
fn open_leaves_unrecognized_entries_alone() {
    let env = Env::new(DriverKind::Naive);
    fs::create_dir_all(env.vol("no-meta")).unwrap();
    let vm = env.open();
    assert_eq!(vm.open_report().unrecognized, vec![env.vol("no-meta")]);
    assert!(env.vol("no-meta").is_dir());
    assert_eq!(vm.leftovers().unwrap(), vec![env.vol("no-meta")]);
    assert!(vm.list().unwrap().is_empty());
}

#[test]
fn a_chain_too_deep_for_one_overlay_mount_falls_back_to_a_copy() {
    let env = Env::new(DriverKind::Overlay);
    let vm = env.open();
    vm.create("l0", Strategy::Empty, none()).unwrap();
    let mut fallback = None;
    for i in 1..400 {
        let v = vm
            .create(&format!("l{i}"), cow(&format!("l{}", i - 1)), none())
            .unwrap();
        if v.driver == DriverKind::Naive {
            fallback = Some(i);
            break;
        }
    }
    let i = fallback.expect("a long chain must hit the mount option size limit");
    assert!(i > 20, "fell back too early at depth {i}");
    // The copy is a new base: its child stacks on it alone.
    let next = vm.create("after", cow(&format!("l{i}")), none()).unwrap();
    assert_eq!(next.driver, DriverKind::Overlay);
    let m = &env.fake.mounts()[&next.path];
    assert_eq!(m.lower, vec![env.vol(&format!("l{i}")).join("data")]);
}

#[test]
fn set_property_rewrites_the_metadata_through_a_temp_file() {
    let env = Env::new(DriverKind::Naive);
    let vm = env.open();
    let mut props = BTreeMap::new();
    props.insert("a".to_string(), "1".to_string());
    vm.create("v", Strategy::Empty, props).unwrap();
    env.fake.clear_calls();
    vm.set_property("v", "b", "2").unwrap();
    let calls = env.fake.calls();
    assert_eq!(calls.len(), 2);
    assert!(matches!(&calls[0], Call::WriteFile(p) if p.ends_with("meta.json.tmp")));
    assert!(matches!(&calls[1], Call::Rename(_, to) if to.ends_with("meta.json")));
    let got = vm.get("v").unwrap().unwrap().properties;
    assert_eq!(got.get("a").map(String::as_str), Some("1"));
    assert_eq!(got.get("b").map(String::as_str), Some("2"));
    assert!(matches!(
        vm.set_property("missing", "k", "v"),
        Err(VolumeError::NotFound { .. })
    ));
}
