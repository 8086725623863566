//! A get step's local var end to end, as Concourse's get step documents
//! it: a real web and worker, a pipeline set through the CLI whose `mock`
//! resource answers metadata from `in`; a task's params and args take
//! `((.:NAME.field))` and print them, the same when the get comes from
//! the worker's resource cache; a field the metadata lacks fails the
//! build naming it.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, text, Cluster};

const PIPELINE: &str = r#"
resources:
- name: my-resource
  type: mock
  source:
    metadata:
    - {name: hello, value: world}
    - {name: foo, value: bar}

jobs:
- name: job
  plan:
  - get: my-resource
  - task: ref-local-vars
    config:
      platform: linux
      params:
        FOO: ((.:my-resource.foo))
      run:
        path: sh
        args:
        - -c
        - |
          echo Hello ((.:my-resource.hello))
          echo foo $FOO
- name: missing
  plan:
  - get: r
    resource: my-resource
  - task: nope
    config:
      platform: linux
      params:
        X: ((.:r.nope))
      run: {path: sh, args: [-c, "echo never runs"]}
"#;

#[test]
fn a_task_prints_what_a_get_s_local_var_holds_and_a_missing_field_fails() {
    let c = Cluster::start();
    let _w = c.worker("worker-g");
    c.wait_until("the worker runs", |ws| has(ws, "worker-g", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    let set = c.cli_in(
        dir,
        &["set-pipeline", "-p", "vars", "-c", "pipeline.yml", "-n"],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    let unpause = c.cli_in(dir, &["unpause-pipeline", "-p", "vars"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    for run in ["first", "cached"] {
        let build = c.cli_in(dir, &["trigger-job", "-j", "vars/job", "-w"]);
        let (out, err) = text(&build);
        assert!(build.status.success(), "{run}: {out}\n{err}");
        assert!(out.contains("Hello world"), "{run}: {out}\n{err}");
        assert!(out.contains("foo bar"), "{run}: {out}\n{err}");
        if run == "cached" {
            assert!(err.contains("found in the cache"), "{out}\n{err}");
        }
    }

    let build = c.cli_in(dir, &["trigger-job", "-j", "vars/missing", "-w"]);
    let (out, err) = text(&build);
    assert!(!build.status.success(), "{out}\n{err}");
    let all = format!("{out}\n{err}");
    assert!(all.contains("missing field 'nope'"), "{all}");
    assert!(all.contains("r.nope"), "{all}");
    assert!(!all.contains("never runs"), "{all}");
}
