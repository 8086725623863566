//! The manager's logic on a [`FakeRuntime`]: what it asks of the host, in
//! what order, and what it undoes; no root needed. The container dirs are
//! real, in a temp dir.

// Tests block freely: each runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_api::containers::{ContainerSpec, Mount, Runtime};
use hangar_core::users::Ids;
use hangar_volumes::{DriverKind, Strategy, VolumeManager};

use super::cgroup::{CgroupVersion, Cgroups};
use super::fake_runtime::{sandboxing, Call, Fail, FakeRuntime};
use super::runtime::Features;
use super::store::{self, Meta};
use super::{
    ContainerError, ContainerManager, ContainerOptions, DEFAULT_TASK_IDS, PRIVILEGED_REFUSED,
    STATE_EXITED,
};

const WAIT: Duration = Duration::from_secs(30);
const MIB: u64 = 1024 * 1024;
const ROOT: Ids = Ids { uid: 0, gid: 0 };

struct Worker {
    dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    fake: FakeRuntime,
    mgr: ContainerManager,
}

fn options() -> ContainerOptions {
    ContainerOptions {
        disk_reserve_bytes: 0,
        ..ContainerOptions::default()
    }
}

fn worker(features: Features, options: ContainerOptions) -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let fake = FakeRuntime::new(features);
    let mgr = open(dir.path(), &volumes, &fake, options);
    Worker {
        dir,
        volumes,
        fake,
        mgr,
    }
}

fn open(
    dir: &Path,
    volumes: &Arc<VolumeManager>,
    fake: &FakeRuntime,
    options: ContainerOptions,
) -> ContainerManager {
    ContainerManager::open_with_runtime(
        &dir.join("containers"),
        volumes.clone(),
        options,
        Box::new(fake.clone()),
    )
    .unwrap()
}

impl Worker {
    fn volume(&self, handle: &str) -> PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, BTreeMap::new())
            .unwrap()
            .path
    }

    /// Waits for `handle` to be recorded as exited, and for whoever
    /// recorded it to be done releasing it.
    fn wait_exited(&self, handle: &str) {
        let c = self.mgr.wait(handle, WAIT).unwrap();
        assert_eq!(c.state, STATE_EXITED, "{c:?}");
        drop(self.mgr.inner.lock());
    }

    /// What is in the containers dir besides runc's state and the disk
    /// reserve.
    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.mgr.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != store::RUNC_STATE_DIR && n != crate::disk::RESERVE_FILE)
            .collect();
        names.sort();
        names
    }
}

/// A process container: with a worker that sandboxes them, one through
/// runc over the host's system dirs.
fn spec(handle: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        runtime: Runtime::Process,
        rootfs_volume: None,
        path: "/bin/true".into(),
        args: vec![],
        env: BTreeMap::new(),
        dir: None,
        mounts: vec![],
        memory_limit_bytes: None,
        cpu_shares: None,
        user: None,
        privileged: false,
    }
}

fn mount(volume: &str, path: &str) -> Mount {
    Mount {
        volume: volume.into(),
        path: path.into(),
        read_only: false,
    }
}

fn cgroup(handle: &str) -> Call {
    Call::MakeCgroup {
        container: handle.into(),
        memory_limit: None,
        cpu_shares: None,
    }
}

fn start(handle: &str, runc: bool) -> Call {
    Call::Start {
        container: handle.into(),
        runc,
    }
}

#[test]
fn a_privileged_spec_on_a_worker_that_does_not_allow_it_makes_nothing() {
    let w = worker(sandboxing(), options());
    w.fake.take_calls();
    let privileged = ContainerSpec {
        privileged: true,
        ..spec("root-please")
    };
    match w.mgr.create(privileged) {
        Err(ContainerError::Unsupported { reason }) => assert_eq!(reason, PRIVILEGED_REFUSED),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.fake.calls(), vec![]);
    assert!(w.entries().is_empty(), "{:?}", w.entries());
}

