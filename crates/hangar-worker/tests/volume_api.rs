//! The worker's volume API over a real (naive) volume store: credentials,
//! streaming both ways, and hostile input refused with the volume unchanged.

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
    manager: Arc<VolumeManager>,
    url: String,
    api: WorkerApi,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(limits: Limits) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        VolumeApi::new(manager.clone(), KEY, limits),
        stop.clone(),
    ));
    let api = WorkerApi::new(&url, KEY, Duration::from_secs(10)).unwrap();
    Host {
        _dir: dir,
        manager,
        url,
        api,
        _stop: stop.drop_guard(),
    }
}

fn empty(handle: &str) -> CreateVolume {
    CreateVolume {
        handle: handle.into(),
        strategy: "empty".into(),
        parent: None,
        import_path: None,
        properties: Default::default(),
    }
}

fn status(e: ClientError) -> StatusCode {
    match e {
        ClientError::Api { status, .. } => status,
        other => panic!("expected an API error, got {other}"),
    }
}

fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// A tar whose entry name is written raw, bypassing the builder's checks.
fn raw_tar(name: &str) -> Vec<u8> {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(3);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(b"bad");
    out.resize(out.len() + 509 + 1024, 0);
    out
}

#[tokio::test]
async fn streams_go_in_and_come_out_whole() {
    let host = start(Limits::default()).await;
    host.api.create_volume(&empty("v1")).await.unwrap();
    let data = tar_of(&[("a.txt", b"alpha"), ("dir/b.txt", b"beta")]);
    host.api.stream_in("v1", "", false, data).await.unwrap();
    let out = host
        .api
        .stream_out("v1", "", false)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut names: Vec<String> = tar::Archive::new(&out[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "dir/b.txt"]);
    let v = host.api.set_property("v1", "owner", "e2e").await.unwrap();
    assert_eq!(v.properties.get("owner").map(String::as_str), Some("e2e"));
}

#[tokio::test]
async fn hostile_streams_are_refused_and_leave_the_volume_unchanged() {
    let host = start(Limits {
        max_bytes: 64 * 1024,
        max_entries: 10,
    })
    .await;
    host.api.create_volume(&empty("v1")).await.unwrap();
    host.api
        .stream_in("v1", "", false, tar_of(&[("keep.txt", b"keep")]))
        .await
        .unwrap();
    let before = host
        .api
        .stream_out("v1", "", false)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let big = vec![0u8; 200 * 1024];
    let many: Vec<(String, Vec<u8>)> = (0..20).map(|i| (format!("f{i}"), vec![])).collect();
    let many_refs: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let cases: Vec<(Vec<u8>, StatusCode)> = vec![
        (raw_tar("../escape.txt"), StatusCode::BAD_REQUEST),
        (raw_tar("/etc/escape.txt"), StatusCode::BAD_REQUEST),
        (tar_of(&[("big.bin", &big)]), StatusCode::PAYLOAD_TOO_LARGE),
        (tar_of(&many_refs), StatusCode::PAYLOAD_TOO_LARGE),
        (
            b"this is not a tar archive at all, just some text that goes on".repeat(20),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (i, (body, expected)) in cases.into_iter().enumerate() {
        let err = host.api.stream_in("v1", "", false, body).await.unwrap_err();
        assert_eq!(status(err), expected, "case {i}");
    }
    for path in ["../up", "/abs"] {
        let err = host
            .api
            .stream_in("v1", path, false, tar_of(&[("x", b"x")]))
            .await
            .unwrap_err();
        assert_eq!(status(err), StatusCode::BAD_REQUEST, "{path}");
    }
    let after = host
        .api
        .stream_out("v1", "", false)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(before, after, "the volume is unchanged");
    assert!(!host
        .manager
        .root()
        .parent()
        .unwrap()
        .join("escape.txt")
        .exists());
}

#[tokio::test]
async fn the_api_wants_the_worker_key_and_names_what_is_wrong() {
    let host = start(Limits::default()).await;
    let raw = reqwest::Client::new();
    for auth in [None, Some("Bearer nope"), Some("Basic x")] {
        let mut req = raw.get(format!("{}/volumes", host.url));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        assert_eq!(
            req.send().await.unwrap().status(),
            StatusCode::UNAUTHORIZED,
            "{auth:?}"
        );
    }
    let health = raw
        .get(format!("{}/healthz", host.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(
        status(host.api.volume("nothing").await.unwrap_err()),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(host.api.create_volume(&empty("../x")).await.unwrap_err()),
        StatusCode::BAD_REQUEST
    );
    host.api.create_volume(&empty("p")).await.unwrap();
    assert_eq!(
        status(host.api.create_volume(&empty("p")).await.unwrap_err()),
        StatusCode::CONFLICT
    );
    let child = CreateVolume {
        strategy: "cow".into(),
        parent: Some("p".into()),
        ..empty("c")
    };
    host.api.create_volume(&child).await.unwrap();
    assert_eq!(
        status(host.api.destroy_volume("p").await.unwrap_err()),
        StatusCode::CONFLICT
    );
    let orphan = CreateVolume {
        strategy: "cow".into(),
        parent: Some("nobody".into()),
        ..empty("o")
    };
    assert_eq!(
        status(host.api.create_volume(&orphan).await.unwrap_err()),
        StatusCode::NOT_FOUND
    );
    host.api.destroy_volume("c").await.unwrap();
    host.api.destroy_volume("c").await.unwrap(); // idempotent
    host.api.destroy_volume("p").await.unwrap();
    assert!(host.api.volumes().await.unwrap().is_empty());
    let resp = raw
        .post(format!("{}/volumes", host.url))
        .bearer_auth(KEY)
        .json(&serde_json::json!({"handle": "x", "strategy": "empty", "colour": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}
