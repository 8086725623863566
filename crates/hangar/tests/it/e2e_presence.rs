//! A worker's presence at web, with real processes and real signals: a
//! SIGKILLed worker is stalled at once (`e2e_lifecycle`), a stopped one
//! (SIGSTOP: its host no longer answers, its connection stays open) only
//! by the TTL, and a web restart, which drops every presence, stalls
//! nobody while the workers hold theirs again.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, wait_for, Cluster};
use nix::sys::signal::Signal;

const HELD: &str = "presence held by web";

#[test]
fn a_stopped_worker_is_left_to_the_ttl() {
    let c = Cluster::start();
    let s = c.worker("worker-s");
    c.wait_until("worker-s runs", |w| has(w, "worker-s", "running"));
    wait_for("worker-s's presence", Duration::from_secs(30), || {
        (c.log_lines("worker-s", HELD) >= 1).then_some(())
    });
    s.signal(Signal::SIGSTOP);
    c.wait_until("worker-s is stalled", |w| has(w, "worker-s", "stalled"));
    let stalled = c.events_of("worker-s").remove(0);
    assert_eq!(stalled.kind.to_string(), "stalled");
    assert!(
        stalled.cause.starts_with("no heartbeat for"),
        "{}",
        stalled.cause
    );
    s.signal(Signal::SIGCONT);
}

#[test]
fn a_web_restart_stalls_nobody_and_the_workers_hold_their_presence_again() {
    let mut c = Cluster::start();
    let _a = c.worker("worker-a");
    let b = c.worker("worker-b");
    c.wait_until("both workers run", |w| {
        has(w, "worker-a", "running") && has(w, "worker-b", "running")
    });
    for name in ["worker-a", "worker-b"] {
        wait_for(
            &format!("{name}'s presence"),
            Duration::from_secs(30),
            || (c.log_lines(name, HELD) >= 1).then_some(()),
        );
    }
    // Web comes back with a long TTL: the kill below must be seen by the
    // presence closing, and on a loaded machine (the suite's other e2e
    // tests running beside this one) a short TTL ran out first between two
    // late heartbeats, even at 2 s.
    c.restart_web(&["--heartbeat-ttl", "10s"]);
    for name in ["worker-a", "worker-b"] {
        wait_for(
            &format!("{name}'s presence after the restart"),
            Duration::from_secs(30),
            || (c.log_lines(name, HELD) >= 2).then_some(()),
        );
    }
    let workers = c.wait_until("both workers run", |w| {
        has(w, "worker-a", "running") && has(w, "worker-b", "running")
    });
    assert_eq!(workers.len(), 2);
    for name in ["worker-a", "worker-b"] {
        let kinds: Vec<String> = c
            .events_of(name)
            .into_iter()
            .map(|e| e.kind.to_string())
            .collect();
        assert_eq!(kinds, ["registered"], "{name}");
    }
    // The presence held again is what tells web of the next death.
    b.signal(Signal::SIGKILL);
    c.wait_until("worker-b is stalled", |w| has(w, "worker-b", "stalled"));
    let stalled = c.events_of("worker-b").remove(0);
    assert!(
        stalled.cause.starts_with("process gone: "),
        "{}",
        stalled.cause
    );
    assert_eq!(c.state_of("worker-a").as_deref(), Some("running"));
}
