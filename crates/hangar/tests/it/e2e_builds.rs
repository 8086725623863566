//! Builds end to end with real processes: `hangar execute` from a directory,
//! get steps from a local git repository, memory limits under both
//! runtimes, bad configs, and a step retried when its worker dies.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{has, require_runc, static_busybox, Cluster, ADMIN};
use hangar_client::Client;
use nix::sys::signal::Signal;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn started(c: &Cluster, workers: &[&str]) {
    c.wait_until("the workers run", |ws| {
        workers.iter().all(|w| has(ws, w, "running"))
    });
}

const TASK: &str = r#"
platform: linux
inputs: [{name: src}]
outputs: [{name: out}]
caches: [{path: cache}]
params: {GREETING: hello}
run:
  path: sh
  args:
  - -c
  - |
    cat src/input.txt
    if [ -f cache/seen ]; then echo "cache was warm"; else echo "cache was cold"; fi
    touch cache/seen
    echo "$GREETING from the task" > out/result.txt
    exit "$(cat src/code)"
"#;

#[test]
fn execute_runs_a_task_with_an_input_an_output_and_a_cache_reused_next_time() {
    let c = Cluster::start();
    let _w = c.worker("worker-b1");
    started(&c, &["worker-b1"]);
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "task.yml", TASK);
    write(dir.path(), "src/input.txt", "an input line\n");
    write(dir.path(), "src/code", "0");

    let first = c.cli_in(
        dir.path(),
        &[
            "execute", "-c", "task.yml", "-i", "src=src", "-o", "out=out",
        ],
    );
    let (out, err) = text(&first);
    assert!(first.status.success(), "{out}\n{err}");
    assert!(
        out.contains("an input line") && out.contains("cache was cold"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/result.txt")).unwrap(),
        "hello from the task\n"
    );

    write(dir.path(), "src/code", "3");
    let second = c.cli_in(dir.path(), &["execute", "-c", "task.yml", "-i", "src=src"]);
    let (out, err) = text(&second);
    assert!(out.contains("cache was warm"), "{out}\n{err}");
    assert!(
        err.contains("reusing cache cache on worker worker-b1"),
        "{err}"
    );
    assert_eq!(
        second.status.code(),
        Some(3),
        "execute exits with the task's code"
    );
    // The reuse is recorded, so the caches collector counts its retention
    // from this use, not from the cache's creation.
    let volumes: Vec<hangar_api::Volume> =
        serde_json::from_slice(&c.cli(&["volumes", "--json"]).stdout).unwrap();
    let cache = volumes
        .iter()
        .find(|v| v.owner_kind.to_string() == "task-cache")
        .expect("a task cache row");
    assert!(
        cache.last_used_at.is_some_and(|t| t > cache.created_at),
        "{cache:?}"
    );

    let builds = c.cli(&["builds", "--json"]);
    let builds: Vec<hangar_api::builds::Build> = serde_json::from_slice(&builds.stdout).unwrap();
    let states: Vec<&str> = builds.iter().map(|b| b.status.as_str()).collect();
    assert_eq!(states, ["failed", "succeeded"]);
}

#[test]
fn a_get_of_a_local_git_repository_feeds_a_task_and_is_cached() {
    let c = Cluster::start();
    // The repository is a local path, which the sandbox does not show.
    let _w = c.worker_outside_sandbox("worker-g");
    started(&c, &["worker-g"]);
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.email=e2e@hangar", "-c", "user.name=e2e"])
            .args(args)
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(&["init", "-q"]);
    write(repo.path(), "README", "from git\n");
    git(&["add", "."]);
    git(&["commit", "-qm", "first"]);
    let plan = serde_json::json!([
        {"get": "repo", "type": "git", "source": {"uri": repo.path().display().to_string()}},
        {"task": "show", "config": {"platform": "linux", "inputs": [{"name": "repo"}],
            "run": {"path": "cat", "args": ["repo/README"]}}}
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    for round in 0..2 {
        let build = block(client.create_build(&hangar_api::builds::CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some("git-job".into()),
            plan: plan.clone(),
            artifacts: Default::default(),
            team: None,
        }))
        .unwrap();
        let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
        let (out, err) = text(&watch);
        assert!(watch.status.success(), "{out}\n{err}");
        assert_eq!(out, "from git\n");
        if round == 1 {
            assert!(
                err.contains("found in the cache on worker worker-g"),
                "{err}"
            );
        }
    }
}

#[test]
fn a_task_over_its_memory_limit_fails_with_an_oom_message_under_the_process_runtime() {
    let c = Cluster::start();
    let _w = c.worker("worker-m");
    started(&c, &["worker-m"]);
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "task.yml",
        "platform: linux\ncontainer_limits: {memory: 32MB}\nrun:\n  path: sh\n  args: [-c, \"x=$(head -c 200000000 /dev/zero | tr '\\\\0' a); echo survived\"]\n",
    );
    let o = c.cli_in(dir.path(), &["execute", "-c", "task.yml"]);
    let (out, err) = text(&o);
    assert!(!o.status.success());
    assert!(!out.contains("survived"), "{out}");
    assert!(
        err.contains("killed: out of memory (memory limit 32 MiB)"),
        "{err}"
    );
}

