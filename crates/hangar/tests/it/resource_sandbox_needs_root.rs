//! On a worker whose process tasks run in the sandbox (root, runc,
//! cgroups), the actions of base types in hangar's layout (the built-in
//! types, which run this binary, and a type of the test's own) run in it
//! too: `no_new_privs`, the seccomp filter, a user namespace in the task
//! range, the host's system dirs and nothing else of its disk, the task
//! network. Each attack is carried out against that worker and, as the
//! control that proves it is one, against a worker whose actions run on
//! the host as before. Needs root, runc and cgroups.

// Tests block freely: each runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hangar_api::resources::{ResourceAction, ResourceActionResult};
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::{ContainerManager, ContainerOptions};
use hangar_worker::resources_api::ResourceRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";
const SECRET: &str = "the-workers-own-secret-4242";

/// A type of hangar's layout: says what its process is allowed and what
/// of the worker's disk it sees.
const PROBE: &str = r#"#!/bin/sh
cat >/dev/null
grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status >&2
read a b c < /proc/self/uid_map
echo "uid_map $a $b $c" >&2
echo "uid $(id -u) home $HOME tmp $TMPDIR cwd $(pwd)" >&2
if cat "$SECRET_FILE" >&2 2>/dev/null; then echo "read the secret" >&2; fi
echo "work dir holds: $(ls "$WORK_DIR" 2>/dev/null | tr '\n' ' ')." >&2
echo '[{"ref":"1"}]'
"#;

struct Worker {
    dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    url: String,
    _containers: Option<Arc<ContainerManager>>,
    _stop: tokio_util::sync::DropGuard,
}

/// A worker API with the built-in types and `probe`; `sandboxed` gives it
/// a container manager whose process tasks (and so actions) run in the
/// sandbox, else its actions run on the host as they did before.
async fn worker(sandboxed: bool) -> Worker {
    worker_with(sandboxed, ContainerOptions::default(), &[]).await
}

