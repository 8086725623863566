//! The steps of a job's plan, and how they are written back.
//!
//! As in Concourse, a step is the one whose key (`get`, `put`, `task`,
//! `set_pipeline`, `load_var`, `in_parallel`, `do`, `try`) is present, and
//! any step may carry the modifiers `attempts`, `timeout` and the hooks
//! `on_success`, `on_failure`, `on_abort`, `on_error`, `ensure` (each a
//! step). `tags` belongs to the steps that run on workers and to `do` and
//! `in_parallel`, as in Concourse.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::names::show;
use super::GoDuration;
use crate::task::ContainerLimits;

/// One step with its modifiers and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub action: Action,
    /// Run the step again on failure, up to this many times in all.
    pub attempts: Option<u32>,
    pub timeout: Option<GoDuration>,
    /// Workers the step may run on.
    pub tags: Vec<String>,
    pub on_success: Option<Box<Step>>,
    pub on_failure: Option<Box<Step>>,
    pub on_abort: Option<Box<Step>>,
    pub on_error: Option<Box<Step>>,
    pub ensure: Option<Box<Step>>,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Get(GetStep),
    Put(PutStep),
    Task(TaskStep),
    SetPipeline(SetPipelineStep),
    LoadVar(LoadVarStep),
    InParallel(InParallelStep),
    Do(Vec<Step>),
    Try(Box<Step>),
    /// `across`: the step run once per combination of its vars' values.
    Across(AcrossStep),
}

/// `across: [{var, values, max_in_flight}]` with `fail_fast`, on a step:
/// `step` (with its attempts, timeout and tags) runs once per combination
/// of the vars' values, the first var outermost; the hooks stay on the
/// step that holds this action and run once, after every combination.
#[derive(Debug, Clone, PartialEq)]
pub struct AcrossStep {
    pub vars: Vec<AcrossVar>,
    pub fail_fast: bool,
    pub step: Box<Step>,
}

/// One var of an `across`.
#[derive(Debug, Clone, PartialEq)]
pub struct AcrossVar {
    pub var: String,
    /// Its values; empty when `values_from` gives them.
    pub values: Vec<Value>,
    /// The one `((var))` or `((.:var))` giving the whole list, known only
    /// when the build runs (see `crate::plan::across_plan`).
    pub values_from: Option<String>,
    /// How many of its values run at once; `None` is `all`.
    pub max_in_flight: Option<u32>,
}

/// `get: NAME`: fetch a version of `resource` (NAME when absent) as the
/// artifact NAME.
#[derive(Debug, Clone, PartialEq)]
pub struct GetStep {
    pub name: String,
    pub resource: Option<String>,
    pub version: Option<GetVersion>,
    pub params: Option<Map<String, Value>>,
    /// Jobs (names or patterns) the version must have gone through.
    pub passed: Vec<String>,
    pub trigger: bool,
}

impl GetStep {
    pub fn resource_name(&self) -> &str {
        self.resource.as_deref().unwrap_or(&self.name)
    }
}

/// Which versions a get takes.
#[derive(Debug, Clone, PartialEq)]
pub enum GetVersion {
    Latest,
    Every,
    /// A fixed version; values are strings (or `((vars))`).
    Pinned(Map<String, Value>),
}

/// `put: NAME`: push to `resource` (NAME when absent), then get the new
/// version as the artifact NAME unless `no_get`.
#[derive(Debug, Clone, PartialEq)]
pub struct PutStep {
    pub name: String,
    pub resource: Option<String>,
    pub params: Option<Map<String, Value>>,
    pub inputs: Option<PutInputs>,
    pub get_params: Option<Map<String, Value>>,
    pub no_get: bool,
}

impl PutStep {
    pub fn resource_name(&self) -> &str {
        self.resource.as_deref().unwrap_or(&self.name)
    }
}

/// The artifacts a put is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutInputs {
    All,
    /// Those its params name (Concourse's default).
    Detect,
    Names(Vec<String>),
}

/// `task: NAME`: a task from an inline `config` or a `file` in an
/// artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStep {
    pub name: String,
    /// The task config as written; validated by
    /// [`crate::task::parse_task_value`] when read.
    pub config: Option<Value>,
    /// `artifact/path/to/task.yml`.
    pub file: Option<String>,
    /// Values for the `((vars))` of the `file`.
    pub vars: Option<Map<String, Value>>,
    /// Overrides of the config's params.
    pub params: Option<Map<String, Value>>,
    pub input_mapping: BTreeMap<String, String>,
    pub output_mapping: BTreeMap<String, String>,
    /// An artifact to run in, instead of the config's image.
    pub image: Option<String>,
    /// Run the task's container privileged (as real root with every
    /// capability), on a worker started with `--allow-privileged`.
    pub privileged: bool,
    pub container_limits: Option<ContainerLimits>,
}

