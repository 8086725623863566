//! The worker lifecycle state machine.
//!
//! ```text
//!             register (any state, or no row)
//!                 │
//!                 ▼
//!   ┌────────► running ──land──► landing ──no work──► landed
//!   │             │  │                │
//!   │   TTL out   │  └──retire──► retiring ──no work──► (removed)
//!   │             ▼                   │
//!   └─register── stalled ◄──TTL out───┘(landing)
//!                 │
//!                 └──prune / stall timeout──► (removed)
//! ```
//!
//! The planner ([`plan_lifecycle`]) looks at a snapshot and says what should
//! change; the store applies each step only if the row still matches what the
//! snapshot saw, so two web nodes running the loop at once never apply a step
//! twice.

use std::fmt;
use std::str::FromStr;

use crate::events::EventKind;
use crate::UnixMillis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Running,
    Stalled,
    Landing,
    Landed,
    Retiring,
}

impl WorkerState {
    pub const ALL: [WorkerState; 5] = [
        WorkerState::Running,
        WorkerState::Stalled,
        WorkerState::Landing,
        WorkerState::Landed,
        WorkerState::Retiring,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Stalled => "stalled",
            WorkerState::Landing => "landing",
            WorkerState::Landed => "landed",
            WorkerState::Retiring => "retiring",
        }
    }

    /// Whether the worker process is expected to be alive and heartbeating.
    pub fn expects_heartbeats(self) -> bool {
        matches!(
            self,
            WorkerState::Running | WorkerState::Landing | WorkerState::Retiring
        )
    }
}

impl fmt::Display for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkerState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkerState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown worker state {s:?}"))
    }
}

/// Timing rules of the lifecycle loop, all in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// A heartbeating worker whose last heartbeat is older than this is dead.
    pub heartbeat_ttl_ms: i64,
    /// A stalled worker is removed after this long; `None` keeps it for ever.
    pub stalled_worker_timeout_ms: Option<i64>,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            heartbeat_ttl_ms: 15_000,
            stalled_worker_timeout_ms: Some(10 * 60_000),
        }
    }
}

/// What the planner needs to know of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSnapshot {
    pub name: String,
    pub state: WorkerState,
    pub generation: i64,
    pub ephemeral: bool,
    pub last_heartbeat_at: UnixMillis,
    pub state_changed_at: UnixMillis,
    /// Containers (and, later, steps) still running on the worker. A landing or
    /// retiring worker waits until this is zero.
    pub unfinished_work: i64,
}

/// What happens to a worker in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleStep {
    Become(WorkerState),
    Remove,
}

/// One decision of the planner, with the condition under which it still holds:
/// the store applies it only if the row is still in `from` at `generation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleAction {
    pub name: String,
    pub from: WorkerState,
    pub generation: i64,
    /// The heartbeat the plan saw: if a newer one arrived since, the worker is
    /// not dead after all and the action is dropped.
    pub seen_heartbeat_at: UnixMillis,
    pub step: LifecycleStep,
    pub event: EventKind,
    /// The cause in plain words, recorded with the event.
    pub cause: String,
}

/// Decides every lifecycle change due at `now`. Pure and idempotent: running
/// it twice on the same snapshot gives the same actions, and applying them
/// makes the next plan empty.
pub fn plan_lifecycle(
    workers: &[WorkerSnapshot],
    now: UnixMillis,
    config: &LifecycleConfig,
) -> Vec<LifecycleAction> {
    workers
        .iter()
        .filter_map(|w| plan_one(w, now, config))
        .collect()
}

