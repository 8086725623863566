//! The steps of a job's plan, and how they are read.
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
use super::read::{kind, Reader};
use super::{GoDuration, MAX_STEPS, MAX_STEP_DEPTH};
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

/// The keys that make a step what it is, in Concourse's order of
/// precedence: when several are present, the first one wins and the others
/// are unknown fields of it.
const ACTIONS: &[&str] = &[
    "task",
    "put",
    "get",
    "set_pipeline",
    "load_var",
    "try",
    "do",
    "in_parallel",
];

const MODIFIERS: &[&str] = &[
    "attempts",
    "timeout",
    "on_success",
    "on_failure",
    "on_abort",
    "on_error",
    "ensure",
];

/// Step kinds Concourse has and hangar does not, with why.
const REFUSED: &[(&str, &str)] = &[
    (
        "across",
        "the across modifier is not supported by hangar yet; list the steps instead",
    ),
    (
        "run",
        "run steps (prototypes) are not supported by hangar, as they are experimental in Concourse",
    ),
];

fn fields_of(action: &str) -> &'static [&'static str] {
    match action {
        "get" => &[
            "get", "resource", "version", "params", "passed", "trigger", "tags",
        ],
        "put" => &[
            "put",
            "resource",
            "params",
            "inputs",
            "get_params",
            "no_get",
            "tags",
        ],
        "task" => &[
            "task",
            "config",
            "file",
            "vars",
            "params",
            "input_mapping",
            "output_mapping",
            "image",
            "container_limits",
            "privileged",
            "hermetic",
            "tags",
        ],
        "set_pipeline" => &[
            "set_pipeline",
            "file",
            "team",
            "vars",
            "var_files",
            "instance_vars",
        ],
        "load_var" => &["load_var", "file", "format", "reveal"],
        "in_parallel" => &["in_parallel", "tags"],
        "do" => &["do", "tags"],
        _ => &["try"],
    }
}

impl Reader {
    /// Reads a list of steps; `at` is the list's location, each step's is
    /// `{at}{sep}[i]`.
    pub(super) fn steps(&mut self, value: &Value, at: &str, depth: usize) -> Vec<Step> {
        let Some(items) = value.as_array() else {
            if !value.is_null() {
                self.err(at, format!("expected a list of steps, got {}", kind(value)));
            }
            return vec![];
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.step(item, &format!("{at}[{i}]"), depth))
            .collect()
    }

