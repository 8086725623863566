//! Two `hangar web` processes on one PostgreSQL database: the one running a
//! build is SIGKILLed mid-build, and the other goes on with the build within
//! 10 s, re-attaching to the running step, never running the finished step
//! again.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{hangar, Cluster, Proc, ADMIN, KEY};
use hangar_api::builds::CreateBuild;
use hangar_client::Client;
use nix::sys::signal::Signal;

/// What issue 19 asks: a survivor goes on within 10 s of the death.
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A web node on `database`, logging to `dir/web-<name>.log`. The TTL is
/// long: the worker's own web node dies here, and that is not what is
/// judged.
fn web_node(dir: &Path, name: &str, database: &str) -> (Proc, String) {
    let port = free_port();
    let log = std::fs::File::create(dir.join(format!("web-{name}.log"))).unwrap();
    let child = hangar()
        .args(["web", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.join(format!("web-{name}")))
        .args(["--heartbeat-ttl", "60s", "--lifecycle-interval", "100ms"])
        .env("HANGAR_DATABASE_URL", database)
        .env("HANGAR_ADMIN_TOKEN", ADMIN)
        .env("HANGAR_WORKER_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::new(&url, ADMIN, Duration::from_secs(5)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while block(client.info()).is_err() {
        assert!(Instant::now() < deadline, "web {name} never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    (
        Proc {
            child,
            name: format!("web-{name}"),
        },
        url,
    )
}

fn log_of(c: &Client, id: i64) -> Vec<String> {
    block(c.build_events(id, 0, 0))
        .map(|page| {
            page.events
                .into_iter()
                .map(|e| format!("{}: {}", e.kind, e.payload.trim_end()))
                .collect()
        })
        .unwrap_or_default()
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_build_whose_web_node_is_killed_goes_on_from_the_other_within_ten_seconds() {
    let database = block(hangar_testkit::postgres_database_url());
    let dir = tempfile::tempdir().unwrap();
    let (a, a_url) = web_node(dir.path(), "a", &database);
    let (b, b_url) = web_node(dir.path(), "b", &database);
    let nodes = [(a, a_url), (b, b_url)];
    // The worker registers through node a; each node reaches it directly.
    // The shared cluster helpers start workers and read worker states; its
    // own web process is not used here (a process that exits at once).
    let cluster = Cluster {
        dir,
        url: nodes[0].1.clone(),
        web: Proc {
            child: hangar()
                .arg("--version")
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
            name: "placeholder".into(),
        },
    };
    let _worker = cluster.worker("w1");
    let client = Client::new(&nodes[0].1, ADMIN, Duration::from_secs(10)).unwrap();
    wait_for("w1 running", Duration::from_secs(60), || {
        cluster.state_of("w1").as_deref() == Some("running")
    });

    let plan = serde_json::json!([
        {"task": "first", "config": {"platform": "linux",
            "run": {"path": "sh", "args": ["-c", "echo first-ran"]}}},
        {"task": "second", "config": {"platform": "linux",
            "run": {"path": "sh", "args": ["-c", "echo second-started; sleep 8; echo second-done"]}}},
    ]);
    let build = block(client.create_build(&CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("takeover".into()),
        plan,
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap();
    wait_for("the second step runs", Duration::from_secs(60), || {
        log_of(&client, build.id)
            .iter()
            .any(|l| l.contains("second-started"))
    });

    // Kill the node that runs the build, as a lost pod.
    let running = format!("running build build={}", build.id);
    let holder = (0..2)
        .find(|&i| {
            let log = std::fs::read_to_string(
                cluster.dir.path().join(format!("{}.log", nodes[i].0.name)),
            )
            .unwrap_or_default();
            log.contains(&running)
        })
        .expect("one of the nodes runs the build");
    nodes[holder].0.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let survivor = Client::new(&nodes[1 - holder].1, ADMIN, Duration::from_secs(10)).unwrap();
    wait_for("the survivor resumes the build", TAKEOVER_BOUND, || {
        log_of(&survivor, build.id)
            .iter()
            .any(|l| l.contains("resuming the build where it was left"))
    });
    eprintln!(
        "figure: SIGKILL of the build's web node to resumed elsewhere: {:?}",
        killed.elapsed()
    );
    wait_for("the build ends", Duration::from_secs(60), || {
        block(survivor.build(build.id))
            .map(|b| b.status.is_final())
            .unwrap_or(false)
    });
    let done = block(survivor.build(build.id)).unwrap();
    let log = log_of(&survivor, build.id);
    assert_eq!(done.status.to_string(), "succeeded", "{log:#?}");
    // The finished step never ran again; the running one was re-attached to.
    let count = |text: &str| log.iter().filter(|l| l.contains(text)).count();
    assert_eq!(count("first-ran"), 1, "{log:#?}");
    assert_eq!(count("second-started"), 1, "{log:#?}");
    assert_eq!(count("second-done"), 1, "{log:#?}");
}