#[test]
fn a_runc_spec_on_a_worker_without_runc_makes_nothing() {
    let w = worker(
        Features {
            runc: None,
            ..sandboxing()
        },
        options(),
    );
    w.volume("image");
    w.fake.take_calls();
    let runc = ContainerSpec {
        runtime: Runtime::Runc,
        rootfs_volume: Some("image".into()),
        ..spec("c")
    };
    match w.mgr.create(runc) {
        Err(ContainerError::Unsupported { reason }) => assert!(reason.contains("runc"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.fake.calls(), vec![]);
    assert!(w.entries().is_empty(), "{:?}", w.entries());
}

#[test]
fn destroying_a_container_that_is_not_there_makes_no_call() {
    let w = worker(sandboxing(), options());
    w.fake.take_calls();
    w.mgr.destroy("nobody").unwrap();
    w.mgr.destroy("../escape").unwrap();
    assert_eq!(w.fake.calls(), vec![]);
}

#[test]
fn a_sandboxed_spec_refused_for_its_user_makes_nothing() {
    let w = worker(sandboxing(), options());
    w.fake.take_calls();
    let past_the_range = ContainerSpec {
        user: Some("70000".into()),
        ..spec("c")
    };
    let err = w.mgr.create(past_the_range).unwrap_err();
    assert!(matches!(err, ContainerError::InvalidSpec { .. }), "{err:?}");
    assert_eq!(w.fake.calls(), vec![]);
    assert!(w.entries().is_empty(), "{:?}", w.entries());
}

#[test]
fn a_container_that_cannot_be_made_undoes_what_it_began_in_reverse_and_its_staging_dir() {
    let network = || Call::AttachNetwork("c".into());
    let root = || Call::MakeHostRoot("c".into());
    let cases = [
        (
            Fail::MakeCgroup,
            vec![cgroup("c"), Call::RemoveCgroup("c".into())],
        ),
        (
            Fail::AttachNetwork,
            vec![
                cgroup("c"),
                network(),
                Call::ReleaseNetwork("c".into()),
                Call::RemoveCgroup("c".into()),
            ],
        ),
        (
            Fail::MakeHostRoot,
            vec![
                cgroup("c"),
                network(),
                root(),
                Call::ReleaseRoot("c".into()),
                Call::ReleaseNetwork("c".into()),
                Call::RemoveCgroup("c".into()),
            ],
        ),
    ];
    for (fail, calls) in cases {
        let w = worker(sandboxing(), options());
        w.fake.take_calls();
        w.fake.fail(fail);
        let err = w.mgr.create(spec("c")).unwrap_err();
        assert!(
            matches!(err, ContainerError::Unsupported { .. }),
            "{fail:?}: {err:?}"
        );
        assert_eq!(w.fake.calls(), calls, "{fail:?}");
        assert!(w.entries().is_empty(), "{fail:?}: {:?}", w.entries());
        assert!(w.mgr.get("c").unwrap().is_none());
    }
}

#[test]
fn a_container_that_fails_to_start_is_killed_and_everything_it_was_given_freed() {
    let w = worker(sandboxing(), options());
    w.fake.take_calls();
    w.fake.fail(Fail::Start);
    let err = w.mgr.create(spec("c")).unwrap_err();
    assert!(matches!(err, ContainerError::Io { .. }), "{err:?}");
    assert_eq!(
        w.fake.calls(),
        vec![
            cgroup("c"),
            Call::AttachNetwork("c".into()),
            Call::MakeHostRoot("c".into()),
            start("c", true),
            Call::KillRunc("c".into()),
            Call::KillCgroup("c".into()),
            Call::DeleteRunc("c".into()),
            Call::RemoveCgroup("c".into()),
            Call::ReleaseRoot("c".into()),
            Call::ReleaseNetwork("c".into()),
        ]
    );
    assert!(w.entries().is_empty(), "{:?}", w.entries());
}

#[test]
fn an_image_container_gets_its_image_and_volumes_in_its_range_and_gives_them_back_at_exit() {
    let w = worker(sandboxing(), options());
    let image = w.volume("image");
    let input = w.volume("input");
    w.fake.take_calls();
    let runc = ContainerSpec {
        runtime: Runtime::Runc,
        rootfs_volume: Some("image".into()),
        mounts: vec![mount("input", "input")],
        ..spec("c")
    };
    w.mgr.create(runc).unwrap();
    // Root inside is the first id of the range on the host.
    let owner = DEFAULT_TASK_IDS;
    assert_eq!(
        w.fake.take_calls(),
        vec![
            cgroup("c"),
            Call::AttachNetwork("c".into()),
            Call::ShiftImage(image),
            Call::MountImageRoot("c".into()),
            Call::ShiftTree(input.clone()),
            Call::OwnDir(input.clone(), owner),
            start("c", true),
        ]
    );
    let config = w
        .mgr
        .root()
        .join("c")
        .join(store::BUNDLE_DIR)
        .join("config.json");
    let config = std::fs::read_to_string(config).unwrap();
    assert!(config.contains("/fake/roots/c"), "{config}");
    assert!(config.contains("/fake/netns/c"), "{config}");

    w.fake.exit("c", 0);
    w.wait_exited("c");
    assert_eq!(
        w.fake.take_calls(),
        vec![
            Call::OwnDir(input, ROOT),
            Call::DeleteRunc("c".into()),
            Call::ReleaseNetwork("c".into()),
            Call::RemoveCgroup("c".into()),
        ]
    );
    let exit = w.mgr.get("c").unwrap().unwrap().exit.unwrap();
    assert_eq!((exit.code, exit.lost), (Some(0), false));
}

#[test]
fn process_containers_outside_the_sandbox_share_a_user_only_with_one_mounting_the_same_volume() {
    let w = worker(
        sandboxing(),
        ContainerOptions {
            sandbox_process: false,
            ..options()
        },
    );
    assert!(!w.mgr.sandboxes_processes());
    let cache = w.volume("cache");
    w.fake.take_calls();
    let with_cache = |handle: &str| ContainerSpec {
        mounts: vec![mount("cache", "cache")],
        ..spec(handle)
    };
    w.mgr.create(with_cache("a")).unwrap();
    w.mgr.create(with_cache("b")).unwrap();
    w.mgr.create(spec("c")).unwrap();
    let owners = |calls: &[Call], dir: &Path| -> Vec<Ids> {
        calls
            .iter()
            .filter_map(|call| match call {
                Call::OwnDir(d, ids) if d == dir => Some(*ids),
                _ => None,
            })
            .collect()
    };
    let work_owner = |calls: &[Call], handle: &str| -> Vec<Ids> {
        let work = w.mgr.root().join(handle).join(store::WORK_DIR);
        calls
            .iter()
            .filter_map(|call| match call {
                // Made in the staging dir, renamed into place after.
                Call::OwnDir(d, ids) if d.ends_with(store::WORK_DIR) && d != &work => {
                    let staging = d.parent()?.file_name()?.to_str()?;
                    staging
                        .starts_with(&format!("{}{handle}-", store::CREATING_PREFIX))
                        .then_some(*ids)
                }
                _ => None,
            })
            .collect()
    };
    let calls = w.fake.take_calls();
    let first = DEFAULT_TASK_IDS;
    let second = Ids {
        uid: first.uid + 1,
        gid: first.gid + 1,
    };
    // b mounts what a runs with, so runs as a's user; c gets its own.
    assert_eq!(work_owner(&calls, "a"), vec![first]);
    assert_eq!(work_owner(&calls, "b"), vec![first]);
    assert_eq!(work_owner(&calls, "c"), vec![second]);
    assert_eq!(owners(&calls, &cache), vec![first, first]);
    assert!(calls.contains(&start("a", false)), "{calls:?}");

    // The cache stays the user's while b still mounts it.
    w.fake.exit("a", 0);
    w.wait_exited("a");
    assert_eq!(owners(&w.fake.take_calls(), &cache), vec![]);
    w.fake.exit("b", 0);
    w.wait_exited("b");
    assert_eq!(owners(&w.fake.take_calls(), &cache), vec![ROOT]);

    // A running one is killed through its wrapper's process group.
    assert!(w.fake.running("c"));
    w.mgr.destroy("c").unwrap();
    assert!(!w.fake.running("c"));
    assert!(w.fake.calls().contains(&Call::KillGroup("c".into())));
}

#[test]
fn a_container_without_a_limit_gets_the_default_capped_at_what_the_budget_has_left() {
    let w = worker(sandboxing(), options());
    w.mgr.set_memory_policy(Some(100 * MIB), Some(64 * MIB));
    w.fake.take_calls();
    w.mgr.create_within(spec("a")).unwrap();
    w.mgr.create_within(spec("b")).unwrap();
    let limits: Vec<(String, Option<u64>)> = w
        .fake
        .take_calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::MakeCgroup {
                container,
                memory_limit,
                ..
            } => Some((container, memory_limit)),
            _ => None,
        })
        .collect();
    assert_eq!(
        limits,
        vec![("a".into(), Some(64 * MIB)), ("b".into(), Some(36 * MIB))]
    );
    assert_eq!(w.mgr.reserved_memory().unwrap(), 100 * MIB);

    // No room left: refused before anything is made.
    let limited = ContainerSpec {
        memory_limit_bytes: Some(8 * MIB),
        ..spec("c")
    };
    let err = w.mgr.create_within(limited).unwrap_err();
    assert!(matches!(err, ContainerError::NoRoom { .. }), "{err:?}");
    assert_eq!(w.fake.take_calls(), vec![]);

    // Room again once one has exited.
    w.fake.exit("a", 0);
    w.wait_exited("a");
    w.fake.take_calls();
    let limited = ContainerSpec {
        memory_limit_bytes: Some(8 * MIB),
        ..spec("c")
    };
    w.mgr.create_within(limited).unwrap();
    assert!(w.fake.calls().contains(&Call::MakeCgroup {
        container: "c".into(),
        memory_limit: Some(8 * MIB),
        cpu_shares: None,
    }));
    for handle in ["b", "c"] {
        w.mgr.destroy(handle).unwrap();
    }
}

