//! Steps that read files of artifacts, end to end: a real web and worker,
//! a pipeline set through the CLI whose job's first task writes a task
//! file, a var file and a pipeline config; `load_var` reads the var file,
//! `task: file:` runs the task file with the step's vars and params (the
//! loaded values redacted from its output), and `set_pipeline` sets a new
//! pipeline from the config with the var file.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::process::Output;

use crate::common::{has, Cluster};
use serde_json::{json, Value};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

// `((` is written as `%s` filled with "((" so that the vars of the files
// the task writes are not the pipeline's own.
const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: write
    config:
      platform: linux
      outputs: [{name: out}]
      run:
        path: sh
        args:
        - -c
        - |
          set -e
          V='(('
          printf 'platform: linux\nparams: {GREETING: file}\nrun: {path: sh, args: [-c, "echo from file says $GREETING and %sword)) and $SECRET"]}\n' "$V" > out/task.yml
          printf '{"word": "w0rd", "secret": "hush-hush-42"}' > out/vars.json
          printf 'resources:\n- {name: r, type: mock, source: {tag: %sword))}}\njobs:\n- name: j\n  plan: [{get: r}]\n' "$V" > out/child.yml
  - load_var: v
    file: out/vars.json
  - task: from-file
    file: out/task.yml
    vars: {word: ((.:v.word))}
    params: {GREETING: step, SECRET: ((.:v.secret))}
  - set_pipeline: child
    file: out/child.yml
    var_files: [out/vars.json]
"#;

#[test]
fn a_job_loads_a_var_runs_a_task_file_and_sets_a_pipeline_from_what_a_task_wrote() {
    let c = Cluster::start();
    let _w = c.worker("worker-f");
    c.wait_until("the worker runs", |ws| has(ws, "worker-f", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    let set = c.cli_in(
        dir,
        &["set-pipeline", "-p", "app", "-c", "pipeline.yml", "-n"],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    let unpause = c.cli_in(dir, &["unpause-pipeline", "-p", "app"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    let run = c.cli_in(dir, &["trigger-job", "-j", "app/build", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    // The step's params won over the file's, the step's vars filled the
    // file's, and what load_var loaded is redacted (it was not revealed).
    assert!(
        out.contains("from file says step and ((redacted)) and ((redacted))"),
        "{out}\n{err}"
    );
    assert!(!out.contains("hush-hush-42"), "{out}");

    // The new pipeline: set from the file with the var file, unpaused.
    let listed = c.cli_in(dir, &["pipelines", "--json"]);
    let pipelines: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let child = pipelines
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "child")
        .unwrap_or_else(|| panic!("no child pipeline in {pipelines}"));
    assert_eq!(
        (&child["paused"], &child["config_version"]),
        (&json!(false), &json!(1))
    );
    let got = c.cli_in(dir, &["get-pipeline", "-p", "child", "--json"]);
    let config: Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(config["resources"][0]["source"], json!({"tag": "w0rd"}));

    // Run again: the same config is not written again.
    let again = c.cli_in(dir, &["trigger-job", "-j", "app/build", "-w"]);
    let (out, err) = text(&again);
    assert!(again.status.success(), "{out}\n{err}");
    assert!(out.contains("no changes to apply"), "{out}");
}
