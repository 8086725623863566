use super::*;

const TTL: i64 = 15_000;
const STALL_TIMEOUT: i64 = 600_000;

fn config() -> LifecycleConfig {
    LifecycleConfig {
        heartbeat_ttl_ms: TTL,
        stalled_worker_timeout_ms: Some(STALL_TIMEOUT),
    }
}

fn worker(
    state: WorkerState,
    ephemeral: bool,
    silent_ms: i64,
    in_state_ms: i64,
    work: i64,
) -> WorkerSnapshot {
    let now = 1_000_000_000;
    WorkerSnapshot {
        name: "w".into(),
        state,
        generation: 7,
        ephemeral,
        last_heartbeat_at: now - silent_ms,
        state_changed_at: now - in_state_ms,
        unfinished_work: work,
    }
}

fn plan(w: WorkerSnapshot, cfg: &LifecycleConfig) -> Option<(LifecycleStep, EventKind)> {
    let actions = plan_lifecycle(std::slice::from_ref(&w), 1_000_000_000, cfg);
    assert!(actions.len() <= 1);
    actions.into_iter().next().map(|a| {
        assert_eq!((a.name.as_str(), a.from, a.generation), ("w", w.state, 7));
        (a.step, a.event)
    })
}

/// (state, ephemeral, ms since heartbeat, ms in state, unfinished work)
type Case = (WorkerState, bool, i64, i64, i64);
type Expected = Option<(LifecycleStep, EventKind)>;

#[test]
fn lifecycle_transitions_follow_the_table() {
    use EventKind as E;
    use LifecycleStep::*;
    use WorkerState::*;
    let fresh = 1_000;
    let dead = TTL + 1;
    // (state, ephemeral, ms since heartbeat, ms in state, unfinished work) => expected
    let cases: Vec<(Case, Expected)> = vec![
        ((Running, false, fresh, 0, 3), None),
        ((Running, false, TTL, 0, 0), None), // exactly at the TTL is still alive
        (
            (Running, false, dead, 0, 0),
            Some((Become(Stalled), E::Stalled)),
        ),
        (
            (Running, true, dead, 0, 0),
            Some((Remove, E::RemovedEphemeral)),
        ),
        ((Landing, false, fresh, 0, 2), None),
        (
            (Landing, false, fresh, 0, 0),
            Some((Become(Landed), E::Landed)),
        ),
        (
            (Landing, false, dead, 0, 2),
            Some((Become(Stalled), E::Stalled)),
        ),
        (
            (Landing, true, dead, 0, 2),
            Some((Remove, E::RemovedEphemeral)),
        ),
        ((Landed, false, dead * 100, 0, 0), None), // landed workers don't heartbeat
        ((Retiring, false, fresh, 0, 1), None),
        ((Retiring, false, fresh, 0, 0), Some((Remove, E::Retired))),
        ((Retiring, false, dead, 0, 5), Some((Remove, E::Retired))),
        ((Stalled, false, dead, STALL_TIMEOUT - 1, 0), None),
        (
            (Stalled, false, dead, STALL_TIMEOUT, 0),
            Some((Remove, E::RemovedAfterStallTimeout)),
        ),
        (
            (Stalled, true, dead, STALL_TIMEOUT * 2, 4),
            Some((Remove, E::RemovedAfterStallTimeout)),
        ),
    ];
    for ((state, eph, silent, in_state, work), expected) in cases {
        let got = plan(worker(state, eph, silent, in_state, work), &config());
        assert_eq!(
            got, expected,
            "{state} ephemeral={eph} silent={silent} in_state={in_state} work={work}"
        );
    }
}

#[test]
fn a_stall_timeout_of_none_keeps_stalled_workers_for_ever() {
    let cfg = LifecycleConfig {
        stalled_worker_timeout_ms: None,
        ..config()
    };
    let w = worker(WorkerState::Stalled, false, i64::MAX / 4, i64::MAX / 4, 0);
    assert_eq!(plan(w, &cfg), None);
}

#[test]
fn a_stalled_action_names_the_silence_and_the_ttl() {
    let w = worker(WorkerState::Running, false, 16_000, 0, 0);
    let actions = plan_lifecycle(&[w], 1_000_000_000, &config());
    assert_eq!(actions[0].cause, "no heartbeat for 16s (ttl 15s)");
}

#[test]
fn a_clock_that_went_backwards_kills_nobody() {
    // A heartbeat stamped in the future (another web node's clock ahead of
    // ours) must not underflow into a huge silence.
    let w = worker(WorkerState::Running, false, -60_000, -60_000, 0);
    assert_eq!(plan(w, &config()), None);
}

