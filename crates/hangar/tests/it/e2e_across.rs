//! `across`, end to end: a real web and worker, a pipeline set through the
//! CLI whose job runs a task once per combination of two vars, each
//! echoing its `((.:var))`s; and `fail_fast`, which stops launching
//! combinations after one fails, against the default, which runs them all.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, text, Cluster};

const PIPELINE: &str = r#"
jobs:
- name: grid
  plan:
  - task: echo
    across:
    - var: x
      values: [a, b]
      max_in_flight: all
    - var: w
      values: [1, {k: two}]
    config:
      platform: linux
      params: {W: ((.:w))}
      run:
        path: sh
        args: [-c, "echo combination x=((.:x)) w=$W"]
- name: fast
  plan:
  - task: check
    across: [{var: x, values: [ok, bad, later]}]
    fail_fast: true
    config: &check
      platform: linux
      params: {X: ((.:x))}
      run:
        path: sh
        args: [-c, "echo ran $X; test $X != bad"]
- name: all
  plan:
  - task: check
    across: [{var: x, values: [ok, bad, later]}]
    config: *check
"#;

#[test]
fn a_job_runs_its_step_once_per_combination_and_fail_fast_stops_the_rest() {
    let c = Cluster::start();
    let _w = c.worker("worker-a");
    c.wait_until("the worker runs", |ws| has(ws, "worker-a", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("pipeline.yml"), PIPELINE).unwrap();
    let set = c.cli_in(
        dir,
        &["set-pipeline", "-p", "app", "-c", "pipeline.yml", "-n"],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    let unpause = c.cli_in(dir, &["unpause-pipeline", "-p", "app"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    let run = c.cli_in(dir, &["trigger-job", "-j", "app/grid", "-w"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    for line in [
        "combination x=a w=1",
        "combination x=a w={\"k\":\"two\"}",
        "combination x=b w=1",
        "combination x=b w={\"k\":\"two\"}",
    ] {
        assert_eq!(out.matches(line).count(), 1, "{line} once in\n{out}\n{err}");
    }

    // fail_fast: the failing combination ends the step; the next is never
    // started, and the build fails.
    let fast = c.cli_in(dir, &["trigger-job", "-j", "app/fast", "-w"]);
    let (out, err) = text(&fast);
    assert!(!fast.status.success(), "{out}\n{err}");
    assert!(
        out.contains("ran ok") && out.contains("ran bad"),
        "{out}\n{err}"
    );
    assert!(!out.contains("ran later"), "{out}\n{err}");

    // Without it every combination runs, and the step still fails.
    let all = c.cli_in(dir, &["trigger-job", "-j", "app/all", "-w"]);
    let (out, err) = text(&all);
    assert!(!all.status.success(), "{out}\n{err}");
    for x in ["ok", "bad", "later"] {
        assert!(out.contains(&format!("ran {x}")), "{x} in\n{out}\n{err}");
    }
}
