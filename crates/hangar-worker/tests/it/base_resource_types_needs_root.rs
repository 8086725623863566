//! Base resource types in Concourse's layout: `resource_metadata.json`
//! beside `rootfs.tgz` (or `rootfs/`) in the worker's types dir. The type
//! is found by discovery, its tarball unpacked once into the worker's own
//! dir, and `/opt/resource/check`, `in <dir>` and `out <dir>` run through
//! the worker's API in a runc container of it, in the sandbox (a user
//! namespace mapped into the task range), each action on an overlay of its
//! own. A hostile tarball is no type, and writes nothing. Needs root, runc
//! and busybox-static (the tests fail, saying what to install, without
//! them).

// Blocking calls are fine here: the tests build trees and read the host.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::containers_support::*;
use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_volumes::Limits;
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::DEFAULT_TASK_IDS;
use hangar_worker::discover_resource_types;
use hangar_worker::resources_api::ResourceRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";
const UNPACKED: &str = "base-resource-types";

/// Says who and where it runs, and whether an earlier action left state
/// in the root, /tmp or HOME; then leaves some.
const CHECK: &str = r#"#!/bin/sh
req=$(cat)
for f in /etc/state /tmp/state "$HOME/state"; do
  if [ -e "$f" ]; then echo "found $f" >&2; fi
done
echo "$req" > /etc/state
echo "$req" > /tmp/state
echo "$req" > "$HOME/state"
read a b c < /proc/self/uid_map
echo "uid_map $a $b $c" >&2
echo "cwd $(pwd) home $HOME uid $(id -u)" >&2
read dev at fstype rest < /proc/self/mounts
echo "root $at $fstype" >&2
echo '[{"ref":"v1"},{"ref":"v2"}]'
"#;

const IN: &str = r#"#!/bin/sh
dest=$1
req=$(cat)
echo "$req" > "$dest/request.json"
echo fetched > "$dest/file"
read a b c < /proc/self/uid_map
echo "in into $dest cwd $(pwd) uid_map $a $b $c" >&2
echo '{"version":{"ref":"v2"},"metadata":[{"name":"n","value":"v"}]}'
"#;

const OUT: &str = r#"#!/bin/sh
src=$1
cat > /dev/null
echo "out from $src cwd $(pwd) saw $(cat "$src/input/hello")" >&2
echo '{"version":{"ref":"put"}}'
"#;

