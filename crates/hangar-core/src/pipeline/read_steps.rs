//! Reading steps: which key makes a step what it is, which fields each
//! kind takes, and the modifiers and hooks every step may carry.

use serde_json::{Map, Value};

use super::names::show;
use super::read::{kind, Reader};
use super::steps::{
    Action, GetStep, GetVersion, InParallelStep, LoadVarFormat, LoadVarStep, PutInputs, PutStep,
    SetPipelineStep, Step, TaskStep,
};
use super::{GoDuration, MAX_STEPS, MAX_STEP_DEPTH};
use crate::task::ContainerLimits;

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
        "run",
        "run steps (prototypes) are not supported by hangar, as they are experimental in Concourse",
    ),
    (
        "aggregate",
        "aggregate was removed in Concourse v7, which refuses it too; use in_parallel",
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
        if obj.contains_key("across") {
            return self.across_step(obj, at, depth);
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
        if obj.contains_key("fail_fast") {
            self.err(
                format!("{at}.fail_fast"),
                "fail_fast on a step belongs with across (in_parallel takes its own)",
            );
        }
        let allowed = fields_of(action);
        let mut unknown: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k) && !MODIFIERS.contains(k) && *k != "fail_fast")
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
            "set_pipeline" => {
                let instance_vars = self.map(obj, "instance_vars", &here);
                if let Some(vars) = &instance_vars {
                    let checked =
                        crate::instance_vars::InstanceVars::from_value(Value::Object(vars.clone()));
                    if let Err(e) = checked {
                        self.err(format!("{here}.instance_vars"), e.to_string());
                    } else if name == crate::plan::file_steps::SET_SELF {
                        self.err(
                            format!("{here}.instance_vars"),
                            "`self` is the build's own pipeline, instance and all; drop \
                             `instance_vars`"
                                .to_string(),
                        );
                    }
                }
                Action::SetPipeline(SetPipelineStep {
                    file: self.string(obj, "file", &here).unwrap_or_default(),
                    team: self.string(obj, "team", &here),
                    vars: self.map(obj, "vars", &here),
                    var_files: self.strings(obj, "var_files", &here),
                    instance_vars,
                    name,
                })
            }
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
            privileged: self.boolean(obj, "privileged", at),
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
