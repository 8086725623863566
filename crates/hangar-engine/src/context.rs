//! What every step of one build shares.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;

use hangar_core::build::{
    decide_retry, BuildEventKind, RetryDecision, StepFailure, StepKind, StepState, WorkerSeen,
};
use hangar_core::plan::local_vars::LocalVars;
use hangar_core::plan::Step;
use hangar_core::vars::redact::{secret_texts, Secrets};
use hangar_store::StepRecord;
use tokio_util::sync::CancellationToken;

use crate::halt::{Attempt, Halt};
use crate::Engine;

pub(crate) struct BuildContext {
    pub engine: Engine,
    pub build_id: i64,
    /// Whose task caches the build's are: its job's, across its builds
    /// (`hangar_core::caches::cache_job`).
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
    /// The values of the vars resolved for this build, and of the local
    /// vars its `load_var` steps loaded without `reveal`: redacted from
    /// everything it writes to the log or stores as an error.
    pub secrets: Mutex<Secrets>,
    /// The local vars (`((.:name))`) its `load_var` steps loaded so far.
    pub local_vars: Mutex<LocalVars>,
    /// The team and pipeline of a job build (none for the plan API's).
    pub pipeline: Option<(String, String)>,
    /// The build's team: its pipeline's, or the one a build of the plan API
    /// was made in.
    pub team: String,
    /// The job of a job build, under which its versions are recorded.
    pub job_build: Option<hangar_store::BuildJob>,
    /// The claim this run holds the build under: every write to the build
    /// is fenced by it.
    pub lease_token: i64,
    /// Cancelled when this node stops or loses the build's lease: the build
    /// stops where it is, to be resumed elsewhere.
    pub stop: CancellationToken,
    /// Bytes of resource action output kept in the log so far, by step
    /// (bounded by `action_log::MAX_PER_STEP`).
    pub action_output: Mutex<BTreeMap<String, u64>>,
    /// A resource check outside builds (`crate::check`) has no build log:
    /// its lines are kept here, bounded, for its error.
    pub log_sink: Option<Mutex<String>>,
}

/// How a leaf step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepEnd {
    pub state: StepState,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
}

pub(crate) use crate::watch::Interrupted;

/// The most of its log a check outside builds keeps (its end), for its
/// error.
pub(crate) const MAX_KEPT_LOG_BYTES: usize = 4_096;

/// Adds a line to a check's kept log, keeping its end.
fn keep_log(log: &mut String, line: &str) {
    log.push_str(line);
    if !line.ends_with('\n') {
        log.push('\n');
    }
    keep_end(log, MAX_KEPT_LOG_BYTES);
}

/// Cuts `text` to its last `max` bytes (at a character boundary).
pub(crate) fn keep_end(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = text.len() - max;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
}

impl BuildContext {
    /// The context a resource check outside builds runs the get step's
    /// code in: no build (nothing is saved, its lease is never checked),
    /// its log kept in memory ([`BuildContext::log_sink`]) for its error,
    /// stopped by `stop` (its deadline).
    pub(crate) fn for_check(
        engine: &Engine,
        resource_types: Vec<hangar_core::resource_types::ResourceType>,
        stop: CancellationToken,
    ) -> BuildContext {
        BuildContext {
            engine: engine.clone(),
            build_id: 0,
            lease_token: 0,
            job: "check".into(),
            artifacts: Default::default(),
            producers: Default::default(),
            previous: Default::default(),
            resource_types,
            secrets: Default::default(),
            local_vars: Default::default(),
            pipeline: None,
            team: crate::secrets::BUILD_TEAM.into(),
            job_build: None,
            stop,
            action_output: Default::default(),
            log_sink: Some(Default::default()),
        }
    }

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

    /// The build's secrets as they are now.
    pub(crate) fn secrets(&self) -> Secrets {
        self.secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        self.secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .redact(text)
    }

    /// A `load_var`'s value becomes `((.:name))` for the steps after it,
    /// and unless `reveal`, a secret of the build (every string and number
    /// in it), as Concourse's local vars.
    pub(crate) fn set_local_var(&self, name: &str, value: serde_json::Value, reveal: bool) {
        if !reveal {
            let mut secrets = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
            *secrets = secrets.extended(secret_texts([&value]));
        }
        self.local_vars
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(name, value);
    }

    /// `step` with the local vars loaded so far filled into its values.
    pub(crate) fn fill_local_vars(&self, step: &Step) -> Result<Step, String> {
        self.local_vars
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fill(step)
    }

