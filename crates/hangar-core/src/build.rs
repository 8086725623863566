//! Builds and steps: their states, how a step failure is classified, and
//! whether it is retried.

use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|k| k.as_str() == s)
                    .ok_or_else(|| format!("unknown {} {s:?}", stringify!($name)))
            }
        }
    };
}

string_enum!(
    /// A build's status. `errored` is for failures that are not the build's
    /// own (after retries ran out); `failed` is a step's own failure.
    BuildStatus {
        Pending => "pending",
        Started => "started",
        Succeeded => "succeeded",
        Failed => "failed",
        Errored => "errored",
        Aborted => "aborted",
    }
);

impl BuildStatus {
    pub fn is_final(self) -> bool {
        !matches!(self, BuildStatus::Pending | BuildStatus::Started)
    }
}

string_enum!(
    /// A step's state; `aborted`: stopped from outside (the build was
    /// aborted, or a sibling of a `fail_fast` in_parallel did not succeed).
    StepState {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Errored => "errored",
        Aborted => "aborted",
    }
);

string_enum!(
    /// What a build step runs.
    StepKind {
        Get => "get",
        Put => "put",
        Task => "task",
        LoadVar => "load-var",
        SetPipeline => "set-pipeline",
    }
);

string_enum!(
    /// What an entry of a build's log is: `log` (the step's output), `step`
    /// (a step started or ended), `infra` (what the infrastructure did: a
    /// worker lost, a retry), `status` (the build's end), `error`.
    BuildEventKind {
        Log => "log",
        Status => "status",
        Step => "step",
        Infra => "infra",
        Error => "error",
    }
);

/// Why a step attempt did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepFailure {
    /// The step's program exited non-zero.
    Exited { code: i32 },
    /// The step's program was killed by a signal it was not sent by us.
    Signaled { signal: i32 },
    /// The kernel killed the step's container for exceeding its memory limit.
    OutOfMemory { limit_bytes: Option<u64> },
    /// The step's configuration or inputs are wrong (bad task config, an input
    /// nobody produced, an image that does not exist).
    Invalid { reason: String },
    /// The worker was declared stalled while the step ran there.
    WorkerStalled { worker: String },
    /// The worker registered again (a new process, maybe a new disk).
    WorkerRestarted { worker: String, state_lost: bool },
    /// The worker left the fleet (retired, pruned, removed).
    WorkerGone { worker: String },
    /// The worker could not be reached.
    WorkerUnreachable { worker: String, reason: String },
    /// A volume the step needed is gone.
    VolumeLost { worker: String, handle: String },
    /// The step's container is gone or its state was lost.
    ContainerLost { worker: String, handle: String },
    /// The worker's work dir filled up while the step ran: whatever the
    /// program did, it could not write, and another worker may have room.
    DiskFull { worker: String },
    /// A resource action exited `code` saying (through the worker, for its
    /// own base types only) that what it fetches from could not be reached
    /// or failed: a registry down or answering 5xx, a stream cut. Another
    /// worker may reach it.
    SourceUnavailable { worker: String, code: i32 },
}

/// Whose fault a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The step's own: not retried (unless the step asks), fails the build.
    Own,
    /// The infrastructure's: retried elsewhere; errors the build only once
    /// the attempts run out.
    Infrastructure,
}

impl StepFailure {
    pub fn class(&self) -> FailureClass {
        match self {
            StepFailure::Exited { .. }
            | StepFailure::Signaled { .. }
            | StepFailure::OutOfMemory { .. }
            | StepFailure::Invalid { .. } => FailureClass::Own,
            StepFailure::WorkerStalled { .. }
            | StepFailure::WorkerRestarted { .. }
            | StepFailure::WorkerGone { .. }
            | StepFailure::WorkerUnreachable { .. }
            | StepFailure::VolumeLost { .. }
            | StepFailure::ContainerLost { .. }
            | StepFailure::DiskFull { .. }
            | StepFailure::SourceUnavailable { .. } => FailureClass::Infrastructure,
        }
    }

