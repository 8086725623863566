//! A pipeline as users write them, end to end against a real local
//! registry (Debian's `docker-registry`): a `time` resource triggers the
//! job by itself; a task runs `across` two values in an image the
//! registry serves (`registry-image`); a `put` goes to a custom resource
//! type whose image comes from the same registry, and its `out` answers
//! the version recorded for the resource. Needs root, runc, busybox-static
//! and docker-registry.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, json_of, require_runc, static_busybox, text, wait_for, Cluster};
use hangar_images::testing::{
    config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
};

/// One image for both uses: busybox for the tasks, and in
/// `/opt/resource` a type whose `out` answers the content of the input
/// file `params.file` names as the version `item`.
fn feed_image() -> TestImage {
    let busybox = std::fs::read(static_busybox()).unwrap();
    let mut tar = TarBuilder::new();
    tar.dir("bin/").file_mode("bin/busybox", 0o755, &busybox);
    for tool in ["sh", "cat", "echo", "sed", "tr"] {
        tar.symlink(&format!("bin/{tool}"), "busybox");
    }
    for d in [
        "proc/",
        "dev/",
        "sys/",
        "tmp/",
        "etc/",
        "opt/",
        "opt/resource/",
    ] {
        tar.dir(d);
    }
    tar.file("etc/passwd", b"root:x:0:0::/root:/bin/sh\n");
    tar.file_mode(
        "opt/resource/check",
        0o755,
        b"#!/bin/sh\ncat > /dev/null\necho '[]'\n",
    );
    tar.file_mode(
        "opt/resource/out",
        0o755,
        br#"#!/bin/sh
request=$(cat)
file=$(printf '%s' "$request" | sed -n 's/.*"file":"\([^"]*\)".*/\1/p')
item=$(cat "$1/$file" | tr -d '\n')
echo "feed out: pushing $item" >&2
printf '{"version":{"item":"%s"},"metadata":[{"name":"by","value":"feed"}]}\n' "$item"
"#,
    );
    tar.file_mode(
        "opt/resource/in",
        0o755,
        br#"#!/bin/sh
request=$(cat)
item=$(printf '%s' "$request" | sed -n 's/.*"item":"\([^"]*\)".*/\1/p')
echo "$item" > "$1/item"
printf '{"version":{"item":"%s"}}\n' "$item"
"#,
    );
    TestImage {
        config: config_json(&["PATH=/bin"], "", "amd64"),
        layers: vec![TestLayer::new(tar.finish(), Compression::Gzip)],
        docker: false,
    }
}

#[test]
fn a_time_triggered_job_runs_across_and_puts_to_a_custom_type_from_a_registry() {
    require_runc();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = rt.block_on(Registry::start());
    rt.block_on(registry.push_image("feed", Some("1"), &feed_image()));
    let image = format!(
        "{{type: registry-image, source: {{repository: \"{}/feed\", tag: \"1\", insecure: true}}}}",
        registry.addr
    );

    let c = Cluster::start();
    // The registry is on the host's loopback, which the task network
    // keeps out of reach; the image is still fetched in the sandbox.
    let _w = c.worker_on_host_network("worker-r");
    c.wait_until("the worker runs", |ws| has(ws, "worker-r", "running"));
    let dir = c.dir.path();
    std::fs::write(
        dir.join("pipeline.yml"),
        format!(
            r#"
resource_types:
- name: feed
  type: registry-image
  source: {{repository: "{addr}/feed", tag: "1", insecure: true}}
resources:
- name: tick
  type: time
  source: {{interval: 1s}}
  check_every: 1s
- name: news
  type: feed
  source: {{channel: releases}}
jobs:
- name: release
  plan:
  - get: tick
    trigger: true
  - task: greet
    across:
    - var: lang
      values: [en, fr]
      max_in_flight: all
    config:
      platform: linux
      image_resource: {image}
      params: {{LANG_CODE: ((.:lang))}}
      run: {{path: sh, args: [-c, 'echo "greeting in $LANG_CODE"']}}
  - task: make
    config:
      platform: linux
      image_resource: {image}
      outputs: [{{name: src}}]
      run: {{path: sh, args: [-c, "echo v7 > src/item"]}}
  - put: news
    params: {{file: src/item}}
"#,
            addr = registry.addr
        ),
    )
    .unwrap();
    let set = c.cli_in(
        dir,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            "pipeline.yml",
            "--non-interactive",
        ],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    let unpause = c.cli(&["unpause-pipeline", "-p", "p"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    // Nobody triggers it: the time resource's first version does.
    let build = wait_for(
        "a finished build of release",
        Duration::from_secs(180),
        || {
            let builds = json_of(&c, &["builds", "-j", "p/release", "--json"]);
            builds.as_array().and_then(|all| {
                all.iter()
                    .rev()
                    .find(|b| b["status"] != "pending" && b["status"] != "started")
                    .cloned()
            })
        },
    );
    let watched = c.cli(&["watch", "-b", &build["id"].to_string()]);
    let (out, err) = text(&watched);
    assert_eq!(build["status"], "succeeded", "{build}\n{out}\n{err}");
    let all = format!("{out}\n{err}");
    // Each value of the across ran, in the image from the registry.
    assert!(all.contains("greeting in en"), "{all}");
    assert!(all.contains("greeting in fr"), "{all}");
    // The put ran `out` in the custom type's image and its version is
    // the resource's now.
    assert!(all.contains("feed out: pushing v7"), "{all}");
    assert!(all.contains(r#"pushed version {"item":"v7"}"#), "{all}");
    let versions = json_of(&c, &["resource-versions", "-r", "p/news", "--json"]);
    assert!(
        versions
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["version"] == serde_json::json!({"item": "v7"})),
        "{versions}"
    );
}