/// Puts on disk what a worker that died mid-operation left as `name`.
fn plant(root: &Path, name: &str, cgroup: &str, spec: Option<&ContainerSpec>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let meta = Meta {
        started_at: store::now_millis(),
        cgroup: Some(Cgroups::reference(CgroupVersion::V2, cgroup)),
        runc: true,
        user: None,
    };
    store::write_atomic(
        &dir.join(store::META_FILE),
        &serde_json::to_vec(&meta).unwrap(),
    )
    .unwrap();
    if let Some(spec) = spec {
        store::write_atomic(
            &dir.join(store::SPEC_FILE),
            &serde_json::to_vec(spec).unwrap(),
        )
        .unwrap();
    }
    dir
}

#[test]
fn opening_removes_half_made_containers_and_their_cgroups() {
    let w = worker(sandboxing(), options());
    let root = w.mgr.root().to_path_buf();
    let creating = plant(&root, ".creating-a-0123456789ab", "a-0123456789ab", None);
    let destroying = plant(&root, ".destroying-b-0123456789ab", "b-0123456789ab", None);
    let no_spec = plant(&root, "c", "c-0123456789ab", None);

    let fake = FakeRuntime::new(sandboxing());
    let reopened = open(w.dir.path(), &w.volumes, &fake, options());
    let mut removed = reopened.open_report().removed.clone();
    removed.sort();
    assert_eq!(removed, vec![creating, destroying, no_spec]);
    let calls = fake.calls();
    for handle in ["a", "b", "c"] {
        let mine: Vec<&Call> = calls
            .iter()
            .filter(|c| matches!(c, Call::KillCgroup(h) | Call::RemoveCgroup(h) if h == handle))
            .collect();
        assert_eq!(
            mine,
            vec![
                &Call::KillCgroup(handle.into()),
                &Call::RemoveCgroup(handle.into())
            ]
        );
    }
    assert_eq!(
        calls[calls.len() - 2..],
        [Call::SweepRoots(vec![]), Call::SweepNetworks(vec![])]
    );
    assert_eq!(calls.len(), 8, "{calls:?}");
    assert!(w.entries().is_empty(), "{:?}", w.entries());
}

