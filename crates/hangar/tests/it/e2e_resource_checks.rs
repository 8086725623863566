//! Resource checks end to end: a real web (checking every second, as
//! `hangar web` does by default) and a real worker. A pipeline set and
//! unpaused gets its resources' versions without any trigger; a webhook
//! makes a new commit of a local git repository appear within about a
//! second; `check-resource` waits for its check and says how it ended; a
//! failing check's error shows on `resources -p`.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{has, Cluster};
use serde_json::Value;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn git(cwd: &Path, args: &[&str]) -> String {
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
}

fn versions(c: &Cluster, resource: &str) -> Vec<Value> {
    let o = c.cli(&["resource-versions", "-r", resource, "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn resources(c: &Cluster) -> Vec<Value> {
    let o = c.cli(&["resources", "-p", "p", "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn resources_are_checked_without_triggers_and_a_webhook_checks_at_once() {
    let c = Cluster::start();
    // The repository is a local path, which the sandbox does not show.
    let _w = c.worker_outside_sandbox("worker-c");
    c.wait_until("the worker runs", |ws| has(ws, "worker-c", "running"));
    let dir = c.dir.path();
    let origin = dir.join("origin");
    std::fs::create_dir(&origin).unwrap();
    git(&origin, &["init", "-q", "--initial-branch=main"]);
    std::fs::write(origin.join("README"), "first\n").unwrap();
    git(&origin, &["add", "."]);
    git(&origin, &["commit", "-qm", "first"]);
    git(dir, &["clone", "-q", "--bare", "origin", "bare.git"]);
    git(&origin, &["remote", "add", "bare", "../bare.git"]);
    let bare = dir.join("bare.git");
    let pipeline = format!(
        r#"
resources:
- name: things
  type: mock
  source: {{versions: [a, b, c]}}
- name: broken
  type: mock
  source: {{versions: []}}
- name: repo
  type: git
  source: {{uri: "{}", branch: main}}
  check_every: 1h
  webhook_token: e2e-hook-token
jobs:
- name: j
  plan: [{{get: things}}, {{get: broken}}, {{get: repo}}]
"#,
        bare.display()
    );
    std::fs::write(dir.join("pipeline.yml"), pipeline).unwrap();
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
    // Paused: nothing is checked.
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(versions(&c, "p/things").is_empty());
    let unpause = c.cli(&["unpause-pipeline", "-p", "p"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    // Versions appear, oldest first in check order, with no trigger.
    let found = wait_for("things' versions", Duration::from_secs(20), || {
        let v = versions(&c, "p/things");
        (v.len() == 3).then_some(v)
    });
    let names: Vec<&str> = found
        .iter()
        .map(|v| v["version"]["version"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "b", "a"]);
    let first = wait_for("the repo's first commit", Duration::from_secs(20), || {
        let v = versions(&c, "p/repo");
        (!v.is_empty()).then_some(v)
    });
    assert_eq!(first.len(), 1);

    // The failing check's error is on the resource, in the table too.
    let broken = wait_for("broken's error", Duration::from_secs(20), || {
        resources(&c)
            .into_iter()
            .find(|r| r["name"] == "broken" && r["check_error"].is_string())
    });
    let error = broken["check_error"].as_str().unwrap();
    assert!(error.contains("must not be empty"), "{error}");
    let table = c.cli(&["resources", "-p", "p"]);
    let (out, _) = text(&table);
    assert!(
        out.contains("check error") && out.contains("must not be empty"),
        "{out}"
    );

    // A new commit: the webhook has it checked within about a second
    // (its periodic check is an hour away).
    std::fs::write(origin.join("SECOND"), "second\n").unwrap();
    git(&origin, &["add", "."]);
    git(&origin, &["commit", "-qm", "second"]);
    git(&origin, &["push", "-q", "bare", "main"]);
    let head = git(&bare, &["rev-parse", "refs/heads/main"]);
    let url = format!(
        "{}/api/v1/teams/main/pipelines/p/resources/repo/check/webhook?webhook_token=e2e-hook-token",
        c.url
    );
    let status = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            reqwest::Client::new()
                .post(&url)
                .send()
                .await
                .unwrap()
                .status()
        });
    assert_eq!(status.as_u16(), 201);
    let hooked = Instant::now();
    wait_for("the pushed commit", Duration::from_secs(10), || {
        let v = versions(&c, "p/repo");
        (v.len() == 2 && v[0]["version"]["ref"] == head.as_str()).then_some(())
    });
    let took = hooked.elapsed();
    assert!(
        took < Duration::from_millis(2_500),
        "the webhook's check took {took:?}"
    );

    // check-resource waits and says how the check ended.
    let ok = c.cli(&["check-resource", "-r", "p/things"]);
    let (out, err) = text(&ok);
    assert!(ok.status.success(), "{out}{err}");
    assert!(out.contains("succeeded"), "{out}");
    let failed = c.cli(&["check-resource", "-r", "p/broken"]);
    let (out, err) = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("failed") && out.contains("must not be empty"),
        "{out}"
    );
    let unknown = c.cli(&["check-resource", "-r", "p/nope"]);
    assert_eq!(unknown.status.code(), Some(1));
}