/// A root filesystem of static busybox with the protocol's programs.
fn rootfs(at: &Path) {
    let busybox = static_busybox();
    let bin = at.join("bin");
    fs::create_dir_all(&bin).unwrap();
    fs::copy(&busybox, bin.join("busybox")).unwrap();
    for applet in ["sh", "cat", "echo", "id", "pwd"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    fs::create_dir_all(at.join("etc")).unwrap();
    fs::write(at.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    fs::create_dir_all(at.join("root")).unwrap();
    fs::set_permissions(at.join("root"), fs::Permissions::from_mode(0o700)).unwrap();
    let opt = at.join("opt/resource");
    fs::create_dir_all(&opt).unwrap();
    for (name, text) in [("check", CHECK), ("in", IN), ("out", OUT)] {
        fs::write(opt.join(name), text).unwrap();
        fs::set_permissions(opt.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// `dir` as a gzipped tar, links kept as links.
fn pack(dir: &Path, tgz: &Path) {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        fs::File::create(tgz).unwrap(),
        flate2::Compression::fast(),
    ));
    b.follow_symlinks(false);
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap().finish().unwrap();
}

/// A type in Concourse's layout under `types/<dir>`: its metadata and a
/// `rootfs.tgz` of [`rootfs`]. Answers the type's dir.
fn layout_type(types: &Path, dir: &str, metadata: &str) -> PathBuf {
    let d = types.join(dir);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("resource_metadata.json"), metadata).unwrap();
    let staging = tempfile::tempdir().unwrap();
    rootfs(staging.path());
    pack(staging.path(), &d.join("rootfs.tgz"));
    d
}

struct Api {
    url: String,
    http: reqwest::Client,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(host: &Host, types: &Path, allow_privileged: bool) -> Api {
    require_runc();
    let actions = ActionDirs::open(&host.dir.path().join(ACTIONS_DIR)).unwrap();
    let runtime = host.containers.action_runtime();
    assert!(
        runtime.is_some(),
        "runc is not installed: apt-get install -y runc"
    );
    let runner = ResourceRunner::new(
        Some(types.to_path_buf()),
        host.volumes.clone(),
        actions,
        KEY,
        Duration::from_secs(60),
    )
    .with_action_runtime(runtime)
    .with_allow_privileged(allow_privileged)
    .with_base_type_roots(&host.dir.path().join(UNPACKED));
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
    async fn post(&self, action: ResourceAction) -> (u16, String) {
        let resp = self
            .http
            .post(format!("{}/resource-actions", self.url))
            .bearer_auth(KEY)
            .json(&action)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn run(&self, action: ResourceAction) -> ResourceActionResult {
        let (status, text) = self.post(action).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }
}

fn action(resource_type: &str, action: &str, request: Value) -> ResourceAction {
    ResourceAction {
        inputs: BTreeMap::new(),
        resource_type: resource_type.into(),
        action: action.into(),
        volume: None,
        image_volume: None,
        request,
        privileged: false,
    }
}

/// The sandbox's mapping as `/proc/self/uid_map` shows it inside.
fn sandboxed_map() -> String {
    format!("0 {} 65536", DEFAULT_TASK_IDS.uid)
}

/// Mounts of the worker's unpacked types still in place.
fn overlays_left(host: &Host) -> Vec<String> {
    let unpacked = host.dir.path().join(UNPACKED);
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&*unpacked.to_string_lossy()))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_check_in_and_out_run_in_a_container_of_the_type_s_rootfs() {
    let host = Host::new();
    let types = host.dir.path().join("types");
    // Named by its metadata, not its dir.
    layout_type(
        &types,
        "layout-resource",
        r#"{"type":"layout","version":"1.2.3","privileged":false,"unique_version_history":false}"#,
    );
    let found = discover_resource_types(&types);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (
            found[0].type_name.as_str(),
            found[0].version.as_deref(),
            found[0].privileged
        ),
        ("layout", Some("1.2.3"), false)
    );
    let api = start(&host, &types, false).await;

    let request = json!({"source": {"uri": "https://x"}, "version": null});
    let first = api.run(action("layout", "check", request.clone())).await;
    assert_eq!(first.exit_code, 0, "{}", first.stderr);
    assert_eq!(first.response, Some(json!([{"ref": "v1"}, {"ref": "v2"}])));
    // In the sandbox's user namespace, not the host's identity map.
    assert_eq!(
        first.stderr,
        format!(
            "uid_map {}\ncwd /tmp/build/check home /root uid 0\nroot / overlay\n",
            sandboxed_map()
        )
    );
    // Each action on an overlay of its own: what the first wrote into the
    // root, /tmp and HOME, the second does not see, and the unpacked root
    // never got.
    let second = api.run(action("layout", "check", request)).await;
    assert_eq!(second.exit_code, 0, "{}", second.stderr);
    assert!(!second.stderr.contains("found"), "{}", second.stderr);
    let unpacked: Vec<PathBuf> = fs::read_dir(host.dir.path().join(UNPACKED).join("layout"))
        .unwrap()
        .map(|e| e.unwrap().path().join("rootfs"))
        .collect();
    assert_eq!(unpacked.len(), 1, "unpacked once: {unpacked:?}");
    assert!(unpacked[0].join("opt/resource/check").is_file());
    assert!(!unpacked[0].join("etc/state").exists());
    assert!(!unpacked[0].join("root/state").exists());
    // Its owners moved into the task range.
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&fs::metadata(unpacked[0].join("etc/passwd")).unwrap()),
        DEFAULT_TASK_IDS.uid
    );

    host.volume("dest");
    let req = json!({"source": {"uri": "https://x"}, "version": {"ref": "v2"}});
    let fetched = api
        .run(ResourceAction {
            volume: Some("dest".into()),
            ..action("layout", "in", req.clone())
        })
        .await;
    assert_eq!(fetched.exit_code, 0, "{}", fetched.stderr);
    assert_eq!(
        fetched.stderr,
        format!(
            "in into /tmp/build/get cwd /tmp/build/get uid_map {}\n",
            sandboxed_map()
        )
    );
    assert_eq!(fetched.response.unwrap()["version"], json!({"ref": "v2"}));
    let dest = host.volumes.get("dest").unwrap().unwrap().path;
    assert_eq!(fs::read_to_string(dest.join("file")).unwrap(), "fetched\n");
    let written: Value =
        serde_json::from_str(&fs::read_to_string(dest.join("request.json")).unwrap()).unwrap();
    assert_eq!(written, req);

    let input = host.volume("input");
    fs::write(input.join("hello"), "hi from a task").unwrap();
    let put = api
        .run(ResourceAction {
            inputs: BTreeMap::from([("input".to_string(), "input".to_string())]),
            ..action("layout", "out", json!({"source": {}, "params": {}}))
        })
        .await;
    assert_eq!(put.exit_code, 0, "{}", put.stderr);
    assert_eq!(
        put.stderr,
        "out from /tmp/build/put cwd /tmp/build/put saw hi from a task\n"
    );
    assert_eq!(put.response.unwrap()["version"], json!({"ref": "put"}));

    // Nothing of the actions is left: no overlay, no action dir.
    assert!(
        overlays_left(&host).is_empty(),
        "{:?}",
        overlays_left(&host)
    );
    let left: Vec<_> = fs::read_dir(host.dir.path().join(ACTIONS_DIR))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_an_unpacked_rootfs_dir_is_a_type_too() {
    let host = Host::new();
    let types = host.dir.path().join("types");
    let d = types.join("unpacked");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("resource_metadata.json"), r#"{"type":"unpacked"}"#).unwrap();
    rootfs(&d.join("rootfs"));
    let api = start(&host, &types, false).await;
    let out = api
        .run(action("unpacked", "check", json!({"source": {}})))
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with(&format!("uid_map {}\n", sandboxed_map())),
        "{}",
        out.stderr
    );
    // The operator's dir is not the one moved into the task range.
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&fs::metadata(d.join("rootfs/etc/passwd")).unwrap()),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_a_privileged_type_runs_privileged_only_where_allowed() {
    let host = Host::new();
    let types = host.dir.path().join("types");
    layout_type(&types, "dind", r#"{"type":"dind","privileged":true}"#);
    assert!(discover_resource_types(&types)[0].privileged);

    let refusing = start(&host, &types, false).await;
    let (status, text) = refusing
        .post(action("dind", "check", json!({"source": {}})))
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("--allow-privileged"), "{text}");
    // Refused before anything was unpacked.
    assert!(!host.dir.path().join(UNPACKED).exists());

    let allowing = start(&host, &types, true).await;
    let out = allowing
        .run(action("dind", "check", json!({"source": {}})))
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    // No user namespace: the host's identity map.
    assert!(
        out.stderr.starts_with("uid_map 0 0 4294967295\n"),
        "{}",
        out.stderr
    );
}