#[test]
fn opening_records_a_container_that_ended_unseen_and_one_lost_killing_what_the_lost_one_left() {
    let w = worker(sandboxing(), options());
    let root = w.mgr.root().to_path_buf();
    // Ended while no worker ran: its wrapper wrote the exit file.
    let ended = plant(&root, "ended", "ended-0123456789ab", Some(&spec("ended")));
    std::fs::write(ended.join(store::PID_FILE), "3999999\n").unwrap();
    std::fs::write(ended.join(store::EXIT_FILE), "3\n").unwrap();
    // Gone without one: its wrapper was killed along with the worker.
    let lost = plant(&root, "lost", "lost-0123456789ab", Some(&spec("lost")));
    std::fs::write(lost.join(store::PID_FILE), "3999998\n").unwrap();

    let fake = FakeRuntime::new(sandboxing());
    let reopened = open(w.dir.path(), &w.volumes, &fake, options());
    assert_eq!(reopened.open_report().lost, vec!["lost".to_string()]);
    let calls = fake.calls();
    let of = |handle: &str| -> Vec<Call> {
        calls
            .iter()
            .filter(|c| match c {
                Call::DeleteRunc(h)
                | Call::ReleaseNetwork(h)
                | Call::KillCgroup(h)
                | Call::RemoveCgroup(h) => h == handle,
                _ => false,
            })
            .cloned()
            .collect()
    };
    assert_eq!(
        of("ended"),
        vec![
            Call::DeleteRunc("ended".into()),
            Call::ReleaseNetwork("ended".into()),
            Call::RemoveCgroup("ended".into()),
        ]
    );
    assert_eq!(
        of("lost"),
        vec![
            Call::DeleteRunc("lost".into()),
            Call::ReleaseNetwork("lost".into()),
            Call::KillCgroup("lost".into()),
            Call::RemoveCgroup("lost".into()),
        ]
    );
    // Both kept their roots until destroyed; neither keeps a network.
    assert_eq!(
        calls[calls.len() - 2..],
        [
            Call::SweepRoots(vec!["ended".into(), "lost".into()]),
            Call::SweepNetworks(vec![])
        ]
    );
    let ended = reopened.get("ended").unwrap().unwrap().exit.unwrap();
    assert_eq!((ended.code, ended.lost), (Some(3), false));
    assert!(reopened.get("lost").unwrap().unwrap().exit.unwrap().lost);
}

