//! Builds of pipeline jobs end to end: a real web and worker, a pipeline
//! set through the CLI, `trigger-job -w` running the job's plan (a get of
//! the built-in `mock` type, then a task reading it, with a hook), the
//! job's builds numbered and listed, `watch -j`, `rerun-build` taking the
//! rerun build's versions again, and the refusals.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::process::Output;

use crate::common::{has, Cluster};
use serde_json::Value;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const PIPELINE: &str = r#"
resources:
- name: thing
  type: mock
  source: {}
jobs:
- name: build
  plan:
  - get: thing
  - task: show
    config:
      platform: linux
      inputs: [{name: thing}]
      run:
        path: sh
        args: [-c, "echo job says ((greeting)); ls thing >/dev/null"]
  ensure:
    task: tidy
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo ensure ran"]}
"#;

#[test]
fn a_triggered_job_runs_its_plan_numbered_per_job_and_is_watched_by_job() {
    let c = Cluster::start();
    let _w = c.worker("worker-j");
    c.wait_until("the worker runs", |ws| has(ws, "worker-j", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    let set = c.cli_in(
        dir,
        &[
            "set-pipeline",
            "-p",
            "app",
            "-c",
            "pipeline.yml",
            "-v",
            "greeting=hello",
            "--non-interactive",
        ],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    // Builds take checked versions; no check loop runs here.
    c.save_version("app", "thing", serde_json::json!({"version": "v1"}));

    // A new pipeline is paused: the trigger is refused and nothing is made.
    let paused = c.cli_in(dir, &["trigger-job", "-j", "app/build"]);
    let (_, err) = text(&paused);
    assert_eq!(paused.status.code(), Some(1), "{err}");
    assert!(err.contains("pipeline app is paused"), "{err}");
    let none = c.cli_in(dir, &["builds", "-j", "app/build", "--json"]);
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "[]");

    let unpause = c.cli_in(dir, &["unpause-pipeline", "-p", "app"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));
    let run = c.cli_in(dir, &["trigger-job", "-j", "app/build", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("started app/build #1"), "{out}");
    assert!(out.contains("job says hello"), "{out}\n{err}");
    assert!(out.contains("ensure ran"), "{out}\n{err}");

    c.save_version("app", "thing", serde_json::json!({"version": "v2"}));
    let second = c.cli_in(dir, &["trigger-job", "-j", "app/build", "-w"]);
    assert!(second.status.success(), "{:?}", text(&second));
    let listed = c.cli_in(dir, &["builds", "-j", "app/build", "--json"]);
    let builds: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let names: Vec<&str> = builds
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app/build #2", "app/build #1"]);
    assert!(builds
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["status"] == "succeeded"));
    let input_of = |b: &Value| b["inputs"][0]["version"]["version"].clone();
    assert_eq!(input_of(&builds[0]), "v2", "{builds}");
    assert_eq!(input_of(&builds[1]), "v1", "{builds}");

    // rerun-build (rb): build #1's versions again, in build #3, though v2
    // is newer.
    let rerun = c.cli_in(dir, &["rb", "-j", "app/build", "-b", "1", "-w"]);
    let (out, err) = text(&rerun);
    assert!(rerun.status.success(), "{out}\n{err}");
    assert!(
        out.contains("started app/build #3") && out.contains("a rerun of #1"),
        "{out}"
    );
    assert!(out.contains("job says hello"), "{out}");
    let listed = c.cli_in(dir, &["builds", "-j", "app/build", "--json"]);
    let builds: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(builds[0]["name"], "app/build #3", "{builds}");
    assert_eq!(builds[0]["status"], "succeeded", "{builds}");
    assert_eq!(input_of(&builds[0]), "v1", "{builds}");
    let (_, err) = text(&c.cli_in(dir, &["rb", "-j", "app/build", "-b", "9"]));
    assert!(err.contains("build app/build #9 not found"), "{err}");

    // watch -j: the latest build by default, a given number with -b.
    let watched = c.cli_in(dir, &["watch", "-j", "app/build", "-b", "1"]);
    let (out, err) = text(&watched);
    assert!(watched.status.success(), "{out}\n{err}");
    assert!(out.contains("job says hello"), "{out}");
    let latest = c.cli_in(dir, &["watch", "-j", "app/build"]);
    assert!(latest.status.success(), "{:?}", text(&latest));
    let missing = c.cli_in(dir, &["watch", "-j", "app/build", "-b", "9"]);
    let (_, err) = text(&missing);
    assert_eq!(missing.status.code(), Some(1), "{err}");
    assert!(err.contains("build app/build #9 not found"), "{err}");

    // A paused job and an unknown job are refused; bad names never leave.
    assert!(c
        .cli_in(dir, &["pause-job", "-j", "app/build"])
        .status
        .success());
    let (_, err) = text(&c.cli_in(dir, &["trigger-job", "-j", "app/build"]));
    assert!(err.contains("job app/build is paused"), "{err}");
    let (_, err) = text(&c.cli_in(dir, &["trigger-job", "-j", "app/nope"]));
    assert!(err.contains("not found"), "{err}");
    let (_, err) = text(&c.cli_in(dir, &["trigger-job", "-j", "app/../x"]));
    assert!(err.contains("job"), "{err}");
    let (_, err) = text(&c.cli_in(dir, &["rb", "-j", "app/build", "-b", "1"]));
    assert!(err.contains("job app/build is paused"), "{err}");
    let listed = c.cli_in(dir, &["builds", "-j", "app/build", "--json"]);
    let builds: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(builds.as_array().unwrap().len(), 3);
}