    /// The step's own exit code, when the failure is one.
    pub fn exit_code(&self) -> Option<i64> {
        match self {
            StepFailure::Exited { code } => Some(i64::from(*code)),
            _ => None,
        }
    }

    /// A short stable name of the failure's kind, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StepFailure::Exited { .. } => "exited",
            StepFailure::Signaled { .. } => "signaled",
            StepFailure::OutOfMemory { .. } => "out-of-memory",
            StepFailure::Invalid { .. } => "invalid",
            StepFailure::WorkerStalled { .. } => "worker-stalled",
            StepFailure::WorkerRestarted { .. } => "worker-restarted",
            StepFailure::WorkerGone { .. } => "worker-gone",
            StepFailure::WorkerUnreachable { .. } => "worker-unreachable",
            StepFailure::VolumeLost { .. } => "volume-lost",
            StepFailure::ContainerLost { .. } => "container-lost",
            StepFailure::DiskFull { .. } => "disk-full",
            StepFailure::SourceUnavailable { .. } => "source-unavailable",
        }
    }

    /// The worker to avoid on the next attempt, if the failure was its.
    pub fn worker(&self) -> Option<&str> {
        match self {
            StepFailure::WorkerStalled { worker }
            | StepFailure::WorkerRestarted { worker, .. }
            | StepFailure::WorkerGone { worker }
            | StepFailure::WorkerUnreachable { worker, .. }
            | StepFailure::VolumeLost { worker, .. }
            | StepFailure::ContainerLost { worker, .. }
            | StepFailure::DiskFull { worker }
            | StepFailure::SourceUnavailable { worker, .. } => Some(worker),
            _ => None,
        }
    }

    /// The step's own program failed (an exit, a signal, its memory
    /// limit), not the infrastructure: what a user may want to look into.
    pub fn is_the_programs_own(&self) -> bool {
        matches!(
            self,
            StepFailure::Exited { .. }
                | StepFailure::Signaled { .. }
                | StepFailure::OutOfMemory { .. }
        )
    }

    /// Whether the step's worker may be past answering (so cleaning up on
    /// it is left to its next report). A worker with a full disk answers,
    /// and destroying the step's container is what frees its space.
    pub fn worker_may_not_answer(&self) -> bool {
        self.worker().is_some()
            && !matches!(
                self,
                StepFailure::DiskFull { .. } | StepFailure::SourceUnavailable { .. }
            )
    }

    /// The failure in plain words, for the build log.
    pub fn describe(&self) -> String {
        match self {
            StepFailure::Exited { code } => format!("exited with code {code}"),
            StepFailure::Signaled { signal } => format!("killed by signal {signal}"),
            StepFailure::OutOfMemory {
                limit_bytes: Some(l),
            } => {
                format!("killed: out of memory (memory limit {})", human_bytes(*l))
            }
            StepFailure::OutOfMemory { limit_bytes: None } => "killed: out of memory".to_string(),
            StepFailure::Invalid { reason } => reason.clone(),
            StepFailure::WorkerStalled { worker } => {
                format!("worker {worker} stalled (stopped heartbeating) while the step ran")
            }
            StepFailure::WorkerRestarted {
                worker,
                state_lost: true,
            } => {
                format!("worker {worker} restarted with its work dir wiped while the step ran")
            }
            StepFailure::WorkerRestarted {
                worker,
                state_lost: false,
            } => {
                format!("worker {worker} restarted while the step ran")
            }
            StepFailure::WorkerGone { worker } => {
                format!("worker {worker} left the fleet while the step ran")
            }
            StepFailure::WorkerUnreachable { worker, reason } => {
                format!("worker {worker} could not be reached: {reason}")
            }
            StepFailure::VolumeLost { worker, handle } => {
                format!("volume {handle} on worker {worker} was lost")
            }
            StepFailure::ContainerLost { worker, handle } => {
                format!("container {handle} on worker {worker} was lost")
            }
            StepFailure::DiskFull { worker } => {
                format!("disk full on worker {worker}: the step could not write; trying elsewhere")
            }
            StepFailure::SourceUnavailable { worker, code } => format!(
                "the resource's source could not be reached or failed from worker {worker} \
                 (exit {code}, an infrastructure error; see the output above)"
            ),
        }
    }
}

