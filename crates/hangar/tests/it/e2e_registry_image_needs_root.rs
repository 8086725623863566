//! A task whose `image_resource` is `registry-image`, end to end with real
//! parts only: Debian's `docker-registry` on a loopback port holding an
//! image built here (a static busybox, its config naming an env and a
//! user), web and a worker as processes, the worker's built-in
//! `registry-image` type pulling it, and runc running the task inside it.
//! Needs root, runc, busybox-static and docker-registry.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, require_runc, static_busybox, Cluster};
use hangar_images::testing::{
    config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
};

/// Two layers: busybox and its links, then the image's own files (one of
/// them deleted again by a whiteout, so only a correct unpack passes).
fn busybox_image() -> TestImage {
    let busybox = static_busybox();
    let binary = std::fs::read(busybox).unwrap();
    let mut base = TarBuilder::new();
    base.dir("bin").file_mode("bin/busybox", 0o755, &binary);
    for tool in ["sh", "cat", "echo", "id", "ls"] {
        base.symlink(&format!("bin/{tool}"), "busybox");
    }
    for d in ["proc", "dev", "sys", "tmp", "etc"] {
        base.dir(d);
    }
    base.file("etc/stale", b"from the first layer\n");
    let mut top = TarBuilder::new();
    top.dir("etc")
        .file(
            "etc/os-release",
            b"NAME=\"hangar registry test\"\nID=hangar-registry\n",
        )
        .file(
            "etc/passwd",
            b"root:x:0:0::/:/bin/sh\nbuilder:x:4321:4321::/:/bin/sh\n",
        )
        .file("etc/.wh.stale", b"");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    TestImage {
        config: config_json(&["PATH=/bin", "FROM_IMAGE=registry"], "builder", arch),
        layers: vec![
            TestLayer::new(base.finish(), Compression::Gzip),
            TestLayer::new(top.finish(), Compression::Zstd),
        ],
        docker: false,
    }
}

#[test]
fn a_task_runs_in_an_image_pulled_from_a_registry() {
    require_runc();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(async {
        let registry = Registry::start().await;
        registry
            .push_image("test/busybox", Some("1.0"), &busybox_image())
            .await;
        registry
    });

    let c = Cluster::start();
    // The registry is on the host's loopback, which the task network
    // keeps out of reach; the image is still fetched in the sandbox.
    let _w = c.worker_on_host_network("worker-reg");
    c.wait_until("the worker runs", |ws| has(ws, "worker-reg", "running"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("task.yml"),
        format!(
            "platform: linux
image_resource:
  type: registry-image
  source: {{repository: {}/test/busybox, tag: '1.0', insecure: true}}
run:
  path: sh
  args: [-c, 'cat /etc/os-release; ls /etc; echo $FROM_IMAGE; id -u']
",
            registry.addr
        ),
    )
    .unwrap();
    let run = || {
        let o = c.cli_in(dir.path(), &["execute", "-c", "task.yml"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{out}\n{err}");
        (out, err)
    };
    let (out, err) = run();
    assert!(out.contains("ID=hangar-registry"), "{out}\n{err}");
    assert!(
        !out.contains("stale"),
        "the whiteout was not applied: {out}"
    );
    assert!(out.contains("registry\n4321\n"), "{out}");
    assert!(err.contains("fetched version"), "{err}");
    // The pull's progress is in the build log `execute` prints: the
    // manifest, then each layer's size and how it was applied.
    assert!(
        out.contains("registry-image: manifest sha256:") && out.contains("2 layer(s)"),
        "{out}\n{err}"
    );
    assert!(out.contains("registry-image: layer 1/2 "), "{out}");
    assert!(
        out.contains("registry-image: layer 2/2 applied (zstd"),
        "{out}"
    );
    assert!(err.contains("fetching image"), "{err}");
    let (out, err) = run();
    assert!(out.contains("ID=hangar-registry"), "{out}\n{err}");
    assert!(err.contains("found in the cache"), "{err}");
    drop(registry);
}
