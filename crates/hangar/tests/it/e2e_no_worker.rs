//! A resource type no worker has, end to end with a real web (its
//! `--no-worker-timeout` short) and a real worker: `set-pipeline` warns
//! naming the resource and the type; `check-resource` says why the check
//! waits, then how it failed within the bound; `resources` shows the
//! error; web's log says it once, not every second; a task whose image
//! is of such a type fails with the reason in its build log.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{has, Cluster};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const PIPELINE: &str = "
resources:
- name: m
  type: mokc
  source: {uri: x}
  check_every: never
jobs:
- name: j
  plan: [{get: m}]
";

const TASK: &str = "
platform: linux
image_resource: {type: mokc, source: {repository: x}}
run: {path: 'true'}
";

#[test]
fn a_type_no_worker_has_fails_within_the_bound_saying_so() {
    let c = Cluster::start_with(&["--no-worker-timeout", "3s"]);
    let _w = c.worker("worker-n");
    c.wait_until("the worker runs", |ws| has(ws, "worker-n", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
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
    let (out, err) = text(&set);
    assert!(set.status.success(), "{out}{err}");
    assert!(
        out.contains(
            "WARNING: pipeline: no worker has resource type mokc (needed by resource m): \
             their checks and steps fail after waiting 3s unless a worker with it joins"
        ),
        "{out}"
    );

    let started = Instant::now();
    let check = c.cli(&["check-resource", "-r", "p/m"]);
    let took = started.elapsed();
    let (out, err) = text(&check);
    assert_eq!(check.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains(
            "waiting: no worker has resource type mokc (the check fails if none joins within 3s)"
        ),
        "{out}"
    );
    assert!(
        out.contains("failed\nno worker has resource type mokc (none joined within 3s"),
        "{out}"
    );
    assert_eq!(out.matches("waiting:").count(), 1, "{out}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");

    let table = c.cli(&["resources", "-p", "p"]);
    let (out, err) = text(&table);
    assert!(table.status.success(), "{out}{err}");
    assert!(
        out.contains("no worker has resource type mokc (none joined within 3s"),
        "{out}"
    );

    // Web said that the check waits once, and nothing at info every
    // second (the check was tried again at every pass).
    let log = std::fs::read_to_string(dir.join("web.log")).unwrap();
    assert_eq!(log.matches("check waits for a worker").count(), 1, "{log}");
    assert!(!log.contains("check deferred"), "{log}");

    // A task whose image is of the type: the reason in its build log.
    let task_dir = tempfile::tempdir().unwrap();
    std::fs::write(task_dir.path().join("task.yml"), TASK).unwrap();
    let started = Instant::now();
    let run = c.cli_in(task_dir.path(), &["execute", "-c", "task.yml"]);
    let took = started.elapsed();
    let (out, err) = text(&run);
    assert!(!run.status.success(), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("waiting for a worker: no worker has resource type mokc; the step fails if none joins within 3s"),
        "{all}"
    );
    assert!(
        all.contains("no worker has resource type mokc (none joined within 3s"),
        "{all}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}