/// Whether a container that ended on a worker whose disk was full failed
/// for that reason. A program that exited 0 succeeded by its own account and
/// keeps its result; any other end (a code, a signal, no status at all
/// because the wrapper could not write it) is the disk's fault, not the
/// step's: an infrastructure failure, retried on another worker.
pub fn full_disk_failure(worker: &str, code: Option<i32>, disk_full: bool) -> Option<StepFailure> {
    (disk_full && code != Some(0)).then(|| StepFailure::DiskFull {
        worker: worker.to_string(),
    })
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again (attempt numbers count from 1).
    Retry { next_attempt: u32 },
    /// Stop; the step ends in this state.
    GiveUp(StepState),
}

/// Decides whether attempt `attempt` of at most `max_attempts` is retried.
/// Infrastructure failures are retried while attempts remain; a step's own
/// failure only when `retry_own_failures` (the task asked for it).
pub fn decide_retry(
    failure: &StepFailure,
    attempt: u32,
    max_attempts: u32,
    retry_own_failures: bool,
) -> RetryDecision {
    let class = failure.class();
    let retryable = class == FailureClass::Infrastructure || retry_own_failures;
    if retryable && attempt < max_attempts {
        RetryDecision::Retry {
            next_attempt: attempt + 1,
        }
    } else {
        RetryDecision::GiveUp(match class {
            FailureClass::Own => StepState::Failed,
            FailureClass::Infrastructure => StepState::Errored,
        })
    }
}

/// What web knew of a worker when a step started on it, and what it knows
/// now: whether the step's worker is still the one it started on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSeen {
    pub state: crate::WorkerState,
    pub generation: i64,
    pub state_identity: String,
}

