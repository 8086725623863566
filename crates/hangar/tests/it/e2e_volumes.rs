//! Volumes end to end with real processes: made through web on a worker
//! process, reported, destroyed; and what a restart does to them.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, Cluster, ADMIN};
use hangar_api::{CreateVolume, Volume};
use hangar_client::Client;
use nix::sys::signal::Signal;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn admin(c: &Cluster) -> Client {
    Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap()
}

fn make(c: &Cluster, worker: &str, parent: Option<&str>) -> Volume {
    let req = CreateVolume {
        worker: worker.into(),
        strategy: if parent.is_some() {
            hangar_api::Strategy::Cow
        } else {
            hangar_api::Strategy::Empty
        },
        parent: parent.map(str::to_string),
        import_path: None,
        owner_kind: hangar_api::OwnerKind::TaskCache,
        owner_id: Some("e2e/step/cache".into()),
    };
    block(admin(c).create_volume(&req)).unwrap()
}

fn volumes(c: &Cluster) -> Vec<Volume> {
    let out = c.cli(&["volumes", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_volumes(c: &Cluster, what: &str, cond: impl Fn(&[Volume]) -> bool) -> Vec<Volume> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v = volumes(c);
        if cond(&v) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn dirs_on_disk(c: &Cluster, worker: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(c.work_dir(worker).join("volumes"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn volumes_made_through_web_live_on_the_worker_and_leave_both_sides_when_destroyed() {
    let c = Cluster::start();
    let _w = c.worker("worker-v");
    c.wait_until("worker-v runs", |ws| has(ws, "worker-v", "running"));
    let parent = make(&c, "worker-v", None);
    let child = make(&c, "worker-v", Some(&parent.handle));
    let mut both = vec![parent.handle.clone(), child.handle.clone()];
    both.sort();
    assert_eq!(dirs_on_disk(&c, "worker-v"), both);
    let listed = volumes(&c);
    assert_eq!(listed.len(), 2);
    assert!(listed
        .iter()
        .all(|v| v.state.to_string() == "created" && v.missing_since.is_none()));
    let text = c.cli(&["volumes"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("task-cache"));

    // Heartbeats carry the worker's real count.
    c.wait_until("the worker counts 2 volumes", |ws| {
        ws.iter().any(|w| w.volumes == 2)
    });

    block(admin(&c).destroy_volume(&child.handle)).unwrap();
    block(admin(&c).destroy_volume(&parent.handle)).unwrap();
    wait_volumes(&c, "both rows are gone", |v| v.is_empty());
    assert!(dirs_on_disk(&c, "worker-v").is_empty());
}

#[test]
fn a_volume_deleted_behind_webs_back_goes_missing_and_a_stray_one_is_removed() {
    let c = Cluster::start();
    let _w = c.worker("worker-m");
    c.wait_until("worker-m runs", |ws| has(ws, "worker-m", "running"));
    let v = make(&c, "worker-m", None);
    std::fs::remove_dir_all(c.work_dir("worker-m").join("volumes").join(&v.handle)).unwrap();
    wait_volumes(&c, "the volume is missing", |vs| {
        vs.iter().any(|x| x.missing_since.is_some())
    });

    // A volume web never heard of, made on the worker's disk behind its back
    // (no one but web can call the worker's API: it holds that process's
    // own token).
    let work_dir = c.work_dir("worker-m");
    let stray =
        hangar_volumes::VolumeManager::open(&work_dir, hangar_volumes::best_driver(&work_dir))
            .unwrap();
    stray
        .create("stray", hangar_volumes::Strategy::Empty, Default::default())
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while dirs_on_disk(&c, "worker-m").contains(&"stray".to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stray volume was never destroyed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_restart_keeps_volumes_with_the_work_dir_and_drops_their_rows_with_it() {
    let c = Cluster::start();
    let w = c.worker("worker-r");
    c.wait_until("worker-r runs", |ws| has(ws, "worker-r", "running"));
    let a = make(&c, "worker-r", None);
    make(&c, "worker-r", Some(&a.handle));

    // SIGKILL, work dir kept: the volumes are still there and still known.
    w.signal(Signal::SIGKILL);
    drop(w);
    let w = c.worker("worker-r");
    c.wait_until("worker-r restarted with its state", |ws| {
        ws.iter().any(|x| {
            x.name == "worker-r"
                && x.last_event
                    .as_ref()
                    .is_some_and(|e| e.kind.to_string() == "restarted-state-kept")
        })
    });
    std::thread::sleep(Duration::from_millis(600)); // a few report intervals
    let kept = volumes(&c);
    assert_eq!(kept.len(), 2);
    assert!(kept.iter().all(|v| v.missing_since.is_none()), "{kept:?}");

    // SIGKILL, work dir wiped, same name: the rows are gone by the time the
    // registration is answered.
    w.signal(Signal::SIGKILL);
    drop(w);
    std::fs::remove_dir_all(c.work_dir("worker-r")).unwrap();
    let _w = c.worker("worker-r");
    let ws = c.wait_until("worker-r registered with a new identity", |ws| {
        ws.iter().any(|x| {
            x.name == "worker-r"
                && x.last_event
                    .as_ref()
                    .is_some_and(|e| e.kind.to_string() == "restarted-state-lost")
        })
    });
    assert!(volumes(&c).is_empty());
    let cause = &ws[0].last_event.as_ref().unwrap().cause;
    assert!(cause.contains("invalidated 2 volume(s)"), "{cause}");
}
