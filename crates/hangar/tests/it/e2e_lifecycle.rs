//! End to end with real processes and real signals: `hangar web` and several
//! `hangar worker`s on loopback, driven by the `hangar` CLI.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use crate::common::{hangar, has, Cluster, HEARTBEAT, TTL};
use nix::sys::signal::Signal;

#[test]
fn a_killed_worker_stalls_is_pruned_and_a_retired_worker_leaves() {
    let c = Cluster::start();
    let a = c.worker("worker-a");
    // Tags from the environment (a tagged worker takes only tagged steps:
    // the other workers of these tests have none).
    let mut b = c.worker_with_env(
        "worker-b",
        &c.work_dir("worker-b"),
        &[],
        &[("HANGAR_TAGS", std::path::Path::new("e2e,fast"))],
    );
    let workers = c.wait_until("both workers run", |w| {
        has(w, "worker-a", "running") && has(w, "worker-b", "running")
    });
    let b_row = workers.iter().find(|w| w.name == "worker-b").unwrap();
    assert_eq!(b_row.tags, ["e2e", "fast"]);
    assert!(!b_row.state_identity.is_empty());

    a.signal(Signal::SIGKILL);
    let killed_at = Instant::now();
    c.wait_until("worker-a is stalled", |w| has(w, "worker-a", "stalled"));
    eprintln!(
        "worker-a stalled {:?} after SIGKILL (heartbeat {HEARTBEAT}, ttl {TTL})",
        killed_at.elapsed()
    );
    assert_eq!(c.state_of("worker-b").as_deref(), Some("running"));
    // Its presence closed with the process and its API refused web's
    // probe: stalled at once, not by the TTL.
    let stalled = c.events_of("worker-a").remove(0);
    assert_eq!(stalled.kind.to_string(), "stalled");
    assert!(
        stalled.cause.starts_with("process gone: "),
        "{}",
        stalled.cause
    );

    // A running worker cannot be pruned; a stalled one can.
    let refused = c.cli(&["prune-worker", "-w", "worker-b"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("it is running"));
    let pruned = c.cli(&["prune-worker", "-w", "worker-a"]);
    assert!(
        pruned.status.success(),
        "{}",
        String::from_utf8_lossy(&pruned.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&pruned.stdout),
        "pruned worker worker-a\n"
    );

    // SIGUSR2 retires worker-b: it leaves the list and its process exits 0.
    b.signal(Signal::SIGUSR2);
    assert_eq!(b.wait_exit(Duration::from_secs(30)), Some(0));
    let left = c.wait_until("worker-b is gone", |w| w.is_empty());
    assert!(left.is_empty());
    let kinds: Vec<_> = c
        .events_of("worker-b")
        .into_iter()
        .map(|e| e.kind.to_string())
        .collect();
    assert_eq!(kinds, ["retired", "retiring", "registered"]);
    drop(c.web);
}

#[test]
fn a_landed_worker_comes_back_running_and_a_wiped_work_dir_is_noticed() {
    let c = Cluster::start();
    let mut w = c.worker("worker-l");
    let first = c.wait_until("worker-l runs", |ws| has(ws, "worker-l", "running"))[0].clone();

    w.signal(Signal::SIGUSR1);
    assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
    c.wait_until("worker-l is landed", |ws| has(ws, "worker-l", "landed"));

    // Restarted with its work dir kept: same identity, running again.
    let _w = c.worker("worker-l");
    let again = c.wait_until("worker-l runs again", |ws| {
        ws.iter().any(|x| {
            x.name == "worker-l"
                && x.state.to_string() == "running"
                && x.generation > first.generation
        })
    });
    assert_eq!(again[0].state_identity, first.state_identity);
    assert_eq!(again[0].restarts, 1);
    assert_eq!(
        again[0].last_event.as_ref().unwrap().kind.to_string(),
        "restarted-state-kept"
    );
    drop(_w);

    // Killed, its work dir wiped, recreated under the same name: web knows at
    // registration that the state is new.
    std::fs::remove_dir_all(c.work_dir("worker-l")).unwrap();
    let _w = c.worker("worker-l");
    let wiped = c.wait_until("worker-l registers with a new identity", |ws| {
        ws.iter()
            .any(|x| x.name == "worker-l" && x.state_identity != first.state_identity)
    });
    assert_eq!(
        wiped[0].last_event.as_ref().unwrap().kind.to_string(),
        "restarted-state-lost"
    );
    assert_eq!(wiped[0].restarts, 2);
}

#[test]
fn a_paused_worker_replaced_under_its_name_is_fenced_when_it_wakes() {
    let c = Cluster::start();
    let mut zombie = c.worker("worker-z");
    let first = c.wait_until("worker-z runs", |ws| has(ws, "worker-z", "running"))[0].clone();
    zombie.signal(Signal::SIGSTOP);
    c.wait_until("worker-z is stalled", |ws| has(ws, "worker-z", "stalled"));

    // Its successor: same name, a fresh work dir (a recreated pod).
    let successor_dir = c.dir.path().join("successor");
    let _successor = c.worker_in("worker-z", &successor_dir);
    c.wait_until("the successor runs", |ws| {
        ws.iter().any(|x| {
            x.name == "worker-z"
                && x.state.to_string() == "running"
                && x.generation > first.generation
        })
    });

    zombie.signal(Signal::SIGCONT);
    assert_eq!(
        zombie.wait_exit(Duration::from_secs(30)),
        Some(3),
        "a superseded worker exits with 3"
    );
    let log = std::fs::read_to_string(c.dir.path().join("worker-z.log")).unwrap();
    assert!(log.contains("superseded"), "{log}");
    // The successor is untouched.
    let now = c.wait_until("the successor keeps running", |ws| {
        has(ws, "worker-z", "running")
    });
    assert_ne!(now[0].state_identity, first.state_identity);
}

#[test]
fn sigterm_stops_a_worker_gracefully() {
    let c = Cluster::start();
    let mut w = c.worker("worker-t");
    c.wait_until("worker-t runs", |ws| has(ws, "worker-t", "running"));
    w.signal(Signal::SIGTERM);
    assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
    // Not ephemeral: web keeps it until the TTL says it is gone.
    c.wait_until("worker-t is stalled", |ws| has(ws, "worker-t", "stalled"));
}

#[test]
fn the_cli_refuses_missing_credentials_with_a_clear_error() {
    let out = hangar()
        .args(["workers"])
        .env("HANGAR_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no credentials"));
    let out = hangar()
        .args(["prune-worker"])
        .env("HANGAR_TOKEN", "x")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let out = hangar()
        .args([
            "web",
            "--admin-token",
            "short",
            "--worker-key",
            "also-short",
            "--bind",
            "127.0.0.1:0",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("the admin token must be at least 16 characters"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused start creates nothing"
    );
}

/// `hangar workers | head -0`: the reader is gone before the list is
/// written. The command ends quietly with 141, the status a shell shows for
/// a command SIGPIPE ended: no panic, no error message.
#[test]
fn a_listing_into_a_closed_pipe_ends_quietly() {
    let c = Cluster::start();
    let _w = c.worker("worker-p");
    c.wait_until("worker-p runs", |ws| has(ws, "worker-p", "running"));
    for args in [&["workers"][..], &["workers", "--json"], &["events"]] {
        let mut child = hangar()
            .args(args)
            .env("HANGAR_URL", &c.url)
            .env("HANGAR_TOKEN", crate::common::ADMIN)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}
