//! Task config fields the engine honours: an output that is an input
//! changed in place, a cache's ttl, and what Concourse reads otherwise
//! than hangar did: a task without `run.path` runs its image's
//! ENTRYPOINT/CMD, a `docker://` rootfs_uri is fetched as `registry-image`
//! would, an input named twice is mounted at each of its paths, `cpu: 1`
//! runs with the kernel's minimum (`image_resource` is `task_images.rs`'s).

use std::collections::BTreeMap;

use crate::support::{now, Harness};
use hangar_core::build::BuildStatus;
use serde_json::{json, Value};

fn outputs_of(steps: &[hangar_store::StepRecord], name: &str) -> BTreeMap<String, String> {
    let step = steps.iter().find(|s| s.name == name).expect("the step ran");
    serde_json::from_str(&step.outputs).unwrap()
}

#[tokio::test]
async fn an_output_at_an_inputs_path_is_the_input_changed_in_place() {
    let h = Harness::new(&["w1"]).await;
    let plan = json!([
        {"task": "make", "config": {
            "platform": "linux", "run": {"path": "make"},
            "outputs": [{"name": "repo"}]}},
        {"task": "change", "config": {
            "platform": "linux", "run": {"path": "change"},
            "inputs": [{"name": "repo"}],
            "outputs": [{"name": "repo"}, {"name": "notes", "path": "repo-notes"}]}},
        {"task": "read", "config": {
            "platform": "linux", "run": {"path": "read"},
            "inputs": [{"name": "repo"}]}}
    ]);
    let id = h.submit(plan).await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let steps = h.store.build_steps(id).await.unwrap();
    let made = outputs_of(&steps, "make")["repo"].clone();
    let changed = outputs_of(&steps, "change");
    // The changed repo is the copy the task was given of the one made
    // before, not a fresh empty volume beside it.
    let repo = h.store.get_volume(&changed["repo"]).await.unwrap().unwrap();
    assert_eq!(repo.parent.as_deref(), Some(made.as_str()));
    assert!(h.fake.volumes_on("w1").contains(&repo.handle));
    assert_ne!(changed["notes"], changed["repo"]);
    // `change` made one copy (its input) and one empty volume (notes).
    let creates = h.fake.calls_of("create_volume");
    assert_eq!(
        creates,
        [
            "create_volume w1 empty", // make: repo
            "create_volume w1 cow",   // change: repo, changed in place
            "create_volume w1 empty", // change: notes
            "create_volume w1 cow",   // read: repo
        ]
    );
}

fn cached_plan(ttl: Option<&str>) -> serde_json::Value {
    let mut cache = json!({"path": "deps"});
    if let Some(ttl) = ttl {
        cache["ttl"] = json!(ttl);
    }
    json!([{"task": "t", "config": {
        "platform": "linux", "run": {"path": "build"}, "caches": [cache]}}])
}

#[tokio::test]
async fn a_cache_unused_for_longer_than_its_ttl_starts_empty() {
    let h = Harness::new(&["w1"]).await;
    let first = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    let caches = |h: &Harness| {
        let h = h.store.clone();
        async move {
            h.list_volumes(None)
                .await
                .unwrap()
                .into_iter()
                .filter(|v| v.owner_kind.as_str() == "task-cache" && v.state.as_str() == "created")
                .map(|v| v.handle)
                .collect::<Vec<_>>()
        }
    };
    let old = caches(&h).await;
    assert_eq!(old.len(), 1);

    // Used 30 s ago: within the ttl, reused.
    h.store
        .mark_volumes_used(&old, now() - 30_000)
        .await
        .unwrap();
    let second = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(second).await, BuildStatus::Succeeded);
    assert!(h
        .log(second, &["infra"])
        .await
        .contains(&"infra: reusing cache deps on worker w1".to_string()));
    assert_eq!(caches(&h).await, old);

    // Unused for 2 minutes: past the ttl, released and started empty.
    h.store
        .mark_volumes_used(&old, now() - 120_000)
        .await
        .unwrap();
    let third = h.submit(cached_plan(Some("1m"))).await;
    assert_eq!(h.finished(third).await, BuildStatus::Succeeded);
    let log = h.log(third, &["infra"]).await;
    assert!(
        log.iter().any(
            |l| l.starts_with("infra: cache deps on worker w1 was unused for 2m")
                && l.ends_with("longer than its ttl: starting it empty")
        ),
        "{log:#?}"
    );
    let now_caches = caches(&h).await;
    assert_eq!(now_caches.len(), 1);
    assert_ne!(now_caches, old);

    // Without a ttl, the same idle cache is reused.
    h.store
        .mark_volumes_used(&now_caches, now() - 3_600_000)
        .await
        .unwrap();
    let fourth = h.submit(cached_plan(None)).await;
    assert_eq!(h.finished(fourth).await, BuildStatus::Succeeded);
    assert_eq!(caches(&h).await, now_caches);
}

fn image() -> Value {
    json!({"type": "mock", "source": {"repository": "app"}})
}

