//! A build plan: `get`, `task`, `put`, `load_var` and `set_pipeline`
//! steps ([`file_steps`] for the ones that read files of artifacts), in
//! sequence (`do`) or in parallel (`in_parallel`), `try`, and on any step
//! Concourse's modifiers
//! (`attempts`, `timeout`) and hooks (`on_success`, `on_failure`,
//! `on_error`, `on_abort`, `ensure`), in the shape of Concourse's step YAML
//! as JSON. Parsed from JSON with errors that name where in the plan the
//! problem is. How a step's end combines with its modifiers is
//! [`outcome`]'s.
//!
//! Two kinds of attempts, never mixed: `attempts` on any step is
//! Concourse's (the step runs again when it fails or errors, each run a
//! user-visible attempt); `infrastructure_attempts` on a get or task is
//! hangar's own (a leaf step tried again on another worker when the
//! infrastructure failed it, below `attempts` and never seen by
//! `on_error` unless they run out: default 3). A plan's task config that
//! still carries hangar's old config-level `attempts` has it read as the
//! step's `infrastructure_attempts`.

pub mod across;
pub mod across_plan;
pub mod file_steps;
pub mod local_vars;
pub mod outcome;
pub mod planner;
pub mod put;

pub use file_steps::{ArtifactFile, LoadVarStep, SetPipelineStep};
pub use put::{PutInputs, PutStep};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::names::validate_label;

/// The most steps one plan may hold, nested ones included.
pub const MAX_STEPS: usize = 256;
/// The deepest nesting of `do` / `in_parallel`.
pub const MAX_DEPTH: usize = 8;
/// Infrastructure attempts of a step unless it says otherwise.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// The most (Concourse) attempts a step may ask for.
pub const MAX_USER_ATTEMPTS: u32 = 10;
/// The longest `timeout` a step may ask for: a week.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Get(GetStep),
    Task(TaskStep),
    Put(PutStep),
    /// Concourse's `load_var`: a local var from a file of an artifact.
    LoadVar(LoadVarStep),
    /// Concourse's `set_pipeline`: a pipeline configured from a file.
    SetPipeline(SetPipelineStep),
    Do(Vec<Step>),
    InParallel(Parallel),
    /// Concourse's `try`: the step's failure or error is a success.
    Try(Box<Step>),
    /// A step with modifiers or hooks.
    Modified(Box<Modified>),
    /// An `across` whose values come when the build runs.
    Across(Box<across_plan::AcrossPlan>),
}

/// Concourse's `in_parallel`, as a list or as `{steps, limit, fail_fast}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Parallel {
    pub steps: Vec<Step>,
    /// At most this many children run at once (`None`: all).
    pub limit: Option<u32>,
    /// A child that does not succeed aborts the others.
    pub fail_fast: bool,
}

