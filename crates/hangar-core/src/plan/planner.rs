//! A pipeline job's plan as a build plan: what a job build will run.
//!
//! Resource names become their type, source and tags, and each get and
//! put keeps its resource's name (`resource`), so the engine records the
//! versions the build used and produced; a custom type of the
//! pipeline travels with the plan as the build's `resource_types`; a get's
//! pinned `version` (the step's, else the resource's) and `params` carry
//! over; a task's step `params` and `container_limits` override its
//! config's, as in Concourse; the job's hooks wrap the whole plan. `passed`
//! and `trigger` are the scheduler's, not the build's, and are not in a
//! build plan. The result is read back through [`super::parse_build_plan`],
//! so a job plan obeys every bound a plan sent to the API does. A put's
//! resource is resolved as a get's. A task's `file`, `load_var` and
//! `set_pipeline` carry over as written: they read artifacts of the build
//! when they run. Steps the engine does not run are refused by name.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::file_steps::apply_task_overrides;
use super::{parse_build_plan, stored_plan, BuildPlan};
use crate::pipeline::{Action, GetVersion, PutInputs, Step};
use crate::pipeline::{Job, PipelineConfig};

/// A job's build plan: as web stores it, and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    pub stored: Value,
    pub plan: BuildPlan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerError(pub String);

impl std::fmt::Display for PlannerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job plan: {}", self.0)
    }
}

impl std::error::Error for PlannerError {}

/// The versions the scheduler chose, by get name (the artifact name).
pub type InputVersions = BTreeMap<String, Map<String, Value>>;

/// The build plan of `job` of `config`, its gets taking their pinned
/// versions (or, without one, the newest at run time).
pub fn plan_job(config: &PipelineConfig, job: &Job) -> Result<JobPlan, PlannerError> {
    plan_job_with_versions(config, job, &InputVersions::new())
}

/// The build plan of `job` with the versions the scheduler resolved: a get
/// named in `versions` fetches that version.
pub fn plan_job_with_versions(
    config: &PipelineConfig,
    job: &Job,
    versions: &InputVersions,
) -> Result<JobPlan, PlannerError> {
    let config = &Planner { config, versions };
    let at = format!("jobs.{}.plan", job.name);
    let steps = job
        .plan
        .iter()
        .enumerate()
        .map(|(i, s)| step(config, s, &format!("{at}[{i}]")))
        .collect::<Result<Vec<Value>, _>>()?;
    let mut plan = Value::Array(steps);
    let hooks: Vec<(&str, &Option<Box<Step>>)> = vec![
        ("on_success", &job.on_success),
        ("on_failure", &job.on_failure),
        ("on_abort", &job.on_abort),
        ("on_error", &job.on_error),
        ("ensure", &job.ensure),
    ];
    if hooks.iter().any(|(_, h)| h.is_some()) {
        let mut wrapper = Map::new();
        wrapper.insert("do".into(), plan);
        for (key, hook) in hooks {
            if let Some(hook) = hook {
                wrapper.insert(
                    key.into(),
                    step(config, hook, &format!("jobs.{}.{key}", job.name))?,
                );
            }
        }
        plan = json!([Value::Object(wrapper)]);
    }
    let types = if config.resource_types.is_empty() {
        Value::Null
    } else {
        Value::Array(config.resource_types.iter().map(resource_type).collect())
    };
    let stored = stored_plan(&plan, &types);
    let plan = parse_build_plan(&stored).map_err(|e| PlannerError(e.0))?;
    Ok(JobPlan { stored, plan })
}

fn resource_type(t: &crate::pipeline::ResourceType) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(t.name));
    out.insert("type".into(), json!(t.resource_type));
    out.insert("source".into(), Value::Object(t.source.clone()));
    if let Some(p) = &t.params {
        out.insert("params".into(), Value::Object(p.clone()));
    }
    if !t.tags.is_empty() {
        out.insert("tags".into(), json!(t.tags));
    }
    if let Some(d) = &t.defaults {
        out.insert("defaults".into(), Value::Object(d.clone()));
    }
    if t.privileged {
        out.insert("privileged".into(), json!(true));
    }
    Value::Object(out)
}

