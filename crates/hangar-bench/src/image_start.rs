//! The second half of `hangar bench image`: how soon a task whose
//! `image_resource` is already in the worker's cache runs. Web and a
//! worker as processes, a small busybox image in the local registry; one
//! untimed build fetches the image, then each timed build runs a task in
//! it under runc.
//!
//! Every figure is read from the build's own events, on web's clock:
//! placement is the step event `fetching image … on worker …` (logged as
//! soon as the step has its worker); `running on worker …` is logged once
//! the worker has started runc for the container; the task's first output
//! line (`echo started`, its first command) shows the container's process
//! really running. Between placement and the runtime: the image's version
//! (a check, or the reuse of one younger than the check interval, as
//! Concourse), the cache lookup and a copy-on-write child of the cached
//! image; then runc sets the container up and starts the process.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use hangar_api::builds::{BuildEventKind, CreateBuild};
use hangar_client::Client;
use hangar_images::testing::{Compression, Registry, TarBuilder, TestImage, TestLayer};
use hangar_images::Platform;

use crate::procs::{self, WebSpec, WorkerSpec};
use crate::stats::Summary;

/// Why the task-start half cannot run here, if it cannot.
pub(crate) fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("runc containers need root".into());
    }
    if !crate::image::on_path("runc") {
        return Some("runc is not installed (Debian package runc)".into());
    }
    if static_busybox().is_none() {
        return Some("a static busybox is needed (Debian package busybox-static)".into());
    }
    None
}

fn static_busybox() -> Option<&'static Path> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
}

/// A one-layer image: busybox and a shell.
fn busybox_image() -> anyhow::Result<TestImage> {
    let busybox = std::fs::read(static_busybox().context("no static busybox")?)?;
    let mut tar = TarBuilder::new();
    tar.dir("bin")
        .file_mode("bin/busybox", 0o755, &busybox)
        .symlink("bin/sh", "busybox");
    for d in ["proc", "dev", "sys", "tmp", "etc"] {
        tar.dir(d);
    }
    tar.file("etc/passwd", b"root:x:0:0::/:/bin/sh\n");
    let config = serde_json::json!({
        "architecture": Platform::host().architecture,
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    Ok(TestImage {
        config: serde_json::to_vec(&config)?,
        layers: vec![TestLayer::new(tar.finish(), Compression::Gzip)],
        docker: false,
    })
}

fn task_plan(registry: &str) -> serde_json::Value {
    serde_json::json!([{
        "task": "in-image",
        "config": {
            "platform": "linux",
            "image_resource": {
                "type": "registry-image",
                "source": {"repository": format!("{registry}/bench/busybox"), "tag": "1", "insecure": true}
            },
            "run": {"path": "sh", "args": ["-c", "echo started"]}
        }
    }])
}

/// One build's moments (web's clock, ms).
struct Moments {
    placed: i64,
    runtime_started: i64,
    first_output: i64,
    /// The image came from the worker's cache.
    cached: bool,
}

async fn follow(client: &Client, id: i64) -> anyhow::Result<Moments> {
    let (mut placed, mut running, mut first, mut cached) = (None, None, None, false);
    let mut after = 0;
    loop {
        let page = client.build_events(id, after, 10_000).await?;
        for e in &page.events {
            after = after.max(e.id);
            if e.kind == BuildEventKind::Log && e.payload.contains("started") && first.is_none() {
                first = Some(e.at);
            }
            if e.kind != BuildEventKind::Step {
                continue;
            }
            if placed.is_none() && e.payload.starts_with("fetching image") {
                placed = Some(e.at);
            }
            if e.payload.contains("found in the cache") {
                cached = true;
            }
            if running.is_none() && e.payload.starts_with("running on worker") {
                running = Some(e.at);
            }
        }
        if page.status.is_final() && page.events.is_empty() {
            if page.status.to_string() != "succeeded" {
                bail!("build {id} ended {}", page.status);
            }
            match (placed, running, first) {
                (Some(placed), Some(runtime_started), Some(first_output)) => {
                    return Ok(Moments {
                        placed,
                        runtime_started,
                        first_output,
                        cached,
                    })
                }
                _ => bail!("build {id} lacks its placement, running or output event"),
            }
        }
    }
}

/// What [`measure`] found, ms after placement.
pub(crate) struct TaskStart {
    pub(crate) runtime_started: Summary,
    pub(crate) first_output: Summary,
}

/// Placement to running, in ms, for `runs` builds on a cached image.
pub(crate) async fn measure(bin: &Path, dir: &Path, runs: usize) -> anyhow::Result<TaskStart> {
    let registry = Registry::start().await;
    registry
        .push_image("bench/busybox", Some("1"), &busybox_image()?)
        .await;
    let spec = WebSpec::new(bin, dir)?;
    let mut web = spec.start().await?;
    let mut worker_spec = WorkerSpec::new(bin, dir, "image-worker", &spec.url());
    worker_spec.heartbeat_interval = Duration::from_secs(1);
    // The registry is on the host's loopback, which the task network does
    // not reach: the image's check and fetch share the host's network.
    worker_spec
        .extra_args
        .extend(["--task-network".into(), "host".into()]);
    let mut worker = worker_spec.start()?;
    let client = procs::admin_client(&spec.url(), Duration::from_secs(60))?;
    let result = async {
        procs::wait_for_state(&client, "image-worker", "running", Duration::from_secs(60)).await?;
        let (mut runtime, mut output) = (Vec::new(), Vec::new());
        // The first build fetches the image; the rest find it cached.
        for n in 0..=runs {
            let build = client
                .create_build(&CreateBuild {
                    resource_types: serde_json::Value::Null,
                    name: Some("image-start".into()),
                    plan: task_plan(&registry.addr),
                    artifacts: BTreeMap::new(),
                    team: None,
                })
                .await?;
            let m = follow(&client, build.id).await?;
            if n == 0 {
                continue;
            }
            if !m.cached {
                bail!(
                    "build {} fetched the image again instead of using the cache",
                    build.id
                );
            }
            let started = (m.runtime_started - m.placed) as f64;
            let first = (m.first_output - m.placed) as f64;
            eprintln!(
                "bench image: task on a cached image {n}: runc started {started:.0} ms, \
                 first output {first:.0} ms after placement"
            );
            runtime.push(started);
            output.push(first);
        }
        Ok(TaskStart {
            runtime_started: Summary::of(&runtime),
            first_output: Summary::of(&output),
        })
    }
    .await;
    worker.stop(Duration::from_secs(10)).await;
    web.stop(Duration::from_secs(10)).await;
    result
}
