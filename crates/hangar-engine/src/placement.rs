//! Choosing a step's worker from what the database says now.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hangar_api::BaseResourceType;
use hangar_core::placement::{place, Candidate, Requirement};

use super::context::{BuildContext, Interrupted};

/// What a step wants of its worker, besides the requirement's basics.
pub struct Wants {
    pub requirement: Requirement,
    /// Only workers advertising this base resource type.
    pub resource_type: Option<String>,
    /// Volume handles the step reads (a worker holding one is preferred).
    pub volumes: Vec<String>,
    /// Cache owner ids by kind (`task-cache`, `resource-cache`).
    pub caches: Vec<(&'static str, String)>,
}

async fn candidates(
    ctx: &BuildContext,
    wants: &Wants,
) -> Result<Vec<Candidate>, hangar_store::StoreError> {
    let store = ctx.web.store();
    let workers = store.list_workers().await?;
    let mut has: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for handle in &wants.volumes {
        if let Some(v) = store.get_volume(handle).await? {
            if v.state == hangar_core::volumes::VolumeState::Created && v.missing_since.is_none() {
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
    Ok(workers
        .into_iter()
        .filter(|w| match &wants.resource_type {
            Some(t) => serde_json::from_str::<Vec<BaseResourceType>>(&w.info.resource_types_json)
                .map(|types| types.iter().any(|rt| &rt.type_name == t))
                .unwrap_or(false),
            None => true,
        })
        .map(|w| {
            let condition: Option<hangar_api::WorkerCondition> = w
                .condition
                .as_deref()
                .and_then(|c| serde_json::from_str(c).ok());
            Candidate {
                accepting_work: condition.as_ref().is_none_or(|c| c.accepting_work()),
                memory_free: condition.as_ref().map(|c| c.memory_free()),
                has: has.remove(&w.info.name).unwrap_or_default(),
                name: w.info.name,
                state: w.state,
                platform: w.info.platform,
                tags: w.info.tags.into_iter().collect(),
                team: w.info.team,
                active_containers: w.info.containers,
            }
        })
        .collect())
}

/// The keys a worker's `has` set uses for what `wants` lists.
pub fn wanted_keys(wants: &Wants) -> Vec<String> {
    wants
        .volumes
        .iter()
        .map(|h| format!("vol:{h}"))
        .chain(wants.caches.iter().map(|(k, id)| format!("{k}:{id}")))
        .collect()
}

/// Places the step, waiting (and saying why, once) while no worker fits.
pub async fn place_waiting(
    ctx: &BuildContext,
    step_id: &str,
    mut wants: Wants,
) -> Result<String, Interrupted> {
    wants.requirement.wants = wanted_keys(&wants);
    let mut said = None;
    loop {
        match candidates(ctx, &wants).await {
            Ok(c) => match place(&c, &wants.requirement) {
                Ok(worker) => return Ok(worker),
                Err(no) => {
                    let why = match &wants.resource_type {
                        Some(t) if c.is_empty() => format!("no worker has resource type {t}"),
                        _ => no.0,
                    };
                    if said.as_ref() != Some(&why) {
                        ctx.log(
                            Some(step_id),
                            "infra",
                            &format!("waiting for a worker: {why}"),
                        )
                        .await;
                        said = Some(why);
                    }
                }
            },
            Err(e) => tracing::warn!(error = %e, "cannot read workers for placement"),
        }
        tokio::select! {
            _ = ctx.stop.cancelled() => return Err(Interrupted),
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