#[test]
fn a_runc_container_s_network_is_released_once_whether_it_exits_or_is_destroyed_running() {
    let w = worker(sandboxing(), options());
    w.mgr.create(spec("exits")).unwrap();
    w.mgr.create(spec("destroyed")).unwrap();
    w.fake.take_calls();

    w.fake.exit("exits", 0);
    w.wait_exited("exits");
    assert!(w
        .fake
        .take_calls()
        .contains(&Call::ReleaseNetwork("exits".into())));
    w.mgr.destroy("exits").unwrap();
    let destroy = w.fake.take_calls();
    assert!(
        !destroy.contains(&Call::ReleaseNetwork("exits".into())),
        "{destroy:?}"
    );
    assert!(destroy.contains(&Call::ReleaseRoot("exits".into())));

    w.mgr.destroy("destroyed").unwrap();
    let destroy = w.fake.take_calls();
    let released = destroy
        .iter()
        .filter(|c| **c == Call::ReleaseNetwork("destroyed".into()))
        .count();
    assert_eq!(released, 1, "{destroy:?}");
    // Its killed wrapper's end, noticed after, releases nothing more.
    drop(w.mgr.inner.lock());
    assert_eq!(w.fake.calls(), vec![]);
}

/// The tree walks of volumes asked of the host, by path (a process
/// container's own work dir aside).
fn walks(calls: &[Call]) -> Vec<PathBuf> {
    calls
        .iter()
        .filter_map(|call| match call {
            Call::ShiftTree(path) | Call::ChownTree(path, _) => Some(path.clone()),
            _ => None,
        })
        .filter(|path| path.ends_with(std::path::Path::new("data")))
        .collect()
}