impl TaskStep {
    /// The inline config, parsed (it was validated when read).
    pub fn parse_config(
        &self,
    ) -> Option<Result<crate::task::TaskConfig, crate::task::TaskConfigError>> {
        self.config
            .as_ref()
            .map(|c| crate::task::parse_task_value(c.clone()))
    }
}

/// `set_pipeline: NAME`: configure a pipeline from a file of an artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct SetPipelineStep {
    pub name: String,
    pub file: String,
    pub team: Option<String>,
    pub vars: Option<Map<String, Value>>,
    pub var_files: Vec<String>,
    pub instance_vars: Option<Map<String, Value>>,
}

/// `load_var: NAME`: a local var from a file of an artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadVarStep {
    pub name: String,
    pub file: String,
    /// Absent: chosen by the file's extension.
    pub format: Option<LoadVarFormat>,
    pub reveal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadVarFormat {
    Json,
    Yaml,
    Yml,
    Trim,
    Raw,
}

impl LoadVarFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadVarFormat::Json => "json",
            LoadVarFormat::Yaml => "yaml",
            LoadVarFormat::Yml => "yml",
            LoadVarFormat::Trim => "trim",
            LoadVarFormat::Raw => "raw",
        }
    }
}

/// `in_parallel`: steps run at once, at most `limit` (0: all) at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct InParallelStep {
    pub steps: Vec<Step>,
    pub limit: Option<u32>,
    pub fail_fast: bool,
}

impl Step {
    /// The step's label in locations, as Concourse writes it: `.get(repo)`,
    /// `.do`, `.try`.
    pub fn label(&self) -> String {
        match &self.action {
            Action::Get(s) => format!(".get({})", show(&s.name)),
            Action::Put(s) => format!(".put({})", show(&s.name)),
            Action::Task(s) => format!(".task({})", show(&s.name)),
            Action::SetPipeline(s) => format!(".set_pipeline({})", show(&s.name)),
            Action::LoadVar(s) => format!(".load_var({})", show(&s.name)),
            Action::InParallel(_) => ".in_parallel".into(),
            Action::Do(_) => ".do".into(),
            Action::Try(_) => ".try".into(),
            Action::Across(a) => a.step.label(),
        }
    }