#[tokio::test]
async fn a_task_without_run_path_runs_its_image_s_entrypoint_and_cmd_then_its_args() {
    let h = Harness::new(&["w1"]).await;
    h.fake.put_file(
        "metadata.json",
        br#"{"env": ["A=b"], "entrypoint": ["/bin/app", "serve"], "cmd": ["--port", "80"]}"#,
    );
    let id = h
        .submit(json!([{"task": "t", "config": {
            "platform": "linux", "image_resource": image(), "run": {"args": ["-v"]},
        }}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    // Read from the task's own root filesystem, on its worker.
    assert_eq!(h.fake.calls_of("read_file w1 metadata.json").len(), 1);
    let specs = h.fake.container_specs();
    assert_eq!(specs[0].1.path, "/bin/app");
    assert_eq!(specs[0].1.args, ["serve", "--port", "80", "-v"]);
}

#[tokio::test]
async fn a_task_whose_image_has_no_command_fails_with_concourse_s_words() {
    let h = Harness::new(&["w1"]).await;
    // An image without metadata.json, then one without a command.
    for metadata in [None, Some(&br#"{"env": []}"#[..])] {
        if let Some(m) = metadata {
            h.fake.put_file("metadata.json", m);
        }
        let id = h
            .submit(
                json!([{"task": "t", "config": {"platform": "linux", "image_resource": image()}}]),
            )
            .await;
        assert_eq!(h.finished(id).await, BuildStatus::Failed);
        let log = h.log(id, &["step"]).await.join("\n");
        let want = match metadata {
            None => {
                "run.path: not given, and the image's metadata.json (its ENTRYPOINT/CMD) \
                     cannot be read: path \"metadata.json\" not found in the volume"
            }
            Some(_) => "run.path: No executable defined for task.",
        };
        assert!(log.contains(want), "{log}");
    }
    // No container was made for either.
    assert!(h.fake.calls_of("create_container").is_empty());
    // Nor for a task with no image at all: it is refused as it is read.
    let id = h
        .submit(json!([{"task": "t", "config": {"platform": "linux"}}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Failed);
    let log = h.log(id, &["step"]).await.join("\n");
    assert!(log.contains("No executable defined for task"), "{log}");
}

#[tokio::test]
async fn a_docker_rootfs_uri_is_fetched_with_registry_image() {
    let h = Harness::new(&[]).await;
    let w1 = hangar_store::WorkerInfo {
        resource_types_json: r#"[{"type":"registry-image","path":"/fake/registry-image"}]"#.into(),
        ..crate::support::info("w1", "sid-w1")
    };
    h.store.register_worker(&w1, now()).await.unwrap();
    let id = h
        .submit(json!([{"task": "t", "config": {
            "platform": "linux", "rootfs_uri": "docker:///busybox#1.36", "run": {"path": "true"},
        }}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(
        h.fake
            .calls_of("resource_action w1 registry-image in")
            .len(),
        1
    );
    let log = h.log(id, &["step"]).await;
    assert!(
        log.contains(
            &"step: fetching image (registry-image busybox:1.36) on worker w1".to_string()
        ),
        "{log:#?}"
    );
    let specs = h.fake.container_specs();
    assert_eq!(specs[0].1.runtime, hangar_api::containers::Runtime::Runc);
    // It has run.path: the image's command is not read.
    assert!(h.fake.calls_of("read_file").is_empty());
}

#[tokio::test]
async fn an_input_named_twice_is_mounted_at_each_of_its_paths() {
    let h = Harness::new(&["w1"]).await;
    let id = h
        .submit(json!([
            {"get": "repo", "type": "mock", "source": {}},
            {"task": "t", "config": {
                "platform": "linux",
                "inputs": [
                    {"name": "repo"},
                    {"name": "repo", "path": "./repo/"},
                    {"name": "repo", "path": "src/repo"},
                ],
                "outputs": [{"name": "changed", "path": "src/repo"}],
                "run": {"path": "true"},
            }},
        ]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    let specs = h.fake.container_specs();
    let mut paths: Vec<&str> = specs[0].1.mounts.iter().map(|m| m.path.as_str()).collect();
    paths.sort();
    // The output at the second path is that copy of the input, changed.
    assert_eq!(paths, ["repo", "src/repo"]);
}

#[tokio::test]
async fn cpu_shares_are_brought_into_the_kernel_s_range_and_old_attempts_still_read() {
    let h = Harness::new(&["w1"]).await;
    let id = h
        .submit(json!([{"task": "t", "config": {
            "platform": "linux", "run": {"path": "true"},
            "container_limits": {"cpu": 1}, "attempts": 2,
        }}]))
        .await;
    assert_eq!(h.finished(id).await, BuildStatus::Succeeded);
    assert_eq!(h.fake.container_specs()[0].1.cpu_shares, Some(2));
}

#[tokio::test]
async fn another_team_s_job_of_the_same_names_never_gets_this_team_s_cache() {
    let h = Harness::new(&["w1"]).await;
    let first = h.submit(cached_plan(None)).await;
    assert_eq!(h.finished(first).await, BuildStatus::Succeeded);
    // Team other's build is named alike, runs a task named alike with the
    // same cache path, on the same worker: a cache of its own.
    h.store.create_team("other", now()).await.unwrap();
    let theirs = h
        .store
        .create_build(
            "job",
            Some("other"),
            &cached_plan(None).to_string(),
            "{}",
            now(),
        )
        .await
        .unwrap()
        .id;
    h.engine.wake();
    assert_eq!(h.finished(theirs).await, BuildStatus::Succeeded);
    let log = h.log(theirs, &["infra"]).await;
    assert!(!log.iter().any(|l| l.contains("reusing cache")), "{log:#?}");
    let caches: Vec<String> = h
        .store
        .list_volumes(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|v| v.owner_kind.as_str() == "task-cache" && v.state.as_str() == "created")
        .map(|v| v.owner_id.unwrap_or_default())
        .collect();
    assert_eq!(caches.len(), 2, "{caches:?}");
    // And the first team's next build still finds its own.
    let again = h.submit(cached_plan(None)).await;
    assert_eq!(h.finished(again).await, BuildStatus::Succeeded);
    assert!(h
        .log(again, &["infra"])
        .await
        .contains(&"infra: reusing cache deps on worker w1".to_string()));
}