/// A step and Concourse's modifiers around it.
#[derive(Debug, Clone, PartialEq)]
pub struct Modified {
    pub step: Step,
    /// Concourse's `attempts` (1: run once).
    pub attempts: u32,
    /// Each attempt is cut short after this long, and then fails.
    pub timeout: Option<Duration>,
    /// The hooks given, innermost first ([`outcome::Hook::ORDER`]).
    pub hooks: Vec<(outcome::Hook, Step)>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetStep {
    /// The artifact the fetched version becomes.
    pub get: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    pub source: serde_json::Map<String, Value>,
    #[serde(default)]
    pub version: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub params: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// hangar's infrastructure attempts (not Concourse's `attempts`).
    #[serde(default)]
    pub infrastructure_attempts: Option<u32>,
    /// The pipeline resource fetched, in a job build's plan (the planner
    /// sets it; web refuses it in a plan sent to `POST /builds`): the
    /// version fetched is recorded as the build's input.
    #[serde(default)]
    pub resource: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskStep {
    pub task: String,
    /// The task config (Concourse's `task.yml` as JSON); parsed by
    /// [`TaskStep::parse_config`]. Exactly one of it and `file`.
    #[serde(default)]
    pub config: Option<Value>,
    /// `artifact/path/task.yml`: the config read from an artifact of the
    /// build when the step runs ([`file_steps::task_config_from_file`]).
    #[serde(default)]
    pub file: Option<String>,
    /// Values for the `((vars))` of the `file`.
    #[serde(default)]
    pub vars: Option<serde_json::Map<String, Value>>,
    /// Over the config's params (merged into an inline `config` when the
    /// plan is read, into a file's config when it is read).
    #[serde(default)]
    pub params: Option<serde_json::Map<String, Value>>,
    /// Over the config's `container_limits`, as `params`.
    #[serde(default)]
    pub container_limits: Option<Value>,
    /// task input name → artifact name.
    #[serde(default)]
    pub input_mapping: BTreeMap<String, String>,
    /// task output name → artifact name.
    #[serde(default)]
    pub output_mapping: BTreeMap<String, String>,
    /// An artifact whose content is the root filesystem to run in (runc).
    #[serde(default)]
    pub image: Option<String>,
    /// Concourse's step-level `privileged`: the container runs as real
    /// root with every capability, so only on a worker started with
    /// `--allow-privileged`.
    #[serde(default)]
    pub privileged: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    /// hangar's infrastructure attempts (not Concourse's `attempts`);
    /// default 3.
    #[serde(default)]
    pub infrastructure_attempts: Option<u32>,
    /// Job-level identity of the step, for task caches that persist across
    /// builds of the same job (`<job>/<task>`). Set by web, not users.
    #[serde(skip)]
    pub cache_scope: Option<String>,
}

impl TaskStep {
    /// The step with `config` (read from its `file`) as its inline config,
    /// the step's overrides applied: what runs.
    pub fn with_config(&self, config: Value) -> TaskStep {
        TaskStep {
            config: Some(config),
            file: None,
            vars: None,
            params: None,
            container_limits: None,
            ..self.clone()
        }
    }
}

impl GetStep {
    pub fn infrastructure_attempts(&self) -> u32 {
        self.infrastructure_attempts.unwrap_or(DEFAULT_ATTEMPTS)
    }
}

impl TaskStep {
    /// The step's task config, parsed and checked against what the step
    /// gives it ([`crate::task::TaskConfig::check_runnable`]).
    pub fn parse_config(&self) -> Result<crate::task::TaskConfig, crate::task::TaskConfigError> {
        let Some(config) = &self.config else {
            return Err(crate::task::TaskConfigError::document(format!(
                "the config is read from `file` ({}) when the step runs",
                self.file.as_deref().unwrap_or("none given")
            )));
        };
        let config = crate::task::parse_task_value(config.clone())?;
        config.check_runnable(self.image.is_some())?;
        Ok(config)
    }

    /// The artifact a task input reads.
    pub fn input_artifact<'a>(&'a self, input: &'a str) -> &'a str {
        self.input_mapping
            .get(input)
            .map(String::as_str)
            .unwrap_or(input)
    }

    /// The artifact a task output becomes.
    pub fn output_artifact<'a>(&'a self, output: &'a str) -> &'a str {
        self.output_mapping
            .get(output)
            .map(String::as_str)
            .unwrap_or(output)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "plan: {}", self.0)
    }
}

impl std::error::Error for PlanError {}

/// Parses a plan: a JSON array of steps.
pub fn parse_plan(value: &Value) -> Result<Vec<Step>, PlanError> {
    let mut count = 0;
    let steps = parse_list(value, "plan", 0, &mut count)?;
    if steps.is_empty() {
        return Err(PlanError("a plan needs at least one step".into()));
    }
    Ok(steps)
}

/// A build's plan as web stores it: its steps and its custom resource
/// types (see [`crate::resource_types`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BuildPlan {
    pub steps: Vec<Step>,
    pub resource_types: Vec<crate::resource_types::ResourceType>,
}

/// What web stores for a plan and its `resource_types`: the plan alone
/// when there are none (as builds stored before resource types), else
/// `{"steps": plan, "resource_types": types}`. A plan that is not a list
/// is wrapped too, so that [`parse_build_plan`] refuses it as a plan
/// rather than read it as a stored object.
pub fn stored_plan(plan: &Value, resource_types: &Value) -> Value {
    match (plan, resource_types) {
        (Value::Array(_), Value::Null) => plan.clone(),
        (_, Value::Null) => serde_json::json!({ "steps": plan }),
        (_, types) => serde_json::json!({ "steps": plan, "resource_types": types }),
    }
}

