//! One job's input resolution: its inputs with ids, the window of history
//! the store loads for them (widened when the resolver asks), and the
//! decision. Shared by the scheduler loop and `trigger-job`.

use std::collections::{BTreeMap, BTreeSet};

use hangar_core::pipeline::{Job, PipelineConfig};
use hangar_core::plan::planner::{plan_job_with_versions, InputVersions, JobPlan};
use hangar_core::scheduling::{
    decide, job_inputs, resolve, Input, InputVersion, JobGate, NamedVersion, NextBuild, Resolution,
    Window,
};
use hangar_store::{PlannedInput, SchedulingResource, Store, StoreError};
use serde_json::{json, Value};

/// How many succeeded builds of a passed job a first window holds; each
/// `NeedMore` multiplies it by 4, up to [`MAX_PASSED_BUILDS`].
const FIRST_PASSED_BUILDS: i64 = 50;
const MAX_PASSED_BUILDS: i64 = 200_000;

/// What a pipeline's jobs resolve against.
pub struct PipelineView<'a> {
    pub config: &'a PipelineConfig,
    pub resources: &'a BTreeMap<String, SchedulingResource>,
    /// Active jobs' ids by name.
    pub job_ids: &'a BTreeMap<String, i64>,
}

/// A job's decision, with what a build of it would take.
pub struct JobDecision {
    pub next: NextBuild,
    pub planned: Vec<PlannedInput>,
    /// Another `every` version waits after this one.
    pub has_next_every: bool,
}

/// The job's inputs with ids; a pin given by config (`version:` on the get
/// or its resource) wins over the API's (`pin-resource`), as in Concourse.
async fn inputs_of(
    store: &Store,
    view: &PipelineView<'_>,
    job: &Job,
) -> Result<Vec<Input>, StoreError> {
    let mut out = Vec::new();
    for named in job_inputs(view.config, job) {
        let resource = view.resources.get(&named.resource).ok_or_else(|| {
            StoreError::NotFound(format!("resource {} has no row", named.resource))
        })?;
        let version = match &named.version {
            NamedVersion::Pinned(pin) => {
                InputVersion::Pinned(store.match_pinned_version(resource.id, pin).await?)
            }
            _ if resource.api_pin.is_some() => InputVersion::Pinned(resource.api_pin),
            NamedVersion::Every => InputVersion::Every,
            NamedVersion::Latest => InputVersion::Latest,
        };
        out.push(Input {
            name: named.name,
            resource: resource.id,
            passed: named
                .passed
                .iter()
                .filter_map(|j| view.job_ids.get(j).copied())
                .collect(),
            version,
            trigger: named.trigger,
        });
    }
    Ok(out)
}

/// Resolves the job's inputs over windows the store loads, widening the
/// passed jobs the resolver ran out of.
async fn resolution(
    store: &Store,
    job_id: i64,
    inputs: &[Input],
) -> Result<Resolution, StoreError> {
    let mut window = Window::default();
    for i in inputs.iter().filter(|i| i.passed.is_empty()) {
        match i.version {
            InputVersion::Latest => {
                if let Some(v) = store.latest_enabled_version(i.resource).await? {
                    window.latest.insert(i.resource, v);
                }
            }
            InputVersion::Every => {
                if let Some(next) = store
                    .every_next_version(job_id, &i.name, i.resource)
                    .await?
                {
                    window.every_next.insert(i.name.clone(), next);
                }
            }
            InputVersion::Pinned(_) => {}
        }
    }
    let with_passed: Vec<&Input> = inputs.iter().filter(|i| !i.passed.is_empty()).collect();
    let resources: Vec<i64> = with_passed
        .iter()
        .map(|i| i.resource)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    window.disabled = store.disabled_versions(&resources).await?;
    let mut limits: BTreeMap<i64, i64> = BTreeMap::new();
    for job in with_passed.iter().flat_map(|i| i.passed.iter().copied()) {
        limits.insert(job, FIRST_PASSED_BUILDS);
    }
    let mut to_load: BTreeSet<i64> = limits.keys().copied().collect();
    loop {
        for job in &to_load {
            let of_job: Vec<i64> = with_passed
                .iter()
                .filter(|i| i.passed.contains(job))
                .map(|i| i.resource)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let list = store.passed_builds(*job, &of_job, limits[job]).await?;
            window.passed_builds.insert(*job, list);
        }
        match resolve(inputs, &window) {
            Ok(r) => return Ok(r),
            Err(more) => {
                // Widen each list the resolver ran out of; one at the bound
                // is taken as all there is, so the search always ends.
                let mut grow = BTreeSet::new();
                for job in more.jobs {
                    let limit = limits.entry(job).or_insert(FIRST_PASSED_BUILDS);
                    if *limit >= MAX_PASSED_BUILDS {
                        window.passed_builds.entry(job).or_default().complete = true;
                    } else {
                        *limit = (*limit * 4).min(MAX_PASSED_BUILDS);
                        grow.insert(job);
                    }
                }
                to_load = grow;
            }
        }
    }
}

