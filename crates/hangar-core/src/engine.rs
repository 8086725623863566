//! The decisions the build engine takes, as pure functions. The engine
//! (`hangar-engine`) and the deterministic simulation (`hangar-sim`) call
//! these same functions, so what the simulation proves is what runs.
//!
//! What web reads from its database has three values here, as in neon's
//! reconciler: known present, known absent, and unknown (the read failed).
//! Unknown is never taken as lost: the step finds out when it asks.

use std::fmt;

use crate::build::{BuildStatus, StepFailure, StepState};
use crate::volumes::VolumeState;
use crate::WorkerState;

/// What web knows of one thing it read from its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed<T> {
    Present(T),
    Absent,
    /// The read failed: nothing is known.
    Unknown,
}

impl<T> Observed<T> {
    /// From a store read: `Ok(Some)`, `Ok(None)` or an error.
    pub fn from_read<E>(read: Result<Option<T>, E>) -> Observed<T> {
        match read {
            Ok(Some(t)) => Observed::Present(t),
            Ok(None) => Observed::Absent,
            Err(_) => Observed::Unknown,
        }
    }
}

/// The one rule for handing a volume out (as a parent, a copy's source, a
/// step's input, or a placement hint): its row is created and its worker
/// still reports it. A volume missing from the last report is treated as
/// absent at once, though its row waits out the grace period.
pub fn volume_usable(state: VolumeState, missing_since: Option<i64>) -> bool {
    state == VolumeState::Created && missing_since.is_none()
}

/// A volume row as a step sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSeen<'a> {
    pub state: VolumeState,
    pub missing_since: Option<i64>,
    pub worker: &'a str,
}

/// Whether an input artifact can be used by a step now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputCheck {
    Usable,
    /// It went with its worker (named when known): fetch it again or fail.
    Lost {
        worker: Option<String>,
    },
}

/// Judges an input artifact from its volume row and its worker's state.
pub fn input_check(volume: Observed<VolumeSeen<'_>>, worker: Observed<WorkerState>) -> InputCheck {
    let vol = match volume {
        Observed::Unknown => return InputCheck::Usable,
        Observed::Absent => return InputCheck::Lost { worker: None },
        Observed::Present(v) => v,
    };
    let lost = || InputCheck::Lost {
        worker: Some(vol.worker.to_string()),
    };
    if !volume_usable(vol.state, vol.missing_since) {
        return lost();
    }
    match worker {
        Observed::Present(WorkerState::Stalled) | Observed::Absent => lost(),
        Observed::Present(_) | Observed::Unknown => InputCheck::Usable,
    }
}

/// How a call to a worker's API failed, without the HTTP client's types:
/// an answer with a status (and the API's error code), or no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// `None`: the worker did not answer (refused, timed out, broke off).
    pub status: Option<u16>,
    pub code: Option<String>,
    pub message: String,
}

impl CallError {
    pub fn unreachable(message: impl Into<String>) -> CallError {
        CallError {
            status: None,
            code: None,
            message: message.into(),
        }
    }