#[test]
fn planning_the_result_of_a_plan_is_quiet() {
    // Apply every action to its snapshot, then plan again: nothing more is due
    // except a stall that later times out, which needs time to pass.
    let states = WorkerState::ALL;
    for state in states {
        for eph in [false, true] {
            for work in [0, 1] {
                let w = worker(state, eph, TTL + 1, 0, work);
                let Some((step, _)) = plan(w.clone(), &config()) else {
                    continue;
                };
                if let LifecycleStep::Become(next) = step {
                    let after = WorkerSnapshot {
                        state: next,
                        state_changed_at: 1_000_000_000,
                        ..w
                    };
                    assert_eq!(plan(after, &config()), None, "after {state} -> {next}");
                }
            }
        }
    }
}

#[test]
fn operator_commands_follow_the_table() {
    use EventKind as E;
    use LifecycleStep::*;
    use OperatorCommand::*;
    use WorkerState::*;
    let cases = [
        (Land, Running, Ok(Some((Become(Landing), E::Landing)))),
        (Land, Landing, Ok(None)),
        (Land, Landed, Ok(None)),
        (Land, Stalled, Err("stalled")),
        (Land, Retiring, Err("retiring")),
        (Retire, Running, Ok(Some((Become(Retiring), E::Retiring)))),
        (Retire, Landing, Ok(Some((Become(Retiring), E::Retiring)))),
        (Retire, Landed, Ok(Some((Become(Retiring), E::Retiring)))),
        (Retire, Retiring, Ok(None)),
        (Retire, Stalled, Err("stalled")),
        (Prune, Running, Err("running")),
        (Prune, Stalled, Ok(Some((Remove, E::Pruned)))),
        (Prune, Landing, Ok(Some((Remove, E::Pruned)))),
        (Prune, Landed, Ok(Some((Remove, E::Pruned)))),
        (Prune, Retiring, Ok(Some((Remove, E::Pruned)))),
    ];
    for (command, state, expected) in cases {
        let got = apply_command(state, command);
        match (got, expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e, "{} on {state}", command.as_str()),
            (Err(msg), Err(word)) => assert!(msg.starts_with(&format!("it is {word}")), "{msg}"),
            (g, e) => panic!("{} on {state}: got {g:?}, expected {e:?}", command.as_str()),
        }
    }
}

#[test]
fn durations_print_the_way_flags_take_them() {
    let cases = [
        (0, "0ms"),
        (250, "250ms"),
        (1_000, "1s"),
        (1_500, "1.5s"),
        (15_000, "15s"),
        (90_000, "1m30s"),
        (600_000, "10m"),
        (3_600_000 + 5_000, "1h5s"),
        (-2_000, "-2s"),
    ];
    for (ms, text) in cases {
        assert_eq!(human_ms(ms), text, "{ms}");
    }
}

#[test]
fn a_gone_process_is_judged_as_the_ttl_would_judge_it_now() {
    use LifecycleStep::*;
    use WorkerState::*;
    // (state, ephemeral) → what a gone process's worker becomes, whatever
    // its last heartbeat: the TTL's decision, taken at once.
    let cases: [((WorkerState, bool), Expected); 10] = [
        (
            (Running, false),
            Some((Become(Stalled), EventKind::Stalled)),
        ),
        (
            (Landing, false),
            Some((Become(Stalled), EventKind::Stalled)),
        ),
        ((Retiring, false), Some((Remove, EventKind::Retired))),
        ((Running, true), Some((Remove, EventKind::RemovedEphemeral))),
        ((Landing, true), Some((Remove, EventKind::RemovedEphemeral))),
        ((Retiring, true), Some((Remove, EventKind::Retired))),
        ((Stalled, false), None),
        ((Landed, false), None),
        ((Stalled, true), None),
        ((Landed, true), None),
    ];
    for ((state, ephemeral), want) in cases {
        let w = worker(state, ephemeral, 100, 100, 1);
        let got = plan_gone(&w, "its process is gone").map(|a| {
            assert_eq!(
                (a.from, a.generation, a.seen_heartbeat_at),
                (state, 7, w.last_heartbeat_at)
            );
            assert!(a.cause.ends_with("its process is gone"), "{}", a.cause);
            (a.step, a.event)
        });
        assert_eq!(got, want, "{state} ephemeral={ephemeral}");
        // The TTL, once out, decides the same.
        let expired = worker(state, ephemeral, TTL + 1, 100, 1);
        if want.is_some() {
            assert_eq!(
                plan(expired, &config()),
                want,
                "{state} ephemeral={ephemeral}"
            );
        }
    }
}
