//! A team's worker runs only its team's builds, end to end: a real web
//! (its `--no-worker-timeout` short), one worker registered with `--team
//! b`, and one-off builds of two teams.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, text, Cluster};

const TASK: &str = "
platform: linux
run: {path: sh, args: [-c, 'echo ran-here']}
";

#[test]
fn a_team_worker_runs_its_team_s_builds_and_no_other_team_s() {
    let c = Cluster::start_with(&["--no-worker-timeout", "3s"]);
    let work = c.work_dir("worker-b");
    let _w = c.worker_with("worker-b", &work, &["--team", "b"]);
    c.wait_until("worker-b runs", |ws| has(ws, "worker-b", "running"));
    let dir = c.dir.path();
    std::fs::write(dir.join("task.yml"), TASK).unwrap();
    for team in ["a", "b"] {
        let set = c.cli(&[
            "set-team",
            "-n",
            team,
            "--local-user",
            "someone",
            "--non-interactive",
        ]);
        assert!(set.status.success(), "{:?}", text(&set));
    }
    // Team b's build runs on team b's worker.
    let ran = c.cli_in(dir, &["execute", "-c", "task.yml", "--team", "b"]);
    let (out, err) = text(&ran);
    assert!(ran.status.success(), "{out}{err}");
    assert!(out.contains("ran-here"), "{out}");
    // Team a's finds no worker of its own or shared, and says so.
    let refused = c.cli_in(dir, &["execute", "-c", "task.yml", "--team", "a"]);
    let (out, err) = text(&refused);
    assert!(!refused.status.success(), "{out}{err}");
    assert!(!out.contains("ran-here"), "{out}");
    assert!(
        err.contains("no running worker fits platform linux for team a"),
        "{out}{err}"
    );
}
