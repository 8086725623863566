//! `import` volumes copy a host directory: refused unless the operator
//! allowed directories, refused outside them (as given, with `..`, or through
//! a link), and nothing is made when refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_api::worker_api::CreateVolume;
use hangar_client::{ClientError, WorkerApi};
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

struct Host {
    _dir: tempfile::TempDir,
    allowed: PathBuf,
    manager: Arc<VolumeManager>,
    api: WorkerApi,
    _stop: tokio_util::sync::DropGuard,
}

/// A worker whose `allowed` dir (made, with an image in it) is importable
/// when `enable`.
async fn start(enable: bool) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("images");
    std::fs::create_dir_all(allowed.join("busybox/bin")).unwrap();
    std::fs::write(allowed.join("busybox/bin/sh"), "#!").unwrap();
    // A link inside the allowed dir that leads out of it.
    std::os::unix::fs::symlink("/etc", allowed.join("etc-link")).unwrap();
    let manager =
        Arc::new(VolumeManager::open(&dir.path().join("work"), DriverKind::Naive).unwrap());
    let mut api = VolumeApi::new(manager.clone(), KEY, Limits::default());
    if enable {
        api = api
            .with_import_dirs(std::slice::from_ref(&allowed))
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve(listener, api, stop.clone()));
    Host {
        _dir: dir,
        allowed,
        manager,
        api: WorkerApi::new(&url, KEY, Duration::from_secs(10)).unwrap(),
        _stop: stop.drop_guard(),
    }
}

fn import(handle: &str, path: &Path) -> CreateVolume {
    CreateVolume {
        handle: handle.into(),
        strategy: hangar_api::Strategy::Import,
        parent: None,
        import_path: Some(path.display().to_string()),
        properties: Default::default(),
    }
}

fn refusal(e: ClientError) -> (StatusCode, String) {
    match e {
        ClientError::Api {
            status, message, ..
        } => (status, message),
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn imports_are_refused_with_403_when_no_dir_is_allowed() {
    let host = start(false).await;
    for path in [Path::new("/etc"), &host.allowed.join("busybox")] {
        let err = host
            .api
            .create_volume(&import("v", path))
            .await
            .unwrap_err();
        let (status, message) = refusal(err);
        assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
        assert!(message.contains("--allow-import-dir"), "{message}");
    }
    assert!(host.manager.list().unwrap().is_empty());
}

#[tokio::test]
async fn imports_outside_the_allowed_dirs_are_refused_even_through_dotdot_or_links() {
    let host = start(true).await;
    let a = host.allowed.display();
    let cases = [
        "/etc".to_string(),
        "/etc/shadow".to_string(),
        format!("{a}/../work"),
        format!("{a}2"),
        format!("{a}/etc-link"),
        format!("{a}/etc-link/ssl"),
        "relative/path".to_string(),
    ];
    for path in &cases {
        let err = host
            .api
            .create_volume(&import("v", Path::new(path)))
            .await
            .unwrap_err();
        let (status, message) = refusal(err);
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {message}");
        assert!(
            message.contains("outside the directories"),
            "{path}: {message}"
        );
    }
    assert!(host.manager.list().unwrap().is_empty());
    // A missing path inside is not found, and nothing is made either.
    let err = host
        .api
        .create_volume(&import("v", &host.allowed.join("nope")))
        .await
        .unwrap_err();
    assert_eq!(refusal(err).0, StatusCode::NOT_FOUND);
    assert!(host.manager.list().unwrap().is_empty());
}

#[tokio::test]
async fn an_import_inside_an_allowed_dir_copies_it() {
    let host = start(true).await;
    let v = host
        .api
        .create_volume(&import("image", &host.allowed.join("busybox")))
        .await
        .unwrap();
    let copied = std::fs::read_to_string(Path::new(&v.path).join("bin/sh")).unwrap();
    assert_eq!(copied, "#!");
}

#[test]
fn an_allowed_dir_that_does_not_exist_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let err = VolumeApi::new(manager, KEY, Limits::default())
        .with_import_dirs(&[dir.path().join("missing")])
        .err()
        .expect("a missing import dir was accepted");
    assert!(err.to_string().contains("missing"), "{err}");
}
