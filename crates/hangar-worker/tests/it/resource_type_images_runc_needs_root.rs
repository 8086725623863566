//! A custom resource type's `check` and `in` run through the worker's API
//! in runc containers of its image (`ResourceAction::image_volume`), as
//! Concourse runs them: `/opt/resource/check` and `/opt/resource/in
//! /tmp/build/get`, the request on stdin, the answer on stdout, the log on
//! stderr, the image's env and user, a `/tmp` and HOME of each action's
//! own, and a timeout that kills the container. Needs root, runc and
//! busybox-static (the tests fail, saying what to install, without them).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::containers_support::*;
use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_volumes::Limits;
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::resources_api::ResourceRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

/// Keeps state in `$TMPDIR` and HOME, and says whether it found some.
const CHECK: &str = r#"#!/bin/sh
req=$(cat)
if [ -e "$TMPDIR/state" ] || [ -e "$HOME/state" ]; then echo "found state" >&2; fi
echo "$req" > "$TMPDIR/state"
echo "$req" > "$HOME/state"
echo "check as $(id -u) home=$HOME tmpdir=$TMPDIR from_image=$FROM_IMAGE" >&2
echo '[{"ref":"v1"},{"ref":"v2"}]'
"#;

const IN: &str = r#"#!/bin/sh
dest=$1
req=$(cat)
if [ -e "$TMPDIR/state" ]; then echo "found state" >&2; fi
echo in > "$TMPDIR/state"
echo "$req" > "$dest/request.json"
echo "$dest" > "$dest/dest"
echo "in into $dest as $(id -u)" >&2
echo '{"version":{"ref":"v2"},"metadata":[{"name":"n","value":"v"}]}'
"#;

/// Sleeps `secs` (each test its own number, so tests running at once do
/// not count each other's sleeps).
fn slow(secs: u32) -> String {
    format!("#!/bin/sh\necho started >&2\nsleep {secs}\n")
}