#[test]
fn a_volume_stamped_as_the_sandboxs_is_not_walked_until_a_writer_it_cannot_vouch_for_mounts_it() {
    use hangar_volumes::Owners;
    let w = worker(
        sandboxing(),
        ContainerOptions {
            allow_privileged: true,
            ..options()
        },
    );
    let base = DEFAULT_TASK_IDS;
    let range = Owners::Range {
        uid: base.uid,
        gid: base.gid,
        len: super::sandbox::ID_RANGE,
    };
    let input = w.volume("input");
    let with = |handle: &str, volume: &str| ContainerSpec {
        mounts: vec![mount(volume, "in")],
        ..spec(handle)
    };
    let run = |spec: ContainerSpec| -> Vec<Call> {
        let handle = spec.handle.clone();
        w.fake.take_calls();
        w.mgr.create(spec).unwrap();
        let calls = w.fake.take_calls();
        w.fake.exit(&handle, 0);
        w.wait_exited(&handle);
        calls
    };

    // Unknown owners: walked, then stamped as the sandbox's range.
    assert_eq!(w.volumes.owners("input").unwrap(), None);
    assert_eq!(walks(&run(with("a", "input"))), vec![input.clone()]);
    assert_eq!(w.volumes.owners("input").unwrap(), Some(range));
    // The next container only gives the top dir to its user.
    let calls = run(with("b", "input"));
    assert_eq!(walks(&calls), Vec::<PathBuf>::new());
    assert!(
        calls.contains(&Call::OwnDir(input.clone(), base)),
        "{calls:?}"
    );

    // A copy-on-write child starts with its parent's stamp.
    let copy = w
        .volumes
        .create(
            "copy",
            Strategy::CopyOnWrite {
                parent: "input".into(),
            },
            BTreeMap::new(),
        )
        .unwrap()
        .path;
    assert_eq!(w.volumes.owners("copy").unwrap(), Some(range));
    assert_eq!(walks(&run(with("c", "copy"))), Vec::<PathBuf>::new());

    // A privileged container writes as the host's root: the stamp goes,
    // and the next container walks the tree again.
    let privileged = ContainerSpec {
        privileged: true,
        ..with("p", "input")
    };
    assert_eq!(walks(&run(privileged)), Vec::<PathBuf>::new());
    assert_eq!(w.volumes.owners("input").unwrap(), None);
    assert_eq!(walks(&run(with("d", "input"))), vec![input.clone()]);
    assert_eq!(w.volumes.owners("input").unwrap(), Some(range));
    // The copy made before keeps its own stamp: the parent's later writes
    // are the parent's.
    assert_eq!(w.volumes.owners("copy").unwrap(), Some(range));
    let _ = copy;

    // A volume another live container mounts is not stamped: that one
    // writes as its own users.
    w.mgr.create(with("e", "input")).unwrap();
    w.mgr.create(with("f", "input")).unwrap();
    assert_eq!(w.volumes.owners("input").unwrap(), None);
}

#[test]
fn a_volume_stamped_as_a_process_tasks_user_is_not_walked_for_that_user_only() {
    use hangar_volumes::Owners;
    let w = worker(
        sandboxing(),
        ContainerOptions {
            sandbox_process: false,
            ..options()
        },
    );
    let first = DEFAULT_TASK_IDS;
    let cache = w.volume("cache");
    let other = w.volume("other");
    // As an upload into an empty volume leaves it (`stream_in_as`).
    let token = w.volumes.owners_token("cache");
    let one = Owners::One {
        uid: first.uid,
        gid: first.gid,
    };
    assert!(w.volumes.set_owners(&token, one).unwrap());
    let stranger = Owners::One { uid: 7, gid: 7 };
    let token = w.volumes.owners_token("other");
    assert!(w.volumes.set_owners(&token, stranger).unwrap());
    w.fake.take_calls();
    w.mgr
        .create(ContainerSpec {
            mounts: vec![mount("cache", "cache"), mount("other", "other")],
            ..spec("a")
        })
        .unwrap();
    let calls = w.fake.take_calls();
    // The cache is the user's already; the other is someone else's.
    assert_eq!(walks(&calls), vec![other.clone()]);
    assert!(
        calls.contains(&Call::OwnDir(cache.clone(), first)),
        "{calls:?}"
    );
    assert_eq!(w.volumes.owners("other").unwrap(), Some(one));
}
