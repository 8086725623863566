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
    volume_api: VolumeApi,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(limits: Limits) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let volume_api = VolumeApi::new(manager.clone(), KEY, limits);
    tokio::spawn(serve(listener, volume_api.clone(), stop.clone()));
    let api = WorkerApi::new(&url, KEY, Duration::from_secs(10)).unwrap();
    Host {
        _dir: dir,
        manager,
        url,
        api,
        volume_api,
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
        ..Limits::default()
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
        strategy: hangar_api::Strategy::Cow,
        parent: Some("p".into()),
        ..empty("c")
    };
    host.api.create_volume(&child).await.unwrap();
    assert_eq!(
        status(host.api.destroy_volume("p").await.unwrap_err()),
        StatusCode::CONFLICT
    );
    let orphan = CreateVolume {
        strategy: hangar_api::Strategy::Cow,
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

fn names_in(manager: &VolumeManager, handle: &str) -> Vec<String> {
    let data = manager.get(handle).unwrap().unwrap().path;
    let mut names: Vec<String> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn stream_ins_over_the_cap_are_refused_with_503_and_change_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = start(Limits {
        max_concurrent_stream_ins: 1,
        ..Limits::default()
    })
    .await;
    host.api.create_volume(&empty("slow")).await.unwrap();
    host.api.create_volume(&empty("other")).await.unwrap();
    // A stream-in whose body arrives in two parts, the second only when the
    // test says so: it holds the only permit meanwhile.
    let body = tar_of(&[("slow.txt", b"slow")]);
    let addr = host.url.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "PUT /volumes/slow/stream-in?path= HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/x-tar\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&body[..512]).await.unwrap();
    // Not a timing assertion: wait (however long) until the first stream-in
    // holds its permit.
    while host.volume_api.stream_ins_running() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let err = host
        .api
        .stream_in("other", "", false, tar_of(&[("second.txt", b"x")]))
        .await
        .unwrap_err();
    let (status, code, message) = api_error(err);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "unavailable");
    assert!(
        message.contains("already running 1 stream-ins"),
        "{message}"
    );
    assert!(names_in(&host.manager, "other").is_empty());
    // The first one finishes normally and frees its permit.
    conn.write_all(&body[512..]).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"entries\"") {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(names_in(&host.manager, "slow"), ["slow.txt"]);
    assert_eq!(host.volume_api.stream_ins_running(), 0);
    host.api
        .stream_in("other", "", false, tar_of(&[("second.txt", b"x")]))
        .await
        .unwrap();
    assert_eq!(names_in(&host.manager, "other"), ["second.txt"]);
}

#[tokio::test]
async fn stream_out_of_a_bad_or_missing_path_is_an_error_not_an_empty_archive() {
    let host = start(Limits::default()).await;
    host.api.create_volume(&empty("v1")).await.unwrap();
    host.api
        .stream_in("v1", "", false, tar_of(&[("dir/f.txt", b"f")]))
        .await
        .unwrap();
    std::os::unix::fs::symlink(
        "dir",
        host.manager.get("v1").unwrap().unwrap().path.join("ln"),
    )
    .unwrap();
    for (path, expected, code, says) in [
        (
            "missing",
            StatusCode::NOT_FOUND,
            "not_found",
            "missing does not exist",
        ),
        (
            "dir/missing",
            StatusCode::NOT_FOUND,
            "not_found",
            "dir/missing does not exist",
        ),
        ("../up", StatusCode::BAD_REQUEST, "bad_request", "relative"),
        ("/abs", StatusCode::BAD_REQUEST, "bad_request", "relative"),
        (
            "dir/f.txt/x",
            StatusCode::BAD_REQUEST,
            "bad_request",
            "not a directory",
        ),
        (
            "ln/f.txt",
            StatusCode::BAD_REQUEST,
            "bad_request",
            "symlink",
        ),
    ] {
        for gzip in [false, true] {
            let err = host.api.stream_out("v1", path, gzip).await.unwrap_err();
            let (status, c, message) = api_error(err);
            assert_eq!((status, c.as_str()), (expected, code), "{path}: {message}");
            assert!(message.contains(says), "{path}: {message}");
        }
    }
    let err = host.api.stream_out("nothing", "", false).await.unwrap_err();
    assert_eq!(status(err), StatusCode::NOT_FOUND);
    // A good path still streams.
    let out = host
        .api
        .stream_out("v1", "dir", false)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out).contains("f.txt"));
}

#[tokio::test]
async fn a_file_is_read_whole_and_nothing_outside_the_volume_ever_is() {
    let host = start(Limits::default()).await;
    host.api.create_volume(&empty("v1")).await.unwrap();
    host.api
        .stream_in(
            "v1",
            "",
            false,
            tar_of(&[("dir/task.yml", b"platform: linux\n")]),
        )
        .await
        .unwrap();
    let data = host.manager.get("v1").unwrap().unwrap().path;
    let outside = data.parent().unwrap().parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "not yours").unwrap();
    std::os::unix::fs::symlink(&outside, data.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../outside.txt", data.join("rel")).unwrap();
    std::os::unix::fs::symlink("dir/task.yml", data.join("inside")).unwrap();
    std::fs::write(
        data.join("big"),
        vec![b'x'; hangar_volumes::MAX_READ_FILE_BYTES as usize + 1],
    )
    .unwrap();
    assert_eq!(
        host.api.read_file("v1", "dir/task.yml").await.unwrap(),
        b"platform: linux\n"
    );
    assert_eq!(
        host.api.read_file("v1", "inside").await.unwrap(),
        b"platform: linux\n"
    );
    for (path, says) in [
        ("dir/missing.yml", "not found"),
        ("../outside.txt", "'..'"),
        ("%2e%2e/outside.txt", "not found"),
        ("/etc/passwd", "absolute"),
        ("abs", "leads out of the volume"),
        ("rel", "leads out of the volume"),
        ("dir", "not a regular file"),
        ("big", "larger than the 1048576 bytes"),
    ] {
        let (status, code, message) = api_error(host.api.read_file("v1", path).await.unwrap_err());
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "file_unreadable"),
            "{path}: {message}"
        );
        assert!(message.contains(says), "{path}: {message}");
        assert!(!message.contains("not yours"), "{path}: {message}");
    }
    // The volume itself missing is not the file's fault: 404, as a lost
    // volume is told apart by the engine.
    let (status, code, _) = api_error(host.api.read_file("gone", "x").await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    // Without the key nothing is read.
    let resp = reqwest::get(format!("{}/volumes/v1/file?path=dir/task.yml", host.url))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}
