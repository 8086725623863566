//! The worker's container API over HTTP (in process, real processes), through
//! the `WorkerApi` client: create, wait, logs from an offset and followed,
//! credentials, bad specs, destroy.

use std::sync::Arc;
use std::time::Duration;

use crate::containers_support::{mkfifo, mount, process_spec, write_fifo, WAIT};
use hangar_client::{ClientError, WorkerApi};
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::{ContainerManager, ContainerOptions};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

struct Worker {
    _dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    containers: Arc<ContainerManager>,
    url: String,
    api: WorkerApi,
    _stop: tokio_util::sync::DropGuard,
}

impl Drop for Worker {
    fn drop(&mut self) {
        for c in self.containers.list().unwrap_or_default() {
            let _ = self.containers.destroy(&c.handle);
        }
    }
}

async fn start() -> Worker {
    start_with(ContainerOptions::default()).await
}

async fn start_with(options: ContainerOptions) -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let containers = Arc::new(
        ContainerManager::open_with(&dir.path().join("containers"), volumes.clone(), options)
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api =
        VolumeApi::new(volumes.clone(), KEY, Limits::default()).with_containers(containers.clone());
    tokio::spawn(serve(listener, api, stop.clone()));
    let client = WorkerApi::new(&url, KEY, Duration::from_secs(10)).unwrap();
    Worker {
        _dir: dir,
        volumes,
        containers,
        url,
        api: client,
        _stop: stop.drop_guard(),
    }
}

impl Worker {
    fn volume(&self, handle: &str) -> std::path::PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, Default::default())
            .unwrap()
            .path
    }

    async fn log(&self, handle: &str, offset: u64, follow: bool) -> String {
        let resp = self
            .api
            .container_logs(handle, offset, follow)
            .await
            .unwrap();
        String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap()
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

#[tokio::test]
async fn a_container_is_created_waited_on_and_its_log_read_from_an_offset() {
    let w = start().await;
    let created = w
        .api
        .create_container(&process_spec("hello", "echo hello; echo world"))
        .await
        .unwrap();
    assert_eq!(
        (created.handle.as_str(), created.state.as_str()),
        ("hello", "running")
    );

    let done = w.api.wait_container("hello", WAIT).await.unwrap();
    assert_eq!(done.state.to_string(), "exited");
    assert_eq!(done.exit.as_ref().unwrap().code, Some(0));
    assert_eq!(done.log_bytes, 12);

    assert_eq!(w.log("hello", 0, false).await, "hello\nworld\n");
    assert_eq!(w.log("hello", 6, false).await, "world\n");
    assert_eq!(w.log("hello", 12, false).await, "");
    // Following an exited container's log just drains it.
    assert_eq!(w.log("hello", 6, true).await, "world\n");

    assert_eq!(w.api.container("hello").await.unwrap(), done);
    let all = w.api.containers().await.unwrap();
    assert_eq!(all, vec![done]);
}

#[tokio::test]
async fn a_followed_log_streams_new_output_until_the_container_exits() {
    let w = start().await;
    let gate = w.volume("gate");
    mkfifo(&gate.join("go"));
    let mut spec = process_spec("chatty", "echo one; read x < gate/go; echo two");
    spec.mounts = vec![mount("gate", "gate")];
    w.api.create_container(&spec).await.unwrap();

    let mut resp = w.api.container_logs("chatty", 0, true).await.unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"one\n") {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("no output")
            .unwrap()
            .expect("the stream ended while the container runs");
        got.extend_from_slice(&chunk);
    }
    // The container is blocked on the gate: the stream stays open.
    assert_eq!(
        w.api.container("chatty").await.unwrap().state.to_string(),
        "running"
    );

    let writer = write_fifo(&gate.join("go"), "go\n");
    let rest = tokio::time::timeout(WAIT, resp.bytes())
        .await
        .expect("the stream did not end after the container exited")
        .unwrap();
    got.extend_from_slice(&rest);
    writer.join().unwrap();
    assert_eq!(String::from_utf8(got).unwrap(), "one\ntwo\n");
    assert_eq!(
        w.api.container("chatty").await.unwrap().state.to_string(),
        "exited"
    );
}

