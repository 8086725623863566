//! A build plan with `resource_types` (Concourse's custom resource types),
//! end to end: real web and worker processes, the worker with a
//! shell-script base type `local-image` that serves a local busybox root
//! filesystem in Concourse's image layout. The plan's type `feed` is an
//! image of that type whose `/opt/resource/check` and `in` are shell
//! scripts; the get step fetches the image, runs them in runc containers of
//! it, and a task reads what `in` wrote. Needs root, runc and
//! busybox-static.

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

/// A busybox root filesystem whose `/opt/resource` speaks the protocol.
fn feed_image(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = static_busybox();
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    for tool in ["sh", "cat", "echo", "id", "head", "tr"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
    for d in ["proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    write(&dir.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n");
    executable(
        &dir.join("opt/resource/check"),
        r#"#!/bin/sh
cat > "$TMPDIR/request"
echo "feed check in $FEED_IMAGE" >&2
echo '[{"item":"42"}]'
"#,
    );
    executable(
        &dir.join("opt/resource/in"),
        r#"#!/bin/sh
if [ -e "$TMPDIR/request" ]; then echo "in found check's state" >&2; fi
cat > "$1/request.json"
echo "item 42 from $FEED_IMAGE, fetched into $1" > "$1/item"
echo "feed in" >&2
echo '{"version":{"item":"42"}}'
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
fn a_get_of_a_custom_type_runs_its_check_and_in_inside_the_type_s_image() {
    require_runc();
    let c = Cluster::start();
    let work = c.work_dir("worker-rt");
    install_local_image(&work.join("resource-types"));
    // `local-image` copies a host path, which the sandbox does not show:
    // base types run on the host here (images still run in the sandbox).
    let _w = c.worker_with("worker-rt", &work, &["--no-process-sandbox"]);
    c.wait_until("the worker runs", |ws| has(ws, "worker-rt", "running"));

    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("feed-rootfs");
    feed_image(&rootfs);
    let plan = serde_json::json!([
        {"get": "news", "type": "feed", "source": {"url": "https://example.invalid/feed"}},
        {"task": "show", "config": {"platform": "linux", "inputs": [{"name": "news"}],
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
            name: Some("feed".into()),
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
        all.contains("image of resource type feed (local-image) fetched on worker worker-rt"),
        "{all}"
    );
    assert!(all.contains("feed check in the feed image"), "{all}");
    assert!(all.contains("feed in"), "{all}");
    // Each action's /tmp is its own.
    assert!(!all.contains("found check's state"), "{all}");
    assert!(
        all.contains("item 42 from the feed image, fetched into /tmp/build/get"),
        "{all}"
    );
    // The defaults went under the step's source.
    assert!(all.contains(r#""format":"rss""#), "{all}");
    assert!(
        all.contains(r#""url":"https://example.invalid/feed""#),
        "{all}"
    );
}

/// A check that takes more memory than the worker gives a container is
/// OOM-killed in the action's own cgroup, and the build's log says so:
/// a runaway resource type never presses on the worker itself.
#[test]
fn a_custom_type_s_check_is_held_to_the_container_memory_limit() {
    require_runc();
    let c = Cluster::start();
    let work = c.work_dir("worker-oom");
    install_local_image(&work.join("resource-types"));
    // `local-image` reads a host path: base types run on the host here.
    let _w = c.worker_with(
        "worker-oom",
        &work,
        &[
            "--default-container-memory",
            "64MiB",
            "--no-process-sandbox",
        ],
    );
    c.wait_until("the worker runs", |ws| has(ws, "worker-oom", "running"));

    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("feed-rootfs");
    feed_image(&rootfs);
    // 256 MiB held in a shell variable: four times the limit.
    executable(
        &rootfs.join("opt/resource/check"),
        "#!/bin/sh\nx=$(head -c 268435456 /dev/zero | tr '\\0' a)\necho '[{\"item\":\"1\"}]'\n",
    );
    let plan = serde_json::json!([
        {"get": "news", "type": "feed", "source": {}}
    ]);
    let types = serde_json::json!([
        {"name": "feed", "type": "local-image", "source": {"path": rootfs.to_str().unwrap()}}
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let build = rt
        .block_on(client.create_build(&hangar_api::builds::CreateBuild {
            name: Some("hungry".into()),
            plan,
            artifacts: Default::default(),
            resource_types: types,
            team: None,
        }))
        .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&watch.stdout),
        String::from_utf8_lossy(&watch.stderr)
    );
    assert!(!watch.status.success(), "{all}");
    assert!(all.contains("out of memory"), "{all}");
    assert!(all.contains("64 MiB"), "{all}");
}