fn plan_one(w: &WorkerSnapshot, now: UnixMillis, cfg: &LifecycleConfig) -> Option<LifecycleAction> {
    let action = |step, event, cause: String| {
        Some(LifecycleAction {
            name: w.name.clone(),
            from: w.state,
            generation: w.generation,
            seen_heartbeat_at: w.last_heartbeat_at,
            step,
            event,
            cause,
        })
    };
    let silent_ms = now.saturating_sub(w.last_heartbeat_at);
    let expired = w.state.expects_heartbeats() && silent_ms > cfg.heartbeat_ttl_ms;
    let silence = format!(
        "no heartbeat for {} (ttl {})",
        human_ms(silent_ms),
        human_ms(cfg.heartbeat_ttl_ms)
    );

    match w.state {
        // A worker that was leaving for good and then died has left.
        WorkerState::Retiring if expired => action(
            LifecycleStep::Remove,
            EventKind::Retired,
            format!("retiring worker stopped: {silence}"),
        ),
        // Ephemeral workers never come back with their state: remove, don't stall.
        WorkerState::Running | WorkerState::Landing if expired && w.ephemeral => action(
            LifecycleStep::Remove,
            EventKind::RemovedEphemeral,
            format!("ephemeral worker stopped: {silence}"),
        ),
        WorkerState::Running | WorkerState::Landing if expired => action(
            LifecycleStep::Become(WorkerState::Stalled),
            EventKind::Stalled,
            silence,
        ),
        WorkerState::Landing if w.unfinished_work == 0 => action(
            LifecycleStep::Become(WorkerState::Landed),
            EventKind::Landed,
            "landing worker has no unfinished work".to_string(),
        ),
        WorkerState::Retiring if w.unfinished_work == 0 => action(
            LifecycleStep::Remove,
            EventKind::Retired,
            "retiring worker has no unfinished work".to_string(),
        ),
        WorkerState::Stalled => {
            let timeout = cfg.stalled_worker_timeout_ms?;
            let stalled_for = now.saturating_sub(w.state_changed_at);
            (stalled_for >= timeout).then(|| LifecycleAction {
                name: w.name.clone(),
                from: w.state,
                generation: w.generation,
                seen_heartbeat_at: w.last_heartbeat_at,
                step: LifecycleStep::Remove,
                event: EventKind::RemovedAfterStallTimeout,
                cause: format!(
                    "stalled for {} (timeout {})",
                    human_ms(stalled_for),
                    human_ms(timeout)
                ),
            })
        }
        _ => None,
    }
}

/// The change due now to a worker whose process is known to be gone (its
/// connection to web closed without a goodbye and its API refused web's
/// probe): what [`plan_lifecycle`] decides once the heartbeat TTL runs
/// out, decided at once, with `why` as the cause. `None` for a worker not
/// expected to be alive (stalled, landed: nothing to settle).
pub fn plan_gone(w: &WorkerSnapshot, why: &str) -> Option<LifecycleAction> {
    if !w.state.expects_heartbeats() {
        return None;
    }
    let (step, event, cause) = match w.state {
        WorkerState::Retiring => (
            LifecycleStep::Remove,
            EventKind::Retired,
            format!("retiring worker stopped: {why}"),
        ),
        _ if w.ephemeral => (
            LifecycleStep::Remove,
            EventKind::RemovedEphemeral,
            format!("ephemeral worker stopped: {why}"),
        ),
        _ => (
            LifecycleStep::Become(WorkerState::Stalled),
            EventKind::Stalled,
            why.to_string(),
        ),
    };
    Some(LifecycleAction {
        name: w.name.clone(),
        from: w.state,
        generation: w.generation,
        seen_heartbeat_at: w.last_heartbeat_at,
        step,
        event,
        cause,
    })
}

/// What an operator (or the worker itself, on a signal) asks of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorCommand {
    Land,
    Retire,
    Prune,
}

impl OperatorCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorCommand::Land => "land",
            OperatorCommand::Retire => "retire",
            OperatorCommand::Prune => "prune",
        }
    }
}

/// Decides what a command does to a worker in `state`. `Ok(None)` means the
/// command is already satisfied (landing a landing worker): nothing changes and
/// it is not an error, so scripts and preStop hooks can repeat themselves.
pub fn apply_command(
    state: WorkerState,
    command: OperatorCommand,
) -> Result<Option<(LifecycleStep, EventKind)>, String> {
    use OperatorCommand::*;
    use WorkerState::*;
    match (command, state) {
        (Land, Running) => Ok(Some((LifecycleStep::Become(Landing), EventKind::Landing))),
        (Land, Landing | Landed) => Ok(None),
        (Land, Stalled) => Err("it is stalled; a stalled worker cannot land (prune it instead)".into()),
        (Land, Retiring) => Err("it is retiring; a retiring worker cannot land".into()),
        (Retire, Running | Landing | Landed) => {
            Ok(Some((LifecycleStep::Become(Retiring), EventKind::Retiring)))
        }
        (Retire, Retiring) => Ok(None),
        (Retire, Stalled) => Err("it is stalled; a stalled worker cannot retire (prune it instead)".into()),
        (Prune, Running) => Err(
            "it is running; only a worker that is not running can be pruned (land or retire it first)"
                .into(),
        ),
        (Prune, Stalled | Landing | Landed | Retiring) => {
            Ok(Some((LifecycleStep::Remove, EventKind::Pruned)))
        }
    }
}

/// Formats a duration in milliseconds the way flags take them (`5s`, `1m30s`, `250ms`).
pub fn human_ms(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", human_ms(-ms));
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    let rest_ms = ms % 1000;
    if secs > 0 || out.is_empty() {
        if rest_ms >= 100 && out.is_empty() && secs < 10 {
            out.push_str(&format!("{secs}.{}s", rest_ms / 100));
        } else {
            out.push_str(&format!("{secs}s"));
        }
    }
    out
}

pub mod hearing;

#[cfg(test)]
mod tests;
