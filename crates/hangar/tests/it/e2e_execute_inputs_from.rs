//! `hangar execute -j PIPELINE/JOB` (fly's `--inputs-from`): the task's
//! inputs not given with `-i` are the job's gets, fetched at the version a
//! trigger of the job would fetch now; `-i` wins over the job; an input the
//! job has no version of yet is refused, saying which, and makes no build.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, text, Cluster};

const PIPELINE: &str = r#"
resources:
- name: repo
  type: mock
  source: {create_files: {"README": "from the job's repo"}}
- name: notes
  type: mock
  source: {create_files: {"notes.txt": "from the job's notes"}}
jobs:
- name: unit
  plan:
  - in_parallel:
    - get: repo
    - get: notes
      params: {create_files_via_params: {"extra.txt": "params of the job's get"}}
  - task: test
    config:
      platform: linux
      inputs: [{name: repo}, {name: notes}]
      run: {path: "true"}
"#;

const TASK: &str = r#"
platform: linux
inputs: [{name: repo}, {name: notes}]
run:
  path: sh
  args: [-c, "cat repo/README repo/version; echo; cat notes/notes.txt notes/extra.txt; echo"]
"#;

#[test]
fn execute_takes_the_inputs_it_is_not_given_from_a_job() {
    let c = Cluster::start();
    let _w = c.worker("worker-x");
    c.wait_until("the worker runs", |ws| has(ws, "worker-x", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    std::fs::write(dir.join("task.yml"), TASK).unwrap();
    let set = c.cli_in(
        dir,
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

    // No version of repo yet: refused, saying why, and no build is made.
    let early = c.cli_in(dir, &["execute", "-c", "task.yml", "-j", "app/unit"]);
    let (_, err) = text(&early);
    assert_eq!(early.status.code(), Some(1), "{err}");
    assert!(
        err.contains("app/unit: its inputs do not resolve yet"),
        "{err}"
    );
    let none = c.cli_in(dir, &["builds", "-j", "app/unit", "--json"]);
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "[]");

    c.save_version("app", "repo", serde_json::json!({"version": "r1"}));
    c.save_version("app", "repo", serde_json::json!({"version": "r2"}));
    c.save_version("app", "notes", serde_json::json!({"version": "n1"}));

    // Both inputs from the job: the newest versions, with the get's params.
    let run = c.cli_in(
        dir,
        &["execute", "-c", "task.yml", "--inputs-from", "app/unit"],
    );
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("from the job's repor2"), "{out}");
    assert!(
        out.contains("from the job's notesparams of the job's get"),
        "{out}"
    );
    assert!(
        err.contains(r#"hangar: input repo from app/unit: version {"version":"r2"}"#),
        "{err}"
    );
    // A one-off build: the job has no build of its own.
    let none = c.cli_in(dir, &["builds", "-j", "app/unit", "--json"]);
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "[]");

    // -i wins over the job for the input it names.
    let local = dir.join("local-notes");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("notes.txt"), "from my disk").unwrap();
    std::fs::write(local.join("extra.txt"), "mine too").unwrap();
    let run = c.cli_in(
        dir,
        &[
            "execute",
            "-c",
            "task.yml",
            "-j",
            "app/unit",
            "-i",
            &format!("notes={}", local.display()),
        ],
    );
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert!(out.contains("from the job's repor2"), "{out}");
    assert!(out.contains("from my diskmine too"), "{out}");
    assert!(!err.contains("input notes from app/unit"), "{err}");

    // A job that does not exist: refused by name.
    let wrong = c.cli_in(dir, &["execute", "-c", "task.yml", "-j", "app/nope"]);
    let (_, err) = text(&wrong);
    assert_eq!(wrong.status.code(), Some(1), "{err}");
    assert!(err.contains("nope"), "{err}");
}
