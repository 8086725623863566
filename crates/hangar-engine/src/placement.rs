//! Choosing a worker from what the database says now: one rule for build
//! steps and for uploads (the operator's chain of strategies,
//! `hangar_core::placement::Placement`, over candidates built here, with
//! the workers' pressure, health, free memory and the steps placed on
//! them), ties broken by name.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hangar_api::BaseResourceType;
use hangar_core::build::StepKind;
use hangar_core::build::{BuildEventKind, StepFailure};
use hangar_core::engine::volume_usable;
use hangar_core::lifecycle::human_ms;
use hangar_core::placement::{
    lacking, Candidate, Load, NoWorker, Requirement, StepClass, Strategy,
};
use hangar_store::{StoreError, WorkerRecord};
use tokio::time::Instant;

use crate::context::{BuildContext, Interrupted};
use crate::Engine;

/// What a step (or an upload) wants of its worker.
#[derive(Debug, Clone, Default)]
pub struct Wants {
    pub requirement: Requirement,
    /// Only workers advertising this base resource type.
    pub resource_type: Option<String>,
    /// Volume handles the step reads (a worker holding one is preferred).
    pub volumes: Vec<String>,
    /// Cache owner ids by kind (`task-cache`, `resource-cache`).
    pub caches: Vec<(&'static str, String)>,
}

impl Wants {
    /// What a resource action (check, get, put) of type `step_type`
    /// wants: `hangar_core::placement::resource_requirement`'s rule, and
    /// only workers with the base type that runs it.
    pub fn for_resource<'a>(
        chain: &[&'a hangar_core::resource_types::ResourceType],
        step_type: &str,
        own_tags: impl IntoIterator<Item = &'a String>,
        avoid: &BTreeSet<String>,
    ) -> Wants {
        Wants {
            requirement: hangar_core::placement::resource_requirement(chain, own_tags, avoid),
            resource_type: Some(hangar_core::placement::resource_base_type(chain, step_type)),
            volumes: vec![],
            caches: vec![],
        }
    }
}

/// A worker as placement sees it. A worker that has not sent its
/// condition yet is taken as accepting (memory unknown); one whose stored
/// condition is unreadable is corrupt and gets no work until its next
/// heartbeat writes a good one. One that serves no API is left out by the
/// caller. Its load is the database's count of the steps placed on it,
/// its volumes its own report.
fn candidate(w: WorkerRecord, has: BTreeSet<String>, placed: Load, distrusted: bool) -> Candidate {
    let mut unreadable = false;
    let condition: Option<hangar_api::WorkerCondition> =
        w.condition
            .as_deref()
            .and_then(|c| match serde_json::from_str(c) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(worker = %w.info.name, error = %e, "the worker's stored condition is unreadable; it gets no work");
                    unreadable = true;
                    None
                }
            });
    Candidate {
        accepting_work: !unreadable && condition.as_ref().is_none_or(|c| c.accepting_work()),
        memory_free: condition.as_ref().map(|c| c.memory_free()),
        has,
        name: w.info.name,
        state: w.state,
        platform: w.info.platform,
        tags: w.info.tags.into_iter().collect(),
        team: w.info.team,
        active_containers: w.info.containers,
        load: Load {
            volumes: w.info.volumes,
            ..placed
        },
        allow_privileged: w.info.allow_privileged,
        distrusted,
    }
}

fn has_resource_type(w: &WorkerRecord, wanted: &str) -> bool {
    match serde_json::from_str::<Vec<BaseResourceType>>(&w.info.resource_types_json) {
        Ok(types) => types.iter().any(|rt| rt.type_name == wanted),
        // Corrupt: the worker runs no resource action until it registers
        // again with a good list.
        Err(e) => {
            tracing::warn!(worker = %w.info.name, error = %e, "the worker's stored resource types are unreadable");
            false
        }
    }
}

/// The workers that could take `wants`, with what each already holds.
pub async fn candidates(engine: &Engine, wants: &Wants) -> Result<Vec<Candidate>, StoreError> {
    let store = engine.store();
    let workers = store.list_workers().await?;
    let mut has: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for handle in &wants.volumes {
        if let Some(v) = store.get_volume(handle).await? {
            if volume_usable(v.state, v.missing_since) {
                has.entry(v.worker)
                    .or_default()
                    .insert(format!("vol:{handle}"));
            }
        }
    }
    let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (kind, id) in &wants.caches {
        by_kind.entry(kind).or_default().push(id.clone());
    }
    for (kind, ids) in by_kind {
        for (worker, owner_id, _) in store.present_volumes_by_owner(kind, &ids).await? {
            has.entry(worker)
                .or_default()
                .insert(format!("{kind}:{owner_id}"));
        }
    }
    // The steps placed on each worker, when a strategy of the chain
    // counts them.
    let placement = &engine.config().placement;
    let mut loads = if [
        Strategy::FewestBuildContainers,
        Strategy::LimitActiveTasks,
        Strategy::LimitActiveContainers,
    ]
    .into_iter()
    .any(|s| placement.uses(s))
    {
        store.placement_loads().await?
    } else {
        BTreeMap::new()
    };
    Ok(workers
        .into_iter()
        .filter(|w| w.info.api_url.is_some())
        .filter(|w| match &wants.resource_type {
            Some(t) => has_resource_type(w, t),
            None => true,
        })
        .map(|w| {
            let held = has.remove(&w.info.name).unwrap_or_default();
            let placed = loads.remove(&w.info.name).unwrap_or_default();
            let distrusted = engine.is_distrusted(&w.info.name);
            candidate(w, held, placed, distrusted)
        })
        .collect())
}

