//! How a step's end combines with its modifiers, as Concourse's
//! `atc/exec` steps combine them: hooks, `try`, `attempts`, `timeout`,
//! `do` and `in_parallel`. Pure: the engine runs what these say.
//!
//! A step with modifiers is, from the outside in, `ensure`, `on_error`,
//! `on_abort`, `on_failure`, `on_success`, `attempts`, `timeout`, the step
//! (Concourse's step precedence): each timeout bounds one attempt, and a
//! failing `on_success` hook makes the step fail, which `on_failure` sees.
//!
//! hangar's infrastructure retries (a worker lost, a volume gone) happen
//! below all of this, inside a leaf step: they are never an attempt here
//! and never an error `on_error` sees unless they run out.

use crate::build::{BuildStatus, StepState};

/// How a step (or a whole sub-plan) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// The step's own failure (a task exiting non-zero, a timeout).
    Failed,
    /// Not the step's own failure (infrastructure retries ran out, an
    /// invalid step).
    Errored,
    /// Stopped from outside: the build aborted, or a `fail_fast` sibling.
    Aborted,
}

impl Outcome {
    pub fn from_state(state: StepState) -> Outcome {
        match state {
            StepState::Succeeded => Outcome::Succeeded,
            StepState::Failed => Outcome::Failed,
            StepState::Aborted => Outcome::Aborted,
            StepState::Errored | StepState::Pending | StepState::Running => Outcome::Errored,
        }
    }

    pub fn state(self) -> StepState {
        match self {
            Outcome::Succeeded => StepState::Succeeded,
            Outcome::Failed => StepState::Failed,
            Outcome::Errored => StepState::Errored,
            Outcome::Aborted => StepState::Aborted,
        }
    }

    pub fn build_status(self) -> BuildStatus {
        match self {
            Outcome::Succeeded => BuildStatus::Succeeded,
            Outcome::Failed => BuildStatus::Failed,
            Outcome::Errored => BuildStatus::Errored,
            Outcome::Aborted => BuildStatus::Aborted,
        }
    }
}

/// A step hook, in the order they apply (innermost first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    OnSuccess,
    OnFailure,
    OnAbort,
    OnError,
    Ensure,
}

impl Hook {
    /// Innermost first: the order in which a step's hooks are considered.
    pub const ORDER: [Hook; 5] = [
        Hook::OnSuccess,
        Hook::OnFailure,
        Hook::OnAbort,
        Hook::OnError,
        Hook::Ensure,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Hook::OnSuccess => "on_success",
            Hook::OnFailure => "on_failure",
            Hook::OnAbort => "on_abort",
            Hook::OnError => "on_error",
            Hook::Ensure => "ensure",
        }
    }

    /// Whether the hook runs after a step that ended so: `on_failure` on a
    /// failure only (not an error), `on_error` on an error only (not an
    /// abort), `ensure` always.
    pub fn runs_after(self, step: Outcome) -> bool {
        match self {
            Hook::OnSuccess => step == Outcome::Succeeded,
            Hook::OnFailure => step == Outcome::Failed,
            Hook::OnAbort => step == Outcome::Aborted,
            Hook::OnError => step == Outcome::Errored,
            Hook::Ensure => true,
        }
    }

    /// The step's outcome once the hook ran (`hook`, `None` when it did not
    /// run).
    pub fn combine(self, step: Outcome, hook: Option<Outcome>) -> Outcome {
        let Some(hook) = hook else { return step };
        match self {
            // The hook's end is the step's: a failing on_success fails it.
            Hook::OnSuccess => hook,
            // Still a failure, unless the hook itself errored or aborted.
            Hook::OnFailure => match hook {
                Outcome::Errored | Outcome::Aborted => hook,
                Outcome::Succeeded | Outcome::Failed => Outcome::Failed,
            },
            // The step's own end stands whatever the hook did.
            Hook::OnAbort | Hook::OnError => step,
            Hook::Ensure => match (step, hook) {
                (Outcome::Aborted, _) | (_, Outcome::Aborted) => Outcome::Aborted,
                (Outcome::Errored, _) | (_, Outcome::Errored) => Outcome::Errored,
                (Outcome::Failed, _) | (_, Outcome::Failed) => Outcome::Failed,
                (Outcome::Succeeded, Outcome::Succeeded) => Outcome::Succeeded,
            },
        }
    }
}

/// `try`: a failure or an error becomes a success; an abort stays one.
pub fn try_outcome(step: Outcome) -> Outcome {
    match step {
        Outcome::Aborted => Outcome::Aborted,
        _ => Outcome::Succeeded,
    }
}

/// A step cut short by its `timeout` fails (Concourse: not an error, and
/// not an abort, so `on_abort` does not run but `on_failure` does).
pub const TIMED_OUT: Outcome = Outcome::Failed;

/// `attempts`: whether attempt `attempt` (from 1) of `attempts` is run
/// again. Failures and errors are; an abort or a success is not.
pub fn attempt_again(step: Outcome, attempt: u32, attempts: u32) -> bool {
    matches!(step, Outcome::Failed | Outcome::Errored) && attempt < attempts
}

/// `in_parallel` with `fail_fast`: whether a child ending so stops the
/// siblings still running (they end aborted) and the ones not started.
pub fn stops_siblings(child: Outcome, fail_fast: bool) -> bool {
    fail_fast && child != Outcome::Succeeded
}

/// The end of an `in_parallel` whose children ended so (in plan order;
/// children never started are left out), when the build itself was not
/// aborted: an error wins, then any other unsuccessful child makes it
/// fail (siblings aborted by `fail_fast` are failures, not aborts).
pub fn parallel_outcome(children: &[Outcome]) -> Outcome {
    if children.contains(&Outcome::Errored) {
        Outcome::Errored
    } else if children.iter().any(|c| *c != Outcome::Succeeded) {
        Outcome::Failed
    } else {
        Outcome::Succeeded
    }
}

/// The effective number of children of an `in_parallel` run at once.
pub fn parallel_limit(limit: Option<u32>, children: usize) -> usize {
    match limit {
        Some(n) if n > 0 => (n as usize).min(children.max(1)),
        _ => children.max(1),
    }
}

#[cfg(test)]
mod tests;
