use super::*;
use Outcome::{Aborted as A, Errored as E, Failed as F, Succeeded as S};

/// Folds a step's end through its hooks as the engine does; `hook_end`
/// is what each hook would end with if it ran.
fn through_hooks(step: Outcome, hook_end: &[(Hook, Outcome)]) -> (Outcome, Vec<Hook>) {
    let mut ran = Vec::new();
    let mut now = step;
    for hook in Hook::ORDER {
        let Some((_, end)) = hook_end.iter().find(|(h, _)| *h == hook) else {
            continue;
        };
        if hook.runs_after(now) {
            ran.push(hook);
            now = hook.combine(now, Some(*end));
        }
    }
    (now, ran)
}

fn all_hooks(end: Outcome) -> Vec<(Hook, Outcome)> {
    Hook::ORDER.iter().map(|h| (*h, end)).collect()
}

#[test]
fn which_hooks_run_after_each_end() {
    use Hook::*;
    let cases: [(Outcome, &[Hook]); 4] = [
        (S, &[OnSuccess, Ensure]),
        (F, &[OnFailure, Ensure]),
        (E, &[OnError, Ensure]),
        (A, &[OnAbort, Ensure]),
    ];
    for (step, expected) in cases {
        let (end, ran) = through_hooks(step, &all_hooks(S));
        assert_eq!(ran, expected, "{step:?}");
        assert_eq!(end, step, "succeeding hooks change nothing: {step:?}");
    }
}

#[test]
fn a_hook_s_own_end_changes_the_step_s_as_concourse() {
    use Hook::*;
    let cases = [
        // on_success failing fails the step, and on_failure then runs.
        (
            S,
            vec![(OnSuccess, F), (OnFailure, S)],
            F,
            vec![OnSuccess, OnFailure],
        ),
        (
            S,
            vec![(OnSuccess, E), (OnError, S)],
            E,
            vec![OnSuccess, OnError],
        ),
        // on_failure's own failure leaves a failure; its error is an error.
        (F, vec![(OnFailure, F)], F, vec![OnFailure]),
        (
            F,
            vec![(OnFailure, E), (OnError, S)],
            E,
            vec![OnFailure, OnError],
        ),
        // on_error and on_abort never change the step's end.
        (E, vec![(OnError, F)], E, vec![OnError]),
        (A, vec![(OnAbort, E)], A, vec![OnAbort]),
        // ensure always runs; its failure fails a success.
        (S, vec![(Ensure, F)], F, vec![Ensure]),
        (S, vec![(Ensure, E)], E, vec![Ensure]),
        (F, vec![(Ensure, S)], F, vec![Ensure]),
        (F, vec![(Ensure, E)], E, vec![Ensure]),
        (E, vec![(Ensure, F)], E, vec![Ensure]),
        (A, vec![(Ensure, F)], A, vec![Ensure]),
        (A, vec![(Ensure, E)], A, vec![Ensure]),
        // An aborted build: on_abort and ensure only, never on_failure.
        (A, all_hooks(S), A, vec![OnAbort, Ensure]),
    ];
    for (step, hooks, expected, ran_expected) in cases {
        let (end, ran) = through_hooks(step, &hooks);
        assert_eq!((end, &ran), (expected, &ran_expected), "{step:?} {hooks:?}");
    }
}

#[test]
fn try_turns_failure_and_error_into_success_but_not_abort() {
    for (step, expected) in [(S, S), (F, S), (E, S), (A, A)] {
        assert_eq!(try_outcome(step), expected, "{step:?}");
    }
    // A timeout is a failure, so try swallows it (Concourse: timeouts are
    // not aborts).
    assert_eq!(try_outcome(TIMED_OUT), S);
}

#[test]
fn attempts_rerun_failures_and_errors_but_not_aborts() {
    let cases = [
        (F, 1, 3, true),
        (E, 1, 3, true),
        (F, 2, 3, true),
        (F, 3, 3, false),
        (E, 3, 3, false),
        (A, 1, 3, false),
        (S, 1, 3, false),
        (F, 1, 1, false),
        (TIMED_OUT, 1, 2, true),
    ];
    for (step, attempt, attempts, expected) in cases {
        assert_eq!(
            attempt_again(step, attempt, attempts),
            expected,
            "{step:?} {attempt}/{attempts}"
        );
    }
}

#[test]
fn a_timeout_is_a_failure_not_an_error_nor_an_abort() {
    assert_eq!(TIMED_OUT, F);
    assert!(Hook::OnFailure.runs_after(TIMED_OUT));
    assert!(!Hook::OnAbort.runs_after(TIMED_OUT));
    assert!(!Hook::OnError.runs_after(TIMED_OUT));
}

#[test]
fn in_parallel_ends_and_fail_fast() {
    let cases: [(&[Outcome], Outcome); 7] = [
        (&[S, S], S),
        (&[], S),
        (&[S, F], F),
        (&[F, E], E),
        (&[S, E, F], E),
        // Siblings aborted by fail_fast: the in_parallel fails, not aborts.
        (&[F, A, A], F),
        (&[A], F),
    ];
    for (children, expected) in cases {
        assert_eq!(parallel_outcome(children), expected, "{children:?}");
    }
    for (child, fail_fast, expected) in [
        (F, true, true),
        (E, true, true),
        (A, true, true),
        (S, true, false),
        (F, false, false),
        (E, false, false),
    ] {
        assert_eq!(
            stops_siblings(child, fail_fast),
            expected,
            "{child:?} {fail_fast}"
        );
    }
}

#[test]
fn in_parallel_limits() {
    for (limit, children, expected) in [
        (None, 5, 5),
        (Some(0), 5, 5),
        (Some(2), 5, 2),
        (Some(9), 5, 5),
        (Some(1), 0, 1),
        (None, 0, 1),
    ] {
        assert_eq!(
            parallel_limit(limit, children),
            expected,
            "{limit:?} {children}"
        );
    }
}

#[test]
fn outcomes_map_to_states_and_build_statuses() {
    for o in [S, F, E, A] {
        assert_eq!(Outcome::from_state(o.state()), o);
    }
    assert_eq!(A.build_status(), BuildStatus::Aborted);
    assert_eq!(E.build_status(), BuildStatus::Errored);
    assert_eq!(Outcome::from_state(StepState::Running), E);
}