    pub fn refused(status: u16, code: &str, message: impl Into<String>) -> CallError {
        CallError {
            status: Some(status),
            code: Some(code.to_string()),
            message: message.into(),
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status == Some(404) || self.code.as_deref() == Some("not_found")
    }

    pub fn is_storage_full(&self) -> bool {
        self.status == Some(507) || self.code.as_deref() == Some("insufficient_storage")
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} ({s})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The one classification of a failed call to `worker`: a request the
/// worker called malformed is the step's own failure (retrying elsewhere
/// would fail the same way); a full disk is the worker's; anything else
/// (no answer, a 5xx, a refusal the step did not cause) is the worker
/// being unusable, an infrastructure failure.
pub fn call_failure(worker: &str, e: &CallError) -> StepFailure {
    if e.is_storage_full() {
        return StepFailure::DiskFull {
            worker: worker.to_string(),
        };
    }
    match e.status {
        Some(400) => StepFailure::Invalid {
            reason: e.message.clone(),
        },
        _ => StepFailure::WorkerUnreachable {
            worker: worker.to_string(),
            reason: e.to_string(),
        },
    }
}

/// The failure of a call made to use an input held by `holder` (a
/// copy-on-write child of it, or a copy streamed out of it), and whether
/// the input's row must be marked missing at once: when the holder itself
/// answers that it does not have it, the input is lost, and the retry must
/// fetch it anew rather than ask for it again until the next report.
pub fn input_call_failure(
    holder: &str,
    handle: &str,
    called: &str,
    e: &CallError,
) -> (StepFailure, bool) {
    if called == holder && e.is_not_found() {
        let lost = StepFailure::VolumeLost {
            worker: holder.to_string(),
            handle: handle.to_string(),
        };
        return (lost, true);
    }
    (call_failure(called, e), false)
}

/// What a worker answers when a file asked of a volume is missing, not a
/// regular file, too large, or leads out of the volume.
pub const FILE_UNREADABLE: &str = "file_unreadable";

/// The failure of reading `file` from volume `handle` on `holder`, and
/// whether the volume's row must be marked missing at once: a file the
/// worker could not give is the step's own failure (as Concourse fails a
/// build whose file is not there); the volume itself missing means it was
/// lost, as [`input_call_failure`] says; anything else is the worker's.
pub fn read_file_failure(
    holder: &str,
    handle: &str,
    file: &str,
    e: &CallError,
) -> (StepFailure, bool) {
    if e.code.as_deref() == Some(FILE_UNREADABLE) {
        let reason = format!("{file}: {}", e.message);
        return (StepFailure::Invalid { reason }, false);
    }
    input_call_failure(holder, handle, holder, e)
}

/// The failure of importing a task's `rootfs_uri` on `worker`: a path the
/// worker does not allow or does not have is the task's own mistake.
pub fn import_failure(uri: &str, worker: &str, e: &CallError) -> StepFailure {
    match e.status {
        Some(403) => StepFailure::Invalid {
            reason: format!("image {uri} cannot be imported on worker {worker}: {e}"),
        },
        Some(s) if s < 500 && !e.is_storage_full() => StepFailure::Invalid {
            reason: format!("image {uri} does not exist on worker {worker}: {e}"),
        },
        _ => call_failure(worker, e),
    }
}

/// What a failed attempt changes for the next one: the worker that failed
/// it is avoided, and an unreachable worker is first given time to be
/// judged (see [`Settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterFailure {
    pub avoid: Option<String>,
    pub settle: Option<String>,
}

pub fn after_failure(failure: &StepFailure) -> AfterFailure {
    AfterFailure {
        avoid: failure.worker().map(str::to_string),
        settle: match failure {
            StepFailure::WorkerUnreachable { worker, .. } => Some(worker.clone()),
            _ => None,
        },
    }
}

/// A worker's row as the settle rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerBeat {
    pub state: WorkerState,
    pub generation: i64,
    pub last_heartbeat_at: i64,
}

/// After a step failed because a worker could not be reached, the retry
/// waits until web has made up its mind about that worker, so it does not
/// race the failure detector: a dead worker that is not stalled yet still
/// looks running, holds the step's inputs and wins placement, and every
/// retry would fail on it at once until the attempts are gone.
///
/// Settled when the worker heartbeated after the failure (it is alive),
/// is stalled, registered again or left (it is dead), or once the heartbeat
/// TTL and two lifecycle passes went by, counted from the last time the
/// database failed to answer (heartbeats could not land meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    generation: i64,
    failed_at: i64,
    judge_ms: i64,
    deadline: i64,
}

impl Settle {
    /// How long web may take to judge a worker.
    pub fn judge_ms(heartbeat_ttl_ms: i64, lifecycle_pass_ms: i64) -> i64 {
        heartbeat_ttl_ms.saturating_add(lifecycle_pass_ms.saturating_mul(2))
    }

    /// Starts waiting about a worker at `generation`, which failed at
    /// `failed_at`.
    pub fn new(generation: i64, failed_at: i64, judge_ms: i64) -> Settle {
        Settle {
            generation,
            failed_at,
            judge_ms,
            deadline: failed_at.saturating_add(judge_ms),
        }
    }

    /// Whether web has decided, given the worker's row read at `now`.
    pub fn observe(&mut self, row: Observed<WorkerBeat>, now: i64) -> bool {
        match row {
            Observed::Absent => return true,
            Observed::Present(w)
                if w.state == WorkerState::Stalled
                    || w.generation != self.generation
                    || w.last_heartbeat_at > self.failed_at =>
            {
                return true
            }
            Observed::Present(_) => {}
            Observed::Unknown => {
                self.deadline = self.deadline.max(now.saturating_add(self.judge_ms));
            }
        }
        now >= self.deadline
    }
}

/// The step of a list that decides it: the first, in plan order, that did
/// not succeed (`None`: all succeeded).
pub fn deciding_step(ends: &[StepState]) -> Option<usize> {
    ends.iter().position(|s| *s != StepState::Succeeded)
}

/// A build's status from the end of the step that decided it. Only
/// `succeeded` and `failed` are the build's own; anything else (errored,
/// or a step that never ended) is an error.
pub fn build_status(deciding: StepState) -> BuildStatus {
    match deciding {
        StepState::Succeeded => BuildStatus::Succeeded,
        StepState::Failed => BuildStatus::Failed,
        StepState::Aborted => BuildStatus::Aborted,
        StepState::Errored | StepState::Pending | StepState::Running => BuildStatus::Errored,
    }
}

/// The build log's last line.
pub fn final_status_line(status: BuildStatus, error: Option<&str>) -> String {
    match (error, status) {
        (_, BuildStatus::Succeeded) => "succeeded".to_string(),
        (Some(e), s) => format!("{s}: {e}"),
        (None, s) => s.to_string(),
    }
}

#[cfg(test)]
mod tests;