/// Parses a plan as [`stored_plan`] stores it: its steps, its resource
/// types, and every get step's type resolved through them.
pub fn parse_build_plan(stored: &Value) -> Result<BuildPlan, PlanError> {
    let (plan, types) = match stored {
        Value::Object(obj) if obj.contains_key("steps") => {
            if let Some(k) = obj
                .keys()
                .find(|k| !matches!(k.as_str(), "steps" | "resource_types"))
            {
                return Err(PlanError(format!("unknown field `{k}` in a stored plan")));
            }
            (
                &obj["steps"],
                obj.get("resource_types").unwrap_or(&Value::Null),
            )
        }
        other => (other, &Value::Null),
    };
    let resource_types = crate::resource_types::parse_resource_types(types)?;
    let steps = parse_plan(plan)?;
    local_vars::check_defined(&steps)?;
    for (id, step) in leaf_steps(&steps) {
        if let Step::Get(get) = step {
            crate::resource_types::chain(&resource_types, &get.resource_type)
                .map_err(|e| PlanError(format!("plan step {id} ({}): {}", get.get, e.0)))?;
        }
    }
    Ok(BuildPlan {
        steps,
        resource_types,
    })
}

fn parse_list(
    value: &Value,
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Vec<Step>, PlanError> {
    if depth > MAX_DEPTH {
        return Err(PlanError(format!(
            "{at}: nested deeper than {MAX_DEPTH} levels"
        )));
    }
    let items = value
        .as_array()
        .ok_or_else(|| PlanError(format!("{at}: expected a list of steps")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_step(item, &format!("{at}[{i}]"), depth, count))
        .collect()
}

/// The step kinds of a plan.
const KINDS: [&str; 9] = [
    "get",
    "task",
    "put",
    "load_var",
    "set_pipeline",
    "do",
    "in_parallel",
    "try",
    "across",
];

/// The keys of Concourse's modifiers and hooks, allowed on any step.
const MODIFIER_KEYS: [&str; 7] = [
    "attempts",
    "timeout",
    "on_success",
    "on_failure",
    "on_abort",
    "on_error",
    "ensure",
];

pub(crate) fn parse_step(
    value: &Value,
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Step, PlanError> {
    *count += 1;
    if *count > MAX_STEPS {
        return Err(PlanError(format!(
            "{at}: a plan holds at most {MAX_STEPS} steps"
        )));
    }
    if depth > MAX_DEPTH {
        return Err(PlanError(format!(
            "{at}: nested deeper than {MAX_DEPTH} levels"
        )));
    }
    let obj = value
        .as_object()
        .ok_or_else(|| PlanError(format!("{at}: expected a step (an object)")))?;
    if !obj.keys().any(|k| MODIFIER_KEYS.contains(&k.as_str())) {
        return parse_kind(value, obj, at, depth, count);
    }
    let mut rest = obj.clone();
    let attempts = match rest.remove("attempts") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(MAX_USER_ATTEMPTS)).contains(&n) => n as u32,
            _ => {
                return Err(PlanError(format!(
                    "{at}.attempts: {v} is not a whole number from 1 to {MAX_USER_ATTEMPTS}"
                )))
            }
        },
    };
    let timeout = match rest.remove("timeout") {
        None => None,
        Some(v) => Some(parse_timeout(&v, &format!("{at}.timeout"))?),
    };
    let mut hooks = Vec::new();
    for hook in outcome::Hook::ORDER {
        if let Some(v) = rest.remove(hook.key()) {
            let hook_at = format!("{at}.{}", hook.key());
            hooks.push((hook, parse_step(&v, &hook_at, depth + 1, count)?));
        }
    }
    let inner_value = Value::Object(rest);
    let inner_obj = inner_value.as_object().unwrap_or(obj);
    let step = parse_kind(&inner_value, inner_obj, at, depth, count)?;
    Ok(Step::Modified(Box::new(Modified {
        step,
        attempts,
        timeout,
        hooks,
    })))
}

fn parse_timeout(v: &Value, at: &str) -> Result<Duration, PlanError> {
    let text = v
        .as_str()
        .ok_or_else(|| PlanError(format!("{at}: expected a duration such as \"30m\"")))?;
    let d = crate::task::parse_go_duration(text).map_err(|e| PlanError(format!("{at}: {e}")))?;
    if d.is_zero() || d > MAX_TIMEOUT {
        return Err(PlanError(format!(
            "{at}: {text} is not between 1ns and {}h",
            MAX_TIMEOUT.as_secs() / 3600
        )));
    }
    Ok(d)
}