/// [`worker`] whose container manager is opened with `options`.
async fn worker_with(
    sandboxed: bool,
    options: ContainerOptions,
    resource_dirs: &[PathBuf],
) -> Worker {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root (a root worker's sandbox): run it as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let types = dir.path().join("resource-types");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_hangar"));
    hangar_resources::install_builtin_types(&types, &exe).unwrap();
    let probe = types.join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let script = PROBE
        .replace(
            "$SECRET_FILE",
            &dir.path().join("secret").display().to_string(),
        )
        .replace("$WORK_DIR", &dir.path().display().to_string());
    for action in ["check", "in", "out"] {
        let p = probe.join(action);
        std::fs::write(&p, &script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let actions = ActionDirs::open(&dir.path().join(ACTIONS_DIR)).unwrap();
    let mut runner = ResourceRunner::new(
        Some(types),
        volumes.clone(),
        actions,
        KEY,
        Duration::from_secs(60),
    )
    .with_task_user(hangar_worker::containers::DEFAULT_TASK_IDS)
    .with_hangar_exe(Some(exe))
    .with_resource_dirs(resource_dirs);
    let containers = if sandboxed {
        let root = dir.path().join("containers");
        let v = volumes.clone();
        let manager =
            tokio::task::spawn_blocking(move || ContainerManager::open_with(&root, v, options))
                .await
                .unwrap()
                .unwrap();
        assert!(
            manager.sandboxes_processes(),
            "this test needs runc and cgroups (the process sandbox): run scripts/install-deps"
        );
        let runtime = manager.action_runtime();
        assert!(runtime.is_some(), "no runc");
        runner = runner
            .with_isolation(manager.isolation())
            .with_action_runtime(runtime);
        Some(Arc::new(manager))
    } else {
        None
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let api = VolumeApi::new(volumes.clone(), KEY, Limits::default()).with_resources(runner);
    tokio::spawn(serve(listener, api, stop.clone()));
    Worker {
        dir,
        volumes,
        url,
        _containers: containers,
        _stop: stop.drop_guard(),
    }
}

impl Worker {
    async fn run(
        &self,
        resource_type: &str,
        action: &str,
        volume: Option<&str>,
        request: Value,
    ) -> ResourceActionResult {
        let res = reqwest::Client::new()
            .post(format!("{}/resource-actions", self.url))
            .bearer_auth(KEY)
            .json(&ResourceAction {
                inputs: Default::default(),
                resource_type: resource_type.into(),
                action: action.into(),
                volume: volume.map(Into::into),
                image_volume: None,
                request,
                privileged: false,
            })
            .send()
            .await
            .unwrap();
        let status = res.status();
        let body = res.text().await.unwrap();
        assert!(status.is_success(), "{status}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    fn volume(&self, handle: &str) -> PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, BTreeMap::new())
            .unwrap()
            .path
    }
}

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

/// A repository in volume `handle` of `w` (another build's fetched
/// source), one commit holding the secret.
fn repo_in_a_volume(w: &Worker, handle: &str) -> PathBuf {
    let path = w.volume(handle);
    git(&path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("secret.txt"), SECRET).unwrap();
    git(&path, &["add", "."]);
    git(&path, &["commit", "-q", "-m", "secret"]);
    path
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builtin_types_action_has_no_new_privileges_a_seccomp_filter_and_no_host_user() {
    let w = worker(true).await;
    let out = w.run("probe", "check", None, json!({"source": {}})).await;
    let err = &out.stderr;
    assert_eq!(out.exit_code, 0, "{err}");
    assert!(err.contains("NoNewPrivs:\t1"), "{err}");
    assert!(err.contains("Seccomp:\t2"), "{err}");
    assert!(
        err.contains("uid_map 0 2000000 65536"),
        "root inside is the task range's first id, not the host's root: {err}"
    );
    assert!(
        err.contains("uid 0 home /root tmp /tmp cwd /tmp/build/check"),
        "{err}"
    );
    assert!(
        !err.contains(SECRET) && !err.contains("read the secret"),
        "{err}"
    );
    // Only the way to the type's own dir, bound in: no volume, no secret.
    assert!(err.contains("work dir holds: resource-types ."), "{err}");

    // The control: on the host, as before, the same program reads both.
    let host = worker(false).await;
    let out = host
        .run("probe", "check", None, json!({"source": {}}))
        .await;
    assert!(out.stderr.contains("NoNewPrivs:\t0"), "{}", out.stderr);
    assert!(out.stderr.contains("read the secret"), "{}", out.stderr);
    assert!(out.stderr.contains(" secret "), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_cannot_read_another_volume_or_the_workers_dir_by_a_local_path() {
    let w = worker(true).await;
    let victim = repo_in_a_volume(&w, "victim-volume");
    let data_dir = w.dir.path().display().to_string();
    for (i, uri) in [victim.display().to_string(), data_dir]
        .into_iter()
        .enumerate()
    {
        let out = w
            .run(
                "git",
                "check",
                None,
                json!({"source": {"uri": uri, "branch": "main"}}),
            )
            .await;
        assert_ne!(out.exit_code, 0, "{uri}: {out:?}");
        assert!(
            out.response.as_ref().is_none_or(|r| r == &json!([])),
            "{uri}: no version: {out:?}"
        );
        let dest = format!("dest-{i}");
        let into = w.volume(&dest);
        let got = w
            .run(
                "git",
                "in",
                Some(&dest),
                json!({"source": {"uri": uri, "branch": "main"}, "version": {"ref": "HEAD"}}),
            )
            .await;
        assert_ne!(got.exit_code, 0, "{uri}: {got:?}");
        assert!(!got.stderr.contains(SECRET), "{}", got.stderr);
        assert_eq!(
            files_in(&into),
            Vec::<String>::new(),
            "{uri}: nothing fetched"
        );
        std::fs::remove_dir_all(&into).unwrap();
    }
    // The victim's repository is as it was.
    assert_eq!(
        std::fs::read_to_string(victim.join("secret.txt")).unwrap(),
        SECRET
    );

    // The control: on the host the same source reads the other volume.
    let host = worker(false).await;
    let victim = repo_in_a_volume(&host, "victim-volume");
    let out = host
        .run(
            "git",
            "check",
            None,
            json!({"source": {"uri": victim.display().to_string(), "branch": "main"}}),
        )
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert_eq!(
        out.response.unwrap().as_array().map(Vec::len),
        Some(1),
        "the host's git reads another build's volume"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_image_cannot_reach_a_service_on_the_hosts_loopback() {
    // A service only the host's loopback reaches, counting who connects.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            use tokio::io::AsyncWriteExt;
            let _ = s
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let source =
        json!({"repository": format!("127.0.0.1:{port}/secrets"), "tag": "1", "insecure": true});
    let w = worker(true).await;
    let out = w
        .run("registry-image", "check", None, json!({"source": source}))
        .await;
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the action reached the host's loopback: {}",
        out.stderr
    );

    // The control: on the host the same check connects.
    let host = worker(false).await;
    let out = host
        .run("registry-image", "check", None, json!({"source": source}))
        .await;
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(
        connections.load(Ordering::SeqCst) > 0,
        "the host's check reaches loopback: {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_fetched_in_the_sandbox_keeps_its_owners_within_the_range() {
    use hangar_images::testing::{
        config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
    };
    use std::os::unix::fs::MetadataExt;
    let registry = Registry::start().await;
    let mut layer = TarBuilder::new();
    layer
        .dir("etc")
        .file(
            "etc/passwd",
            b"root:x:0:0::/root:/bin/sh\nbot:x:1000:1000::/home/bot:/bin/sh\n",
        )
        .dir("home")
        .dir_owned("home/bot", 1000, 1000)
        .file_owned("home/bot/notes", 1000, 1000, b"the bot's\n")
        // Past the 65,536 ids a user namespace maps.
        .file_owned("far", 100_000, 100_000, b"far away\n");
    let image = TestImage {
        config: config_json(
            &["PATH=/bin"],
            "",
            match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                other => other,
            },
        ),
        layers: vec![TestLayer::new(layer.finish(), Compression::Gzip)],
        docker: false,
    };
    let (digest, _) = registry.push_image("owners", Some("1"), &image).await;
    // The registry is on the host's loopback: the host's network, the
    // rest of the sandbox as it is.
    let options = ContainerOptions {
        task_network: hangar_worker::containers::TaskNetworkConfig {
            mode: Some(hangar_worker::containers::NetworkMode::Host),
            ..Default::default()
        },
        ..Default::default()
    };
    let w = worker_with(true, options, &[]).await;
    let source =
        json!({"repository": format!("{}/owners", registry.addr), "tag": "1", "insecure": true});
    let dest = w.volume("image");
    let got = w
        .run(
            "registry-image",
            "in",
            Some("image"),
            json!({"source": source, "version": {"digest": digest}}),
        )
        .await;
    assert_eq!(got.exit_code, 0, "{}", got.stderr);
    let owner = |p: &str| {
        let m = std::fs::symlink_metadata(dest.join("rootfs").join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(
        owner("etc/passwd"),
        (2_000_000, 2_000_000),
        "root's, in the range"
    );
    assert_eq!(owner("home/bot"), (2_001_000, 2_001_000));
    assert_eq!(owner("home/bot/notes"), (2_001_000, 2_001_000));
    assert_eq!(
        owner("far"),
        (2_000_000, 2_000_000),
        "past the range: root's"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("rootfs/home/bot/notes")).unwrap(),
        "the bot's\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_and_out_of_a_builtin_type_work_in_the_sandbox_with_the_owners_tasks_need() {
    use std::os::unix::fs::MetadataExt;
    let w = worker(true).await;
    // `in`: what it wrote is the first task user's, the volume's top dir
    // root's alone until a container mounts it.
    let dest = w.volume("fetched");
    let got = w
        .run(
            "mock",
            "in",
            Some("fetched"),
            json!({"source": {"create_files": {"a/b.txt": "hello"}}, "version": {"version": "3"}}),
        )
        .await;
    assert_eq!(got.exit_code, 0, "{}", got.stderr);
    assert_eq!(
        std::fs::read_to_string(dest.join("a/b.txt")).unwrap(),
        "hello"
    );
    for p in ["version", "a", "a/b.txt"] {
        let m = std::fs::symlink_metadata(dest.join(p)).unwrap();
        assert_eq!((m.uid(), m.gid()), (2_000_000, 2_000_000), "{p}");
    }
    let top = std::fs::metadata(&dest).unwrap();
    assert_eq!((top.uid(), top.mode() & 0o7777), (0, 0o700));

    // `out`: an input as a task left it (its top dir taken back, root's
    // 0700), read through /tmp/build/put.
    let input = w.volume("task-output");
    std::fs::write(input.join("v"), "7").unwrap();
    std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o700)).unwrap();
    let res = reqwest::Client::new()
        .post(format!("{}/resource-actions", w.url))
        .bearer_auth(KEY)
        .json(&ResourceAction {
            inputs: [("src".to_string(), "task-output".to_string())].into(),
            resource_type: "mock".into(),
            action: "out".into(),
            volume: None,
            image_volume: None,
            request: json!({"source": {}, "params": {"file": "src/v"}}),
            privileged: false,
        })
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    let put: ResourceActionResult = res.json().await.unwrap();
    assert_eq!(put.exit_code, 0, "{}", put.stderr);
    assert_eq!(
        put.response.unwrap()["version"],
        json!({"version": "7"}),
        "out read its input"
    );
}

/// `--allow-resource-dir`: a local repository the operator allows is read
/// in the sandbox (owned by a user the action's namespace does not map,
/// which git's ownership check would refuse), and one beside it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_dir_s_local_repository_is_read_in_the_sandbox() {
    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("allowed/repo");
    let other = host.path().join("other/repo");
    for dir in [&repo, &other] {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("hello.txt"), "hello").unwrap();
        git(dir, &["add", "."]);
        git(dir, &["commit", "-q", "-m", "first"]);
    }
    let w = worker_with(
        true,
        ContainerOptions::default(),
        &[host.path().join("allowed")],
    )
    .await;
    let source = |dir: &Path| json!({"uri": dir.display().to_string(), "branch": "main"});
    let out = w
        .run("git", "check", None, json!({"source": source(&repo)}))
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let version = out.response.unwrap()[0].clone();
    let into = w.volume("fetched");
    let got = w
        .run(
            "git",
            "in",
            Some("fetched"),
            json!({"source": source(&repo), "version": version}),
        )
        .await;
    assert_eq!(got.exit_code, 0, "{}", got.stderr);
    assert_eq!(
        std::fs::read_to_string(into.join("hello.txt")).unwrap(),
        "hello"
    );
    // Read-only: the action could not change the operator's repository.
    git(&repo, &["fsck", "--no-progress"]);

    let refused = w
        .run("git", "check", None, json!({"source": source(&other)}))
        .await;
    assert_ne!(refused.exit_code, 0, "{refused:?}");
}