/// The keys a worker's `has` set uses for what `wants` lists.
fn wanted_keys(wants: &Wants) -> Vec<String> {
    wants
        .volumes
        .iter()
        .map(|h| format!("vol:{h}"))
        .chain(wants.caches.iter().map(|(k, id)| format!("{k}:{id}")))
        .collect()
}

/// Why no worker took a step now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced {
    pub why: String,
    /// No worker, whatever its state, is of the kind the step needs (its
    /// resource type, platform, tags, team, privileged containers): only
    /// one that joins can take it, so the wait is bounded
    /// ([`crate::EngineConfig::no_worker_timeout`]).
    pub lacking: bool,
}

/// Places `wants` now, or says why no worker fits.
pub async fn place_now(
    engine: &Engine,
    wants: Wants,
) -> Result<Result<String, NoWorker>, StoreError> {
    Ok(place_for(engine, wants).await?.map_err(|u| NoWorker(u.why)))
}

/// Places `wants` now, or says why no worker fits and whether any ever
/// could without a new one.
pub async fn place_for(
    engine: &Engine,
    wants: Wants,
) -> Result<Result<String, Unplaced>, StoreError> {
    place_class(engine, wants, StepClass::Other).await
}

/// [`place_for`] a step of `class` (a task is what `limit-active-tasks`
/// orders and limits).
async fn place_class(
    engine: &Engine,
    mut wants: Wants,
    class: StepClass,
) -> Result<Result<String, Unplaced>, StoreError> {
    wants.requirement.wants = wanted_keys(&wants);
    let c = hangar_core::placement::by_name(&candidates(engine, &wants).await?);
    // What the chain leaves equal goes by name; a `random` strategy
    // orders by this placement's own seed.
    let seed = uuid::Uuid::new_v4().as_u64_pair().0;
    let chosen = engine
        .config()
        .placement
        .place(&c, &wants.requirement, class, seed);
    Ok(chosen.map_err(|NoWorker(why)| {
        let lacking = lacking(&c, &wants.requirement);
        match &wants.resource_type {
            Some(t) if c.is_empty() => Unplaced {
                why: format!("no worker has resource type {t}"),
                lacking,
            },
            _ => Unplaced { why, lacking },
        }
    }))
}

/// What a step or check that gave up waiting for a worker says: why none
/// fits, and for how long it waited.
pub fn gave_up(why: &str, waited: Duration) -> String {
    format!(
        "{why} (none joined within {}, web's --no-worker-timeout)",
        human_ms(i64::try_from(waited.as_millis()).unwrap_or(i64::MAX))
    )
}

/// Places the step, waiting (and saying why, once) while no worker fits:
/// without a bound while a worker of its kind is down, busy, under
/// pressure or at a limit of the placement chain; while none is
/// registered at all, for at most
/// [`crate::EngineConfig::no_worker_timeout`], after which the step fails
/// saying why. The choice is recorded on the step's row at once, so the
/// next placement counts it on its worker.
pub(crate) async fn place_waiting(
    ctx: &BuildContext,
    step_id: &str,
    mut wants: Wants,
) -> Result<Result<String, StepFailure>, Interrupted> {
    // A build's steps go to its team's workers or to shared ones, never
    // to another team's (Concourse's team workers).
    wants
        .requirement
        .team
        .get_or_insert_with(|| ctx.team.clone());
    let bound = ctx.engine.config().no_worker_timeout;
    let mut said = None;
    let mut lacking_since: Option<Instant> = None;
    let class = match ctx.engine.store().step_kind(ctx.build_id, step_id).await {
        Ok(Some(StepKind::Task)) => StepClass::Task,
        Ok(_) => StepClass::Other,
        Err(e) => {
            tracing::warn!(build = ctx.build_id, step = step_id, error = %e, "cannot read the step's kind for placement");
            StepClass::Other
        }
    };
    loop {
        match place_class(&ctx.engine, wants.clone(), class).await {
            Ok(Ok(worker)) => {
                if let Err(e) = ctx
                    .engine
                    .store()
                    .record_step_placement(ctx.build_id, step_id, &worker, ctx.lease_token)
                    .await
                {
                    // The step runs all the same, uncounted on its
                    // worker by later placements.
                    tracing::warn!(build = ctx.build_id, step = step_id, %worker, error = %e, "cannot record the step's placement");
                }
                return Ok(Ok(worker));
            }
            Ok(Err(Unplaced { why, lacking })) => {
                if !lacking {
                    lacking_since = None;
                } else if lacking_since.get_or_insert_with(Instant::now).elapsed() >= bound {
                    return Ok(Err(StepFailure::Invalid {
                        reason: gave_up(&why, bound),
                    }));
                }
                if said.as_ref() != Some(&why) {
                    let line = if lacking {
                        format!(
                            "waiting for a worker: {why}; the step fails if none joins within {}",
                            human_ms(i64::try_from(bound.as_millis()).unwrap_or(i64::MAX))
                        )
                    } else {
                        format!("waiting for a worker: {why}")
                    };
                    ctx.log(Some(step_id), BuildEventKind::Infra, &line).await;
                    said = Some(why);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read workers for placement"),
        }
        let pause = match lacking_since {
            Some(since) => ctx
                .engine
                .config()
                .poll
                .min(bound.saturating_sub(since.elapsed())),
            None => ctx.engine.config().poll,
        };
        tokio::select! {
            _ = ctx.stop.cancelled() => return Err(Interrupted),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
