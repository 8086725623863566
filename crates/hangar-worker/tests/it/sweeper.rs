//! The worker's sweeper on real volume and container stores: what web lists
//! is destroyed children first, several at a time, idempotently; a volume a
//! container mounts waits for the container; container leftovers go.

use std::collections::BTreeMap;
use std::sync::Arc;

use hangar_api::containers::{ContainerSpec, Mount, Runtime};
use hangar_volumes::{DriverKind, Strategy, VolumeManager};
use hangar_worker::containers::ContainerManager;
use hangar_worker::sweeper::{sweep, SweepOptions, SweepOutcome};

struct Host {
    _dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    containers: Arc<ContainerManager>,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let containers = Arc::new(
            ContainerManager::open(&dir.path().join("containers"), volumes.clone()).unwrap(),
        );
        Host {
            _dir: dir,
            volumes,
            containers,
        }
    }

    fn volume(&self, handle: &str, parent: Option<&str>) {
        let strategy = match parent {
            Some(p) => Strategy::CopyOnWrite { parent: p.into() },
            None => Strategy::Empty,
        };
        self.volumes
            .create(handle, strategy, BTreeMap::new())
            .unwrap();
    }

    fn on_disk(&self) -> Vec<String> {
        self.volumes
            .list()
            .unwrap()
            .into_iter()
            .map(|v| v.handle)
            .collect()
    }

    fn container(&self, handle: &str, script: &str, mounts: &[&str]) {
        self.containers
            .create(ContainerSpec {
                handle: handle.into(),
                runtime: Runtime::Process,
                rootfs_volume: None,
                path: "/bin/sh".into(),
                args: vec!["-c".into(), script.into()],
                env: BTreeMap::new(),
                dir: None,
                mounts: mounts
                    .iter()
                    .map(|v| Mount {
                        volume: v.to_string(),
                        path: format!("m-{v}"),
                        read_only: false,
                    })
                    .collect(),
                memory_limit_bytes: None,
                cpu_shares: None,
                user: None,
                privileged: false,
            })
            .unwrap();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for h in self.containers.handles().unwrap_or_default() {
            let _ = self.containers.destroy(&h);
        }
    }
}

/// Four at a time, containers of any age.
const NOW: SweepOptions = SweepOptions {
    concurrency: 4,
    container_min_age: std::time::Duration::ZERO,
};

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn what_web_lists_is_destroyed_children_first_and_idempotently() {
    let host = Host::new();
    host.volume("base", None);
    host.volume("a", Some("base"));
    host.volume("a1", Some("a"));
    host.volume("b", Some("base"));
    host.volume("keep", None);
    for i in 0..12 {
        host.volume(&format!("leaf{i:02}"), Some("keep"));
    }
    // Parents listed before their children, and a handle already gone.
    let mut listed = strings(&["base", "a", "ghost", "a1", "b"]);
    listed.extend((0..12).map(|i| format!("leaf{i:02}")));
    let out = sweep(&host.volumes, Some(&host.containers), &listed, &[], &NOW).await;
    let mut expected = listed.clone();
    expected.sort();
    assert_eq!(
        out,
        SweepOutcome {
            destroyed_volumes: expected.clone(),
            ..Default::default()
        }
    );
    assert_eq!(host.on_disk(), ["keep"]);
    // The same answer again (a report crossed the sweep): nothing fails.
    let again = sweep(&host.volumes, Some(&host.containers), &listed, &[], &NOW).await;
    assert_eq!(again.destroyed_volumes, expected);
    assert!(again.failed.is_empty(), "{:?}", again.failed);
}

#[tokio::test]
async fn a_volume_a_container_mounts_waits_for_the_container() {
    let host = Host::new();
    host.volume("base", None);
    host.volume("input", Some("base"));
    host.container("c1", "sleep 60", &["input"]);
    let listed = strings(&["base", "input"]);
    let out = sweep(&host.volumes, Some(&host.containers), &listed, &[], &NOW).await;
    assert_eq!(out.mounted, ["input"]);
    assert!(out.destroyed_volumes.is_empty());
    // Its parent cannot go before it: asked again next report.
    assert_eq!(
        out.failed
            .iter()
            .map(|(h, _)| h.as_str())
            .collect::<Vec<_>>(),
        ["base"]
    );
    assert_eq!(host.on_disk(), ["base", "input"]);
    // Web lists the container too: it goes first, then the volumes.
    let out = sweep(
        &host.volumes,
        Some(&host.containers),
        &listed,
        &strings(&["c1", "never-was"]),
        &NOW,
    )
    .await;
    assert_eq!(out.destroyed_containers, ["c1", "never-was"]);
    assert_eq!(out.destroyed_volumes, ["base", "input"]);
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    assert!(host.on_disk().is_empty());
    assert!(host.containers.handles().unwrap().is_empty());
}

#[tokio::test]
async fn containers_are_listed_for_the_report_and_their_leftovers_swept() {
    let host = Host::new();
    host.volume("v", None);
    host.container("done", "true", &[]);
    host.container("busy", "sleep 60", &["v"]);
    let root = host.containers.root().to_path_buf();
    for leftover in [
        ".creating-x-0123456789ab",
        ".destroying-y-0123456789ab",
        "no-spec",
    ] {
        std::fs::create_dir_all(root.join(leftover).join("work")).unwrap();
    }
    assert_eq!(host.containers.handles().unwrap(), ["busy", "done"]);
    let out = sweep(&host.volumes, Some(&host.containers), &[], &[], &NOW).await;
    let mut swept: Vec<String> = out
        .leftovers
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    swept.sort();
    assert_eq!(
        swept,
        [
            ".creating-x-0123456789ab",
            ".destroying-y-0123456789ab",
            "no-spec"
        ]
    );
    // Real containers are untouched, the runc state dir too.
    assert_eq!(host.containers.handles().unwrap(), ["busy", "done"]);
    assert!(host.containers.get("busy").unwrap().is_some());
    assert_eq!(
        host.containers
            .mounted_volumes()
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        ["v"]
    );
}

#[tokio::test]
async fn a_container_younger_than_the_minimum_age_is_left_for_later() {
    // A health probe the worker runs for itself has no row on web: web
    // lists it as unknown, but it is only seconds old.
    let host = Host::new();
    host.container("probe", "sleep 60", &[]);
    let patient = SweepOptions {
        concurrency: 4,
        container_min_age: std::time::Duration::from_secs(60),
    };
    let out = sweep(
        &host.volumes,
        Some(&host.containers),
        &[],
        &strings(&["probe", "gone-already"]),
        &patient,
    )
    .await;
    assert_eq!(out.young, ["probe"]);
    assert_eq!(out.destroyed_containers, ["gone-already"]);
    assert_eq!(host.containers.handles().unwrap(), ["probe"]);
    let out = sweep(
        &host.volumes,
        Some(&host.containers),
        &[],
        &strings(&["probe"]),
        &NOW,
    )
    .await;
    assert_eq!(out.destroyed_containers, ["probe"]);
    assert!(host.containers.handles().unwrap().is_empty());
}