    /// The step's hooks with their keys, in Concourse's order.
    pub fn hooks(&self) -> [(&'static str, Option<&Step>); 5] {
        [
            ("on_success", self.on_success.as_deref()),
            ("on_failure", self.on_failure.as_deref()),
            ("on_abort", self.on_abort.as_deref()),
            ("on_error", self.on_error.as_deref()),
            ("ensure", self.ensure.as_deref()),
        ]
    }

    /// Steps directly inside this one, with their locations relative to
    /// `at` (this step's location): nested steps, then hooks.
    pub fn children(&self, at: &str) -> Vec<(String, &Step)> {
        let mut out = Vec::new();
        match &self.action {
            Action::Do(steps) => {
                for (i, s) in steps.iter().enumerate() {
                    out.push((format!("{at}.do[{i}]"), s));
                }
            }
            Action::InParallel(p) => {
                for (i, s) in p.steps.iter().enumerate() {
                    out.push((format!("{at}.in_parallel.steps[{i}]"), s));
                }
            }
            Action::Try(s) => out.push((format!("{at}.try"), &**s)),
            Action::Across(a) => out.push((at.to_string(), &*a.step)),
            _ => {}
        }
        for (key, hook) in self.hooks() {
            if let Some(h) = hook {
                out.push((format!("{at}.{key}"), h));
            }
        }
        out
    }

    /// Calls `f` with this step and every step within it, each with its
    /// location, in plan order.
    pub fn walk<'a>(&'a self, at: &str, f: &mut dyn FnMut(&str, &'a Step)) {
        f(at, self);
        for (child_at, child) in self.children(at) {
            child.walk(&child_at, f);
        }
    }

    fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        let obj = |o: &Option<Map<String, Value>>| o.clone().map(Value::Object);
        let strings = |v: &[String]| Value::from(v.to_vec());
        let mut opt = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                put(k, v);
            }
        };
        match &self.action {
            Action::Get(s) => {
                opt("get", Some(s.name.clone().into()));
                opt("resource", s.resource.clone().map(Value::from));
                opt(
                    "version",
                    s.version.as_ref().map(|v| match v {
                        GetVersion::Latest => Value::from("latest"),
                        GetVersion::Every => Value::from("every"),
                        GetVersion::Pinned(m) => Value::Object(m.clone()),
                    }),
                );
                opt("params", obj(&s.params));
                opt("passed", (!s.passed.is_empty()).then(|| strings(&s.passed)));
                opt("trigger", s.trigger.then_some(Value::Bool(true)));
            }
            Action::Put(s) => {
                opt("put", Some(s.name.clone().into()));
                opt("resource", s.resource.clone().map(Value::from));
                opt("params", obj(&s.params));
                opt(
                    "inputs",
                    s.inputs.as_ref().map(|i| match i {
                        PutInputs::All => Value::from("all"),
                        PutInputs::Detect => Value::from("detect"),
                        PutInputs::Names(n) => strings(n),
                    }),
                );
                opt("get_params", obj(&s.get_params));
                opt("no_get", s.no_get.then_some(Value::Bool(true)));
            }
            Action::Task(s) => {
                opt("task", Some(s.name.clone().into()));
                opt("config", s.config.clone());
                opt("file", s.file.clone().map(Value::from));
                opt("vars", obj(&s.vars));
                opt("params", obj(&s.params));
                let mapping = |m: &BTreeMap<String, String>| {
                    (!m.is_empty()).then(|| {
                        Value::Object(
                            m.iter()
                                .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                                .collect(),
                        )
                    })
                };
                opt("input_mapping", mapping(&s.input_mapping));
                opt("output_mapping", mapping(&s.output_mapping));
                opt("image", s.image.clone().map(Value::from));
                opt("privileged", s.privileged.then_some(Value::Bool(true)));
                opt(
                    "container_limits",
                    s.container_limits
                        .as_ref()
                        .and_then(|l| serde_json::to_value(l).ok()),
                );
            }
            Action::SetPipeline(s) => {
                opt("set_pipeline", Some(s.name.clone().into()));
                opt("file", Some(s.file.clone().into()));
                opt("team", s.team.clone().map(Value::from));
                opt("vars", obj(&s.vars));
                opt(
                    "var_files",
                    (!s.var_files.is_empty()).then(|| strings(&s.var_files)),
                );
                opt("instance_vars", obj(&s.instance_vars));
            }
            Action::LoadVar(s) => {
                opt("load_var", Some(s.name.clone().into()));
                opt("file", Some(s.file.clone().into()));
                opt("format", s.format.map(|f| Value::from(f.as_str())));
                opt("reveal", s.reveal.then_some(Value::Bool(true)));
            }
            Action::InParallel(p) => {
                let mut c = Map::new();
                c.insert("steps".into(), steps_value(&p.steps));
                if let Some(limit) = p.limit {
                    c.insert("limit".into(), limit.into());
                }
                if p.fail_fast {
                    c.insert("fail_fast".into(), true.into());
                }
                opt("in_parallel", Some(Value::Object(c)));
            }
            Action::Do(steps) => opt("do", Some(steps_value(steps))),
            Action::Try(s) => opt("try", Some(Value::Object(s.to_map()))),
            Action::Across(a) => {
                for (k, v) in a.step.to_map() {
                    opt(&k, Some(v));
                }
                let vars: Vec<Value> = a
                    .vars
                    .iter()
                    .map(|v| {
                        let mut o = Map::new();
                        o.insert("var".into(), v.var.clone().into());
                        let values = match &v.values_from {
                            Some(text) => Value::String(text.clone()),
                            None => Value::Array(v.values.clone()),
                        };
                        o.insert("values".into(), values);
                        if let Some(n) = v.max_in_flight {
                            o.insert("max_in_flight".into(), n.into());
                        } else {
                            o.insert("max_in_flight".into(), "all".into());
                        }
                        Value::Object(o)
                    })
                    .collect();
                opt("across", Some(Value::Array(vars)));
                opt("fail_fast", a.fail_fast.then_some(Value::Bool(true)));
            }
        }
        opt("attempts", self.attempts.map(Value::from));
        opt(
            "timeout",
            self.timeout.as_ref().map(|t| Value::from(t.text.clone())),
        );
        opt("tags", (!self.tags.is_empty()).then(|| strings(&self.tags)));
        for (key, hook) in self.hooks() {
            opt(key, hook.map(|h| Value::Object(h.to_map())));
        }
        m
    }
}

fn steps_value(steps: &[Step]) -> Value {
    Value::Array(steps.iter().map(|s| Value::Object(s.to_map())).collect())
}

/// A step is written as Concourse's `get-pipeline` writes one: a mapping
/// of its fields in sorted order, defaults left out, `in_parallel` always
/// in its `{steps, limit, fail_fast}` form.
impl Serialize for Step {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        super::serialize_entries(s, self.to_map())
    }
}
