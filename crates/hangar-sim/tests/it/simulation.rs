//! The deterministic simulation of web's core logic (see
//! `hangar_sim`), run for thousands of seeds. A failing seed is
//! printed with the events that led to it; pin it below as its own test once
//! the bug is fixed, so it stays fixed.

use hangar_sim::{self as sim, SimStats};

/// How many seeds the sweep runs.
const SEEDS: u64 = 2000;

#[test]
fn thousands_of_seeded_runs_keep_every_invariant() {
    let mut total = SimStats::default();
    let mut failures = Vec::new();
    for seed in 0..SEEDS {
        match sim::run(seed) {
            Ok(stats) => total.add(&stats),
            Err(v) => failures.push(v),
        }
    }
    if let Some(first) = failures.first() {
        let seeds: Vec<u64> = failures.iter().map(|v| v.seed).collect();
        panic!(
            "{} of {SEEDS} seeds violated an invariant: {seeds:?}\n\n{first}",
            failures.len()
        );
    }
    // The sweep is worth something only if the faults and recoveries it
    // claims to cover happened.
    for fault in [
        "kill-wipe",
        "kill-keep",
        "pause",
        "replace",
        "lose-volume",
        "web-down",
    ] {
        assert!(
            total.faults.get(fault).copied().unwrap_or(0) > SEEDS as usize / 2,
            "too few {fault} faults: {:?}",
            total.faults
        );
    }
    for kind in ["new", "state-kept", "state-lost"] {
        assert!(
            total.registrations.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} registrations: {:?}",
            total.registrations
        );
    }
    assert!(total.stalls > 0 && total.superseded > 0, "{total:?}");
    assert!(total.retries > 0 && total.refetches > 0, "{total:?}");
    assert!(total.succeeded > total.builds / 2, "{total:?}");
}

#[test]
fn a_seed_replays_the_same_run() {
    assert_eq!(sim::run(42), sim::run(42));
}

// Seeds that found a bug, each replayed as its own test.

/// Found the retry storm: a worker killed while a task's input lived on it
/// still looked running (not stalled yet), so every retry went back to it
/// (or copied from it) and failed at once, and one death used up all three
/// attempts within a second. Fixed by waiting, before such a retry, until
/// web has decided whether the worker is alive (`hangar_core::engine::Settle`).
#[test]
fn pinned_seed_0_a_dead_worker_does_not_use_up_a_step_s_attempts() {
    if let Err(v) = sim::run(0) {
        panic!("{v}");
    }
}

/// Found the lost-input loop: a volume gone from a live worker's disk was
/// asked for again on every retry until the worker's next report marked it
/// missing. Fixed by marking it missing as soon as the worker answers that
/// it does not have it (`hangar_core::engine::input_call_failure`).
#[test]
fn pinned_seed_134_an_input_a_worker_lost_is_fetched_anew() {
    if let Err(v) = sim::run(134) {
        panic!("{v}");
    }
}