/// The infrastructure failure a step suffers because its worker changed
/// under it, if it did. A landing or retiring worker still finishes its work.
pub fn worker_change(
    worker: &str,
    at_start: &WorkerSeen,
    now: Option<&WorkerSeen>,
) -> Option<StepFailure> {
    let worker = worker.to_string();
    match now {
        None => Some(StepFailure::WorkerGone { worker }),
        Some(n) if n.generation != at_start.generation => Some(StepFailure::WorkerRestarted {
            worker,
            state_lost: n.state_identity != at_start.state_identity,
        }),
        Some(n) if n.state == crate::WorkerState::Stalled => {
            Some(StepFailure::WorkerStalled { worker })
        }
        Some(_) => None,
    }
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = n as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if size.fract() == 0.0 {
        format!("{size:.0} {}", UNITS[unit])
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> String {
        "w1".into()
    }

    #[test]
    fn a_full_disk_fails_every_end_but_a_clean_exit() {
        // (exit code, disk full, a failure expected)
        let cases = [
            (Some(0), true, false),
            (Some(1), true, true),
            (None, true, true), // no status: the wrapper could not write it
            (Some(1), false, false),
            (None, false, false),
        ];
        for (code, full, failed) in cases {
            let got = full_disk_failure("w1", code, full);
            assert_eq!(got.is_some(), failed, "{code:?} {full}");
            if let Some(f) = got {
                assert_eq!(f.class(), FailureClass::Infrastructure);
                assert_eq!(f.worker(), Some("w1"));
                assert!(!f.worker_may_not_answer());
                assert!(
                    f.describe().starts_with("disk full on worker w1"),
                    "{}",
                    f.describe()
                );
            }
        }
        assert!(StepFailure::WorkerGone { worker: w() }.worker_may_not_answer());
        assert!(!StepFailure::Exited { code: 1 }.worker_may_not_answer());
    }

    #[test]
    fn failures_are_classified_by_whose_fault_they_are() {
        use FailureClass::*;
        let cases = [
            (StepFailure::Exited { code: 1 }, Own),
            (StepFailure::Signaled { signal: 9 }, Own),
            (
                StepFailure::OutOfMemory {
                    limit_bytes: Some(1),
                },
                Own,
            ),
            (StepFailure::Invalid { reason: "x".into() }, Own),
            (StepFailure::WorkerStalled { worker: w() }, Infrastructure),
            (
                StepFailure::WorkerRestarted {
                    worker: w(),
                    state_lost: true,
                },
                Infrastructure,
            ),
            (StepFailure::WorkerGone { worker: w() }, Infrastructure),
            (
                StepFailure::WorkerUnreachable {
                    worker: w(),
                    reason: "x".into(),
                },
                Infrastructure,
            ),
            (
                StepFailure::VolumeLost {
                    worker: w(),
                    handle: "v".into(),
                },
                Infrastructure,
            ),
            (
                StepFailure::ContainerLost {
                    worker: w(),
                    handle: "c".into(),
                },
                Infrastructure,
            ),
        ];
        for (failure, class) in cases {
            assert_eq!(failure.class(), class, "{failure:?}");
            assert_eq!(
                failure.worker().is_some(),
                class == Infrastructure,
                "{failure:?}"
            );
        }
    }

    #[test]
    fn retries_follow_the_table() {
        let infra = StepFailure::WorkerStalled { worker: w() };
        let own = StepFailure::Exited { code: 2 };
        let cases = [
            (
                &infra,
                1,
                3,
                false,
                RetryDecision::Retry { next_attempt: 2 },
            ),
            (
                &infra,
                2,
                3,
                false,
                RetryDecision::Retry { next_attempt: 3 },
            ),
            (
                &infra,
                3,
                3,
                false,
                RetryDecision::GiveUp(StepState::Errored),
            ),
            (
                &infra,
                1,
                1,
                false,
                RetryDecision::GiveUp(StepState::Errored),
            ),
            (&own, 1, 3, false, RetryDecision::GiveUp(StepState::Failed)),
            (&own, 1, 3, true, RetryDecision::Retry { next_attempt: 2 }),
            (&own, 3, 3, true, RetryDecision::GiveUp(StepState::Failed)),
        ];
        for (failure, attempt, max, own_retry, expected) in cases {
            assert_eq!(
                decide_retry(failure, attempt, max, own_retry),
                expected,
                "{failure:?} {attempt}/{max}"
            );
        }
    }

    #[test]
    fn a_step_notices_its_worker_change_by_the_table() {
        use crate::WorkerState::*;
        let seen = |state, generation, id: &str| WorkerSeen {
            state,
            generation,
            state_identity: id.into(),
        };
        let start = seen(Running, 5, "a");
        let cases = [
            (Some(seen(Running, 5, "a")), None),
            (Some(seen(Landing, 5, "a")), None),
            (Some(seen(Retiring, 5, "a")), None),
            (
                Some(seen(Stalled, 5, "a")),
                Some(StepFailure::WorkerStalled { worker: w() }),
            ),
            (
                Some(seen(Running, 6, "a")),
                Some(StepFailure::WorkerRestarted {
                    worker: w(),
                    state_lost: false,
                }),
            ),
            (
                Some(seen(Running, 6, "b")),
                Some(StepFailure::WorkerRestarted {
                    worker: w(),
                    state_lost: true,
                }),
            ),
            (
                Some(seen(Stalled, 6, "b")),
                Some(StepFailure::WorkerRestarted {
                    worker: w(),
                    state_lost: true,
                }),
            ),
            (None, Some(StepFailure::WorkerGone { worker: w() })),
        ];
        for (now, expected) in cases {
            assert_eq!(
                worker_change("w1", &start, now.as_ref()),
                expected,
                "{now:?}"
            );
        }
    }

    #[test]
    fn failures_read_plainly() {
        assert_eq!(
            StepFailure::OutOfMemory {
                limit_bytes: Some(32 << 20)
            }
            .describe(),
            "killed: out of memory (memory limit 32 MiB)"
        );
        assert_eq!(
            StepFailure::WorkerRestarted {
                worker: w(),
                state_lost: true
            }
            .describe(),
            "worker w1 restarted with its work dir wiped while the step ran"
        );
        for s in BuildStatus::ALL {
            assert_eq!(s.as_str().parse::<BuildStatus>(), Ok(*s));
        }
        for s in StepState::ALL {
            assert_eq!(s.as_str().parse::<StepState>(), Ok(*s));
        }
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
