//! What every step of one build shares.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;

use hangar_core::build::{BuildEventKind, StepFailure, StepKind, StepState, WorkerSeen};
use hangar_store::StepRecord;
use tokio_util::sync::CancellationToken;

use crate::Engine;

pub(crate) struct BuildContext {
    pub engine: Engine,
    pub build_id: i64,
    /// The job's name, for task caches that persist across its builds.
    pub job: String,
    /// Artifacts produced so far: name → volume handle.
    pub artifacts: Mutex<BTreeMap<String, String>>,
    /// The get steps of the plan by the artifact they produce: a task whose
    /// input was lost with its worker fetches it again rather than fail.
    pub producers: BTreeMap<String, hangar_core::plan::GetStep>,
    /// Steps as a previous run of this build left them (resume).
    pub previous: BTreeMap<String, StepRecord>,
    /// The build's custom resource types (Concourse's `resource_types`).
    pub resource_types: Vec<hangar_core::resource_types::ResourceType>,
    /// The values of the vars resolved for this build: redacted from
    /// everything it writes to the log or stores as an error.
    pub secrets: hangar_core::vars::redact::Secrets,
    /// Cancelled when this node stops or loses the build's lease: the build
    /// stops where it is, to be resumed elsewhere.
    pub stop: CancellationToken,
    /// Bytes of resource action output kept in the log so far, by step
    /// (bounded by `action_log::MAX_PER_STEP`).
    pub action_output: Mutex<BTreeMap<String, u64>>,
}

/// How a leaf step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepEnd {
    pub state: StepState,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
}

/// A step that did not end because the build was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interrupted;

impl BuildContext {
    pub(crate) fn artifact(&self, name: &str) -> Option<String> {
        self.artifacts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn add_artifact(&self, name: &str, handle: &str) {
        self.artifacts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), handle.to_string());
    }

    /// Runs `work` (calls to workers) while watching the workers it depends
    /// on and the build's cancellation: if one of them stalls, restarts or
    /// leaves meanwhile, the work is abandoned (dropped) with that failure
    /// instead of waiting on a worker that will not answer; if the build is
    /// stopped, it is abandoned at once and the build resumes elsewhere.
    pub(crate) async fn call<T>(
        &self,
        workers: &[(&str, &WorkerSeen)],
        work: impl Future<Output = T>,
    ) -> Result<Result<T, StepFailure>, Interrupted> {
        tokio::select! {
            _ = self.stop.cancelled() => Err(Interrupted),
            out = crate::watch::guarded(&self.engine, workers, work) => Ok(out),
        }
    }

    /// Appends a line to the build log (and wakes watchers). A failure to
    /// write the log is logged, not fatal: the build goes on.
    pub(crate) async fn log(&self, step: Option<&str>, kind: BuildEventKind, line: &str) {
        let line = self.secrets.redact(line);
        if let Err(e) = self
            .engine
            .store()
            .append_build_event(self.build_id, step, kind, &line, self.engine.now())
            .await
        {
            tracing::warn!(build = self.build_id, error = %e, "cannot write the build log");
        }
        self.engine.build_events().notify_waiters();
    }

    /// Says in the build log (and the metrics) that a step is retried after
    /// `failure`, keeps the next attempt off the worker that failed it, and
    /// gives an unreachable worker a moment to be judged first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn announce_retry(
        &self,
        step_id: &str,
        kind: &str,
        name: &str,
        failure: &StepFailure,
        next_attempt: u32,
        max_attempts: u32,
        avoid: &mut BTreeSet<String>,
    ) -> Result<(), Interrupted> {
        self.engine.observer().step_retried(failure.kind());
        self.log(
            Some(step_id),
            BuildEventKind::Infra,
            &format!(
                "{}; retrying {kind} {name} (attempt {next_attempt} of {max_attempts})",
                failure.describe()
            ),
        )
        .await;
        let next = hangar_core::engine::after_failure(failure);
        avoid.extend(next.avoid);
        if let Some(worker) = next.settle {
            crate::watch::settle(&self.engine, &worker, self.engine.now(), &self.stop).await?;
        }
        Ok(())
    }

    /// The step's record as a previous run of this build left it (or a new
    /// one), and its end if that run finished it: a step that succeeded
    /// then makes its outputs artifacts again; one whose stored outputs no
    /// longer parse errors, saying so.
    pub(crate) async fn resume_step(
        &self,
        step_id: &str,
        name: &str,
        kind: StepKind,
    ) -> (StepRecord, Option<StepEnd>) {
        let mut record = self
            .previous
            .get(step_id)
            .cloned()
            .unwrap_or_else(|| new_step_record(self.build_id, step_id, name, kind));
        let Some(end) = already_done_end(&record) else {
            return (record, None);
        };
        if end.state == StepState::Succeeded {
            match stored_outputs(&record) {
                Ok(outputs) => {
                    for (name, handle) in outputs {
                        self.add_artifact(&name, &handle);
                    }
                }
                Err(why) => {
                    let end = give_up(self, &mut record, StepState::Errored, None, why).await;
                    return (record, Some(end));
                }
            }
        }
        (record, Some(end))
    }

    /// Saves the step's progress. A failed write is logged: the step goes
    /// on, and a resumed build redoes what the database did not record.
    pub(crate) async fn save(&self, record: &StepRecord) {
        let redacted;
        let record = match &record.error {
            Some(error) if !self.secrets.is_empty() => {
                redacted = StepRecord {
                    error: Some(self.secrets.redact(error)),
                    ..record.clone()
                };
                &redacted
            }
            _ => record,
        };
        if let Err(e) = self.engine.store().save_step(record).await {
            tracing::warn!(build = self.build_id, step = %record.step_id, error = %e, "cannot save step");
        }
    }
}