/// The config and the versions chosen for this build.
struct Planner<'a> {
    config: &'a PipelineConfig,
    versions: &'a InputVersions,
}

impl std::ops::Deref for Planner<'_> {
    type Target = PipelineConfig;
    fn deref(&self) -> &PipelineConfig {
        self.config
    }
}

fn step(config: &Planner, s: &Step, at: &str) -> Result<Value, PlannerError> {
    let outer = at;
    let at = format!("{at}{}", s.label());
    let mut out = match &s.action {
        Action::Across(a) => {
            let inner = step(config, &a.step, outer)?;
            if a.vars.iter().any(|v| v.values_from.is_some()) {
                // Written out when the build runs, once its values are known.
                super::across_plan::stored(&a.vars, a.fail_fast, inner)
            } else {
                super::across::expand(&a.vars, a.fail_fast, &inner, &at).map_err(PlannerError)?
            }
        }
        Action::Get(get) => {
            let resource = config.resource(get.resource_name()).ok_or_else(|| {
                PlannerError(format!("{at}: unknown resource {:?}", get.resource_name()))
            })?;
            let mut o = Map::new();
            o.insert("get".into(), json!(get.name));
            o.insert("resource".into(), json!(resource.name));
            o.insert("type".into(), json!(resource.resource_type));
            o.insert("source".into(), Value::Object(resource.source.clone()));
            let version = match (config.versions.get(&get.name), &get.version) {
                (Some(chosen), _) => Some(chosen.clone()),
                (None, Some(GetVersion::Pinned(v))) => Some(v.clone()),
                (None, _) => resource.version.clone(),
            };
            if let Some(v) = version {
                o.insert("version".into(), Value::Object(v));
            }
            if let Some(p) = &get.params {
                o.insert("params".into(), Value::Object(p.clone()));
            }
            let tags = merged_tags(&resource.tags, &s.tags);
            if !tags.is_empty() {
                o.insert("tags".into(), json!(tags));
            }
            o
        }
        Action::Task(task) => {
            let limits = task
                .container_limits
                .as_ref()
                .map(serde_json::to_value)
                .transpose()
                .map_err(|e| PlannerError(format!("{at}.container_limits: {e}")))?;
            let mut o = Map::new();
            o.insert("task".into(), json!(task.name));
            match (&task.config, &task.file) {
                (Some(config), _) => {
                    if task.vars.is_some() {
                        return Err(PlannerError(format!(
                            "{at}.vars: fill the vars of a task `file`; an inline `config` \
                             has its vars filled with the pipeline's"
                        )));
                    }
                    let mut config = config.clone();
                    if !config.is_object() {
                        return Err(PlannerError(format!("{at}.config: expected a mapping")));
                    }
                    apply_task_overrides(&mut config, task.params.as_ref(), limits.as_ref());
                    o.insert("config".into(), config);
                }
                (None, Some(file)) => {
                    // Read, with the step's vars and overrides, when the
                    // step runs (the file is an artifact of the build).
                    o.insert("file".into(), json!(file));
                    if let Some(vars) = &task.vars {
                        o.insert("vars".into(), Value::Object(vars.clone()));
                    }
                    if let Some(params) = &task.params {
                        o.insert("params".into(), Value::Object(params.clone()));
                    }
                    if let Some(limits) = limits {
                        o.insert("container_limits".into(), limits);
                    }
                }
                (None, None) => {
                    return Err(PlannerError(format!(
                        "{at}: a task needs `config` or `file`"
                    )))
                }
            }
            if !task.input_mapping.is_empty() {
                o.insert("input_mapping".into(), json!(task.input_mapping));
            }
            if !task.output_mapping.is_empty() {
                o.insert("output_mapping".into(), json!(task.output_mapping));
            }
            if let Some(image) = &task.image {
                o.insert("image".into(), json!(image));
            }
            if task.privileged {
                o.insert("privileged".into(), json!(true));
            }
            if !s.tags.is_empty() {
                o.insert("tags".into(), json!(s.tags));
            }
            o
        }
        Action::Put(put) => {
            let resource = config.resource(put.resource_name()).ok_or_else(|| {
                PlannerError(format!("{at}: unknown resource {:?}", put.resource_name()))
            })?;
            let mut o = Map::new();
            o.insert("put".into(), json!(put.name));
            o.insert("resource".into(), json!(resource.name));
            o.insert("type".into(), json!(resource.resource_type));
            o.insert("source".into(), Value::Object(resource.source.clone()));
            if let Some(p) = &put.params {
                o.insert("params".into(), Value::Object(p.clone()));
            }
            if let Some(inputs) = &put.inputs {
                let inputs = match inputs {
                    PutInputs::All => json!("all"),
                    PutInputs::Detect => json!("detect"),
                    PutInputs::Names(n) => json!(n),
                };
                o.insert("inputs".into(), inputs);
            }
            if let Some(p) = &put.get_params {
                o.insert("get_params".into(), Value::Object(p.clone()));
            }
            if put.no_get {
                o.insert("no_get".into(), json!(true));
            }
            let tags = merged_tags(&resource.tags, &s.tags);
            if !tags.is_empty() {
                o.insert("tags".into(), json!(tags));
            }
            o
        }
        Action::SetPipeline(set) => {
            let mut o = Map::new();
            o.insert("set_pipeline".into(), json!(set.name));
            if let Some(vars) = &set.instance_vars {
                o.insert("instance_vars".into(), Value::Object(vars.clone()));
            }
            o.insert("file".into(), json!(set.file));
            if let Some(vars) = &set.vars {
                o.insert("vars".into(), Value::Object(vars.clone()));
            }
            if !set.var_files.is_empty() {
                o.insert("var_files".into(), json!(set.var_files));
            }
            if let Some(team) = &set.team {
                o.insert("team".into(), json!(team));
            }
            o
        }
        Action::LoadVar(load) => {
            let mut o = Map::new();
            o.insert("load_var".into(), json!(load.name));
            o.insert("file".into(), json!(load.file));
            if let Some(format) = load.format {
                o.insert("format".into(), json!(format.as_str()));
            }
            if load.reveal {
                o.insert("reveal".into(), json!(true));
            }
            o
        }
        Action::Do(inner) => {
            let mut o = Map::new();
            o.insert("do".into(), list(config, inner, &at)?);
            o
        }
        Action::Try(inner) => {
            let mut o = Map::new();
            o.insert("try".into(), step(config, inner, &at)?);
            o
        }
        Action::InParallel(p) => {
            let mut body = Map::new();
            body.insert("steps".into(), list(config, &p.steps, &at)?);
            if let Some(limit) = p.limit.filter(|l| *l > 0) {
                body.insert("limit".into(), json!(limit));
            }
            if p.fail_fast {
                body.insert("fail_fast".into(), json!(true));
            }
            let mut o = Map::new();
            o.insert("in_parallel".into(), Value::Object(body));
            o
        }
    };
    if !matches!(s.action, Action::Get(_) | Action::Task(_) | Action::Put(_)) && !s.tags.is_empty()
    {
        return Err(PlannerError(format!(
            "{at}.tags: tags on a {} are not supported yet; put them on its steps",
            s.label().trim_start_matches('.')
        )));
    }
    if let Some(n) = s.attempts {
        out.insert("attempts".into(), json!(n));
    }
    if let Some(t) = &s.timeout {
        out.insert("timeout".into(), json!(t.text));
    }
    for (key, hook) in [
        ("on_success", &s.on_success),
        ("on_failure", &s.on_failure),
        ("on_abort", &s.on_abort),
        ("on_error", &s.on_error),
        ("ensure", &s.ensure),
    ] {
        if let Some(hook) = hook {
            out.insert(key.into(), step(config, hook, &format!("{at}.{key}"))?);
        }
    }
    Ok(Value::Object(out))
}

fn list(config: &Planner, steps: &[Step], at: &str) -> Result<Value, PlannerError> {
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| step(config, s, &format!("{at}[{i}]")))
        .collect::<Result<Vec<Value>, _>>()
        .map(Value::Array)
}

/// A resource's tags and the step's, each once.
fn merged_tags(resource: &[String], step: &[String]) -> Vec<String> {
    let mut tags: Vec<String> = resource.to_vec();
    for t in step {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    tags
}

#[cfg(test)]
mod tests;