/// Decides the job's next build.
pub async fn decide_job(
    store: &Store,
    view: &PipelineView<'_>,
    job_id: i64,
    job: &Job,
    gate: JobGate,
) -> Result<JobDecision, StoreError> {
    if gate.pipeline_paused || gate.job_paused {
        return Ok(JobDecision {
            next: decide(gate, &[], &empty_resolution(), &BTreeSet::new()),
            planned: vec![],
            has_next_every: false,
        });
    }
    let inputs = inputs_of(store, view, job).await?;
    let resolution = resolution(store, job_id, &inputs).await?;
    let planned: Vec<PlannedInput> = inputs
        .iter()
        .filter_map(|i| match resolution.inputs.get(&i.name) {
            Some(Ok(r)) => Some(PlannedInput {
                name: i.name.clone(),
                resource_id: i.resource,
                version_id: r.version,
            }),
            _ => None,
        })
        .collect();
    let used = store.inputs_used_before(job_id, &planned).await?;
    Ok(JobDecision {
        next: decide(gate, &inputs, &resolution, &used),
        planned,
        has_next_every: resolution.has_next_every,
    })
}

fn empty_resolution() -> Resolution {
    Resolution {
        inputs: BTreeMap::new(),
        has_next_every: false,
    }
}

/// The job's plan with each get fixed to its planned version.
pub async fn plan_with(
    store: &Store,
    config: &PipelineConfig,
    job: &Job,
    planned: &[PlannedInput],
) -> Result<Result<JobPlan, String>, StoreError> {
    let mut versions = InputVersions::new();
    let ids: Vec<_> = planned.iter().map(|p| p.version_id).collect();
    let texts = store.version_texts(&ids).await?;
    for p in planned {
        let text = &texts[&p.version_id];
        let Ok(Value::Object(v)) = serde_json::from_str::<Value>(text) else {
            return Err(StoreError::Corrupt(format!(
                "resource_versions: version {} is not an object",
                p.version_id
            )));
        };
        versions.insert(p.name.clone(), v);
    }
    Ok(plan_job_with_versions(config, job, &versions).map_err(|e| e.to_string()))
}

/// `waiting` as stored (and shown by the API): reason code, input, and
/// the reason in words with passed jobs named.
pub fn waiting_json(
    w: &hangar_core::scheduling::Waiting,
    job_ids: &BTreeMap<String, i64>,
) -> String {
    let (reason, input) = w.reason();
    let message = waiting_words(w, job_ids);
    json!({"reason": reason, "input": input, "message": message}).to_string()
}

/// Why a job waits, in words, its passed jobs named.
pub fn waiting_words(
    w: &hangar_core::scheduling::Waiting,
    job_ids: &BTreeMap<String, i64>,
) -> String {
    w.describe(&|id| {
        job_ids
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| format!("job {id}"))
    })
}
