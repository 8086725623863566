//! A Concourse task file run with `hangar execute` as Concourse would run
//! it: YAML 1.1 params reach the task as Concourse passes them, a merge key
//! shares params, and an output at its input's path comes back changed
//! (`image_resource` is `e2e_task_images_needs_root.rs`'s).

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use crate::common::{has, Cluster};

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

const TASK: &str = r#"---
platform: linux

inputs:
  - name: repo

outputs:
  - name: repo

params:
  <<: {SHARED: from-merge, MODE: overridden}
  MODE: 0755
  VERBOSE: yes
  EMPTY:
  RATIO: 1.0
  LIST: [a, 1, true]
  QUOTED: '0755'

run:
  path: sh
  args:
    - -ec
    - |
      echo "mode=$MODE verbose=$VERBOSE empty=[$EMPTY] ratio=$RATIO shared=$SHARED quoted=$QUOTED"
      echo "list=$LIST"
      echo changed > repo/changed.txt
"#;

#[test]
fn a_concourse_task_file_runs_as_concourse_would_run_it() {
    let c = Cluster::start();
    let _w = c.worker("worker-t1");
    c.wait_until("the worker runs", |ws| has(ws, "worker-t1", "running"));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "task.yml", TASK);
    write(dir.path(), "repo/original.txt", "original\n");
    let out_dir = dir.path().join("out");
    let out = c.cli_in(
        dir.path(),
        &[
            "execute",
            "-c",
            "task.yml",
            "-i",
            "repo=repo",
            "-o",
            &format!("repo={}", out_dir.display()),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("mode=493 verbose=true empty=[] ratio=1 shared=from-merge quoted=0755"),
        "{stdout}"
    );
    assert!(stdout.contains(r#"list=["a",1,true]"#), "{stdout}");
    // The output is the input, changed in place.
    assert_eq!(
        std::fs::read_to_string(out_dir.join("original.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("changed.txt")).unwrap(),
        "changed\n"
    );
}