    pub(super) fn step(&mut self, value: &Value, at: &str, depth: usize) -> Option<Step> {
        self.step_count += 1;
        if self.step_count > MAX_STEPS {
            if self.step_count == MAX_STEPS + 1 {
                self.err(
                    at,
                    format!("the pipeline holds more than {MAX_STEPS} steps, hooks included"),
                );
            }
            return None;
        }
        if depth > MAX_STEP_DEPTH {
            self.err(
                at,
                format!("steps are nested deeper than {MAX_STEP_DEPTH} levels"),
            );
            return None;
        }
        let obj = self.object(value, at, "a step (a mapping)")?;
        for (key, why) in REFUSED {
            if obj.contains_key(*key) {
                self.err(format!("{at}.{key}"), *why);
                return None;
            }
        }
        let present: Vec<&str> = ACTIONS
            .iter()
            .copied()
            .filter(|k| obj.contains_key(*k))
            .collect();
        let Some(&action) = present.first() else {
            self.err(at, "no core step type declared (e.g. get, put, task, etc.)");
            return None;
        };
        if present.len() > 1 {
            self.err(
                at,
                format!(
                    "a step has one of get, put, task, set_pipeline, load_var, in_parallel, do, \
                     try; this one has {}. Concourse would read it as a {action} step with \
                     unknown fields {}",
                    present.join(", "),
                    quoted_list(&present[1..])
                ),
            );
            return None;
        }
        let allowed = fields_of(action);
        let mut unknown: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k) && !MODIFIERS.contains(k))
            .collect();
        unknown.sort_unstable();
        if !unknown.is_empty() {
            let unknown: Vec<String> = unknown.iter().map(|k| show(k)).collect();
            let unknown: Vec<&str> = unknown.iter().map(String::as_str).collect();
            self.err(at, format!("unknown fields {}", quoted_list(&unknown)));
        }

        let name = match action {
            "try" | "do" | "in_parallel" => String::new(),
            _ => match &obj[action] {
                Value::String(s) => s.clone(),
                other => {
                    self.err(
                        format!("{at}.{action}"),
                        format!("expected a name (a string), got {}", kind(other)),
                    );
                    return None;
                }
            },
        };
        let here = if name.is_empty() {
            format!("{at}.{action}")
        } else {
            format!("{at}.{action}({})", show(&name))
        };
        let errors_before = self.errors.len();
        let action = match action {
            "get" => Action::Get(self.get_step(obj, name, &here)),
            "put" => Action::Put(self.put_step(obj, name, &here)),
            "task" => Action::Task(self.task_step(obj, name, &here)),
            "set_pipeline" => Action::SetPipeline(SetPipelineStep {
                file: self.string(obj, "file", &here).unwrap_or_default(),
                team: self.string(obj, "team", &here),
                vars: self.map(obj, "vars", &here),
                var_files: self.strings(obj, "var_files", &here),
                instance_vars: self.map(obj, "instance_vars", &here),
                name,
            }),
            "load_var" => Action::LoadVar(LoadVarStep {
                file: self.string(obj, "file", &here).unwrap_or_default(),
                format: self.load_var_format(obj, &here),
                reveal: self.boolean(obj, "reveal", &here),
                name,
            }),
            "do" => Action::Do(self.steps(&obj["do"], &here, depth + 1)),
            "in_parallel" => Action::InParallel(self.in_parallel(&obj["in_parallel"], at, depth)),
            // A refused inner step has its error recorded, and this step is
            // dropped below; reading goes on to the hooks for their errors.
            _ => match self.step(&obj["try"], &here, depth + 1) {
                Some(inner) => Action::Try(Box::new(inner)),
                None => Action::Do(vec![]),
            },
        };
        let attempts = match obj.get("attempts") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(n) if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                Some(_) => {
                    self.err(format!("{at}.attempts"), "must be greater than 0");
                    None
                }
                None => {
                    self.err(
                        format!("{at}.attempts"),
                        format!("expected a whole number, got {}", kind(v)),
                    );
                    None
                }
            },
        };
        let timeout = match obj.get("timeout") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match GoDuration::parse(s) {
                Ok(d) => Some(d),
                Err(_) => {
                    self.err(
                        format!("{at}.timeout"),
                        format!("invalid duration '{}'", show(s)),
                    );
                    None
                }
            },
            Some(v) => {
                self.err(
                    format!("{at}.timeout"),
                    format!(
                        "expected a duration (a string like \"1h30m\"), got {}",
                        kind(v)
                    ),
                );
                None
            }
        };
        let tags = self.labels(obj, "tags", at);
        let hook = |r: &mut Reader, key: &str| {
            obj.get(key)
                .filter(|v| !v.is_null())
                .and_then(|v| r.step(v, &format!("{at}.{key}"), depth + 1))
                .map(Box::new)
        };
        let step = Step {
            attempts,
            timeout,
            tags,
            on_success: hook(self, "on_success"),
            on_failure: hook(self, "on_failure"),
            on_abort: hook(self, "on_abort"),
            on_error: hook(self, "on_error"),
            ensure: hook(self, "ensure"),
            action,
        };
        (self.errors.len() == errors_before).then_some(step)
    }

    fn in_parallel(&mut self, value: &Value, at: &str, depth: usize) -> InParallelStep {
        let here = format!("{at}.in_parallel");
        match value {
            Value::Array(_) => InParallelStep {
                steps: self.steps(value, &format!("{here}.steps"), depth + 1),
                limit: None,
                fail_fast: false,
            },
            Value::Object(obj) => {
                self.unknown_fields(obj, &["steps", "limit", "fail_fast"], &here);
                let steps = match obj.get("steps") {
                    Some(v) => self.steps(v, &format!("{here}.steps"), depth + 1),
                    None => vec![],
                };
                InParallelStep {
                    steps,
                    limit: self.count(obj, "limit", &here),
                    fail_fast: self.boolean(obj, "fail_fast", &here),
                }
            }
            other => {
                self.err(
                    &here,
                    format!(
                        "expected a list of steps or a mapping (steps, limit, fail_fast), got {}",
                        kind(other)
                    ),
                );
                InParallelStep {
                    steps: vec![],
                    limit: None,
                    fail_fast: false,
                }
            }
        }
    }

    fn get_step(&mut self, obj: &Map<String, Value>, name: String, at: &str) -> GetStep {
        let version = match obj.get("version") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "latest" => Some(GetVersion::Latest),
            Some(Value::String(s)) if s == "every" => Some(GetVersion::Every),
            Some(Value::String(s)) => {
                self.err(
                    format!("{at}.version"),
                    format!(
                        "'{}' is none of latest, every or a version (a mapping); Concourse \
                         would take it as latest",
                        show(s)
                    ),
                );
                None
            }
            Some(Value::Object(m)) => {
                self.version_values(m, &format!("{at}.version"));
                Some(GetVersion::Pinned(m.clone()))
            }
            Some(other) => {
                self.err(
                    format!("{at}.version"),
                    format!(
                        "expected latest, every or a version (a mapping), got {}",
                        kind(other)
                    ),
                );
                None
            }
        };
        GetStep {
            resource: self.string(obj, "resource", at),
            version,
            params: self.map(obj, "params", at),
            passed: self.strings(obj, "passed", at),
            trigger: self.boolean(obj, "trigger", at),
            name,
        }
    }

    fn put_step(&mut self, obj: &Map<String, Value>, name: String, at: &str) -> PutStep {
        let inputs = match obj.get("inputs") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "all" => Some(PutInputs::All),
            Some(Value::String(s)) if s == "detect" => Some(PutInputs::Detect),
            Some(Value::Array(_)) => {
                // Concourse trims each name.
                let names = self.strings(obj, "inputs", at);
                Some(PutInputs::Names(
                    names.iter().map(|n| n.trim().to_string()).collect(),
                ))
            }
            Some(other) => {
                self.err(
                    format!("{at}.inputs"),
                    format!(
                        "expected all, detect or a list of artifact names, got {}",
                        match other {
                            Value::String(s) => format!("'{}'", show(s)),
                            v => kind(v).to_string(),
                        }
                    ),
                );
                None
            }
        };
        PutStep {
            resource: self.string(obj, "resource", at),
            params: self.map(obj, "params", at),
            inputs,
            get_params: self.map(obj, "get_params", at),
            no_get: self.boolean(obj, "no_get", at),
            name,
        }
    }

    fn task_step(&mut self, obj: &Map<String, Value>, name: String, at: &str) -> TaskStep {
        if self.boolean(obj, "privileged", at) {
            self.err(
                format!("{at}.privileged"),
                "not supported: hangar runs task containers unprivileged only",
            );
        }
        if self.boolean(obj, "hermetic", at) {
            self.err(
                format!("{at}.hermetic"),
                "not supported: hangar cannot cut a task off the network yet (Concourse does \
                 so on containerd workers only, and warns otherwise)",
            );
        }
        let config = match obj.get("config") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => {
                if let Err(e) = crate::task::parse_task_value(v.clone()) {
                    let path = match e.field_path() {
                        Some(f) => format!("{at}.config.{f}"),
                        None => format!("{at}.config"),
                    };
                    self.err(path, e.message());
                }
                Some(v.clone())
            }
            Some(other) => {
                self.err(
                    format!("{at}.config"),
                    format!("expected a task config (a mapping), got {}", kind(other)),
                );
                None
            }
        };
        let container_limits = match obj.get("container_limits") {
            None | Some(Value::Null) => None,
            Some(v) => match serde_json::from_value::<ContainerLimits>(v.clone()) {
                Ok(l) => Some(l),
                Err(e) => {
                    self.err(format!("{at}.container_limits"), e.to_string());
                    None
                }
            },
        };
        TaskStep {
            config,
            file: self.string(obj, "file", at),
            vars: self.map(obj, "vars", at),
            params: self.map(obj, "params", at),
            input_mapping: self.string_map(obj, "input_mapping", at),
            output_mapping: self.string_map(obj, "output_mapping", at),
            image: self.string(obj, "image", at),
            container_limits,
            name,
        }
    }

    fn load_var_format(&mut self, obj: &Map<String, Value>, at: &str) -> Option<LoadVarFormat> {
        let text = self.string(obj, "format", at)?;
        let format = match text.as_str() {
            "json" => LoadVarFormat::Json,
            "yaml" => LoadVarFormat::Yaml,
            "yml" => LoadVarFormat::Yml,
            "trim" => LoadVarFormat::Trim,
            "raw" => LoadVarFormat::Raw,
            other => {
                self.err(
                    format!("{at}.format"),
                    format!("'{}' is not one of json, yaml, yml, trim, raw", show(other)),
                );
                return None;
            }
        };
        Some(format)
    }
}

/// `["a", "b"]`, as Go's `%+q` writes a list of strings.
pub(super) fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(" "))
}
