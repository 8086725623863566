//! The scheduler: every `scheduler_interval`, and at once when woken (a
//! new version, a pin, a trigger), each pipeline this node can lease gets
//! a pass: each job's next build is decided and created with its inputs
//! fixed, manual builds waiting for inputs are resolved, and held builds
//! are released to the engine as serial, serial_groups and max_in_flight
//! allow. The lease makes each decision once, whichever node runs it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_core::pipeline::{parse_pipeline_value, PipelineConfig};
use hangar_core::scheduling::{job_stamp, startable, JobGate, JobStamp, NextBuild, StartLimits};
use hangar_store::{SchedulablePipeline, StoreError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::scheduler_resolve::{decide_job, plan_with, waiting_json, PipelineView};
use crate::Control;

/// How long a node holds a pipeline while it schedules it; a node that
/// dies mid-pass holds it no longer than this.
const LEASE_MS: i64 = 30_000;
/// `every` versions one job may take in one pass before the next pass.
const MAX_BUILDS_PER_JOB_PASS: usize = 20;

/// Parsed pipeline configs by (pipeline, config version): a config
/// version never changes, so a parsed one stays good. And what each job's
/// last decision on this node read, so a job nothing changed for is not
/// decided again.
#[derive(Default, Clone)]
pub(crate) struct ConfigCache {
    inner: Arc<Mutex<ConfigsByVersion>>,
    decided: Arc<Mutex<HashMap<i64, DecidedOn>>>,
}

/// What a job's last decision read: its pipeline's config version, the
/// paused flags and the job's stamp.
type DecidedOn = (i64, bool, bool, JobStamp);

impl ConfigCache {
    fn unchanged(&self, job: i64, on: &DecidedOn) -> bool {
        self.decided.lock().expect("decided").get(&job) == Some(on)
    }

    fn remember(&self, job: i64, on: DecidedOn) {
        self.decided.lock().expect("decided").insert(job, on);
    }
}

/// (pipeline id, config version) → its parsed config.
type ConfigsByVersion = HashMap<(i64, i64), Arc<PipelineConfig>>;

impl ConfigCache {
    pub(crate) async fn get(
        &self,
        control: &Control,
        p: &SchedulablePipeline,
    ) -> Result<Arc<PipelineConfig>, StoreError> {
        let key = (p.id, p.config_version);
        if let Some(c) = self.inner.lock().expect("config cache").get(&key) {
            return Ok(c.clone());
        }
        let (_, value) = control
            .store()
            .pipeline_config(&p.team, &p.reference, Some(p.config_version))
            .await?;
        let config = parse_pipeline_value(&value)
            .map_err(|e| {
                StoreError::Corrupt(format!(
                    "pipeline_configs: the config of {}: {e}",
                    p.reference
                ))
            })?
            .config;
        let config = Arc::new(config);
        let mut cache = self.inner.lock().expect("config cache");
        // Only current versions are worth keeping.
        cache.retain(|(id, _), _| *id != p.id);
        cache.insert(key, config.clone());
        Ok(config)
    }
}

/// What the loop waits for.
enum Event {
    /// Its interval passed.
    Tick,
    /// Something a job's next build depends on changed.
    Woken,
    /// A build of this node's engine finished.
    BuildFinished,
    Shutdown,
}

pub(crate) async fn run(control: Control, interval: Duration, shutdown: CancellationToken) {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => Event::Shutdown,
            _ = tokio::time::sleep(interval) => Event::Tick,
            _ = control.scheduler_woken() => Event::Woken,
            _ = control.engine().build_finished().notified() => Event::BuildFinished,
        };
        match event {
            Event::Shutdown => return,
            // Downstream jobs may be another node's to schedule.
            Event::BuildFinished => crate::scheduler_wakeups::tell_other_nodes(&control),
            Event::Tick | Event::Woken => {}
        }
        if let Err(e) = tick(&control).await {
            tracing::warn!(error = %e, "scheduler pass failed");
        }
    }
}

/// One pass over every pipeline; the number of builds created.
pub(crate) async fn tick(control: &Control) -> Result<usize, StoreError> {
    let mut created = 0;
    for p in control.store().schedulable_pipelines().await? {
        let owner = control.node_id();
        if !control
            .store()
            .claim_pipeline_schedule(p.id, owner, control.now(), LEASE_MS)
            .await?
        {
            continue;
        }
        let result = schedule_pipeline(control, &p).await;
        control
            .store()
            .release_pipeline_schedule(p.id, owner)
            .await?;
        // One pipeline failing (a corrupt row) does not stop the others.
        match result {
            Ok(n) => created += n,
            Err(e) => {
                tracing::warn!(pipeline = %p.reference, team = %p.team, error = %e, "scheduling a pipeline failed")
            }
        }
    }
    Ok(created)
}