/// A tarball whose entries go where they must not: through a link of its
/// own to `outside`, up out of the root, a device node.
fn hostile_tarball(tgz: &Path, outside: &Path) {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        fs::File::create(tgz).unwrap(),
        flate2::Compression::fast(),
    ));
    let mut entry = |name: &str, kind: tar::EntryType, link: Option<&str>, data: &[u8]| {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_mode(0o755);
        h.set_uid(0);
        h.set_gid(0);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data).unwrap();
    };
    entry(
        "opt/resource/check",
        tar::EntryType::Regular,
        None,
        b"#!/bin/sh\n",
    );
    entry(
        "escape",
        tar::EntryType::Symlink,
        Some(outside.to_str().unwrap()),
        b"",
    );
    entry("escape/pwned", tar::EntryType::Regular, None, b"pwned");
    entry("../pwned", tar::EntryType::Regular, None, b"pwned");
    entry("dev/evil", tar::EntryType::Block, None, b"");
    b.into_inner().unwrap().finish().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_a_hostile_tarball_is_no_type_and_writes_nothing_outside() {
    let host = Host::new();
    let types = host.dir.path().join("types");
    let outside = host.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let d = types.join("hostile");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("resource_metadata.json"), r#"{"type":"hostile"}"#).unwrap();
    hostile_tarball(&d.join("rootfs.tgz"), &outside);
    // And a good one beside it, still found.
    layout_type(&types, "good", r#"{"type":"good"}"#);

    let found: Vec<String> = discover_resource_types(&types)
        .into_iter()
        .map(|t| t.type_name)
        .collect();
    assert_eq!(found, ["good"]);
    let api = start(&host, &types, false).await;
    let (status, text) = api
        .post(action("hostile", "check", json!({"source": {}})))
        .await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("no resource type \\\"hostile\\\""), "{text}");
    let good = api
        .run(action("good", "check", json!({"source": {}})))
        .await;
    assert_eq!(good.exit_code, 0, "{}", good.stderr);

    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    assert!(!host.dir.path().join("pwned").exists());
    assert!(!types.join("pwned").exists());
    assert!(!host.dir.path().join(UNPACKED).join("hostile").exists());
}
