//! On a root worker, what `in` fetched is handed to the first task user (so
//! tasks mounting copies of it find their own files), except an image in
//! Concourse's layout: its files keep the owners its layers gave them,
//! which a container of the image relies on.

// Tests block freely: each runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_core::users::Ids;
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::resources_api::ResourceRunner;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";
const TASK_USER: Ids = Ids {
    uid: 2_000_123,
    gid: 2_000_123,
};

fn script(types: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = types.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (action, text) in [("check", "echo '[]'\n"), ("in", body)] {
        let path = dir.join(action);
        std::fs::write(&path, format!("#!/bin/sh\nset -eu\ncat >/dev/null\n{text}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[tokio::test]
async fn an_image_moves_into_the_sandboxs_range_and_anything_else_goes_to_the_task_user() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root (it checks file owners a root worker sets)"
    );
    let dir = tempfile::tempdir().unwrap();
    let types = dir.path().join("resource-types");
    script(
        &types,
        "image",
        "mkdir -p \"$1/rootfs/etc\"\necho 'root:x:0:0::/root:/bin/sh' > \"$1/rootfs/etc/passwd\"\necho '{\"env\":[],\"user\":\"\"}' > \"$1/metadata.json\"\necho '{\"version\":{\"digest\":\"sha256:1\"}}'\n",
    );
    script(
        &types,
        "plain",
        "echo data > \"$1/file\"\necho '{\"version\":{\"ref\":\"1\"}}'\n",
    );
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let actions = ActionDirs::open(&dir.path().join(ACTIONS_DIR)).unwrap();
    let runner = ResourceRunner::new(
        Some(types),
        volumes.clone(),
        actions,
        KEY,
        Duration::from_secs(30),
    )
    .with_task_user(TASK_USER);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api = VolumeApi::new(volumes.clone(), KEY, Limits::default()).with_resources(runner);
    tokio::spawn(serve(listener, api, stop.clone()));
    let _stop = stop.drop_guard();

    let fetch = |resource_type: &'static str, handle: &'static str| {
        let (url, volumes) = (url.clone(), volumes.clone());
        async move {
            let path = volumes
                .create(handle, Strategy::Empty, BTreeMap::new())
                .unwrap()
                .path;
            let out: ResourceActionResult = reqwest::Client::new()
                .post(format!("{url}/resource-actions"))
                .bearer_auth(KEY)
                .json(&ResourceAction {
                    inputs: Default::default(),
                    resource_type: resource_type.into(),
                    action: "in".into(),
                    volume: Some(handle.into()),
                    image_volume: None,
                    request: json!({"source": {}, "version": {}}),
                    privileged: false,
                })
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(out.exit_code, 0, "{}", out.stderr);
            path
        }
    };

    let image = fetch("image", "image-volume").await;
    let passwd = std::fs::metadata(image.join("rootfs/etc/passwd")).unwrap();
    assert_eq!(
        (passwd.uid(), passwd.gid()),
        (TASK_USER.uid, TASK_USER.gid),
        "the image's /etc is the sandbox's root's: root's, moved into the range"
    );

    let plain = fetch("plain", "plain-volume").await;
    let file = std::fs::metadata(plain.join("file")).unwrap();
    assert_eq!(
        (file.uid(), file.gid()),
        (TASK_USER.uid, TASK_USER.gid),
        "a fetched input is the task user's"
    );
}
