//! What every step of one build shares.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use hangar_core::build::{StepFailure, StepState};
use hangar_store::StepRecord;
use tokio_util::sync::CancellationToken;

use crate::Web;

pub struct BuildContext {
    pub web: Web,
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
    /// Cancelled when this node stops or loses the build's lease: the build
    /// stops where it is, to be resumed elsewhere.
    pub stop: CancellationToken,
}

/// How a leaf step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEnd {
    pub state: StepState,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
}

/// A step that did not end because the build was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl BuildContext {
    pub fn artifact(&self, name: &str) -> Option<String> {
        self.artifacts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn add_artifact(&self, name: &str, handle: &str) {
        self.artifacts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), handle.to_string());
    }

    /// Appends a line to the build log (and wakes watchers). A failure to
    /// write the log is logged, not fatal: the build goes on.
    pub async fn log(&self, step: Option<&str>, kind: &str, line: &str) {
        if let Err(e) = self
            .web
            .store()
            .append_build_event(self.build_id, step, kind, line, self.web.now())
            .await
        {
            tracing::warn!(build = self.build_id, error = %e, "cannot write the build log");
        }
        self.web.build_events().notify_waiters();
    }

    /// Says in the build log (and the metrics) that a step is retried after
    /// `failure`, keeps the next attempt off the worker that failed it, and
    /// gives an unreachable worker a moment to be declared stalled first.
    #[allow(clippy::too_many_arguments)]
    pub async fn announce_retry(
        &self,
        step_id: &str,
        kind: &str,
        name: &str,
        failure: &StepFailure,
        next_attempt: u32,
        max_attempts: u32,
        avoid: &mut BTreeSet<String>,
    ) -> Result<(), Interrupted> {
        self.web.metrics().step_retry(failure.kind());
        self.log(
            Some(step_id),
            "infra",
            &format!(
                "{}; retrying {kind} {name} (attempt {next_attempt} of {max_attempts})",
                failure.describe()
            ),
        )
        .await;
        if let Some(w) = failure.worker() {
            avoid.insert(w.to_string());
        }
        if let StepFailure::WorkerUnreachable { worker, .. } = failure {
            super::watch::settle(&self.web, worker, self.web.now(), &self.stop).await?;
        }
        Ok(())
    }

    pub async fn save(&self, record: &StepRecord) {
        if let Err(e) = self.web.store().save_step(record).await {
            tracing::warn!(build = self.build_id, step = %record.step_id, error = %e, "cannot save step");
        }
    }
}

pub fn new_step_record(build_id: i64, step_id: &str, name: &str, kind: &str) -> StepRecord {
    StepRecord {
        build_id,
        step_id: step_id.to_string(),
        name: name.to_string(),
        kind: kind.to_string(),
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
    }
}