#[tokio::test]
async fn a_wait_that_times_out_returns_the_running_container() {
    let w = start().await;
    w.api
        .create_container(&process_spec("sleeper", "exec sleep 1000"))
        .await
        .unwrap();
    let c = w
        .api
        .wait_container("sleeper", Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!((c.state.as_str(), c.exit), ("running", None));
    w.api.destroy_container("sleeper").await.unwrap();
}

#[tokio::test]
async fn requests_without_the_worker_key_are_refused_and_change_nothing() {
    let w = start().await;
    let stranger = WorkerApi::new(&w.url, "wrong-key", Duration::from_secs(10)).unwrap();
    let (status, code, _) = api_error(
        stranger
            .create_container(&process_spec("sneaky", "true"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let (status, _, _) = api_error(stranger.containers().await.unwrap_err());
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = api_error(
        stranger
            .container_logs("sneaky", 0, false)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let anonymous = reqwest::Client::new()
        .delete(format!("{}/containers/sneaky", w.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert!(w.api.containers().await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_specs_are_400_naming_the_field_unknown_things_404_and_taken_handles_409() {
    let w = start().await;
    let mut spec = process_spec("bad", "true");
    spec.mounts = vec![mount("gate", "../outside")];
    let (status, code, message) = api_error(w.api.create_container(&spec).await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert!(message.contains("mounts[0].path"), "{message}");

    let unknown_field = reqwest::Client::new()
        .post(format!("{}/containers", w.url))
        .bearer_auth(KEY)
        .json(&serde_json::json!({"handle": "x", "runtime": "process", "path": "true", "hermetic": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_field.status(), StatusCode::BAD_REQUEST);

    let mut spec = process_spec("needs-volume", "true");
    spec.mounts = vec![mount("missing", "input")];
    let (status, code, message) = api_error(w.api.create_container(&spec).await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert!(message.contains("missing"), "{message}");

    w.api
        .create_container(&process_spec("taken", "true"))
        .await
        .unwrap();
    let (status, code, _) = api_error(
        w.api
            .create_container(&process_spec("taken", "true"))
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code.as_str()), (StatusCode::CONFLICT, "conflict"));

    for e in [
        w.api.container("nobody").await.unwrap_err(),
        w.api.container_logs("nobody", 0, true).await.unwrap_err(),
        w.api
            .wait_container("nobody", Duration::from_millis(10))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(api_error(e).0, StatusCode::NOT_FOUND);
    }
    let handles: Vec<String> = w
        .api
        .containers()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.handle)
        .collect();
    assert_eq!(handles, ["taken"]);
}

#[tokio::test]
async fn destroy_kills_and_forgets_and_destroying_again_is_fine() {
    let w = start().await;
    w.api
        .create_container(&process_spec("doomed", "exec sleep 1000"))
        .await
        .unwrap();
    assert_eq!(w.containers.active_count().unwrap(), 1);
    w.api.destroy_container("doomed").await.unwrap();
    w.api.destroy_container("doomed").await.unwrap();
    w.api.destroy_container("never-existed").await.unwrap();
    let (status, _, _) = api_error(w.api.container("doomed").await.unwrap_err());
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(w.containers.active_count().unwrap(), 0);
}

/// A privileged spec reaching a worker not started with
/// `--allow-privileged` is refused before anything is made (no container
/// dir, no staging dir, its volumes untouched), with a message naming the
/// flag; a worker started with it takes the same spec.
#[tokio::test]
async fn a_privileged_spec_is_refused_without_allow_privileged_and_nothing_is_made() {
    let w = start().await;
    let vol = w.volume("work");
    let before: Vec<_> = std::fs::read_dir(w.containers.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut spec = process_spec("root", "touch work/ran");
    spec.mounts = vec![mount("work", "work")];
    spec.privileged = true;
    let (status, code, message) = api_error(w.api.create_container(&spec).await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert_eq!(
        message,
        "unsupported on this worker: privileged container: this worker was not started with --allow-privileged"
    );
    let after: Vec<_> = std::fs::read_dir(w.containers.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(after, before, "something was made for a refused container");
    assert!(!w.containers.root().join("root").exists());
    assert!(w.api.containers().await.unwrap().is_empty());
    assert_eq!(std::fs::read_dir(&vol).unwrap().count(), 0);

    let allowed = start_with(ContainerOptions {
        allow_privileged: true,
        ..ContainerOptions::default()
    })
    .await;
    allowed.volume("work");
    allowed.api.create_container(&spec).await.unwrap();
    let done = allowed.api.wait_container("root", WAIT).await.unwrap();
    let log = allowed.log("root", 0, false).await;
    assert_eq!(
        done.exit.as_ref().and_then(|e| e.code),
        Some(0),
        "{done:?}: {log}"
    );
}