fn parse_kind(
    value: &Value,
    obj: &serde_json::Map<String, Value>,
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Step, PlanError> {
    let kinds: Vec<&str> = KINDS.into_iter().filter(|k| obj.contains_key(*k)).collect();
    let kind = match kinds.as_slice() {
        [one] => *one,
        [] => {
            return Err(PlanError(format!(
                "{at}: a step needs one of {}",
                KINDS.join(", ")
            )))
        }
        many if many.contains(&"across") => {
            return Err(PlanError(format!(
                "{at}: an across in a plan holds the step it runs under `step` \
                 ({{\"across\": [...], \"step\": {{...}}}}), not beside it"
            )))
        }
        many => {
            return Err(PlanError(format!(
                "{at}: a step has exactly one of {}",
                many.join(", ")
            )))
        }
    };
    let typed = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = inner.split(" at line").next().unwrap_or(&inner).to_string();
        if path == "." {
            PlanError(format!("{at}: {inner}"))
        } else {
            PlanError(format!("{at}.{path}: {inner}"))
        }
    };
    match kind {
        "get" => {
            let step: GetStep = serde_path_to_error::deserialize(value).map_err(typed)?;
            check_label(&step.get, &format!("{at}.get"))?;
            check_label(&step.resource_type, &format!("{at}.type"))?;
            check_common(&step.tags, step.infrastructure_attempts, at)?;
            Ok(Step::Get(step))
        }
        "put" => {
            let step: PutStep = serde_path_to_error::deserialize(value).map_err(typed)?;
            check_label(&step.put, &format!("{at}.put"))?;
            check_label(&step.resource_type, &format!("{at}.type"))?;
            if let PutInputs::Names(names) = &step.inputs {
                for n in names {
                    check_label(n, &format!("{at}.inputs"))?;
                }
            }
            check_common(&step.tags, step.infrastructure_attempts, at)?;
            Ok(Step::Put(step))
        }
        "load_var" => {
            let step: LoadVarStep = serde_path_to_error::deserialize(value).map_err(typed)?;
            check_label(&step.load_var, &format!("{at}.load_var"))?;
            step.artifact_file()
                .map_err(|e| PlanError(format!("{at}.file: {e}")))?;
            step.format().map_err(|e| PlanError(format!("{at}.{e}")))?;
            Ok(Step::LoadVar(step))
        }
        "set_pipeline" => {
            let step: SetPipelineStep = serde_path_to_error::deserialize(value).map_err(typed)?;
            if let Some(vars) = &step.instance_vars {
                if step.is_self() {
                    return Err(PlanError(format!(
                        "{at}.instance_vars: `self` is the build's own pipeline, instance \
                         and all; drop `instance_vars`"
                    )));
                }
                crate::instance_vars::InstanceVars::from_value(Value::Object(vars.clone()))
                    .map_err(|e| PlanError(format!("{at}.instance_vars: {e}")))?;
            }
            if !step.is_self() {
                crate::pipeline::check_name("pipeline", &step.set_pipeline)
                    .map_err(|e| PlanError(format!("{at}.set_pipeline: {e}")))?;
            }
            if let Some(team) = &step.team {
                check_label(team, &format!("{at}.team"))?;
            }
            for (field, file) in std::iter::once(("file", &step.file))
                .chain(step.var_files.iter().map(|f| ("var_files", f)))
            {
                ArtifactFile::parse(file).map_err(|e| PlanError(format!("{at}.{field}: {e}")))?;
            }
            Ok(Step::SetPipeline(step))
        }
        "task" => {
            if obj.contains_key("retry_failures") {
                return Err(PlanError(format!(
                    "{at}.retry_failures: replaced by Concourse's `attempts`, which runs the \
                     step again when it fails or errors"
                )));
            }
            let mut step: TaskStep = serde_path_to_error::deserialize(value).map_err(typed)?;
            check_label(&step.task, &format!("{at}.task"))?;
            match (&mut step.config, &step.file) {
                (Some(_), Some(_)) => {
                    return Err(PlanError(format!(
                        "{at}: give one of `config` or `file`, not both"
                    )))
                }
                (None, None) => {
                    return Err(PlanError(format!("{at}: a task needs `config` or `file`")))
                }
                (Some(config), None) => {
                    if let Some(n) = take_old_attempts(config, at)? {
                        step.infrastructure_attempts.get_or_insert(n);
                    }
                    if step.vars.is_some() {
                        return Err(PlanError(format!(
                            "{at}.vars: fill the vars of a task `file`; an inline `config` \
                             has its vars filled with the plan's"
                        )));
                    }
                    file_steps::apply_task_overrides(
                        config,
                        step.params.as_ref(),
                        step.container_limits.as_ref(),
                    );
                    step.params = None;
                    step.container_limits = None;
                }
                (None, Some(file)) => {
                    ArtifactFile::parse(file).map_err(|e| PlanError(format!("{at}.file: {e}")))?;
                }
            }
            if let Some(limits) = &step.container_limits {
                if !limits.is_object() {
                    return Err(PlanError(format!(
                        "{at}.container_limits: expected a mapping of cpu and memory"
                    )));
                }
            }
            for (k, v) in step.input_mapping.iter().chain(step.output_mapping.iter()) {
                check_label(k, &format!("{at} mapping key"))?;
                check_label(v, &format!("{at} mapping value"))?;
            }
            if let Some(image) = &step.image {
                check_label(image, &format!("{at}.image"))?;
            }
            check_common(&step.tags, step.infrastructure_attempts, at)?;
            Ok(Step::Task(step))
        }
        "try" => {
            only_key(obj, "try", at)?;
            let inner = parse_step(&obj["try"], &format!("{at}.try"), depth + 1, count)?;
            Ok(Step::Try(Box::new(inner)))
        }
        "do" => {
            only_key(obj, "do", at)?;
            let inner = parse_list(&obj["do"], &format!("{at}.do"), depth + 1, count)?;
            Ok(Step::Do(inner))
        }
        "across" => across_plan::parse(obj, at, depth, count),
        _ => parse_parallel(obj, at, depth, count),
    }
}

