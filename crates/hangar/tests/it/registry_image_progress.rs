//! The worker's built-in `registry-image` type through the worker's API
//! and web's client, with real parts: Debian's `docker-registry`, this
//! binary as the type's program. Its pull progress arrives line by line
//! before the action's end, and an unreachable registry comes back
//! classified as the infrastructure's in the wire type, a refused login as
//! the image's own.

// Tests block freely: each runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use hangar_api::resources::{ActionEvent, ActionFailure, ResourceAction, ResourceActionResult};
use hangar_client::WorkerApi;
use hangar_images::testing::{
    config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
};
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::resources_api::ResourceRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

struct Worker {
    _dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    api: WorkerApi,
    _stop: tokio_util::sync::DropGuard,
}

async fn worker() -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let types = dir.path().join("resource-types");
    hangar_resources::install_builtin_types(
        &types,
        std::path::Path::new(env!("CARGO_BIN_EXE_hangar")),
    )
    .unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let actions = ActionDirs::open(&dir.path().join(ACTIONS_DIR)).unwrap();
    let runner = ResourceRunner::new(
        Some(types),
        volumes.clone(),
        actions,
        KEY,
        Duration::from_secs(60),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api = VolumeApi::new(volumes.clone(), KEY, Limits::default()).with_resources(runner);
    tokio::spawn(serve(listener, api, stop.clone()));
    Worker {
        _dir: dir,
        volumes,
        api: WorkerApi::new(&url, KEY, Duration::from_secs(60)).unwrap(),
        _stop: stop.drop_guard(),
    }
}

/// The action's events as they came: its stderr pieces, then its result.
async fn run(
    w: &Worker,
    action: &str,
    volume: Option<&str>,
    request: Value,
) -> (Vec<String>, ResourceActionResult) {
    let req = ResourceAction {
        resource_type: "registry-image".into(),
        action: action.into(),
        volume: volume.map(Into::into),
        image_volume: None,
        inputs: Default::default(),
        request,
        privileged: false,
    };
    let mut events = w.api.resource_action_events(&req).await.unwrap();
    let mut stderr = Vec::new();
    loop {
        match events.next().await.unwrap() {
            Some(ActionEvent::Stderr(text)) => stderr.push(text),
            Some(ActionEvent::Result(r)) => return (stderr, r),
            other => panic!("unexpected {other:?} after {stderr:?}"),
        }
    }
}

fn image() -> TestImage {
    let mut big = TarBuilder::new();
    big.dir("data");
    // Incompressible, so the layer is large on the wire as well.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..20 * 1024 * 1024)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    big.file("data/blob", &noise);
    let mut small = TarBuilder::new();
    small.dir("etc").file("etc/os-release", b"ID=progress\n");
    TestImage {
        config: config_json(&["PATH=/bin"], "", "amd64"),
        layers: vec![
            TestLayer::new(big.finish(), Compression::Gzip),
            TestLayer::new(small.finish(), Compression::Zstd),
        ],
        docker: false,
    }
}

#[tokio::test]
async fn registry_image_in_streams_its_pull_progress_and_classifies_its_failures() {
    let registry = Registry::start_with_auth("u", "p").await;
    let (digest, _) = registry.push_image("big", Some("1"), &image()).await;
    let w = worker().await;
    let source = json!({"repository": format!("{}/big", registry.addr), "tag": "1",
                        "username": "u", "password": "p", "insecure": true});
    w.volumes
        .create("dest", Strategy::Empty, Default::default())
        .unwrap();
    let (stderr, result) = run(
        &w,
        "in",
        Some("dest"),
        json!({"source": source, "version": {"digest": digest}}),
    )
    .await;
    let text = stderr.concat();
    assert_eq!(result.exit_code, 0, "{text}");
    assert_eq!(result.failure, None);
    // Streamed: in the events, not in the result.
    assert_eq!(result.stderr, "");
    assert!(stderr.len() > 1, "one piece at a time: {stderr:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("registry-image: manifest sha256:")
                && l.contains("2 layer(s)")
                && l.contains(" MiB compressed")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("registry-image: layer 1/2 ") && l.ends_with(" MiB)")),
        "{text}"
    );
    // The large layer's bytes, a few times, never more than three.
    let bytes_lines = lines
        .iter()
        .filter(|l| l.starts_with("registry-image: layer 1/2: ") && l.contains(" MiB of "))
        .count();
    assert!((1..=3).contains(&bytes_lines), "{text}");
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("registry-image: layer 2/2: ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("registry-image: layer 1/2 applied (gzip, ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("registry-image: layer 2/2 applied (zstd, ")),
        "{text}"
    );

    // A refused login: the image's configuration, not retried anywhere.
    let mut wrong = source.clone();
    wrong["password"] = "nope".into();
    let (stderr, result) = run(&w, "check", None, json!({"source": wrong})).await;
    assert_eq!(result.exit_code, 1, "{stderr:?}");
    assert_eq!(result.failure, Some(ActionFailure::Own));
    assert!(
        stderr.concat().contains("(configuration or image error)"),
        "{stderr:?}"
    );

    // An unreachable registry: the infrastructure's, said in the wire type.
    let port = hangar_images::testing::free_port();
    let gone = json!({"repository": format!("127.0.0.1:{port}/x"), "insecure": true});
    let (stderr, result) = run(&w, "check", None, json!({"source": gone})).await;
    assert_eq!(
        result.exit_code,
        hangar_resources::EXIT_INFRASTRUCTURE,
        "{stderr:?}"
    );
    assert_eq!(result.failure, Some(ActionFailure::Infrastructure));
    assert!(result.infrastructure_failure());
    drop(registry);
}
