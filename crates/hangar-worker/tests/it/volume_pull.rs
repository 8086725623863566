//! A worker pulling a volume straight from another (`PUT
//! /volumes/{h}/pull`) with a grant web signed for that volume: whole in
//! every encoding; refused, with the target unchanged, for a grant that is
//! for another volume, another worker or expired; a source that lacks the
//! volume, cannot be reached or breaks off mid-stream answered as the
//! source's failure.

use std::sync::Arc;
use std::time::Duration;

use hangar_api::volume_grant::{self, GRANT_HEADER};
use hangar_api::worker_api::{pull_codes, CreateVolume, PullVolume};
use hangar_client::{ClientError, WorkerApi};
use hangar_volumes::{DriverKind, Limits, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

struct Host {
    _dir: tempfile::TempDir,
    manager: Arc<VolumeManager>,
    url: String,
    key: &'static str,
    api: WorkerApi,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(key: &'static str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let volume_api = VolumeApi::new(manager.clone(), key, Limits::default());
    tokio::spawn(serve(listener, volume_api, stop.clone()));
    let api = WorkerApi::new(&url, key, Duration::from_secs(30)).unwrap();
    Host {
        _dir: dir,
        manager,
        url,
        key,
        api,
        _stop: stop.drop_guard(),
    }
}

fn empty(handle: &str) -> CreateVolume {
    CreateVolume {
        handle: handle.into(),
        strategy: hangar_api::Strategy::Empty,
        parent: None,
        import_path: None,
        properties: Default::default(),
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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn pull_of(source: &Host, handle: &str, grant: String, encoding: &str) -> PullVolume {
    PullVolume {
        source_url: source.url.clone(),
        source_handle: handle.into(),
        grant,
        encoding: Some(encoding.into()),
    }
}

fn api_error(e: ClientError) -> (StatusCode, String, String) {
    match e {
        ClientError::Api {
            status,
            code,
            message,
        } => (status, code, message),
        other => panic!("expected an API error, got {other}"),
    }
}

/// Every file under the volume, with its content.
fn files_in(manager: &VolumeManager, handle: &str) -> Vec<(String, Vec<u8>)> {
    let root = manager.get(handle).unwrap().unwrap().path;
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let name = path.strip_prefix(&root).unwrap().display().to_string();
                out.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A source with volume `src` holding a few files, a larger one among
/// them (several tar blocks, compressible), and a target with `dst` empty.
async fn pair() -> (Host, Host) {
    let source = start("source-key-0123456789").await;
    let target = start("target-key-0123456789").await;
    source.api.create_volume(&empty("src")).await.unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let data = tar_of(&[
        ("a.txt", b"alpha"),
        ("dir/b.txt", b"beta"),
        ("big.bin", &big),
    ]);
    source.api.stream_in("src", "", false, data).await.unwrap();
    (source, target)
}

#[tokio::test]
async fn a_pulled_volume_arrives_whole_in_every_encoding() {
    let (source, target) = pair().await;
    let expected = files_in(&source.manager, "src");
    assert_eq!(expected.len(), 3);
    for encoding in ["none", "gzip", "zstd"] {
        let dst = format!("dst-{encoding}");
        target.api.create_volume(&empty(&dst)).await.unwrap();
        let grant = volume_grant::sign(source.key, "src", now_ms());
        let answer = target
            .api
            .pull_volume(&dst, &pull_of(&source, "src", grant, encoding))
            .await
            .unwrap();
        assert_eq!(answer["files"], 3, "{encoding}: {answer}");
        assert_eq!(files_in(&target.manager, &dst), expected, "{encoding}");
    }
}

#[tokio::test]
async fn a_grant_for_another_volume_another_worker_or_past_its_life_pulls_nothing() {
    let (source, target) = pair().await;
    source.api.create_volume(&empty("other")).await.unwrap();
    target.api.create_volume(&empty("dst")).await.unwrap();
    let now = now_ms();
    let cases = [
        (
            "for another volume",
            volume_grant::sign(source.key, "other", now),
        ),
        (
            "signed with another worker's token",
            volume_grant::sign(target.key, "src", now),
        ),
        (
            "expired",
            volume_grant::sign(source.key, "src", now - 2 * volume_grant::GRANT_TTL_MS),
        ),
        ("the source's own token", source.key.to_string()),
    ];
    for (what, grant) in cases {
        let err = target
            .api
            .pull_volume("dst", &pull_of(&source, "src", grant, "none"))
            .await
            .unwrap_err();
        let (status, code, message) = api_error(err);
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{what}: {message}");
        assert_eq!(code, pull_codes::SOURCE_FAILED, "{what}: {message}");
        assert!(message.contains("401"), "{what}: {message}");
        assert!(files_in(&target.manager, "dst").is_empty(), "{what}");
    }
}

#[tokio::test]
async fn a_grant_opens_its_volume_s_stream_out_and_no_other_route() {
    let (source, _target) = pair().await;
    let grant = volume_grant::sign(source.key, "src", now_ms());
    let http = reqwest::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", source.url))
            .header(GRANT_HEADER, &grant)
            .send()
    };
    let out = get("/volumes/src/stream-out").await.unwrap();
    assert_eq!(out.status(), StatusCode::OK);
    let bytes = out.bytes().await.unwrap();
    let names: Vec<String> = tar::Archive::new(&bytes[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert!(names.iter().any(|n| n.ends_with("a.txt")), "{names:?}");
    for path in [
        "/volumes",
        "/volumes/src",
        "/volumes/src/file?path=a.txt",
        "/incarnation",
    ] {
        let status = get(path).await.unwrap().status();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    // Nor a write with it.
    let put = http
        .put(format!("{}/volumes/src/stream-in?path=", source.url))
        .header(GRANT_HEADER, &grant)
        .body(tar_of(&[("planted", b"x")]))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::UNAUTHORIZED);
    assert!(!files_in(&source.manager, "src")
        .iter()
        .any(|(n, _)| n == "planted"));
    // No grant, no stream.
    let bare = http
        .get(format!("{}/volumes/src/stream-out", source.url))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_source_without_the_volume_is_the_source_s_not_found() {
    let (source, target) = pair().await;
    target.api.create_volume(&empty("dst")).await.unwrap();
    let grant = volume_grant::sign(source.key, "gone", now_ms());
    let err = target
        .api
        .pull_volume("dst", &pull_of(&source, "gone", grant, "none"))
        .await
        .unwrap_err();
    let (status, code, message) = api_error(err);
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_GATEWAY, pull_codes::SOURCE_NOT_FOUND),
        "{message}"
    );
    assert!(message.contains(&source.url), "{message}");
}

#[tokio::test]
async fn a_source_that_cannot_be_reached_or_breaks_off_fails_the_pull_as_the_source_s() {
    let target = start("target-key-0123456789").await;
    target.api.create_volume(&empty("dst")).await.unwrap();
    // A port nobody listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    // A source that answers 200, sends half an archive, and dies.
    let broken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let broken_url = format!("http://{}", broken.local_addr().unwrap());
    let archive = tar_of(&[("big.bin", &vec![7u8; 64 * 1024])]);
    tokio::spawn(async move {
        let (mut conn, _) = broken.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = conn.read(&mut request).await;
        let half = &archive[..archive.len() / 2];
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-tar\r\ncontent-length: {}\r\n\r\n",
            archive.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(half).await.unwrap();
        // Dropped: the connection closes mid-body.
    });
    for (what, url) in [("unreachable", closed_url), ("broken off", broken_url)] {
        let pull = PullVolume {
            source_url: url.clone(),
            source_handle: "src".into(),
            grant: "v1.1.00.src".into(),
            encoding: None,
        };
        let (status, code, message) =
            api_error(target.api.pull_volume("dst", &pull).await.unwrap_err());
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{what}: {message}");
        assert_eq!(code, pull_codes::SOURCE_FAILED, "{what}: {message}");
        assert!(message.contains(&url), "{what}: {message}");
        assert!(files_in(&target.manager, "dst").is_empty(), "{what}");
    }
}

#[tokio::test]
async fn a_pull_is_for_web_alone_and_names_only_http_sources() {
    let (source, target) = pair().await;
    target.api.create_volume(&empty("dst")).await.unwrap();
    let grant = volume_grant::sign(source.key, "src", now_ms());
    // Without the target's own token (with the source's, or a grant).
    let stranger = WorkerApi::new(&target.url, source.key, Duration::from_secs(5)).unwrap();
    let (status, _, _) = api_error(
        stranger
            .pull_volume("dst", &pull_of(&source, "src", grant.clone(), "none"))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for (url, handle, encoding) in [
        ("file:///etc", "src", "none"),
        ("not a url", "src", "none"),
        (source.url.as_str(), "../etc", "none"),
        (source.url.as_str(), "src", "brotli"),
    ] {
        let pull = PullVolume {
            source_url: url.into(),
            source_handle: handle.into(),
            grant: grant.clone(),
            encoding: Some(encoding.into()),
        };
        let (status, _, message) =
            api_error(target.api.pull_volume("dst", &pull).await.unwrap_err());
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{url} {handle} {encoding}: {message}"
        );
    }
    assert!(files_in(&target.manager, "dst").is_empty());
}