/// An image volume in Concourse's layout whose `/opt/resource` holds
/// `check` and `in`.
fn image(host: &Host, handle: &str, check: &str, metadata: &str) -> PathBuf {
    let staging = format!("{handle}-staging");
    busybox_rootfs(host, &staging);
    let built = host.volumes.get(&staging).unwrap().unwrap().path;
    let volume = host.volume(handle);
    fs::rename(&built, volume.join("rootfs")).unwrap();
    fs::create_dir(&built).unwrap();
    let rootfs = volume.join("rootfs");
    fs::create_dir_all(rootfs.join("etc")).unwrap();
    fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nbot:x:1234:1235::/home/bot:/bin/sh\n",
    )
    .unwrap();
    let opt = rootfs.join("opt/resource");
    fs::create_dir_all(&opt).unwrap();
    for (name, text) in [("check", check), ("in", IN)] {
        fs::write(opt.join(name), text).unwrap();
        fs::set_permissions(opt.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::write(volume.join("metadata.json"), metadata).unwrap();
    volume
}

struct Api {
    url: String,
    http: reqwest::Client,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(host: &Host, timeout: Duration) -> Api {
    let actions = ActionDirs::open(&host.dir.path().join(ACTIONS_DIR)).unwrap();
    let runtime = host.containers.action_runtime();
    assert!(
        runtime.is_some(),
        "runc is not installed: apt-get install -y runc"
    );
    let runner = ResourceRunner::new(None, host.volumes.clone(), actions, KEY, timeout)
        .with_action_runtime(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api = VolumeApi::new(host.volumes.clone(), KEY, Limits::default()).with_resources(runner);
    tokio::spawn(serve(listener, api, stop.clone()));
    Api {
        url,
        http: reqwest::Client::new(),
        _stop: stop.drop_guard(),
    }
}

impl Api {
    async fn post(
        &self,
        image: &str,
        action: &str,
        volume: Option<&str>,
        request: Value,
    ) -> (u16, String) {
        let resp = self
            .http
            .post(format!("{}/resource-actions", self.url))
            .bearer_auth(KEY)
            .json(&ResourceAction {
                inputs: Default::default(),
                resource_type: "rss".into(),
                action: action.into(),
                volume: volume.map(Into::into),
                image_volume: Some(image.into()),
                request,
                privileged: false,
            })
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn run(
        &self,
        image: &str,
        action: &str,
        volume: Option<&str>,
        request: Value,
    ) -> ResourceActionResult {
        let (status, text) = self.post(image, action, volume, request).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }
}

/// runc containers under the worker's state dir that are still there.
fn runc_containers(host: &Host) -> Vec<String> {
    let state = host.dir.path().join("containers/.runc");
    fs::read_dir(&state)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("hangar-action-"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_check_and_in_speak_the_protocol_in_the_image_with_state_of_their_own() {
    let host = Host::new();
    image(
        &host,
        "image",
        CHECK,
        r#"{"env": ["FROM_IMAGE=yes", "PATH=/bin"]}"#,
    );
    let api = start(&host, Duration::from_secs(60)).await;
    let request = json!({"source": {"uri": "https://x"}, "version": null});
    let first = api.run("image", "check", None, request.clone()).await;
    assert_eq!(first.exit_code, 0, "{}", first.stderr);
    assert_eq!(first.response, Some(json!([{"ref": "v1"}, {"ref": "v2"}])));
    assert_eq!(
        first.stderr,
        "check as 0 home=/root tmpdir=/tmp from_image=yes\n"
    );
    // The same image volume again: the first action's $TMPDIR and HOME
    // went with it.
    let second = api.run("image", "check", None, request).await;
    assert!(!second.stderr.contains("found state"), "{}", second.stderr);
    assert!(!host
        .volumes
        .get("image")
        .unwrap()
        .unwrap()
        .path
        .join("rootfs/tmp/state")
        .exists());

    host.volume("dest");
    let req = json!({"source": {"uri": "https://x"}, "version": {"ref": "v2"}});
    let fetched = api.run("image", "in", Some("dest"), req.clone()).await;
    assert_eq!(fetched.exit_code, 0, "{}", fetched.stderr);
    assert_eq!(fetched.stderr, "in into /tmp/build/get as 0\n");
    assert!(!fetched.stderr.contains("found state"));
    assert_eq!(fetched.response.unwrap()["version"], json!({"ref": "v2"}));
    let dest = host.volumes.get("dest").unwrap().unwrap().path;
    let written: Value =
        serde_json::from_str(&fs::read_to_string(dest.join("request.json")).unwrap()).unwrap();
    assert_eq!(written, req);
    assert_eq!(
        fs::read_to_string(dest.join("dest")).unwrap(),
        "/tmp/build/get\n"
    );
    // Nothing of the actions is left: no container, no dir.
    assert!(
        runc_containers(&host).is_empty(),
        "{:?}",
        runc_containers(&host)
    );
    let left: Vec<_> = fs::read_dir(host.dir.path().join(ACTIONS_DIR))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_actions_run_as_the_image_s_user() {
    let host = Host::new();
    image(&host, "image", CHECK, r#"{"user": "bot"}"#);
    let api = start(&host, Duration::from_secs(60)).await;
    let out = api.run("image", "check", None, json!({"source": {}})).await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("check as 1234 home=/home/bot tmpdir=/tmp"),
        "{}",
        out.stderr
    );
    host.volume("dest");
    let out = api
        .run(
            "image",
            "in",
            Some("dest"),
            json!({"source": {}, "version": {"ref": "v2"}}),
        )
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert_eq!(out.stderr, "in into /tmp/build/get as 1234\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_an_action_past_its_timeout_is_killed_with_its_container() {
    let host = Host::new();
    image(&host, "image", &slow(300), "{}");
    let api = start(&host, Duration::from_secs(3)).await;
    let (status, text) = api
        .post("image", "check", None, json!({"source": {}}))
        .await;
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("took longer than"), "{text}");
    // The container and its sleep are gone.
    let deadline = std::time::Instant::now() + WAIT;
    while !runc_containers(&host).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        runc_containers(&host).is_empty(),
        "{:?}",
        runc_containers(&host)
    );
    assert_eq!(sleepers(300), 0);
}

/// Processes `sleep <secs>` on the host.
fn sleepers(secs: u32) -> usize {
    let secs = secs.to_string();
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split('\0').collect::<Vec<_>>() == ["sleep", &secs, ""])
        })
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_an_action_whose_caller_hangs_up_is_killed_with_its_container() {
    let host = Host::new();
    image(&host, "image", &slow(301), "{}");
    let api = start(&host, Duration::from_secs(600)).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let sent = impatient
        .post(format!("{}/resource-actions", api.url))
        .bearer_auth(KEY)
        .json(&ResourceAction {
            inputs: Default::default(),
            resource_type: "rss".into(),
            action: "check".into(),
            volume: None,
            image_volume: Some("image".into()),
            request: json!({"source": {}}),
            privileged: false,
        })
        .send()
        .await;
    assert!(sent.is_err(), "the action answered: {sent:?}");
    let deadline = std::time::Instant::now() + WAIT;
    while !(runc_containers(&host).is_empty() && sleepers(301) == 0)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        runc_containers(&host).is_empty(),
        "{:?}",
        runc_containers(&host)
    );
    assert_eq!(sleepers(301), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_an_image_without_the_program_is_refused_as_the_step_s_own() {
    let host = Host::new();
    let volume = image(&host, "image", CHECK, "{}");
    fs::remove_file(volume.join("rootfs/opt/resource/check")).unwrap();
    let api = start(&host, Duration::from_secs(60)).await;
    let (status, text) = api
        .post("image", "check", None, json!({"source": {}}))
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("no executable /opt/resource/check"), "{text}");
}
