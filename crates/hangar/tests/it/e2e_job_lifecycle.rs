//! A pipeline's life end to end, with a real web and two workers and the
//! built-in `git` type over local bare repositories: set, unpause,
//! trigger; a get, a `put` whose implicit get feeds the next task, the
//! worker running the put SIGKILLed while it pushes (the put is retried on
//! the other worker and the build succeeds, the remote gaining exactly one
//! commit and `out` succeeding once); the versions the build used and
//! produced; an `on_failure` hook; aborts of a running build and of one
//! waiting for a worker.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{has, Cluster, ADMIN};
use hangar_client::Client;
use nix::sys::signal::Signal;
use serde_json::Value;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs git for the test's own setup, with no user or system config.
fn git(cwd: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .args(["-c", "user.email=e2e@hangar", "-c", "user.name=e2e"])
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `src.git` one commit ahead of `target.git`; the target's pre-receive
/// hook notes the HOME of each push (the action's dir, under its worker's
/// work dir) in `pushes/` and holds the first push for a while, so the
/// test can kill the worker pushing. Answers the second commit.
fn repositories(dir: &Path) -> String {
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "--initial-branch=main"]);
    std::fs::write(work.join("README"), "first\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "first"]);
    git(dir, &["clone", "-q", "--bare", "work", "target.git"]);
    std::fs::write(work.join("NEW"), "shipped by the put\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "second"]);
    git(dir, &["clone", "-q", "--bare", "work", "src.git"]);
    let pushes = dir.join("pushes");
    std::fs::create_dir(&pushes).unwrap();
    let hook = dir.join("target.git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat >/dev/null\nmarks={}\nn=$(ls \"$marks\" | wc -l)\n\
             echo \"$HOME\" > \"$marks/push-$n\"\n\
             if [ \"$n\" = 0 ]; then sleep 6; fi\nexit 0\n",
            pushes.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    git(&work, &["rev-parse", "HEAD"])
}

fn pipeline(dir: &Path) -> String {
    format!(
        r#"
resources:
- name: src
  type: git
  source: {{uri: "{src}", branch: main}}
- name: target
  type: git
  source: {{uri: "{target}", branch: main}}
jobs:
- name: ship
  plan:
  - get: code
    resource: src
  - put: target
    params: {{repository: code}}
  - task: read
    config:
      platform: linux
      inputs: [{{name: target}}]
      run: {{path: cat, args: [target/NEW]}}
- name: fails
  plan:
  - task: boom
    config:
      platform: linux
      run: {{path: sh, args: [-c, "echo booming; exit 3"]}}
    on_failure:
      task: tell
      config:
        platform: linux
        run: {{path: sh, args: [-c, "echo on_failure hook ran"]}}
- name: slow
  plan:
  - task: wait
    config:
      platform: linux
      run: {{path: sh, args: [-c, "echo waiting; sleep 120"]}}
- name: nowhere
  plan:
  - task: placed-never
    tags: [no-worker-has-this]
    config:
      platform: linux
      run: {{path: "true"}}
"#,
        src = dir.join("src.git").display(),
        target = dir.join("target.git").display(),
    )
}

/// The job's build `n` as `hangar builds -j --json` shows it.
fn job_build(c: &Cluster, job: &str, n: usize) -> Value {
    let listed = c.cli(&["builds", "-j", &format!("app/{job}"), "--json"]);
    assert!(listed.status.success(), "{:?}", text(&listed));
    let builds: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let all = builds.as_array().unwrap();
    all[all.len() - n].clone()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_pipeline_runs_puts_through_a_killed_worker_records_versions_runs_hooks_and_aborts() {
    let c = Cluster::start();
    let mut workers = vec![
        // The repositories are local paths, which the sandbox does not
        // show (and the push is told apart by its action's HOME).
        ("worker-l1", Some(c.worker_outside_sandbox("worker-l1"))),
        ("worker-l2", Some(c.worker_outside_sandbox("worker-l2"))),
    ];
    c.wait_until("the workers run", |ws| {
        has(ws, "worker-l1", "running") && has(ws, "worker-l2", "running")
    });
    let dir = c.dir.path().join("repos");
    std::fs::create_dir(&dir).unwrap();
    let shipped = repositories(&dir);
    let target = dir.join("target.git");
    let before = git(&target, &["rev-list", "--count", "main"]);
    std::fs::write(dir.join("pipeline.yml"), pipeline(&dir)).unwrap();
    let set = c.cli_in(
        &dir,
        &[
            "set-pipeline",
            "-p",
            "app",
            "-c",
            "pipeline.yml",
            "--non-interactive",
        ],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    // Builds take checked versions; no check loop runs here.
    c.save_version("app", "src", serde_json::json!({ "ref": shipped }));
    let unpause = c.cli(&["unpause-pipeline", "-p", "app"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    // The put: its worker is killed while the remote holds its push.
    let trigger = c.cli(&["trigger-job", "-j", "app/ship"]);
    assert!(trigger.status.success(), "{:?}", text(&trigger));
    let first_push = dir.join("pushes/push-0");
    wait_for("the first push", Duration::from_secs(60), || {
        std::fs::read_to_string(&first_push).is_ok_and(|t| t.ends_with('\n'))
    });
    let home = std::fs::read_to_string(&first_push).unwrap();
    let victim = workers
        .iter_mut()
        .find(|(name, _)| home.contains(&format!("/workers/{name}/")))
        .unwrap_or_else(|| panic!("no worker pushed from {home}"));
    let killed = victim.0;
    victim.1.take().unwrap().signal(Signal::SIGKILL);
    let watch = c.cli(&["watch", "-j", "app/ship"]);
    let (out, err) = text(&watch);
    assert!(watch.status.success(), "{out}\n{err}");
    // The implicit get of the put fed the task after it.
    assert_eq!(out, "shipped by the put\n", "{err}");
    assert!(err.contains("retrying put target"), "{err}");
    assert!(err.contains(&format!("worker {killed}")), "{err}");
    // The remote gained exactly one commit, the one shipped, and `out`
    // succeeded once: its version was recorded once.
    assert_eq!(git(&target, &["rev-parse", "main"]), shipped);
    let after: u32 = git(&target, &["rev-list", "--count", "main"])
        .parse()
        .unwrap();
    assert_eq!(after, before.parse::<u32>().unwrap() + 1);
    assert_eq!(err.matches("pushed version").count(), 1, "{err}");
    // The versions the build used and produced, in `watch` and the API.
    assert!(
        err.contains(&format!("input code (src): {{\"ref\":\"{shipped}\"}}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("output target: {{\"ref\":\"{shipped}\"}}")),
        "{err}"
    );
    let build = job_build(&c, "ship", 1);
    assert_eq!(build["status"], "succeeded");
    assert_eq!(
        build["inputs"],
        serde_json::json!([{"name": "code", "resource": "src",
            "version": {"ref": shipped}}])
    );
    let mut outputs: Vec<String> = build["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}={}",
                o["resource"].as_str().unwrap(),
                o["version"]["ref"]
            )
        })
        .collect();
    outputs.sort();
    assert_eq!(
        outputs,
        [
            format!("src=\"{shipped}\""),
            format!("target=\"{shipped}\"")
        ],
        "the put's version, and the input copied on success"
    );

    // A failing task runs its on_failure hook; the build fails with its code.
    let fails = c.cli(&["trigger-job", "-j", "app/fails", "-w"]);
    let (out, err) = text(&fails);
    assert_eq!(fails.status.code(), Some(3), "{out}\n{err}");
    assert!(out.contains("booming"), "{out}");
    assert!(out.contains("on_failure hook ran"), "{out}\n{err}");
    assert_eq!(job_build(&c, "fails", 1)["status"], "failed");

    // Aborts: a running task, and a task waiting for a worker that no
    // worker will ever be.
    for (job, running_says) in [("slow", Some("waiting")), ("nowhere", None)] {
        let trigger = c.cli(&["trigger-job", "-j", &format!("app/{job}")]);
        assert!(trigger.status.success(), "{:?}", text(&trigger));
        let id = job_build(&c, job, 1)["id"].as_i64().unwrap().to_string();
        wait_for(&format!("{job} starting"), Duration::from_secs(30), || {
            job_build(&c, job, 1)["status"] == "started"
        });
        if let Some(says) = running_says {
            let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
            let id: i64 = id.parse().unwrap();
            wait_for("the task running", Duration::from_secs(30), || {
                block(client.build_events(id, 0, 0))
                    .unwrap()
                    .events
                    .iter()
                    .any(|e| e.payload.contains(says))
            });
        }
        // By id, and as fly names a job's build (`-j P/J -b N`); a build
        // the job does not have is refused, the running one left alone.
        let abort = if running_says.is_some() {
            c.cli(&["abort-build", "-b", &id])
        } else {
            let path = format!("app/{job}");
            let missing = c.cli(&["abort-build", "-j", &path, "-b", "99"]);
            let (out, err) = text(&missing);
            assert!(!missing.status.success(), "{out}\n{err}");
            assert!(err.contains("99"), "{err}");
            assert_eq!(job_build(&c, job, 1)["status"], "started", "{job}");
            c.cli(&["abort-build", "-j", &path, "-b", "1"])
        };
        assert!(abort.status.success(), "{:?}", text(&abort));
        let watched = c.cli(&["watch", "-j", &format!("app/{job}")]);
        let (out, err) = text(&watched);
        assert_eq!(watched.status.code(), Some(2), "{job}: {out}\n{err}");
        if let Some(says) = running_says {
            assert!(out.contains(says), "{job}: {out}\n{err}");
        }
        assert_eq!(job_build(&c, job, 1)["status"], "aborted", "{job}");
    }
    drop(workers);
}
