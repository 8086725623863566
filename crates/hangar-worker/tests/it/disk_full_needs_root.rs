//! A worker whose work dir fills up, on a small tmpfs mounted as the work
//! dir (so the machine's own disk is never filled): a container that fills
//! it ends, recorded as ended on a full disk thanks to the reserve; the
//! reserve comes back once space is freed; and the API answers a write
//! that does not fit with 507 `insufficient_storage`, changing nothing.
//!
//! Needs root to mount the tmpfs, as the runc tests need root: without it
//! the tests fail and say so; they never skip.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hangar_api::containers::{ContainerSpec, Mount, Runtime};
use hangar_api::worker_api::CreateVolume;
use hangar_client::{ClientError, WorkerApi};
use hangar_core::build::full_disk_failure;
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::{ContainerManager, STATE_EXITED};
use hangar_worker::disk::RESERVE_FILE;
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

/// A tmpfs of `size` on a temp dir, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs on {}: {} — the full-disk tests need root (as the runc tests do)",
            dir.path().display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn filler(handle: &str, volume: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        runtime: Runtime::Process,
        rootfs_volume: None,
        path: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "head -c 64000000 /dev/zero > out/big; echo \"head ended with $?\"".into(),
        ],
        env: Default::default(),
        dir: None,
        mounts: vec![Mount {
            volume: volume.into(),
            path: "out".into(),
            read_only: false,
        }],
        memory_limit_bytes: None,
        cpu_shares: None,
        user: None,
        privileged: false,
    }
}

#[test]
fn a_container_that_fills_the_disk_ends_as_disk_full_and_the_reserve_comes_back() {
    let fs = Tmpfs::mount("5m"); // room for the reserve three times over, and the network state
    let volumes = Arc::new(VolumeManager::open(fs.path(), DriverKind::Naive).unwrap());
    let root = fs.path().join("containers");
    let containers = ContainerManager::open(&root, volumes.clone()).unwrap();
    assert!(root.join(RESERVE_FILE).exists());
    assert!(!containers.disk().is_full());

    volumes
        .create("out", Strategy::Empty, BTreeMap::new())
        .unwrap();
    containers.create(filler("filler", "out")).unwrap();
    let c = containers.wait("filler", Duration::from_secs(60)).unwrap();
    assert_eq!(c.state, STATE_EXITED, "the step ends on a full disk");
    let exit = c.exit.unwrap();
    assert!(exit.disk_full, "{exit:?}");
    assert_ne!(exit.code, Some(0), "{exit:?}");
    let failure = full_disk_failure("worker-x", exit.code, exit.disk_full).unwrap();
    assert!(failure
        .describe()
        .starts_with("disk full on worker worker-x"));
    // Recorded on disk (the reserve made room), so a restarted worker
    // process reads the same end.
    assert!(
        !root.join(RESERVE_FILE).exists(),
        "the reserve was given up"
    );
    let again = ContainerManager::open(&root, volumes.clone()).unwrap();
    let seen = again.get("filler").unwrap().unwrap();
    assert_eq!(seen.exit.as_ref().map(|e| e.disk_full), Some(true));
    assert_eq!(seen.exit.unwrap().finished_at, exit.finished_at);
    // Still full: the reserve cannot come back yet.
    assert!(containers.disk().is_full());
    assert!(!containers.disk().restore());

    // Space freed: the reserve is written back and the disk is not full.
    containers.destroy("filler").unwrap();
    volumes.destroy("out").unwrap();
    assert!(containers.disk().restore());
    assert!(!containers.disk().is_full());
    assert!(root.join(RESERVE_FILE).exists());
    drop(again);
}

fn tar_with(name: &str, size: usize) -> Vec<u8> {
    let data = vec![b'x'; size];
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(size as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    b.append_data(&mut h, name, &data[..]).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test]
async fn a_stream_in_that_does_not_fit_is_507_insufficient_storage_and_changes_nothing() {
    let fs = Tmpfs::mount("2m");
    let volumes = Arc::new(VolumeManager::open(fs.path(), DriverKind::Naive).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(serve(
        listener,
        VolumeApi::new(volumes.clone(), KEY, Limits::default()),
        stop,
    ));
    let api = WorkerApi::new(&url, KEY, Duration::from_secs(30)).unwrap();
    api.create_volume(&CreateVolume {
        handle: "v1".into(),
        strategy: hangar_api::Strategy::Empty,
        parent: None,
        import_path: None,
        properties: Default::default(),
    })
    .await
    .unwrap();
    let path = volumes.get("v1").unwrap().unwrap().path;
    let before: Vec<_> = std::fs::read_dir(&path).unwrap().flatten().collect();
    let err = api
        .stream_in(
            "v1",
            "",
            false,
            reqwest::Body::from(tar_with("big", 4 << 20)),
        )
        .await
        .unwrap_err();
    match err {
        ClientError::Api {
            status,
            code,
            message,
        } => {
            assert_eq!(
                (status.as_u16(), code.as_str()),
                (507, "insufficient_storage"),
                "{message}"
            );
            assert!(message.contains("disk full"), "{message}");
        }
        other => panic!("expected the worker's refusal, got {other}"),
    }
    let after: Vec<_> = std::fs::read_dir(&path).unwrap().flatten().collect();
    assert_eq!(
        before.len(),
        after.len(),
        "the refused archive left nothing"
    );
}

#[tokio::test]
async fn the_condition_says_disk_full_until_space_is_freed() {
    use hangar_core::pressure::Thresholds;
    use hangar_worker::health::{check_once, Health, HealthConfig};
    let fs = Tmpfs::mount("5m"); // the reserve three times over, and the network state
    let volumes = Arc::new(VolumeManager::open(fs.path(), DriverKind::Naive).unwrap());
    let containers =
        Arc::new(ContainerManager::open(&fs.path().join("containers"), volumes).unwrap());
    // Thresholds no tmpfs reaches by percentage alone: only "full" counts.
    let never = Thresholds {
        soft: 2.0,
        hard: 2.0,
        hysteresis: 0.0,
    };
    let config = HealthConfig {
        memory_limit: Some(u64::MAX / 2),
        memory_thresholds: never,
        disk_thresholds: never,
        check_interval: Duration::from_secs(1),
        web_timeout: Duration::from_secs(3600),
        default_container_memory: None,
    };
    let health = Health::default();
    check_once(&health, &config, fs.path(), &containers).await;
    assert_eq!(
        health.condition().pressure.to_string(),
        "none",
        "{:?}",
        health.condition()
    );

    // Fill what the reserve leaves.
    let filler = fs.path().join("filler");
    let e = std::fs::write(&filler, vec![0u8; 8 << 20]).unwrap_err();
    assert!(hangar_worker::disk::is_storage_full(&e), "{e}");
    check_once(&health, &config, fs.path(), &containers).await;
    let c = health.condition();
    assert_eq!(c.pressure.to_string(), "hard", "{c:?}");
    assert!(
        c.pressure_reason
            .as_deref()
            .unwrap_or("")
            .starts_with("disk full"),
        "{c:?}"
    );
    assert!(!c.accepting_work());

    std::fs::remove_file(&filler).unwrap();
    check_once(&health, &config, fs.path(), &containers).await;
    let c = health.condition();
    assert_eq!((c.pressure.as_str(), c.healthy), ("none", true), "{c:?}");
}
