//! Privileged steps end to end: `hangar execute --privileged` waits, saying
//! which flag is missing, while no worker allows privileged containers,
//! and runs on the one started with `--allow-privileged` (here through its
//! environment variable) once it comes, never on the other.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{hangar, has, Cluster, ADMIN};
use hangar_client::Client;

const TASK: &str = "platform: linux\nrun: {path: sh, args: [-c, 'echo the privileged task ran']}\n";

#[test]
fn execute_privileged_waits_for_a_worker_that_allows_it_and_runs_only_there() {
    let c = Cluster::start();
    let _plain = c.worker("worker-plain");
    c.wait_until("worker-plain runs", |ws| has(ws, "worker-plain", "running"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.yml"), TASK).unwrap();

    let mut execute = hangar()
        .args(["execute", "--privileged", "-c", "task.yml"])
        .current_dir(dir.path())
        .env("HANGAR_URL", &c.url)
        .env("HANGAR_TOKEN", ADMIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The CLI's stderr, line by line, as it comes.
    let (lines, seen) = mpsc::channel();
    let stderr = execute.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    let waiting = loop {
        match seen.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.contains("--allow-privileged") => break line,
            Ok(line) => said.push(line),
            Err(e) => {
                let _ = execute.kill();
                panic!("execute never said why it waits ({e}): {said:#?}");
            }
        }
    };
    assert_eq!(
        waiting,
        "hangar: waiting for a worker: privileged step: no worker allows privileged containers (start a worker with --allow-privileged); the step fails if none joins within 1m"
    );

    let root_dir = c.work_dir("worker-root");
    let _root = c.worker_with_env(
        "worker-root",
        &root_dir,
        &[],
        &[("HANGAR_ALLOW_PRIVILEGED", std::path::Path::new("true"))],
    );
    let status = {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = execute.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = execute.kill();
                panic!("execute did not end once a worker allowed it");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut execute.stdout.take().unwrap(), &mut out).unwrap();
    let rest: Vec<String> = seen.try_iter().collect();
    assert!(status.success(), "{status}: {out}\n{rest:#?}");
    assert!(out.contains("the privileged task ran"), "{out}");

    // It ran on the worker that allows it.
    let builds: Vec<hangar_api::builds::Build> =
        serde_json::from_slice(&c.cli(&["builds", "--json"]).stdout).unwrap();
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(10)).unwrap();
    let build = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(client.build(builds[0].id))
        .unwrap();
    let workers: Vec<Option<&str>> = build.steps.iter().map(|s| s.worker.as_deref()).collect();
    assert_eq!(workers, [Some("worker-root")]);

    // Each worker says whether it allows privileged containers.
    let listed = c.workers().unwrap();
    let allows = |name: &str| {
        listed
            .iter()
            .find(|w| w.name == name)
            .unwrap()
            .allow_privileged
    };
    assert!(allows("worker-root") && !allows("worker-plain"));
    let table = String::from_utf8(c.cli(&["workers"]).stdout).unwrap();
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    assert!(row("worker-root").contains(" allowed "), "{table}");
    assert!(!row("worker-plain").contains(" allowed "), "{table}");
}