/// A busybox root filesystem for runc tasks.
fn busybox_rootfs(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = static_busybox();
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    for tool in ["sh", "cat", "head", "tr", "echo", "ls"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
    for d in ["proc", "dev", "sys", "tmp", "etc"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
}

#[test]
fn runc_tasks_run_in_their_image_and_report_an_oom_even_when_the_main_process_exits_zero() {
    require_runc();
    let c = Cluster::start();
    let _w = c.worker("worker-r");
    started(&c, &["worker-r"]);
    let dir = tempfile::tempdir().unwrap();
    busybox_rootfs(&dir.path().join("rootfs"));
    write(dir.path(), "src/hello", "inside runc\n");
    write(
        dir.path(),
        "ok.yml",
        "platform: linux\ninputs: [{name: src}]\nrun: {path: /bin/sh, args: [-c, 'cat src/hello; ls /bin/busybox']}\n",
    );
    let o = c.cli_in(
        dir.path(),
        &[
            "execute", "-c", "ok.yml", "-i", "src=src", "--image", "rootfs",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("inside runc") && out.contains("/bin/busybox"),
        "{out}"
    );
    assert!(err.contains("(runc)"), "{err}");

    write(
        dir.path(),
        "oom.yml",
        "platform: linux\ncontainer_limits: {memory: 32MB}\nrun: {path: /bin/sh, args: [-c, \"sh -c 'x=$(head -c 200000000 /dev/zero | tr \\\"\\\\\\\\0\\\" a)'; exit 0\"]}\n",
    );
    let o = c.cli_in(
        dir.path(),
        &["execute", "-c", "oom.yml", "--image", "rootfs"],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("killed: out of memory (memory limit 32 MiB)"),
        "{err}"
    );
}

#[test]
fn bad_task_configs_name_the_field_and_a_missing_image_fails_with_that_reason() {
    let c = Cluster::start();
    // Images may be imported from this dir only.
    let images = c.dir.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let images_flag = images.display().to_string();
    let _w = c.worker_with(
        "worker-x",
        &c.work_dir("worker-x"),
        &["--allow-import-dir", &images_flag],
    );
    started(&c, &["worker-x"]);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "platform: linux\nrun: {paht: sh}\n",
            "run: unknown field \"paht\"",
        ),
        ("platform: linux\nrun: {args: [x]}\n", "run.path"),
        (
            "platform: linux\ninputs: [{name: 'bad name'}]\nrun: {path: sh}\n",
            "inputs[0].name",
        ),
        (
            "platform: linux\ncontainer_limits: {memory: lots}\nrun: {path: sh}\n",
            "container_limits.memory",
        ),
    ];
    for (yaml, expected) in cases {
        write(dir.path(), "bad.yml", yaml);
        let o = c.cli_in(dir.path(), &["execute", "-c", "bad.yml"]);
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert!(err.contains(expected), "{yaml}: {err}");
    }
    write(
        dir.path(),
        "noimage.yml",
        &format!("platform: linux\nrootfs_uri: {images_flag}/missing\nrun: {{path: /bin/sh}}\n"),
    );
    let o = c.cli_in(dir.path(), &["execute", "-c", "noimage.yml"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!(
            "image {images_flag}/missing does not exist on worker worker-x"
        )),
        "{err}"
    );
    // Outside the allowed dir, the worker refuses to import at all.
    write(
        dir.path(),
        "hostimage.yml",
        "platform: linux\nrootfs_uri: /etc\nrun: {path: /bin/sh}\n",
    );
    let o = c.cli_in(dir.path(), &["execute", "-c", "hostimage.yml"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("image /etc cannot be imported on worker worker-x")
            && err.contains("outside the directories"),
        "{err}"
    );
}

#[test]
fn a_step_whose_worker_is_killed_is_retried_on_another_worker_and_the_build_succeeds() {
    let c = Cluster::start();
    let a = c.worker("worker-k1");
    let b = c.worker("worker-k2");
    started(&c, &["worker-k1", "worker-k2"]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let build = block(client.create_build(&hangar_api::builds::CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("retry-job".into()),
        plan: serde_json::json!([{"task": "slow", "config": {"platform": "linux",
            "run": {"path": "sh", "args": ["-c", "echo begun; sleep 4; echo finished"]}}}]),
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap();
    // Wait until the step runs somewhere, then kill that worker.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let b = block(client.build(build.id)).unwrap();
        if let Some(w) = b.steps.first().and_then(|s| s.worker.clone()) {
            break w;
        }
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (victim, survivor) = if first == "worker-k1" { (a, b) } else { (b, a) };
    victim.signal(Signal::SIGKILL);
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = text(&watch);
    assert!(watch.status.success(), "{out}\n{err}");
    assert!(out.ends_with("finished\n"), "{out}");
    // Killed while the container starts, web loses the call; killed once it
    // runs, the worker stalls. Either way the log names the worker and why.
    assert!(
        err.contains(&format!("worker {first} stalled"))
            || err.contains(&format!("worker {first} could not be reached")),
        "{err}"
    );
    assert!(err.contains("retrying task slow (attempt 2 of 3)"), "{err}");
    let done = block(client.build(build.id)).unwrap();
    assert_eq!(done.status.to_string(), "succeeded");
    assert_eq!(
        done.steps[0].worker.as_deref(),
        Some(survivor.name.as_str())
    );
    assert!(!format!("{out}{err}").contains("disappeared"));
}

#[test]
fn a_put_pushes_a_task_s_commit_to_a_git_repository_and_gets_it_back() {
    let c = Cluster::start();
    // The repository is a local path, which the sandbox does not show.
    let _w = c.worker_outside_sandbox("worker-p");
    started(&c, &["worker-p"]);
    let dir = tempfile::tempdir().unwrap();
    let origin = dir.path().join("origin");
    let bare = dir.path().join("bare.git");
    let git = |cwd: &Path, args: &[&str]| -> String {
        let o = std::process::Command::new("git")
            .args(["-c", "user.email=e2e@hangar", "-c", "user.name=e2e"])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    std::fs::create_dir(&origin).unwrap();
    git(&origin, &["init", "-q", "--initial-branch=main"]);
    write(&origin, "README", "first\n");
    git(&origin, &["add", "."]);
    git(&origin, &["commit", "-qm", "first"]);
    git(dir.path(), &["clone", "-q", "--bare", "origin", "bare.git"]);
    let source = serde_json::json!({"uri": bare.display().to_string(), "branch": "main"});
    let plan = serde_json::json!([
        {"get": "repo", "type": "git", "source": source},
        {"task": "commit", "config": {"platform": "linux",
            "inputs": [{"name": "repo"}], "outputs": [{"name": "repo"}],
            "run": {"path": "sh", "args": ["-c",
                "cd repo && echo second > SECOND && git add SECOND && \
                 git -c user.email=t@hangar -c user.name=t commit -qm second"]}}},
        {"put": "pushed", "type": "git", "source": source, "params": {"repository": "repo"}},
        {"task": "show", "config": {"platform": "linux", "inputs": [{"name": "pushed"}],
            "run": {"path": "cat", "args": ["pushed/SECOND"]}}}
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let build = block(client.create_build(&hangar_api::builds::CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("put-job".into()),
        plan,
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap();
    let watch = c.cli(&["watch", "-b", &build.id.to_string()]);
    let (out, err) = text(&watch);
    assert!(watch.status.success(), "{out}\n{err}");
    assert_eq!(out, "second\n");
    let head = git(&bare, &["rev-parse", "refs/heads/main"]);
    let finished = block(client.build(build.id)).unwrap();
    let put = finished.steps.iter().find(|s| s.step_id == "2").unwrap();
    assert_eq!(put.version, Some(serde_json::json!({"ref": head})));
}