fn only_key(obj: &serde_json::Map<String, Value>, key: &str, at: &str) -> Result<(), PlanError> {
    match obj.keys().find(|k| k.as_str() != key) {
        Some(other) => Err(PlanError(format!(
            "{at}: {key} takes nothing but its step(s) and the modifiers \
             (attempts, timeout, hooks), not `{other}`"
        ))),
        None => Ok(()),
    }
}

/// `in_parallel: [steps]` or `in_parallel: {steps, limit, fail_fast}`.
fn parse_parallel(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Step, PlanError> {
    only_key(obj, "in_parallel", at)?;
    let at = format!("{at}.in_parallel");
    let body = &obj["in_parallel"];
    let Some(config) = body.as_object() else {
        let steps = parse_list(body, &at, depth + 1, count)?;
        return Ok(Step::InParallel(Parallel {
            steps,
            limit: None,
            fail_fast: false,
        }));
    };
    if let Some(k) = config
        .keys()
        .find(|k| !matches!(k.as_str(), "steps" | "limit" | "fail_fast"))
    {
        return Err(PlanError(format!(
            "{at}: unknown field `{k}`, expected steps, limit, fail_fast"
        )));
    }
    let steps = match config.get("steps") {
        Some(v) => parse_list(v, &format!("{at}.steps"), depth + 1, count)?,
        None => return Err(PlanError(format!("{at}: missing field `steps`"))),
    };
    let limit = match config.get("limit") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 && n <= MAX_STEPS as u64 => Some(n as u32),
            _ => {
                return Err(PlanError(format!(
                    "{at}.limit: {v} is not a whole number from 1 to {MAX_STEPS}"
                )))
            }
        },
    };
    let fail_fast = match config.get("fail_fast") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(PlanError(format!(
                "{at}.fail_fast: expected true or false, not {v}"
            )))
        }
    };
    Ok(Step::InParallel(Parallel {
        steps,
        limit,
        fail_fast,
    }))
}

/// A task config's `attempts`, taken out of it: hangar's own field before
/// the config was read as Concourse reads it, which `execute` wrote into
/// every config it sent. A plan that still has one (a build made before)
/// runs with it as the step's infrastructure attempts.
fn take_old_attempts(config: &mut Value, at: &str) -> Result<Option<u32>, PlanError> {
    let Some(n) = config.as_object_mut().and_then(|c| c.remove("attempts")) else {
        return Ok(None);
    };
    match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
        Some(n) => Ok(Some(n)),
        None => Err(PlanError(format!(
            "{at}.config.attempts: {n} is not a number of attempts; put Concourse's \
             `attempts` on the step"
        ))),
    }
}

