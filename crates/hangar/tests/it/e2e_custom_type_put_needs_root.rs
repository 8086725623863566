//! A put to a custom resource type (Concourse's `resource_types`), end to
//! end: real web and worker processes, the worker with a shell-script base
//! type `local-image` that serves a local busybox root filesystem in
//! Concourse's image layout. The plan's type `feed` is an image of that
//! type whose `/opt/resource/out` reads the put's input and answers a
//! version; the implicit get runs its `in` at that version, and a later
//! task reads what `in` wrote. Needs root, runc and busybox-static.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::common::{has, require_runc, static_busybox, Cluster, ADMIN};
use hangar_client::Client;

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn executable(path: &Path, content: &str) {
    write(path, content);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A busybox root filesystem whose `/opt/resource` speaks the protocol:
/// `out` answers the content of the input file `params.file` names as the
/// version `item`, `in` writes the version it is given.
fn feed_image(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(static_busybox(), bin.join("busybox")).unwrap();
    for tool in ["sh", "cat", "echo", "sed", "tr"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
    for d in ["proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    write(&dir.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n");
    executable(
        &dir.join("opt/resource/check"),
        "#!/bin/sh\ncat > /dev/null\necho '[]'\n",
    );
    executable(
        &dir.join("opt/resource/out"),
        r#"#!/bin/sh
request=$(cat)
file=$(printf '%s' "$request" | sed -n 's/.*"file":"\([^"]*\)".*/\1/p')
item=$(cat "$1/$file" | tr -d '\n')
echo "feed out: pushing $item from $1/$file in $FEED_IMAGE" >&2
printf '{"version":{"item":"%s"},"metadata":[{"name":"by","value":"feed"}]}\n' "$item"
"#,
    );
    executable(
        &dir.join("opt/resource/in"),
        r#"#!/bin/sh
request=$(cat)
item=$(printf '%s' "$request" | sed -n 's/.*"item":"\([^"]*\)".*/\1/p')
echo "item $item fetched after the put" > "$1/item"
printf '%s' "$request" > "$1/request.json"
echo "feed in: $item" >&2
printf '{"version":{"item":"%s"}}\n' "$item"
"#,
    );
}

/// The base type `local-image`: `in` copies the root filesystem named by
/// the source's `path` into the image layout.
fn install_local_image(types: &Path) {
    let path_of = r#"request=$(cat)
path=$(printf '%s' "$request" | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
"#;
    let actions = [
        ("check", r#"printf '[{"digest":"sha256:feed"}]\n'"#),
        (
            "in",
            r#"mkdir "$1/rootfs"
cp -a "$path/." "$1/rootfs/"
printf '{"env":["PATH=/bin","FEED_IMAGE=the feed image"]}' > "$1/metadata.json"
printf '{"version":{"digest":"sha256:feed"}}\n'"#,
        ),
    ];
    for (action, body) in actions {
        let file = types.join("local-image").join(action);
        executable(&file, &format!("#!/bin/sh\nset -eu\n{path_of}{body}\n"));
    }
}

#[test]
fn a_put_to_a_custom_type_runs_out_in_its_image_and_the_implicit_get_feeds_a_later_task() {
    require_runc();
    let c = Cluster::start();
    let work = c.work_dir("worker-put");
    install_local_image(&work.join("resource-types"));
    // `local-image` copies a host path, which the sandbox does not show:
    // base types run on the host here (the custom type still in its image).
    let _w = c.worker_with("worker-put", &work, &["--no-process-sandbox"]);
    c.wait_until("the worker runs", |ws| has(ws, "worker-put", "running"));

    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("feed-rootfs");
    feed_image(&rootfs);
    let busybox_root = dir.path().join("task-rootfs");
    feed_image(&busybox_root);
    let task_image = serde_json::json!({"type": "local-image",
        "source": {"path": busybox_root.to_str().unwrap()}});
    let plan = serde_json::json!([
        {"task": "make", "config": {"platform": "linux", "image_resource": task_image,
            "outputs": [{"name": "src"}],
            "run": {"path": "sh", "args": ["-c", "echo v7 > src/item"]}}},
        {"put": "news", "type": "feed", "source": {"url": "https://example.invalid/feed"},
         "params": {"file": "src/item"}, "get_params": {"depth": 1}},
        {"task": "show", "config": {"platform": "linux", "image_resource": task_image,
            "inputs": [{"name": "news"}],
            "run": {"path": "cat", "args": ["news/item", "news/request.json"]}}}
    ]);
    let types = serde_json::json!([
        {"name": "feed", "type": "local-image",
         "source": {"path": rootfs.to_str().unwrap()},
         "defaults": {"format": "rss"}}
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let build = rt
        .block_on(client.create_build(&hangar_api::builds::CreateBuild {
            name: Some("feed-put".into()),
            plan,
            artifacts: Default::default(),
            resource_types: types,
            team: None,
        }))
        .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = (
        String::from_utf8_lossy(&watch.stdout).into_owned(),
        String::from_utf8_lossy(&watch.stderr).into_owned(),
    );
    assert!(watch.status.success(), "{out}\n{err}");
    let all = format!("{out}\n{err}");
    assert!(
        all.contains("image of resource type feed (local-image) fetched on worker worker-put"),
        "{all}"
    );
    // out's stderr, in the type's image with the put's input mounted.
    assert!(
        all.contains("feed out: pushing v7 from /tmp/build/put/src/item in the feed image"),
        "{all}"
    );
    // The version out answered, recorded with the step.
    assert!(
        all.contains(r#"pushed version {"item":"v7"} on worker worker-put"#),
        "{all}"
    );
    // The implicit get through the type, its files read by the later task.
    assert!(all.contains("feed in: v7"), "{all}");
    assert!(all.contains("item v7 fetched after the put"), "{all}");
    assert!(all.contains(r#""depth":1"#), "{all}");
    assert!(all.contains(r#""format":"rss""#), "{all}");
}