pub(crate) fn new_step_record(
    build_id: i64,
    step_id: &str,
    name: &str,
    kind: StepKind,
) -> StepRecord {
    StepRecord {
        build_id,
        step_id: step_id.to_string(),
        name: name.to_string(),
        kind,
        state: StepState::Pending,
        attempt: 1,
        worker: None,
        container: None,
        log_offset: 0,
        exit_code: None,
        outputs: "{}".into(),
        error: None,
        started_at: None,
        finished_at: None,
        version: None,
    }
}

/// A step's stored outputs (artifact name → volume handle). Unreadable
/// JSON is an error, never an empty map: a step that lost its outputs must
/// not pass for one that had none.
pub(crate) fn stored_outputs(record: &StepRecord) -> Result<BTreeMap<String, String>, String> {
    serde_json::from_str(&record.outputs).map_err(|e| {
        format!(
            "the stored outputs of step {} are unreadable: {e}",
            record.step_id
        )
    })
}

/// The end of a step a previous run already finished.
pub(crate) fn already_done_end(record: &StepRecord) -> Option<StepEnd> {
    match record.state {
        StepState::Succeeded | StepState::Failed | StepState::Errored | StepState::Aborted => {
            Some(StepEnd {
                state: record.state,
                exit_code: record.exit_code,
                error: record.error.clone(),
            })
        }
        _ => None,
    }
}

pub(crate) async fn give_up(
    ctx: &BuildContext,
    record: &mut StepRecord,
    state: StepState,
    exit_code: Option<i64>,
    why: String,
) -> StepEnd {
    record.state = state;
    record.exit_code = exit_code;
    record.error = Some(why.clone());
    record.finished_at = Some(ctx.engine.now());
    ctx.save(record).await;
    ctx.log(
        Some(&record.step_id),
        BuildEventKind::Step,
        &format!("{} {}: {why}", record.kind, record.name),
    )
    .await;
    StepEnd {
        state,
        exit_code,
        error: Some(why),
    }
}