fn check_label(s: &str, at: &str) -> Result<(), PlanError> {
    validate_label(s).map_err(|e| PlanError(format!("{at}: {e}")))
}

fn check_common(tags: &[String], attempts: Option<u32>, at: &str) -> Result<(), PlanError> {
    for t in tags {
        check_label(t, &format!("{at}.tags"))?;
    }
    if let Some(n) = attempts {
        if !(1..=10).contains(&n) {
            return Err(PlanError(format!(
                "{at}.infrastructure_attempts: {n} is out of range 1..=10"
            )));
        }
    }
    Ok(())
}

/// The id of a step's hook (`2.1.on_failure`).
pub fn hook_id(step_id: &str, hook: outcome::Hook) -> String {
    format!("{step_id}.{}", hook.key())
}

/// The id of a step's Concourse attempt `n` (the first keeps the step's
/// own id, so a plan without `attempts` has the ids it always had).
pub fn attempt_id(step_id: &str, n: u32) -> String {
    if n <= 1 {
        step_id.to_string()
    } else {
        format!("{step_id}#{n}")
    }
}

/// Every leaf step with its id (`0`, `2.1`, `3.ensure`, …), in plan
/// order, a step's hooks after it; a `try` and a modified step
/// keep the id of the step inside. Later attempts are not listed.
pub fn leaf_steps(steps: &[Step]) -> Vec<(String, &Step)> {
    fn walk<'a>(steps: &'a [Step], prefix: &str, out: &mut Vec<(String, &'a Step)>) {
        for (i, s) in steps.iter().enumerate() {
            let id = if prefix.is_empty() {
                i.to_string()
            } else {
                format!("{prefix}.{i}")
            };
            walk_one(s, id, out);
        }
    }
    fn walk_one<'a>(s: &'a Step, id: String, out: &mut Vec<(String, &'a Step)>) {
        match s {
            Step::Do(inner) => walk(inner, &id, out),
            Step::InParallel(p) => walk(&p.steps, &id, out),
            Step::Try(inner) => walk_one(inner, id, out),
            // The across itself, for its values' vars; then what each
            // combination runs, under ids that no combination has.
            Step::Across(a) => {
                out.push((id.clone(), s));
                walk_one(&a.template, format!("{id}.*"), out)
            }
            Step::Modified(m) => {
                walk_one(&m.step, id.clone(), out);
                for (hook, step) in &m.hooks {
                    walk_one(step, hook_id(&id, *hook), out);
                }
            }
            leaf => out.push((id, leaf)),
        }
    }
    let mut out = Vec::new();
    walk(steps, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse_plan(&v).unwrap_err().to_string()
    }

    #[test]
    fn a_plan_of_gets_and_tasks_parses_with_ids() {
        let plan = json!([
            {"get": "repo", "type": "git", "source": {"uri": "/r"}},
            {"in_parallel": [
                {"task": "unit", "config": {"platform": "linux"}, "input_mapping": {"src": "repo"}},
                {"task": "lint", "config": {}, "infrastructure_attempts": 5}
            ]},
        ]);
        let steps = parse_plan(&plan).unwrap();
        let ids: Vec<String> = leaf_steps(&steps).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["0", "1.0", "1.1"]);
        let Step::InParallel(inner) = &steps[1] else {
            panic!()
        };
        let Step::Task(unit) = &inner.steps[0] else {
            panic!()
        };
        assert_eq!(
            (unit.input_artifact("src"), unit.input_artifact("other")),
            ("repo", "other")
        );
        assert_eq!(unit.infrastructure_attempts, None);
    }

    #[test]
    fn a_task_config_s_old_attempts_become_the_step_s_infrastructure_attempts() {
        let config = json!({"platform": "linux", "run": {"path": "true"}, "attempts": 5});
        let steps = parse_plan(&json!([
            {"task": "old", "config": config},
            {"task": "both", "config": config, "infrastructure_attempts": 2},
        ]))
        .unwrap();
        let tasks: Vec<&TaskStep> = steps
            .iter()
            .map(|s| match s {
                Step::Task(t) => t,
                _ => panic!("{s:?}"),
            })
            .collect();
        assert_eq!(tasks[0].infrastructure_attempts, Some(5));
        assert_eq!(tasks[1].infrastructure_attempts, Some(2));
        for task in tasks {
            assert!(task.config.as_ref().unwrap().get("attempts").is_none());
            task.parse_config().unwrap();
        }
        assert_eq!(
            err(json!([{"task": "t", "config": {"attempts": "x"}}])),
            "plan: plan[0].config.attempts: \"x\" is not a number of attempts; put Concourse's \
             `attempts` on the step"
        );
        assert_eq!(
            err(json!([{"task": "t", "config": {"attempts": 11}}])),
            "plan: plan[0].infrastructure_attempts: 11 is out of range 1..=10"
        );
    }

    #[test]
    fn bad_plans_get_messages_that_say_where() {
        let cases = [
            (json!({}), "plan: plan: expected a list of steps"),
            (json!([]), "plan: a plan needs at least one step"),
            (json!([1]), "plan: plan[0]: expected a step (an object)"),
            (
                json!([{"puts": "x"}]),
                "plan: plan[0]: a step needs one of get, task, put, load_var, set_pipeline, do, \
                 in_parallel, try",
            ),
            (
                json!([{"get": "a", "task": "b"}]),
                "plan: plan[0]: a step has exactly one of get, task",
            ),
            (
                json!([{"get": "a", "type": "git"}]),
                "plan: plan[0]: missing field `source`",
            ),
            (
                json!([{"get": "a", "type": "git", "source": {}, "sauce": 1}]),
                "plan: plan[0].sauce: unknown field `sauce`",
            ),
            (
                json!([{"get": "a", "type": "git", "source": []}]),
                "plan: plan[0].source: invalid type: sequence, expected a map",
            ),
            (
                json!([{"get": "bad name", "type": "git", "source": {}}]),
                "plan: plan[0].get: invalid name",
            ),
            (
                json!([{"task": "t", "config": {}, "infrastructure_attempts": 0}]),
                "plan: plan[0].infrastructure_attempts: 0 is out of range 1..=10",
            ),
            (
                json!([{"do": [{"task": "t", "config": {}, "tags": ["a b"]}]}]),
                "plan: plan[0].do[0].tags: invalid name",
            ),
            (
                json!([{"do": [], "x": 1}]),
                "plan: plan[0]: do takes nothing but its step(s)",
            ),
        ];
        for (plan, expected) in cases {
            let got = err(plan.clone());
            assert!(got.starts_with(expected), "{plan}: {got}");
        }
    }

    #[test]
    fn a_stored_plan_carries_its_resource_types_and_old_plans_still_read() {
        let steps = json!([{"get": "n", "type": "slack", "source": {}}]);
        let old = parse_build_plan(&stored_plan(&steps, &Value::Null)).unwrap();
        assert!(old.resource_types.is_empty());
        let types = json!([{"name": "slack", "type": "registry-image", "source": {}}]);
        let stored = stored_plan(&steps, &types);
        let plan = parse_build_plan(&stored).unwrap();
        assert_eq!(plan.resource_types[0].name, "slack");
        assert_eq!(plan.steps.len(), 1);
        // A plan sent as the stored object is not a list of steps.
        let sneaky = json!({"steps": steps.clone(), "resource_types": types});
        assert!(parse_build_plan(&stored_plan(&sneaky, &Value::Null))
            .unwrap_err()
            .to_string()
            .contains("expected a list of steps"));
        let bad = json!({"steps": steps, "resource_types": [], "extra": 1});
        assert!(parse_build_plan(&bad)
            .unwrap_err()
            .to_string()
            .contains("unknown field `extra`"));
    }

    #[test]
    fn plans_are_bounded_in_size_and_depth() {
        let mut deep = json!([{"task": "t", "config": {}}]);
        for _ in 0..=MAX_DEPTH {
            deep = json!([{"do": deep}]);
        }
        assert!(err(deep).contains("nested deeper than"));
        let wide = Value::Array(vec![json!({"task": "t", "config": {}}); MAX_STEPS + 1]);
        assert!(err(wide).contains("at most 256 steps"));
    }
}

#[cfg(test)]
mod concourse_steps_tests;
