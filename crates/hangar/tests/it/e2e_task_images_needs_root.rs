//! `hangar execute` of a task file with an `image_resource`, end to end:
//! real web and worker processes, the worker with a shell-script resource
//! type that serves a local busybox root filesystem in Concourse's image
//! layout (`rootfs/` and `metadata.json`, what `registry-image`'s `in`
//! writes). The task runs under runc inside that image, with its env and
//! user; the second run finds the image in the worker's cache. Needs root,
//! runc and busybox-static.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{has, require_runc, static_busybox, Cluster};

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A busybox root filesystem that says which image it is.
fn busybox_rootfs(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = static_busybox();
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    for tool in ["sh", "cat", "echo", "id"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
    for d in ["proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    write(
        &dir.join("etc/os-release"),
        "NAME=\"hangar test image\"\nID=hangar-busybox\n",
    );
    write(
        &dir.join("etc/passwd"),
        "root:x:0:0::/:/bin/sh\nbuilder:x:1234:1235::/:/bin/sh\n",
    );
}

/// A resource type `local-image` whose `check` answers one digest and
/// whose `in` copies the root filesystem named by the source's `path` into
/// the image layout, with an env and a user in its `metadata.json`.
fn install_local_image(types: &Path) {
    let path_of = r#"request=$(cat)
path=$(printf '%s' "$request" | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
"#;
    let actions = [
        ("check", r#"printf '[{"digest":"sha256:0123abcd"}]\n'"#),
        (
            "in",
            r#"mkdir "$1/rootfs"
cp -a "$path/." "$1/rootfs/"
printf '{"env":["PATH=/bin","IMAGE_GREETING=from the image","OVERRIDE=image"],"user":"builder"}' > "$1/metadata.json"
echo "unpacked $path" >&2
printf '{"version":{"digest":"sha256:0123abcd"}}\n'"#,
        ),
    ];
    for (action, body) in actions {
        let file = types.join("local-image").join(action);
        write(&file, &format!("#!/bin/sh\nset -eu\n{path_of}{body}\n"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn execute_runs_a_task_inside_the_image_its_image_resource_names() {
    require_runc();
    let c = Cluster::start();
    let work = c.work_dir("worker-img");
    install_local_image(&work.join("resource-types"));
    // `local-image` copies a host path, which the sandbox does not show:
    // base types run on the host here (images still run in the sandbox).
    let _w = c.worker_with("worker-img", &work, &["--no-process-sandbox"]);
    c.wait_until("the worker runs", |ws| has(ws, "worker-img", "running"));

    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("image-rootfs");
    busybox_rootfs(&rootfs);
    write(
        &dir.path().join("task.yml"),
        &format!(
            "platform: linux
image_resource:
  name: test-image
  type: local-image
  source: {{repository: local/busybox, tag: latest, path: {}}}
params: {{OVERRIDE: param}}
run:
  path: sh
  args: [-c, 'cat /etc/os-release; echo $IMAGE_GREETING $OVERRIDE; id -u; pwd']
",
            rootfs.display()
        ),
    );
    let run = || {
        let o = c.cli_in(dir.path(), &["execute", "-c", "task.yml"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{out}\n{err}");
        (out, err)
    };
    let (out, err) = run();
    // The image's own files, not the host's /etc/os-release.
    assert!(out.contains("ID=hangar-busybox"), "{out}\n{err}");
    assert!(out.contains("from the image param\n"), "{out}");
    assert!(out.contains("\n1234\n"), "{out}");
    assert!(out.ends_with("/tmp/build/work\n"), "{out}");
    assert!(err.contains("(runc)"), "{err}");
    // The image's `in` wrote to its stderr: in the build log, before the
    // task's own output.
    let unpacked = out.find(&format!("unpacked {}\n", rootfs.display()));
    let task = out.find("ID=hangar-busybox");
    assert!(unpacked.is_some() && unpacked < task, "{out}");
    assert!(
        err.contains(
            "image test-image (local-image local/busybox:latest): fetched version {\"digest\":\"sha256:0123abcd\"} on worker worker-img"
        ),
        "{err}"
    );

    let (out, err) = run();
    assert!(out.contains("ID=hangar-busybox"), "{out}\n{err}");
    assert!(
        err.contains("found in the cache on worker worker-img"),
        "{err}"
    );
    assert!(!err.contains("unpacked"), "{err}");
}