async fn schedule_pipeline(
    control: &Control,
    p: &SchedulablePipeline,
) -> Result<usize, StoreError> {
    let store = control.store();
    let config = control.config_cache().get(control, p).await?;
    let resources = store.scheduling_resources(p.id).await?;
    let jobs = store.scheduling_jobs(p.id).await?;
    let job_ids: BTreeMap<String, i64> = jobs.iter().map(|(id, n, _)| (n.clone(), *id)).collect();
    let view = PipelineView {
        config: &config,
        resources: &resources,
        job_ids: &job_ids,
    };
    let lease = Some((p.id, control.node_id()));
    let stamps = store.scheduling_stamps(p.id).await?;
    let mut created = 0;
    for (job_id, name, paused) in &jobs {
        let Some(job) = config.job(name) else {
            continue;
        };
        let decided_on = (
            p.config_version,
            p.paused,
            *paused,
            job_stamp(&config, job, &stamps),
        );
        if control.config_cache().unchanged(*job_id, &decided_on) {
            continue;
        }
        let gate = JobGate {
            pipeline_paused: p.paused,
            job_paused: *paused,
            manual: false,
        };
        for _ in 0..MAX_BUILDS_PER_JOB_PASS {
            let d = decide_job(store, &view, *job_id, job, gate).await?;
            match d.next {
                NextBuild::Wait(w) => {
                    store
                        .set_job_waiting(*job_id, Some(&waiting_json(&w, &job_ids)))
                        .await?;
                    break;
                }
                NextBuild::Create(_) => {
                    let plan = match plan_with(store, &config, job, &d.planned).await? {
                        Ok(plan) => plan,
                        Err(e) => {
                            let w = json!({"reason": "plan_error", "input": null, "message": e});
                            store.set_job_waiting(*job_id, Some(&w.to_string())).await?;
                            break;
                        }
                    };
                    let name = format!("{}/{}", p.reference, name);
                    let made = store
                        .create_scheduled_build(
                            *job_id,
                            &name,
                            &plan.stored.to_string(),
                            &d.planned,
                            false,
                            lease,
                            control.now(),
                        )
                        .await?;
                    let Some(made) = made else {
                        // The lease ran out: another node decides now.
                        return Ok(created);
                    };
                    tracing::info!(build = made.build.id, job = %name, number = made.number, "scheduled a job build");
                    created += 1;
                    if !d.has_next_every {
                        break;
                    }
                }
            }
        }
        // Decided on what was read before: a build made here changes the
        // job's own stamp, so it is looked at once more next pass.
        control.config_cache().remember(*job_id, decided_on);
    }
    if p.paused {
        // Nothing of a paused pipeline starts, as in Concourse.
        return Ok(created);
    }
    fix_pending_inputs(control, p, &view).await?;
    let paused: BTreeSet<i64> = jobs.iter().filter(|j| j.2).map(|j| j.0).collect();
    start_held(control, p, &config, &job_ids, &paused).await?;
    Ok(created)
}

/// Manual builds whose inputs did not resolve when triggered: fix them
/// once they do.
async fn fix_pending_inputs(
    control: &Control,
    p: &SchedulablePipeline,
    view: &PipelineView<'_>,
) -> Result<(), StoreError> {
    let store = control.store();
    for b in store.inputs_pending_builds(p.id).await? {
        let Some((name, _)) = view.job_ids.iter().find(|(_, id)| **id == b.job_id) else {
            continue;
        };
        let Some(job) = view.config.job(name) else {
            continue;
        };
        let gate = JobGate {
            manual: true,
            ..JobGate::default()
        };
        let d = decide_job(store, view, b.job_id, job, gate).await?;
        if let NextBuild::Wait(w) = &d.next {
            store
                .set_job_waiting(b.job_id, Some(&waiting_json(w, view.job_ids)))
                .await?;
            continue;
        }
        if let Ok(plan) = plan_with(store, view.config, job, &d.planned).await? {
            store
                .fix_build_inputs(b.build_id, b.job_id, &plan.stored.to_string(), &d.planned)
                .await?;
        }
    }
    Ok(())
}

/// Releases the held builds start limits allow (none of a paused job);
/// jobs whose builds stay held say so.
pub async fn start_held(
    control: &Control,
    p: &SchedulablePipeline,
    config: &PipelineConfig,
    job_ids: &BTreeMap<String, i64>,
    paused_jobs: &BTreeSet<i64>,
) -> Result<(), StoreError> {
    let store = control.store();
    let limits: BTreeMap<i64, StartLimits> = config
        .jobs
        .iter()
        .filter_map(|j| {
            let id = *job_ids.get(&j.name)?;
            Some((
                id,
                StartLimits::new(j.serial, &j.serial_groups, j.max_in_flight),
            ))
        })
        .collect();
    let mut state = store.start_state(p.id).await?;
    // A paused job's builds stay held until it is unpaused.
    state.held.retain(|h| !paused_jobs.contains(&h.job));
    if state.held.is_empty() {
        return Ok(());
    }
    let go = startable(&limits, &state.running, &state.held);
    if !go.is_empty() {
        store.release_held_builds(&go).await?;
        control.engine().wake();
    }
    for h in state.held.iter().filter(|h| !go.contains(&h.id)) {
        let why = match limits.get(&h.job) {
            Some(l) if !l.serial_groups.is_empty() => format!(
                "a build waits for its serial group ({}) to be free",
                l.serial_groups
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => "a build waits: max_in_flight (or serial) reached".to_string(),
        };
        let w = json!({"reason": "start_limit", "input": null, "message": why});
        store.set_job_waiting(h.job, Some(&w.to_string())).await?;
    }
    Ok(())
}