    /// A value read when its step runs (a task's file) with the local vars
    /// filled in; any other var left is undefined.
    pub(crate) fn fill_local_vars_in(
        &self,
        value: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let vars = self.local_vars.lock().unwrap_or_else(|p| p.into_inner());
        hangar_core::vars::interpolate_with(value, &*vars).map_err(|e| e.to_string())
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
    ) -> Attempt<T> {
        tokio::select! {
            _ = self.stop.cancelled() => Err(Halt::Interrupted),
            out = crate::watch::guarded(&self.engine, workers, work) => Ok(out?),
        }
    }

    /// Appends a line to the build log (and wakes watchers). A failure to
    /// write the log is logged, not fatal: the build goes on. A write
    /// refused because another claim holds the build stops this run.
    pub(crate) async fn log(&self, step: Option<&str>, kind: BuildEventKind, line: &str) {
        let line = self.redact(line);
        if let Some(sink) = &self.log_sink {
            keep_log(&mut sink.lock().unwrap_or_else(|p| p.into_inner()), &line);
            return;
        }
        match self
            .engine
            .store()
            .append_build_event_under_lease(
                self.build_id,
                self.lease_token,
                step,
                kind,
                &line,
                self.engine.now(),
            )
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => self.lease_lost(),
            Err(e) => {
                tracing::warn!(build = self.build_id, error = %e, "cannot write the build log")
            }
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
        // Off this step's next attempt, and doubted by every step for a
        // while: a worker that claims room it has not, or fails what it
        // takes, draws no more work while others fit.
        if let Some(worker) = &next.avoid {
            self.engine.distrust(worker);
        }
        avoid.extend(next.avoid);
        if let Some(worker) = next.settle {
            crate::watch::settle(&self.engine, &worker, self.engine.now(), &self.stop).await?;
        }
        Ok(())
    }

    /// After a failed attempt of a task, get or put, what its retry rule
    /// (`hangar_core::build::decide_retry`) decides: a retry, announced,
    /// with the record made ready for the next attempt (`None`); or the
    /// step's end, recorded (`Some`).
    pub(crate) async fn after_failure(
        &self,
        record: &mut StepRecord,
        failure: StepFailure,
        max_attempts: u32,
        avoid: &mut BTreeSet<String>,
    ) -> Result<Option<StepEnd>, Interrupted> {
        let attempt = u32::try_from(record.attempt).unwrap_or(u32::MAX);
        match decide_retry(&failure, attempt, max_attempts, false) {
            RetryDecision::Retry { next_attempt } => {
                let (step_id, name) = (record.step_id.clone(), record.name.clone());
                self.announce_retry(
                    &step_id,
                    record.kind.as_str(),
                    &name,
                    &failure,
                    next_attempt,
                    max_attempts,
                    avoid,
                )
                .await?;
                record.attempt = i64::from(next_attempt);
                record.container = None;
                record.worker = None;
                record.log_offset = 0;
                Ok(None)
            }
            RetryDecision::GiveUp(state) => {
                let code = failure.exit_code();
                let mut why = failure.describe();
                if state == StepState::Errored && max_attempts > 1 {
                    why.push_str(&format!(" (after {attempt} attempts)"));
                }
                Ok(Some(give_up(self, record, state, code, why).await))
            }
        }
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
        if self.log_sink.is_some() {
            // A check outside builds: there is no build row to save to.
            return;
        }
        let redacted;
        let secrets = self.secrets();
        let record = match &record.error {
            Some(error) if !secrets.is_empty() => {
                redacted = StepRecord {
                    error: Some(secrets.redact(error)),
                    ..record.clone()
                };
                &redacted
            }
            _ => record,
        };
        match self
            .engine
            .store()
            .save_step_under_lease(record, self.lease_token)
            .await
        {
            Ok(true) => {}
            Ok(false) => self.lease_lost(),
            Err(e) => {
                tracing::warn!(build = self.build_id, step = %record.step_id, error = %e, "cannot save step")
            }
        }
    }

    /// Another claim took the build (this node paused or lost the database
    /// past its lease): nothing more of this run may happen.
    fn lease_lost(&self) {
        if !self.stop.is_cancelled() {
            tracing::warn!(
                build = self.build_id,
                "another node holds the build now; stopping this run"
            );
        }
        self.stop.cancel();
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

/// Ends a step that succeeded, saying `line` in the build log.
pub(crate) async fn succeed(ctx: &BuildContext, record: &mut StepRecord, line: &str) -> StepEnd {
    record.state = StepState::Succeeded;
    record.exit_code = Some(0);
    record.error = None;
    record.finished_at = Some(ctx.engine.now());
    ctx.save(record).await;
    ctx.log(Some(&record.step_id), BuildEventKind::Step, line)
        .await;
    StepEnd {
        state: StepState::Succeeded,
        exit_code: Some(0),
        error: None,
    }
}
